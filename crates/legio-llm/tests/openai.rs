//! `openai-chat` and `openai-responses` against local mock servers: the request bodies have the
//! documented shape, streamed and whole replies are read with their usage, and every fault
//! (429 with Retry-After, 500 then success, timeouts, truncated or cut streams, invalid JSON,
//! 401, a lost response id) ends as the right error, never as a partial reply.

use std::time::Duration;

use legio_core::{
    AgentName, Audience, ContextItem, ContextPlan, ConversationKey, DeliveryMode, Message,
    MessageId, Participant, Seq, Timestamp,
};
use legio_llm::openai_chat::OpenAiChat;
use legio_llm::openai_responses::OpenAiResponses;
use legio_llm::{BuildError, HttpSettings, Provider, ProviderError, ProviderRequest, StreamDelta};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn item(seq: u64, sender: &str, text: &str) -> ContextItem {
    let sender = if sender == "user" {
        Participant::User
    } else {
        Participant::Agent(AgentName::new(sender).unwrap())
    };
    let at = Timestamp::from_unix_micros(1_700_000_000_000_000 + seq as i64);
    ContextItem {
        seq: Seq(seq),
        message: Message::text(
            MessageId::from_parts(at, [seq as u8; 10]),
            ConversationKey::new("test:conv").unwrap(),
            sender,
            Audience::All,
            text,
            at,
        ),
        redelivered: false,
    }
}

fn request(mode: DeliveryMode, history: Vec<ContextItem>, new: ContextItem) -> ProviderRequest {
    ProviderRequest {
        conversation: ConversationKey::new("test:conv").unwrap(),
        agent: AgentName::new("ann").unwrap(),
        system_prompt: "You are ann.".into(),
        resume: None,
        plan: ContextPlan {
            mode,
            notice: None,
            up_to: new.seq,
            history,
            new_message: new,
            estimated_tokens: 10,
            summary: None,
        },
        status: None,
        deltas: None,
        tools: Default::default(),
        mcp: None,
    }
}

fn settings(server: &MockServer, stream: bool) -> HttpSettings {
    let mut s = HttpSettings::new(format!("{}/v1", server.uri()), "gpt-4o-mini");
    s.stream = stream;
    s.retry.initial_backoff = Duration::from_millis(5);
    s.retry.max_backoff = Duration::from_millis(50);
    s.read_timeout = Duration::from_secs(5);
    s
}

fn sse(events: &[Value]) -> String {
    let mut body = String::new();
    for e in events {
        body.push_str(&format!("data: {e}\n\n"));
    }
    body
}

fn sse_template(body: String) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(body, "text/event-stream")
}

fn chat_stream(parts: &[&str]) -> String {
    let mut events: Vec<Value> = parts
        .iter()
        .map(|p| json!({"choices": [{"index": 0, "delta": {"content": p}}]}))
        .collect();
    events.push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}));
    events.push(json!({"choices": [], "usage": {"prompt_tokens": 42, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 40}}}));
    format!("{}data: [DONE]\n\n", sse(&events))
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

fn history() -> (Vec<ContextItem>, ContextItem) {
    let mut call = item(2, "ann", "let me look");
    call.message.parts.push(legio_core::Part::ToolCall {
        id: "call_1".into(),
        name: "get_history".into(),
        arguments: "{\"limit\":5}".into(),
    });
    let mut result = item(3, "user", "");
    result.message.parts = vec![legio_core::Part::ToolResult {
        call_id: "call_1".into(),
        content: "five messages".into(),
        is_error: false,
    }];
    (
        vec![
            item(1, "user", "hello"),
            call,
            result,
            item(4, "bob", "I agree"),
        ],
        item(5, "user", "@ann what now?"),
    )
}

