//! The HTTP API on a cluster: two servers in one process, each on a runtime that is a node
//! (n1, n2) of one real nats-server, as two machines behind a load balancer would be. A turn
//! with host tools posted to the node that does not own its conversation runs on the owner and
//! pauses and resumes through the node it was posted to, or through whichever node the host's
//! results reach (docs/cluster.md, Routing).

use std::time::Duration;

use legio_llm::Fault;
use legio_tests::nats::NatsCluster;
use reqwest::StatusCode;
use serde_json::{json, Value};

use super::door::tool_traffic;
use super::{Harness, OPERATOR_TOKEN, TOKEN};

const KEY: &str = "s:tools";

/// A node `name` of the cluster at `url` (stream `stream`).
async fn node(url: &str, stream: &str, name: &str) -> Harness {
    let store = format!(
        "backend = \"nats\"\n[store.nats]\nservers = [\"{url}\"]\nstream = \"{stream}\"\nlease_ttl_seconds = 10"
    );
    Harness::start_node(
        tempfile::tempdir().unwrap(),
        &format!("token = \"{TOKEN}\"\noperator_token = \"{OPERATOR_TOKEN}\""),
        "history_window = 4",
        &store,
        Duration::ZERO,
        Some(name),
    )
    .await
}

/// One real nats-server (stopped when dropped) and two nodes on it, n1 and n2 (stream
/// `stream`); `None`: skipped (no nats-server).
async fn two_nodes(stream: &str) -> Option<(NatsCluster, Harness, Harness)> {
    let nats = tokio::task::spawn_blocking(|| NatsCluster::start(1))
        .await
        .unwrap()?;
    let url = nats.urls()[0].clone();
    let n1 = node(&url, stream, "n1").await;
    let n2 = node(&url, stream, "n2").await;
    Some((nats, n1, n2))
}

/// Checks that n1 owns `key` and n2 does not, then stops both.
async fn stop_with_n1_owning(n1: Harness, n2: Harness, key: &str) {
    let owned = |h: &Harness| {
        h.runtime
            .owned_conversations()
            .iter()
            .any(|(k, ..)| k.as_str() == key)
    };
    assert!(owned(&n1) && !owned(&n2), "n1 kept {key}");
    n2.stop().await;
    n1.stop().await;
}

fn tool(name: &str) -> Value {
    json!({"name": name, "description": format!("the host's {name}"), "parameters": {"type": "object", "properties": {}}})
}

