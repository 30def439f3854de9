//! Documented behaviours of the runtime that no scenario covered (docs/runtime-semantics.md):
//! one agent's turns run in log order under concurrent posts; a turn that arrives while its agent
//! waits out a restart backoff waits and is answered after the restart; the turn timeout cuts a
//! running tool call, which gets an error result; a heartbeat never overlaps a turn. Written
//! against the public API only, so that they port across the runtime's refactors.

use std::sync::Arc;
use std::time::{Duration, Instant};

use legio_core::{Event, History, Participant, Seq};
use legio_llm::Fault;
use legio_runtime::Activity;

use super::tools::{hanging_tool, result};
use super::{Legion, CONV};

const RESUMABLE: History = History::Session { resumable: true };

/// Polls `agent`'s activity until `want`, with a generous deadline.
async fn wait_for_activity(legion: &Legion, agent: &str, want: Activity) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = legion.rt().status(CONV).await.unwrap();
        let now = status.iter().find(|s| s.agent.as_str() == agent).unwrap();
        if now.activity == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{agent} never became {want:?}: {:?}",
            now.activity
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Posts from 16 threads at once, each to ann and bob: every agent's turns answer the posts in
/// log order, and nothing is marked redelivered (no turn failed).
#[test]
fn one_agents_turns_run_in_log_order_under_concurrent_posts() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let legion = rt.block_on(Legion::with_provider(RESUMABLE, "", "latency_ms = 1"));
    std::thread::scope(|s| {
        for i in 0..16 {
            let (legion, handle) = (&legion, rt.handle());
            s.spawn(move || {
                let text = format!("@ann @bob task {i}");
                let replies = handle.block_on(legion.rt().post(CONV, &text)).unwrap();
                assert!(replies.iter().all(|r| r.error().is_none()), "{replies:?}");
            });
        }
    });
    let posted: Vec<Seq> = legion
        .events()
        .into_iter()
        .filter(|r| {
            r.event
                .as_message()
                .is_some_and(|m| m.sender == Participant::User)
        })
        .map(|r| r.seq)
        .collect();
    for agent in ["ann", "bob"] {
        let requests = legion.requests(agent);
        let answered: Vec<Seq> = requests.iter().map(|r| r.plan.up_to).collect();
        assert_eq!(
            answered, posted,
            "{agent}'s turns answer the posts in log order"
        );
        for r in &requests {
            assert!(
                r.plan.history.iter().all(|i| !i.redelivered),
                "no turn failed, so nothing is marked redelivered: {}",
                super::shape(r)
            );
        }
    }
    rt.block_on(async move {
        let mut legion = legion;
        legion.crash_and_restart().await;
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_arriving_during_the_restart_backoff_waits_and_is_answered() {
    let legion = Legion::new(
        RESUMABLE,
        // A backoff long enough to be seen by a poll on a loaded machine (400 ms was missed once
        // at a load average of 14).
        "restart_max = 10\nrestart_backoff_ms = 1500\nrestart_backoff_max_ms = 1500",
    )
    .await;
    legion.post("@ann warm up").await;
    legion
        .provider
        .inject(Some(&Legion::agent("ann")), Fault::Panic);
    let replies = legion.post("@ann this one crashes").await;
    assert!(replies[0].error().is_some(), "{replies:?}");
    // ann waits out its backoff now: a turn sent meanwhile is queued, not lost or refused.
    wait_for_activity(&legion, "ann", Activity::Restarting).await;
    let replies = legion.post("@ann are you back?").await;
    assert_eq!(replies[0].error(), None, "{replies:?}");
    let last = legion.requests("ann").pop().unwrap();
    assert_eq!(
        last.plan.new_message.message.text_content(),
        "@ann are you back?"
    );
    assert_eq!(
        legion.boundaries("ann"),
        vec!["opened:first_use", "suspended:crashed", "opened:crashed"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_turn_timeout_cuts_a_running_tool_call_with_an_error_result() {
    let mut legion = Legion::new(RESUMABLE, "turn_timeout_seconds = 0.5").await;
    let started = Arc::new(tokio::sync::Notify::new());
    legion.with_tools(hanging_tool(Arc::clone(&started))).await;
    legion.provider.inject(
        Some(&Legion::agent("ann")),
        Fault::tool_calls([("w1", "wait_forever", "{}")]),
    );
    let replies = legion.post("@ann start the long job").await;
    let error = replies[0].error().expect("the turn timed out");
    assert!(error.contains("turn_timeout_seconds"), "{error}");
    let (content, is_error) = result(&legion, "w1");
    assert!(is_error, "{content}");
    assert!(content.contains("ran out of time"), "{content}");
    let failed = legion
        .events()
        .into_iter()
        .filter(|r| matches!(&r.event, Event::TurnFailed(e) if e.agent.as_str() == "ann"))
        .count();
    assert_eq!(failed, 1, "the cut turn is recorded as failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_never_overlaps_a_turn() {
    let legion = Legion::new(RESUMABLE, "turn_timeout_seconds = 1").await;
    legion
        .provider
        .inject(Some(&Legion::agent("ann")), Fault::Hang);
    let turn = legion.rt().post(CONV, "@ann a slow one");
    let beat = async {
        wait_for_activity(&legion, "ann", Activity::Working).await;
        legion.rt().heartbeat(CONV, "ann", "anything due?").await
    };
    let (replies, beat) = tokio::join!(turn, beat);
    assert!(
        replies.unwrap()[0].error().is_some(),
        "the hanging turn timed out"
    );
    assert_eq!(beat.unwrap().error(), None);
    // The heartbeat ran between turns: after the hanging turn ended, never during it.
    let order: Vec<&str> = legion
        .events()
        .iter()
        .filter_map(|r| match &r.event {
            Event::TurnFailed(e) if e.agent.as_str() == "ann" => Some("turn_failed"),
            Event::HeartbeatRan(e) if e.agent.as_str() == "ann" => Some("heartbeat"),
            _ => None,
        })
        .collect();
    assert_eq!(order, ["turn_failed", "heartbeat"]);
}