#[tokio::test]
async fn chat_request_has_roles_names_and_tool_ids_and_streams_with_usage() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(header("authorization", "Bearer sk-test-chat"))
        .respond_with(sse_template(chat_stream(&["Hel", "lo ", "there"])))
        .mount(&server)
        .await;
    std::env::set_var("LEGIO_TEST_KEY_CHAT", "sk-test-chat");
    let mut s = settings(&server, true);
    s.api_key_env = Some("LEGIO_TEST_KEY_CHAT".into());
    let provider = OpenAiChat::new("openai", s).unwrap();
    let (history, new) = history();
    let mut req = request(DeliveryMode::Full, history, new);
    let (sink, mut deltas) = tokio::sync::mpsc::unbounded_channel();
    req.deltas = Some(sink);
    let reply = provider.call(req).await.unwrap();
    assert_eq!(reply.text, "Hello there");
    let usage = reply.usage.unwrap();
    // The 42 prompt tokens include the 40 cached ones: `input` is the rest (issue 11, defect 3).
    assert_eq!((usage.input, usage.output, usage.cache_read), (2, 7, 40));
    assert_eq!(usage.context_tokens(), 42);
    assert_eq!(reply.provider_session, None);
    let mut fragments = Vec::new();
    while let Ok(StreamDelta::Text(f)) = deltas.try_recv() {
        fragments.push(f);
    }
    assert_eq!(fragments, ["Hel", "lo ", "there"]);

    let body = &bodies(&server).await[0];
    assert_eq!(body["model"], "gpt-4o-mini");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    let messages = body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "tool", "user", "user"]
    );
    assert_eq!(messages[0]["content"], "You are ann.");
    assert_eq!(messages[1]["name"], "user");
    assert_eq!(messages[2]["tool_calls"][0]["id"], "call_1");
    assert_eq!(
        messages[2]["tool_calls"][0]["function"]["name"],
        "get_history"
    );
    assert_eq!(
        messages[2]["tool_calls"][0]["function"]["arguments"],
        "{\"limit\":5}"
    );
    assert!(
        messages[2].get("name").is_none(),
        "the agent's own turn has no name"
    );
    assert_eq!(messages[3]["tool_call_id"], "call_1");
    assert_eq!(messages[3]["content"], "five messages");
    assert_eq!(messages[4]["name"], "bob");
    assert_eq!(
        messages[4]["content"], "[bob]: I agree",
        "a local server gets the sender in the text too"
    );
    assert_eq!(
        messages[1]["content"], "hello",
        "the user's own text goes as it is"
    );
    assert_eq!(
        body["max_tokens"], 4096,
        "the output limit, as compatible servers read it"
    );
    assert_eq!(messages[5]["content"], "@ann what now?");
}

#[tokio::test]
async fn chat_whole_reply_without_usage_is_counted_with_the_models_vocabulary() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "x", "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello world"}, "finish_reason": "stop"}]
        })))
        .mount(&server)
        .await;
    let provider = OpenAiChat::new("local", settings(&server, false)).unwrap();
    let reply = provider
        .call(request(DeliveryMode::Full, vec![], item(1, "user", "hi")))
        .await
        .unwrap();
    assert_eq!(reply.text, "hello world");
    assert_eq!(reply.usage.unwrap().output, 2, "o200k counts two tokens");
    let body = &bodies(&server).await[0];
    assert_eq!(body["stream"], false);
    assert!(body.get("stream_options").is_none());
}

#[tokio::test]
async fn retries_honour_retry_after_and_5xx_then_succeed() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(429).insert_header("retry-after", "0.25"))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(503))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(sse_template(chat_stream(&["ok"])))
        .mount(&server)
        .await;
    let provider = OpenAiChat::new("openai", settings(&server, true)).unwrap();
    let started = std::time::Instant::now();
    let reply = provider
        .call(request(DeliveryMode::Full, vec![], item(1, "user", "hi")))
        .await
        .unwrap();
    assert_eq!(reply.text, "ok");
    assert_eq!(server.received_requests().await.unwrap().len(), 3);
    // The backoff settings allow 50 ms at most; the server asked for 250 ms. A lower bound on a
    // sleep cannot be flaky (a sleep never ends early), and 250 ms keeps the test short.
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "Retry-After was honoured"
    );
}

#[tokio::test]
async fn retries_are_bounded() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(500).set_body_string("boom"))
        .mount(&server)
        .await;
    let mut s = settings(&server, true);
    s.retry.max_retries = 2;
    let provider = OpenAiChat::new("openai", s).unwrap();
    let e = provider
        .call(request(DeliveryMode::Full, vec![], item(1, "user", "hi")))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("gave up after 2 retries"), "{e}");
    assert_eq!(server.received_requests().await.unwrap().len(), 3);
}

#[tokio::test]
async fn unauthorised_is_not_retried_and_names_the_key_variable() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(401)
                .set_body_json(json!({"error": {"message": "Incorrect API key"}})),
        )
        .mount(&server)
        .await;
    std::env::set_var("LEGIO_TEST_KEY_401", "sk-wrong");
    let mut s = settings(&server, true);
    s.api_key_env = Some("LEGIO_TEST_KEY_401".into());
    let provider = OpenAiChat::new("openai", s).unwrap();
    let e = provider
        .call(request(DeliveryMode::Full, vec![], item(1, "user", "hi")))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("401") && e.contains("LEGIO_TEST_KEY_401"), "{e}");
    assert!(
        !e.contains("sk-wrong"),
        "the key never appears in errors: {e}"
    );
    assert_eq!(server.received_requests().await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_missing_key_variable_is_named_at_build_time() {
    let server = MockServer::start().await;
    let mut s = settings(&server, true);
    s.api_key_env = Some("LEGIO_TEST_KEY_NEVER_SET".into());
    let e = OpenAiChat::new("openai", s).unwrap_err();
    assert!(
        matches!(&e, BuildError::MissingKey { variable, .. } if variable == "LEGIO_TEST_KEY_NEVER_SET")
    );
    assert!(e.to_string().contains("LEGIO_TEST_KEY_NEVER_SET"));
}

#[tokio::test]
async fn a_read_timeout_is_an_error_after_bounded_retries() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(sse_template(chat_stream(&["late"])).set_delay(Duration::from_millis(800)))
        .mount(&server)
        .await;
    let mut s = settings(&server, true);
    s.read_timeout = Duration::from_millis(150);
    s.retry.max_retries = 1;
    let provider = OpenAiChat::new("openai", s).unwrap();
    let e = provider
        .call(request(DeliveryMode::Full, vec![], item(1, "user", "hi")))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("timed out"), "{e}");
    assert_eq!(server.received_requests().await.unwrap().len(), 2);
}

