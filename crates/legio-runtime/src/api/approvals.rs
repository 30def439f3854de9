//! Approvals as the host answers them: [`Runtime::answer_approval`] (approve or deny a tool call
//! that paused its turn; the last answer a step waited for continues the turn, once), and the
//! deadline watch that denies a call nobody answered by `runtime.approval_timeout_seconds`.

use std::time::Duration;

use legio_core::{ApprovalDecision, ConversationKey, Timestamp};

use crate::clock::now;
use crate::command::{AnswerApproval, ApprovalAnswer};
use crate::error::RuntimeError;
use crate::names::IntoName;
use crate::reply::{AgentReply, TurnErrorKind};
use crate::runtime::Runtime;

impl Runtime {
    /// Answers the approval of `call_id` (the id as recorded, or the beginning of exactly one) in
    /// `conversation`: `decision` by `by` (who answers, recorded: `cli`, `http:NAME`), with an
    /// optional reason. Recorded as an `ApprovalAnswered` event; a second answer to the same call
    /// is [`RuntimeError::Approval`] naming the first. An answer after the call's deadline is
    /// recorded as timed out. When it is the last answer the call's step waited for, the turn
    /// goes on (the approved calls run once, the model gets a denied call's error result) and its
    /// reply is in the answer.
    pub async fn answer_approval(
        &self,
        conversation: impl IntoName<ConversationKey>,
        call_id: &str,
        decision: ApprovalDecision,
        by: &str,
        reason: Option<String>,
    ) -> Result<ApprovalAnswer, RuntimeError> {
        let command = AnswerApproval {
            conversation: Self::host_conversation(conversation)?,
            call_id: call_id.trim().to_owned(),
            decision,
            by: by.to_owned(),
            reason: reason.filter(|r| !r.trim().is_empty()),
        };
        self.run(command, None).await
    }

    /// After replies of `conversation`'s agents, one of which paused on approvals: a task that
    /// denies each call of the conversation still unanswered at its deadline (through
    /// [`Runtime::answer_approval`], as `deadline`), continuing its turn. Aborted when the
    /// runtime stops; a restarted process watches again on its next paused turn or answer.
    pub(crate) fn watch_approvals(&self, conversation: &ConversationKey, replies: &[AgentReply]) {
        let paused = replies
            .iter()
            .any(|r| matches!(&r.outcome, Err(e) if e.kind == TurnErrorKind::AwaitingApproval));
        if !paused {
            return;
        }
        let runtime = self.handle();
        let conversation = conversation.clone();
        let task = tokio::spawn(async move {
            while let Ok(read) = crate::tools::approval::read(&runtime.shared, &conversation).await
            {
                let Some(next) = read.approvals.pending().map(|a| a.requested.deadline).min()
                else {
                    break;
                };
                tokio::time::sleep(until(next)).await;
                let overdue: Vec<String> = read
                    .approvals
                    .overdue(now())
                    .map(|a| a.requested.call_id.clone())
                    .collect();
                for call_id in overdue {
                    let answered = runtime
                        .answer_approval(
                            conversation.clone(),
                            &call_id,
                            ApprovalDecision::TimedOut,
                            "deadline",
                            None,
                        )
                        .await;
                    if let Err(e) = answered {
                        tracing::debug!(%conversation, %call_id, error = %e, "a deadline found the call answered");
                    }
                }
            }
        });
        if let Ok(mut tasks) = self.schedules.lock() {
            tasks.retain(|t| !t.is_finished());
            tasks.push(task);
        }
    }
}

/// How long from now until `at` (zero when it passed), plus a millisecond so `at` has passed.
fn until(at: Timestamp) -> Duration {
    let micros = at.unix_micros().saturating_sub(now().unix_micros()).max(0);
    Duration::from_micros(micros as u64) + Duration::from_millis(1)
}
