//! The events of a person in the loop: a tool call that waits for an approval
//! (`ApprovalRequested`) and its answer (`ApprovalAnswered`: approved, denied or timed out, by
//! whom, when, why). Neither is a message nor part of any session: no context shows them; the
//! step's calls and, once every answer is in, its results are the messages the model sees.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::message::MessageId;
use crate::name::{AgentName, ConversationKey};
use crate::timestamp::Timestamp;

/// A tool call of an agent's step waits for a person's answer; the turn paused on it.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct ApprovalRequested {
    /// The conversation.
    pub conversation: ConversationKey,
    /// The agent whose step asked for the call.
    pub agent: AgentName,
    /// When.
    pub at: Timestamp,
    /// The message holding the step's calls.
    pub call_message: MessageId,
    /// The call's id, as the model gave it.
    pub call_id: String,
    /// The tool's name.
    pub tool: String,
    /// The call's arguments, as JSON text.
    pub arguments: String,
    /// The policy pattern that matched the tool (`runtime.approval`, `agents.NAME.approval`).
    pub pattern: String,
    /// When an unanswered call is denied (`runtime.approval_timeout_seconds`).
    pub deadline: Timestamp,
}

/// What a person (or the deadline) decided.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecision {
    /// The call runs, once.
    Approved,
    /// The call does not run; the model gets an error result saying so.
    Denied,
    /// Nobody answered before the deadline: denied, and the model is told.
    TimedOut,
}

impl ApprovalDecision {
    /// The decision as a stable snake_case word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approved => "approved",
            Self::Denied => "denied",
            Self::TimedOut => "timed_out",
        }
    }

    /// Whether the call may run.
    pub fn runs(self) -> bool {
        self == Self::Approved
    }
}

impl fmt::Display for ApprovalDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The answer to one [`ApprovalRequested`]; there is at most one per call.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct ApprovalAnswered {
    /// The conversation.
    pub conversation: ConversationKey,
    /// The agent whose call it answers.
    pub agent: AgentName,
    /// When.
    pub at: Timestamp,
    /// The call's id.
    pub call_id: String,
    /// What was decided.
    pub decision: ApprovalDecision,
    /// Who answered: `cli`, `http:TOKEN-NAME`, `deadline`.
    pub by: String,
    /// Why, as the answerer wrote it.
    pub reason: Option<String>,
}