#[tokio::test]
async fn truncated_streams_and_invalid_json_are_errors_not_partial_replies() {
    for (body, needle) in [
        // Ends without [DONE].
        (
            sse(&[json!({"choices": [{"delta": {"content": "half a rep"}}]})]),
            "before [DONE]",
        ),
        // Invalid JSON in the stream.
        ("data: {\"choices\": [\n\n".to_owned(), "invalid JSON"),
        // An error object mid-stream.
        (
            sse(&[json!({"error": {"message": "overloaded"}})]),
            "overloaded",
        ),
    ] {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(sse_template(body))
            .mount(&server)
            .await;
        let provider = OpenAiChat::new("openai", settings(&server, true)).unwrap();
        let e = provider
            .call(request(DeliveryMode::Full, vec![], item(1, "user", "hi")))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{needle}: {e}");
    }
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw("{not json", "application/json"))
        .mount(&server)
        .await;
    let provider = OpenAiChat::new("openai", settings(&server, false)).unwrap();
    let e = provider
        .call(request(DeliveryMode::Full, vec![], item(1, "user", "hi")))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("invalid JSON"), "{e}");
}

/// A server that sends half a stream and closes the connection.
async fn cutting_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut buffer = vec![0u8; 65536];
            let _ = socket.read(&mut buffer).await;
            let chunk = "data: {\"choices\":[{\"delta\":{\"content\":\"partial\"}}]}\n\n";
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{chunk}\r\n",
                chunk.len()
            );
            let _ = socket.write_all(head.as_bytes()).await;
            let _ = socket.flush().await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            drop(socket);
        }
    });
    format!("http://{address}/v1")
}

#[tokio::test]
async fn a_stream_cut_mid_way_is_an_error() {
    let mut s = HttpSettings::new(cutting_server().await, "m");
    s.retry.max_retries = 0;
    let provider = OpenAiChat::new("local", s).unwrap();
    let (sink, _deltas) = tokio::sync::mpsc::unbounded_channel();
    let mut req = request(DeliveryMode::Full, vec![], item(1, "user", "hi"));
    req.deltas = Some(sink);
    let e = provider.call(req).await.unwrap_err().to_string();
    assert!(
        e.contains("stream broke") || e.contains("before [DONE]"),
        "{e}"
    );
}

fn responses_completed(id: &str, text: &str) -> Value {
    json!({
        "id": id, "object": "response", "status": "completed",
        "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}],
        "usage": {"input_tokens": 30, "output_tokens": 5, "input_tokens_details": {"cached_tokens": 12}}
    })
}

fn responses_stream(id: &str, parts: &[&str]) -> String {
    let mut events =
        vec![json!({"type": "response.created", "response": {"id": id, "status": "in_progress"}})];
    for p in parts {
        events.push(json!({"type": "response.output_text.delta", "delta": p}));
    }
    events.push(
        json!({"type": "response.completed", "response": responses_completed(id, &parts.concat())}),
    );
    let mut body = String::new();
    for e in events {
        body.push_str(&format!(
            "event: {}\ndata: {e}\n\n",
            e["type"].as_str().unwrap()
        ));
    }
    body
}

#[tokio::test]
async fn responses_bootstraps_then_resumes_with_only_the_delta() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/responses"))
        .respond_with(sse_template(responses_stream(
            "resp_1",
            &["first ", "answer"],
        )))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/responses"))
        .respond_with(sse_template(responses_stream("resp_2", &["second"])))
        .mount(&server)
        .await;
    let provider = OpenAiResponses::new("openai", settings(&server, true)).unwrap();
    assert!(provider.capabilities().history.is_stateful());

    let first = request(
        DeliveryMode::Bootstrap,
        vec![
            item(1, "user", "old message one"),
            item(2, "bob", "old message two"),
        ],
        item(3, "user", "@ann first question"),
    );
    let reply = provider.call(first).await.unwrap();
    assert_eq!(reply.text, "first answer");
    assert_eq!(reply.provider_session.as_deref(), Some("resp_1"));
    let usage = reply.usage.unwrap();
    // The 30 input tokens include the 12 cached ones (issue 11, defect 3).
    assert_eq!((usage.input, usage.output, usage.cache_read), (18, 5, 12));
    assert_eq!(usage.context_tokens(), 30);

    let mut second = request(
        DeliveryMode::Delta,
        vec![item(5, "bob", "a new remark")],
        item(6, "user", "@ann second question"),
    );
    second.resume = reply.provider_session.clone();
    let reply = provider.call(second).await.unwrap();
    assert_eq!(reply.provider_session.as_deref(), Some("resp_2"));

    let bodies = bodies(&server).await;
    assert!(bodies[0].get("previous_response_id").is_none());
    assert_eq!(bodies[0]["instructions"], "You are ann.");
    assert_eq!(bodies[0]["store"], true);
    let first_input = bodies[0]["input"].to_string();
    assert!(first_input.contains("old message one") && first_input.contains("first question"));
    assert_eq!(bodies[1]["previous_response_id"], "resp_1");
    let second_input = bodies[1]["input"].to_string();
    assert!(second_input.contains("a new remark") && second_input.contains("second question"));
    for old in ["old message one", "old message two", "first question"] {
        assert!(
            !second_input.contains(old),
            "{old} was already sent: {second_input}"
        );
    }
}

