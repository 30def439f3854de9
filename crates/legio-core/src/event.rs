//! Events: everything the log records. Messages and every session boundary, with why.
//!
//! Compatibility rule for the stored encoding (see docs/storage.md): new variants may be appended
//! at the end of an enum within one format version; changing or adding fields of an existing
//! variant needs a new format version and an upcast from the old one.

use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::message::{Message, MessageId};
use crate::name::{AgentName, ConversationKey};
use crate::seq::Seq;
use crate::timestamp::Timestamp;

/// One session of an agent with its provider, as legio numbers it (UUID v7).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SessionId(pub Uuid);

impl SessionId {
    /// Builds a UUID v7 from a timestamp and 10 random bytes supplied by the caller.
    pub fn from_parts(at: Timestamp, random: [u8; 10]) -> Self {
        Self(MessageId::from_parts(at, random).0)
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({})", self.0)
    }
}

/// Why a session ended (suspended or closed), or why the next one was opened.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum BoundaryReason {
    /// Idle longer than the timeout; the reaper stopped the actor.
    Idle,
    /// Cumulative input tokens crossed the ceiling.
    TokenCeiling,
    /// The system prompt file's hash changed.
    PromptChanged,
    /// An operator or the user asked for a reset.
    ManualReset,
    /// The actor or the process died with the session open.
    Crashed,
    /// Graceful shutdown.
    Shutdown,
    /// The provider no longer knows the session (expired, 404).
    ProviderSessionLost,
    /// The agent exceeded its restart intensity and was marked failed.
    AgentFailed,
}

impl BoundaryReason {
    /// The reason as a stable snake_case word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::TokenCeiling => "token_ceiling",
            Self::PromptChanged => "prompt_changed",
            Self::ManualReset => "manual_reset",
            Self::Crashed => "crashed",
            Self::Shutdown => "shutdown",
            Self::ProviderSessionLost => "provider_session_lost",
            Self::AgentFailed => "agent_failed",
        }
    }
}

impl fmt::Display for BoundaryReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a session was opened.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum OpenReason {
    /// The agent's first session in this conversation.
    FirstUse,
    /// A new session after a boundary (the context is restored from the log).
    After(BoundaryReason),
}

/// How a session got its context.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum SessionStart {
    /// A stateless provider: every turn carries the full (windowed) history.
    Stateless,
    /// A new provider session, given the visible history up to `up_to` on its first turn.
    Bootstrapped {
        /// The last seq the bootstrap covers.
        up_to: Seq,
    },
    /// An existing provider session resumed; it already holds everything up to `checkpoint`.
    Resumed {
        /// The provider's own session id.
        provider_session: String,
        /// The last seq the provider session is known to hold.
        checkpoint: Seq,
    },
}

/// What kind of context a turn delivered.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum DeliveryMode {
    /// The full windowed history (stateless providers).
    Full,
    /// The first turn of a new stateful session.
    Bootstrap,
    /// Only what a stateful session has not seen.
    Delta,
}

impl DeliveryMode {
    /// The mode as a stable snake_case word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Bootstrap => "bootstrap",
            Self::Delta => "delta",
        }
    }
}

/// Tokens a provider call consumed, as reported by the provider (or estimated).
#[derive(Clone, Copy, PartialEq, Eq, Default, Debug, Serialize, Deserialize)]
pub struct TokenUsage {
    /// Input (prompt) tokens.
    pub input: u64,
    /// Output (completion) tokens.
    pub output: u64,
    /// Input tokens read from a provider-side cache.
    pub cache_read: u64,
    /// Input tokens written to a provider-side cache.
    pub cache_write: u64,
}

impl TokenUsage {
    /// Adds `other` to `self`, saturating.
    pub fn add(&mut self, other: TokenUsage) {
        self.input = self.input.saturating_add(other.input);
        self.output = self.output.saturating_add(other.output);
        self.cache_read = self.cache_read.saturating_add(other.cache_read);
        self.cache_write = self.cache_write.saturating_add(other.cache_write);
    }
}

