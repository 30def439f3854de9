//! Events: everything the log records. Messages and every session boundary, with why.
//!
//! Compatibility rule for the stored encoding (see docs/storage.md): new variants may be appended
//! at the end of an enum within one format version; changing or adding fields of an existing
//! variant needs a new format version and an upcast from the old one.

use std::fmt;

use serde::{Deserialize, Serialize};
use strum::{EnumString, IntoStaticStr};
use uuid::Uuid;

use crate::approval_event::{ApprovalAnswered, ApprovalRequested};
use crate::memory_event::{
    DirectivePublished, DirectiveRevoked, NoteWritten, NotebookEntryAppended,
};
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

impl fmt::Display for OpenReason {
    /// Plain words for operators: `first use`, `after shutdown`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::FirstUse => f.write_str("first use"),
            Self::After(reason) => write!(f, "after {reason}"),
        }
    }
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

/// Tokens a provider call consumed, as reported by the provider (or estimated). The three input
/// counts do not overlap: a provider whose own input count includes its cache reads (OpenAI)
/// is mapped so that `input` holds only the rest.
#[derive(Clone, Copy, PartialEq, Eq, Default, Debug, Serialize, Deserialize)]
pub struct TokenUsage {
    /// Input (prompt) tokens neither read from nor written to a provider-side cache.
    pub input: u64,
    /// Output (completion) tokens.
    pub output: u64,
    /// Input tokens read from a provider-side cache.
    pub cache_read: u64,
    /// Input tokens written to a provider-side cache.
    pub cache_write: u64,
}

impl TokenUsage {
    /// Every input token the provider reported: fresh, read from its cache and written to it.
    /// The context size of the call (what the session's token ceiling and the metrics count).
    pub fn context_tokens(&self) -> u64 {
        self.input
            .saturating_add(self.cache_read)
            .saturating_add(self.cache_write)
    }

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

/// A heartbeat ran: an agent answered a host's text with no history (only its system prompt and
/// the text). Not a message and not part of any session: no context ever shows it, and it changes
/// no session state; it is in the log for the audit.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct HeartbeatRan {
    /// The conversation.
    pub conversation: ConversationKey,
    /// The agent.
    pub agent: AgentName,
    /// When it finished.
    pub at: Timestamp,
    /// Hash of the system prompt sent.
    pub prompt_hash: String,
    /// The host's text, sent as the only message.
    pub prompt: String,
    /// The agent's reply, if the call succeeded.
    pub reply: Option<String>,
    /// What went wrong, if it failed.
    pub error: Option<String>,
    /// Tokens used (zero when the call failed).
    pub usage: TokenUsage,
}

/// The host declared the tools it runs for a conversation's turns (replacing any it declared
/// before; an empty list clears them). Not a message and outside every session: no context shows
/// it; it is in the log so that the declaration outlives the process and every node of a cluster
/// reads the same one.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct ToolsDeclared {
    /// The conversation.
    pub conversation: ConversationKey,
    /// When.
    pub at: Timestamp,
    /// The tools, as the host declared them.
    pub tools: Vec<DeclaredTool>,
}

/// One tool the host runs, as declared.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct DeclaredTool {
    /// Its name.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// The JSON schema of its arguments, as JSON text.
    pub parameters: String,
}

/// The host's instructions for one turn of an agent (the OpenAI door's `instructions`, or its
/// chat `system` / `developer` messages), recorded right before the message they came with (at
/// `for_message`). The agent's turn for that message is sent them with its configured prompt;
/// no later turn is. Not a message and outside every session: it is in the log so an operator
/// sees what the host asked (`legio replay`, `legio context`).
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct InstructionsGiven {
    /// The conversation.
    pub conversation: ConversationKey,
    /// The agent they are for.
    pub agent: AgentName,
    /// The message whose turn they are for.
    pub for_message: MessageId,
    /// When.
    pub at: Timestamp,
    /// The instructions, as the host sent them.
    pub text: String,
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
    /// A directive was published (memory; conversation `legio:memory`).
    DirectivePublished(DirectivePublished),
    /// A directive was revoked (memory).
    DirectiveRevoked(DirectiveRevoked),
    /// A shared note was written (memory).
    NoteWritten(NoteWritten),
    /// A notebook entry was appended (memory).
    NotebookEntryAppended(NotebookEntryAppended),
    /// A heartbeat ran (no history; not a message).
    HeartbeatRan(HeartbeatRan),
    /// The host declared the tools it runs (not a message).
    ToolsDeclared(ToolsDeclared),
    /// A tool call waits for a person's answer (not a message; approval_event.rs).
    ApprovalRequested(ApprovalRequested),
    /// A tool call's approval was answered (not a message).
    ApprovalAnswered(ApprovalAnswered),
    /// The host gave an agent instructions for one turn (not a message).
    InstructionsGiven(InstructionsGiven),
}