#[tokio::test]
async fn responses_unknown_previous_id_is_a_lost_session() {
    for template in [
        ResponseTemplate::new(404).set_body_json(json!({"error": {"message": "Previous response with id 'resp_gone' not found.", "code": "previous_response_not_found"}})),
        ResponseTemplate::new(400).set_body_json(json!({"error": {"message": "not found", "code": "previous_response_not_found"}})),
    ] {
        let server = MockServer::start().await;
        Mock::given(method("POST")).respond_with(template).mount(&server).await;
        let provider = OpenAiResponses::new("openai", settings(&server, true)).unwrap();
        let mut req = request(DeliveryMode::Delta, vec![], item(9, "user", "@ann again"));
        req.resume = Some("resp_gone".into());
        let e = provider.call(req).await.unwrap_err();
        assert_eq!(
            e,
            ProviderError::SessionLost {
                session: "resp_gone".into()
            }
        );
        assert_eq!(server.received_requests().await.unwrap().len(), 1, "not retried");
    }
    // A 404 that does not name the id is a misconfiguration, not a lost session.
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(404).set_body_string("no such route"))
        .mount(&server)
        .await;
    let provider = OpenAiResponses::new("openai", settings(&server, true)).unwrap();
    let mut req = request(DeliveryMode::Delta, vec![], item(9, "user", "@ann again"));
    req.resume = Some("resp_kept".into());
    let e = provider.call(req).await.unwrap_err();
    assert!(
        matches!(&e, ProviderError::Failed { message } if message.contains("check base_url")),
        "{e:?}"
    );
}

#[tokio::test]
async fn responses_whole_reply_and_stream_faults() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(responses_completed("resp_9", "whole")),
        )
        .mount(&server)
        .await;
    let provider = OpenAiResponses::new("openai", settings(&server, false)).unwrap();
    let reply = provider
        .call(request(
            DeliveryMode::Bootstrap,
            vec![],
            item(1, "user", "hi"),
        ))
        .await
        .unwrap();
    assert_eq!(
        (reply.text.as_str(), reply.provider_session.as_deref()),
        ("whole", Some("resp_9"))
    );

    for (body, needle) in [
        (
            "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"half\"}\n\n".to_owned(),
            "before response.completed",
        ),
        (
            format!("data: {}\n\n", json!({"type": "response.failed", "response": {"id": "r", "status": "failed", "error": {"code": "server_error", "message": "model crashed"}}})),
            "model crashed",
        ),
        ("data: {oops\n\n".to_owned(), "invalid JSON"),
    ] {
        let server = MockServer::start().await;
        Mock::given(method("POST")).respond_with(sse_template(body)).mount(&server).await;
        let provider = OpenAiResponses::new("openai", settings(&server, true)).unwrap();
        let e = provider
            .call(request(DeliveryMode::Bootstrap, vec![], item(1, "user", "hi")))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{needle}: {e}");
    }
}

// ---------------------------------------------------------------------------------------------
// Tools
// ---------------------------------------------------------------------------------------------

fn lookup_tool() -> legio_llm::ToolDef {
    legio_llm::ToolDef {
        name: "lookup".into(),
        description: "Look a word up.".into(),
        parameters: json!({"type": "object", "properties": {"word": {"type": "string"}}}),
    }
}

fn calls_of(reply: &legio_llm::ProviderReply) -> Vec<(String, String, String)> {
    reply
        .tool_calls
        .iter()
        .map(|c| (c.id.clone(), c.name.clone(), c.arguments.clone()))
        .collect()
}