/// The owner (n1) and the node the host talks to (n2): n2 knows the declared `lookup`, the turn
/// brings `note`; n1's model calls `lookup`, and n2 answers `requires_action` (JSON, then a
/// stream), refuses a wrong id as n1 does, and, given the results, answers the replies.
/// Results posted to another node (n1, or a third node n3) take the turn over there: that node
/// answers the next pause or the replies. Each call and result is in the log once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_with_host_tools_posted_to_a_non_owner_pauses_and_resumes_through_it() {
    let Some((nats, n1, n2)) = two_nodes("srvtools").await else {
        return;
    };
    n1.turn(KEY, "hello").await;
    let (status, body) = n2
        .post_json(
            "/sessions/{id}/tools",
            &format!("/sessions/{KEY}/tools"),
            &json!({"tools": [tool("lookup")]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let agent_a = legio_core::AgentName::new("a").unwrap();
    let inject = |id: &str| {
        n1.providers["stateless"].inject(Some(&agent_a), Fault::tool_calls([(id, "lookup", "{}")]));
    };
    let turn = json!({"content": "@a look it up", "tools": [tool("note")]});
    let turns = format!("/sessions/{KEY}/turns");
    let results = format!("/sessions/{KEY}/tool_results");
    let answer =
        |id: &str| json!({"tool_results": [{"tool_call_id": id, "content": format!("fact {id}")}]});

    inject("call-1");
    let (status, paused) = n2.post_json("/sessions/{id}/turns", &turns, &turn).await;
    assert_eq!(status, StatusCode::OK, "{paused}");
    assert_eq!(paused["status"], "requires_action", "{paused}");
    let call = &paused["required_action"]["tool_calls"][0];
    assert_eq!(
        (call["id"].as_str(), call["agent"].as_str()),
        (Some("call-1"), Some("a"))
    );
    let offered = n1.providers["stateless"]
        .requests()
        .last()
        .unwrap()
        .tool_names()
        .join(",");
    assert!(
        offered.contains("lookup") && offered.contains("note"),
        "n1 offered {offered}"
    );
    // A wrong id is refused by n1, naming the call that waits; the run stays parked on n2.
    let (status, body) = n2
        .post_json("/sessions/{id}/tool_results", &results, &answer("nope"))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "no_pending_tool_call", "{body}");
    assert!(body.to_string().contains("call-1"), "{body}");
    let (status, done) = n2
        .post_json("/sessions/{id}/tool_results", &results, &answer("call-1"))
        .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert!(done["replies"][0]["error"].is_null(), "{done}");
    assert!(
        !done["replies"][0]["content"]
            .as_str()
            .unwrap_or("")
            .is_empty(),
        "{done}"
    );

    inject("call-2");
    let events = n2.post_stream(&turns, &turn, true).await;
    assert_eq!(events.last().unwrap().0, "requires_action", "{events:?}");
    let events = n2.post_stream(&results, &answer("call-2"), true).await;
    assert_eq!(events.last().unwrap().0, "replies", "{events:?}");

    // Results posted to another node than the one that answered requires_action (a host
    // behind a load balancer): that node takes the turn over and answers its replies, be it
    // the owner (n1) or a third node (n3, streamed).
    inject("call-3");
    let (status, paused) = n2.post_json("/sessions/{id}/turns", &turns, &turn).await;
    assert_eq!(paused["status"], "requires_action", "{status} {paused}");
    let (status, done) = n1
        .post_json("/sessions/{id}/tool_results", &results, &answer("call-3"))
        .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert!(replied(&done), "{done}");
    let n3 = node(&nats.urls()[0], "srvtools", "n3").await;
    inject("call-4");
    let events = n2.post_stream(&turns, &turn, true).await;
    assert_eq!(events.last().unwrap().0, "requires_action", "{events:?}");
    let events = n3.post_stream(&results, &answer("call-4"), true).await;
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(names.last(), Some(&"replies"), "{events:?}");
    assert!(
        names.contains(&"agent_done"),
        "n1's progress reached n3: {names:?}"
    );

    // A turn that pauses twice, its results posted to a new node each time: n3 takes it over
    // and answers the second pause, n1 takes it over from n3 and answers the replies.
    inject("call-5");
    inject("call-6");
    let (_, paused) = n2.post_json("/sessions/{id}/turns", &turns, &turn).await;
    assert_eq!(paused["status"], "requires_action", "{paused}");
    let (status, again) = n3
        .post_json("/sessions/{id}/tool_results", &results, &answer("call-5"))
        .await;
    assert_eq!(status, StatusCode::OK, "{again}");
    let call = &again["required_action"]["tool_calls"][0]["id"];
    assert_eq!(call.as_str(), Some("call-6"), "{again}");
    let (status, done) = n1
        .post_json("/sessions/{id}/tool_results", &results, &answer("call-6"))
        .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert!(replied(&done), "{done}");

    let (calls, results, linked) = tool_traffic(&n1, KEY);
    let ids: Vec<&str> = calls.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        ids,
        ["call-1", "call-2", "call-3", "call-4", "call-5", "call-6"]
    );
    let contents: Vec<&str> = results.iter().map(|(_, c, _)| c.as_str()).collect();
    let expected: Vec<String> = (1..=6).map(|i| format!("fact call-{i}")).collect();
    assert_eq!(contents, expected);
    assert!(linked, "each results message replies to its calls");
    n3.stop().await;
    stop_with_n1_owning(n1, n2, KEY).await;
}

/// Whether a turn's JSON answer holds a reply with text and no error.
fn replied(done: &Value) -> bool {
    let reply = &done["replies"][0];
    reply["error"].is_null() && !reply["content"].as_str().unwrap_or("").is_empty()
}

