//! `activities`: what each agent of a conversation is doing (for `Runtime::status`). Only the
//! node that runs the conversation's actors knows, so it is asked of the lease's holder; when
//! nobody holds it, this node's own board answers (every agent idle), and no lease is taken.

use legio_core::{AgentName, ConversationKey};
use serde::{Deserialize, Serialize};

use super::{Command, Place};
use crate::error::RuntimeError;
use crate::placement::Here;
use crate::progress::ProgressSink;
use crate::runtime::Runtime;
use crate::status::Activity;

/// What the agents of `conversation` are doing.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Activities {
    pub(crate) conversation: ConversationKey,
}

impl Command for Activities {
    /// Each agent of the roster, in roster order, with what it is doing.
    type Answer = Vec<(AgentName, Activity)>;
    const KIND: &'static str = "activities";
    const PLACE: Place = Place::Holder;

    fn conversation(&self) -> &ConversationKey {
        &self.conversation
    }

    async fn run(
        self,
        runtime: &Runtime,
        _here: Here,
        _progress: Option<ProgressSink>,
    ) -> Result<Self::Answer, RuntimeError> {
        Ok(runtime.board_here(&self.conversation))
    }
}
