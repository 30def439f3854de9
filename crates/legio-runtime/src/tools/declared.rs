//! The tools a host declares for a conversation (`POST /sessions/{id}/tools`), kept in the log: a
//! declaration is a `ToolsDeclared` event in the conversation, so it outlives the process and every
//! node of a cluster reads the same one. The last declaration wins; an empty list clears them.
//!
//! This process keeps what it has read in the conversation's entry (conversation/, through the
//! host desk, tools/host_desk.rs), with the seq it has read up to, while something uses the
//! conversation (its supervisor, a request). On one machine every declaration goes through this
//! process, so a conversation's events are read once per life of its entry (a `ToolsDeclared`
//! appended around the runtime, through `Runtime::log()`, is seen only by a process that reads the
//! conversation afresh: after a restart, or once its entry went). On a cluster a declaration routes to the
//! conversation's owner like a post, and so does the question: the node holding the conversation
//! answers it from its own copy, reading the events past that seq (another node may have declared
//! before it took the conversation over); a node that asks keeps nothing.

use legio_core::{ConversationKey, DeclaredTool, Seq, ToolsDeclared};

use crate::error::RuntimeError;
use crate::runtime::Runtime;
use crate::tools::memory::ToolSpec;

impl Runtime {
    /// The conversation's declared tools, as this node reads them from the log.
    pub(crate) async fn declared_here(
        &self,
        key: &ConversationKey,
    ) -> Result<Vec<ToolSpec>, RuntimeError> {
        // Kept for the read: what it notes stays while something else uses the conversation.
        let _read = self.shared.conversations.enter(key);
        self.read_declarations(key).await?;
        Ok(self.shared.host_desk.declared(key))
    }

    /// Brings the host desk's copy of `key`'s declarations up to the log (see the module docs).
    async fn read_declarations(&self, key: &ConversationKey) -> Result<(), RuntimeError> {
        let known = self.shared.host_desk.read_through(key);
        if self.node().is_none() && known.is_some() {
            return Ok(());
        }
        self.catch_up(key).await?;
        // Only the last declaration counts (one that does not read but was replaced is no
        // error: declaring again mends it).
        let (conversation, from) = (key.clone(), known.unwrap_or(Seq::ZERO));
        let (latest, after) = self
            .shared
            .read_with(move |log| legio_ops::latest_declaration(log, &conversation, from))
            .await?;
        let tools = match latest {
            Some((seq, declared)) => Some(specs_of(seq, &declared)?),
            None => None,
        };
        self.shared.host_desk.note(key, tools, after, known);
        Ok(())
    }
}

/// A tool as the log records its declaration.
pub(crate) fn declared_tool(tool: &ToolSpec) -> DeclaredTool {
    DeclaredTool {
        name: tool.name.clone(),
        description: tool.description.clone(),
        parameters: tool.parameters.to_string(),
    }
}

/// The tools the declaration recorded at `seq` names.
fn specs_of(seq: Seq, declared: &ToolsDeclared) -> Result<Vec<ToolSpec>, RuntimeError> {
    declared
        .tools
        .iter()
        .map(|tool| {
            let parameters = serde_json::from_str(&tool.parameters).map_err(|e| {
                RuntimeError::BadDeclaration {
                    conversation: declared.conversation.to_string(),
                    seq,
                    tool: tool.name.clone(),
                    source: legio_store::ErrorSource::new(e),
                }
            })?;
            Ok(ToolSpec {
                name: tool.name.clone(),
                description: tool.description.clone(),
                parameters,
            })
        })
        .collect()
}
