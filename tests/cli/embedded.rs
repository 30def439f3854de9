//! Embedded mode on a cluster: two runtimes in one process (nodes e1 and e2, as two host
//! processes would each embed one) on one nats-server, sharing one scripted provider. A request
//! through e2 to a conversation e1 owns is carried to e1 and served there: plain posts, a host's
//! turn with tools whose calls wait on e1 while the host hands its results to e2, and an MCP
//! client's tool call.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use legio_core::{ConversationKey, Message, Part, Participant, Seq};
use legio_llm::{Fault, Provider, ScriptedConfig, ScriptedProvider};
use legio_runtime::{
    ErrorCode, HostToolResult, HostTurn, Progress, Runtime, RuntimeConfig, ToolSpec,
};
use legio_store::{EventLog, NatsLog, NatsOptions};
use legio_tests::nats::NatsCluster;

use super::{on_one_nats_server, CONV};

/// Runs `body` with nodes e1 and e2 (shut down after it) and their shared provider, on one
/// nats-server with stream `stream`; then the server (stopped when dropped) and the log as a
/// reader of the cluster sees it. `None`: skipped (no nats-server).
fn with_two_nodes<F>(
    stream: &str,
    body: impl FnOnce(Runtime, Runtime, ScriptedProvider) -> F,
) -> Option<(NatsCluster, NatsLog)>
where
    F: Future<Output = (Runtime, Runtime)>,
{
    with_two_slow_nodes(stream, std::time::Duration::ZERO, body)
}

/// [`with_two_nodes`] with a provider that takes `latency` per call.
fn with_two_slow_nodes<F>(
    stream: &str,
    latency: std::time::Duration,
    body: impl FnOnce(Runtime, Runtime, ScriptedProvider) -> F,
) -> Option<(NatsCluster, NatsLog)>
where
    F: Future<Output = (Runtime, Runtime)>,
{
    let (cluster, url, _dir, config_path) = on_one_nats_server(stream)?;
    let config = RuntimeConfig::load(&config_path).unwrap();
    let provider = ScriptedProvider::new(ScriptedConfig {
        latency,
        ..ScriptedConfig::new(legio_core::History::Session { resumable: true })
    });
    let overrides = HashMap::from([(
        "local".to_owned(),
        Arc::new(provider.clone()) as Arc<dyn Provider>,
    )]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let open = |node: &'static str| {
            Runtime::builder(config.clone())
                .providers(overrides.clone())
                .node(node)
                .open()
        };
        let e1 = open("e1").await.unwrap();
        let e2 = open("e2").await.unwrap();
        let (e1, e2) = body(e1, e2, provider).await;
        e2.shutdown().await.unwrap();
        e1.shutdown().await.unwrap();
    });
    let options = NatsOptions {
        stream: stream.into(),
        ..NatsOptions::for_servers([url])
    };
    Some((cluster, NatsLog::open_read_only(&options).unwrap()))
}

fn owns(runtime: &Runtime, key: &ConversationKey) -> bool {
    runtime
        .owned_conversations()
        .iter()
        .any(|(owned, _, _)| owned == key)
}

/// The messages of `key` in `log`, in order.
fn messages(log: &NatsLog, key: &ConversationKey) -> Vec<Message> {
    log.conversation_events(key, Seq::ZERO, usize::MAX)
        .unwrap()
        .into_iter()
        .filter_map(|r| r.event.as_message().cloned())
        .collect()
}

fn key() -> ConversationKey {
    ConversationKey::new(CONV).unwrap()
}

/// `Runtime::post` through e2 to a conversation e1 owns is carried to e1 and answered from
/// there (e2 never takes it), and every post is in the log once, in order.
#[test]
fn an_embedded_runtime_carries_a_post_to_the_runtime_that_owns_the_conversation() {
    let texts = [
        "hello",
        "@ann through e2",
        "@all through e1",
        "through e2 again",
    ];
    let Some((_cluster, log)) = with_two_nodes("embedded", |e1, e2, _| async move {
        for (i, text) in texts.iter().enumerate() {
            let via = if i % 2 == 0 { &e1 } else { &e2 };
            let posted = via.post(CONV, text).await.unwrap();
            assert!(!posted.is_empty(), "{text}");
            assert!(
                posted.iter().all(|reply| reply.outcome.is_ok()),
                "{text}: {posted:?}"
            );
            assert!(
                owns(&e1, &key()) && !owns(&e2, &key()),
                "{text}: e1 owns the conversation"
            );
        }
        (e1, e2)
    }) else {
        return;
    };
    let stored: Vec<String> = messages(&log, &key())
        .into_iter()
        .filter(|m| m.sender == Participant::User)
        .map(|m| m.plain_text())
        .collect();
    assert_eq!(stored, texts, "each post once, in order");
}

fn tool(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: format!("the host's {name}"),
        parameters: serde_json::json!({"type": "object", "properties": {}}),
    }
}

