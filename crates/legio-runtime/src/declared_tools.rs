//! The tools a host declares for a conversation (`POST /sessions/{id}/tools`), kept in the log: a
//! declaration is a `ToolsDeclared` event in the conversation, so it outlives the process and every
//! node of a cluster reads the same one. The last declaration wins; an empty list clears them.
//!
//! This process keeps what it has read in the host desk (host_tools.rs), per conversation, with
//! the seq it has read up to. On one machine every declaration goes through this process, so a
//! conversation's events are read once, on first use (a `ToolsDeclared` appended around the
//! runtime, through `Runtime::log()`, is seen only by a process that reads the conversation
//! afresh: after a restart, or once the reaper forgot it). On a cluster a declaration routes to the
//! conversation's owner like a post, and so does the question: the node holding the conversation
//! answers it from its own copy, reading the events past that seq (another node may have declared
//! before it took the conversation over); a node that asks keeps nothing.

use legio_core::{ConversationKey, DeclaredTool, Event, Seq, ToolsDeclared};

use crate::clock::now;
use crate::cluster::{Answered, Forwarded};
use crate::error::RuntimeError;
use crate::host_tools::check_host_tools;
use crate::memory::ToolSpec;
use crate::names::IntoName;
use crate::runtime::Runtime;

impl Runtime {
    /// Declares the tools the host runs for every turn it posts with
    /// [`Runtime::post_host_turn`] in `conversation` (replacing earlier ones; an empty list
    /// clears them). Recorded in the log (a `ToolsDeclared` event): the declaration outlives a
    /// restart, and on a cluster it goes to the node that owns the conversation, where every
    /// node reads it.
    pub async fn declare_tools(
        &self,
        conversation: impl IntoName<ConversationKey>,
        tools: Vec<ToolSpec>,
    ) -> Result<(), RuntimeError> {
        let key = Self::host_conversation(conversation)?;
        check_host_tools(&tools, &self.shared.tools)?;
        self.declare_tools_with(key, tools, false).await
    }

    /// The declaration path; on a cluster, a declaration for a conversation another node owns
    /// goes there (unless it was `forwarded` here already).
    pub(crate) async fn declare_tools_with(
        &self,
        key: ConversationKey,
        tools: Vec<ToolSpec>,
        forwarded: bool,
    ) -> Result<(), RuntimeError> {
        self.check_running()?;
        let request = || Forwarded::DeclareTools {
            conversation: key.clone(),
            tools: tools.clone(),
        };
        let _in_use = match self.elsewhere(request, None, forwarded).await {
            Ok(in_use) => in_use,
            Err(answer) => return answer.and_then(Answered::into_declared),
        };
        let event = Event::ToolsDeclared(ToolsDeclared {
            conversation: key.clone(),
            at: now(),
            tools: tools.iter().map(declared_tool).collect(),
        });
        let range = self.shared.append(vec![event]).await?;
        self.shared
            .host_desk
            .note(&key, Some(tools), range.last, None);
        Ok(())
    }

    /// The tools the host declared for `conversation`, as the log has them. On a cluster, the
    /// node that holds the conversation answers (it reads them without a stream read); when
    /// nobody holds it, this node reads the log.
    pub async fn declared_tools(
        &self,
        conversation: impl IntoName<ConversationKey>,
    ) -> Result<Vec<ToolSpec>, RuntimeError> {
        let key = Self::host_conversation(conversation)?;
        let request = || Forwarded::DeclaredTools {
            conversation: key.clone(),
        };
        match self.ask_holder(&key, request).await? {
            Some(answer) => answer.into_declared_tools(),
            None => self.declared_here(&key).await,
        }
    }

    /// The conversation's declared tools, as this node reads them from the log.
    pub(crate) async fn declared_here(
        &self,
        key: &ConversationKey,
    ) -> Result<Vec<ToolSpec>, RuntimeError> {
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
fn declared_tool(tool: &ToolSpec) -> DeclaredTool {
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
                    reason: e.to_string(),
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
