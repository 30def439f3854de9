//! The runtime's errors.

use std::path::PathBuf;

use legio_core::{MentionError, NameError};
use legio_store::StoreError;
use thiserror::Error;

/// A configuration that cannot be used.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read configuration {}: {reason}; pass --config FILE or set LEGIO_CONFIG", file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// Why.
        reason: String,
    },
    /// The file is invalid.
    #[error("invalid configuration in {}: {message}", file.display())]
    Invalid {
        /// The file.
        file: PathBuf,
        /// What is wrong, naming the key.
        message: String,
    },
}

/// What the runtime's API can fail with. A failing agent is not an error of `post`: it is an
/// error reply for that agent.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RuntimeError {
    /// Bad configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The event log failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A configured provider cannot be built (a missing key variable, a bad base URL).
    #[error(transparent)]
    Provider(#[from] legio_llm::BuildError),
    /// A bad conversation key or agent name.
    #[error(transparent)]
    Name(#[from] NameError),
    /// A mention of an unknown agent.
    #[error(transparent)]
    Mention(#[from] MentionError),
    /// An agent that is not in the roster.
    #[error("unknown agent {name:?}; the roster has: {}", known.join(", "))]
    UnknownAgent {
        /// The name asked for.
        name: String,
        /// The roster.
        known: Vec<String>,
    },
    /// A conversation with no event in the log.
    #[error("no conversation {key:?} in the log; conversations: {}", if known.is_empty() { "none".to_owned() } else { known.join(", ") })]
    UnknownConversation {
        /// The key asked for.
        key: String,
        /// The conversations the log has (perhaps only the first ones).
        known: Vec<String>,
    },
    /// A conversation key legio keeps for itself (`legio:...`, e.g. the memory stores').
    #[error("conversation key {key:?} is reserved by legio (keys starting with \"legio:\"): use another key")]
    ReservedConversation {
        /// The key.
        key: String,
    },
    /// An empty message.
    #[error("a message needs some text")]
    EmptyMessage,
    /// The runtime is shutting down or shut down.
    #[error("the runtime is shut down")]
    ShutDown,
    /// An actor could not be reached or started.
    #[error("runtime failure: {0}")]
    Actor(String),
}
