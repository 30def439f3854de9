//! `proto/openapi.yaml` as a checker: every response the tests get must be documented for its
//! operation and status, with a documented content type, and a JSON body must validate against
//! the documented schema (OpenAPI 3.1 schemas are JSON Schema 2020-12; `$ref`s resolve inside a
//! document that carries the components).

use serde_json::{json, Value};

pub struct OpenApi {
    doc: Value,
}

impl OpenApi {
    pub fn load() -> Self {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../proto/openapi.yaml");
        let text = std::fs::read_to_string(path).unwrap();
        let doc: Value = serde_yaml::from_str(&text).unwrap();
        assert_eq!(doc["openapi"], "3.1.0");
        Self { doc }
    }

    /// Every documented (method, path).
    pub fn operations(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (path, item) in self.doc["paths"].as_object().unwrap() {
            for method in item.as_object().unwrap().keys() {
                out.push((method.clone(), path.clone()));
            }
        }
        out
    }

    fn resolve<'a>(&'a self, value: &'a Value) -> &'a Value {
        match value.get("$ref").and_then(Value::as_str) {
            Some(reference) => {
                let pointer = reference.trim_start_matches('#');
                self.doc
                    .pointer(pointer)
                    .unwrap_or_else(|| panic!("dangling {reference}"))
            }
            None => value,
        }
    }

    /// Validates `body` against `schema` (which may `$ref` the components).
    fn validate(&self, schema: &Value, body: &Value, what: &str) {
        let mut document = schema.clone();
        if let Some(object) = document.as_object_mut() {
            object.insert("components".into(), self.doc["components"].clone());
        } else {
            document = json!({"allOf": [schema], "components": self.doc["components"]});
        }
        let validator = jsonschema::validator_for(&document)
            .unwrap_or_else(|e| panic!("{what}: the schema does not compile: {e}"));
        let errors: Vec<String> = validator
            .iter_errors(body)
            .map(|e| format!("{e} at {}", e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{what}: {errors:?}\nbody: {body}");
    }

    /// Validates `body` against the component schema `name`.
    pub fn check_schema(&self, name: &str, body: &Value) {
        self.validate(
            &json!({"$ref": format!("#/components/schemas/{name}")}),
            body,
            name,
        );
    }

    /// Checks one response against the document.
    pub fn check(&self, method: &str, path: &str, status: u16, content_type: &str, body: &Value) {
        let what = format!("{} {path} -> {status}", method.to_uppercase());
        let operation = &self.doc["paths"][path][method];
        if operation.is_null() {
            assert!(
                status == 404 || status == 405,
                "{what}: undocumented operation answered {status}"
            );
            self.check_schema("Error", body);
            return;
        }
        let response = &operation["responses"][status.to_string()];
        assert!(!response.is_null(), "{what}: status not documented");
        let response = self.resolve(response);
        let Some(content) = response.get("content").and_then(Value::as_object) else {
            return;
        };
        let media = content_type.split(';').next().unwrap_or("").trim();
        let Some(entry) = content.get(media) else {
            panic!(
                "{what}: content type {media:?} not documented ({:?})",
                content.keys().collect::<Vec<_>>()
            );
        };
        if media == "application/json" {
            self.validate(&entry["schema"], body, &what);
        }
    }
}