/// The kind of an event, without its data (for filters and metrics). Its word is the variant's
/// name in snake_case (`message_posted`), both ways (strum).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord, IntoStaticStr, EnumString)]
#[strum(serialize_all = "snake_case")]
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
    /// [`Event::DirectivePublished`].
    DirectivePublished,
    /// [`Event::DirectiveRevoked`].
    DirectiveRevoked,
    /// [`Event::NoteWritten`].
    NoteWritten,
    /// [`Event::NotebookEntryAppended`].
    NotebookEntryAppended,
    /// [`Event::HeartbeatRan`].
    HeartbeatRan,
    /// [`Event::ToolsDeclared`].
    ToolsDeclared,
    /// [`Event::ApprovalRequested`].
    ApprovalRequested,
    /// [`Event::ApprovalAnswered`].
    ApprovalAnswered,
    /// [`Event::InstructionsGiven`].
    InstructionsGiven,
}

impl EventKind {
    /// Every kind, in declaration order.
    pub const ALL: [EventKind; 18] = [
        Self::MessagePosted,
        Self::SessionOpened,
        Self::ContextDelivered,
        Self::TurnCompleted,
        Self::TurnFailed,
        Self::SessionSuspended,
        Self::SessionClosed,
        Self::SummaryRecorded,
        Self::AgentFailed,
        Self::DirectivePublished,
        Self::DirectiveRevoked,
        Self::NoteWritten,
        Self::NotebookEntryAppended,
        Self::HeartbeatRan,
        Self::ToolsDeclared,
        Self::ApprovalRequested,
        Self::ApprovalAnswered,
        Self::InstructionsGiven,
    ];

    /// The kind as a stable snake_case word.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Parses a snake_case kind word.
    pub fn parse(word: &str) -> Option<Self> {
        word.parse().ok()
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Event {
    /// The seqs the event names (see [`Event::seq_references_mut`]).
    pub fn seq_references(&self) -> Vec<Seq> {
        match self {
            Self::ContextDelivered(d) => vec![d.up_to],
            Self::SummaryRecorded(s) => vec![s.covers_up_to],
            Self::SessionOpened(o) => match &o.how {
                SessionStart::Bootstrapped { up_to } => vec![*up_to],
                SessionStart::Resumed { checkpoint, .. } => vec![*checkpoint],
                SessionStart::Stateless => Vec::new(),
            },
            _ => Vec::new(),
        }
    }

    /// The seqs the event names (a delivery's or a bootstrap's `up_to`, a resume's
    /// `checkpoint`, a summary's `covers_up_to`), to rewrite them: an import that renumbers
    /// the log's events must renumber these too, or they point at other events.
    pub fn seq_references_mut(&mut self) -> Vec<&mut Seq> {
        match self {
            Self::ContextDelivered(d) => vec![&mut d.up_to],
            Self::SummaryRecorded(s) => vec![&mut s.covers_up_to],
            Self::SessionOpened(o) => match &mut o.how {
                SessionStart::Bootstrapped { up_to } => vec![up_to],
                SessionStart::Resumed { checkpoint, .. } => vec![checkpoint],
                SessionStart::Stateless => Vec::new(),
            },
            _ => Vec::new(),
        }
    }

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
            Self::DirectivePublished(_) => EventKind::DirectivePublished,
            Self::DirectiveRevoked(_) => EventKind::DirectiveRevoked,
            Self::NoteWritten(_) => EventKind::NoteWritten,
            Self::NotebookEntryAppended(_) => EventKind::NotebookEntryAppended,
            Self::HeartbeatRan(_) => EventKind::HeartbeatRan,
            Self::ToolsDeclared(_) => EventKind::ToolsDeclared,
            Self::ApprovalRequested(_) => EventKind::ApprovalRequested,
            Self::ApprovalAnswered(_) => EventKind::ApprovalAnswered,
            Self::InstructionsGiven(_) => EventKind::InstructionsGiven,
        }
    }

