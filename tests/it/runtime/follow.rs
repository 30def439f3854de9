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
        idempotency_key: None,
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
        idempotency_key: None,
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

/// A legion (host tool timeout 1 s) whose lead calls the host tool `lookup` (call `call-1`) on
/// the host turn returned.
async fn lead_calls_a_host_tool() -> (Legion, HostTurn) {
    let legion = Legion::new(History::Stateless, "host_tool_timeout_seconds = 1").await;
    legion.provider.inject(
        Some(&Legion::agent("lead")),
        Fault::tool_calls([("call-1", "lookup", "{}")]),
    );
    let turn = HostTurn {
        sender: Participant::User,
        to: None,
        text: "please look it up".into(),
        tools: vec![tool()],
        idempotency_key: None,
    };
    (legion, turn)
}

/// A user's message posted while a host tool call waits: the paused turn's next step takes it
/// in (it arrived while the call ran), so that step's reply answers it, and its own turn gives
/// that reply instead of answering it again from a context cut at the message (where the call
/// would read as interrupted, a result the log does not keep). Found by a host's walkthrough:
/// one message, two replies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_posted_while_a_host_call_waits_is_answered_once() {
    let (legion, turn) = lead_calls_a_host_tool().await;
    let lead = Legion::agent("lead");
    let rt = legion.rt();
    let (caller, mut caller_steps) = channel();
    let meanwhile = async {
        assert_eq!(next_calls(&mut caller_steps).await, ["call-1"]);
        rt.post(CONV, "meanwhile, hello").await.unwrap()
    };
    let (paused, later) =
        within(async { tokio::join!(rt.post_host_turn(CONV, turn, caller), meanwhile) }).await;
    let reply_seq =
        |posted: &legio_runtime::Posted| posted.replies[0].outcome.as_ref().unwrap().seq;
    let paused = paused.unwrap();
    assert_eq!(
        reply_seq(&later),
        reply_seq(&paused),
        "one reply answers both"
    );

    let messages: Vec<legio_core::Message> = legion
        .events()
        .into_iter()
        .filter_map(|r| match r.event {
            legio_core::Event::MessagePosted(m) => Some(m),
            _ => None,
        })
        .collect();
    let replies = messages
        .iter()
        .filter(|m| m.sender == Participant::Agent(lead.clone()))
        .filter(|m| legio_core::tool_call_ids(m).is_empty() && !legio_core::has_tool_result(m))
        .count();
    assert_eq!(replies, 1, "one text reply of lead in the log");
    let stored: Vec<&str> = messages
        .iter()
        .flat_map(|m| m.parts.iter())
        .filter_map(|p| match p {
            legio_core::Part::ToolResult { content, .. } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    for request in legion.requests("lead") {
        for part in request.plan.messages().flat_map(|i| i.message.parts.iter()) {
            if let legio_core::Part::ToolResult { content, .. } = part {
                assert!(
                    stored.contains(&content.as_str()),
                    "the model read a result the log does not keep: {content}"
                );
            }
        }
    }
}

/// A host's results that answer no waiting call are refused with the reason: none given, a call
/// answered twice in one request, a call never made, a call that timed out (found by a host's
/// walkthrough: `no tool call "" is waiting`, `no tool call "call_1" is waiting ...; waiting:
/// call_1`, and `waiting: none` after a timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_that_answer_no_waiting_call_say_why() {
    use legio_runtime::{NotWaiting, RuntimeError};
    let (legion, turn) = lead_calls_a_host_tool().await;
    let rt = legion.rt();
    let why = |results: Vec<HostToolResult>| async move {
        match rt.submit_tool_results(CONV, results).await {
            Err(RuntimeError::NoPendingToolCall { why, .. }) => why,
            other => panic!("{other:?}"),
        }
    };
    let (caller, mut caller_steps) = channel();
    let host = async {
        assert_eq!(next_calls(&mut caller_steps).await, ["call-1"]);
        assert_eq!(why(Vec::new()).await, NotWaiting::NoResults);
        let twice = [result("call-1"), result("call-1")].concat();
        assert_eq!(why(twice).await, NotWaiting::Twice);
        assert_eq!(why(result("call-9")).await, NotWaiting::Unknown);
    };
    let (posted, ()) =
        within(async { tokio::join!(rt.post_host_turn(CONV, turn, caller), host) }).await;
    posted.unwrap();
    let late = rt
        .submit_tool_results(CONV, result("call-1"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            late,
            RuntimeError::NoPendingToolCall {
                why: NotWaiting::TimedOut,
                ..
            }
        ),
        "{late:?}"
    );
    assert!(
        late.to_string().contains("host_tool_timeout_seconds"),
        "{late}"
    );
}
