//! The shared memory's events (directives, notes, notebook entries): a leaf module, so the `Event`
//! enum (event.rs) and the memory projection (memory.rs) do not import each other.

use serde::{Deserialize, Serialize};

use crate::name::AgentName;
use crate::timestamp::Timestamp;

/// The orchestrator published a directive.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct DirectivePublished {
    /// The directive's id (`d1`, `d2`, ...; assigned by [`MemoryState::decide`]).
    pub id: String,
    /// Who published it.
    pub by: AgentName,
    /// When.
    pub at: Timestamp,
    /// The directive.
    pub text: String,
}

/// The orchestrator revoked a directive.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct DirectiveRevoked {
    /// The directive's id.
    pub id: String,
    /// Who revoked it.
    pub by: AgentName,
    /// When.
    pub at: Timestamp,
    /// Why, if given.
    pub reason: Option<String>,
}

/// An agent wrote a shared note (a new key, or a new revision of an existing one).
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct NoteWritten {
    /// The note's key, chosen by the writer.
    pub key: String,
    /// Who wrote this revision.
    pub author: AgentName,
    /// When.
    pub at: Timestamp,
    /// The note's text.
    pub text: String,
}

/// A specialist appended an entry to its own notebook.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct NotebookEntryAppended {
    /// The notebook's owner (the specialist that wrote the entry).
    pub owner: AgentName,
    /// When.
    pub at: Timestamp,
    /// The entry.
    pub text: String,
}