/// The OpenAI-compatible door behind a load balancer: a chat completion with tools posted to
/// n2 (n1 owns the conversation) gets the model's tool call; the next request, carrying the
/// tool's result, reaches n1, which takes the turn over and answers the reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_doors_tool_result_may_reach_another_node_than_its_call() {
    const CHAT: &str = "s:door-tools";
    let Some((_nats, n1, n2)) = two_nodes("srvdoortools").await else {
        return;
    };
    n1.turn(CHAT, "hello").await;
    let agent_a = legio_core::AgentName::new("a").unwrap();
    n1.providers["stateless"].inject(
        Some(&agent_a),
        Fault::tool_calls([("w-1", "weather", "{}")]),
    );
    let tools = json!([{"type": "function", "function": {"name": "weather", "parameters": {"type": "object", "properties": {}}}}]);
    let ask = json!({"role": "user", "content": "weather?"});
    let mut body = super::door::chat(Some(CHAT), "legio/a", json!([ask.clone()]));
    body["tools"] = tools.clone();
    let (status, paused) = n2
        .post_json("/v1/chat/completions", "/v1/chat/completions", &body)
        .await;
    assert_eq!(status, StatusCode::OK, "{paused}");
    assert_eq!(
        paused["choices"][0]["finish_reason"], "tool_calls",
        "{paused}"
    );
    let call = paused["choices"][0]["message"]["tool_calls"][0].clone();
    assert_eq!(call["id"], "w-1", "{paused}");
    let next = json!([
        ask,
        {"role": "assistant", "content": null, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "w-1", "content": "sunny"},
    ]);
    let mut body = super::door::chat(Some(CHAT), "legio/a", next);
    body["tools"] = tools;
    let (status, done) = n1
        .post_json("/v1/chat/completions", "/v1/chat/completions", &body)
        .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["choices"][0]["finish_reason"], "stop", "{done}");
    let (calls, results, linked) = tool_traffic(&n1, CHAT);
    assert_eq!(calls, [("w-1".to_owned(), "weather".to_owned())]);
    assert_eq!(results, [("w-1".to_owned(), "sunny".to_owned(), false)]);
    assert!(linked);
    stop_with_n1_owning(n1, n2, CHAT).await;
}

/// The full history of `key`, as node `h` shows it.
async fn history(h: &Harness, key: &str) -> (StatusCode, Value) {
    let path = format!("/sessions/{key}/history");
    h.call("get", "/sessions/{id}/history", h.get(&path)).await
}

/// The OpenAI-compatible door and the history on a node that does not own the conversation
/// read it as the owner wrote it: a chat posted to n2 three times (each resending the whole
/// transcript) runs on n1 and passes n2's check of the earlier messages (n2's copy of the
/// conversation, loaded by a history read, is caught up first: it once stayed as first read, and
/// the third request failed 409 `history_mismatch`), and n2's agents table, history and
/// operator's context report then show n1's latest turn and find the conversation (it once answered
/// `unknown_conversation` when n2 had first read it empty).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_door_and_the_history_on_a_non_owner_read_what_the_owner_wrote() {
    let Some((_nats, n1, n2)) = two_nodes("srvdoor").await else {
        return;
    };
    const DOOR: &str = "s:door";
    let first = n1.turn(DOOR, "hello").await;
    let (status, _) = history(&n2, DOOR).await;
    assert_eq!(status, StatusCode::OK);
    let mut transcript = vec![
        json!({"role": "user", "content": "hello"}),
        json!({"role": "assistant", "content": first["replies"][0]["content"]}),
    ];
    for text in ["second", "third", "fourth"] {
        transcript.push(json!({"role": "user", "content": text}));
        let body = super::door::chat(Some(DOOR), "legio", Value::Array(transcript.clone()));
        let (status, answer) = n2
            .post_json("/v1/chat/completions", "/v1/chat/completions", &body)
            .await;
        assert_eq!(status, StatusCode::OK, "{text}: {answer}");
        let reply = answer["choices"][0]["message"]["content"].clone();
        transcript.push(json!({"role": "assistant", "content": reply}));
    }
    n1.turn(DOOR, "@a fifth").await;
    // n2's table of every conversation's agents shows a's first session in it, opened on n1
    // (that table once read n2's copies as they stood).
    let (status, table) = n2
        .call(
            "get",
            "/operator/inspect/{what}",
            n2.operator("/operator/inspect/agents"),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{table}");
    let rows = table["rows"].as_array().cloned().unwrap_or_default();
    assert!(
        rows.iter().any(|r| r[0] == DOOR && r[1] == "a"),
        "a's session in {DOOR}: {table}"
    );
    let (status, shown) = history(&n2, DOOR).await;
    assert_eq!(status, StatusCode::OK, "{shown}");
    assert!(
        shown.to_string().contains("fifth"),
        "n2 shows n1's turn: {shown}"
    );
    // A read on n2 before anything is written leaves n2 an empty copy of a conversation; the
    // operator's context report on n2 still finds what n1 then wrote.
    const LATER: &str = "s:later";
    history(&n2, LATER).await;
    n1.turn(LATER, "hello").await;
    let path = format!("/operator/context?conversation={LATER}&agent=lead");
    let (status, report) = n2
        .call("get", "/operator/context", n2.operator(&path))
        .await;
    assert_eq!(status, StatusCode::OK, "{report}");
    stop_with_n1_owning(n1, n2, DOOR).await;
}

