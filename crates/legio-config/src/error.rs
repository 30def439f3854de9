//! The configuration's errors.

use std::path::PathBuf;

use thiserror::Error;

/// A configuration that cannot be used.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read configuration {}: {reason}", file.display())]
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

/// An agent that is not in the roster.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("unknown agent {name:?}; the roster has: {}", known.join(", "))]
pub struct UnknownAgent {
    /// The name asked for.
    pub name: String,
    /// The roster.
    pub known: Vec<String>,
}
