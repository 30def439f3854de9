//! A host's results may take over the turn that made the calls (`Runtime::follow_tool_results`):
//! its later progress and its replies go to the request that handed the results over, not to
//! the turn's caller, so a host whose results reach another server than its turn still follows
//! it to its end. Of two such requests with the same results, only the one whose results the
//! calls took follows; a turn that calls again is taken over again by its next results.

use legio_core::{History, Participant};
use legio_llm::Fault;
use legio_runtime::{ErrorCode, HostToolResult, HostTurn, Progress, ProgressSink, ToolSpec};
use serde_json::json;
use std::time::Duration;
use tokio::sync::mpsc::{self, UnboundedReceiver};

use super::{Legion, CONV};

fn tool() -> ToolSpec {
    ToolSpec {
        name: "lookup".into(),
        description: "the host's lookup".into(),
        parameters: json!({"type": "object", "properties": {}}),
    }
}

fn result(id: &str) -> Vec<HostToolResult> {
    vec![HostToolResult {
        call_id: id.into(),
        content: format!("fact {id}"),
        is_error: false,
    }]
}

/// The ids of the next `ToolCallsRequired` on `steps` (the steps before it are dropped);
/// fails after 10 s.
async fn next_calls(steps: &mut UnboundedReceiver<Progress>) -> Vec<String> {
    let next = async {
        loop {
            match steps.recv().await.expect("the turn's progress") {
                Progress::ToolCallsRequired { calls, .. } => {
                    return calls.into_iter().map(|c| c.id).collect();
                }
                _ => continue,
            }
        }
    };
    within(next).await
}

/// `work`, or a failure after 10 s (a relay that lost a step would otherwise hang the test).
async fn within<T>(work: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), work)
        .await
        .expect("within 10 s")
}

fn channel() -> (ProgressSink, UnboundedReceiver<Progress>) {
    mpsc::unbounded_channel()
}

fn agent_done(steps: &mut UnboundedReceiver<Progress>) -> usize {
    std::iter::from_fn(|| steps.try_recv().ok())
        .filter(|s| matches!(s, Progress::AgentDone { .. }))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_that_follow_a_turn_take_over_its_progress_and_replies() {
    let legion = Legion::new(History::Stateless, "").await;
    legion.post("hello").await;
    let ann = Legion::agent("ann");
    legion
        .provider
        .inject(Some(&ann), Fault::tool_calls([("call-1", "lookup", "{}")]));
    legion
        .provider
        .inject(Some(&ann), Fault::tool_calls([("call-2", "lookup", "{}")]));
    let turn = HostTurn {
        sender: Participant::User,
        to: Some(ann.clone()),
        text: "look it up twice".into(),
        tools: vec![tool()],
    };
    let rt = legion.rt();
    let (caller, mut caller_steps) = channel();
    let (first, mut first_steps) = channel();
    let (second, mut second_steps) = channel();
    let host = async {
        assert_eq!(next_calls(&mut caller_steps).await, ["call-1"]);
        let follow = rt.follow_tool_results(CONV, result("call-1"), first);
        let again = async {
            // The calls took the first request's results: the same ones again are refused.
            assert_eq!(next_calls(&mut first_steps).await, ["call-2"]);
            let refused = rt
                .follow_tool_results(CONV, result("call-1"), channel().0)
                .await
                .expect_err("call-1 was answered");
            assert_eq!(refused.code(), ErrorCode::NoPendingToolCall, "{refused}");
            rt.follow_tool_results(CONV, result("call-2"), second).await
        };
        let (first_end, second_end) = tokio::join!(follow, again);
        let err = first_end.expect_err("the second results took the turn over");
        assert_eq!(err.code(), ErrorCode::TurnTakenOver, "{err}");
        second_end.unwrap()
    };
    let (posted, followed) =
        within(async { tokio::join!(rt.post_host_turn(CONV, turn, caller), host) }).await;
    let posted = posted.unwrap();
    assert_eq!(followed, posted, "the follower gets the turn's replies");
    assert!(posted.replies[0].outcome.is_ok(), "{posted:?}");
    assert_eq!(agent_done(&mut caller_steps), 0, "the caller was left");
    assert_eq!(
        agent_done(&mut first_steps),
        0,
        "the first follower was left"
    );
    assert_eq!(
        agent_done(&mut second_steps),
        1,
        "the last follower saw the end"
    );
}

/// A turn addressed to two agents whose models both call host tools: the caller is told both
/// calls; the results of ann's call, handed over elsewhere, take the turn over, and the new
/// follower is told bob's call again (still waiting: announced to a caller that will not show
/// it now), whose results end the turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_is_told_the_calls_still_waiting_when_it_takes_over() {
    let legion = Legion::new(History::Stateless, "").await;
    legion.post("hello").await;
    for (agent, id) in [("ann", "ann-1"), ("bob", "bob-1")] {
        let agent = Legion::agent(agent);
        legion
            .provider
            .inject(Some(&agent), Fault::tool_calls([(id, "lookup", "{}")]));
    }
    let turn = HostTurn {
        sender: Participant::User,
        to: None,
        text: "@ann @bob look it up".into(),
        tools: vec![tool()],
    };
    let rt = legion.rt();
    let (caller, mut caller_steps) = channel();
    let (follower, mut follower_steps) = channel();
    let host = async {
        let mut told = vec![
            next_calls(&mut caller_steps).await,
            next_calls(&mut caller_steps).await,
        ];
        told.sort();
        assert_eq!(told, [["ann-1"], ["bob-1"]]);
        let follow = rt.follow_tool_results(CONV, result("ann-1"), follower);
        let bob = async {
            assert_eq!(next_calls(&mut follower_steps).await, ["bob-1"]);
            rt.submit_tool_results(CONV, result("bob-1")).await.unwrap();
        };
        tokio::join!(follow, bob).0.unwrap()
    };
    let (posted, followed) =
        within(async { tokio::join!(rt.post_host_turn(CONV, turn, caller), host) }).await;
    let posted = posted.unwrap();
    assert_eq!(followed, posted);
    assert_eq!(posted.replies.len(), 2, "{posted:?}");
    assert!(
        posted.replies.iter().all(|r| r.outcome.is_ok()),
        "{posted:?}"
    );
    assert_eq!(
        agent_done(&mut follower_steps),
        2,
        "the follower saw both ends"
    );
}
