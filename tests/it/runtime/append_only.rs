//! Stateless providers get an append-only transcript: against a local stand-in of the Anthropic
//! Messages API and of Chat Completions, an orchestrator's consecutive requests (each with its
//! `<agent_status>` block) share everything up to the previous request's last cache breakpoint
//! (Anthropic) or all of the previous request's messages but its volatile tail (Chat): the
//! status block moves no prefix, so a prompt cache reads the whole previous request again.

use legio_runtime::{Runtime, RuntimeConfig};
use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// Answers every Messages or Chat Completions request with a short text reply.
struct Answer;

impl Respond for Answer {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        if request.url.path().ends_with("/messages") {
            return ResponseTemplate::new(200).set_body_json(json!({
                "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                "content": [{"type": "text", "text": "Noted."}], "stop_reason": "end_turn",
                "usage": {"input_tokens": 10, "output_tokens": 2}}));
        }
        ResponseTemplate::new(200).set_body_json(json!({
            "id": "c1", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "Noted."}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}}))
    }
}

/// A runtime whose agents use a provider of `kind` at `server`, and the request bodies it sent
/// for four posts to the orchestrator.
async fn bodies_for(kind: &str, endpoint: &str) -> Vec<Value> {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(endpoint))
        .respond_with(Answer)
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    for name in ["lead", "ann"] {
        std::fs::write(dir.path().join(format!("{name}.md")), "You help.").unwrap();
    }
    let config = format!(
        r#"
[store]
path = "db"
[agents.lead]
role = "orchestrator"
prompt = "lead.md"
provider = "p"
[agents.ann]
role = "specialist"
prompt = "ann.md"
provider = "p"
[providers.p]
kind = "{kind}"
base_url = "{}/v1"
model = "m"
api_key_env = "LEGIO_TEST_APPEND_ONLY_KEY"
stream = false
max_retries = 0
"#,
        server.uri()
    );
    let file = dir.path().join("legio.toml");
    std::fs::write(&file, config).unwrap();
    std::env::set_var("LEGIO_TEST_APPEND_ONLY_KEY", "k");
    let rt = Runtime::open(RuntimeConfig::load(&file).unwrap())
        .await
        .unwrap();
    for n in 0..4 {
        rt.post("append:1", &format!("step {n}: what next?"))
            .await
            .unwrap();
    }
    rt.shutdown().await.unwrap();
    let requests = server.received_requests().await.unwrap();
    requests.iter().map(|r| r.body_json().unwrap()).collect()
}

/// A Messages body's content blocks in order, each with its message's role, without their
/// `cache_control`; and the index of the last block that carried one.
fn blocks(body: &Value) -> (Vec<Value>, Option<usize>) {
    let (mut out, mut last) = (Vec::new(), None);
    for message in body["messages"].as_array().unwrap() {
        for block in message["content"].as_array().unwrap() {
            let mut block = block.clone();
            if block
                .as_object_mut()
                .unwrap()
                .remove("cache_control")
                .is_some()
            {
                last = Some(out.len());
            }
            out.push(json!([message["role"], block]));
        }
    }
    (out, last)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_requests_only_grow_up_to_the_last_breakpoint() {
    let bodies = bodies_for("anthropic-messages", "/v1/messages").await;
    assert_eq!(bodies.len(), 4, "one request per post");
    for pair in bodies.windows(2) {
        let (before, breakpoint) = blocks(&pair[0]);
        let (after, _) = blocks(&pair[1]);
        let cached = &before[..=breakpoint.expect("the previous request marked a breakpoint")];
        assert!(
            after.starts_with(cached),
            "the previous request's cached prefix is rewritten:\n{cached:#?}\nthen\n{after:#?}"
        );
        let tail = &before[cached.len()..];
        assert!(
            tail.iter().all(|b| b[1]["text"]
                .as_str()
                .is_some_and(|t| t.contains("<agent_status>"))),
            "only the status block follows the breakpoint: {tail:#?}"
        );
        assert_eq!(pair[0]["system"], pair[1]["system"]);
    }
    let (last, _) = blocks(&bodies[3]);
    let status = last
        .iter()
        .filter(|b| {
            b[1]["text"]
                .as_str()
                .is_some_and(|t| t.contains("<agent_status>"))
        })
        .count();
    assert_eq!(status, 1, "the status block is sent once, last");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_requests_are_the_previous_request_plus_what_is_new() {
    let bodies = bodies_for("openai-chat", "/v1/chat/completions").await;
    assert_eq!(bodies.len(), 4, "one request per post");
    for pair in bodies.windows(2) {
        let before = pair[0]["messages"].as_array().unwrap();
        let after = pair[1]["messages"].as_array().unwrap();
        let (tail, kept) = before.split_last().unwrap();
        assert!(
            tail["content"]
                .as_str()
                .is_some_and(|t| t.starts_with("<agent_status>") && t.ends_with("</agent_status>")),
            "the request ends with its status block, alone: {tail}"
        );
        assert!(
            after.starts_with(kept),
            "the previous request is rewritten:\n{kept:#?}\nthen\n{after:#?}"
        );
        assert_eq!(
            after.len(),
            kept.len() + 3,
            "the reply, the new post, the status"
        );
    }
}