/// A session was opened.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct SessionOpened {
    /// The conversation.
    pub conversation: ConversationKey,
    /// The agent whose session this is.
    pub agent: AgentName,
    /// legio's id for the session.
    pub session: SessionId,
    /// When.
    pub at: Timestamp,
    /// Why it was opened.
    pub why: OpenReason,
    /// How it got its context.
    pub how: SessionStart,
    /// Hash of the system prompt it was opened with.
    pub prompt_hash: String,
}

/// Context up to a seq reached the provider (written only after the provider call succeeded).
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct ContextDelivered {
    /// The conversation.
    pub conversation: ConversationKey,
    /// The agent.
    pub agent: AgentName,
    /// The session.
    pub session: SessionId,
    /// When.
    pub at: Timestamp,
    /// The checkpoint: every visible message up to this seq has been delivered.
    pub up_to: Seq,
    /// What kind of context was sent.
    pub mode: DeliveryMode,
    /// How many messages the request carried.
    pub messages: u32,
    /// The estimated tokens of the context sent.
    pub estimated_tokens: u64,
}

/// A turn finished successfully.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct TurnCompleted {
    /// The conversation.
    pub conversation: ConversationKey,
    /// The agent.
    pub agent: AgentName,
    /// The session.
    pub session: SessionId,
    /// When.
    pub at: Timestamp,
    /// Tokens used by the turn.
    pub usage: TokenUsage,
    /// The provider's session id after this turn, if it has one (it may change every turn).
    pub provider_session: Option<String>,
    /// The reply message the turn produced, if any.
    pub reply: Option<MessageId>,
}

/// A turn failed (error, panic, timeout).
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct TurnFailed {
    /// The conversation.
    pub conversation: ConversationKey,
    /// The agent.
    pub agent: AgentName,
    /// The session, if one was open.
    pub session: Option<SessionId>,
    /// When.
    pub at: Timestamp,
    /// What went wrong.
    pub error: String,
}

/// A session was suspended (provider session still resumable) or closed.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct SessionEnded {
    /// The conversation.
    pub conversation: ConversationKey,
    /// The agent.
    pub agent: AgentName,
    /// The session.
    pub session: SessionId,
    /// When.
    pub at: Timestamp,
    /// Why.
    pub why: BoundaryReason,
}

/// A summary of an agent's older context was recorded (nothing is deleted).
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct SummaryRecorded {
    /// The conversation.
    pub conversation: ConversationKey,
    /// The agent whose context it summarizes.
    pub agent: AgentName,
    /// When.
    pub at: Timestamp,
    /// The last seq the summary covers.
    pub covers_up_to: Seq,
    /// The summary.
    pub text: String,
    /// Estimated tokens of the context before compaction.
    pub tokens_before: u64,
    /// Estimated tokens after.
    pub tokens_after: u64,
}

/// An agent exceeded its restart intensity and is failed until a manual reset.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct AgentFailed {
    /// The conversation.
    pub conversation: ConversationKey,
    /// The agent.
    pub agent: AgentName,
    /// When.
    pub at: Timestamp,
    /// The last failure.
    pub reason: String,
    /// Restarts within the intensity window before giving up.
    pub restarts: u32,
}

/// Everything the log records. Append new variants at the end only (see the module docs).
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum Event {
    /// A message was posted.
    MessagePosted(Message),
    /// A session was opened.
    SessionOpened(SessionOpened),
    /// Context was delivered to a session.
    ContextDelivered(ContextDelivered),
    /// A turn completed.
    TurnCompleted(TurnCompleted),
    /// A turn failed.
    TurnFailed(TurnFailed),
    /// A session was suspended.
    SessionSuspended(SessionEnded),
    /// A session was closed.
    SessionClosed(SessionEnded),
    /// A summary was recorded.
    SummaryRecorded(SummaryRecorded),
    /// An agent was marked failed.
    AgentFailed(AgentFailed),
}

/// The kind of an event, without its data (for filters and metrics).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum EventKind {
    /// [`Event::MessagePosted`].
    MessagePosted,
    /// [`Event::SessionOpened`].
    SessionOpened,
    /// [`Event::ContextDelivered`].
    ContextDelivered,
    /// [`Event::TurnCompleted`].
    TurnCompleted,
    /// [`Event::TurnFailed`].
    TurnFailed,
    /// [`Event::SessionSuspended`].
    SessionSuspended,
    /// [`Event::SessionClosed`].
    SessionClosed,
    /// [`Event::SummaryRecorded`].
    SummaryRecorded,
    /// [`Event::AgentFailed`].
    AgentFailed,
}

