//! Following a turn that waits on a host's tool calls, where the calls wait: results handed to
//! them and their turn followed from then on ([`Runtime::follow_here`], behind
//! [`Runtime::follow_tool_results`] and the `FollowResults` command; follow.rs keeps the
//! followers), and a keyed post's retry that follows the turn its first attempt paused on
//! ([`Runtime::follow_paused`]). The entries are in api/host_tools.rs.

use legio_core::ConversationKey;
use tokio::sync::oneshot;

use crate::error::RuntimeError;
use crate::progress::ProgressSink;
use crate::reply::Posted;
use crate::runtime::Runtime;
use crate::tools::follow::{Ended, Follower};
use crate::tools::host_calls::HostToolResult;

impl Runtime {
    /// Hands `results` to the calls waiting here and follows the turn that made the first of
    /// them, its progress to `progress`, until it ends.
    pub(crate) async fn follow_here(
        &self,
        conversation: &ConversationKey,
        results: Vec<HostToolResult>,
        progress: &ProgressSink,
    ) -> Result<Posted, RuntimeError> {
        let (end_tx, end) = oneshot::channel();
        let follower = Follower {
            progress: progress.clone(),
            end: Some(end_tx),
        };
        let desk = &self.shared.host_desk;
        desk.submit_following(conversation, results, follower)?;
        followed(conversation, end.await)
    }

    /// For a keyed post's retry with host tools: when its first attempt's turn (answering
    /// `message`) waits here on the host's calls, the retry follows it from now on (told first
    /// the calls still waiting, as a `requires_action`) and gets its replies, marked replayed;
    /// `None` when no such turn waits here.
    pub(crate) async fn follow_paused(
        &self,
        key: &ConversationKey,
        message: legio_core::MessageId,
        progress: &ProgressSink,
    ) -> Option<Result<Posted, RuntimeError>> {
        let (end_tx, end) = oneshot::channel();
        let follower = Follower {
            progress: progress.clone(),
            end: Some(end_tx),
        };
        if !self.shared.host_desk.follow_turn(key, message, follower) {
            return None;
        }
        let mut posted = followed(key, end.await);
        if let Ok(posted) = &mut posted {
            posted.replayed = true;
        }
        Some(posted)
    }
}

/// The end of a followed turn: its replies, or why this follower has none.
fn followed(
    conversation: &ConversationKey,
    end: Result<Ended, oneshot::error::RecvError>,
) -> Result<Posted, RuntimeError> {
    match end {
        Ok(Ended::Replies(posted)) => Ok(posted),
        Ok(Ended::TakenOver) => Err(RuntimeError::TurnTakenOver {
            conversation: conversation.to_string(),
        }),
        Err(_) => Err(RuntimeError::Cancelled {
            what: "following the turn",
            source: legio_store::ErrorSource::new(
                "its caller gave the post up, or the runtime is stopping",
            ),
        }),
    }
}
