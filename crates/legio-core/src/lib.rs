//! legio-core: the pure domain of legio. Names, messages, events, visibility, mentions and the
//! session projection. No IO, no clock or randomness reads, no async runtime: time and random
//! bytes are passed in by the caller.

mod error;
mod event;
mod mention;
mod message;
mod name;
mod seq;
mod session;
mod timestamp;
mod visibility;

#[cfg(test)]
mod test_support;

pub use error::{MentionError, NameError, TimestampError};
pub use event::{
    AgentFailed, BoundaryReason, ContextDelivered, DeliveryMode, Event, EventKind, OpenReason,
    Record, SessionEnded, SessionId, SessionOpened, SessionStart, SummaryRecorded, TokenUsage,
    TurnCompleted, TurnFailed,
};
pub use mention::parse_mentions;
pub use message::{Audience, Message, MessageId, Part};
pub use name::{
    AgentName, ConversationKey, Participant, MAX_AGENT_NAME_LEN, MAX_CONVERSATION_KEY_LEN,
    RESERVED_NAMES,
};
pub use seq::{Seq, SeqRange};
pub use session::{AgentSessionState, FailedInfo, SessionInfo, SessionStatus};
pub use timestamp::Timestamp;
pub use visibility::{can_see, visibility_keys, Viewer, VisibilityKey};
