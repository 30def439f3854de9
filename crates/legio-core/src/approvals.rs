//! The approvals projection: a conversation's events folded into its tool calls that wait (or
//! waited) for a person, and the rules of answering them. Pure: the runtime reads the events, this
//! decides.
//!
//! A paused step is the message holding an agent's calls (`call_message`) with at least one
//! `ApprovalRequested`; it is **ready** when every one of its approvals is answered and its results
//! are not recorded yet (the turn continues then, once), and **settled** once a message of the
//! agent holds a result for one of its calls.

use std::collections::BTreeSet;

use thiserror::Error;

use crate::approval_event::{ApprovalAnswered, ApprovalDecision, ApprovalRequested};
use crate::event::{Event, Record};
use crate::message::{MessageId, Part};
use crate::seq::Seq;
use crate::timestamp::Timestamp;

/// One call that waits, or waited, for an answer.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Approval {
    /// The seq of its `ApprovalRequested`.
    pub seq: Seq,
    /// The request.
    pub requested: ApprovalRequested,
    /// The answer, once there is one (the first: a second is refused before it is recorded).
    pub answer: Option<ApprovalAnswered>,
    /// Whether the step's results are recorded (the turn went on past this call).
    pub settled: bool,
}

impl Approval {
    /// `pending`, or the answer's decision.
    pub fn state(&self) -> &'static str {
        match &self.answer {
            None => "pending",
            Some(a) => a.decision.as_str(),
        }
    }
}

/// Why an answer is refused.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum AnswerError {
    /// No approval asked for this call in the conversation.
    #[error("no approval was asked for call {call_id:?} in this conversation; `legio inspect approvals` lists them")]
    Unknown {
        /// The call id given.
        call_id: String,
    },
    /// A short id that begins more than one call's id.
    #[error("call id {call_id:?} is ambiguous: it begins {}; give more of it", matches.join(", "))]
    Ambiguous {
        /// The short id given.
        call_id: String,
        /// The ids it begins.
        matches: Vec<String>,
    },
    /// The call was answered already.
    #[error("call {call_id} was already answered: {decision} by {by} at {at}")]
    AlreadyAnswered {
        /// The call's id.
        call_id: String,
        /// The first answer's decision.
        decision: ApprovalDecision,
        /// Who gave it.
        by: String,
        /// When.
        at: Timestamp,
    },
}

/// A conversation's approvals, in log order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Approvals {
    /// Every approval asked, oldest first.
    pub items: Vec<Approval>,
}

