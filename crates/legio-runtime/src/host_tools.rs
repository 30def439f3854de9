//! Tools the host runs (over an API, not compiled in): declared by a host for a conversation or
//! for one posted turn, each a name, a description and a JSON schema, and offered to the agents
//! that turn addresses. When a model calls one, the call is registered here, announced as
//! [`crate::Progress::ToolCallsRequired`] (the turn's caller hands it to the host) and waited
//! for: the host answers with [`crate::Runtime::submit_tool_results`], or after
//! `runtime.host_tool_timeout_seconds` the call gets an interrupted error result. Either way the
//! result is recorded like any tool result (the model's message holds the calls, the results
//! message replies to it, each result names its call id), and the turn goes on.
//!
//! This is the seam in the tool loop: a call whose result arrives later. tools.rs asks
//! [`HostToolDesk::wait_for`] for each call of the step that names a host tool, before any call
//! runs, then awaits each receiver as the call's outcome.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use legio_core::{AgentName, ConversationKey, Participant};
use tokio::sync::oneshot;

use crate::error::RuntimeError;
use crate::memory::ToolSpec;
use crate::outcome::ToolOutcome;
use crate::registry::{check_tool, ToolRegistry, ToolRegistryError};

/// A call of a host tool a model made, for the host to run.
#[derive(Clone, Debug, PartialEq, Eq)]
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
}

type PendingKey = (ConversationKey, String);

/// The host tools declared per conversation and the calls waiting for the host's results.
/// Process memory, not the log: a host declares again after a restart (the calls and results
/// themselves are in the log).
#[derive(Default)]
pub(crate) struct HostToolDesk {
    declared: Mutex<HashMap<ConversationKey, Vec<ToolSpec>>>,
    pending: Mutex<HashMap<PendingKey, oneshot::Sender<ToolOutcome>>>,
}

impl std::fmt::Debug for HostToolDesk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostToolDesk").finish_non_exhaustive()
    }
}

/// Checks host tools: valid names, object schemas, no name twice, none taken by the process's
/// registered tools.
pub(crate) fn check_host_tools(
    tools: &[ToolSpec],
    registry: &ToolRegistry,
) -> Result<(), ToolRegistryError> {
    for (i, tool) in tools.iter().enumerate() {
        check_tool(&tool.name, &tool.parameters)?;
        let twice = tools[..i].iter().any(|t| t.name == tool.name);
        if twice || registry.get(&tool.name).is_some() {
            return Err(ToolRegistryError::Duplicate {
                name: tool.name.clone(),
            });
        }
    }
    Ok(())
}

impl HostToolDesk {
    /// Replaces the conversation's declared tools (an empty list clears them).
    pub(crate) fn declare(&self, conversation: &ConversationKey, tools: Vec<ToolSpec>) {
        let mut declared = self.declared.lock().unwrap_or_else(|p| p.into_inner());
        if tools.is_empty() {
            declared.remove(conversation);
        } else {
            declared.insert(conversation.clone(), tools);
        }
    }

    /// The conversation's declared tools.
    pub(crate) fn declared(&self, conversation: &ConversationKey) -> Vec<ToolSpec> {
        let declared = self.declared.lock().unwrap_or_else(|p| p.into_inner());
        declared.get(conversation).cloned().unwrap_or_default()
    }

    /// The host tools of a turn: the conversation's, then the turn's own (replacing a declared
    /// one of the same name). `None` when there are none.
    pub(crate) fn turn_tools(
        &self,
        conversation: &ConversationKey,
        turn: Vec<ToolSpec>,
    ) -> Option<Arc<[ToolSpec]>> {
        let mut tools: Vec<ToolSpec> = self
            .declared(conversation)
            .into_iter()
            .filter(|d| !turn.iter().any(|t| t.name == d.name))
            .collect();
        tools.extend(turn);
        (!tools.is_empty()).then(|| tools.into())
    }

    /// Registers a call that waits for the host: its outcome arrives on the receiver.
    pub(crate) fn wait_for(
        &self,
        conversation: &ConversationKey,
        call_id: &str,
    ) -> oneshot::Receiver<ToolOutcome> {
        let (tx, rx) = oneshot::channel();
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.insert((conversation.clone(), call_id.to_owned()), tx);
        rx
    }

    /// Forgets a call (answered, timed out or cut by the turn's end).
    pub(crate) fn forget(&self, conversation: &ConversationKey, call_id: &str) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.remove(&(conversation.clone(), call_id.to_owned()));
    }

    /// Hands the host's results to the waiting calls: all or none (every id must be waiting,
    /// each once).
    pub(crate) fn submit(
        &self,
        conversation: &ConversationKey,
        results: Vec<HostToolResult>,
    ) -> Result<(), RuntimeError> {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        for (i, result) in results.iter().enumerate() {
            let key = (conversation.clone(), result.call_id.clone());
            let twice = results[..i].iter().any(|r| r.call_id == result.call_id);
            if twice || !pending.contains_key(&key) {
                let mut waiting: Vec<String> = pending
                    .keys()
                    .filter(|(c, _)| c == conversation)
                    .map(|(_, id)| id.clone())
                    .collect();
                waiting.sort();
                return Err(RuntimeError::NoPendingToolCall {
                    call_id: result.call_id.clone(),
                    waiting,
                });
            }
        }
        for result in results {
            let key = (conversation.clone(), result.call_id);
            if let Some(tx) = pending.remove(&key) {
                let outcome = if result.is_error {
                    ToolOutcome::Failed(result.content)
                } else {
                    ToolOutcome::Done(result.content)
                };
                // A call cut by the turn's end in the meantime drops its receiver: nothing waits.
                let _ = tx.send(outcome);
            }
        }
        Ok(())
    }
}
