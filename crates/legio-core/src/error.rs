//! The core's error values: bad names, bad timestamps, bad mentions. Never panics.

use thiserror::Error;

/// A name or key that does not have the required shape.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum NameError {
    /// Not `[a-z][a-z0-9_-]{0,31}`.
    #[error("invalid agent name {value:?}: use 1 to 32 characters of a-z, 0-9, '_' or '-', starting with a letter")]
    InvalidAgentName {
        /// The rejected value.
        value: String,
    },
    /// `user` or `all`.
    #[error("agent name {value:?} is reserved ('user' is the human, 'all' is everyone): choose another name")]
    ReservedAgentName {
        /// The rejected value.
        value: String,
    },
    /// Not 1 to 128 characters of `[A-Za-z0-9:._@+-]`.
    #[error("invalid conversation key {value:?}: use 1 to 128 characters of A-Z, a-z, 0-9 and ':._@+-' (e.g. \"telegram:42\")")]
    InvalidConversationKey {
        /// The rejected value.
        value: String,
    },
}

/// A timestamp that could not be read.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum TimestampError {
    /// Not RFC 3339.
    #[error(
        "invalid timestamp {value:?}: {reason} (expected RFC 3339, e.g. 2026-02-15T12:00:00Z)"
    )]
    Invalid {
        /// The rejected text.
        value: String,
        /// What the parser said.
        reason: String,
    },
    /// Outside the representable range.
    #[error("timestamp {value:?} is out of range")]
    OutOfRange {
        /// The rejected text.
        value: String,
    },
}

/// A mention that names no known agent.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum MentionError {
    /// `@name` where `name` is not an agent of this legion.
    #[error("unknown agent {name:?} in mention; known agents: {}", known.join(", "))]
    UnknownAgent {
        /// The name as written after `@`.
        name: String,
        /// The known agents, sorted.
        known: Vec<String>,
    },
}
