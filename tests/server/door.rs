//! The OpenAI-compatible front door (`/v1/...`), tools the host runs (native and through the
//! door) and the history views of seed 002, against a real server with scripted providers. The
//! official `openai` Python SDK drives the same server in `sdk.rs`.

use std::time::{Duration, Instant};

use legio_core::{ConversationKey, Event, Part, Participant};
use legio_llm::Fault;
use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{messages_of, Harness, OPERATOR_TOKEN, TOKEN};

impl Harness {
    /// A POST with the API token, checked against the OpenAPI document.
    pub(crate) async fn post_json(
        &self,
        template: &str,
        path: &str,
        body: &Value,
    ) -> (StatusCode, Value) {
        let request = self
            .client
            .post(self.url(path))
            .bearer_auth(TOKEN)
            .json(body);
        self.call("post", template, request).await
    }

    /// A streamed POST: the `data:` payloads of the server-sent events, in order.
    pub(crate) async fn post_stream(
        &self,
        path: &str,
        body: &Value,
        headers: bool,
    ) -> Vec<(String, String)> {
        let mut request = self
            .client
            .post(self.url(path))
            .bearer_auth(TOKEN)
            .json(body);
        if headers {
            request = request.header("accept", "text/event-stream");
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let text = response.text().await.unwrap();
        let mut events = Vec::new();
        let mut name = String::from("message");
        for line in text.lines() {
            if let Some(n) = line.strip_prefix("event: ") {
                name = n.to_owned();
            } else if let Some(data) = line.strip_prefix("data: ") {
                events.push((
                    std::mem::replace(&mut name, "message".into()),
                    data.to_owned(),
                ));
            }
        }
        events
    }
}

/// The error body has OpenAI's shape, with this code and param.
fn assert_openai_error(body: &Value, code: &str, param: Option<&str>) {
    let error = &body["error"];
    assert!(error["message"].is_string(), "{body}");
    assert!(error["type"].is_string(), "{body}");
    assert_eq!(error["code"], code, "{body}");
    assert_eq!(error["param"].as_str(), param, "{body}");
}

pub(crate) fn user_texts(h: &Harness, key: &str) -> Vec<String> {
    let key = ConversationKey::new(key).unwrap();
    messages_of(h.runtime.log().as_ref(), &key)
        .iter()
        .filter_map(|r| r.event.as_message())
        .filter(|m| m.sender == Participant::User)
        .map(|m| m.text_content())
        .collect()
}

pub(crate) fn chat(conversation: Option<&str>, model: &str, messages: Value) -> Value {
    let mut body = json!({"model": model, "messages": messages});
    if let Some(c) = conversation {
        body["metadata"] = json!({"conversation": c});
    }
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_completions_store_only_the_new_message_and_check_the_rest() {
    let h = Harness::start().await;
    let url = "/v1/chat/completions";
    let (status, first) = h
        .post_json(
            url,
            url,
            &chat(
                Some("d:chat"),
                "legio",
                json!([{"role": "system", "content": "ignored"}, {"role": "user", "content": "hello"}]),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["object"], "chat.completion");
    assert_eq!(first["choices"][0]["finish_reason"], "stop");
    let reply = first["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(reply.starts_with("lead read"), "{reply}");
    assert!(first["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    // The whole history again, with the new message: only the new one is stored.
    let history = json!([
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": reply},
        {"role": "user", "content": [{"type": "text", "text": "again"}]},
    ]);
    let (status, second) = h
        .post_json(url, url, &chat(Some("d:chat"), "legio/a", history))
        .await;
    assert_eq!(status, StatusCode::OK, "{second}");
    assert!(second["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .starts_with("a read"));
    assert_eq!(user_texts(&h, "d:chat"), ["hello", "again"]);
    // A history that differs from the log: 409, naming where, and nothing stored.
    let wrong = json!([
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "something else"},
        {"role": "user", "content": "third"},
    ]);
    let (status, body) = h
        .post_json(url, url, &chat(Some("d:chat"), "legio", wrong))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_openai_error(&body, "history_mismatch", Some("messages"));
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("messages[0]"),
        "{body}"
    );
    assert_eq!(user_texts(&h, "d:chat"), ["hello", "again"]);
    // Errors: no conversation, an unknown model, no user message last.
    let (status, body) = h
        .post_json(
            url,
            url,
            &chat(None, "legio", json!([{"role": "user", "content": "x"}])),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_openai_error(&body, "missing_field", Some("metadata.conversation"));
    let (status, body) = h
        .post_json(
            url,
            url,
            &chat(
                Some("d:e"),
                "gpt-4o",
                json!([{"role": "user", "content": "x"}]),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_openai_error(&body, "unknown_model", Some("model"));
    let (status, body) = h
        .post_json(
            url,
            url,
            &chat(
                Some("d:e"),
                "legio",
                json!([{"role": "assistant", "content": "x"}]),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_openai_error(&body, "bad_request", Some("messages"));
    assert!(user_texts(&h, "d:e").is_empty());
    // Streamed: chunks in OpenAI's shape, the text whole, then [DONE].
    let mut body = chat(
        Some("d:chat"),
        "legio",
        json!([{"role": "user", "content": "stream it"}]),
    );
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let events = h.post_stream(url, &body, false).await;
    assert_eq!(events.last().unwrap().1, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    let finish: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["finish_reason"].as_str())
        .collect();
    assert_eq!(finish, ["stop"]);
    assert!(
        chunks.last().unwrap()["usage"]["total_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    let key = ConversationKey::new("d:chat").unwrap();
    let last_reply = messages_of(h.runtime.log().as_ref(), &key)
        .last()
        .and_then(|r| r.event.as_message().map(|m| m.text_content()))
        .unwrap();
    assert_eq!(text, last_reply, "the deltas are the stored reply");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_map_previous_response_id_to_the_log_and_models_list_agents() {
    let h = Harness::start().await;
    let url = "/v1/responses";
    let (status, first) = h
        .post_json(
            url,
            url,
            &json!({"model": "legio/b", "input": "hi", "metadata": {"conversation": "d:resp"}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let id = first["id"].as_str().unwrap().to_owned();
    let text = first["output"][0]["content"][0]["text"].as_str().unwrap();
    let key = ConversationKey::new("d:resp").unwrap();
    let records = messages_of(h.runtime.log().as_ref(), &key);
    let reply = records.last().unwrap();
    assert_eq!(id, format!("resp_{}_{}", hex("d:resp"), reply.seq.get()));
    assert_eq!(reply.event.as_message().unwrap().text_content(), text);
    // The previous response names the conversation: no metadata needed; streamed this time.
    let events = h
        .post_stream(
            url,
            &json!({"model": "legio/b", "input": [{"role": "user", "content": [{"type": "input_text", "text": "more"}]}],
                "previous_response_id": id, "stream": true}),
            false,
        )
        .await;
    let done = assert_in_openai_order(&events);
    let streamed: String = events
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, d)| {
            serde_json::from_str::<Value>(d).unwrap()["delta"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(
        streamed,
        done["response"]["output"][0]["content"][0]["text"]
            .as_str()
            .unwrap()
    );
    assert_eq!(done["response"]["previous_response_id"], id.as_str());
    assert_eq!(user_texts(&h, "d:resp"), ["hi", "more"]);
    for (previous, code) in [
        ("resp_zz_1", "unknown_response"),
        (
            &format!("resp_{}_999999", hex("d:resp")),
            "unknown_response",
        ),
        // A conversation the log does not have (it would have been made).
        (&format!("resp_{}_1", hex("d:ghost")), "unknown_response"),
    ] {
        let (status, body) = h
            .post_json(
                url,
                url,
                &json!({"model": "legio", "input": "x", "previous_response_id": previous}),
            )
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        assert_openai_error(&body, code, Some("previous_response_id"));
    }
    let (status, models) = h.call("get", "/v1/models", h.get("/v1/models")).await;
    assert_eq!(status, StatusCode::OK);
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["legio", "legio/lead", "legio/a", "legio/b"]);
    let (status, _) = h
        .call("get", "/v1/models/{model}", h.get("/v1/models/legio/a"))
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = h
        .call("get", "/v1/models/{model}", h.get("/v1/models/legio/zed"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_openai_error(&body, "unknown_model", Some("model"));
    let (status, body) = h
        .call(
            "post",
            url,
            h.client
                .post(h.url(url))
                .json(&json!({"model": "legio", "input": "x"})),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "the same token");
    assert_eq!(body["error"]["type"], "authentication_error");
    h.stop().await;
}

fn hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

/// A conversation's tool traffic: the calls (call id, name), the results (call id, content,
/// is_error), and whether every results message replies to its calls' message.
pub(crate) type Traffic = (Vec<(String, String)>, Vec<(String, String, bool)>, bool);

/// The tool calls and results of a conversation's log.
pub(crate) fn tool_traffic(h: &Harness, key: &str) -> Traffic {
    let key = ConversationKey::new(key).unwrap();
    let messages: Vec<_> = messages_of(h.runtime.log().as_ref(), &key)
        .into_iter()
        .filter_map(|r| r.event.as_message().cloned())
        .collect();
    let (mut calls, mut results, mut linked) = (Vec::new(), Vec::new(), true);
    for m in &messages {
        for part in &m.parts {
            match part {
                Part::ToolCall { id, name, .. } => calls.push((id.clone(), name.clone())),
                Part::ToolResult {
                    call_id,
                    content,
                    is_error,
                } => {
                    results.push((call_id.clone(), content.clone(), *is_error));
                    let call_message = messages.iter().find(|c| {
                        c.parts
                            .iter()
                            .any(|p| matches!(p, Part::ToolCall { id, .. } if id == call_id))
                    });
                    linked &= call_message.is_some_and(|c| m.reply_to == Some(c.id));
                }
                Part::Text { .. } => {}
            }
        }
    }
    (calls, results, linked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_tool_pauses_the_turn_until_the_host_posts_its_result() {
    let h = Harness::start().await;
    let lookup = json!({"name": "lookup", "description": "finds a fact", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}});
    let (status, declared) = h
        .post_json(
            "/sessions/{id}/tools",
            "/sessions/d:tools/tools",
            &json!({"tools": [lookup]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{declared}");
    let (status, bad) = h
        .post_json(
            "/sessions/{id}/tools",
            "/sessions/d:tools/tools",
            &json!({"tools": [{"name": "get_history"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "a built-in's name: {bad}");
    assert_openai_error(&bad, "invalid_tool", None);
    let agent_a = legio_core::AgentName::new("a").unwrap();
    h.providers["stateless"].inject(
        Some(&agent_a),
        Fault::tool_calls([("call-1", "lookup", r#"{"q":"x"}"#)]),
    );
    let (status, paused) = h
        .post_json(
            "/sessions/{id}/turns",
            "/sessions/d:tools/turns",
            &json!({"content": "@a look it up"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{paused}");
    assert_eq!(paused["status"], "requires_action");
    let calls = &paused["required_action"]["tool_calls"];
    assert_eq!(
        (
            calls[0]["id"].as_str(),
            calls[0]["name"].as_str(),
            calls[0]["agent"].as_str()
        ),
        (Some("call-1"), Some("lookup"), Some("a"))
    );
    assert_eq!(calls[0]["arguments"], r#"{"q":"x"}"#);
    let offered = h.providers["stateless"]
        .requests()
        .last()
        .unwrap()
        .tool_names()
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>();
    assert!(offered.contains(&"lookup".to_owned()), "{offered:?}");
    // A result for a call nobody waits for is refused; the right one continues the turn.
    let (status, body) = h
        .post_json(
            "/sessions/{id}/tool_results",
            "/sessions/d:tools/tool_results",
            &json!({"tool_results": [{"tool_call_id": "nope", "content": "x"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_openai_error(&body, "no_pending_tool_call", None);
    let (status, done) = h
        .post_json(
            "/sessions/{id}/tool_results",
            "/sessions/d:tools/tool_results",
            &json!({"tool_results": [{"tool_call_id": "call-1", "content": "the fact"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert!(
        done["replies"][0]["content"]
            .as_str()
            .unwrap()
            .starts_with("a read"),
        "{done}"
    );
    let (calls, results, linked) = tool_traffic(&h, "d:tools");
    assert_eq!(calls, [("call-1".to_owned(), "lookup".to_owned())]);
    assert_eq!(
        results,
        [("call-1".to_owned(), "the fact".to_owned(), false)]
    );
    assert!(linked, "the results message replies to the calls message");
    // Streamed: the stream ends with requires_action; the results stream the rest.
    h.providers["stateless"].inject(
        Some(&agent_a),
        Fault::tool_calls([("call-2", "lookup", "{}")]),
    );
    let events = h
        .post_stream(
            "/sessions/d:tools/turns",
            &json!({"content": "@a again"}),
            true,
        )
        .await;
    assert_eq!(events.last().unwrap().0, "requires_action", "{events:?}");
    let events = h
        .post_stream("/sessions/d:tools/tool_results", &json!({"tool_results": [{"tool_call_id": "call-2", "content": "err", "is_error": true}]}), true)
        .await;
    assert_eq!(events.last().unwrap().0, "replies", "{events:?}");
    let (_, results, _) = tool_traffic(&h, "d:tools");
    assert_eq!(results[1], ("call-2".to_owned(), "err".to_owned(), true));
    h.stop().await;
}

/// Two requests carrying the same results at once, five times: however they interleave (both
/// find the run parked and race for the calls, or one comes after the other took them), one
/// answers the replies and the other is refused (409); each result is in the log once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_requests_with_the_same_results_one_follows_the_turn() {
    let h = Harness::start().await;
    let lookup = json!({"name": "lookup", "parameters": {"type": "object", "properties": {}}});
    let agent_a = legio_core::AgentName::new("a").unwrap();
    let results = "/sessions/d:race/tool_results";
    for round in 1..=5 {
        let id = format!("race-{round}");
        h.providers["stateless"].inject(
            Some(&agent_a),
            Fault::tool_calls([(id.as_str(), "lookup", "{}")]),
        );
        let (status, paused) = h
            .post_json(
                "/sessions/{id}/turns",
                "/sessions/d:race/turns",
                &json!({"content": "@a look it up", "tools": [lookup]}),
            )
            .await;
        assert_eq!(paused["status"], "requires_action", "{status} {paused}");
        let body = json!({"tool_results": [{"tool_call_id": id, "content": "the fact"}]});
        let post = || h.post_json("/sessions/{id}/tool_results", results, &body);
        let ((first, a), (second, b)) = tokio::join!(post(), post());
        let mut statuses = [first, second];
        statuses.sort();
        assert_eq!(statuses, [StatusCode::OK, StatusCode::CONFLICT], "{a} {b}");
        let done = if first == StatusCode::OK { a } else { b };
        assert!(done["replies"][0]["error"].is_null(), "{done}");
    }
    let (calls, results, linked) = tool_traffic(&h, "d:race");
    assert_eq!(calls.len(), 5);
    let ids: Vec<&str> = results.iter().map(|(id, _, _)| id.as_str()).collect();
    assert_eq!(ids, ["race-1", "race-2", "race-3", "race-4", "race-5"]);
    assert!(linked);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_never_answers_gets_an_interrupted_result_and_the_turn_ends() {
    let h = Harness::start_config(
        &format!("token = \"{TOKEN}\"\noperator_token = \"{OPERATOR_TOKEN}\""),
        "host_tool_timeout_seconds = 0.5",
        Duration::ZERO,
    )
    .await;
    let agent = legio_core::AgentName::new("lead").unwrap();
    h.providers["resumable"].inject(Some(&agent), Fault::tool_calls([("late-1", "slow", "{}")]));
    let body = chat(
        Some("d:late"),
        "legio",
        json!([{"role": "user", "content": "use it"}]),
    );
    let mut body = body;
    body["tools"] = json!([{"type": "function", "function": {"name": "slow", "parameters": {"type": "object"}}}]);
    let (status, paused) = h
        .post_json("/v1/chat/completions", "/v1/chat/completions", &body)
        .await;
    assert_eq!(status, StatusCode::OK, "{paused}");
    assert_eq!(paused["choices"][0]["finish_reason"], "tool_calls");
    let deadline = Instant::now() + Duration::from_secs(30);
    let key = ConversationKey::new("d:late").unwrap();
    loop {
        let messages = messages_of(h.runtime.log().as_ref(), &key);
        let answered = messages
            .last()
            .and_then(|r| r.event.as_message())
            .is_some_and(|m| {
                m.sender != Participant::User
                    && m.parts.iter().all(|p| matches!(p, Part::Text { .. }))
            });
        let ended = h
            .runtime
            .log()
            .conversation_events(&key, legio_core::Seq::ZERO, 1000)
            .unwrap()
            .iter()
            .any(|r| matches!(&r.event, Event::TurnCompleted(t) if t.reply.is_some()) && answered);
        if ended {
            break;
        }
        assert!(Instant::now() < deadline, "the turn never ended");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, results, linked) = tool_traffic(&h, "d:late");
    assert_eq!(results.len(), 1);
    assert!(
        results[0].2 && results[0].1.contains("host_tool_timeout_seconds"),
        "{results:?}"
    );
    assert!(linked);
    // Too late now: the result is refused.
    let late = json!([{"role": "tool", "tool_call_id": "late-1", "content": "finally"}]);
    let (status, body) = h
        .post_json(
            "/v1/chat/completions",
            "/v1/chat/completions",
            &chat(Some("d:late"), "legio", late),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_openai_error(&body, "no_pending_tool_call", None);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_door_hands_tool_calls_to_the_host_and_takes_the_results() {
    let h = Harness::start().await;
    let agent = legio_core::AgentName::new("b").unwrap();
    h.providers["fragile"].inject(
        Some(&agent),
        Fault::tool_calls([("w-1", "weather", r#"{"city":"Rome"}"#)]),
    );
    let tools = json!([{"type": "function", "function": {"name": "weather", "description": "the weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    let mut body = chat(
        Some("d:door-tools"),
        "legio/b",
        json!([{"role": "user", "content": "weather?"}]),
    );
    body["tools"] = tools.clone();
    body["stream"] = json!(true);
    let events = h.post_stream("/v1/chat/completions", &body, false).await;
    assert_eq!(events.last().unwrap().1, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    let call = chunks
        .iter()
        .find_map(|c| c["choices"][0]["delta"]["tool_calls"].get(0).cloned())
        .expect("a tool call chunk");
    assert_eq!(
        (call["id"].as_str(), call["function"]["name"].as_str()),
        (Some("w-1"), Some("weather"))
    );
    assert!(chunks
        .iter()
        .any(|c| c["choices"][0]["finish_reason"] == "tool_calls"));
    let next = json!([
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": null, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "w-1", "content": "sunny"},
    ]);
    let mut body = chat(Some("d:door-tools"), "legio/b", next);
    body["tools"] = tools;
    let (status, done) = h
        .post_json("/v1/chat/completions", "/v1/chat/completions", &body)
        .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["choices"][0]["finish_reason"], "stop");
    let (calls, results, linked) = tool_traffic(&h, "d:door-tools");
    assert_eq!(calls, [("w-1".to_owned(), "weather".to_owned())]);
    assert_eq!(results, [("w-1".to_owned(), "sunny".to_owned(), false)]);
    assert!(linked);
    assert_eq!(user_texts(&h, "d:door-tools"), ["weather?"], "stored once");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compacted_history_is_the_latest_summary_then_everything_visible_after_it() {
    let h = Harness::start_config(
        &format!("token = \"{TOKEN}\"\noperator_token = \"{OPERATOR_TOKEN}\""),
        "history_window = 50\ncompact_after_messages = 6\nkeep_recent = 2",
        Duration::ZERO,
    )
    .await;
    let conversation = "d:compacted";
    let key = ConversationKey::new(conversation).unwrap();
    for i in 1..=5 {
        h.turn(conversation, &format!("@a turn {i}")).await;
        h.turn(conversation, &format!("@b turn {i}")).await;
    }
    let log = std::sync::Arc::clone(h.runtime.log());
    let hr = &h;
    let view = |v: &'static str, agent: &'static str| async move {
        let path = format!("/sessions/{conversation}/history?view={v}&agent={agent}");
        let (status, body) = hr
            .call("get", "/sessions/{id}/history", hr.get(&path))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body.as_array().unwrap().clone()
    };
    for agent in ["a", "b"] {
        let name = legio_core::AgentName::new(agent).unwrap();
        let summary = log
            .session_state(&key, &name)
            .unwrap()
            .unwrap()
            .latest_summary;
        let compacted = view("compacted", agent).await;
        let after = summary.map_or(legio_core::Seq::ZERO, |s| s.covers_up_to);
        let want: Vec<u64> = messages_of(log.as_ref(), &key)
            .iter()
            .filter(|r| r.seq > after)
            .filter(|r| {
                legio_core::can_see(
                    legio_core::Viewer::Specialist(&name),
                    r.event.as_message().unwrap(),
                )
            })
            .map(|r| r.seq.get())
            .collect();
        let rest = match summary {
            Some(s) => {
                assert_eq!(compacted[0]["summary"], true, "{agent}");
                assert_eq!(
                    compacted[0]["covers_up_to"],
                    s.covers_up_to.get(),
                    "{agent}"
                );
                &compacted[1..]
            }
            None => &compacted[..],
        };
        let got: Vec<u64> = rest.iter().map(|m| m["seq"].as_u64().unwrap()).collect();
        assert_eq!(
            got, want,
            "{agent}: every message it may see after its latest summary"
        );
        if agent == "a" {
            assert!(summary.is_some(), "a's stateless context was compacted");
        } else {
            // b keeps its provider session: what its provider gets next is a delta, while the
            // compacted view is its whole transcript.
            assert!(summary.is_none(), "a live session's deltas never compact");
            assert_eq!(got.len(), 10, "b's five messages and five replies");
            let next = view("next", agent).await;
            assert!(next.len() < compacted.len(), "next {next:?}");
        }
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_agents_tool_traffic_is_a_user_message_with_its_text() {
    let h = Harness::start().await;
    let conversation = "d:others";
    let agent_a = legio_core::AgentName::new("a").unwrap();
    h.providers["stateless"].inject(
        Some(&agent_a),
        Fault::tool_calls([("g-1", "get_history", "{}")]),
    );
    h.turn(conversation, "@a look back").await;
    let (status, as_lead) = h
        .call(
            "get",
            "/sessions/{id}/history",
            h.get(&format!(
                "/sessions/{conversation}/history?view=full&agent=lead"
            )),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let roles: Vec<(&str, bool, bool)> = as_lead
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap(),
                m.get("tool_calls").is_some(),
                m.get("tool_call_id").is_some(),
            )
        })
        .collect();
    assert_eq!(
        roles,
        [
            ("user", false, false),
            ("user", false, false),
            ("user", false, false),
            ("user", false, false)
        ],
        "{as_lead}"
    );
    assert!(
        as_lead[1]["content"]
            .as_str()
            .unwrap()
            .contains("[tool call get_history id=g-1]"),
        "{as_lead}"
    );
    assert!(
        as_lead[2]["content"]
            .as_str()
            .unwrap()
            .contains("[tool result id=g-1]"),
        "{as_lead}"
    );
    // a's own view keeps its calls and results as assistant and tool messages.
    let (_, as_a) = h
        .call(
            "get",
            "/sessions/{id}/history",
            h.get(&format!(
                "/sessions/{conversation}/history?view=full&agent=a"
            )),
        )
        .await;
    let roles: Vec<&str> = as_a
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
    assert_eq!(as_a[1]["tool_calls"][0]["id"], "g-1");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_responses_api_hands_function_calls_to_the_host() {
    let h = Harness::start().await;
    let agent = legio_core::AgentName::new("a").unwrap();
    h.providers["stateless"].inject(
        Some(&agent),
        Fault::tool_calls([("r-1", "stock", r#"{"sku":"x"}"#)]),
    );
    let url = "/v1/responses";
    let tools = json!([{"type": "function", "name": "stock", "parameters": {"type": "object"}}]);
    let (status, paused) = h
        .post_json(
            url,
            url,
            &json!({"model": "legio/a", "input": "in stock?", "tools": tools,
                "metadata": {"conversation": "d:resp-tools"}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{paused}");
    let item = &paused["output"][0];
    assert_eq!(
        (
            item["type"].as_str(),
            item["call_id"].as_str(),
            item["name"].as_str()
        ),
        (Some("function_call"), Some("r-1"), Some("stock"))
    );
    let id = paused["id"].as_str().unwrap();
    // An output for no waiting call, streamed, is refused with a status as an unstreamed one
    // is (not a stream that ends in an error).
    let (status, refused) = h
        .post_json(
            url,
            url,
            &json!({"model": "legio/a", "previous_response_id": id, "tools": tools, "stream": true,
                "input": [{"type": "function_call_output", "call_id": "r-9", "output": "?"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert!(
        refused.to_string().contains("r-1"),
        "names what waits: {refused}"
    );
    let (status, done) = h
        .post_json(
            url,
            url,
            &json!({"model": "legio/a", "previous_response_id": id, "tools": tools,
                "input": [{"type": "function_call_output", "call_id": "r-1", "output": "3 left"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["output"][0]["type"], "message");
    let (_, results, linked) = tool_traffic(&h, "d:resp-tools");
    assert_eq!(results, [("r-1".to_owned(), "3 left".to_owned(), false)]);
    assert!(linked);
    h.stop().await;
}

/// A turn whose context cannot fit the agent's window fails after its message is stored; the
/// SDKs retry a 5xx, storing the message again each time, so the door answers 413
/// `context_too_large`, which they do not retry (found by a host's walkthrough: 502, and the
/// message three times in the log).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_too_large_for_the_window_is_413_not_a_retried_5xx() {
    let (server, store) = ("body_limit_bytes = 4000000", "max_message_bytes = 2000000");
    let h = Harness::start_full(server, "", store, Duration::ZERO).await;
    let url = "/v1/chat/completions";
    let text = "word ".repeat(190_000);
    let (status, body) = h
        .post_json(
            url,
            url,
            &json!({"model": "legio/a", "messages": [{"role": "user", "content": text}],
                "metadata": {"conversation": "d:huge"}}),
        )
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_openai_error(&body, "context_too_large", None);
    assert_eq!(user_texts(&h, "d:huge").len(), 1, "stored once");
    h.stop().await;
}

/// A failed turn keeps its kind at the edge: the native reply's `error_kind`, and the door's
/// error's (the door names the failure by its code; the kind says why, as the runtime does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_turn_keeps_its_error_kind_on_the_native_api_and_the_door() {
    let (server, store) = ("body_limit_bytes = 4000000", "max_message_bytes = 2000000");
    let h = Harness::start_full(server, "", store, Duration::ZERO).await;
    let text = "word ".repeat(190_000);
    let (status, body) = h
        .post_json(
            "/sessions/{id}/turns",
            "/sessions/d:huge-native/turns",
            &json!({"content": format!("@a {text}")}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let reply = &body["replies"][0];
    assert!(reply["error"].is_string(), "{body}");
    assert_eq!(reply["error_kind"], "context_too_large", "{body}");
    let url = "/v1/chat/completions";
    let (status, body) = h
        .post_json(
            url,
            url,
            &json!({"model": "legio/a", "messages": [{"role": "user", "content": text}],
                "metadata": {"conversation": "d:huge-door"}}),
        )
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_eq!(body["error"]["error_kind"], "context_too_large", "{body}");
    h.stop().await;
}

/// Checks a streamed response's events against OpenAI's order (the SDK's stream helper checks
/// it): one id from start to end, one message item id, `sequence_number` 0, 1, 2, ...; returns
/// the `response.completed` event.
fn assert_in_openai_order(events: &[(String, String)]) -> Value {
    let mut kinds: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    kinds.dedup();
    assert_eq!(
        kinds,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed"
        ],
        "in OpenAI's order (the SDK's stream helper checks it)"
    );
    let data = |name: &str| -> Vec<Value> {
        events
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, d)| serde_json::from_str(d).unwrap())
            .collect()
    };
    let done: Value = serde_json::from_str(&events.last().unwrap().1).unwrap();
    let started = &data("response.created")[0]["response"];
    assert_eq!(
        started["id"], done["response"]["id"],
        "one id from start to end"
    );
    let item = &data("response.output_item.added")[0]["item"]["id"];
    assert_eq!(item, &data("response.output_item.done")[0]["item"]["id"]);
    assert_eq!(item, &done["response"]["output"][0]["id"], "one message id");
    let numbers: Vec<u64> = events
        .iter()
        .map(|(_, d)| {
            serde_json::from_str::<Value>(d).unwrap()["sequence_number"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(numbers, (0..events.len() as u64).collect::<Vec<_>>());
    done
}

/// Keys that legio-core takes but nobody can address afterwards (`.` and `..` vanish from a URL
/// path, `-x` reads as an option to the CLI) are refused at the API edge with the rule (issue
/// 46), on the native paths and the door's `metadata.conversation`, and nothing is stored; a
/// key that only contains a dot or a dash is fine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_that_cannot_be_addressed_are_refused_with_the_rule() {
    let h = Harness::start().await;
    let before = h.runtime.log().last_seq();
    for key in [".", "..", "-x", "--help"] {
        let url = "/v1/chat/completions";
        let body = chat(
            Some(key),
            "legio",
            json!([{"role": "user", "content": "hi"}]),
        );
        let (status, answer) = h.post_json(url, url, &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{key}: {answer}");
        assert_eq!(answer["error"]["code"], "bad_conversation_key");
        assert_eq!(answer["error"]["param"], "metadata.conversation");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("may not be `.` or `..`") && message.contains("start with `-`"),
            "{key}: {message}"
        );
    }
    for (template, path, body) in [
        (
            "/sessions/{id}/turns",
            "/sessions/-x/turns",
            json!({"content": "hi"}),
        ),
        (
            "/sessions/{id}/heartbeats",
            "/sessions/-x/heartbeats",
            json!({"agent": "a", "text": "hi"}),
        ),
    ] {
        let (status, answer) = h.post_json(template, path, &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {answer}");
        assert_eq!(answer["error"]["code"], "bad_conversation_key", "{answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("start with `-`"),
            "{answer}"
        );
    }
    assert_eq!(
        h.runtime.log().last_seq(),
        before,
        "a refused key stored something"
    );
    // Keys with a dot or a dash inside are addressable and taken.
    for key in ["a.b", "x-1", "t:-"] {
        let (status, answer) = h
            .post_json(
                "/sessions/{id}/turns",
                &format!("/sessions/{key}/turns"),
                &json!({"content": "hi"}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{key}: {answer}");
    }
    h.stop().await;
}
