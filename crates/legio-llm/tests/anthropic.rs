//! The `anthropic-messages` provider against local servers (wiremock, and a raw TCP server for a
//! stream cut mid-way): request shape and headers, streamed and whole replies, usage with cache
//! reads and writes, deltas, retries, timeouts and every way a reply can be broken.

use std::time::Duration;

use legio_core::{
    AgentName, Audience, ContextItem, ContextPlan, ConversationKey, DeliveryMode, History, Message,
    MessageId, Part, Participant, Seq, Timestamp, TokenUsage,
};
use legio_llm::anthropic::{request_body, AnthropicMessages, CONTINUES};
use legio_llm::{
    build_provider, BuildError, CacheTtl, HttpSettings, Provider, ProviderError, ProviderRequest,
    ProviderSettings, RetrySettings, StreamDelta,
};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const KEY: &str = "sk-ant-test-key";

// ---------------------------------------------------------------------------------------------
// Building requests
// ---------------------------------------------------------------------------------------------

fn agent(name: &str) -> AgentName {
    AgentName::new(name).expect("valid agent name")
}

fn sender(name: &str) -> Participant {
    Participant::parse(name).expect("valid participant")
}

fn item(seq: u64, from: &str, parts: Vec<Part>) -> ContextItem {
    let at = Timestamp::from_unix_micros(1_700_000_000_000_000 + seq as i64);
    let mut message = Message::text(
        MessageId::from_parts(at, [seq as u8; 10]),
        ConversationKey::new("c1").expect("valid key"),
        sender(from),
        Audience::All,
        "",
        at,
    );
    message.parts = parts;
    ContextItem {
        seq: Seq(seq),
        message,
        redelivered: false,
    }
}

fn text(t: &str) -> Part {
    Part::Text { text: t.into() }
}

fn call(id: &str, name: &str, arguments: &str) -> Part {
    Part::ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.into(),
    }
}

fn result(call_id: &str, content: &str, is_error: bool) -> Part {
    Part::ToolResult {
        call_id: call_id.into(),
        content: content.into(),
        is_error,
    }
}

/// A request for agent `lead` with `history` (each `(sender, parts)`) and a new message from the
/// user.
fn request_with(history: Vec<(&str, Vec<Part>)>, new_text: &str) -> ProviderRequest {
    let history: Vec<ContextItem> = history
        .into_iter()
        .enumerate()
        .map(|(i, (from, parts))| item(i as u64 + 1, from, parts))
        .collect();
    let new_seq = history.len() as u64 + 1;
    ProviderRequest {
        conversation: ConversationKey::new("c1").expect("valid key"),
        agent: agent("lead"),
        system_prompt: "You are lead.".into(),
        resume: None,
        plan: ContextPlan {
            mode: DeliveryMode::Full,
            notice: None,
            history,
            new_message: item(new_seq, "user", vec![text(new_text)]),
            up_to: Seq(new_seq),
            estimated_tokens: 0,
            summary: None,
        },
        status: None,
        deltas: None,
        tools: Default::default(),
        mcp: None,
    }
}

fn simple_request() -> ProviderRequest {
    request_with(vec![], "Hello there")
}

/// Settings for `server`, with the key in `key_var` and small retry and timeout settings.
fn settings(base_url: &str, key_var: &str, stream: bool) -> HttpSettings {
    std::env::set_var(key_var, KEY);
    let mut s = HttpSettings::new(format!("{base_url}/v1"), "claude-test-1");
    s.api_key_env = Some(key_var.to_owned());
    s.stream = stream;
    s.max_output_tokens = 777;
    s.context_window = 200_000;
    s.read_timeout = Duration::from_secs(5);
    s.retry = RetrySettings {
        max_retries: 2,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(200),
    };
    s
}

fn provider(settings: HttpSettings) -> AnthropicMessages {
    AnthropicMessages::new("claude", settings).expect("provider builds")
}

