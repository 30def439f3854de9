//! Tool calls that wait for a person (issue 49), with the scripted provider and host tools that
//! count their runs: a step with an approved and a denied call pauses as log state, survives a
//! crash between the answers, and continues once (the model asked once for the step, the approved
//! tool ran once, the next request holds each call and result once); two consecutive steps each
//! needing approval never re-run the first tool; an unanswered call is denied at its deadline and
//! the model is told.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use legio_core::{AnswerError, ApprovalDecision, Event, History, Part};
use legio_llm::{Fault, RecordedRequest};
use legio_runtime::{RuntimeError, ToolRegistry, TurnErrorKind};
use serde_json::{json, Value};

use super::{Legion, CONV};

/// `pay` and `wipe`, each counting its runs.
fn counted_tools() -> (ToolRegistry, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let (paid, wiped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut tools = ToolRegistry::new();
    let count = |n: &Arc<AtomicUsize>, text: &'static str| {
        let n = Arc::clone(n);
        move |_: Value| {
            n.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, String>(text.to_owned()) }
        }
    };
    tools
        .register(
            "pay",
            "Pay a bill.",
            json!({"type": "object"}),
            count(&paid, "paid"),
        )
        .unwrap()
        .register(
            "wipe",
            "Wipe a disk.",
            json!({"type": "object"}),
            count(&wiped, "wiped"),
        )
        .unwrap();
    (tools, paid, wiped)
}

/// A plan's messages as `sender:` and `T`, `C(id)`, `R(id)` parts.
fn shape(request: &RecordedRequest) -> Vec<String> {
    request
        .plan
        .messages()
        .map(|i| {
            let parts: Vec<String> = i
                .message
                .parts
                .iter()
                .map(|p| match p {
                    Part::Text { .. } => "T".to_owned(),
                    Part::ToolCall { id, .. } => format!("C({id})"),
                    Part::ToolResult { call_id, .. } => format!("R({call_id})"),
                })
                .collect();
            format!("{}:{}", i.message.sender, parts.join("+"))
        })
        .collect()
}

fn result_of(legion: &Legion, call_id: &str) -> Vec<(String, bool)> {
    legion
        .events()
        .into_iter()
        .filter_map(|r| r.event.as_message().cloned())
        .flat_map(|m| m.parts)
        .filter_map(|p| match p {
            Part::ToolResult {
                call_id: id,
                content,
                is_error,
            } if id == call_id => Some((content, is_error)),
            _ => None,
        })
        .collect()
}