impl Approvals {
    /// Folds `records` (one conversation's, in log order) into its approvals.
    pub fn fold<'a>(records: impl IntoIterator<Item = &'a Record>) -> Self {
        let mut approvals = Self::default();
        for record in records {
            approvals.apply(record);
        }
        approvals
    }

    /// Applies one record (idempotent for a record applied twice).
    pub fn apply(&mut self, record: &Record) {
        match &record.event {
            Event::ApprovalRequested(r) if self.items.iter().all(|a| a.seq != record.seq) => {
                self.items.push(Approval {
                    seq: record.seq,
                    requested: r.clone(),
                    answer: None,
                    settled: false,
                });
            }
            Event::ApprovalAnswered(answer) => {
                if let Some(a) = self.latest_mut(&answer.call_id) {
                    if a.answer.is_none() {
                        a.answer = Some(answer.clone());
                    }
                }
            }
            Event::MessagePosted(m) => {
                for part in &m.parts {
                    if let Part::ToolResult { call_id, .. } = part {
                        if let Some(a) = self.latest_mut(call_id) {
                            a.settled = true;
                        }
                    }
                }
            }
            _ => {}
        }
    }

    fn latest_mut(&mut self, call_id: &str) -> Option<&mut Approval> {
        self.items
            .iter_mut()
            .rev()
            .find(|a| a.requested.call_id == call_id && !a.settled)
    }

    /// The approval `call_id` names: its full id, or the beginning of exactly one (the short id
    /// a pause shows). The latest with that id when ids repeat.
    pub fn find(&self, call_id: &str) -> Result<&Approval, AnswerError> {
        if let Some(a) = self
            .items
            .iter()
            .rev()
            .find(|a| a.requested.call_id == call_id)
        {
            return Ok(a);
        }
        let matches: BTreeSet<&str> = self
            .items
            .iter()
            .map(|a| a.requested.call_id.as_str())
            .filter(|id| !call_id.is_empty() && id.starts_with(call_id))
            .collect();
        match matches.len() {
            0 => Err(AnswerError::Unknown {
                call_id: call_id.to_owned(),
            }),
            1 => self.find(matches.first().copied().unwrap_or_default()),
            _ => Err(AnswerError::Ambiguous {
                call_id: call_id.to_owned(),
                matches: matches.into_iter().map(str::to_owned).collect(),
            }),
        }
    }

    /// The approval an answer to `call_id` would answer, or why it may not.
    pub fn check_answer(&self, call_id: &str) -> Result<&Approval, AnswerError> {
        let approval = self.find(call_id)?;
        match &approval.answer {
            None => Ok(approval),
            Some(first) => Err(AnswerError::AlreadyAnswered {
                call_id: approval.requested.call_id.clone(),
                decision: first.decision,
                by: first.by.clone(),
                at: first.at,
            }),
        }
    }

    /// The approvals of the step `call_message`.
    pub fn of_step(&self, call_message: MessageId) -> impl Iterator<Item = &Approval> {
        self.items
            .iter()
            .filter(move |a| a.requested.call_message == call_message)
    }

    /// Whether the step `call_message` may continue now: every approval answered, none settled.
    pub fn ready(&self, call_message: MessageId) -> bool {
        let mut step = self.of_step(call_message).peekable();
        step.peek().is_some() && step.all(|a| a.answer.is_some() && !a.settled)
    }

    /// The steps that may continue now, oldest first.
    pub fn ready_steps(&self) -> Vec<MessageId> {
        let mut steps: Vec<MessageId> = Vec::new();
        for a in &self.items {
            let step = a.requested.call_message;
            if !steps.contains(&step) && self.ready(step) {
                steps.push(step);
            }
        }
        steps
    }

    /// The calls still waiting for an answer.
    pub fn pending(&self) -> impl Iterator<Item = &Approval> {
        self.items
            .iter()
            .filter(|a| a.answer.is_none() && !a.settled)
    }

    /// The calls whose deadline passed at `now` with no answer.
    pub fn overdue(&self, now: Timestamp) -> impl Iterator<Item = &Approval> {
        self.pending().filter(move |a| a.requested.deadline <= now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Audience, Message};
    use crate::name::{AgentName, ConversationKey, Participant};

    fn key() -> ConversationKey {
        ConversationKey::new("c").unwrap()
    }

    fn agent() -> AgentName {
        AgentName::new("lead").unwrap()
    }

    fn step(n: u128) -> MessageId {
        MessageId(uuid::Uuid::from_u128(n))
    }

    fn asked(seq: u64, call_message: MessageId, call_id: &str, deadline: i64) -> Record {
        Record {
            seq: Seq(seq),
            event: Event::ApprovalRequested(ApprovalRequested {
                conversation: key(),
                agent: agent(),
                at: Timestamp::from_unix_micros(0),
                call_message,
                call_id: call_id.into(),
                tool: "pay".into(),
                arguments: "{}".into(),
                pattern: "pay".into(),
                deadline: Timestamp::from_unix_micros(deadline),
            }),
        }
    }

    fn answered(seq: u64, call_id: &str, decision: ApprovalDecision, by: &str) -> Record {
        Record {
            seq: Seq(seq),
            event: Event::ApprovalAnswered(ApprovalAnswered {
                conversation: key(),
                agent: agent(),
                at: Timestamp::from_unix_micros(5),
                call_id: call_id.into(),
                decision,
                by: by.into(),
                reason: None,
            }),
        }
    }

    fn results(seq: u64, call_ids: &[&str]) -> Record {
        let mut m = Message::text(
            step(99 + seq as u128),
            key(),
            Participant::Agent(agent()),
            Audience::agent(agent()),
            "",
            Timestamp::from_unix_micros(6),
        );
        m.parts = call_ids
            .iter()
            .map(|id| Part::ToolResult {
                call_id: (*id).into(),
                content: "ok".into(),
                is_error: false,
            })
            .collect();
        Record {
            seq: Seq(seq),
            event: Event::MessagePosted(m),
        }
    }

    #[test]
    fn a_step_is_ready_once_every_call_is_answered_and_settled_after_its_results() {
        let s = step(1);
        let mut records = vec![asked(1, s, "call_a", 100), asked(2, s, "call_b", 100)];
        let folded = Approvals::fold(&records);
        assert!(!folded.ready(s));
        assert_eq!(folded.pending().count(), 2);
        records.push(answered(3, "call_a", ApprovalDecision::Approved, "cli"));
        assert!(!Approvals::fold(&records).ready(s));
        records.push(answered(4, "call_b", ApprovalDecision::Denied, "http:ops"));
        let folded = Approvals::fold(&records);
        assert!(folded.ready(s));
        assert_eq!(folded.ready_steps(), vec![s]);
        assert_eq!(folded.items[1].state(), "denied");
        records.push(results(5, &["call_a", "call_b"]));
        let folded = Approvals::fold(&records);
        assert!(!folded.ready(s) && folded.ready_steps().is_empty());
        assert!(folded.items.iter().all(|a| a.settled));
    }

    #[test]
    fn a_second_answer_names_the_first_and_short_ids_are_found() {
        let s = step(1);
        let records = vec![
            asked(1, s, "call_abc123", 100),
            asked(2, s, "call_abd456", 100),
            answered(3, "call_abc123", ApprovalDecision::Approved, "cli"),
            answered(4, "call_abc123", ApprovalDecision::Denied, "late"),
        ];
        let folded = Approvals::fold(&records);
        let e = folded.check_answer("call_abc").unwrap_err();
        assert!(
            matches!(&e, AnswerError::AlreadyAnswered { decision: ApprovalDecision::Approved, by, .. } if by == "cli"),
            "{e:?}"
        );
        assert!(e.to_string().contains("approved by cli"), "{e}");
        assert_eq!(
            folded.check_answer("call_abd").unwrap().requested.call_id,
            "call_abd456"
        );
        assert!(matches!(
            folded.find("call_ab"),
            Err(AnswerError::Ambiguous { .. })
        ));
        assert!(matches!(
            folded.find("nope"),
            Err(AnswerError::Unknown { .. })
        ));
        assert!(matches!(folded.find(""), Err(AnswerError::Unknown { .. })));
    }

    #[test]
    fn overdue_calls_are_the_unanswered_ones_past_their_deadline() {
        let s = step(1);
        let records = vec![
            asked(1, s, "a", 10),
            asked(2, s, "b", 10),
            asked(3, s, "c", 1000),
            answered(4, "a", ApprovalDecision::Approved, "cli"),
        ];
        let folded = Approvals::fold(&records);
        let now = Timestamp::from_unix_micros(50);
        let late: Vec<&str> = folded
            .overdue(now)
            .map(|a| a.requested.call_id.as_str())
            .collect();
        assert_eq!(late, ["b"]);
    }
}
