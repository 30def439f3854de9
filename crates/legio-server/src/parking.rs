//! Where runs with host tools start, wait and resume: `AppState::start_run` posts a host's turn on
//! its own task, `park` keeps a run under its calls' ids until the host's results come, `resume`
//! hands those to the runtime and takes the run back (runs.rs has the run itself).

use std::sync::Arc;

use legio_core::ConversationKey;
use legio_runtime::{HostToolCall, HostToolResult, HostTurn, Progress};
use tokio::sync::{mpsc, oneshot};

use crate::error::ApiError;
use crate::runs::{Parked, Run};
use crate::state::AppState;

impl AppState {
    /// Posts `turn` on its own task (a client that goes away does not cancel it).
    pub(crate) fn start_run(self: &Arc<Self>, key: ConversationKey, turn: HostTurn) -> Run {
        let (progress, updates) = mpsc::unbounded_channel::<Progress>();
        let (done_tx, done) = oneshot::channel();
        let runtime = Arc::clone(&self.runtime);
        self.spawn_turn(async move {
            let result = runtime.post_host_turn(&key, turn, progress).await;
            let _ = done_tx.send(result);
        });
        Run::new(updates, done)
    }

    /// Parks a run until the host posts the results of `calls`.
    pub(crate) fn park(&self, conversation: &ConversationKey, calls: &[HostToolCall], run: Run) {
        let mut parked = self.parked();
        // Runs whose turn ended meanwhile (their host never answered: the calls timed out) go.
        parked.retain_mut(|p| {
            p.run.done.as_mut().is_some_and(|done| {
                matches!(done.try_recv(), Err(oneshot::error::TryRecvError::Empty))
            })
        });
        parked.push(Parked {
            conversation: conversation.clone(),
            call_ids: calls.iter().map(|c| c.id.clone()).collect(),
            run,
        });
    }

    /// Hands the host's results to the runtime and takes back the run that waited for them. An
    /// id no call waits for refuses them all (the run stays parked). On a cluster the calls may
    /// wait on the conversation's owner (the runtime carries the results there) while the run
    /// is parked here, on the node the turn was posted to. The run is taken only once the
    /// results were: of two requests racing with the same results, the one whose results the
    /// calls took follows the run, the other is refused.
    pub(crate) async fn resume(
        &self,
        conversation: &ConversationKey,
        results: Vec<HostToolResult>,
    ) -> Result<Run, ApiError> {
        let ids: Vec<String> = results.iter().map(|r| r.call_id.clone()).collect();
        let waits_for = |p: &Parked| {
            p.conversation == *conversation && ids.iter().any(|id| p.call_ids.contains(id))
        };
        self.runtime
            .submit_tool_results(conversation, results)
            .await?;
        let mut parked = self.parked();
        // The run is still parked: only the request whose results the calls took gets here, and
        // a parked run waits for the results of its own calls before it can move on.
        match parked.iter().position(waits_for) {
            Some(index) => Ok(parked.swap_remove(index).run),
            None => Err(ApiError::new(
                "no_pending_tool_call",
                "the results were taken, but no request here follows that turn any more (its server restarted, the turn ended, or it was posted to another node: post the results to the node that answered requires_action)",
            )),
        }
    }

    fn parked(&self) -> std::sync::MutexGuard<'_, Vec<Parked>> {
        self.parked.lock().unwrap_or_else(|p| p.into_inner())
    }
}