fn failed(e: ProviderError) -> String {
    match e {
        ProviderError::Failed { message } => message,
        other => panic!("expected Failed, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Replies shaped like the real API's
// ---------------------------------------------------------------------------------------------

fn sse(events: &[(&str, Value)]) -> String {
    events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect()
}

fn stream_events(fragments: &[&str]) -> Vec<(&'static str, Value)> {
    let mut events = vec![
        (
            "message_start",
            json!({"type": "message_start", "message": {
                "id": "msg_01", "type": "message", "role": "assistant", "content": [],
                "model": "claude-test-1", "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 25, "cache_creation_input_tokens": 7,
                          "cache_read_input_tokens": 1200, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
                   "content_block": {"type": "text", "text": ""}}),
        ),
        ("ping", json!({"type": "ping"})),
    ];
    for f in fragments {
        events.push((
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
                   "delta": {"type": "text_delta", "text": f}}),
        ));
    }
    events.push((
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    events.push((
        "message_delta",
        json!({"type": "message_delta",
               "delta": {"stop_reason": "end_turn", "stop_sequence": null},
               "usage": {"output_tokens": 15}}),
    ));
    events
}

fn full_stream(fragments: &[&str]) -> String {
    let mut events = stream_events(fragments);
    events.push(("message_stop", json!({"type": "message_stop"})));
    sse(&events)
}

fn sse_response(body: String) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(body, "text/event-stream")
}

fn whole_body() -> Value {
    json!({
        "id": "msg_02", "type": "message", "role": "assistant", "model": "claude-test-1",
        "content": [
            {"type": "text", "text": "Hello, "},
            {"type": "text", "text": "world."}
        ],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 30, "output_tokens": 4,
                  "cache_read_input_tokens": 900, "cache_creation_input_tokens": 11}
    })
}

async fn mock(server: &MockServer, response: ResponseTemplate) {
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(response)
        .mount(server)
        .await;
}

async fn requests(server: &MockServer) -> Vec<wiremock::Request> {
    server
        .received_requests()
        .await
        .expect("request recording is on")
}

// ---------------------------------------------------------------------------------------------
// Request mapping
// ---------------------------------------------------------------------------------------------

#[test]
fn request_body_maps_system_roles_and_tool_pairs() {
    let request = request_with(
        vec![
            ("user", vec![text("Find the weather in Oslo.")]),
            (
                "lead",
                vec![
                    text("Checking."),
                    call("toolu_01", "weather", r#"{"city":"Oslo"}"#),
                    result("toolu_01", "7°C, rain", false),
                ],
            ),
            ("researcher", vec![text("I can help too.")]),
        ],
        "Thanks, and Bergen?",
    );
    let settings = settings("http://127.0.0.1:1", "LEGIO_TEST_ANTHROPIC_SHAPE", true);
    let body = request_body(&settings, &request);
    assert_eq!(body["model"], "claude-test-1");
    assert_eq!(body["max_tokens"], 777);
    assert_eq!(body["stream"], true);
    assert_eq!(
        body["system"],
        json!([{"type": "text", "text": "You are lead.", "cache_control": {"type": "ephemeral"}}])
    );
    let expected = json!([
        {"role": "user", "content": [{"type": "text", "text": "Find the weather in Oslo.",
                                      "cache_control": {"type": "ephemeral"}}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_01", "name": "weather", "input": {"city": "Oslo"}}
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": "7°C, rain",
             "is_error": false},
            {"type": "text", "text": "[researcher]: I can help too."},
            {"type": "text", "text": "Thanks, and Bergen?", "cache_control": {"type": "ephemeral"}}
        ]}
    ]);
    assert_eq!(body["messages"], expected);
    assert!(
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m.get("name").is_none()),
        "Anthropic messages have no name field"
    );
}

#[test]
fn request_body_merges_same_role_turns_and_opens_with_a_user_message() {
    let request = request_with(
        vec![
            ("lead", vec![text("First own message.")]),
            ("lead", vec![text("Second own message.")]),
            ("coder", vec![text("Done.")]),
            ("researcher", vec![result("x1", "boom", true)]),
        ],
        "Go on.",
    );
    let settings = settings("http://127.0.0.1:1", "LEGIO_TEST_ANTHROPIC_MERGE", false);
    let body = request_body(&settings, &request);
    assert_eq!(body["stream"], false);
    let messages = body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    assert_eq!(
        messages[0]["content"],
        json!([{"type": "text", "text": CONTINUES, "cache_control": {"type": "ephemeral"}}])
    );
    assert_eq!(
        messages[1]["content"],
        json!([
            {"type": "text", "text": "First own message."},
            {"type": "text", "text": "Second own message."}
        ])
    );
    // The result answers no call in the previous message: the API would refuse it as a block.
    assert_eq!(
        messages[2]["content"],
        json!([
            {"type": "text", "text": "[coder]: Done."},
            {"type": "text", "text": "[tool error id=x1] boom"},
            {"type": "text", "text": "Go on.", "cache_control": {"type": "ephemeral"}}
        ])
    );
}

#[test]
fn request_body_sends_unparsable_arguments_as_empty_input_with_a_note() {
    let request = request_with(
        vec![
            ("user", vec![text("Run it.")]),
            (
                "lead",
                vec![
                    call("call.1", "run tool", "{not json"),
                    result("call.1", "ran", false),
                ],
            ),
        ],
        "And?",
    );
    let settings = settings("http://127.0.0.1:1", "LEGIO_TEST_ANTHROPIC_ARGS", true);
    let body = request_body(&settings, &request);
    let messages = body["messages"].as_array().unwrap();
    let assistant = messages[1]["content"].as_array().unwrap();
    assert_eq!(assistant.len(), 2);
    let note = assistant[0]["text"].as_str().unwrap();
    assert!(note.contains("{not json"), "{note}");
    // Ids and names are cut to what the API accepts, the same on both sides.
    assert_eq!(
        assistant[1],
        json!({"type": "tool_use", "id": "call_1", "name": "run_tool", "input": {}})
    );
    assert_eq!(messages[2]["content"][0]["type"], "tool_result");
    assert_eq!(messages[2]["content"][0]["tool_use_id"], "call_1");
}

#[test]
fn request_body_sends_a_call_without_its_result_as_text() {
    let request = request_with(
        vec![
            ("user", vec![text("Look it up.")]),
            ("lead", vec![call("toolu_9", "search", r#"{"q":"legio"}"#)]),
        ],
        "Anything?",
    );
    let settings = settings("http://127.0.0.1:1", "LEGIO_TEST_ANTHROPIC_UNPAIRED", true);
    let body = request_body(&settings, &request);
    let assistant = &body["messages"][1]["content"];
    assert_eq!(
        assistant,
        &json!([{"type": "text", "text": r#"[tool call search id=toolu_9] {"q":"legio"}"#}])
    );
}

// ---------------------------------------------------------------------------------------------
// Prompt caching
// ---------------------------------------------------------------------------------------------

/// Where `body` carries `cache_control`, as JSON pointers to the blocks that hold it, each with
/// its value.
fn breakpoints(body: &Value) -> Vec<(String, Value)> {
    fn walk(value: &Value, at: String, found: &mut Vec<(String, Value)>) {
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    if key == "cache_control" {
                        found.push((at.clone(), child.clone()));
                    } else {
                        walk(child, format!("{at}/{key}"), found);
                    }
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    walk(child, format!("{at}/{i}"), found);
                }
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    walk(body, String::new(), &mut found);
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

fn named_tool(name: &str) -> legio_llm::ToolDef {
    legio_llm::ToolDef {
        name: name.into(),
        description: format!("The {name} tool."),
        parameters: json!({"type": "object", "properties": {}}),
    }
}

/// A long exchange with tool use: user, lead (call + result), user, lead, researcher, ... then the
/// new message.
fn long_request() -> ProviderRequest {
    let mut history = Vec::new();
    for i in 0..6 {
        history.push(("user", vec![text(&format!("Question {i}."))]));
        let id = format!("toolu_{i}");
        history.push((
            "lead",
            vec![
                text(&format!("Looking {i} up.")),
                call(&id, "lookup", r#"{"word":"w"}"#),
                result(&id, "found", false),
            ],
        ));
        history.push(("lead", vec![text(&format!("Answer {i}."))]));
    }
    let mut request = request_with(history, "And the last one?");
    request.tools = vec![
        named_tool("lookup"),
        named_tool("search"),
        named_tool("fetch"),
    ]
    .into();
    request
}

#[test]
fn breakpoints_mark_the_last_tool_the_system_prompt_and_the_last_blocks() {
    let settings = settings("http://127.0.0.1:1", "LEGIO_TEST_ANTHROPIC_CACHE", true);
    let body = request_body(&settings, &long_request());
    let messages = body["messages"].as_array().unwrap();
    let n = messages.len();
    let last_block = |i: usize| messages[i]["content"].as_array().unwrap().len() - 1;
    let ephemeral = json!({"type": "ephemeral"});
    let mut expected = vec![
        ("/tools/2".to_owned(), ephemeral.clone()),
        ("/system/0".to_owned(), ephemeral.clone()),
        (
            format!("/messages/{}/content/{}", n - 3, last_block(n - 3)),
            ephemeral.clone(),
        ),
        (
            format!("/messages/{}/content/{}", n - 1, last_block(n - 1)),
            ephemeral.clone(),
        ),
    ];
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(breakpoints(&body), expected, "{body:#}");
    assert_eq!(messages[n - 1]["role"], "user");
    assert_eq!(
        messages[n - 1]["content"][last_block(n - 1)]["text"],
        "And the last one?"
    );
    // The message two before the last is where the previous request ended: the agent's reply
    // and the new message follow it.
    assert_eq!(messages[n - 2]["role"], "assistant");
    assert_eq!(messages[n - 3]["role"], "user");
    // The system prompt is the same text, as a block.
    assert_eq!(body["system"][0]["text"], "You are lead.");

    // One message, no tools, no system prompt: one breakpoint, on the only block.
    let mut request = simple_request();
    request.system_prompt = " ".into();
    let body = request_body(&settings, &request);
    assert!(body.get("system").is_none(), "{body}");
    assert_eq!(
        breakpoints(&body),
        [("/messages/0/content/0".to_owned(), ephemeral.clone())]
    );
    // Three messages (the first one put in front of the agent's own): the first and the last.
    let body = request_body(
        &settings,
        &request_with(vec![("lead", vec![text("Hi.")])], "Yo."),
    );
    assert_eq!(
        breakpoints(&body)
            .into_iter()
            .map(|(at, _)| at)
            .collect::<Vec<_>>(),
        [
            "/messages/0/content/0",
            "/messages/2/content/0",
            "/system/0"
        ],
        "{body:#}"
    );
}

#[test]
fn a_request_never_carries_more_than_four_breakpoints() {
    let settings = settings(
        "http://127.0.0.1:1",
        "LEGIO_TEST_ANTHROPIC_CACHE_MAX",
        false,
    );
    for length in 0..12 {
        let history = (0..length)
            .map(|i| {
                let from = ["user", "lead", "researcher"][i % 3];
                (from, vec![text(&format!("message {i}"))])
            })
            .collect();
        let mut request = request_with(history, "now");
        request.tools = vec![named_tool("a"), named_tool("b")].into();
        let body = request_body(&settings, &request);
        let found = breakpoints(&body);
        assert!(found.len() <= 4, "{length}: {found:?}");
        let messages = body["messages"].as_array().unwrap().len();
        assert_eq!(
            found.len(),
            2 + messages.min(3).div_ceil(2),
            "{length}: {found:?}"
        );
    }
}

#[tokio::test]
async fn cache_ttl_of_an_hour_goes_on_every_breakpoint_sent() {
    let server = MockServer::start().await;
    mock(
        &server,
        ResponseTemplate::new(200).set_body_json(whole_body()),
    )
    .await;
    let mut s = settings(&server.uri(), "LEGIO_TEST_ANTHROPIC_CACHE_TTL", false);
    s.cache_ttl = CacheTtl::OneHour;
    let p = provider(s);
    p.call(long_request()).await.expect("reply");
    let sent: Value = requests(&server).await[0].body_json().unwrap();
    let found = breakpoints(&sent);
    assert_eq!(found.len(), 4, "{found:?}");
    for (at, value) in found {
        assert_eq!(value, json!({"type": "ephemeral", "ttl": "1h"}), "{at}");
    }
}

// ---------------------------------------------------------------------------------------------
// Replies
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn streamed_reply_reads_text_usage_and_deltas() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(header("x-api-key", KEY))
        .and(header("anthropic-version", "2023-06-01"))
        .and(header("content-type", "application/json"))
        .respond_with(sse_response(full_stream(&["Hel", "lo", " world"])))
        .expect(1)
        .mount(&server)
        .await;
    let p = provider(settings(&server.uri(), "LEGIO_TEST_ANTHROPIC_STREAM", true));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut request = simple_request();
    request.deltas = Some(tx);
    let reply = p.call(request).await.expect("reply");
    assert_eq!(reply.text, "Hello world");
    assert_eq!(
        reply.usage,
        Some(TokenUsage {
            input: 25,
            output: 15,
            cache_read: 1200,
            cache_write: 7
        })
    );
    assert_eq!(reply.provider_session, None);
    let mut fragments = Vec::new();
    while let Ok(StreamDelta::Text(f)) = rx.try_recv() {
        fragments.push(f);
    }
    assert_eq!(fragments, ["Hel", "lo", " world"]);
    let sent: Value = requests(&server).await[0].body_json().unwrap();
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["max_tokens"], 777);
    assert_eq!(sent["model"], "claude-test-1");
    assert_eq!(
        sent["system"],
        json!([{"type": "text", "text": "You are lead.", "cache_control": {"type": "ephemeral"}}])
    );
    assert_eq!(
        sent["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "Hello there",
                                             "cache_control": {"type": "ephemeral"}}]}])
    );
}

#[tokio::test]
async fn whole_reply_joins_text_blocks_and_reads_usage() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(header("x-api-key", KEY))
        .and(header("anthropic-version", "2023-06-01"))
        .respond_with(ResponseTemplate::new(200).set_body_json(whole_body()))
        .expect(1)
        .mount(&server)
        .await;
    let p = provider(settings(&server.uri(), "LEGIO_TEST_ANTHROPIC_WHOLE", false));
    let reply = p.call(simple_request()).await.expect("reply");
    assert_eq!(reply.text, "Hello, world.");
    assert_eq!(
        reply.usage,
        Some(TokenUsage {
            input: 30,
            output: 4,
            cache_read: 900,
            cache_write: 11
        })
    );
    let sent: Value = requests(&server).await[0].body_json().unwrap();
    assert_eq!(sent["stream"], false);
}

#[tokio::test]
async fn reply_without_usage_is_estimated() {
    let server = MockServer::start().await;
    let mut body = whole_body();
    body.as_object_mut().unwrap().remove("usage");
    mock(&server, ResponseTemplate::new(200).set_body_json(body)).await;
    let p = provider(settings(
        &server.uri(),
        "LEGIO_TEST_ANTHROPIC_ESTIMATE",
        false,
    ));
    let reply = p.call(simple_request()).await.expect("reply");
    let usage = reply.usage.expect("estimated usage");
    assert!(usage.input > 0 && usage.output > 0, "{usage:?}");
    assert_eq!((usage.cache_read, usage.cache_write), (0, 0));
}

#[tokio::test]
async fn capabilities_are_stateless_with_the_configured_window() {
    let p = provider(settings(
        "http://127.0.0.1:1",
        "LEGIO_TEST_ANTHROPIC_CAPS",
        true,
    ));
    let caps = p.capabilities();
    assert_eq!(caps.history, History::Stateless);
    assert_eq!(caps.context_window, 200_000);
}

// ---------------------------------------------------------------------------------------------
// Faults
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn rate_limit_with_retry_after_is_retried() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("retry-after", "0")
                .set_body_json(json!({"type": "error",
                    "error": {"type": "rate_limit_error", "message": "slow down"}})),
        )
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    mock(&server, sse_response(full_stream(&["ok"]))).await;
    let p = provider(settings(&server.uri(), "LEGIO_TEST_ANTHROPIC_429", true));
    let reply = p.call(simple_request()).await.expect("reply after a retry");
    assert_eq!(reply.text, "ok");
    assert_eq!(requests(&server).await.len(), 2);
}

