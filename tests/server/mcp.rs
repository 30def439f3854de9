//! legio as an MCP server on `/mcp`, with a client nobody here wrote: the official Python SDK
//! (`mcp`, PyPI; `tests/fixtures/mcp/client.py`). It lists exactly the tools of its token's
//! agent, calls them (recorded in the log as that agent's call and the result answering it),
//! cannot reach another agent's notebook with any argument, and a missing, wrong or expired
//! token is refused. `scripts/install-mcp-test-deps.sh` installs the SDK; without it these skip
//! (fail under `CI=true`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use legio_core::{AgentName, ConversationKey, Part, Participant};
use legio_runtime::{McpScope, McpTokenKey};
use serde_json::{json, Value};

use super::{messages_of, Harness};

/// The Python with the `mcp` SDK, or `None` (skipped; failing under CI) when missing.
fn python() -> Option<PathBuf> {
    let path = std::env::var_os("LEGIO_MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/mcp-venv/bin/python")
        });
    let has_sdk = std::process::Command::new(&path)
        .args(["-c", "import mcp"])
        .output()
        .is_ok_and(|o| o.status.success());
    if has_sdk {
        Some(path)
    } else {
        legio_tests::component_missing(
            "a Python with the mcp SDK (LEGIO_MCP_PYTHON)",
            "run scripts/install-mcp-test-deps.sh and export what it prints",
        );
        None
    }
}

fn key(harness: &Harness) -> McpTokenKey {
    McpTokenKey::load_or_create(&McpTokenKey::path_for(&harness.runtime.config().store)).unwrap()
}

fn token(harness: &Harness, conversation: &str, agent: &str, ttl: Duration) -> String {
    let scope = McpScope {
        conversation: ConversationKey::new(conversation).unwrap(),
        agent: AgentName::new(agent).unwrap(),
    };
    key(harness).issue(&scope, ttl)
}

