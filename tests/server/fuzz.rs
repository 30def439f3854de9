//! Fuzzing HTTP input (issue 16): arbitrary bytes, mutated valid bodies, odd content types and
//! odd query strings, sent in process to the real router (`Server::router`, tower's `oneshot`)
//! over a real runtime and log. Every answer is a status below 500 with a JSON error body for
//! every 4xx; nothing panics. `LEGIO_FUZZ_CASES` sets the cases (256 by default).

use std::net::SocketAddr;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use legio_runtime::Runtime;
use legio_server::{install_metrics, Server};
use proptest::prelude::*;
use tower::ServiceExt;

use super::write_config;

fn cases() -> u32 {
    std::env::var("LEGIO_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

/// Bodies: valid ones with bytes changed, arbitrary bytes, arbitrary JSON-ish text.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let valid: Vec<&'static [u8]> = vec![
        br#"{"content": "hello @a and @all"}"#,
        br#"{"content": "hi", "sender": "a"}"#,
        br#"{"conversation": "t:f", "agent": "lead"}"#,
    ];
    let whole = valid.clone();
    prop_oneof![
        // Whole valid bodies (twice the weight), so that turns are really stored too.
        2 => (0..whole.len()).prop_map(move |i| whole[i].to_vec()),
        1 => (
            0..valid.len(),
            prop::collection::vec((any::<usize>(), any::<u8>()), 1..6)
        )
            .prop_map(move |(i, edits)| {
                let mut bytes = valid[i].to_vec();
                for (at, byte) in edits {
                    let at = at % bytes.len();
                    bytes[at] = byte;
                }
                bytes
            }),
        1 => prop::collection::vec(any::<u8>(), 0..256),
        1 => "\\PC{0,64}".prop_map(|s| format!("{{\"content\": {s}}}").into_bytes()),
    ]
}

/// A path and its query, percent-encoding whatever is not URI-safe.
fn target() -> impl Strategy<Value = (&'static str, String)> {
    let escaped = "\\PC{0,24}".prop_map(|s| {
        s.bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"-._~:@".contains(&b) {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect::<String>()
    });
    (
        prop_oneof![
            1 => Just(("POST", "/sessions/{x}/turns")),
            3 => Just(("POST", "/sessions/t:fuzz/turns")),
            1 => Just(("POST", "/operator/reset")),
            1 => Just(("GET", "/sessions/{x}/history?{x}")),
            1 => Just(("GET", "/sessions/t:f/history?view={x}&agent={x}&limit={x}")),
            1 => Just(("GET", "/operator/events?from={x}&to={x}&conversation={x}")),
            1 => Just(("GET", "/operator/context?conversation={x}&agent={x}&at={x}")),
            1 => Just(("GET", "/operator/inspect/{x}")),
        ],
        escaped,
    )
        .prop_map(|((method, template), x)| (method, template.replace("{x}", &x)))
}

#[test]
fn http_input_never_panics_nor_answers_5xx() {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let router = tokio.block_on(async {
        let config = write_config(dir.path(), "body_limit_bytes = 4096", "history_window = 4");
        let settings = legio_server::ServerSettings::from_config(&config).unwrap();
        let runtime = Runtime::open(config).await.unwrap();
        let bind: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let server = Server::bind(runtime, settings, Some(bind), install_metrics().unwrap())
            .await
            .unwrap();
        server.router()
    });
    let config = ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let content_types = [
        "application/json",
        "text/plain",
        "application/json; charset=utf-8",
        "",
    ];
    let statuses = std::sync::Mutex::new(std::collections::BTreeMap::<u16, usize>::new());
    proptest!(config, |((method, path) in target(), body in body(), ct in 0..content_types.len())| {
        let mut request = Request::builder().method(method).uri(&path);
        if !content_types[ct].is_empty() {
            request = request.header("content-type", content_types[ct]);
        }
        let request = request.body(Body::from(body.clone())).unwrap();
        let (status, answer) = tokio.block_on(async {
            let response = router.clone().oneshot(request).await.unwrap();
            let status = response.status();
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            (status, bytes)
        });
        *statuses.lock().unwrap().entry(status.as_u16()).or_default() += 1;
        prop_assert!(
            status.as_u16() < 500 || status == StatusCode::SERVICE_UNAVAILABLE,
            "{method} {path} {:?} -> {status}: {}",
            String::from_utf8_lossy(&body),
            String::from_utf8_lossy(&answer)
        );
        if status.is_client_error() {
            let error: serde_json::Value = serde_json::from_slice(&answer)
                .map_err(|e| TestCaseError::fail(format!("{path}: {status} without JSON: {e}")))?;
            prop_assert!(error["error"]["code"].is_string(), "{error}");
        }
    });
    let statuses = statuses.into_inner().unwrap();
    println!("answers by status: {statuses:?}");
    // The inputs reach the handlers' validation, not only the router's (turns are stored too:
    // a few in every 256 cases, printed above).
    assert!(statuses.contains_key(&422), "{statuses:?}");
}
