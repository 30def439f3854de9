//! `declare_tools`: the tools a host runs for every turn it posts in a conversation, recorded
//! as a `ToolsDeclared` event (the last declaration wins; an empty list clears them), so the
//! declaration outlives a restart and every node of a cluster reads it (tools/declared.rs).
//! Runs on the conversation's owner, which notes it in its host desk.

use legio_core::{ConversationKey, Event, ToolsDeclared};
use serde::{Deserialize, Serialize};

use super::{Command, Place};
use crate::clock::now;
use crate::error::RuntimeError;
use crate::placement::Here;
use crate::progress::ProgressSink;
use crate::runtime::Runtime;
use crate::tools::declared::declared_tool;
use crate::tools::host_desk::check_host_tools;
use crate::tools::memory::ToolSpec;

/// The host's `tools` for `conversation`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct DeclareTools {
    pub(crate) conversation: ConversationKey,
    pub(crate) tools: Vec<ToolSpec>,
}

impl Command for DeclareTools {
    type Answer = ();
    const KIND: &'static str = "declare_tools";
    const PLACE: Place = Place::Owner;

    fn conversation(&self) -> &ConversationKey {
        &self.conversation
    }

    async fn run(
        self,
        runtime: &Runtime,
        _here: Here,
        _progress: Option<ProgressSink>,
    ) -> Result<(), RuntimeError> {
        // Checked where it arrived; again against this process's own tools.
        check_host_tools(&self.tools, &runtime.shared.tools)?;
        runtime.check_running()?;
        let event = Event::ToolsDeclared(ToolsDeclared {
            conversation: self.conversation.clone(),
            at: now(),
            tools: self.tools.iter().map(declared_tool).collect(),
        });
        let range = runtime.shared.append(vec![event]).await?;
        let desk = &runtime.shared.host_desk;
        desk.note(&self.conversation, Some(self.tools), range.last, None);
        Ok(())
    }
}
