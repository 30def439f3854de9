//! Progress of a step's tool calls, for a person following a turn (`legio chat`'s status lines,
//! the server's `tool_call` / `tool_done` / `tool_failed` events): each call when the model makes
//! it, then how it ended. Kept out of the tool loop (turn.rs calls these two functions) and the
//! tools (tools/calls.rs), which do not know who listens.

use legio_core::AgentName;
use legio_llm::ToolCallPart;

use crate::progress::{Progress, ProgressSink};
use crate::tools::calls::ToolOutcome;

/// `ToolCalled` for each of `calls`, in order.
pub(crate) fn called(progress: Option<&ProgressSink>, agent: &AgentName, calls: &[ToolCallPart]) {
    let Some(progress) = progress else { return };
    for call in calls {
        let _ = progress.send(Progress::ToolCalled {
            agent: agent.clone(),
            id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        });
    }
}

/// `ToolDone` or `ToolFailed` for each call and its outcome, in order.
pub(crate) fn ended(
    progress: Option<&ProgressSink>,
    agent: &AgentName,
    calls: &[ToolCallPart],
    outcomes: &[ToolOutcome],
) {
    let Some(progress) = progress else { return };
    for (call, outcome) in calls.iter().zip(outcomes) {
        let (agent, id, name) = (agent.clone(), call.id.clone(), call.name.clone());
        let _ = progress.send(match outcome {
            ToolOutcome::Done(_) => Progress::ToolDone { agent, id, name },
            ToolOutcome::Failed(error) => Progress::ToolFailed {
                agent,
                id,
                name,
                error: error.clone(),
            },
        });
    }
}