async fn approvals_legion(runtime: &str) -> (Legion, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let mut legion = Legion::new(History::Stateless, runtime).await;
    let (tools, paid, wiped) = counted_tools();
    legion.with_tools(tools).await;
    (legion, paid, wiped)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_and_a_denied_call_survive_a_crash_and_the_turn_goes_on_once() {
    let (mut legion, paid, wiped) = approvals_legion("approval = [\"pay\", \"wipe\"]").await;
    let ann = Legion::agent("ann");
    legion.provider.inject(
        Some(&ann),
        Fault::tool_calls([
            ("call_pay", "pay", "{\"amount\":12}"),
            ("call_wipe", "wipe", "{}"),
        ]),
    );
    let posted = legion.post("@ann settle the bill").await;
    let paused = posted[0].outcome.as_ref().unwrap_err();
    assert_eq!(paused.kind, TurnErrorKind::AwaitingApproval, "{paused:?}");
    assert!(paused.message.contains("call_pay") && paused.message.contains("call_wipe"));
    let asked: Vec<String> = legion
        .events()
        .into_iter()
        .filter_map(|r| match r.event {
            Event::ApprovalRequested(e) => {
                Some(format!("{}:{}:{}", e.call_id, e.tool, e.arguments))
            }
            _ => None,
        })
        .collect();
    assert_eq!(asked, ["call_pay:pay:{\"amount\":12}", "call_wipe:wipe:{}"]);

    // The process dies while waiting; the pause is in the log.
    legion.crash_and_restart().await;
    let answer = legion
        .rt()
        .answer_approval(CONV, "call_p", ApprovalDecision::Approved, "cli", None)
        .await
        .unwrap();
    assert_eq!(answer.call_id, "call_pay", "the short id found the call");
    assert_eq!(answer.still_waiting, ["call_wipe"]);
    assert!(answer.continued.is_none());
    assert_eq!(
        paid.load(Ordering::SeqCst),
        0,
        "nothing runs before every answer is in"
    );
    let again = legion
        .rt()
        .answer_approval(CONV, "call_pay", ApprovalDecision::Denied, "http:ops", None)
        .await
        .unwrap_err();
    assert!(
        matches!(&again, RuntimeError::Approval(AnswerError::AlreadyAnswered { by, .. }) if by == "cli"),
        "{again:?}"
    );
    assert!(again.to_string().contains("approved by cli"), "{again}");

    legion.crash_and_restart().await;
    let answer = legion
        .rt()
        .answer_approval(
            CONV,
            "call_wipe",
            ApprovalDecision::Denied,
            "http:ops",
            Some("not that disk".into()),
        )
        .await
        .unwrap();
    let continued = answer
        .continued
        .expect("the last answer continues the turn");
    assert!(continued.outcome.is_ok(), "{continued:?}");
    assert_eq!(paid.load(Ordering::SeqCst), 1, "the approved tool ran once");
    assert_eq!(wiped.load(Ordering::SeqCst), 0, "the denied tool never ran");
    let wipe = result_of(&legion, "call_wipe");
    assert_eq!(wipe.len(), 1);
    assert!(
        wipe[0].1 && wipe[0].0.contains("denied") && wipe[0].0.contains("not that disk"),
        "{wipe:?}"
    );
    assert_eq!(result_of(&legion, "call_pay"), [("paid".to_owned(), false)]);

    let requests = legion.requests("ann");
    assert_eq!(
        requests.len(),
        2,
        "one model call for the step that asked, one after"
    );
    assert_eq!(
        shape(&requests[1]),
        [
            "user:T",
            "ann:C(call_pay)+C(call_wipe)",
            "ann:R(call_pay)+R(call_wipe)"
        ]
    );
    let late = legion
        .rt()
        .answer_approval(CONV, "call_wipe", ApprovalDecision::Approved, "cli", None)
        .await
        .unwrap_err();
    assert!(late.to_string().contains("denied by http:ops"), "{late}");
    assert_eq!(paid.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_consecutive_steps_needing_approval_never_rerun_the_first_tool() {
    let (legion, paid, _) = approvals_legion("approval = [\"pay\"]").await;
    let ann = Legion::agent("ann");
    legion
        .provider
        .inject(Some(&ann), Fault::tool_calls([("call_1", "pay", "{}")]));
    legion
        .provider
        .inject(Some(&ann), Fault::tool_calls([("call_2", "pay", "{}")]));
    let posted = legion.post("@ann pay twice").await;
    assert!(posted[0].outcome.is_err());
    let first = legion
        .rt()
        .answer_approval(CONV, "call_1", ApprovalDecision::Approved, "cli", None)
        .await
        .unwrap();
    let paused_again = first.continued.unwrap().outcome.unwrap_err();
    assert_eq!(paused_again.kind, TurnErrorKind::AwaitingApproval);
    assert_eq!(paid.load(Ordering::SeqCst), 1);
    let second = legion
        .rt()
        .answer_approval(CONV, "call_2", ApprovalDecision::Approved, "cli", None)
        .await
        .unwrap();
    assert!(second.continued.unwrap().outcome.is_ok());
    assert_eq!(
        paid.load(Ordering::SeqCst),
        2,
        "each approved call ran once, the first not again"
    );
    assert_eq!(legion.requests("ann").len(), 3);
    assert_eq!(result_of(&legion, "call_1").len(), 1);
    assert_eq!(result_of(&legion, "call_2").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_call_is_denied_at_its_deadline_and_the_model_is_told() {
    let (legion, paid, _) =
        approvals_legion("approval = [\"pay\"]\napproval_timeout_seconds = 0.3").await;
    let ann = Legion::agent("ann");
    legion
        .provider
        .inject(Some(&ann), Fault::tool_calls([("call_late", "pay", "{}")]));
    let posted = legion.post("@ann pay").await;
    assert!(posted[0].outcome.is_err());
    let deadline = Instant::now() + Duration::from_secs(10);
    while legion.requests("ann").len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the deadline never denied the call"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let timed_out: Vec<String> = legion
        .events()
        .into_iter()
        .filter_map(|r| match r.event {
            Event::ApprovalAnswered(e) => Some(format!("{}:{}:{}", e.call_id, e.decision, e.by)),
            _ => None,
        })
        .collect();
    assert_eq!(timed_out, ["call_late:timed_out:deadline"]);
    let result = result_of(&legion, "call_late");
    assert!(
        result[0].1 && result[0].0.contains("deadline"),
        "{result:?}"
    );
    assert_eq!(paid.load(Ordering::SeqCst), 0);
    let answer = legion
        .rt()
        .answer_approval(CONV, "call_late", ApprovalDecision::Approved, "cli", None)
        .await
        .unwrap_err();
    assert!(
        answer.to_string().contains("timed_out by deadline"),
        "{answer}"
    );
}
