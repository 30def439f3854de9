//! Approvals over HTTP (issue 49): a turn whose tool needs a person's yes pauses; an operator
//! answers with `POST /sessions/{id}/approvals/{call_id}`, the turn goes on in that request, a
//! second answer is 409 naming the first, an unknown call 404, the API token 403, and `GET
//! /operator/inspect/approvals` lists the call with its state.

use std::time::Duration;

use legio_core::AgentName;
use legio_llm::Fault;
use reqwest::StatusCode;
use serde_json::json;

use super::{Harness, OPERATOR_TOKEN, TOKEN};

const PATH: &str = "/sessions/{id}/approvals/{call_id}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_answers_a_paused_call_and_the_turn_goes_on_once() {
    let server = format!("token = \"{TOKEN}\"\noperator_token = \"{OPERATOR_TOKEN}\"");
    let h = Harness::start_config(&server, "approval = [\"get_history\"]", Duration::ZERO).await;
    let a = AgentName::new("a").unwrap();
    h.providers["stateless"].inject(
        Some(&a),
        Fault::tool_calls([("call_look_1", "get_history", "{}")]),
    );
    let posted = h.runtime.post("t:ap", "@a look back").await.unwrap();
    let paused = posted[0].outcome.as_ref().unwrap_err();
    assert_eq!(paused.kind.as_str(), "awaiting_approval", "{paused:?}");

    let url = h.url("/sessions/t:ap/approvals/call_look");
    let body = json!({"decision": "approve", "reason": "fine"});
    let (status, _) = h
        .call(
            "post",
            PATH,
            h.client.post(&url).bearer_auth(TOKEN).json(&body),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "the API token does not answer"
    );
    let (status, answer) = h
        .call(
            "post",
            PATH,
            h.client.post(&url).bearer_auth(OPERATOR_TOKEN).json(&body),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["call_id"], "call_look_1");
    assert_eq!(answer["decision"], "approved");
    assert!(answer["continued"]["content"].is_string(), "{answer}");
    assert_eq!(h.providers["stateless"].requests().len(), 2);

    let deny = json!({"decision": "deny"});
    let (status, error) = h
        .call(
            "post",
            PATH,
            h.client.post(&url).bearer_auth(OPERATOR_TOKEN).json(&deny),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{error}");
    assert_eq!(error["error"]["code"], "approval_answered");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("approved by http:"), "{message}");
    let unknown = h.url("/sessions/t:ap/approvals/nope");
    let (status, _) = h
        .call(
            "post",
            PATH,
            h.client
                .post(&unknown)
                .bearer_auth(OPERATOR_TOKEN)
                .json(&deny),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, table) = h
        .call(
            "get",
            "/operator/inspect/{what}",
            h.operator("/operator/inspect/approvals?conversation=t:ap"),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let row = &table["rows"][0];
    assert_eq!(row[2], "call_look_1");
    assert_eq!(row[5], "approved");
}