#[tokio::test]
async fn server_error_is_retried() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(ResponseTemplate::new(500).set_body_string("oops"))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    mock(
        &server,
        ResponseTemplate::new(200).set_body_json(whole_body()),
    )
    .await;
    let p = provider(settings(&server.uri(), "LEGIO_TEST_ANTHROPIC_500", false));
    let reply = p.call(simple_request()).await.expect("reply after a retry");
    assert_eq!(reply.text, "Hello, world.");
    assert_eq!(requests(&server).await.len(), 2);
}

#[tokio::test]
async fn read_timeout_is_an_error() {
    let server = MockServer::start().await;
    mock(
        &server,
        sse_response(full_stream(&["late"])).set_delay(Duration::from_secs(3)),
    )
    .await;
    let mut s = settings(&server.uri(), "LEGIO_TEST_ANTHROPIC_TIMEOUT", true);
    s.read_timeout = Duration::from_millis(200);
    s.retry.max_retries = 1;
    // The error says it timed out: the 3 s response never arrived within the 200 ms read
    // timeout (twice, with one retry).
    let message = failed(provider(s).call(simple_request()).await.unwrap_err());
    assert!(message.contains("timed out"), "{message}");
}

#[tokio::test]
async fn stream_without_message_stop_is_an_error() {
    let server = MockServer::start().await;
    mock(&server, sse_response(sse(&stream_events(&["partial"])))).await;
    let p = provider(settings(&server.uri(), "LEGIO_TEST_ANTHROPIC_TRUNC", true));
    let message = failed(p.call(simple_request()).await.unwrap_err());
    assert!(message.contains("message_stop"), "{message}");
}