/// A host's turn with tools posted to e2, for a conversation e1 owns, runs on e1 (it once failed
/// as moved): e1's model is offered the declared tools (declared through e2, recorded by e1) and
/// the turn's own, its
/// call comes back to e2's caller as progress, a wrong id handed to e2 is refused by e1 (nothing
/// waits for it), the right result goes on to e1's waiting call, and the turn ends with the
/// agent's reply, though the host took longer than a silent owner is waited for. The call and
/// its result are in the log once; e2 never takes the conversation (nor one results were
/// refused for).
#[test]
fn a_hosts_turn_with_tools_posted_to_a_non_owner_runs_on_the_owner() {
    let Some((_cluster, log)) = with_two_nodes("embedded_tools", |e1, e2, provider| async move {
        e1.post(CONV, "hello").await.unwrap();
        assert!(owns(&e1, &key()), "e1 took the conversation");
        e2.declare_tools(CONV, vec![tool("lookup")]).await.unwrap();
        let ann = legio_core::AgentName::new("ann").unwrap();
        provider.inject(
            Some(&ann),
            Fault::tool_calls([("call-1", "lookup", r#"{"q":"x"}"#)]),
        );
        let turn = HostTurn {
            sender: Participant::User,
            to: Some(ann.clone()),
            text: "look it up".into(),
            tools: vec![tool("note")],
            idempotency_key: None,
        };
        let (progress, mut updates) = tokio::sync::mpsc::unbounded_channel();
        let host = async {
            let calls = loop {
                match updates.recv().await.expect("the turn's progress") {
                    Progress::ToolCallsRequired { calls, .. } => break calls,
                    _ => continue,
                }
            };
            let ids: Vec<&str> = calls.iter().map(|c| c.id.as_str()).collect();
            assert_eq!(ids, ["call-1"]);
            let result = |id: &str| HostToolResult {
                call_id: id.into(),
                content: "the fact".into(),
                is_error: false,
            };
            let wrong = e2.submit_tool_results(CONV, vec![result("nope")]).await;
            let err = wrong.expect_err("no call waits for nope");
            assert_eq!(err.code(), ErrorCode::NoPendingToolCall, "{err}");
            assert!(
                err.to_string().contains("call-1"),
                "names what waits: {err}"
            );
            // A host takes its time: longer than e2 waits without a word from e1 (3 s), so the
            // forwarded turn lives on e1's keepalives alone meanwhile.
            tokio::time::sleep(std::time::Duration::from_millis(3500)).await;
            e2.submit_tool_results(CONV, vec![result("call-1")])
                .await
                .unwrap();
        };
        let (posted, ()) = tokio::join!(e2.post_host_turn(CONV, turn, progress), host);
        let posted = posted.unwrap();
        assert_eq!(posted.replies.len(), 1, "{posted:?}");
        assert!(posted.replies[0].outcome.is_ok(), "{posted:?}");
        assert!(owns(&e1, &key()) && !owns(&e2, &key()), "e1 kept it");
        let offered: Vec<String> = provider
            .requests()
            .iter()
            .filter(|r| r.agent == ann)
            .flat_map(|r| r.tool_names().into_iter().map(str::to_owned))
            .collect();
        for name in ["lookup", "note"] {
            assert!(offered.iter().any(|o| o == name), "{name}: {offered:?}");
        }
        // Results for a conversation nobody owns, or under a reserved key (`legio:node:e9`
        // names a node's presence lease), are refused, and no lease is taken for them.
        for (conversation, code) in [
            ("cli:nobody", ErrorCode::NoPendingToolCall),
            ("legio:node:e9", ErrorCode::ReservedConversation),
        ] {
            let late = vec![HostToolResult {
                call_id: "call-9".into(),
                content: "late".into(),
                is_error: false,
            }];
            let err = e2
                .submit_tool_results(conversation, late)
                .await
                .unwrap_err();
            assert_eq!(err.code(), code, "{conversation}: {err}");
        }
        assert!(
            e2.owned_conversations().is_empty(),
            "{:?}",
            e2.owned_conversations()
        );
        (e1, e2)
    }) else {
        return;
    };
    let parts: Vec<Part> = messages(&log, &key())
        .into_iter()
        .flat_map(|m| m.parts)
        .filter(|p| !matches!(p, Part::Text { .. }))
        .collect();
    let calls = parts
        .iter()
        .filter(|p| matches!(p, Part::ToolCall { id, .. } if id == "call-1"))
        .count();
    let results: Vec<(&str, bool)> = parts
        .iter()
        .filter_map(|p| match p {
            Part::ToolResult {
                call_id,
                content,
                is_error,
            } if call_id == "call-1" => Some((content.as_str(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(calls, 1, "{parts:?}");
    assert_eq!(results, [("the fact", false)], "{parts:?}");
}

/// An MCP client's tool call (`Runtime::call_tool_as`, what `/mcp` and `legio mcp serve` run)
/// reaching e2 for a conversation e1 owns runs on e1: the history it answers holds e1's latest
/// message, and the call and its result are in the log once, from e1. For a conversation nobody
/// owns, the node the call reached takes it and runs it (it once failed as moved on every node
/// but the owner, and on all of them when nobody owned the conversation).
#[test]
fn an_mcp_clients_tool_call_runs_on_the_owner_of_its_conversation() {
    const IDLE: &str = "cli:idle";
    let Some((_cluster, log)) = with_two_nodes("embedded_mcp", |e1, e2, _| async move {
        e1.post(CONV, "@ann the password is swordfish")
            .await
            .unwrap();
        let ann = legio_core::AgentName::new("ann").unwrap();
        let history = e2
            .call_tool_as(&key(), &ann, "get_history", r#"{"limit": 5}"#)
            .await
            .unwrap()
            .expect("get_history answers");
        assert!(history.contains("swordfish"), "{history}");
        assert!(owns(&e1, &key()) && !owns(&e2, &key()), "e1 kept it");
        let idle = ConversationKey::new(IDLE).unwrap();
        let answer = e2
            .call_tool_as(&idle, &ann, "get_history", "{}")
            .await
            .unwrap();
        assert!(answer.is_ok(), "{answer:?}");
        assert!(owns(&e2, &idle), "e2 took the conversation nobody owned");
        (e1, e2)
    }) else {
        return;
    };
    for (conversation, wanted) in [(CONV, 1), (IDLE, 1)] {
        let key = ConversationKey::new(conversation).unwrap();
        let calls = messages(&log, &key)
            .into_iter()
            .flat_map(|m| m.parts)
            .filter(|p| matches!(p, Part::ToolCall { name, .. } if name == "get_history"))
            .count();
        assert_eq!(calls, wanted, "{conversation}");
    }
}

/// Shared memory on a cluster: every node writes `legio:memory` (it has no owner). A node whose
/// copy of it is behind another node's write reads that write (reads catch up) and writes after
/// it (its append, refused as fenced, is decided again on the caught-up memory): it once saw only
/// what it had read first, and was refused every memory write from then on.
#[test]
fn every_node_reads_and_writes_the_shared_memory_after_the_others() {
    let Some((_cluster, _log)) = with_two_nodes("embedded_memory", |e1, e2, _| async move {
        let lead = legio_core::AgentName::new("lead").unwrap();
        let write = |runtime: &Runtime, key: &str, text: &str| {
            let tools = Arc::clone(runtime.memory_tools());
            let (lead, args) = (lead.clone(), serde_json::json!({"key": key, "text": text}));
            async move { tools.call(&lead, "write_note", args).await }
        };
        write(&e1, "plan", "one").await.unwrap();
        // e2 reads memory once (its copy now ends at e1's first write).
        assert_eq!(e2.memory().await.unwrap().notes["plan"].text, "one");
        write(&e1, "plan", "two").await.unwrap();
        assert_eq!(
            e2.memory().await.unwrap().notes["plan"].text,
            "two",
            "e2 reads e1's write"
        );
        write(&e1, "risk", "low").await.unwrap();
        write(&e2, "owner", "e2")
            .await
            .expect("e2 writes after e1's writes");
        write(&e1, "plan", "three")
            .await
            .expect("e1 writes after e2's write");
        for runtime in [&e1, &e2] {
            let notes = runtime.memory().await.unwrap().notes;
            let texts: Vec<(&str, &str)> = notes
                .iter()
                .map(|(k, n)| (k.as_str(), n.text.as_str()))
                .collect();
            assert_eq!(texts, [("owner", "e2"), ("plan", "three"), ("risk", "low")]);
        }
        (e1, e2)
    }) else {
        return;
    };
}

/// `Runtime::status` on a node that does not own the conversation shows what the agents are
/// doing on the owner (an agent works where its actors run): ann working while e1 runs her turn,
/// idle after it. It once showed every agent idle on e2.
#[test]
fn status_on_a_non_owner_shows_what_the_owners_agents_are_doing() {
    let latency = std::time::Duration::from_millis(1500);
    let Some(_) = with_two_slow_nodes("embedded_status", latency, |e1, e2, _| async move {
        e1.post(CONV, "hello").await.unwrap();
        let activity = |statuses: Vec<legio_runtime::AgentStatus>| {
            let ann = statuses.into_iter().find(|s| s.agent.as_str() == "ann");
            ann.map(|s| s.activity)
        };
        let asked = async {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            activity(e2.status(CONV).await.unwrap())
        };
        let (posted, during) = tokio::join!(e1.post(CONV, "@ann slowly"), asked);
        assert!(posted.unwrap().iter().all(|r| r.outcome.is_ok()));
        assert_eq!(
            during,
            Some(legio_runtime::Activity::Working),
            "during ann's turn"
        );
        let after = activity(e2.status(CONV).await.unwrap());
        assert_eq!(after, Some(legio_runtime::Activity::Idle), "after it");
        assert!(owns(&e1, &key()) && !owns(&e2, &key()), "e1 kept it");
        (e1, e2)
    }) else {
        return;
    };
}
