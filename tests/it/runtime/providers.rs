//! The runtime with a real provider kind against a local mock server: `openai-responses` resumes
//! its stored response id after a process restart and sends only the new messages; when the
//! provider has forgotten the id, the runtime records the boundary and bootstraps a new session
//! from the log with the restored notice.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use legio_core::{Event, SessionStart};
use legio_runtime::{Runtime, RuntimeConfig};
use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// Answers every request with a new response id (`resp_1`, `resp_2`, ...), streamed; ids in
/// `forgotten` are answered with 404 `previous_response_not_found`.
struct Responses {
    next: AtomicUsize,
    forgotten: Arc<Mutex<Vec<String>>>,
}

impl Respond for Responses {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = request.body_json().unwrap();
        if let Some(previous) = body["previous_response_id"].as_str() {
            if self.forgotten.lock().unwrap().iter().any(|f| f == previous) {
                return ResponseTemplate::new(404).set_body_json(json!({"error": {
                    "message": format!("Previous response with id '{previous}' not found."),
                    "type": "invalid_request_error", "code": "previous_response_not_found"}}));
            }
        }
        let id = format!("resp_{}", self.next.fetch_add(1, Ordering::SeqCst) + 1);
        let done = json!({"type": "response.completed", "response": {
            "id": id, "status": "completed",
            "output": [{"type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": format!("answer {id}")}]}],
            "usage": {"input_tokens": 100, "output_tokens": 3}}});
        let body = format!(
            "event: response.output_text.delta\ndata: {}\n\nevent: response.completed\ndata: {done}\n\n",
            json!({"type": "response.output_text.delta", "delta": format!("answer {id}")})
        );
        ResponseTemplate::new(200).set_body_raw(body, "text/event-stream")
    }
}

async fn legion(server: &MockServer, dir: &std::path::Path) -> RuntimeConfig {
    for name in ["lead", "ann"] {
        std::fs::write(dir.join(format!("{name}.md")), format!("You are {name}.")).unwrap();
    }
    let text = format!(
        r#"
[store]
path = "db"
[agents.lead]
role = "orchestrator"
prompt = "lead.md"
provider = "openai"
[agents.ann]
role = "specialist"
prompt = "ann.md"
provider = "openai"
[providers.openai]
kind = "openai-responses"
base_url = "{}/v1"
model = "gpt-4o-mini"
max_retries = 0
"#,
        server.uri()
    );
    let file = dir.join("legio.toml");
    std::fs::write(&file, text).unwrap();
    RuntimeConfig::load(&file).unwrap()
}