/// Runs the Python client against the server with `token` and `calls`; its JSON answer.
async fn client(python: &PathBuf, harness: &Harness, token: &str, calls: Value) -> Value {
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/mcp/client.py");
    let output = tokio::process::Command::new(python)
        .arg(script)
        .arg(harness.url("/mcp"))
        .arg(token)
        .arg(calls.to_string())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // The SDK warns when a session's end is answered otherwise than 200 or 204.
    assert!(!stderr.contains("Session termination failed"), "{stderr}");
    serde_json::from_str(stdout.trim()).unwrap_or_else(|_| {
        panic!(
            "the client printed no JSON: {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_client_gets_exactly_its_agents_tools_and_its_calls_are_recorded() {
    let Some(python) = python() else { return };
    let harness = Harness::start().await;
    let hour = Duration::from_secs(3600);

    // b writes a secret in its notebook over MCP.
    let b = token(&harness, "mcp:1", "b", hour);
    let wrote = client(
        &python,
        &harness,
        &b,
        json!([["append_notebook", {"text": "b's secret"}]]),
    )
    .await;
    assert_eq!(wrote["calls"][0]["error"], false, "{wrote}");

    // a lists exactly its own tools, and no argument reaches b's notebook.
    let a = token(&harness, "mcp:1", "a", hour);
    let calls = json!([
        ["get_history", {}],
        ["list_notebook", {"agent": "b"}],
        ["read_notebook", {"agent": "b", "entry": 1}],
        ["read_notebook", {"entry": 1}],
        ["dispatch", {"agents": ["b"], "message": "hi"}],
    ]);
    let got = client(&python, &harness, &a, calls).await;
    let listed: Vec<String> = serde_json::from_value(got["tools"].clone()).unwrap();
    let own: Vec<String> = harness
        .runtime
        .agent_tools(&AgentName::new("a").unwrap())
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(listed, own);
    assert!(!listed.contains(&"dispatch".to_owned()), "{listed:?}");
    for call in got["calls"].as_array().unwrap() {
        let text = call["text"].as_str().unwrap();
        assert!(!text.contains("b's secret"), "{call}");
    }
    assert_eq!(
        got["calls"][4]["error"], true,
        "a specialist cannot dispatch: {got}"
    );

    // The orchestrator's token lists dispatch; its notebook view reaches b's (its permission).
    let lead = token(&harness, "mcp:1", "lead", hour);
    let led = client(
        &python,
        &harness,
        &lead,
        json!([["read_notebook", {"agent": "b", "entry": 1}]]),
    )
    .await;
    assert!(
        led["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("dispatch")),
        "{led}"
    );
    assert_eq!(
        led["calls"][0]["text"]
            .as_str()
            .map(|t| t.contains("b's secret")),
        Some(true),
        "{led}"
    );

    // Every call is in the log: the agent's call, then the result answering it, both the
    // agent's own.
    let log = harness.runtime.log();
    let messages: Vec<_> = messages_of(log.as_ref(), &ConversationKey::new("mcp:1").unwrap())
        .into_iter()
        .filter_map(|r| r.event.as_message().cloned())
        .collect();
    let calls: Vec<_> = messages
        .iter()
        .filter(|m| m.parts.iter().any(|p| matches!(p, Part::ToolCall { .. })))
        .collect();
    assert_eq!(calls.len(), 7, "one call message per MCP call");
    for call in calls {
        let Some(Part::ToolCall { id, .. }) = call.parts.first() else {
            panic!()
        };
        let result = messages
            .iter()
            .find(|m| m.reply_to == Some(call.id))
            .unwrap_or_else(|| panic!("no result for {id}"));
        assert!(
            matches!(result.parts.first(), Some(Part::ToolResult { call_id, .. }) if call_id == id)
        );
        assert_eq!(result.sender, call.sender);
        let Participant::Agent(agent) = &call.sender else {
            panic!()
        };
        assert_eq!(call.audience, legio_core::Audience::agent(agent.clone()));
    }
    harness.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_wrong_or_expired_token_is_refused() {
    let Some(python) = python() else { return };
    let harness = Harness::start().await;
    let other = McpTokenKey::load_or_create(&harness._dir.path().join("other-key")).unwrap();
    let foreign = other.issue(
        &McpScope {
            conversation: ConversationKey::new("mcp:1").unwrap(),
            agent: AgentName::new("a").unwrap(),
        },
        Duration::from_secs(60),
    );
    let expired = token(&harness, "mcp:1", "a", Duration::from_secs(1));
    let deadline = Instant::now() + Duration::from_secs(10);
    while key(&harness).verify(&expired).is_ok() {
        assert!(Instant::now() < deadline, "the token never expired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (what, token) in [
        ("missing", "-".to_owned()),
        ("the [server] token", super::TOKEN.to_owned()),
        ("another key's", foreign),
        ("expired", expired),
    ] {
        let got = client(&python, &harness, &token, json!([])).await;
        assert!(got.get("refused").is_some(), "{what} token: {got}");
        assert!(got.get("tools").is_none(), "{what} token: {got}");
    }
    let response = harness
        .client
        .post(harness.url("/mcp"))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::UNAUTHORIZED);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("legio mcp token"),
        "{body}"
    );
    harness.stop().await;
}

/// The claude-code provider, with `legio serve` running, starts the CLI with `--mcp-config`
/// pointing at `/mcp` with a fresh token for its agent and `--allowedTools` for that agent's
/// tools: the fake CLI (fake-claude in mode `mcp`) connects with the Python SDK and calls
/// `dispatch`, so an orchestrator on Claude Code delegates to a specialist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orchestrator_on_claude_code_dispatches_through_the_mcp_endpoint() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let fake =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../legio-llm/tests/fixtures/fake-claude");
    let fake_dir = dir.path().join("fake");
    std::fs::write(dir.path().join("lead.md"), "You lead.").unwrap();
    std::fs::write(dir.path().join("spec.md"), "You help.").unwrap();
    let extra = json!([
        "--fake-dir",
        fake_dir,
        "--fake-mode",
        "mcp",
        "--fake-python",
        python,
        "--fake-mcp-call",
        "dispatch",
        "--fake-mcp-args",
        r#"{"agents": ["a"], "message": "check the figures"}"#,
    ]);
    let text = format!(
        "[store]\npath = \"db\"\n\
[agents.lead]\nrole = \"orchestrator\"\nprompt = \"lead.md\"\nprovider = \"cc\"\n\
[agents.a]\nrole = \"specialist\"\nprompt = \"spec.md\"\nprovider = \"local\"\n\
[providers.cc]\nkind = \"claude-code\"\nexecutable = {:?}\nextra_args = {extra}\n\
[providers.local]\nkind = \"scripted\"\n",
        fake.display().to_string()
    );
    let file = dir.path().join("legio.toml");
    std::fs::write(&file, text).unwrap();
    let config = legio_runtime::RuntimeConfig::load(&file).unwrap();
    let settings = legio_server::ServerSettings::from_config(&config).unwrap();
    let runtime = legio_runtime::Runtime::open(config).await.unwrap();
    let bind: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    let metrics = legio_server::install_metrics().unwrap();
    let server = legio_server::Server::bind(runtime, settings, Some(bind), metrics)
        .await
        .unwrap();
    let runtime = std::sync::Arc::clone(server.runtime());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(server.serve(async move {
        let _ = stopped.await;
    }));

    let posted = runtime.post("mcp:cc", "plan it").await.unwrap();
    let reply = posted.replies[0].outcome.as_ref().expect("lead answers");
    assert!(
        reply.text.starts_with("mcp dispatch: a (message #"),
        "{}",
        reply.text
    );
    assert!(
        reply.text.contains("a read"),
        "a's answer came back: {}",
        reply.text
    );

    // The CLI was told where and what: the endpoint with a bearer token, the agent's tools.
    let argv = std::fs::read(fake_dir.join("call-1.argv")).unwrap();
    let argv: Vec<String> = argv
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let at = argv.iter().position(|a| a == "--allowedTools").unwrap();
    assert!(
        argv[at + 1].split(',').any(|t| t == "mcp__legio__dispatch"),
        "{}",
        argv[at + 1]
    );
    assert!(
        !argv.iter().any(|a| a.contains("Bearer")),
        "the token is not on the command line: {argv:?}"
    );
    assert!(argv.iter().any(|a| a == "--mcp-config"), "{argv:?}");
    // The file the CLI was given (fake-claude keeps a copy; legio removed it after the turn).
    let mcp = std::fs::read_to_string(fake_dir.join("call-1.mcp-config")).unwrap();
    let mcp: Value = serde_json::from_str(&mcp).unwrap();
    assert!(
        mcp["mcpServers"]["legio"]["url"]
            .as_str()
            .unwrap()
            .ends_with("/mcp"),
        "{mcp}"
    );

    // The log: lead's dispatch call and its result, the message to a, a's reply.
    let records = messages_of(
        runtime.log().as_ref(),
        &ConversationKey::new("mcp:cc").unwrap(),
    );
    let messages: Vec<_> = records
        .iter()
        .filter_map(|r| r.event.as_message())
        .collect();
    let call = messages
        .iter()
        .find(|m| {
            m.parts
                .iter()
                .any(|p| matches!(p, Part::ToolCall { name, .. } if name == "dispatch"))
        })
        .expect("the dispatch call is recorded");
    assert_eq!(
        call.sender,
        Participant::Agent(AgentName::new("lead").unwrap())
    );
    assert!(messages
        .iter()
        .any(|m| m.reply_to == Some(call.id) && m.text_content().contains("check the figures")));
    assert!(messages.iter().any(|m| m.reply_to == Some(call.id)
        && matches!(
            m.parts.first(),
            Some(Part::ToolResult {
                is_error: false,
                ..
            })
        )));

    // The next turn resumes the session with a delta: the CLI holds the MCP call, its result and
    // the specialist's reply the result carried, so none of them is sent again.
    let posted = runtime.post("mcp:cc", "and now?").await.unwrap();
    assert!(posted.replies[0].outcome.is_ok(), "{:?}", posted.replies[0]);
    let argv = std::fs::read(fake_dir.join("call-2.argv")).unwrap();
    assert!(
        argv.split(|b| *b == 0).any(|a| a == b"--resume"),
        "the second turn resumes its session"
    );
    let stdin = std::fs::read_to_string(fake_dir.join("call-2.stdin")).unwrap();
    assert!(stdin.contains("and now?"), "{stdin}");
    for held in ["a read", "check the figures", "mcp_", "dispatch"] {
        assert!(!stdin.contains(held), "{held:?} sent again: {stdin}");
    }
    let _ = stop.send(());
    served.await.unwrap().unwrap();
}

/// A session is bound to the scope of the token that opened it: the same session with a token
/// for another agent or conversation is refused (403), with its own token it goes on, and a new
/// session with the other token is that token's (an MCP walkthrough ran a call as another agent
/// in another conversation through a session opened for the first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_serves_only_the_scope_it_was_opened_with() {
    let harness = Harness::start().await;
    let (mine, other) = (
        token(&harness, "mcp:1", "a", Duration::from_secs(60)),
        token(&harness, "mcp:2", "lead", Duration::from_secs(60)),
    );
    let post = |token: &str, session: Option<&str>, body: Value| {
        let mut request = harness
            .client
            .post(harness.url("/mcp"))
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        request.send()
    };
    let initialize = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
            "protocolVersion": "2025-03-26", "capabilities": {},
            "clientInfo": {"name": "walk", "version": "1"}}})
    };
    let opened = post(&mine, None, initialize(1)).await.unwrap();
    assert!(opened.status().is_success(), "{}", opened.status());
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let answer = opened.text().await.unwrap();
    assert!(
        answer.contains(r#""serverInfo":{"name":"legio""#),
        "{answer}"
    );
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let done = post(&mine, Some(&session), initialized).await.unwrap();
    assert!(done.status().is_success(), "{}", done.status());
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let refused = post(&other, Some(&session), list.clone()).await.unwrap();
    assert_eq!(refused.status(), reqwest::StatusCode::FORBIDDEN);
    let body: Value = refused.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("serves agent a in conversation mcp:1"),
        "{body}"
    );
    let listed = post(&mine, Some(&session), list).await.unwrap();
    assert!(listed.status().is_success(), "{}", listed.status());
    // A known method with params of the wrong shape is invalid params, not an unknown method.
    let call = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": {"name": "get_history", "arguments": [1]}});
    let malformed = post(&mine, Some(&session), call).await.unwrap();
    let answer = malformed.text().await.unwrap();
    assert!(
        answer.contains("-32602") && answer.contains("tools/call takes"),
        "{answer}"
    );
    let bogus = json!({"jsonrpc": "2.0", "id": 5, "method": "totally/bogus"});
    let answer = post(&mine, Some(&session), bogus)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(answer.contains("-32601"), "{answer}");
    let theirs = post(&other, None, initialize(3)).await.unwrap();
    assert!(theirs.status().is_success(), "{}", theirs.status());
    // A session this server did not open is refused before rmcp sees it: not bound to
    // whoever names it first (a made-up id, or one ended).
    let ping = json!({"jsonrpc": "2.0", "id": 6, "method": "ping"});
    let made_up = post(&other, Some("made-up"), ping.clone()).await.unwrap();
    assert_eq!(made_up.status(), reqwest::StatusCode::NOT_FOUND);
    let ended = harness
        .client
        .delete(harness.url("/mcp"))
        .bearer_auth(&mine)
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(ended.status(), reqwest::StatusCode::OK);
    let after = post(&other, Some(&session), ping).await.unwrap();
    assert_eq!(
        after.status(),
        reqwest::StatusCode::NOT_FOUND,
        "ended, not rebound"
    );
    harness.stop().await;
}
