//! Where runs with host tools start, wait and resume: `AppState::start_run` posts a host's turn on
//! its own task, `park` keeps a run under its calls' ids until the host's results come, `resume`
//! hands those to the runtime and takes the run back, or, when no run here waits for them, takes
//! the turn over as a run of its own (runs.rs has the run itself).

use std::future::Future;
use std::sync::Arc;

use legio_core::ConversationKey;
use legio_runtime::{
    HostToolCall, HostToolResult, HostTurn, Posted, Progress, ProgressSink, RuntimeError,
};
use tokio::sync::{mpsc, oneshot};

use crate::error::ApiError;
use crate::runs::{Parked, Run};
use crate::state::AppState;

impl AppState {
    /// Posts `turn` on its own task (a client that goes away does not cancel it).
    pub(crate) fn start_run(
        self: &Arc<Self>,
        key: ConversationKey,
        turn: HostTurn,
        instructions: Option<String>,
    ) -> Run {
        let runtime = Arc::clone(&self.runtime);
        self.run_on_task(|progress| async move {
            let posting = runtime.posting(&key, &turn.text).host_turn(turn);
            let posting = posting.instructions(instructions);
            posting.progress(progress).send().await
        })
    }

    /// Hands the host's results over and takes over the turn that made the calls (the runtime's
    /// `follow_tool_results`), on its own task: for results whose turn no run here follows.
    fn follow_run(self: &Arc<Self>, key: ConversationKey, results: Vec<HostToolResult>) -> Run {
        let runtime = Arc::clone(&self.runtime);
        self.run_on_task(|progress| async move {
            runtime.follow_tool_results(&key, results, progress).await
        })
    }

    /// A run of `work`, given the run's progress sink, on its own task.
    fn run_on_task<F>(self: &Arc<Self>, work: impl FnOnce(ProgressSink) -> F) -> Run
    where
        F: Future<Output = Result<Posted, RuntimeError>> + Send + 'static,
    {
        let (progress, updates) = mpsc::unbounded_channel::<Progress>();
        let (done_tx, done) = oneshot::channel();
        let work = work(progress);
        self.spawn_turn(async move {
            let _ = done_tx.send(work.await);
        });
        Run::new(updates, done)
    }

    /// Parks a run until the host posts the results of `calls`.
    pub(crate) fn park(&self, conversation: &ConversationKey, calls: &[HostToolCall], run: Run) {
        let mut parked = self.parked();
        parked.push(Parked {
            conversation: conversation.clone(),
            call_ids: calls.iter().map(|c| c.id.clone()).collect(),
            run,
        });
    }

    /// Hands the host's results to the runtime and takes back the run that waited for them. On
    /// a cluster the calls may wait on the conversation's owner (the runtime carries the results
    /// there) while the run is parked here, on the node the turn was posted to. The run is taken
    /// out while its results are handed over (so nothing drops it meanwhile, should its turn
    /// end at once) and put back when they are refused (an id no call waits for refuses them
    /// all). When no run here waits for these calls (the turn was posted to another node of a
    /// cluster, another request has the run, or it ended), this request takes the turn over
    /// wherever its calls wait (`follow_run`). Of two requests racing with the same results,
    /// the one whose results the calls took follows the turn; the other is refused.
    pub(crate) async fn resume(
        self: &Arc<Self>,
        conversation: &ConversationKey,
        results: Vec<HostToolResult>,
    ) -> Result<Run, ApiError> {
        let ids: Vec<String> = results.iter().map(|r| r.call_id.clone()).collect();
        let waits_for = |p: &Parked| {
            p.conversation == *conversation && ids.iter().any(|id| p.call_ids.contains(id))
        };
        let taken = {
            let mut parked = self.parked();
            // The latest: a keyed retry that took a paused turn over parks after its first attempt.
            let index = parked.iter().rposition(waits_for);
            index.map(|index| parked.swap_remove(index))
        };
        let Some(parked) = taken else {
            // A refusal answers as a refused turn does: an error status, never a stream.
            let mut run = self.follow_run(conversation.clone(), results);
            return match run.refusal().await {
                Some(refused) => Err(refused),
                None => Ok(run),
            };
        };
        // Put back unless the results are taken, also should this request be dropped meanwhile
        // (its client gone).
        let mut out = TakenOut {
            state: self,
            parked: Some(parked),
        };
        self.runtime
            .submit_tool_results(conversation, results)
            .await?;
        Ok(out.parked.take().map(|p| p.run).expect("taken out above"))
    }

    /// The parked runs, without those whose turn ended while they waited (their host never
    /// answered and the calls timed out, or another request took the turn over).
    fn parked(&self) -> std::sync::MutexGuard<'_, Vec<Parked>> {
        let mut parked = self.parked.lock().unwrap_or_else(|p| p.into_inner());
        parked.retain_mut(|p| {
            p.run.done.as_mut().is_some_and(|done| {
                matches!(done.try_recv(), Err(oneshot::error::TryRecvError::Empty))
            })
        });
        parked
    }
}

/// A parked run taken out while its results are handed over: put back when dropped still
/// holding it (the results were refused, or the request was dropped meanwhile).
struct TakenOut<'a> {
    state: &'a AppState,
    parked: Option<Parked>,
}

impl Drop for TakenOut<'_> {
    fn drop(&mut self) {
        if let Some(parked) = self.parked.take() {
            self.state.parked().push(parked);
        }
    }
}
