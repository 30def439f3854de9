//! `declared_tools`: the tools the host declared for a conversation, as the log has them. On a
//! cluster the node holding the conversation answers from its own copy (read past the seq it
//! has read up to); when nobody holds it, this node reads the log (tools/declared.rs).

use legio_core::ConversationKey;
use serde::{Deserialize, Serialize};

use super::{Command, Place};
use crate::error::RuntimeError;
use crate::placement::Here;
use crate::progress::ProgressSink;
use crate::runtime::Runtime;
use crate::tools::memory::ToolSpec;

/// The declared tools of `conversation`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct DeclaredTools {
    pub(crate) conversation: ConversationKey,
}

impl Command for DeclaredTools {
    type Answer = Vec<ToolSpec>;
    const KIND: &'static str = "declared_tools";
    const PLACE: Place = Place::Holder;

    fn conversation(&self) -> &ConversationKey {
        &self.conversation
    }

    async fn run(
        self,
        runtime: &Runtime,
        _here: Here,
        _progress: Option<ProgressSink>,
    ) -> Result<Vec<ToolSpec>, RuntimeError> {
        runtime.declared_here(&self.conversation).await
    }
}
