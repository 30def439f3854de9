//! The errors of the operator views and the turn preparation.

use legio_store::StoreError;
use thiserror::Error;

/// Why a view or a turn's preparation failed, one variant per cause (legio-runtime maps each to
/// its `RuntimeError` variant of the same name).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum OpsError {
    /// The event log failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A conversation with no event in the log.
    #[error("no conversation {key:?} in the log; conversations: {}", if known.is_empty() { "none".to_owned() } else { known.join(", ") })]
    UnknownConversation {
        /// The key asked for.
        key: String,
        /// The conversations the log has (perhaps only the first ones).
        known: Vec<String>,
    },
    /// The log lacks a record a session state points at (a damaged log: run `legio verify`).
    #[error("{what} at seq {seq} is not in the log; run `legio verify`")]
    MissingRecord {
        /// What was expected (`the message to answer`, `the summary`).
        what: &'static str,
        /// Where.
        seq: legio_core::Seq,
    },
}
