//! Progress a person can follow (issue 14.5): a streamed turn reports each tool call the model
//! makes (`tool_call`, name and arguments) and how it ended (`tool_done`, `tool_failed` with the
//! error), in order, before the agent's `agent_done`; each event matches its schema in
//! `proto/openapi.yaml`.

use legio_core::AgentName;
use legio_llm::Fault;
use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{parse_sse, Harness, TOKEN};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_turn_reports_tool_calls_and_how_they_ended() {
    let h = Harness::start().await;
    // `a` (stateless provider) calls a tool that exists and one that does not, then answers.
    h.providers["stateless"].inject(
        Some(&AgentName::new("a").unwrap()),
        Fault::tool_calls([
            ("call_1", "get_history", "{\"limit\":2}"),
            ("call_2", "no_such_tool", "{}"),
        ]),
    );
    let response = h
        .client
        .post(h.url("/sessions/t:tools/turns"))
        .bearer_auth(TOKEN)
        .header("accept", "text/event-stream")
        .json(&json!({"content": "@a look it up"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let events = parse_sse(&response.text().await.unwrap());
    let mine: Vec<(&str, &Value)> = events
        .iter()
        .filter(|(_, d)| d["agent"] == "a")
        .map(|(k, d)| (k.as_str(), d))
        .collect();
    let kinds: Vec<&str> = mine
        .iter()
        .map(|(k, _)| *k)
        .filter(|k| *k != "delta")
        .collect();
    assert_eq!(
        kinds,
        [
            "agent_started",
            "tool_call",
            "tool_call",
            "tool_done",
            "tool_failed",
            "agent_done"
        ],
        "{events:?}"
    );
    let of = |kind: &str| -> Vec<&Value> {
        mine.iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, d)| *d)
            .collect()
    };
    let called = of("tool_call");
    assert_eq!(
        (
            &called[0]["id"],
            &called[0]["name"],
            &called[0]["arguments"]
        ),
        (
            &json!("call_1"),
            &json!("get_history"),
            &json!("{\"limit\":2}")
        )
    );
    assert_eq!(called[1]["name"], "no_such_tool");
    assert_eq!(of("tool_done")[0]["id"], "call_1");
    let failed = of("tool_failed")[0];
    assert_eq!(failed["id"], "call_2");
    assert!(
        failed["error"]
            .as_str()
            .is_some_and(|e| e.contains("no_such_tool")),
        "{failed}"
    );
    for (kind, schema) in [
        ("tool_call", "ToolCallProgress"),
        ("tool_done", "ToolDoneProgress"),
        ("tool_failed", "ToolFailedProgress"),
    ] {
        for data in of(kind) {
            h.api.check_schema(schema, data);
        }
    }
    let done = of("agent_done")[0];
    assert!(
        done["error"].is_null() && done["content"].is_string(),
        "{done}"
    );
    h.stop().await;
}