#[tokio::test]
async fn invalid_json_in_the_stream_is_an_error() {
    let server = MockServer::start().await;
    let body = format!(
        "{}event: content_block_delta\ndata: {{\"type\": \"content_block_delta\", \"delta\": \n\n{}",
        sse(&stream_events(&["a"])),
        sse(&[("message_stop", json!({"type": "message_stop"}))])
    );
    mock(&server, sse_response(body)).await;
    let p = provider(settings(
        &server.uri(),
        "LEGIO_TEST_ANTHROPIC_BADJSON",
        true,
    ));
    let message = failed(p.call(simple_request()).await.unwrap_err());
    assert!(message.contains("invalid JSON in the stream"), "{message}");
}

#[tokio::test]
async fn malformed_whole_body_is_an_error() {
    let server = MockServer::start().await;
    mock(
        &server,
        ResponseTemplate::new(200).set_body_raw("{\"content\": [", "application/json"),
    )
    .await;
    let p = provider(settings(
        &server.uri(),
        "LEGIO_TEST_ANTHROPIC_BADBODY",
        false,
    ));
    let message = failed(p.call(simple_request()).await.unwrap_err());
    assert!(message.contains("malformed reply"), "{message}");

    let server = MockServer::start().await;
    mock(
        &server,
        ResponseTemplate::new(200).set_body_json(json!({"type": "message", "usage": {}})),
    )
    .await;
    let p = provider(settings(
        &server.uri(),
        "LEGIO_TEST_ANTHROPIC_BADBODY",
        false,
    ));
    let message = failed(p.call(simple_request()).await.unwrap_err());
    assert!(message.contains("no content[]"), "{message}");
}