async fn bodies(server: &MockServer) -> Vec<Value> {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| r.body_json().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_responses_resumes_the_stored_id_after_a_restart_and_sends_only_new_messages() {
    let server = MockServer::start().await;
    let forgotten = Arc::new(Mutex::new(Vec::new()));
    Mock::given(method("POST"))
        .and(path("/v1/responses"))
        .respond_with(Responses {
            next: AtomicUsize::new(0),
            forgotten: forgotten.clone(),
        })
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let config = legion(&server, dir.path()).await;

    let rt = Runtime::open(config.clone()).await.unwrap();
    let replies = rt.post("prov:1", "@ann first question").await.unwrap();
    assert_eq!(replies[0].text(), Some("answer resp_1"));
    rt.shutdown().await.unwrap();

    // A new process on the same log.
    let rt = Runtime::open(config.clone()).await.unwrap();
    let replies = rt.post("prov:1", "@ann second question").await.unwrap();
    assert_eq!(replies[0].text(), Some("answer resp_2"));
    let sent = bodies(&server).await;
    assert_eq!(sent.len(), 2);
    assert!(sent[0].get("previous_response_id").is_none());
    assert_eq!(sent[1]["previous_response_id"], "resp_1");
    let input = sent[1]["input"].to_string();
    assert!(input.contains("second question"), "{input}");
    assert!(
        !input.contains("first question") && !input.contains("answer resp_1"),
        "history the provider holds is never re-sent: {input}"
    );

    // The provider forgets resp_2: a boundary, then a bootstrap from the log with the notice.
    forgotten.lock().unwrap().push("resp_2".into());
    let replies = rt.post("prov:1", "@ann third question").await.unwrap();
    assert_eq!(replies[0].error(), None);
    assert_eq!(replies[0].text(), Some("answer resp_3"));
    let sent = bodies(&server).await;
    assert_eq!(sent.len(), 4);
    assert_eq!(sent[2]["previous_response_id"], "resp_2");
    assert!(
        sent[3].get("previous_response_id").is_none(),
        "a new session"
    );
    let input = sent[3]["input"].to_string();
    for text in [
        "first question",
        "second question",
        "third question",
        "context_notice",
    ] {
        assert!(
            input.contains(text),
            "{text} missing from the bootstrap: {input}"
        );
    }
    let log = rt.log().clone();
    let events = log
        .read_range(legio_core::Seq(1), log.last_seq(), usize::MAX)
        .unwrap();
    let opened: Vec<String> = events
        .iter()
        .filter_map(|r| match &r.event {
            Event::SessionOpened(e) if e.agent.as_str() == "ann" => Some(match &e.how {
                SessionStart::Resumed {
                    provider_session, ..
                } => format!("resumed {provider_session}"),
                SessionStart::Bootstrapped { .. } => "bootstrapped".to_owned(),
                SessionStart::Stateless => "stateless".to_owned(),
            }),
            _ => None,
        })
        .collect();
    assert_eq!(opened, ["bootstrapped", "resumed resp_1", "bootstrapped"]);
    rt.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_key_variable_stops_the_runtime_from_opening_and_names_it() {
    let server = MockServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = legion(&server, dir.path()).await;
    let file = dir.path().join("legio.toml");
    let text = std::fs::read_to_string(&file).unwrap().replace(
        "max_retries = 0",
        "max_retries = 0\napi_key_env = \"LEGIO_TEST_UNSET_KEY_VARIABLE\"",
    );
    std::fs::write(&file, text).unwrap();
    drop(config);
    let config = RuntimeConfig::load(&file).unwrap();
    let e = Runtime::open(config).await.unwrap_err().to_string();
    assert!(e.contains("LEGIO_TEST_UNSET_KEY_VARIABLE"), "{e}");
}

/// Anthropic's stream for the first call: thinking, then a `get_history` call; for the second:
/// thinking, then the answer.
struct ThinkThenCall {
    next: AtomicUsize,
}

impl Respond for ThinkThenCall {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        let first = self.next.fetch_add(1, Ordering::SeqCst) == 0;
        let mut events = vec![
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
                "role": "assistant", "content": [], "model": "claude-test",
                "usage": {"input_tokens": 20, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "thinking", "thinking": ""}}),
            json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "thinking_delta", "thinking": if first { "Look back first." } else { "Now answer." }}}),
            json!({"type": "content_block_stop", "index": 0}),
        ];
        let (block, delta, stop) = if first {
            (
                json!({"type": "tool_use", "id": "toolu_1", "name": "get_history", "input": {}}),
                json!({"type": "input_json_delta", "partial_json": "{\"limit\":3}"}),
                "tool_use",
            )
        } else {
            (
                json!({"type": "text", "text": ""}),
                json!({"type": "text_delta", "text": "All quiet."}),
                "end_turn",
            )
        };
        events.extend([
            json!({"type": "content_block_start", "index": 1, "content_block": block}),
            json!({"type": "content_block_delta", "index": 1, "delta": delta}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "message_delta", "delta": {"stop_reason": stop},
                "usage": {"output_tokens": 9}}),
            json!({"type": "message_stop"}),
        ]);
        let body: String = events
            .iter()
            .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
            .collect();
        ResponseTemplate::new(200).set_body_raw(body, "text/event-stream")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_turn_reports_thinking_and_tool_calls_as_progress() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(ThinkThenCall {
            next: AtomicUsize::new(0),
        })
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    for name in ["lead", "ann"] {
        std::fs::write(dir.path().join(format!("{name}.md")), "You help.").unwrap();
    }
    let file = dir.path().join("legio.toml");
    let config = format!(
        r#"
[store]
path = "db"
[agents.lead]
role = "orchestrator"
prompt = "lead.md"
provider = "claude"
[agents.ann]
role = "specialist"
prompt = "ann.md"
provider = "claude"
[providers.claude]
kind = "anthropic-messages"
base_url = "{}/v1"
model = "claude-test"
api_key_env = "LEGIO_TEST_PROGRESS_KEY"
max_retries = 0
"#,
        server.uri()
    );
    std::fs::write(&file, config).unwrap();
    std::env::set_var("LEGIO_TEST_PROGRESS_KEY", "k");
    let rt = Runtime::open(RuntimeConfig::load(&file).unwrap())
        .await
        .unwrap();
    let (sink, mut progress) = tokio::sync::mpsc::unbounded_channel();
    let posted = rt
        .post_streaming("prov:think", "user", "@ann anything new?", sink)
        .await
        .unwrap();
    assert_eq!(posted.replies[0].text(), Some("All quiet."));
    let mut steps = Vec::new();
    while let Some(step) = progress.recv().await {
        use legio_runtime::Progress as P;
        steps.push(match step {
            P::AgentStarted { .. } => "started".to_owned(),
            P::Thinking { text, .. } => format!("thinking {text}"),
            P::ToolCalled {
                name, arguments, ..
            } => format!("call {name} {arguments}"),
            P::ToolDone { name, .. } => format!("done {name}"),
            P::ToolFailed { name, error, .. } => format!("failed {name}: {error}"),
            P::Delta { text, .. } => format!("delta {text}"),
            P::CompactionFailed { reason, .. } => format!("compaction failed {reason}"),
            P::AgentDone { .. } => "agent done".to_owned(),
            P::ToolCallsRequired { .. } => "host tools".to_owned(),
        });
    }
    assert_eq!(
        steps,
        [
            "started",
            "thinking Look back first.",
            "call get_history {\"limit\":3}",
            "done get_history",
            "thinking Now answer.",
            "delta All quiet.",
            "agent done"
        ]
    );
    rt.shutdown().await.unwrap();
}
