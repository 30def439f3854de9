//! legio-server on an ephemeral port with a temp log and scripted providers: every endpoint's
//! happy path and errors, streamed turns, history against the log and against what the providers
//! received, auth, graceful shutdown, every response checked against `proto/openapi.yaml`, and
//! the dashboard in headless Chromium where it is installed. (The file lives in the top-level
//! `tests/`; `crates/legio-server/Cargo.toml` declares it as that package's test.)

mod agents_sdk;
mod approvals;
mod behaviours;
mod cluster;
mod door;
mod fuzz;
mod heartbeats;
mod idempotency;
mod limits;
mod mcp;
mod openapi;
mod origins;
mod progress;
mod scopes;
mod sdk;
mod storage;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use legio_core::{can_see, ConversationKey, History, Seq};
use legio_llm::{Provider, ScriptedConfig, ScriptedProvider};
use legio_runtime::{Runtime, RuntimeConfig};
use legio_server::{install_metrics, Server, ShutdownReport};
use legio_store::EventLog;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use openapi::OpenApi;

const TOKEN: &str = "test-token-1234";
const OPERATOR_TOKEN: &str = "operator-token-5678";

/// A running server and what the tests need to look behind it.
struct Harness {
    base: String,
    client: reqwest::Client,
    runtime: Arc<Runtime>,
    providers: HashMap<&'static str, ScriptedProvider>,
    stop: Option<oneshot::Sender<()>>,
    served: Option<JoinHandle<ShutdownReport>>,
    api: OpenApi,
    _dir: tempfile::TempDir,
}

fn write_config(dir: &Path, server: &str, runtime: &str) -> RuntimeConfig {
    write_config_with_store(dir, server, runtime, "")
}

/// Like [`write_config`], with extra lines for the `[store]` table.
fn write_config_with_store(dir: &Path, server: &str, runtime: &str, store: &str) -> RuntimeConfig {
    std::fs::write(dir.join("lead.md"), "You lead.").unwrap();
    std::fs::write(dir.join("spec.md"), "You help.").unwrap();
    let text = format!(
        r#"
[store]
path = "db"
{store}
[runtime]
{runtime}
[server]
{server}
[agents.lead]
role = "orchestrator"
description = "leads"
prompt = "lead.md"
provider = "resumable"
[agents.a]
role = "specialist"
description = "stateless helper"
prompt = "spec.md"
provider = "stateless"
[agents.b]
role = "specialist"
description = "session helper"
prompt = "spec.md"
provider = "fragile"
[providers.resumable]
kind = "scripted"
history = "session"
[providers.stateless]
kind = "scripted"
history = "stateless"
[providers.fragile]
kind = "scripted"
history = "session-not-resumable"
"#
    );
    let file = dir.join("legio.toml");
    std::fs::write(&file, text).unwrap();
    RuntimeConfig::load(&file).unwrap()
}

impl Harness {
    async fn start() -> Self {
        Self::start_with(
            &format!("token = \"{TOKEN}\"\noperator_token = \"{OPERATOR_TOKEN}\"\nbody_limit_bytes = 65536"),
            Duration::ZERO,
        )
        .await
    }

    async fn start_with(server: &str, latency: Duration) -> Self {
        Self::start_config(server, "history_window = 4", latency).await
    }

    /// A server whose `[server]` and `[runtime]` sections hold `server` and `runtime`.
    async fn start_config(server: &str, runtime: &str, latency: Duration) -> Self {
        Self::start_full(server, runtime, "", latency).await
    }

    /// Like [`Harness::start_config`], with extra lines for the `[store]` table.
    async fn start_full(server: &str, runtime: &str, store: &str, latency: Duration) -> Self {
        Self::start_in(
            tempfile::tempdir().unwrap(),
            server,
            runtime,
            store,
            latency,
        )
        .await
    }

    /// Like [`Harness::start_full`], in a prepared folder (its `db` may be a link elsewhere).
    async fn start_in(
        dir: tempfile::TempDir,
        server: &str,
        runtime: &str,
        store: &str,
        latency: Duration,
    ) -> Self {
        Self::start_node(dir, server, runtime, store, latency, None).await
    }

    /// Like [`Harness::start_in`]; with `node`, the runtime's node id in its cluster (a
    /// `[store]` on the NATS backend).
    async fn start_node(
        dir: tempfile::TempDir,
        server: &str,
        runtime: &str,
        store: &str,
        latency: Duration,
        node: Option<&str>,
    ) -> Self {
        let bind: SocketAddr = "127.0.0.1:0".parse().unwrap();
        Self::start_bound(dir, server, runtime, store, latency, node, bind).await
    }