#[tokio::test]
async fn chat_offers_function_tools_and_accumulates_streamed_tool_call_fragments_by_index() {
    let server = MockServer::start().await;
    let events = vec![
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": null, "tool_calls": [
            {"index": 0, "id": "call_a", "type": "function", "function": {"name": "lookup", "arguments": ""}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 1, "id": "call_b", "type": "function", "function": {"name": "lookup", "arguments": "{\"wo"}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": "{\"word\":"}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": "\"x\"}"}}, {"index": 1, "function": {"arguments": "rd\":\"y\"}"}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        json!({"choices": [], "usage": {"prompt_tokens": 60, "completion_tokens": 20}}),
    ];
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(sse_template(format!("{}data: [DONE]\n\n", sse(&events))))
        .mount(&server)
        .await;
    let provider = OpenAiChat::new("openai", settings(&server, true)).unwrap();
    assert!(provider.capabilities().tools);
    let mut req = request(
        DeliveryMode::Full,
        vec![],
        item(1, "user", "look up x and y"),
    );
    req.tools = vec![lookup_tool()].into();
    let reply = provider.call(req).await.unwrap();
    assert_eq!(reply.text, "");
    assert_eq!(
        calls_of(&reply),
        [
            ("call_a".into(), "lookup".into(), "{\"word\":\"x\"}".into()),
            ("call_b".into(), "lookup".into(), "{\"word\":\"y\"}".into()),
        ]
    );
    let body = &bodies(&server).await[0];
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "function": {"name": "lookup", "description": "Look a word up.",
            "parameters": {"type": "object", "properties": {"word": {"type": "string"}}}}}])
    );
}

#[tokio::test]
async fn chat_whole_reply_tool_calls_are_returned_and_no_tools_sends_no_tools_key() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "x", "object": "chat.completion",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
                "tool_calls": [{"id": "call_z", "type": "function", "function": {"name": "lookup", "arguments": "{\"word\":\"z\"}"}}]}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 5}
        })))
        .mount(&server)
        .await;
    let provider = OpenAiChat::new("local", settings(&server, false)).unwrap();
    let reply = provider
        .call(request(DeliveryMode::Full, vec![], item(1, "user", "z?")))
        .await
        .unwrap();
    assert_eq!(
        calls_of(&reply),
        [("call_z".into(), "lookup".into(), "{\"word\":\"z\"}".into())]
    );
    let body = &bodies(&server).await[0];
    assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());
}

#[tokio::test]
async fn responses_offers_tools_returns_function_calls_and_sends_results_as_function_call_output() {
    let server = MockServer::start().await;
    let with_call = json!({
        "id": "resp_t1", "object": "response", "status": "completed",
        "output": [{"type": "function_call", "id": "fc_1", "call_id": "call_r1", "name": "lookup", "arguments": "{\"word\":\"q\"}"}],
        "usage": {"input_tokens": 10, "output_tokens": 4}
    });
    let mut body = String::new();
    for e in [
        json!({"type": "response.created", "response": {"id": "resp_t1", "status": "in_progress"}}),
        json!({"type": "response.function_call_arguments.delta", "delta": "{\"word\""}),
        json!({"type": "response.completed", "response": with_call}),
    ] {
        body.push_str(&format!(
            "event: {}\ndata: {e}\n\n",
            e["type"].as_str().unwrap()
        ));
    }
    Mock::given(method("POST"))
        .and(path("/v1/responses"))
        .respond_with(sse_template(body))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/responses"))
        .respond_with(sse_template(responses_stream(
            "resp_t2",
            &["q means quiet"],
        )))
        .mount(&server)
        .await;
    let provider = OpenAiResponses::new("openai", settings(&server, true)).unwrap();
    let mut first = request(
        DeliveryMode::Bootstrap,
        vec![],
        item(1, "user", "@ann what is q?"),
    );
    first.tools = vec![lookup_tool()].into();
    let reply = provider.call(first).await.unwrap();
    assert_eq!(
        calls_of(&reply),
        [("call_r1".into(), "lookup".into(), "{\"word\":\"q\"}".into())]
    );
    assert_eq!(reply.provider_session.as_deref(), Some("resp_t1"));

    // The next step continues the session with only the result: the agent's own message.
    let mut result = item(3, "ann", "");
    result.message.parts = vec![legio_core::Part::ToolResult {
        call_id: "call_r1".into(),
        content: "quiet".into(),
        is_error: false,
    }];
    let mut second = request(DeliveryMode::Delta, vec![], result);
    second.resume = reply.provider_session.clone();
    second.tools = vec![lookup_tool()].into();
    let reply = provider.call(second).await.unwrap();
    assert_eq!(reply.text, "q means quiet");
    assert!(reply.tool_calls.is_empty());

    let bodies = bodies(&server).await;
    assert_eq!(
        bodies[0]["tools"],
        json!([{"type": "function", "name": "lookup", "description": "Look a word up.",
            "parameters": {"type": "object", "properties": {"word": {"type": "string"}}}}])
    );
    assert_eq!(bodies[1]["previous_response_id"], "resp_t1");
    assert_eq!(
        bodies[1]["input"],
        json!([{"type": "function_call_output", "call_id": "call_r1", "output": "quiet"}]),
        "only the result, as a function_call_output, and no empty message"
    );
}

