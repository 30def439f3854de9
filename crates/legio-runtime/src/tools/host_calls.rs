//! The host tools' vocabulary: a model's call of a tool the host runs ([`HostToolCall`]), the
//! host's result of it ([`HostToolResult`]) and a message posted with such tools
//! ([`HostTurn`]). Used by the host desk (tools/host_desk.rs), the turn's followers (follow.rs), the
//! progress a turn reports (progress.rs) and the tool loop (tools/calls.rs).

use legio_core::{AgentName, Participant};

use crate::tools::memory::ToolSpec;

/// A call of a host tool a model made, for the host to run.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HostToolCall {
    /// The agent that called.
    pub agent: AgentName,
    /// The call id (the provider's): the result names it.
    pub id: String,
    /// The tool.
    pub name: String,
    /// The arguments as the model wrote them (JSON text, not checked against the schema).
    pub arguments: String,
}

/// The host's result of one call.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HostToolResult {
    /// The call it answers.
    pub call_id: String,
    /// The result text.
    pub content: String,
    /// Whether it is an error result.
    pub is_error: bool,
}

/// A message a host posts with tools it runs: [`crate::Runtime::post_host_turn`].
#[derive(Clone, Debug)]
pub struct HostTurn {
    /// Who says it (the user, or an agent of the roster).
    pub sender: Participant,
    /// The agent it is for; `None`: addressed by its mentions, as [`crate::Runtime::post`] does.
    pub to: Option<AgentName>,
    /// The message.
    pub text: String,
    /// Tools the host runs for this turn only, offered with the conversation's declared ones (a
    /// tool of this list replaces a declared one of the same name).
    pub tools: Vec<ToolSpec>,
    /// With a key, a retry of this turn stores nothing new: see [`crate::Runtime::post_once`].
    pub idempotency_key: Option<legio_core::IdempotencyKey>,
}