#[tokio::test]
async fn error_event_in_the_stream_is_an_error() {
    let server = MockServer::start().await;
    let mut events = stream_events(&["Hel"]);
    events.truncate(4);
    events.push((
        "error",
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    ));
    mock(&server, sse_response(sse(&events))).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut request = simple_request();
    request.deltas = Some(tx);
    let p = provider(settings(
        &server.uri(),
        "LEGIO_TEST_ANTHROPIC_ERREVENT",
        true,
    ));
    let message = failed(p.call(request).await.unwrap_err());
    assert!(
        message.contains("overloaded_error: Overloaded"),
        "{message}"
    );
    // Fragments before the error were progress only.
    assert_eq!(rx.try_recv().ok(), Some(StreamDelta::Text("Hel".into())));
}

#[tokio::test]
async fn error_body_is_an_error() {
    let server = MockServer::start().await;
    mock(
        &server,
        ResponseTemplate::new(200).set_body_json(json!({"type": "error",
            "error": {"type": "api_error", "message": "Internal server error"}})),
    )
    .await;
    let p = provider(settings(
        &server.uri(),
        "LEGIO_TEST_ANTHROPIC_ERRBODY",
        false,
    ));
    let message = failed(p.call(simple_request()).await.unwrap_err());
    assert!(
        message.contains("api_error: Internal server error"),
        "{message}"
    );
}