impl EventKind {
    /// Every kind, in declaration order.
    pub const ALL: [EventKind; 9] = [
        Self::MessagePosted,
        Self::SessionOpened,
        Self::ContextDelivered,
        Self::TurnCompleted,
        Self::TurnFailed,
        Self::SessionSuspended,
        Self::SessionClosed,
        Self::SummaryRecorded,
        Self::AgentFailed,
    ];

    /// The kind as a stable snake_case word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MessagePosted => "message_posted",
            Self::SessionOpened => "session_opened",
            Self::ContextDelivered => "context_delivered",
            Self::TurnCompleted => "turn_completed",
            Self::TurnFailed => "turn_failed",
            Self::SessionSuspended => "session_suspended",
            Self::SessionClosed => "session_closed",
            Self::SummaryRecorded => "summary_recorded",
            Self::AgentFailed => "agent_failed",
        }
    }

    /// Parses a snake_case kind word.
    pub fn parse(word: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == word)
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Event {
    /// The event's kind.
    pub fn kind(&self) -> EventKind {
        match self {
            Self::MessagePosted(_) => EventKind::MessagePosted,
            Self::SessionOpened(_) => EventKind::SessionOpened,
            Self::ContextDelivered(_) => EventKind::ContextDelivered,
            Self::TurnCompleted(_) => EventKind::TurnCompleted,
            Self::TurnFailed(_) => EventKind::TurnFailed,
            Self::SessionSuspended(_) => EventKind::SessionSuspended,
            Self::SessionClosed(_) => EventKind::SessionClosed,
            Self::SummaryRecorded(_) => EventKind::SummaryRecorded,
            Self::AgentFailed(_) => EventKind::AgentFailed,
        }
    }

    /// The conversation the event belongs to.
    pub fn conversation(&self) -> &ConversationKey {
        match self {
            Self::MessagePosted(e) => &e.conversation,
            Self::SessionOpened(e) => &e.conversation,
            Self::ContextDelivered(e) => &e.conversation,
            Self::TurnCompleted(e) => &e.conversation,
            Self::TurnFailed(e) => &e.conversation,
            Self::SessionSuspended(e) | Self::SessionClosed(e) => &e.conversation,
            Self::SummaryRecorded(e) => &e.conversation,
            Self::AgentFailed(e) => &e.conversation,
        }
    }

    /// When the event happened.
    pub fn at(&self) -> Timestamp {
        match self {
            Self::MessagePosted(e) => e.at,
            Self::SessionOpened(e) => e.at,
            Self::ContextDelivered(e) => e.at,
            Self::TurnCompleted(e) => e.at,
            Self::TurnFailed(e) => e.at,
            Self::SessionSuspended(e) | Self::SessionClosed(e) => e.at,
            Self::SummaryRecorded(e) => e.at,
            Self::AgentFailed(e) => e.at,
        }
    }

    /// The agent whose session state the event changes; `None` for messages.
    pub fn session_agent(&self) -> Option<&AgentName> {
        match self {
            Self::MessagePosted(_) => None,
            Self::SessionOpened(e) => Some(&e.agent),
            Self::ContextDelivered(e) => Some(&e.agent),
            Self::TurnCompleted(e) => Some(&e.agent),
            Self::TurnFailed(e) => Some(&e.agent),
            Self::SessionSuspended(e) | Self::SessionClosed(e) => Some(&e.agent),
            Self::SummaryRecorded(e) => Some(&e.agent),
            Self::AgentFailed(e) => Some(&e.agent),
        }
    }

    /// The message, if this is a posted message.
    pub fn as_message(&self) -> Option<&Message> {
        match self {
            Self::MessagePosted(m) => Some(m),
            _ => None,
        }
    }
}

/// An event with the seq the log gave it.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Record {
    /// Its position in the log.
    pub seq: Seq,
    /// The event.
    pub event: Event,
}