#[tokio::test]
async fn a_cut_reply_or_an_out_of_range_tool_index_is_an_error() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "half a rep"}, "finish_reason": "length"}]
        })))
        .mount(&server)
        .await;
    let provider = OpenAiChat::new("local", settings(&server, false)).unwrap();
    let e = provider
        .call(request(DeliveryMode::Full, vec![], item(1, "user", "hi")))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("output limit"), "{e}");

    for body in [
        format!(
            "{}data: [DONE]\n\n",
            sse(&[
                json!({"choices": [{"delta": {"content": "half"}}]}),
                json!({"choices": [{"delta": {}, "finish_reason": "length"}]}),
            ])
        ),
        format!(
            "{}data: [DONE]\n\n",
            sse(&[json!({"choices": [{"delta": {"tool_calls": [
                {"index": u64::MAX, "id": "c", "function": {"name": "f", "arguments": "{}"}}
            ]}}]})])
        ),
    ] {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(sse_template(body))
            .mount(&server)
            .await;
        let provider = OpenAiChat::new("local", settings(&server, true)).unwrap();
        let e = provider
            .call(request(DeliveryMode::Full, vec![], item(1, "user", "hi")))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("output limit") || e.contains("out-of-range"),
            "{e}"
        );
    }
}

/// The issue-17 wire shapes of `openai-chat`: the output limit in the field each API reads,
/// `tool_choice` sent explicitly, tools sent non-streamed when `stream_tools` is off, sender
/// labels as a setting, and `max_output_tokens` for `openai-responses`.
#[test]
fn output_limits_tool_choice_stream_tools_and_sender_labels() {
    let (history, new) = history();
    let mut req = request(DeliveryMode::Full, history, new);
    let mut local = HttpSettings::new("http://127.0.0.1:8080/v1", "smol");
    local.max_output_tokens = 300;
    let body = legio_llm::openai_chat::request_body(&local, &req);
    assert_eq!(body["max_tokens"], 300);
    assert!(body.get("max_completion_tokens").is_none());
    assert!(
        body.get("tool_choice").is_none(),
        "no tools, no tool_choice"
    );

    let mut openai = HttpSettings::new("https://api.openai.com/v1", "gpt-5-mini");
    openai.max_output_tokens = 700;
    let body = legio_llm::openai_chat::request_body(&openai, &req);
    assert_eq!(body["max_completion_tokens"], 700);
    assert!(body.get("max_tokens").is_none());
    assert_eq!(
        body["messages"][4]["content"], "I agree",
        "OpenAI reads `name`: no label by default"
    );
    assert_eq!(body["messages"][4]["name"], "bob");

    req.tools = vec![lookup_tool()].into();
    let body = legio_llm::openai_chat::request_body(&local, &req);
    assert_eq!(body["tool_choice"], "auto");
    assert_eq!(body["stream"], true);
    local.stream_tools = false;
    let body = legio_llm::openai_chat::request_body(&local, &req);
    assert_eq!(body["stream"], false, "tools with stream_tools = false");
    assert!(body.get("stream_options").is_none());
    req.tools = Default::default();
    let body = legio_llm::openai_chat::request_body(&local, &req);
    assert_eq!(
        body["stream"], true,
        "without tools the stream setting holds"
    );
    local.sender_labels = false;
    let body = legio_llm::openai_chat::request_body(&local, &req);
    assert_eq!(body["messages"][4]["content"], "I agree");

    let mut responses = HttpSettings::new("https://api.openai.com/v1", "gpt-4o-mini");
    responses.max_output_tokens = 900;
    let body = legio_llm::openai_responses::request_body(&responses, &req);
    assert_eq!(body["max_output_tokens"], 900);
}

/// llama.cpp's server ends an interrupted stream with the role chunk and `[DONE]`: no text, no
/// finish_reason. That is an error, never an empty reply; so is a stream that stops mid-text
/// without a finish_reason, and a finished reply with nothing in it.
#[tokio::test]
async fn an_interrupted_or_empty_stream_is_an_error_never_an_empty_reply() {
    let role =
        json!({"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": null}]});
    let text = json!({"choices": [{"index": 0, "delta": {"content": "Once upon"}, "finish_reason": null}]});
    let stop = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
    for (events, needle) in [
        (vec![role.clone()], "no finish_reason, no text"),
        (vec![role.clone(), text], "9 characters"),
        (vec![role, stop], "the reply is empty"),
    ] {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(sse_template(format!("{}data: [DONE]\n\n", sse(&events))))
            .mount(&server)
            .await;
        let provider = OpenAiChat::new("local", settings(&server, true)).unwrap();
        let e = provider
            .call(request(DeliveryMode::Full, vec![], item(1, "user", "hi")))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{needle}: {e}");
    }
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": ""}, "finish_reason": "stop"}]
        })))
        .mount(&server)
        .await;
    let provider = OpenAiChat::new("local", settings(&server, false)).unwrap();
    let e = provider
        .call(request(DeliveryMode::Full, vec![], item(1, "user", "hi")))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("the reply is empty"), "{e}");
}