#[tokio::test]
async fn unauthorized_is_not_retried_and_names_the_key_variable() {
    let server = MockServer::start().await;
    mock(
        &server,
        ResponseTemplate::new(401).set_body_json(json!({"type": "error",
            "error": {"type": "authentication_error", "message": "invalid x-api-key"}})),
    )
    .await;
    let p = provider(settings(&server.uri(), "LEGIO_TEST_ANTHROPIC_401", true));
    let message = failed(p.call(simple_request()).await.unwrap_err());
    assert!(message.contains("LEGIO_TEST_ANTHROPIC_401"), "{message}");
    assert!(message.contains("401"), "{message}");
    assert_eq!(requests(&server).await.len(), 1);
}

#[test]
fn missing_key_variable_fails_the_build() {
    let variable = "LEGIO_TEST_ANTHROPIC_MISSING_KEY";
    std::env::remove_var(variable);
    let mut s = HttpSettings::new("https://api.anthropic.com/v1", "claude-test-1");
    s.api_key_env = Some(variable.into());
    let err = build_provider("claude", &ProviderSettings::AnthropicMessages(s)).unwrap_err();
    assert_eq!(
        err,
        BuildError::MissingKey {
            provider: "claude".into(),
            variable: variable.into(),
        }
    );
    assert!(err.to_string().contains(variable), "{err}");
}