    /// Like [`Harness::start_node`], listening on `bind` (`0.0.0.0:0`: every address; the
    /// harness then calls it on 127.0.0.1).
    async fn start_bound(
        dir: tempfile::TempDir,
        server: &str,
        runtime: &str,
        store: &str,
        latency: Duration,
        node: Option<&str>,
        bind: SocketAddr,
    ) -> Self {
        let config = write_config_with_store(dir.path(), server, runtime, store);
        let mut providers = HashMap::new();
        let mut overrides: HashMap<String, Arc<dyn Provider>> = HashMap::new();
        for (name, history) in [
            ("resumable", History::Session { resumable: true }),
            ("stateless", History::Stateless),
            ("fragile", History::Session { resumable: false }),
        ] {
            let provider = ScriptedProvider::new(ScriptedConfig {
                latency,
                ..ScriptedConfig::new(history)
            });
            overrides.insert(name.to_owned(), Arc::new(provider.clone()));
            providers.insert(name, provider);
        }
        let settings = legio_server::ServerSettings::from_config(&config).unwrap();
        let mut builder = Runtime::builder(config).providers(overrides);
        if let Some(node) = node {
            builder = builder.node(node);
        }
        let runtime = builder.open().await.unwrap();
        let metrics = install_metrics().unwrap();
        let server = Server::bind(runtime, settings, Some(bind), metrics)
            .await
            .unwrap();
        let mut addr = server.local_addr().unwrap();
        if addr.ip().is_unspecified() {
            addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        let runtime = Arc::clone(server.runtime());
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(async move {
            server
                .serve(async move {
                    let _ = stopped.await;
                })
                .await
                .unwrap()
        });
        Self {
            base: format!("http://{addr}"),
            client: reqwest::Client::new(),
            runtime,
            providers,
            stop: Some(stop),
            served: Some(served),
            api: OpenApi::load(),
            _dir: dir,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A request with the API token.
    fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.client.get(self.url(path)).bearer_auth(TOKEN)
    }

    fn operator(&self, path: &str) -> reqwest::RequestBuilder {
        self.client.get(self.url(path)).bearer_auth(OPERATOR_TOKEN)
    }

    /// Sends, checks the response against the OpenAPI document (`template` is the documented
    /// path), and returns the status and the JSON body.
    async fn call(
        &self,
        method: &str,
        template: &str,
        request: reqwest::RequestBuilder,
    ) -> (StatusCode, Value) {
        let response = request.send().await.unwrap();
        let status = response.status();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let text = response.text().await.unwrap();
        let body: Value = if content_type.starts_with("application/json") {
            serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{template}: bad JSON {e}: {text}"))
        } else {
            Value::String(text)
        };
        self.api
            .check(method, template, status.as_u16(), &content_type, &body);
        if status.is_client_error() || status.is_server_error() {
            assert!(
                body["error"]["code"].is_string() && body["error"]["message"].is_string(),
                "{method} {template}: error without a JSON error body: {body}"
            );
        }
        (status, body)
    }

    async fn turn(&self, conversation: &str, content: &str) -> Value {
        let (status, body) = self
            .call(
                "post",
                "/sessions/{id}/turns",
                self.client
                    .post(self.url(&format!("/sessions/{conversation}/turns")))
                    .bearer_auth(TOKEN)
                    .json(&json!({"content": content})),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }

    async fn stop(mut self) -> ShutdownReport {
        let _ = self.stop.take().unwrap().send(());
        self.served.take().unwrap().await.unwrap()
    }
}

fn messages_of(log: &dyn EventLog, key: &ConversationKey) -> Vec<legio_core::Record> {
    log.conversation_events(key, Seq::ZERO, 100_000)
        .unwrap()
        .into_iter()
        .filter(|r| r.event.as_message().is_some())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_meta_and_auth() {
    let h = Harness::start().await;
    for path in ["/healthz", "/readyz"] {
        let (status, _) = h.call("get", path, h.client.get(h.url(path))).await;
        assert_eq!(status, StatusCode::OK, "{path} needs no token");
    }
    let (status, body) = h.call("get", "/meta", h.client.get(h.url("/meta"))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"]["code"], "unauthorized");
    let (status, _) = h
        .call(
            "get",
            "/meta",
            h.client.get(h.url("/meta")).bearer_auth("wrong"),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, meta) = h.call("get", "/meta", h.get("/meta")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        meta["capabilities"]["history"],
        json!(["compacted", "full"])
    );
    let roster: Vec<(&str, &str, &str)> = meta["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["name"].as_str().unwrap(),
                a["role"].as_str().unwrap(),
                a["history"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        roster,
        [
            ("lead", "orchestrator", "session"),
            ("a", "specialist", "stateless"),
            ("b", "specialist", "session-not-resumable")
        ]
    );
    // Every guarded endpoint refuses a missing token; operator endpoints want their own token.
    for (method, path) in h.api.operations() {
        if path == "/healthz" || path == "/readyz" {
            continue;
        }
        let concrete = path
            .replace("{id}", "t:auth")
            .replace("{what}", "agents")
            .replace("{call_id}", "call_1");
        let request = match method.as_str() {
            "get" => h.client.get(h.url(&concrete)),
            _ => h.client.post(h.url(&concrete)).json(&json!({})),
        };
        let (status, _) = h.call(&method, &path, request).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}");
    }
    let (status, _) = h
        .call("get", "/operator/verify", h.get("/operator/verify"))
        .await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "the API token does not open operator endpoints"
    );
    let (status, report) = h
        .call("get", "/operator/verify", h.operator("/operator/verify"))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(report["clean"], true);
    // Unknown routes and methods are JSON errors too.
    let (status, body) = h.call("get", "/nope", h.get("/nope")).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    let (status, _) = h
        .call(
            "delete",
            "/meta",
            h.client.delete(h.url("/meta")).bearer_auth(TOKEN),
        )
        .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_and_their_errors_store_nothing_partial() {
    // The strict mode, where an unknown `@handle` refuses the turn (the default is plain text:
    // `an_unknown_handle_is_plain_text_and_named_in_the_reply`).
    let h = Harness::start_config(
        &format!(
            "token = \"{TOKEN}\"\noperator_token = \"{OPERATOR_TOKEN}\"\nbody_limit_bytes = 65536"
        ),
        "history_window = 4\nunknown_mentions = \"error\"",
        Duration::ZERO,
    )
    .await;
    let body = h.turn("t:turns", "hello").await;
    let replies = body["replies"].as_array().unwrap();
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0]["agent"], "lead");
    assert!(replies[0]["content"].as_str().unwrap().contains("answers"));
    assert!(replies[0]["error"].is_null());
    let body = h.turn("t:turns", "@a @b compare").await;
    let agents: Vec<&str> = body["replies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["agent"].as_str().unwrap())
        .collect();
    assert_eq!(agents, ["a", "b"]);
    let log = Arc::clone(h.runtime.log());
    let key = ConversationKey::new("t:turns").unwrap();
    let stored = log.last_seq();
    // Each reply's seq holds that reply.
    for reply in body["replies"].as_array().unwrap() {
        let seq = Seq(reply["seq"].as_u64().unwrap());
        let record = log.read_range(seq, seq, 1).unwrap().remove(0);
        let message = record.event.as_message().unwrap();
        assert_eq!(message.text_content(), reply["content"].as_str().unwrap());
        assert_eq!(
            message.id.to_string(),
            reply["message_id"].as_str().unwrap()
        );
    }

    let post = |path: &str| h.client.post(h.url(path)).bearer_auth(TOKEN);
    let cases: Vec<(reqwest::RequestBuilder, u16, &str)> = vec![
        (
            post("/sessions/t:turns/turns")
                .header("content-type", "application/json")
                .body("{\"content\": "),
            400,
            "invalid_json",
        ),
        (
            post("/sessions/t:turns/turns").json(&json!({"content": "x", "extra": 1})),
            422,
            "invalid_body",
        ),
        (
            post("/sessions/t:turns/turns").json(&json!({"text": "x"})),
            422,
            "invalid_body",
        ),
        (
            post("/sessions/t:turns/turns").body("{\"content\": \"x\"}"),
            415,
            "unsupported_media_type",
        ),
        (
            post(&format!("/sessions/{}/turns", "k".repeat(300))).json(&json!({"content": "x"})),
            400,
            "bad_conversation_key",
        ),
        (
            post("/sessions/t:turns/turns").json(&json!({"content": "@zed hi"})),
            422,
            "unknown_mention",
        ),
        (
            post("/sessions/t:turns/turns").json(&json!({"content": "hi", "sender": "zed"})),
            404,
            "unknown_agent",
        ),
        (
            post("/sessions/t:turns/turns").json(&json!({"content": "   "})),
            422,
            "empty_message",
        ),
        (
            post("/sessions/t:turns/turns").json(&json!({"content": "x".repeat(70_000)})),
            413,
            "body_too_large",
        ),
        (
            post("/sessions/t:turns/turns")
                .header("accept", "text/event-stream")
                .json(&json!({"content": "@zed hi"})),
            422,
            "unknown_mention",
        ),
    ];
    for (request, want, code) in cases {
        let (status, body) = h.call("post", "/sessions/{id}/turns", request).await;
        assert_eq!(status.as_u16(), want, "{code}: {body}");
        assert_eq!(body["error"]["code"], code, "{body}");
    }
    assert_eq!(log.last_seq(), stored, "a refused turn stores nothing");
    assert_eq!(messages_of(log.as_ref(), &key).len(), 5);
    h.stop().await;
}

/// The field at fault is a refusal's `param`, in the client's words (found by a host's
/// walkthrough: `param` null, "unknown agent" for a sender, a Rust type name); a reserved key's
/// history is refused as a turn there is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_body_names_its_field() {
    let h = Harness::start().await;
    let post = |path: &str| h.client.post(h.url(path)).bearer_auth(TOKEN);
    let tool = json!({"description": "no name"});
    let fields: Vec<(Value, Option<&str>, &str)> = vec![
        (json!([]), None, "expected a JSON object"),
        (json!({"content": 1}), Some("content"), "expected a string"),
        (json!({"text": "x"}), Some("text"), "unknown field"),
        (json!({}), Some("content"), "missing field"),
        (
            json!({"content": "hi", "tools": [tool]}),
            Some("tools[0].name"),
            "missing field",
        ),
        (
            json!({"content": "hi", "sender": "zed"}),
            Some("sender"),
            "sender: ",
        ),
    ];
    for (sent, param, says) in fields {
        let request = post("/sessions/t:fields/turns").json(&sent);
        let (_, body) = h.call("post", "/sessions/{id}/turns", request).await;
        let error = &body["error"];
        assert_eq!(error["param"].as_str(), param, "{sent}: {body}");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(says), "{sent}: {message}");
        assert!(
            !message.contains("Body") && !message.contains("Failed to deserialize"),
            "{message}"
        );
    }
    let reserved = h.get("/sessions/legio:memory/history");
    let (status, body) = h.call("get", "/sessions/{id}/history", reserved).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["code"], "bad_conversation_key", "{body}");
    assert_eq!(
        h.runtime.log().last_seq(),
        legio_core::Seq::ZERO,
        "nothing stored"
    );
    h.stop().await;
}

/// Issue 11, defect 4: an `@handle` that names no agent is plain text: the turn goes where its
/// real mentions send it, and the reply names the handles that matched nobody (JSON and stream).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_handle_is_plain_text_and_named_in_the_reply() {
    let h = Harness::start().await;
    let body = h.turn("t:handles", "ask @zed about @a's plan").await;
    let agents: Vec<&str> = body["replies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["agent"].as_str().unwrap())
        .collect();
    assert_eq!(agents, ["a"], "{body}");
    assert_eq!(body["unknown_mentions"], json!(["zed"]), "{body}");
    let body = h.turn("t:handles", "hello").await;
    assert_eq!(body["unknown_mentions"], json!([]), "{body}");
    let response = h
        .client
        .post(h.url("/sessions/t:handles/turns"))
        .bearer_auth(TOKEN)
        .header("accept", "text/event-stream")
        .json(&json!({"content": "what does @media say?"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let events = parse_sse(&response.text().await.unwrap());
    let (_, replies) = events.iter().find(|(e, _)| e == "replies").unwrap();
    assert_eq!(replies["unknown_mentions"], json!(["media"]), "{replies}");
    assert_eq!(replies["replies"][0]["agent"], "lead");
    h.stop().await;
}

/// Parses a server-sent event stream into (event, data) pairs.
fn parse_sse(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter_map(|block| {
            let mut name = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    name = Some(v.trim().to_owned());
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim_start());
                }
            }
            Some((name?, serde_json::from_str(&data).ok()?))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_turns_report_progress_then_the_replies() {
    let h = Harness::start().await;
    h.turn("t:stream", "warm up").await;
    let response = h
        .client
        .post(h.url("/sessions/t:stream/turns"))
        .bearer_auth(TOKEN)
        .header("accept", "text/event-stream")
        .json(&json!({"content": "@all status?"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    let events = parse_sse(&response.text().await.unwrap());
    let (last, replies) = events.last().unwrap();
    assert_eq!(last, "replies");
    h.api.check_schema("TurnResult", replies);
    let replies = replies["replies"].as_array().unwrap();
    assert_eq!(replies.len(), 3);
    for reply in replies {
        let agent = reply["agent"].as_str().unwrap();
        let mine: Vec<&(String, Value)> =
            events.iter().filter(|(_, d)| d["agent"] == agent).collect();
        let kinds: Vec<&str> = mine.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(kinds.first(), Some(&"agent_started"), "{agent}: {kinds:?}");
        assert_eq!(kinds.last(), Some(&"agent_done"), "{agent}: {kinds:?}");
        let deltas: Vec<&str> = mine
            .iter()
            .filter(|(k, _)| k == "delta")
            .map(|(_, d)| d["text"].as_str().unwrap())
            .collect();
        assert!(deltas.len() >= 2, "{agent}: {kinds:?}");
        assert_eq!(
            deltas.concat(),
            reply["content"].as_str().unwrap(),
            "{agent}"
        );
        assert_eq!(&mine.last().unwrap().1, reply, "{agent}");
        h.api.check_schema("Reply", &mine.last().unwrap().1);
    }
    // The streamed replies are stored like any other.
    let log = h.runtime.log();
    let stored = messages_of(log.as_ref(), &ConversationKey::new("t:stream").unwrap());
    assert_eq!(stored.len(), 2 + 1 + 3);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_history_is_the_log_exactly() {
    let h = Harness::start().await;
    let conversation = "t:full";
    for text in [
        "hello",
        "@a look",
        "@b and you",
        "@all everyone",
        "plain again",
    ] {
        h.turn(conversation, text).await;
    }
    h.turn("t:other", "another conversation").await;
    let log = h.runtime.log();
    let key = ConversationKey::new(conversation).unwrap();
    let stored = messages_of(log.as_ref(), &key);
    for agent in [None, Some("lead"), Some("a"), Some("b")] {
        let path = match agent {
            None => format!("/sessions/{conversation}/history?view=full"),
            Some(a) => format!("/sessions/{conversation}/history?view=full&agent={a}"),
        };
        let (status, body) = h.call("get", "/sessions/{id}/history", h.get(&path)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let got = body.as_array().unwrap();
        let want: Vec<&legio_core::Record> = stored
            .iter()
            .filter(|r| {
                let m = r.event.as_message().unwrap();
                agent.is_none_or(|a| {
                    let spec = h.runtime.config().agent_named(a).unwrap();
                    can_see(spec.viewer(), m)
                })
            })
            .collect();
        assert_eq!(got.len(), want.len(), "{path}");
        for (g, r) in got.iter().zip(&want) {
            let m = r.event.as_message().unwrap();
            assert_eq!(g["seq"], r.seq.get());
            assert_eq!(g["id"], m.id.to_string());
            assert_eq!(g["content"], m.text_content());
            assert_eq!(g["name"], m.sender.as_str());
            assert_eq!(
                g["parts"],
                serde_json::to_value(&m.parts).unwrap(),
                "exact parts"
            );
            assert_eq!(g["audience"], serde_json::to_value(&m.audience).unwrap());
            assert_eq!(g["at"], m.at.to_rfc3339());
            let role = match (&m.sender, agent) {
                (legio_core::Participant::User, _) => "user",
                (s, Some(a)) if s.as_str() == a => "assistant",
                (_, Some(_)) => "user",
                (_, None) => "assistant",
            };
            assert_eq!(g["role"], role, "{path} #{}", r.seq);
        }
    }
    let (_, last_two) = h
        .call(
            "get",
            "/sessions/{id}/history",
            h.get(&format!("/sessions/{conversation}/history?limit=2")),
        )
        .await;
    let seqs: Vec<u64> = last_two
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(
        seqs,
        stored[stored.len() - 2..]
            .iter()
            .map(|r| r.seq.get())
            .collect::<Vec<_>>()
    );
    let (_, empty) = h
        .call(
            "get",
            "/sessions/{id}/history",
            h.get("/sessions/t:none/history"),
        )
        .await;
    assert_eq!(empty, json!([]));
    for (path, status, code) in [
        ("/sessions/t:full/history?view=raw", 400, "bad_query"),
        ("/sessions/t:full/history?agent=zed", 404, "unknown_agent"),
        ("/sessions/t:full/history?limit=x", 400, "bad_query"),
        (
            "/sessions/t:full/history?view=compacted&limit=3",
            400,
            "bad_query",
        ),
        ("/sessions/t:full/history?bogus=1", 400, "bad_query"),
    ] {
        let (got, body) = h.call("get", "/sessions/{id}/history", h.get(path)).await;
        assert_eq!(
            (got.as_u16(), body["error"]["code"].as_str()),
            (status, Some(code)),
            "{path}"
        );
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_history_is_what_the_provider_receives_next() {
    let h = Harness::start().await;
    let conversation = "t:compact";
    // Enough turns that the window (4) cuts, sessions bootstrap and then get deltas, and a
    // manual reset restores one with a notice.
    let script = [
        ("lead", "hello"),
        ("a", "@a first"),
        ("b", "@b second"),
        ("lead", "more"),
        ("a", "@a again"),
        ("b", "@b again"),
        ("lead", "and more"),
        ("b", "@b reset next"),
        ("b", "@b after the reset"),
        ("a", "@all all of you"),
    ];
    let mut checked = HashMap::new();
    for (i, (agent, text)) in script.iter().enumerate() {
        if i == 8 {
            let (status, _) = h
                .call(
                    "post",
                    "/operator/reset",
                    h.client
                        .post(h.url("/operator/reset"))
                        .bearer_auth(OPERATOR_TOKEN)
                        .json(&json!({"conversation": conversation, "agent": "b"})),
                )
                .await;
            assert_eq!(status, StatusCode::OK);
        }
        let (status, compacted) = h
            .call(
                "get",
                "/sessions/{id}/history",
                h.get(&format!(
                    "/sessions/{conversation}/history?view=next&agent={agent}"
                )),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        let provider = h
            .runtime
            .config()
            .agent_named(agent)
            .unwrap()
            .provider
            .clone();
        let recorder = &h.providers[provider.as_str()];
        let before = recorder.requests().len();
        h.turn(conversation, text).await;
        let request = recorder.requests()[before..]
            .iter()
            .find(|r| r.agent.as_str() == *agent)
            .cloned()
            .unwrap();
        let compacted = compacted.as_array().unwrap();
        let (notice, items) = match compacted.first() {
            Some(m) if m["role"] == "system" => (m["content"].as_str(), &compacted[1..]),
            _ => (None, &compacted[..]),
        };
        let what = format!("turn {i} ({agent}: {text})");
        assert_eq!(notice, request.plan.notice.as_deref(), "{what}");
        let got: Vec<(u64, String, bool)> = items
            .iter()
            .map(|m| {
                (
                    m["seq"].as_u64().unwrap(),
                    m["content"].as_str().unwrap().to_owned(),
                    m["redelivered"].as_bool().unwrap(),
                )
            })
            .collect();
        let want: Vec<(u64, String, bool)> = request
            .plan
            .history
            .iter()
            .map(|i| (i.seq.get(), i.message.text_content(), i.redelivered))
            .collect();
        assert_eq!(got, want, "{what}");
        *checked.entry(request.plan.mode.as_str()).or_insert(0) += 1;
    }
    assert!(
        checked.contains_key("full")
            && checked.contains_key("bootstrap")
            && checked.contains_key("delta"),
        "{checked:?}"
    );
    h.stop().await;
}

/// The summaries of a conversation's `SummaryRecorded` events for `agent`, in log order:
/// (seq of the event, covers up to, text).
fn summaries_of(log: &dyn EventLog, key: &ConversationKey, agent: &str) -> Vec<(u64, u64, String)> {
    log.conversation_events(key, Seq::ZERO, 100_000)
        .unwrap()
        .into_iter()
        .filter_map(|r| match &r.event {
            legio_core::Event::SummaryRecorded(s) if s.agent.as_str() == agent => {
                Some((r.seq.get(), s.covers_up_to.get(), s.text.clone()))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_history_leads_with_the_summary_the_provider_receives() {
    let h = Harness::start_config(
        &format!("token = \"{TOKEN}\"\noperator_token = \"{OPERATOR_TOKEN}\""),
        "history_window = 50\ncompact_after_messages = 6\nkeep_recent = 2",
        Duration::ZERO,
    )
    .await;
    let conversation = "t:summary";
    let key = ConversationKey::new(conversation).unwrap();
    let log = Arc::clone(h.runtime.log());
    let recorder = &h.providers["stateless"];
    let (mut compared_with_summary, mut compactions) = (0, 0);
    for i in 1..=8 {
        let (status, view) = h
            .call(
                "get",
                "/sessions/{id}/history",
                h.get(&format!(
                    "/sessions/{conversation}/history?view=next&agent=a"
                )),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        let view = view.as_array().unwrap().clone();
        let summaries_before = summaries_of(log.as_ref(), &key, "a").len();
        let before = recorder.requests().len();
        let text = format!("@a turn {i}");
        h.turn(conversation, &text).await;
        let requests = recorder.requests()[before..].to_vec();
        let (summarizer, turns): (Vec<_>, Vec<_>) = requests
            .into_iter()
            .partition(|r| r.system_prompt == legio_core::SUMMARIZER_PROMPT);
        assert_eq!(turns.len(), 1, "turn {i}: one request for a's turn");
        let request = &turns[0];
        let summaries = summaries_of(log.as_ref(), &key, "a");
        let what = format!("turn {i}");
        if summaries.len() > summaries_before {
            // This turn crossed the policy: it summarized first and ran on the view after the
            // new summary (the view served before it was the uncompacted fallback).
            compactions += 1;
            assert!(
                !summarizer.is_empty(),
                "{what}: a summary without a summarizer call"
            );
            let (_, covers, text) = summaries.last().unwrap();
            let summary = request
                .plan
                .summary
                .as_ref()
                .expect("the turn uses the summary");
            assert_eq!(
                (summary.covers_up_to.get(), &summary.text),
                (*covers, text),
                "{what}"
            );
            assert!(
                view.len() > request.plan.history.len() + 1,
                "{what}: the view before the compaction is the longer, uncompacted one"
            );
            continue;
        }
        assert!(
            summarizer.is_empty(),
            "{what}: a summarizer call that recorded nothing"
        );
        // Otherwise the view is exactly what the provider received, the new message aside:
        // the summary first (as the provider reads it), then the messages after it.
        let mut rest = &view[..];
        match &request.plan.summary {
            Some(summary) => {
                let first = &view[0];
                let content = format!(
                    "<conversation_summary covers_up_to=\"{}\">\n{}\n</conversation_summary>",
                    summary.covers_up_to, summary.text
                );
                assert_eq!(first["role"], "user", "{what}");
                assert_eq!(first["summary"], true, "{what}");
                assert_eq!(first["covers_up_to"], summary.covers_up_to.get(), "{what}");
                assert_eq!(first["content"], content.as_str(), "{what}");
                assert!(
                    request.rendered.starts_with(&content),
                    "{what}: the provider reads the summary first:\n{}",
                    request.rendered
                );
                assert_eq!(
                    summary.covers_up_to.get(),
                    summaries.last().unwrap().1,
                    "{what}: the latest summary"
                );
                compared_with_summary += 1;
                rest = &view[1..];
            }
            None => assert!(view.iter().all(|m| m.get("summary").is_none()), "{what}"),
        }
        let got: Vec<(u64, String)> = rest
            .iter()
            .map(|m| {
                (
                    m["seq"].as_u64().unwrap(),
                    m["content"].as_str().unwrap().to_owned(),
                )
            })
            .chain(std::iter::once((
                request.plan.new_message.seq.get(),
                text.clone(),
            )))
            .collect();
        let want: Vec<(u64, String)> = request
            .plan
            .messages()
            .map(|i| (i.seq.get(), i.message.text_content()))
            .collect();
        assert_eq!(got, want, "{what}");
        if let Some(summary) = &request.plan.summary {
            assert!(
                want.iter()
                    .all(|(seq, _)| *seq > summary.covers_up_to.get()),
                "{what}: only messages after the summary"
            );
        }
    }
    assert!(
        compactions >= 2 && compared_with_summary >= 2,
        "compactions {compactions}, views compared with a summary {compared_with_summary}"
    );
    // The full view still has every message, exactly the log's.
    let (status, full) = h
        .call(
            "get",
            "/sessions/{id}/history",
            h.get(&format!("/sessions/{conversation}/history?view=full")),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let got: Vec<u64> = full
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["seq"].as_u64().unwrap())
        .collect();
    let want: Vec<u64> = messages_of(log.as_ref(), &key)
        .iter()
        .map(|r| r.seq.get())
        .collect();
    assert_eq!(got, want);
    assert_eq!(got.len(), 16, "8 turns of a message and a reply");
    assert!(full
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m.get("summary").is_none()));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_session_gets_the_summary_then_the_notice() {
    let h = Harness::start_config(
        &format!("token = \"{TOKEN}\"\noperator_token = \"{OPERATOR_TOKEN}\""),
        "history_window = 50\ncompact_after_messages = 6\nkeep_recent = 2",
        Duration::ZERO,
    )
    .await;
    let conversation = "t:restored";
    let key = ConversationKey::new(conversation).unwrap();
    let log = Arc::clone(h.runtime.log());
    let recorder = &h.providers["fragile"];
    let reset = || async {
        let (status, _) = h
            .call(
                "post",
                "/operator/reset",
                h.client
                    .post(h.url("/operator/reset"))
                    .bearer_auth(OPERATOR_TOKEN)
                    .json(&json!({"conversation": conversation, "agent": "b"})),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
    };
    // A session of b's that holds 8 messages; restored, it compacts them on its bootstrap.
    for i in 1..=4 {
        h.turn(conversation, &format!("@b turn {i}")).await;
    }
    assert!(
        summaries_of(log.as_ref(), &key, "b").is_empty(),
        "deltas never compact"
    );
    reset().await;
    h.turn(conversation, "@b turn 5").await;
    let summaries = summaries_of(log.as_ref(), &key, "b");
    assert_eq!(summaries.len(), 1, "the bootstrap compacted");
    let (_, covers, text) = summaries[0].clone();
    // Restored again: the bootstrap holds the summary, the notice, then what came after it.
    reset().await;
    let (status, view) = h
        .call(
            "get",
            "/sessions/{id}/history",
            h.get(&format!(
                "/sessions/{conversation}/history?view=next&agent=b"
            )),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let view = view.as_array().unwrap().clone();
    let before = recorder.requests().len();
    h.turn(conversation, "@b turn 6").await;
    assert_eq!(
        summaries_of(log.as_ref(), &key, "b").len(),
        1,
        "no new summary"
    );
    let requests = recorder.requests()[before..].to_vec();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.plan.mode.as_str(), "bootstrap");
    let summary = request
        .plan
        .summary
        .as_ref()
        .expect("bootstrapped with the summary");
    assert_eq!((summary.covers_up_to.get(), &summary.text), (covers, &text));
    let content = format!(
        "<conversation_summary covers_up_to=\"{covers}\">\n{text}\n</conversation_summary>"
    );
    assert!(
        request.rendered.starts_with(&content),
        "{}",
        request.rendered
    );
    assert_eq!(
        (&view[0]["role"], &view[0]["summary"], &view[0]["content"]),
        (&json!("user"), &json!(true), &json!(content))
    );
    assert_eq!(view[0]["covers_up_to"], covers);
    assert_eq!(
        (view[1]["role"].as_str(), view[1]["content"].as_str()),
        (Some("system"), request.plan.notice.as_deref())
    );
    assert!(request.plan.notice.is_some());
    let got: Vec<(u64, String)> = view[2..]
        .iter()
        .map(|m| {
            (
                m["seq"].as_u64().unwrap(),
                m["content"].as_str().unwrap().to_owned(),
            )
        })
        .chain(std::iter::once((
            request.plan.new_message.seq.get(),
            "@b turn 6".to_owned(),
        )))
        .collect();
    let want: Vec<(u64, String)> = request
        .plan
        .messages()
        .map(|i| (i.seq.get(), i.message.text_content()))
        .collect();
    assert_eq!(got, want);
    assert!(got.iter().all(|(seq, _)| *seq > covers) && got.len() >= 3);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_memory_is_the_shared_memory() {
    let h = Harness::start().await;
    let (status, empty) = h
        .call("get", "/operator/memory", h.operator("/operator/memory"))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(empty["directives"], json!([]));
    let tools = h.runtime.memory_tools().clone();
    let (lead, a) = (
        legio_core::AgentName::new("lead").unwrap(),
        legio_core::AgentName::new("a").unwrap(),
    );
    for (who, tool, args) in [
        (&lead, "publish_directive", json!({"text": "ship at noon"})),
        (&lead, "publish_directive", json!({"text": "old rule"})),
        (
            &lead,
            "revoke_directive",
            json!({"id": "d2", "reason": "stale"}),
        ),
        (
            &a,
            "write_note",
            json!({"key": "api", "text": "v2 since Tuesday"}),
        ),
        (
            &a,
            "append_notebook",
            json!({"text": "lead likes small PRs"}),
        ),
    ] {
        tools.call(who, tool, args).await.unwrap();
    }
    let (status, memory) = h
        .call("get", "/operator/memory", h.operator("/operator/memory"))
        .await;
    assert_eq!(status, StatusCode::OK);
    // Exactly the projection folded from the log, and what the tools wrote.
    let log = Arc::clone(h.runtime.log());
    let folded = legio_runtime::read_memory(log.as_ref()).unwrap();
    assert_eq!(memory, serde_json::to_value(&folded).unwrap());
    assert_eq!(memory["last_seq"], log.last_seq().get());
    assert_eq!(memory["directives"][0]["text"], "ship at noon");
    assert!(memory["directives"][0]["revoked"].is_null());
    assert_eq!(memory["directives"][1]["revoked"]["reason"], "stale");
    assert_eq!(memory["notes"]["api"]["author"], "a");
    assert_eq!(memory["notebooks"]["a"][0]["text"], "lead likes small PRs");
    // The API token does not open it: it is an operator endpoint.
    let (status, _) = h
        .call("get", "/operator/memory", h.get("/operator/memory"))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_endpoints_serve_the_live_log() {
    let h = Harness::start().await;
    h.turn("t:ops", "hello").await;
    h.turn("t:ops", "@a hi").await;
    h.turn("t:ops2", "elsewhere").await;
    let log = Arc::clone(h.runtime.log());
    let last = log.last_seq();
    // JSON lines from a seq equal the log's records.
    let response = h.operator("/operator/events?from=2").send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let text = response.text().await.unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let want: Vec<Value> = log
        .read_range(Seq(2), last, 10_000)
        .unwrap()
        .iter()
        .map(legio_core::record_to_json)
        .collect();
    assert_eq!(lines, want);
    let response = h
        .operator("/operator/events?conversation=t:ops2&format=sse")
        .send()
        .await
        .unwrap();
    let text = response.text().await.unwrap();
    assert!(
        text.contains("event: record") && !text.contains("\"t:ops\""),
        "{text}"
    );
    // Follow: the stream stays open and carries an event appended later.
    let mut follow = h
        .operator(&format!(
            "/operator/events?from={}&follow=true",
            last.get() + 1
        ))
        .send()
        .await
        .unwrap();
    h.turn("t:ops", "after the follow began").await;
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !seen.contains("after the follow began") {
        assert!(Instant::now() < deadline, "follow saw nothing: {seen}");
        let chunk = tokio::time::timeout(Duration::from_secs(10), follow.chunk())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    drop(follow);
    for what in ["conversations", "agents", "sessions", "tools"] {
        let (status, table) = h
            .call(
                "get",
                "/operator/inspect/{what}",
                h.operator(&format!("/operator/inspect/{what}?conversation=t:ops")),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        assert!(!table["rows"].as_array().unwrap().is_empty(), "{what}");
    }
    let (status, body) = h
        .call(
            "get",
            "/operator/inspect/{what}",
            h.operator("/operator/inspect/tools?conversation=t:missing"),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("unknown_conversation"))
    );
    let (status, body) = h
        .call(
            "get",
            "/operator/inspect/{what}",
            h.operator("/operator/inspect/things"),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    let (status, body) = h
        .call(
            "get",
            "/operator/inspect/{what}",
            h.operator("/operator/inspect/agents?conversation=t:missing"),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("unknown_conversation"))
    );
    let (status, plan) = h
        .call(
            "get",
            "/operator/context",
            h.operator("/operator/context?conversation=t:ops&agent=a"),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(plan["mode"], "full");
    for (path, want) in [
        ("/operator/context?conversation=t:ops&agent=zed", 404),
        (
            "/operator/context?conversation=t:ops&agent=a&at=999999",
            400,
        ),
        ("/operator/context?conversation=t:missing&agent=a", 404),
        ("/operator/context?agent=a", 400),
    ] {
        let (status, _) = h.call("get", "/operator/context", h.operator(path)).await;
        assert_eq!(status.as_u16(), want, "{path}");
    }
    let (status, _) = h
        .call(
            "post",
            "/operator/reset",
            h.client
                .post(h.url("/operator/reset"))
                .bearer_auth(OPERATOR_TOKEN)
                .json(&json!({"conversation": "t:ops", "agent": "zed"})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_dashboard() {
    let h = Harness::start().await;
    h.turn("t:metrics", "@all hello").await;
    let (status, body) = h.call("get", "/metrics", h.get("/metrics")).await;
    assert_eq!(status, StatusCode::OK);
    let text = body.as_str().unwrap();
    for needle in [
        "legio_turns_total{",
        "legio_turn_latency_seconds_bucket{",
        "le=\"0.001\"",
        "legio_store_append_latency_seconds_bucket{le=\"0.00005\"}",
        "legio_store_commit_step_seconds_bucket{step=\"apply\",le=\"0.00005\"}",
        "legio_store_commit_step_seconds_bucket{step=\"flush\",le=\"0.00005\"}",
        "legio_store_commit_step_seconds_bucket{step=\"fdatasync\",le=\"0.00005\"}",
        "legio_context_tokens_sent_total",
        "legio_sessions_opened_total{",
        "legio_live_actors",
    ] {
        assert!(
            text.contains(needle),
            "{needle} missing from /metrics:\n{text}"
        );
    }
    // The list overlay is written once the log idles (50 ms without appends).
    let list_write = "legio_store_list_write_seconds_bucket{le=\"0.00005\"}";
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, body) = h.call("get", "/metrics", h.get("/metrics")).await;
        if body.as_str().unwrap().contains(list_write) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{list_write} missing from /metrics 10 s after the turn"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, page) = h.call("get", "/dashboard", h.get("/dashboard")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page
        .as_str()
        .unwrap()
        .contains("<script src=\"/dashboard.js\">"));
    assert!(
        !page.as_str().unwrap().contains("http"),
        "no external resource"
    );
    let (status, _) = h.call("get", "/dashboard.js", h.get("/dashboard.js")).await;
    assert_eq!(status, StatusCode::OK);
    // A browser: ?token= once, then a cookie that opens GETs but never a POST.
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let response = no_redirects
        .get(h.url(&format!("/dashboard?token={TOKEN}")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    let cookie = response.headers()["set-cookie"].to_str().unwrap();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let cookie = cookie.split(';').next().unwrap().to_owned();
    let response = no_redirects
        .get(h.url("/metrics"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let response = no_redirects
        .post(h.url("/sessions/t:metrics/turns"))
        .header("cookie", &cookie)
        .json(&json!({"content": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let response = no_redirects
        .get(h.url("/dashboard?token=wrong"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_public_bind_needs_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "", "history_window = 4");
    let settings = legio_server::ServerSettings::from_config(&config).unwrap();
    assert!(
        settings.bind.ip().is_loopback(),
        "the default bind is loopback"
    );
    let runtime = Runtime::open(config).await.unwrap();
    let metrics = install_metrics().unwrap();
    let err = Server::bind(
        runtime,
        settings,
        Some("0.0.0.0:0".parse().unwrap()),
        metrics,
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("without a token"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_in_flight_turns_then_suspends_sessions() {
    let h = Harness::start_with(
        &format!("token = \"{TOKEN}\"\nshutdown_grace_seconds = 5"),
        Duration::from_millis(400),
    )
    .await;
    h.turn("t:shutdown", "open a session").await;
    let client = h.client.clone();
    let url = h.url("/sessions/t:shutdown/turns");
    let in_flight = tokio::spawn(async move {
        client
            .post(url)
            .bearer_auth(TOKEN)
            .json(&json!({"content": "slow turn"}))
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()
    });
    // Wait until the turn is in the actor (the user message is in the log).
    let log = Arc::clone(h.runtime.log());
    let deadline = Instant::now() + Duration::from_secs(10);
    while messages_of(log.as_ref(), &ConversationKey::new("t:shutdown").unwrap()).len() < 3 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let base = h.base.clone();
    let report = h.stop().await;
    assert!(report.drained && report.suspended, "{report:?}");
    let reply = in_flight.await.unwrap();
    assert!(reply["replies"][0]["error"].is_null(), "{reply}");
    assert!(
        reqwest::get(format!("{base}/healthz")).await.is_err(),
        "no new connections after shutdown"
    );
    let events = log
        .conversation_events(
            &ConversationKey::new("t:shutdown").unwrap(),
            Seq::ZERO,
            1000,
        )
        .unwrap();
    let last = events.last().unwrap();
    assert!(
        matches!(&last.event, legio_core::Event::SessionSuspended(e) if e.why == legio_core::BoundaryReason::Shutdown),
        "{:?}",
        last.event
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_cancels_what_outlives_the_grace_period() {
    let h = Harness::start_with(
        &format!("token = \"{TOKEN}\"\nshutdown_grace_seconds = 0.2"),
        Duration::from_secs(30),
    )
    .await;
    let request = h
        .client
        .post(h.url("/sessions/t:grace/turns"))
        .bearer_auth(TOKEN)
        .header("accept", "text/event-stream")
        .json(&json!({"content": "too slow"}))
        .send();
    // Start the request and read its stream, then shut down while it hangs in the provider.
    let request = tokio::spawn(async move { request.await.unwrap().text().await.unwrap() });
    let log = Arc::clone(h.runtime.log());
    let deadline = Instant::now() + Duration::from_secs(10);
    while log.last_seq() < Seq(2) {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The hanging turn is cancelled once the grace period is over (a generous deadline: without
    // the cancel, stop would wait for the provider's 30 s).
    let report = tokio::time::timeout(Duration::from_secs(25), h.stop())
        .await
        .expect("shutdown waited for the hanging turn");
    assert!(
        !report.drained && report.cancelled_turns == 1 && !report.suspended,
        "{report:?}"
    );
    let body = tokio::time::timeout(Duration::from_secs(10), request)
        .await
        .unwrap()
        .unwrap();
    assert!(body.contains("event: agent_started"), "{body}");
    assert!(
        body.contains("event: error") && body.contains("shutting_down"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_draws_live_charts_in_headless_chromium() {
    let Some(chromium) = legio_tests::chromium::find() else {
        return;
    };
    let h = Harness::start_with(&format!("token = \"{TOKEN}\""), Duration::from_millis(2)).await;
    for i in 0..20 {
        h.turn(
            &format!("t:dash{}", i % 4),
            if i % 3 == 0 { "@all go" } else { "@a look" },
        )
        .await;
    }
    // Keep turns flowing while the page polls.
    let load = {
        let (client, base) = (h.client.clone(), h.base.clone());
        tokio::spawn(async move {
            for i in 0..2_000u32 {
                let content = match i % 4 {
                    0 => "@all go",
                    1 => "@a look",
                    2 => "@b check",
                    _ => "next",
                };
                let _ = client
                    .post(format!("{base}/sessions/t:dash{}/turns", i % 6))
                    .bearer_auth(TOKEN)
                    .json(&json!({"content": content}))
                    .send()
                    .await;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let profile = tempfile::tempdir().unwrap();
    let shot = profile.path().join("dashboard.png");
    let output = tokio::process::Command::new(chromium)
        .args(legio_tests::chromium::headless_args(profile.path()))
        .args([
            // The page as its scripts left it, on stdout: the live figures are checked below.
            "--dump-dom",
            &format!("--screenshot={}", shot.display()),
            "--window-size=1400,1050",
            "--virtual-time-budget=12000",
            &format!("{}/dashboard?token={TOKEN}", h.base),
        ])
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), output)
        .await
        .expect("chromium hung")
        .unwrap();
    load.abort();
    assert!(
        shot.exists(),
        "no screenshot: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    // Charts with lines and bars compress far worse than an empty page.
    assert!(
        png.len() > 40_000,
        "the page looks empty ({} bytes)",
        png.len()
    );
    // The append panel read the commit's steps by their label: each has a figure, not "–".
    let dom = String::from_utf8_lossy(&output.stdout);
    let append = legio_tests::chromium::text_of(&dom, "now-append")
        .unwrap_or_else(|| panic!("no append figures in the page: {dom}"));
    for step in ["sled flush ", "fdatasync "] {
        let figure = append
            .split_once(step)
            .map(|(_, rest)| rest)
            .unwrap_or_else(|| panic!("no {step:?} in the append figures: {append}"));
        assert!(
            figure.starts_with(|c: char| c.is_ascii_digit()),
            "no {step:?} figure in the append panel: {append}"
        );
    }
    if let Some(path) = std::env::var_os("LEGIO_DASHBOARD_SCREENSHOT") {
        std::fs::copy(&shot, path).unwrap();
    }
    h.stop().await;
}
