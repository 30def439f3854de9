//! `tool_results`: a host's results handed to the calls of its tools waiting in a conversation
//! (all or none: an id that is not waiting refuses them all); each waiting turn goes on, its
//! progress and replies still to the turn's caller. Calls wait only where their turn runs, so
//! results that do not find their calls here are asked of the conversation's holder
//! (api/host_tools.rs is the entry).

use legio_core::ConversationKey;
use serde::{Deserialize, Serialize};

use super::{Command, Place};
use crate::error::RuntimeError;
use crate::placement::Here;
use crate::progress::ProgressSink;
use crate::runtime::Runtime;
use crate::tools::host_calls::HostToolResult;

/// The host's `results` for calls waiting in `conversation`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct SubmitResults {
    pub(crate) conversation: ConversationKey,
    pub(crate) results: Vec<HostToolResult>,
}

impl Command for SubmitResults {
    type Answer = ();
    const KIND: &'static str = "tool_results";
    const PLACE: Place = Place::Holder;

    fn conversation(&self) -> &ConversationKey {
        &self.conversation
    }

    async fn run(
        self,
        runtime: &Runtime,
        _here: Here,
        _progress: Option<ProgressSink>,
    ) -> Result<(), RuntimeError> {
        runtime
            .shared
            .host_desk
            .submit(&self.conversation, self.results)
    }
}