    /// The conversation the event belongs to; memory events belong to the reserved
    /// [`ConversationKey::memory`] (`legio:memory`).
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
            Self::DirectivePublished(_)
            | Self::DirectiveRevoked(_)
            | Self::NoteWritten(_)
            | Self::NotebookEntryAppended(_) => ConversationKey::memory(),
            Self::HeartbeatRan(e) => &e.conversation,
            Self::ToolsDeclared(e) => &e.conversation,
            Self::ApprovalRequested(e) => &e.conversation,
            Self::ApprovalAnswered(e) => &e.conversation,
            Self::InstructionsGiven(e) => &e.conversation,
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
            Self::DirectivePublished(e) => e.at,
            Self::DirectiveRevoked(e) => e.at,
            Self::NoteWritten(e) => e.at,
            Self::NotebookEntryAppended(e) => e.at,
            Self::HeartbeatRan(e) => e.at,
            Self::ToolsDeclared(e) => e.at,
            Self::ApprovalRequested(e) => e.at,
            Self::ApprovalAnswered(e) => e.at,
            Self::InstructionsGiven(e) => e.at,
        }
    }

    /// The agent whose session state the event changes; `None` for messages, memory events,
    /// heartbeats (a heartbeat is outside every session) and tool declarations.
    pub fn session_agent(&self) -> Option<&AgentName> {
        match self {
            Self::MessagePosted(_)
            | Self::DirectivePublished(_)
            | Self::DirectiveRevoked(_)
            | Self::NoteWritten(_)
            | Self::NotebookEntryAppended(_)
            | Self::HeartbeatRan(_)
            | Self::ToolsDeclared(_)
            | Self::ApprovalRequested(_)
            | Self::ApprovalAnswered(_)
            | Self::InstructionsGiven(_) => None,
            Self::SessionOpened(e) => Some(&e.agent),
            Self::ContextDelivered(e) => Some(&e.agent),
            Self::TurnCompleted(e) => Some(&e.agent),
            Self::TurnFailed(e) => Some(&e.agent),
            Self::SessionSuspended(e) | Self::SessionClosed(e) => Some(&e.agent),
            Self::SummaryRecorded(e) => Some(&e.agent),
            Self::AgentFailed(e) => Some(&e.agent),
        }
    }

    /// The agent an event is about, for filters (`legio replay --agent`): the session agent, or a
    /// heartbeat's agent. `None` for messages (see the visibility rule) and memory events.
    pub fn agent(&self) -> Option<&AgentName> {
        match self {
            Self::HeartbeatRan(e) => Some(&e.agent),
            Self::ApprovalRequested(e) => Some(&e.agent),
            Self::ApprovalAnswered(e) => Some(&e.agent),
            Self::InstructionsGiven(e) => Some(&e.agent),
            _ => self.session_agent(),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Each kind's word is stable: logs, filters and metrics name kinds by it.
    #[test]
    fn every_kind_reads_as_its_word_and_back() {
        let words = [
            (EventKind::MessagePosted, "message_posted"),
            (EventKind::SessionOpened, "session_opened"),
            (EventKind::ContextDelivered, "context_delivered"),
            (EventKind::TurnCompleted, "turn_completed"),
            (EventKind::TurnFailed, "turn_failed"),
            (EventKind::SessionSuspended, "session_suspended"),
            (EventKind::SessionClosed, "session_closed"),
            (EventKind::SummaryRecorded, "summary_recorded"),
            (EventKind::AgentFailed, "agent_failed"),
            (EventKind::DirectivePublished, "directive_published"),
            (EventKind::DirectiveRevoked, "directive_revoked"),
            (EventKind::NoteWritten, "note_written"),
            (EventKind::NotebookEntryAppended, "notebook_entry_appended"),
            (EventKind::HeartbeatRan, "heartbeat_ran"),
            (EventKind::ToolsDeclared, "tools_declared"),
            (EventKind::ApprovalRequested, "approval_requested"),
            (EventKind::ApprovalAnswered, "approval_answered"),
            (EventKind::InstructionsGiven, "instructions_given"),
        ];
        assert_eq!(words.map(|(kind, _)| kind), EventKind::ALL);
        for (kind, word) in words {
            assert_eq!(kind.as_str(), word);
            assert_eq!(kind.to_string(), word);
            assert_eq!(EventKind::parse(word), Some(kind), "{word}");
        }
        for word in [
            "",
            "MessagePosted",
            "message-posted",
            "Message_posted",
            " note_written",
        ] {
            assert_eq!(EventKind::parse(word), None, "{word:?}");
        }
    }
}