/// Errors name the cause: a context overflow (llama.cpp's 400, OpenAI's code) gets the window
/// and the request's size, not "check model"; a stream that closes early says how far it got;
/// an error event with a plain-text payload is shown as the server's words.
#[tokio::test]
async fn errors_name_the_cause_overflow_early_end_and_error_events() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(400).set_body_json(json!({"error": {
            "message": "Requested tokens (2055) exceed context window of 2048",
            "type": "invalid_request_error", "code": "context_length_exceeded"}})))
        .mount(&server)
        .await;
    let mut s = settings(&server, false);
    s.context_window = 2048;
    s.max_output_tokens = 512;
    let provider = OpenAiChat::new("local", s).unwrap();
    let e = provider
        .call(request(DeliveryMode::Full, vec![], item(1, "user", "hi")))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("over the model's context window"), "{e}");
    assert!(
        e.contains("context_window 2048") && e.contains("max_output_tokens 512"),
        "{e}"
    );
    assert!(
        e.contains("Requested tokens (2055)"),
        "the server's words: {e}"
    );
    assert!(!e.contains("check model"), "{e}");

    let role = json!({"choices": [{"index": 0, "delta": {"role": "assistant"}}]});
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(sse_template(sse(&[role])))
        .mount(&server)
        .await;
    let mut s = settings(&server, true);
    s.context_window = 100;
    s.max_output_tokens = 20;
    let provider = OpenAiChat::new("local", s).unwrap();
    let big = "many words of a long request ".repeat(40);
    let e = provider
        .call(request(DeliveryMode::Full, vec![], item(1, "user", &big)))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("before [DONE] after 1 events"), "{e}");
    assert!(
        e.contains("context_window 100") && e.contains("server's log"),
        "{e}"
    );

    // A streamed request with tools that ends at once: the setting to change is named.
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(sse_template(String::new()))
        .mount(&server)
        .await;
    let provider = OpenAiChat::new("local", settings(&server, true)).unwrap();
    let mut req = request(DeliveryMode::Full, vec![], item(1, "user", "hi"));
    req.tools = vec![lookup_tool()].into();
    let e = provider.call(req).await.unwrap_err().to_string();
    assert!(
        e.contains("after 0 events") && e.contains("stream_tools = false"),
        "{e}"
    );

    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(sse_template(
            "event: error\ndata: Automatic streaming tool choice is not supported\n\n".into(),
        ))
        .mount(&server)
        .await;
    let provider = OpenAiChat::new("local", settings(&server, true)).unwrap();
    let e = provider
        .call(request(DeliveryMode::Full, vec![], item(1, "user", "hi")))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("error in the stream: Automatic streaming tool choice"),
        "{e}"
    );
}

