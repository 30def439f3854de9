//! A host's results for the calls of its tools a turn waits on: handed to the waiting calls
//! ([`Runtime::submit_tool_results`]), or handed and the turn followed from then on
//! ([`Runtime::follow_tool_results`], follow.rs). Calls wait only where their turn runs: on a
//! cluster, on the node that holds the conversation, so results that reach another node go
//! there (`Forwarded::ToolResults`, `Forwarded::FollowToolResults`).

use legio_core::ConversationKey;
use tokio::sync::oneshot;

use crate::cluster::{Answered, Forwarded};
use crate::error::RuntimeError;
use crate::follow::{Ended, Follower};
use crate::host_calls::HostToolResult;
use crate::names::IntoName;
use crate::progress::ProgressSink;
use crate::reply::Posted;
use crate::runtime::Runtime;

impl Runtime {
    /// Hands the host's results to the calls waiting in `conversation` (all or none: an id that
    /// is not waiting refuses them all); each waiting turn goes on, and its progress and replies
    /// still go to the turn's caller. On a cluster, results for calls that do not wait here go
    /// to the node that owns the conversation (whose turn made the calls, when another node
    /// forwarded it there).
    pub async fn submit_tool_results(
        &self,
        conversation: impl IntoName<ConversationKey>,
        results: Vec<HostToolResult>,
    ) -> Result<(), RuntimeError> {
        let key = Self::host_conversation(conversation)?;
        self.submit_tool_results_with(key, results, false).await
    }

    pub(crate) async fn submit_tool_results_with(
        &self,
        key: ConversationKey,
        results: Vec<HostToolResult>,
        forwarded: bool,
    ) -> Result<(), RuntimeError> {
        let refused = match self.shared.host_desk.submit(&key, results.clone()) {
            Err(e @ RuntimeError::NoPendingToolCall { .. }) if !forwarded => e,
            here => return here,
        };
        // Calls wait only on the conversation's owner: if no other node holds it, none waits
        // anywhere and the refusal stands (no lease is taken for it).
        let request = || Forwarded::ToolResults {
            conversation: key.clone(),
            results: results.clone(),
        };
        match self.ask_holder(&key, request).await? {
            Some(answer) => answer.into_tool_results(),
            None => Err(refused),
        }
    }

    /// Hands the host's results to the calls waiting in `conversation`, as
    /// [`Runtime::submit_tool_results`] does, and takes over the turn that made the first of
    /// them: from now on that turn's progress goes to `progress` (no longer to its caller, whose
    /// post still ends with the replies), and this returns the turn's replies when it ends. For
    /// a host whose results reach another process than the turn's caller: the server of
    /// another node of a cluster behind a load balancer, or a server that no longer holds the
    /// request the turn was posted with. Of two calls handing the same results, the one whose
    /// results the calls took follows the turn; the other is refused. Should the turn call host
    /// tools again, those calls reach `progress` and a later hand-over may take the turn on
    /// (this call then fails: the turn is followed elsewhere).
    pub async fn follow_tool_results(
        &self,
        conversation: impl IntoName<ConversationKey>,
        results: Vec<HostToolResult>,
        progress: ProgressSink,
    ) -> Result<Posted, RuntimeError> {
        let key = Self::host_conversation(conversation)?;
        self.follow_tool_results_with(key, results, progress, false)
            .await
    }

    pub(crate) async fn follow_tool_results_with(
        &self,
        key: ConversationKey,
        results: Vec<HostToolResult>,
        progress: ProgressSink,
        forwarded: bool,
    ) -> Result<Posted, RuntimeError> {
        let (end_tx, end) = oneshot::channel();
        let follower = Follower {
            progress: progress.clone(),
            end: Some(end_tx),
        };
        let desk = &self.shared.host_desk;
        let refused = match desk.submit_following(&key, results.clone(), follower) {
            Ok(()) => return followed(&key, end.await),
            Err(e @ RuntimeError::NoPendingToolCall { .. }) if !forwarded => e,
            Err(e) => return Err(e),
        };
        let request = || Forwarded::FollowToolResults {
            conversation: key.clone(),
            results: results.clone(),
        };
        match self.ask_holder_with(&key, request, Some(&progress)).await? {
            Some(answer) => answer.into_posted(),
            None => Err(refused),
        }
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

    /// Serves `Forwarded::FollowToolResults`: hands the results over and follows the turn,
    /// its progress to the asking node's frames. Always streamed (wire.rs); unstreamed, nobody
    /// would follow, so the results are only handed over.
    pub(crate) async fn serve_followed_results(
        &self,
        conversation: ConversationKey,
        results: Vec<HostToolResult>,
        progress: Option<ProgressSink>,
    ) -> Result<Answered, RuntimeError> {
        match progress {
            Some(progress) => self
                .follow_tool_results_with(conversation, results, progress, true)
                .await
                .map(Answered::Posted),
            None => self
                .submit_tool_results_with(conversation, results, true)
                .await
                .map(|()| Answered::ToolResults),
        }
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
            reason: "its caller gave the post up, or the runtime is stopping".into(),
        }),
    }
}
