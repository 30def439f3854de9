//! `Idempotency-Key` on the turn endpoints: a retry stores nothing new and answers the replies
//! the message had (`replayed: true` on the native API), streamed or not; the door's retry
//! checks its earlier messages against the log before the retried message. A malformed key is
//! 400, a key reused for another message 422, and neither stores anything.

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::door::{chat, user_texts};
use super::{Harness, TOKEN};

pub(crate) const TURNS: &str = "/sessions/{id}/turns";

impl Harness {
    /// POST `body` to `path` with `Idempotency-Key: key`, checked against the OpenAPI document.
    pub(crate) async fn post_keyed(
        &self,
        template: &str,
        path: &str,
        key: &str,
        body: &Value,
    ) -> (StatusCode, Value) {
        let request = self
            .client
            .post(self.url(path))
            .bearer_auth(TOKEN)
            .header("idempotency-key", key)
            .json(body);
        self.call("post", template, request).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_turn_sent_again_is_answered_from_the_log_and_stored_once() {
    let h = Harness::start().await;
    let path = "/sessions/i:1/turns";
    let body = json!({"content": "hello @a"});
    let (status, first) = h.post_keyed(TURNS, path, "k-1", &body).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["replayed"], false);
    let (status, again) = h.post_keyed(TURNS, path, "k-1", &body).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["replayed"], true, "{again}");
    assert_eq!(again["replies"], first["replies"]);
    // Streamed, the last event carries the same replies.
    let response = h
        .client
        .post(h.url(path))
        .bearer_auth(TOKEN)
        .header("idempotency-key", "k-1")
        .header("accept", "text/event-stream")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let text = response.text().await.unwrap();
    let last = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .next_back()
        .expect("events");
    let last: Value = serde_json::from_str(last).unwrap();
    assert_eq!(last["replayed"], true, "{text}");
    assert_eq!(last["replies"], first["replies"], "{text}");
    assert_eq!(user_texts(&h, "i:1"), ["hello @a"]);

