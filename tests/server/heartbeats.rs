//! Heartbeats for hosts and operators (issue 14.3): `POST /sessions/{id}/heartbeats` runs one and
//! records it as a `heartbeat_ran` event (never a message), its errors are JSON like every other,
//! its count reaches `/metrics` (which the dashboard draws); `[heartbeats.AGENT]` schedules run in
//! the listed conversations, or in those where the agent's session is open, and stop with the
//! server. Also (issue 16.7): a path that is not UTF-8 is a JSON 400.

use std::time::{Duration, Instant};

use legio_core::{ConversationKey, Event, Seq};
use legio_store::EventLog;
use reqwest::StatusCode;
use serde_json::json;

use super::{messages_of, Harness, TOKEN};

/// `(agent, conversation)` of every heartbeat in the log.
fn heartbeats(log: &dyn EventLog) -> Vec<(String, String)> {
    if log.last_seq() == Seq::ZERO {
        return Vec::new();
    }
    log.read_range(Seq::FIRST, log.last_seq(), 100_000)
        .unwrap()
        .into_iter()
        .filter_map(|r| match r.event {
            Event::HeartbeatRan(e) => Some((e.agent.to_string(), e.conversation.to_string())),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_is_recorded_as_one_event_and_answered_as_a_reply() {
    let h = Harness::start().await;
    h.turn("t:beat", "hello").await;
    let key = ConversationKey::new("t:beat").unwrap();
    let messages_before = messages_of(h.runtime.log().as_ref(), &key).len();
    let (status, reply) = h
        .call(
            "post",
            "/sessions/{id}/heartbeats",
            h.client
                .post(h.url("/sessions/t:beat/heartbeats"))
                .bearer_auth(TOKEN)
                .json(&json!({"agent": "a", "text": "anything due?"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(reply["agent"], "a");
    assert!(
        reply["error"].is_null() && reply["message_id"].is_null(),
        "{reply}"
    );
    assert!(
        reply["content"].as_str().is_some_and(|c| !c.is_empty()),
        "{reply}"
    );
    let log = h.runtime.log();
    let seq = Seq(reply["seq"].as_u64().unwrap());
    let record = log.read_range(seq, seq, 1).unwrap().remove(0);
    let Event::HeartbeatRan(ran) = record.event else {
        panic!("seq {seq} is not a heartbeat: {:?}", record.event.kind());
    };
    assert_eq!(
        (ran.agent.as_str(), ran.prompt.as_str()),
        ("a", "anything due?")
    );
    assert_eq!(ran.reply.as_deref(), reply["content"].as_str());
    assert_eq!(messages_of(log.as_ref(), &key).len(), messages_before);
    let metrics = h
        .get("/metrics")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("legio_heartbeats_total{") && l.contains("agent=\"a\"")),
        "{metrics}"
    );
    let script = h
        .get("/dashboard.js")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(script.contains("legio_heartbeats_total"));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_and_path_errors_are_json_and_store_nothing() {
    let h = Harness::start().await;
    let post = |path: &str, body: serde_json::Value| {
        h.client.post(h.url(path)).bearer_auth(TOKEN).json(&body)
    };
    for (path, body, status, code) in [
        (
            "/sessions/t:e/heartbeats",
            json!({"agent": "zed", "text": "x"}),
            404,
            "unknown_agent",
        ),
        (
            "/sessions/t:e/heartbeats",
            json!({"agent": "a", "text": "  "}),
            422,
            "empty_message",
        ),
        (
            "/sessions/t:e/heartbeats",
            json!({"agent": "a"}),
            422,
            "invalid_body",
        ),
        (
            "/sessions/t:e/heartbeats",
            json!({"agent": "a", "text": "x", "extra": 1}),
            422,
            "invalid_body",
        ),
        (
            "/sessions/bad key/heartbeats",
            json!({"agent": "a", "text": "x"}),
            400,
            "bad_conversation_key",
        ),
        (
            "/sessions/legio:memory/heartbeats",
            json!({"agent": "a", "text": "x"}),
            400,
            "bad_conversation_key",
        ),
        (
            "/sessions/%FF%FE/heartbeats",
            json!({"agent": "a", "text": "x"}),
            400,
            "bad_path",
        ),
        (
            "/sessions/%FF%FE/turns",
            json!({"content": "x"}),
            400,
            "bad_path",
        ),
    ] {
        let template = if path.ends_with("turns") {
            "/sessions/{id}/turns"
        } else {
            "/sessions/{id}/heartbeats"
        };
        let (got, answer) = h.call("post", template, post(path, body)).await;
        assert_eq!(
            (got.as_u16(), answer["error"]["code"].as_str()),
            (status, Some(code)),
            "{path}: {answer}"
        );
    }
    let (got, answer) = h
        .call(
            "get",
            "/sessions/{id}/history",
            h.get("/sessions/%C3%28/history"),
        )
        .await;
    assert_eq!(
        (got.as_u16(), answer["error"]["code"].as_str()),
        (400, Some("bad_path"))
    );
    assert!(heartbeats(h.runtime.log().as_ref()).is_empty());
    h.stop().await;
}

/// Polls until `done` holds for the log's heartbeats, or fails after 30 s.
async fn wait_for(h: &Harness, what: &str, done: impl Fn(&[(String, String)]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen = heartbeats(h.runtime.log().as_ref());
        if done(&seen) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: saw {seen:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_run_where_configured_and_stop_with_the_server() {
    // `a` beats in the listed conversation; `b` wherever its session is open.
    let server = format!(
        "token = \"{TOKEN}\"\n\
         [heartbeats.a]\nevery_seconds = 1\ntext = \"listed tick\"\nconversations = [\"t:listed\"]\n\
         [heartbeats.b]\nevery_seconds = 1\ntext = \"open tick\""
    );
    let h = Harness::start_with(&server, Duration::ZERO).await;
    h.turn("t:open", "@b hello").await;
    h.turn("t:lead-only", "hello").await;
    let count = |seen: &[(String, String)], agent: &str, conversation: &str| {
        seen.iter()
            .filter(|(a, c)| a == agent && c == conversation)
            .count()
    };
    wait_for(&h, "two ticks of both schedules", |seen| {
        count(seen, "a", "t:listed") >= 2 && count(seen, "b", "t:open") >= 2
    })
    .await;
    let seen = heartbeats(h.runtime.log().as_ref());
    assert!(
        seen.iter().all(|(agent, conversation)| matches!(
            (agent.as_str(), conversation.as_str()),
            ("a", "t:listed") | ("b", "t:open")
        )),
        "a heartbeat outside its schedule: {seen:?}"
    );
    // A reset closes b's session: its schedule leaves t:open alone from then on.
    h.runtime.reset("t:open", "b").await.unwrap();
    let before = heartbeats(h.runtime.log().as_ref());
    let (a_before, b_before) = (
        count(&before, "a", "t:listed"),
        count(&before, "b", "t:open"),
    );
    wait_for(&h, "two more ticks of a", |seen| {
        count(seen, "a", "t:listed") >= a_before + 2
    })
    .await;
    let seen = heartbeats(h.runtime.log().as_ref());
    // At most one of b's was already under way when the reset landed.
    assert!(
        count(&seen, "b", "t:open") <= b_before + 1,
        "b kept beating after its session closed: {seen:?}"
    );
    let runtime = std::sync::Arc::clone(&h.runtime);
    h.stop().await;
    let stopped = heartbeats(runtime.log().as_ref()).len();
    // Two intervals after shutdown: nothing more (the tasks are gone with the runtime).
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(heartbeats(runtime.log().as_ref()).len(), stopped);
}
