//! `answer_approval`: a person approves or denies a tool call that paused its turn (or the
//! deadline denies it). The answer is an `ApprovalAnswered` event; a second answer to the same
//! call is refused naming the first. When it is the last answer its step waited for, the turn
//! continues in the agent's actor, once (agent/turn.rs's `resume`), and its reply is the
//! answer's. Runs on the conversation's owner, so the continuation runs where its agents do.

use legio_core::{AgentName, ApprovalAnswered, ApprovalDecision, ConversationKey, Event};
use serde::{Deserialize, Serialize};

use super::{Command, Place};
use crate::clock::now;
use crate::error::RuntimeError;
use crate::messages::Job;
use crate::placement::Here;
use crate::progress::ProgressSink;
use crate::reply::AgentReply;
use crate::runtime::Runtime;

/// The answer to the approval of `call_id` (its full id or the beginning of exactly one).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct AnswerApproval {
    pub(crate) conversation: ConversationKey,
    pub(crate) call_id: String,
    pub(crate) decision: ApprovalDecision,
    /// Who answers (`cli`, `http:TOKEN`, `deadline`).
    pub(crate) by: String,
    pub(crate) reason: Option<String>,
}

/// What an answer did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalAnswer {
    /// The call's full id.
    pub call_id: String,
    /// The agent whose call it was.
    pub agent: AgentName,
    /// The tool.
    pub tool: String,
    /// What was recorded: the decision given, or `timed_out` when the deadline had passed.
    pub decision: ApprovalDecision,
    /// The calls of the same step that still wait for an answer.
    pub still_waiting: Vec<String>,
    /// The continued turn's reply, when this answer was the last its step waited for.
    pub continued: Option<AgentReply>,
}

impl Command for AnswerApproval {
    type Answer = ApprovalAnswer;
    const KIND: &'static str = "answer_approval";
    const PLACE: Place = Place::Owner;

    fn conversation(&self) -> &ConversationKey {
        &self.conversation
    }

    async fn run(
        self,
        runtime: &Runtime,
        _here: Here,
        _progress: Option<ProgressSink>,
    ) -> Result<ApprovalAnswer, RuntimeError> {
        runtime.check_running()?;
        let shared = &runtime.shared;
        let (answer, ready) = {
            let _one_at_a_time = shared.approvals_lock.lock().await;
            let mut read = crate::tools::approval::read(shared, &self.conversation).await?;
            let approval = read.approvals.check_answer(&self.call_id)?.clone();
            let at = now();
            let late = approval.requested.deadline <= at;
            let decision = if late {
                ApprovalDecision::TimedOut
            } else {
                self.decision
            };
            let (by, reason) = if late && self.decision != ApprovalDecision::TimedOut {
                let why = format!("the deadline passed before {} answered", self.by);
                ("deadline".to_owned(), Some(why))
            } else {
                (self.by, self.reason)
            };
            let answered = ApprovalAnswered {
                conversation: self.conversation.clone(),
                agent: approval.requested.agent.clone(),
                at,
                call_id: approval.requested.call_id.clone(),
                decision,
                by,
                reason,
            };
            let range = shared
                .append(vec![Event::ApprovalAnswered(answered.clone())])
                .await?;
            metrics::counter!(crate::metrics::APPROVALS_ANSWERED, "decision" => decision.as_str())
                .increment(1);
            read.approvals.apply(&legio_core::Record {
                seq: range.first,
                event: Event::ApprovalAnswered(answered),
            });
            let step = approval.requested.call_message;
            let still_waiting: Vec<String> = read
                .approvals
                .of_step(step)
                .filter(|a| a.answer.is_none())
                .map(|a| a.requested.call_id.clone())
                .collect();
            let ready = read.approvals.ready(step).then_some(step);
            let answer = ApprovalAnswer {
                call_id: approval.requested.call_id,
                agent: approval.requested.agent,
                tool: approval.requested.tool,
                decision,
                still_waiting,
                continued: None,
            };
            (answer, ready)
        };
        let Some(call_message) = ready else {
            return Ok(answer);
        };
        let job = Job::Resume { call_message };
        let agent = std::slice::from_ref(&answer.agent);
        let mut replies = runtime.dispatch(&self.conversation, job, agent, None).await;
        runtime.watch_approvals(&self.conversation, &replies);
        Ok(ApprovalAnswer {
            continued: replies.pop(),
            ..answer
        })
    }
}
