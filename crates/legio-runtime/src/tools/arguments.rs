//! A tool's arguments as one Rust type: schemars describes the type to the model and serde reads
//! a call into it, so what a model is offered and what its call is held to come from one place.
//!
//! The type derives `JsonSchema` and `Deserialize` with `deny_unknown_fields`; its doc comment is
//! the tool's description and its fields' doc comments the arguments' descriptions. [`offered`]
//! is the schema in the plain shape models have always been given (no `$schema`, `title` or
//! integer `format`, and an optional argument typed as itself, not as "or null").
//! [`read`] reads a call's arguments (a JSON object, or null for none); serde does the checking
//! and its findings are told in words a model can act on: the unexpected argument and the
//! arguments there are, the missing one, or the one of the wrong type and what it must be.

use schemars::generate::SchemaSettings;
use schemars::JsonSchema;
use serde::de::value::MapDeserializer;
use serde::de::{self, DeserializeOwned, Deserializer, IntoDeserializer, Visitor};
use serde_json::{json, Map, Value};
use thiserror::Error;

/// The tool description (the doc comment of `A`) and the JSON schema of its arguments.
pub(crate) fn offered<A: JsonSchema>() -> (String, Value) {
    let mut schema = SchemaSettings::draft2020_12()
        .with(|s| {
            s.meta_schema = None;
            s.inline_subschemas = true;
        })
        .into_generator()
        .into_root_schema_for::<A>()
        .to_value();
    let Some(top) = schema.as_object_mut() else {
        return (String::new(), schema);
    };
    top.remove("title");
    let description = match top.remove("description") {
        Some(Value::String(text)) => text,
        _ => String::new(),
    };
    top.entry("required").or_insert_with(|| json!([]));
    let properties = top.entry("properties").or_insert_with(|| json!({}));
    if let Value::Object(properties) = properties {
        properties
            .values_mut()
            .filter_map(Value::as_object_mut)
            .for_each(plain);
    }
    (description, schema)
}

/// An argument's schema as models are offered it. The width of a Rust integer (`"format":
/// "uint64"`) is nothing a model needs; `Option<T>` reads as `[T, "null"]`, but an optional
/// argument is one left out (a null is taken as that, never asked for), so it is typed as `T`.
fn plain(property: &mut Map<String, Value>) {
    property.remove("format");
    let single = match property.get_mut("type") {
        Some(Value::Array(types)) => {
            types.retain(|t| t != "null");
            (types.len() == 1).then(|| types.remove(0))
        }
        _ => None,
    };
    if let Some(kind) = single {
        property.insert("type".into(), kind);
    }
}

/// A call's `arguments` read into `A`, or why they do not fit it.
pub(crate) fn read<A: DeserializeOwned + JsonSchema>(arguments: Value) -> Result<A, String> {
    let map = match arguments {
        Value::Null => Map::new(),
        Value::Object(map) => map,
        other => return Err(format!("expected a JSON object, got {other}")),
    };
    let arguments = map
        .into_iter()
        .map(|(name, value)| (name.clone(), Argument { name, value }));
    A::deserialize(MapDeserializer::new(arguments)).map_err(|misfit| match &misfit {
        Misfit::Mistyped { name, given, .. } => match must_be::<A>(name) {
            Some(wanted) => format!("argument {name:?} must be {wanted}, got {given}"),
            None => misfit.to_string(),
        },
        _ => misfit.to_string(),
    })
}

/// What the argument `name` of `A` must be, in the words of the schema the model was offered:
/// `a string`, `an integer from 1`, `true or false`.
fn must_be<A: JsonSchema>(name: &str) -> Option<String> {
    let (_, schema) = offered::<A>();
    let property = &schema["properties"][name];
    Some(match property["type"].as_str()? {
        "boolean" => "true or false".to_owned(),
        "integer" => format!("an integer from {}", property["minimum"].as_u64()?),
        kind => format!("a {kind}"),
    })
}

/// How a call's arguments did not fit, as serde found it (the error it reads them with).
#[derive(Debug, Error)]
enum Misfit {
    /// An argument the type has no field for.
    #[error("unexpected argument {name:?}; arguments: {}", listed(known))]
    Unknown {
        name: String,
        known: &'static [&'static str],
    },
    /// A required argument left out or given as null.
    #[error("missing argument {name:?}")]
    Missing { name: String },
    /// An argument whose value its field does not take.
    #[error("argument {name:?}, {given}: {reason}")]
    Mistyped {
        name: String,
        given: Value,
        reason: String,
    },
    /// Anything else serde says.
    #[error("{0}")]
    Other(String),
}

fn listed(known: &[&str]) -> String {
    if known.is_empty() {
        "none".to_owned()
    } else {
        known.join(", ")
    }
}

impl de::Error for Misfit {
    fn custom<T: std::fmt::Display>(message: T) -> Self {
        Self::Other(message.to_string())
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        Self::Unknown {
            name: field.to_owned(),
            known: expected,
        }
    }

    fn missing_field(field: &'static str) -> Self {
        Self::Missing {
            name: field.to_owned(),
        }
    }
}

/// One argument's value as serde reads it into its field, keeping the name for the error.
struct Argument {
    name: String,
    value: Value,
}

impl<'de> IntoDeserializer<'de, Misfit> for Argument {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

impl<'de> Deserializer<'de> for Argument {
    type Error = Misfit;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Misfit> {
        if self.value.is_null() {
            return Err(Misfit::Missing { name: self.name });
        }
        self.value
            .clone()
            .deserialize_any(visitor)
            .map_err(|e| Misfit::Mistyped {
                name: self.name,
                given: self.value,
                reason: e.to_string(),
            })
    }

    /// A null given for an optional argument is as if it were left out.
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Misfit> {
        if self.value.is_null() {
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit
        unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier ignored_any
    }
}
