//! Tool calls that wait for a person: a step whose calls match the agent's approval policy
//! (`runtime.approval`, `agents.NAME.approval`) pauses as log state, and the step's outcomes
//! once every answer is in.
//!
//! [`pause`] records one `ApprovalRequested` per call that needs an answer, after the step's
//! calls message, and ends the turn with an `awaiting_approval` error reply: nothing of the pause
//! lives in memory, so any process that reads the log can continue it. [`outcomes`] is the
//! continuation's step: the approved calls and the calls that needed no answer run, once; a
//! denied or timed-out call gets an error result saying so. The turn goes on from there with the
//! same call ids and no new model call for the step that asked (agent/turn.rs's `resume`).

use std::sync::Arc;

use legio_config::AgentSpec;
use legio_core::{
    Approval, ApprovalDecision, ApprovalRequested, ConversationKey, Event, MessageId, Timestamp,
};
use legio_llm::ToolCallPart;
use legio_ops::ConversationApprovals;

use crate::clock::now;
use crate::error::RuntimeError;
use crate::reply::{AgentReply, TurnErrorKind};
use crate::shared::Shared;
use crate::tools::calls::{run_calls, CallContext, ToolOutcome};

/// Reads `conversation`'s approvals from the log.
pub(crate) async fn read(
    shared: &Arc<Shared>,
    conversation: &ConversationKey,
) -> Result<ConversationApprovals, RuntimeError> {
    let conversation = conversation.clone();
    shared
        .read_with(move |log| legio_ops::read_approvals(log, &conversation))
        .await
}

/// The deadline of a request made at `at`.
fn deadline(shared: &Shared, at: Timestamp) -> Timestamp {
    let timeout = shared.config.runtime.approval_timeout;
    let micros = i64::try_from(timeout.as_micros()).unwrap_or(i64::MAX);
    Timestamp::from_unix_micros(at.unix_micros().saturating_add(micros))
}

/// Pauses the step when one of `calls` needs an approval: records the requests and answers the
/// turn with an `awaiting_approval` error reply naming them. `None`: no call needs one.
pub(crate) async fn pause(
    shared: &Shared,
    conversation: &ConversationKey,
    spec: &AgentSpec,
    calls: &[ToolCallPart],
    call_message: MessageId,
) -> Result<Option<AgentReply>, RuntimeError> {
    let at = now();
    let events: Vec<Event> = calls
        .iter()
        .filter_map(|call| {
            let pattern = spec.approval.needs_approval(&call.name)?;
            Some(Event::ApprovalRequested(ApprovalRequested {
                conversation: conversation.clone(),
                agent: spec.name.clone(),
                at,
                call_message,
                call_id: call.id.clone(),
                tool: call.name.clone(),
                arguments: call.arguments.clone(),
                pattern: pattern.to_string(),
                deadline: deadline(shared, at),
            }))
        })
        .collect();
    if events.is_empty() {
        return Ok(None);
    }
    let waiting: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::ApprovalRequested(r) => Some(format!("{} (call {})", r.tool, r.call_id)),
            _ => None,
        })
        .collect();
    shared.append(events).await?;
    metrics::counter!(crate::metrics::APPROVALS_REQUESTED).increment(waiting.len() as u64);
    let why = format!(
        "{} paused: {} wait for a person's answer (runtime.approval); the turn goes on once every call is approved or denied, or denied at runtime.approval_timeout_seconds",
        spec.name,
        waiting.join(", ")
    );
    Ok(Some(AgentReply::failed(
        &spec.name,
        TurnErrorKind::AwaitingApproval,
        why,
    )))
}

/// The error result of a call that was not approved.
fn refused(approval: &Approval) -> Option<ToolOutcome> {
    let answer = approval.answer.as_ref()?;
    let reason = answer
        .reason
        .as_deref()
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    match answer.decision {
        ApprovalDecision::Approved => None,
        ApprovalDecision::Denied => Some(ToolOutcome::Failed(format!(
            "denied: {} refused this call of {}{reason}; it did not run. Do not call it again unless asked to.",
            answer.by, approval.requested.tool
        ))),
        ApprovalDecision::TimedOut => Some(ToolOutcome::Failed(format!(
            "denied: nobody approved this call of {} before its deadline ({}); it did not run.",
            approval.requested.tool, approval.requested.deadline
        ))),
    }
}

/// The outcomes of a ready step's calls, in their order: a refused call's error result; every
/// other call run once (approved ones and those that needed no answer), in parallel.
pub(crate) async fn outcomes(
    ctx: &CallContext,
    read: &ConversationApprovals,
    call_message: MessageId,
    calls: &[ToolCallPart],
) -> Vec<ToolOutcome> {
    let step: Vec<&Approval> = read.approvals.of_step(call_message).collect();
    let refusals: Vec<Option<ToolOutcome>> = calls
        .iter()
        .map(|call| {
            step.iter()
                .find(|a| a.requested.call_id == call.id)
                .and_then(|a| refused(a))
        })
        .collect();
    let runnable: Vec<ToolCallPart> = calls
        .iter()
        .zip(&refusals)
        .filter(|(_, refused)| refused.is_none())
        .map(|(call, _)| call.clone())
        .collect();
    let mut ran = run_calls(ctx, &runnable).await.into_iter();
    refusals
        .into_iter()
        .map(|refused| match refused {
            Some(outcome) => outcome,
            None => ran.next().unwrap_or_else(|| {
                ToolOutcome::Failed("the call did not run (no outcome was recorded)".to_owned())
            }),
        })
        .collect()
}

/// The step's calls, from its message.
pub(crate) fn step_calls(
    read: &ConversationApprovals,
    call_message: MessageId,
) -> Vec<ToolCallPart> {
    read.calls(call_message)
        .into_iter()
        .map(|(id, name, arguments)| ToolCallPart {
            id,
            name,
            arguments,
        })
        .collect()
}