/// Results nobody's call can take are refused without taking anything: for a conversation
/// nobody owns (no lease is taken just to refuse), and for a reserved key (`legio:node:n9` would
/// name a node's presence lease; the runtime refuses it too, tests/cli/embedded.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_no_call_waits_for_take_no_lease() {
    let Some((_nats, n1, n2)) = two_nodes("srvnobody").await else {
        return;
    };
    let body = json!({"tool_results": [{"tool_call_id": "call-9", "content": "late"}]});
    for (key, status, code) in [
        ("s:nobody", StatusCode::CONFLICT, "no_pending_tool_call"),
        (
            "legio:node:n9",
            StatusCode::BAD_REQUEST,
            "bad_conversation_key",
        ),
    ] {
        let path = format!("/sessions/{key}/tool_results");
        let (got, answer) = n2
            .post_json("/sessions/{id}/tool_results", &path, &body)
            .await;
        assert_eq!(
            (got, answer["error"]["code"].as_str()),
            (status, Some(code)),
            "{key}: {answer}"
        );
    }
    for h in [&n1, &n2] {
        let owned = h.runtime.owned_conversations();
        assert!(owned.is_empty(), "{owned:?}");
    }
    n2.stop().await;
    n1.stop().await;
}

/// The names of the tools node `h` lists as declared for `key`.
async fn declared_on(h: &Harness, key: &str) -> Vec<String> {
    let (status, body) = h
        .call(
            "get",
            "/sessions/{id}/tools",
            h.get(&format!("/sessions/{key}/tools")),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Declares `tools` (a JSON array) for `key` through node `h`.
async fn declare(h: &Harness, key: &str, tools: Value) {
    let path = format!("/sessions/{key}/tools");
    let (status, body) = h
        .post_json("/sessions/{id}/tools", &path, &json!({ "tools": tools }))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// A turn for agent a posted to `h`, whose model (on `runner`, the node running the turn) calls
/// the declared tool `name` as `call`: it pauses for that call, and the host's result ends it.
async fn a_turn_pauses_for(h: &Harness, runner: &Harness, key: &str, call: &str, name: &str) {
    let agent_a = legio_core::AgentName::new("a").unwrap();
    runner.providers["stateless"].inject(Some(&agent_a), Fault::tool_calls([(call, name, "{}")]));
    let turns = format!("/sessions/{key}/turns");
    let (status, paused) = h
        .post_json(
            "/sessions/{id}/turns",
            &turns,
            &json!({"content": "@a look it up"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{paused}");
    let asked = &paused["required_action"]["tool_calls"][0];
    assert_eq!(
        (asked["id"].as_str(), asked["name"].as_str()),
        (Some(call), Some(name)),
        "{paused}"
    );
    let results = format!("/sessions/{key}/tool_results");
    let answer = json!({"tool_results": [{"tool_call_id": call, "content": "the fact"}]});
    let (status, done) = h
        .post_json("/sessions/{id}/tool_results", &results, &answer)
        .await;
    assert_eq!(status, StatusCode::OK, "{done}");
}

/// Tools declared through one node are the conversation's on every node (a `ToolsDeclared`
/// event in the log; they were once kept by the node they were declared on): declared on the
/// owner (n1), n2 lists them (n1 answers), and a turn posted to n2 without tools pauses for n1's
/// model's call of the declared `lookup`. Cleared through n2 (carried to n1, which records it),
/// neither node lists any, and the log holds both declarations once each. Declared again, they
/// outlive n1; and a node that kept what it read, taking the conversation over, offers what a
/// third node declared since.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_declared_through_one_node_are_declared_on_every_node() {
    const DECLARED: &str = "s:declared";
    let Some((nats, n1, n2)) = two_nodes("srvdeclared").await else {
        return;
    };
    n1.turn(DECLARED, "hello").await;
    declare(&n1, DECLARED, json!([tool("lookup")])).await;
    assert_eq!(declared_on(&n2, DECLARED).await, ["lookup"]);
    a_turn_pauses_for(&n2, &n1, DECLARED, "call-1", "lookup").await;

    declare(&n2, DECLARED, json!([])).await;
    assert!(declared_on(&n1, DECLARED).await.is_empty());
    assert!(declared_on(&n2, DECLARED).await.is_empty());
    let key = legio_core::ConversationKey::new(DECLARED).unwrap();
    let declarations: Vec<usize> = n1
        .runtime
        .log()
        .conversation_events(&key, legio_core::Seq::ZERO, usize::MAX)
        .unwrap()
        .into_iter()
        .filter_map(|r| match r.event {
            legio_core::Event::ToolsDeclared(d) => Some(d.tools.len()),
            _ => None,
        })
        .collect();
    assert_eq!(declarations, [1, 0]);

    // Declared again, they outlive the node that recorded them: n1 stops (releasing the
    // conversation); n2 reads them from the log (nobody holds it) and keeps what it read. A
    // third node then takes the conversation to declare `fetch`, and stops. n2, taking the
    // conversation over for the next turn, reads past what it kept and offers `fetch`.
    declare(&n2, DECLARED, json!([tool("lookup")])).await;
    n1.stop().await;
    assert_eq!(declared_on(&n2, DECLARED).await, ["lookup"]);
    let n3 = node(&nats.urls()[0], "srvdeclared", "n3").await;
    declare(&n3, DECLARED, json!([tool("fetch")])).await;
    n3.stop().await;
    a_turn_pauses_for(&n2, &n2, DECLARED, "call-2", "fetch").await;
    n2.stop().await;
}

/// A keyed turn on a cluster: sent to the node that does not own the conversation (forwarded to
/// the owner), sent again to either node, and again once the owner has stopped (n2 takes the
/// conversation over and finds the message in the log): stored once, answered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_turn_is_stored_once_whichever_node_its_retries_reach() {
    use super::idempotency::TURNS;
    let Some((_nats, n1, n2)) = two_nodes("srvkeyed").await else {
        return;
    };
    const KEYED: &str = "s:keyed";
    n1.turn(KEYED, "hello").await;
    let path = format!("/sessions/{KEYED}/turns");
    let body = json!({"content": "once"});
    let (status, first) = n2.post_keyed(TURNS, &path, "k-1", &body).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["replayed"], false, "{first}");
    for node in [&n1, &n2] {
        let (status, again) = node.post_keyed(TURNS, &path, "k-1", &body).await;
        assert_eq!(status, StatusCode::OK, "{again}");
        assert_eq!(again["replayed"], true, "{again}");
        assert_eq!(again["replies"], first["replies"]);
    }
    n1.stop().await;
    let (status, after) = n2.post_keyed(TURNS, &path, "k-1", &body).await;
    assert_eq!(status, StatusCode::OK, "{after}");
    assert_eq!(after["replayed"], true, "{after}");
    assert_eq!(
        after["replies"], first["replies"],
        "the reply written on n1"
    );
    assert_eq!(super::door::user_texts(&n2, KEYED), ["hello", "once"]);
    let owned = n2.runtime.owned_conversations();
    assert!(
        owned.iter().any(|(k, ..)| k.as_str() == KEYED),
        "n2 took it over"
    );
    n2.stop().await;
}