#[test]
fn build_provider_makes_an_anthropic_provider() {
    let s = settings(
        "https://api.anthropic.com",
        "LEGIO_TEST_ANTHROPIC_BUILD",
        true,
    );
    let p = build_provider("claude", &ProviderSettings::AnthropicMessages(s)).expect("builds");
    assert_eq!(p.capabilities().history, History::Stateless);
    assert!(format!("{p:?}").contains("AnthropicMessages"));
}

/// A server that answers with the head of a chunked event stream, then closes the connection
/// without the final chunk.
async fn cut_stream_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut buffer = vec![0u8; 64 * 1024];
        let mut seen = Vec::new();
        // Read the request head and its body (its length from content-length).
        loop {
            let n = socket.read(&mut buffer).await.unwrap();
            if n == 0 {
                return;
            }
            seen.extend_from_slice(&buffer[..n]);
            let text = String::from_utf8_lossy(&seen).to_lowercase();
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if seen.len() >= end + 4 + length {
                    break;
                }
            }
        }
        let chunk = sse(&stream_events(&["cut"])[..2]);
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{chunk}\r\n",
            chunk.len()
        );
        socket.write_all(response.as_bytes()).await.unwrap();
        // Half a chunk: announces more bytes than it sends, then the connection closes.
        socket
            .write_all(b"400\r\nevent: content_block_delta\ndata: {\"ty")
            .await
            .unwrap();
        socket.flush().await.unwrap();
        drop(socket);
    });
    format!("http://{address}")
}

#[tokio::test]
async fn stream_cut_mid_way_is_an_error() {
    let base = cut_stream_server().await;
    let mut s = settings(&base, "LEGIO_TEST_ANTHROPIC_CUT", true);
    s.retry.max_retries = 0;
    let message = failed(provider(s).call(simple_request()).await.unwrap_err());
    assert!(message.contains("the stream broke"), "{message}");
}

// ---------------------------------------------------------------------------------------------
// Tools
// ---------------------------------------------------------------------------------------------

