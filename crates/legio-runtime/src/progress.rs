//! Progress of a posted message's turns, for hosts that show it as it happens (the server's
//! streamed turns): each addressed agent starts, streams text where its provider does, and is
//! done. Progress is a view; the log and the returned replies are the record.

use tokio::sync::mpsc::UnboundedSender;

use crate::reply::AgentReply;
use legio_core::AgentName;

/// One step of a post's progress. For each addressed agent: `AgentStarted` (when its actor takes
/// the turn), any number of `Delta`s (fragments of the reply's text, in order, only where the
/// provider streams), `Thinking` fragments (where the provider streams them), and for each tool
/// the model calls a `ToolCalled` then its `ToolDone` or `ToolFailed`; then exactly one
/// `AgentDone` with its reply or error. Steps of different agents interleave.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Progress {
    /// The agent's actor started the turn (after any wait in its mailbox or a restart backoff).
    AgentStarted {
        /// The agent.
        agent: AgentName,
    },
    /// A fragment of the agent's reply text.
    Delta {
        /// The agent.
        agent: AgentName,
        /// The fragment.
        text: String,
    },
    /// A fragment of the model's thinking, where its provider streams it (never recorded).
    Thinking {
        /// The agent.
        agent: AgentName,
        /// The fragment.
        text: String,
    },
    /// The model called a tool; it runs now (its result follows as `ToolDone` or `ToolFailed`).
    ToolCalled {
        /// The agent whose model called it.
        agent: AgentName,
        /// The call's id (as in the log's tool-call part).
        id: String,
        /// The tool.
        name: String,
        /// Its arguments, as JSON text.
        arguments: String,
    },
    /// A tool call ended with a result.
    ToolDone {
        /// The agent.
        agent: AgentName,
        /// The call's id.
        id: String,
        /// The tool.
        name: String,
    },
    /// A tool call ended with an error result (the model gets the error and goes on).
    ToolFailed {
        /// The agent.
        agent: AgentName,
        /// The call's id.
        id: String,
        /// The tool.
        name: String,
        /// What went wrong.
        error: String,
    },
    /// Compacting the agent's context failed; the turn goes on without a new summary (older
    /// messages may be left out to fit the window). A warning, not the turn's outcome.
    CompactionFailed {
        /// The agent.
        agent: AgentName,
        /// Why no summary was made.
        reason: String,
    },
    /// The model called tools the host runs: the turn waits for the host's results
    /// ([`crate::Runtime::submit_tool_results`], within `runtime.host_tool_timeout_seconds`).
    /// One per step, with every host call of the step.
    ToolCallsRequired {
        /// The agent.
        agent: AgentName,
        /// The calls, in the model's order.
        calls: Vec<crate::tools::host_calls::HostToolCall>,
    },
    /// The agent's turn ended: its reply, or its error. Sent after every fragment of the turn.
    AgentDone {
        /// The reply (with `error` set if the turn failed).
        reply: AgentReply,
    },
}

/// Where the runtime sends progress. Sends never block; a dropped receiver is ignored.
pub type ProgressSink = UnboundedSender<Progress>;
