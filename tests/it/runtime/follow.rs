//! A host's results may take over the turn that made the calls (`Runtime::follow_tool_results`):
//! its later progress and its replies go to the request that handed the results over, not to
//! the turn's caller, so a host whose results reach another server than its turn still follows
//! it to its end. Of two such requests with the same results, only the one whose results the
//! calls took follows; a turn that calls again is taken over again by its next results.

use legio_core::{History, Participant};
use legio_llm::Fault;
use legio_runtime::{ErrorCode, HostToolResult, HostTurn, Progress, ProgressSink, ToolSpec};
use serde_json::json;
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

/// The ids of the next `ToolCallsRequired` on `steps` (the steps before it are dropped).
async fn next_calls(steps: &mut UnboundedReceiver<Progress>) -> Vec<String> {
    loop {
        match steps.recv().await.expect("the turn's progress") {
            Progress::ToolCallsRequired { calls, .. } => {
                return calls.into_iter().map(|c| c.id).collect()
            }
            _ => continue,
        }
    }
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
        assert!(err.to_string().contains("took the turn over"), "{err}");
        second_end.unwrap()
    };
    let (posted, followed) = tokio::join!(rt.post_host_turn(CONV, turn, caller), host);
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