fn lookup_tool() -> legio_llm::ToolDef {
    legio_llm::ToolDef {
        name: "lookup".into(),
        description: "Look a word up.".into(),
        parameters: json!({"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}),
    }
}

#[tokio::test]
async fn tools_are_offered_with_input_schema_and_streamed_tool_use_is_returned() {
    let server = MockServer::start().await;
    let events = vec![
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_t", "type": "message",
                "role": "assistant", "content": [], "model": "claude-test-1",
                "usage": {"input_tokens": 50, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Checking."}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 1,
                   "content_block": {"type": "tool_use", "id": "toolu_01", "name": "lookup", "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"wo"}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "rd\": \"legio\"}"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 1}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 2,
                   "content_block": {"type": "tool_use", "id": "toolu_02", "name": "lookup", "input": {}}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 2}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 30}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    mock(&server, sse_response(sse(&events))).await;
    let p = provider(settings(&server.uri(), "LEGIO_TEST_ANTHROPIC_TOOLS", true));
    assert!(p.capabilities().tools);
    let mut req = simple_request();
    req.tools = vec![lookup_tool()].into();
    let reply = p.call(req).await.expect("a reply");
    assert_eq!(reply.text, "Checking.");
    let calls: Vec<(&str, &str, &str)> = reply
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
        .collect();
    assert_eq!(
        calls,
        [
            ("toolu_01", "lookup", "{\"word\": \"legio\"}"),
            ("toolu_02", "lookup", "{}")
        ]
    );

    let body: Value = requests(&server).await[0].body_json().unwrap();
    assert_eq!(
        body["tools"],
        json!([{"name": "lookup", "description": "Look a word up.",
                "input_schema": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
                "cache_control": {"type": "ephemeral"}}])
    );
}

#[tokio::test]
async fn whole_reply_tool_use_blocks_are_tool_calls_and_no_tools_means_no_tools_key() {
    let server = MockServer::start().await;
    mock(
        &server,
        ResponseTemplate::new(200).set_body_json(json!({
            "id": "msg_w", "type": "message", "role": "assistant", "model": "claude-test-1",
            "content": [{"type": "tool_use", "id": "toolu_9", "name": "lookup", "input": {"word": "x"}}],
            "stop_reason": "tool_use", "usage": {"input_tokens": 9, "output_tokens": 3}
        })),
    )
    .await;
    let p = provider(settings(
        &server.uri(),
        "LEGIO_TEST_ANTHROPIC_TOOLS_W",
        false,
    ));
    let reply = p.call(simple_request()).await.expect("a reply");
    assert_eq!(reply.text, "");
    assert_eq!(reply.tool_calls.len(), 1);
    assert_eq!(reply.tool_calls[0].id, "toolu_9");
    assert_eq!(
        serde_json::from_str::<Value>(&reply.tool_calls[0].arguments).unwrap(),
        json!({"word": "x"})
    );
    let body: Value = requests(&server).await[0].body_json().unwrap();
    assert!(body.get("tools").is_none(), "no tools offered: {body}");
}

#[test]
fn an_own_tool_result_message_after_its_call_becomes_a_user_tool_result_block() {
    // The runtime records a step's results as the agent's own message right after its call.
    let req = request_with(
        vec![
            ("user", vec![text("look it up")]),
            ("lead", vec![call("toolu_1", "lookup", "{\"word\":\"a\"}")]),
            ("lead", vec![result("toolu_1", "found", false)]),
        ],
        "and?",
    );
    let s = settings(
        "http://127.0.0.1:1",
        "LEGIO_TEST_ANTHROPIC_OWN_RESULT",
        false,
    );
    let body = request_body(&s, &req);
    let messages = body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    assert_eq!(messages[1]["content"][0]["type"], "tool_use");
    assert_eq!(messages[2]["content"][0]["type"], "tool_result");
    assert_eq!(messages[2]["content"][0]["tool_use_id"], "toolu_1");
    assert_eq!(messages[2]["content"][1]["text"], "and?");
}

#[tokio::test]
async fn a_reply_cut_at_max_tokens_is_an_error_whole_or_streamed() {
    let server = MockServer::start().await;
    let mut body = whole_body();
    body["stop_reason"] = json!("max_tokens");
    mock(&server, ResponseTemplate::new(200).set_body_json(body)).await;
    let p = provider(settings(&server.uri(), "LEGIO_TEST_ANTHROPIC_CUT", false));
    let e = failed(p.call(simple_request()).await.unwrap_err());
    assert!(
        e.contains("max_tokens") && e.contains("max_output_tokens"),
        "{e}"
    );

    let server = MockServer::start().await;
    let mut events = stream_events(&["half a repl"]);
    for (kind, value) in events.iter_mut() {
        if *kind == "message_delta" {
            value["delta"]["stop_reason"] = json!("max_tokens");
        }
    }
    mock(&server, sse_response(sse(&events))).await;
    let p = provider(settings(&server.uri(), "LEGIO_TEST_ANTHROPIC_CUT2", true));
    let e = failed(p.call(simple_request()).await.unwrap_err());
    assert!(e.contains("max_tokens"), "{e}");
}

#[tokio::test]
async fn streamed_thinking_is_progress_and_never_the_reply() {
    let server = MockServer::start().await;
    let mut events = stream_events(&["Answer."]);
    // A thinking block first (index 0), its deltas and signature, then the text block.
    let thinking = [
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
                   "content_block": {"type": "thinking", "thinking": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
                   "delta": {"type": "thinking_delta", "thinking": "Let me "}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
                   "delta": {"type": "thinking_delta", "thinking": "check."}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
                   "delta": {"type": "signature_delta", "signature": "sig"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
    ];
    events.splice(1..1, thinking);
    events.push(("message_stop", json!({"type": "message_stop"})));
    mock(&server, sse_response(sse(&events))).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut request = simple_request();
    request.deltas = Some(tx);
    let p = provider(settings(&server.uri(), "LEGIO_TEST_ANTHROPIC_THINK", true));
    let reply = p.call(request).await.expect("reply");
    assert_eq!(reply.text, "Answer.");
    let mut fragments = Vec::new();
    while let Ok(f) = rx.try_recv() {
        fragments.push(f);
    }
    assert_eq!(
        fragments,
        [
            StreamDelta::Thinking("Let me ".into()),
            StreamDelta::Thinking("check.".into()),
            StreamDelta::Text("Answer.".into()),
        ]
    );
}
