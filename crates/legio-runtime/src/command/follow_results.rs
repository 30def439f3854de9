//! `follow_tool_results`: a host's results handed to the calls waiting in a conversation, as
//! `tool_results` does, and the turn that made the first of them followed from then on: its
//! progress comes to this caller (across the bus from the holder), and the answer is the
//! turn's replies when it ends (api/host_tools.rs is the entry, tools/follow.rs the followers).

use legio_core::ConversationKey;
use serde::{Deserialize, Serialize};

use super::{Command, Place};
use crate::error::RuntimeError;
use crate::placement::Here;
use crate::progress::ProgressSink;
use crate::reply::Posted;
use crate::runtime::Runtime;
use crate::tools::host_calls::HostToolResult;

/// The host's `results` for calls waiting in `conversation`, and their turn followed.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct FollowResults {
    pub(crate) conversation: ConversationKey,
    pub(crate) results: Vec<HostToolResult>,
}

impl Command for FollowResults {
    /// The turn's replies; with nobody to follow it (no progress asked), none.
    type Answer = Posted;
    const KIND: &'static str = "follow_tool_results";
    const PLACE: Place = Place::Holder;
    const STREAMS: bool = true;

    fn conversation(&self) -> &ConversationKey {
        &self.conversation
    }

    async fn run(
        self,
        runtime: &Runtime,
        _here: Here,
        progress: Option<ProgressSink>,
    ) -> Result<Posted, RuntimeError> {
        let (conversation, results) = (self.conversation, self.results);
        match progress {
            Some(progress) => runtime.follow_here(&conversation, results, &progress).await,
            // Nobody would follow: the results are only handed over.
            None => {
                runtime.shared.host_desk.submit(&conversation, results)?;
                Ok(Posted::default())
            }
        }
    }
}