    let (status, reused) = h
        .post_keyed(TURNS, path, "k-1", &json!({"content": "something else"}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{reused}");
    assert_eq!(reused["error"]["code"], "idempotency_key_reused");
    assert_eq!(reused["error"]["param"], "Idempotency-Key");
    // Two different keys name no one message; the same one twice is that key.
    let two = |second: &str| {
        h.client
            .post(h.url(path))
            .bearer_auth(TOKEN)
            .header("idempotency-key", "k-1")
            .header("idempotency-key", second)
            .json(&body)
    };
    let (status, refused) = h.call("post", TURNS, two("k-9")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(refused["error"]["code"], "invalid_idempotency_key");
    let (status, same) = h.call("post", TURNS, two("k-1")).await;
    assert_eq!(status, StatusCode::OK, "{same}");
    assert_eq!(same["replayed"], true, "{same}");
    for bad in ["two words", &"k".repeat(256)] {
        let (status, refused) = h.post_keyed(TURNS, path, bad, &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
        assert_eq!(refused["error"]["code"], "invalid_idempotency_key");
        assert_eq!(refused["error"]["param"], "Idempotency-Key");
    }
    assert_eq!(user_texts(&h, "i:1"), ["hello @a"], "nothing stored");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_doors_retry_with_its_key_gets_the_stored_answer() {
    let h = Harness::start().await;
    let url = "/v1/chat/completions";
    let (status, first) = h
        .post_json(
            url,
            url,
            &chat(
                Some("i:door"),
                "legio",
                json!([{"role": "user", "content": "hello"}]),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let reply = first["choices"][0]["message"]["content"].clone();
    let history = json!([
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": reply},
        {"role": "user", "content": "again"},
    ]);
    let request = chat(Some("i:door"), "legio", history);
    let (status, second) = h.post_keyed(url, url, "door-2", &request).await;
    assert_eq!(status, StatusCode::OK, "{second}");
    // The retry carries the same history: the log's end is now the retried message and its
    // reply, so the check reads the log before that message.
    let (status, retried) = h.post_keyed(url, url, "door-2", &request).await;
    assert_eq!(status, StatusCode::OK, "{retried}");
    assert_eq!(
        retried["choices"][0]["message"]["content"],
        second["choices"][0]["message"]["content"]
    );
    assert_eq!(
        retried["id"], second["id"],
        "the same reply, so the same completion id"
    );
    assert_ne!(first["id"], second["id"], "another reply, another id");
    assert_eq!(agent_replies(&h, "i:door"), 2, "no new reply for the retry");
    // The same key for the same text to another agent (another model) is another message.
    let elsewhere = chat(Some("i:door"), "legio/a", request["messages"].clone());
    let (status, refused) = h.post_keyed(url, url, "door-2", &elsewhere).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert_eq!(refused["error"]["code"], "idempotency_key_reused");
    let responses = "/v1/responses";
    let asked = json!({"model": "legio", "input": "third", "metadata": {"conversation": "i:door"}});
    let (status, third) = h.post_keyed(responses, responses, "door-3", &asked).await;
    assert_eq!(status, StatusCode::OK, "{third}");
    let (status, again) = h.post_keyed(responses, responses, "door-3", &asked).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["output"], third["output"]);
    assert_eq!(
        again["id"], third["id"],
        "the same reply, so the same response id"
    );
    assert_eq!(user_texts(&h, "i:door"), ["hello", "again", "third"]);
    h.stop().await;
}

/// The agents' messages in a conversation.
fn agent_replies(h: &Harness, key: &str) -> usize {
    let key = legio_core::ConversationKey::new(key).unwrap();
    super::messages_of(h.runtime.log().as_ref(), &key)
        .iter()
        .filter_map(|r| r.event.as_message())
        .filter(|m| m.sender != legio_core::Participant::User)
        .count()
}

/// A door retry of a message whose agent failed and then answered a later one is 409
/// `message_unanswered` (which the SDKs do not retry), not a new model call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_doors_retry_of_a_message_its_agent_went_on_from_is_409() {
    let h = Harness::start().await;
    let url = "/v1/chat/completions";
    let a = legio_core::AgentName::new("a").unwrap();
    h.providers["stateless"].inject(Some(&a), legio_llm::Fault::Error("overloaded".into()));
    let first = chat(
        Some("i:gone"),
        "legio/a",
        json!([{"role": "user", "content": "first"}]),
    );
    let (status, failed) = h.post_keyed(url, url, "gone-1", &first).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{failed}");
    let later = chat(
        Some("i:gone"),
        "legio/a",
        json!([{"role": "user", "content": "later"}]),
    );
    let (status, answered) = h.post_keyed(url, url, "gone-2", &later).await;
    assert_eq!(status, StatusCode::OK, "{answered}");
    let (status, refused) = h.post_keyed(url, url, "gone-1", &first).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert_eq!(refused["error"]["code"], "message_unanswered");
    assert_eq!(
        agent_replies(&h, "i:gone"),
        1,
        "only the later message's reply"
    );
    h.stop().await;
}

/// A keyed turn that paused on a tool the host runs, its `requires_action` lost: the retry takes
/// the paused turn over and answers the same `requires_action` at once (not after the calls time
/// out); the results then finish the turn, streamed to whoever posts them. The call, its result
/// and the message are in the log once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_retry_of_a_paused_turn_is_shown_its_calls_again() {
    let h = Harness::start().await;
    let a = legio_core::AgentName::new("a").unwrap();
    h.providers["stateless"].inject(
        Some(&a),
        legio_llm::Fault::tool_calls([("call-1", "lookup", r#"{"q":"x"}"#)]),
    );
    let lookup = json!({"name": "lookup", "description": "finds", "parameters": {"type": "object", "properties": {}}});
    let path = "/sessions/i:paused/turns";
    let body = json!({"content": "@a look it up", "tools": [lookup]});
    let (status, paused) = h.post_keyed(TURNS, path, "p-1", &body).await;
    assert_eq!(status, StatusCode::OK, "{paused}");
    assert_eq!(paused["status"], "requires_action", "{paused}");
    let started = std::time::Instant::now();
    let (status, again) = h.post_keyed(TURNS, path, "p-1", &body).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["status"], "requires_action", "{again}");
    assert_eq!(
        again["required_action"]["tool_calls"][0]["id"], "call-1",
        "{again}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    let results = "/sessions/i:paused/tool_results";
    let answer = json!({"tool_results": [{"tool_call_id": "call-1", "content": "the fact"}]});
    let events = h.post_stream(results, &answer, true).await;
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(names.last(), Some(&"replies"), "{events:?}");
    // The results were stored: their answer is no replay, though the turn was a retry's.
    let replies: Value = serde_json::from_str(&events.last().unwrap().1).unwrap();
    assert_eq!(replies["replayed"], false, "{replies}");
    assert!(
        names.contains(&"agent_done"),
        "the turn's progress reaches the results' stream: {names:?}"
    );
    let (calls, results, linked) = super::door::tool_traffic(&h, "i:paused");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(linked);
    assert_eq!(user_texts(&h, "i:paused"), ["@a look it up"]);
    h.stop().await;
}

/// A host that keeps one key per user message through its tool loop sends the tool results with
/// the full history and the message's key: the results post no message, so the key names none,
/// and the history is checked against the whole log (it was cut at the keyed message: 409
/// `history_mismatch`, "holds 0").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_doors_tool_results_sent_with_the_messages_key_finish_the_turn() {
    let h = Harness::start().await;
    let a = legio_core::AgentName::new("a").unwrap();
    h.providers["stateless"].inject(
        Some(&a),
        legio_llm::Fault::tool_calls([("k-call", "lookup", "{}")]),
    );
    let url = "/v1/chat/completions";
    let asked = json!({"role": "user", "content": "look it up"});
    let mut request = chat(Some("i:loop"), "legio/a", json!([asked]));
    request["tools"] = json!([{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]);
    let (status, paused) = h.post_keyed(url, url, "loop-1", &request).await;
    assert_eq!(status, StatusCode::OK, "{paused}");
    let call = paused["choices"][0]["message"]["tool_calls"][0].clone();
    assert_eq!(call["id"], "k-call", "{paused}");
    request["messages"] = json!([
        asked,
        {"role": "assistant", "content": null, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "k-call", "content": "the fact"},
    ]);
    let (status, answered) = h.post_keyed(url, url, "loop-1", &request).await;
    assert_eq!(status, StatusCode::OK, "{answered}");
    assert_eq!(
        answered["choices"][0]["finish_reason"], "stop",
        "{answered}"
    );
    let (_, results, linked) = super::door::tool_traffic(&h, "i:loop");
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(linked);
    assert_eq!(user_texts(&h, "i:loop"), ["look it up"]);
    h.stop().await;
}
