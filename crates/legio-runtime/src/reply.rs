//! What a post and a turn answer: one [`AgentReply`] per addressed agent, each a `Result` (the
//! reply, or a [`TurnError`] for that agent only), gathered in a [`Posted`] with the handles that
//! named no agent. A leaf module: the actors, the dispatch and the API share it.

use std::fmt;
use std::ops::Deref;

use legio_core::{AgentName, MessageId, Seq};
use serde::{Deserialize, Serialize};
use strum::{EnumString, IntoStaticStr};

/// One agent's answer to a message: its reply, or why it gave none.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentReply {
    /// The agent.
    pub agent: AgentName,
    /// The reply, or the error of this agent's turn.
    pub outcome: Result<Reply, TurnError>,
}

/// A turn's reply, as recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    /// The reply's text.
    pub text: String,
    /// The reply message's id (`None` for a heartbeat, whose reply is no message).
    pub message_id: Option<MessageId>,
    /// The reply's seq in the log (a heartbeat's: its `HeartbeatRan` event).
    pub seq: Seq,
}

/// Why an agent gave no reply. The message says what happened and what to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnError {
    /// The cause, for a host that acts on it.
    pub kind: TurnErrorKind,
    /// What happened, in plain words.
    pub message: String,
}

/// The causes of a [`TurnError`], named in snake case (`tool_steps`, [`TurnErrorKind::as_str`])
/// on the node bus, in the server's replies (`error_kind`) and in the CLI's; a name this
/// version does not know reads as `runtime`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, IntoStaticStr, EnumString)]
#[strum(serialize_all = "snake_case")]
#[non_exhaustive]
pub enum TurnErrorKind {
    /// The provider answered with an error (after its own retries).
    Provider,
    /// The turn ran out of `runtime.turn_timeout_seconds`, or the reply did not come in time.
    Timeout,
    /// The model was still calling tools at `runtime.max_tool_steps`.
    ToolSteps,
    /// The request cannot fit the model's window, even with the oldest messages left out (one
    /// message, or the system prompt and tools, is larger than a request may hold).
    ContextTooLarge,
    /// The agent's actor crashed during the turn (it is restarted).
    Crashed,
    /// The agent is restarting or could not be started; try again.
    Unavailable,
    /// The agent failed past its restart intensity and is stopped until a manual reset.
    Failed,
    /// The runtime is shutting down.
    ShutDown,
    /// The conversation moved to another node during the turn (this node lost its lease or was
    /// fenced, and stopped the conversation's actors); the turn's outcome is in the log.
    Moved,
    /// A keyed post's retry: the agent went on to later messages without answering this one
    /// (its turn failed or was cut short), so it is not run again; post it anew to ask again.
    Unanswered,
    /// The turn paused: a tool call it asked for waits for a person's answer
    /// (`runtime.approval`); the answer continues it, once.
    AwaitingApproval,
    /// The log or the agent's configuration failed during the turn.
    Runtime,
}

impl TurnErrorKind {
    /// Its name: `tool_steps`, `context_too_large`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The kind named `name`; a name this version does not know is `Runtime`.
    pub fn from_name(name: &str) -> Self {
        name.parse().unwrap_or(Self::Runtime)
    }
}

impl fmt::Display for TurnErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for TurnErrorKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for TurnErrorKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Self::from_name(&String::deserialize(deserializer)?))
    }
}

impl TurnError {
    /// An error of `kind` saying `message`.
    pub fn new(kind: TurnErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

impl fmt::Display for TurnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TurnError {}

impl AgentReply {
    /// A reply of `agent`.
    pub(crate) fn answered(agent: &AgentName, reply: Reply) -> Self {
        Self {
            agent: agent.clone(),
            outcome: Ok(reply),
        }
    }

    /// An error reply of `agent`.
    pub(crate) fn failed(
        agent: &AgentName,
        kind: TurnErrorKind,
        message: impl Into<String>,
    ) -> Self {
        Self {
            agent: agent.clone(),
            outcome: Err(TurnError::new(kind, message)),
        }
    }

    /// The reply's text, if the turn succeeded.
    pub fn text(&self) -> Option<&str> {
        self.outcome.as_ref().ok().map(|r| r.text.as_str())
    }

    /// What went wrong, if the turn failed.
    pub fn error(&self) -> Option<&str> {
        self.outcome.as_ref().err().map(|e| e.message.as_str())
    }

    /// Why the turn failed, if it did.
    pub fn error_kind(&self) -> Option<TurnErrorKind> {
        self.outcome.as_ref().err().map(|e| e.kind)
    }

    /// The reply's seq in the log, if the turn succeeded (a failed heartbeat's record has one
    /// too, but it is no reply).
    pub fn seq(&self) -> Option<Seq> {
        self.outcome.as_ref().ok().map(|r| r.seq)
    }

    /// The reply message's id, if the turn succeeded with a message.
    pub fn message_id(&self) -> Option<MessageId> {
        self.outcome.as_ref().ok().and_then(|r| r.message_id)
    }
}

/// What a post answers: the replies of the addressed agents, in roster order, and the `@handles`
/// of the message that named no agent (plain text; the sender is told). Derefs to the replies.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Posted {
    /// One reply per addressed agent, in roster order (none when the message addressed nobody).
    pub replies: Vec<AgentReply>,
    /// The handles that matched no agent, as written, each once.
    pub unknown_mentions: Vec<String>,
    /// The post was a retry of a keyed post already stored (`Runtime::post_once`, or a host
    /// turn's `idempotency_key`): nothing new was stored, and the replies are those the message
    /// had (an agent that had not answered it answers now).
    #[serde(default)]
    pub replayed: bool,
}

impl Deref for Posted {
    type Target = [AgentReply];

    fn deref(&self) -> &[AgentReply] {
        &self.replies
    }
}

impl IntoIterator for Posted {
    type Item = AgentReply;
    type IntoIter = std::vec::IntoIter<AgentReply>;

    fn into_iter(self) -> Self::IntoIter {
        self.replies.into_iter()
    }
}

impl<'a> IntoIterator for &'a Posted {
    type Item = &'a AgentReply;
    type IntoIter = std::slice::Iter<'a, AgentReply>;

    fn into_iter(self) -> Self::IntoIter {
        self.replies.iter()
    }
}