#[tokio::test]
async fn streamed_reasoning_is_thinking_progress_and_never_the_reply() {
    // A chat completion server that streams reasoning beside the text (llama.cpp, vLLM,
    // DeepSeek: `reasoning_content`; OpenRouter, Ollama: `reasoning`).
    let server = MockServer::start().await;
    let events = vec![
        json!({"choices": [{"index": 0, "delta": {"reasoning_content": "Weighing "}}]}),
        json!({"choices": [{"index": 0, "delta": {"reasoning": "options."}}]}),
        json!({"choices": [{"index": 0, "delta": {"content": "Go."}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
    ];
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(sse_template(format!("{}data: [DONE]\n\n", sse(&events))))
        .mount(&server)
        .await;
    let chat = OpenAiChat::new("openai", settings(&server, true)).unwrap();
    let (past, new) = history();
    let mut req = request(DeliveryMode::Full, past, new);
    let (sink, mut deltas) = tokio::sync::mpsc::unbounded_channel();
    req.deltas = Some(sink);
    assert_eq!(chat.call(req).await.unwrap().text, "Go.");
    let mut got = Vec::new();
    while let Ok(f) = deltas.try_recv() {
        got.push(f);
    }
    assert_eq!(
        got,
        [
            StreamDelta::Thinking("Weighing ".into()),
            StreamDelta::Thinking("options.".into()),
            StreamDelta::Text("Go.".into()),
        ]
    );

    // The Responses API: reasoning summaries and reasoning text, then the answer.
    let server = MockServer::start().await;
    let mut body = String::new();
    for e in [
        json!({"type": "response.created", "response": {"id": "resp_t", "status": "in_progress"}}),
        json!({"type": "response.reasoning_summary_text.delta", "delta": "Summary."}),
        json!({"type": "response.reasoning_text.delta", "delta": "Raw."}),
        json!({"type": "response.output_text.delta", "delta": "Done."}),
        json!({"type": "response.completed", "response": responses_completed("resp_t", "Done.")}),
    ] {
        body.push_str(&format!(
            "event: {}\ndata: {e}\n\n",
            e["type"].as_str().unwrap()
        ));
    }
    Mock::given(method("POST"))
        .and(path("/v1/responses"))
        .respond_with(sse_template(body))
        .mount(&server)
        .await;
    let responses = OpenAiResponses::new("openai", settings(&server, true)).unwrap();
    let (past, new) = history();
    let mut req = request(DeliveryMode::Bootstrap, past, new);
    let (sink, mut deltas) = tokio::sync::mpsc::unbounded_channel();
    req.deltas = Some(sink);
    assert_eq!(responses.call(req).await.unwrap().text, "Done.");
    let mut got = Vec::new();
    while let Ok(f) = deltas.try_recv() {
        got.push(f);
    }
    assert_eq!(
        got,
        [
            StreamDelta::Thinking("Summary.".into()),
            StreamDelta::Thinking("Raw.".into()),
            StreamDelta::Text("Done.".into()),
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Prompt caching
// ---------------------------------------------------------------------------------------------

/// The `prompt_cache_key` of `body`, if any.
fn cache_key(body: &Value) -> Option<String> {
    body.get("prompt_cache_key")
        .map(|k| k.as_str().expect("a string key").to_owned())
}

#[test]
fn prompt_cache_key_is_one_per_conversation_and_agent_and_off_when_turned_off() {
    let settings = HttpSettings::new("http://127.0.0.1:1/v1", "gpt-4o-mini");
    let (history, new) = history();
    let full = request(DeliveryMode::Full, history.clone(), new.clone());
    let later = request(DeliveryMode::Full, history, item(9, "bob", "@ann and now?"));
    let mut other_agent = full.clone();
    other_agent.agent = AgentName::new("bob").unwrap();
    let mut other_conversation = full.clone();
    other_conversation.conversation = ConversationKey::new("test:conv2").unwrap();
    let mut resumed = request(DeliveryMode::Delta, vec![], new);
    resumed.resume = Some("resp_1".into());

    let chat = |r: &ProviderRequest| cache_key(&legio_llm::openai_chat::request_body(&settings, r));
    let responses =
        |r: &ProviderRequest| cache_key(&legio_llm::openai_responses::request_body(&settings, r));
    let key = chat(&full).expect("on by default");
    // FNV-1a of "test:conv\0ann": the same after a restart or an upgrade, so a resumed agent
    // session reaches the cache it filled.
    assert_eq!(key, "legio-35c1a7b12e0dada0");
    assert!(
        key.len() <= 64 && !key.contains("conv") && !key.contains("ann"),
        "{key}"
    );
    assert_eq!(
        chat(&later).as_ref(),
        Some(&key),
        "one key for the agent session"
    );
    assert_eq!(responses(&full).as_ref(), Some(&key));
    assert_eq!(
        responses(&resumed).as_ref(),
        Some(&key),
        "not the response id, which changes every turn"
    );
    assert_ne!(chat(&other_agent), Some(key.clone()));
    assert_ne!(chat(&other_conversation), Some(key.clone()));
    assert_ne!(responses(&other_agent), Some(key));

    let mut off = settings.clone();
    off.prompt_cache_key = false;
    let chat_off = legio_llm::openai_chat::request_body(&off, &full);
    assert!(chat_off.get("prompt_cache_key").is_none(), "{chat_off}");
    let responses_off = legio_llm::openai_responses::request_body(&off, &resumed);
    assert!(
        responses_off.get("prompt_cache_key").is_none(),
        "{responses_off}"
    );
}

#[tokio::test]
async fn cached_tokens_are_read_back_whole_and_the_key_goes_on_the_wire() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 2000, "completion_tokens": 3,
                      "prompt_tokens_details": {"cached_tokens": 1920}}
        })))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/responses"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(responses_completed("resp_9", "hello")),
        )
        .mount(&server)
        .await;
    let chat = OpenAiChat::new("openai", settings(&server, false)).unwrap();
    let responses = OpenAiResponses::new("openai-s", settings(&server, false)).unwrap();
    let req = || request(DeliveryMode::Full, vec![], item(1, "user", "hi"));
    let usage = chat.call(req()).await.unwrap().usage.unwrap();
    // The 2000 prompt tokens include the 1920 read from the cache.
    assert_eq!((usage.input, usage.output, usage.cache_read), (80, 3, 1920));
    let mut bootstrap = req();
    bootstrap.plan.mode = DeliveryMode::Bootstrap;
    let usage = responses.call(bootstrap).await.unwrap().usage.unwrap();
    assert_eq!((usage.input, usage.output, usage.cache_read), (18, 5, 12));
    let sent = bodies(&server).await;
    assert_eq!(sent.len(), 2);
    for body in &sent {
        assert_eq!(
            cache_key(body).as_deref(),
            Some("legio-35c1a7b12e0dada0"),
            "{body}"
        );
    }
}
