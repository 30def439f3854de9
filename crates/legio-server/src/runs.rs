//! Turns posted with tools the host runs, as runs that pause: a [`Run`] is a turn on its own task
//! with its progress and its end. When a model calls a host tool the run is parked
//! ([`AppState::park`]) under the calls' ids and the caller answers with the calls; the request
//! carrying the results takes it back ([`AppState::unpark`]), hands the results to the runtime and
//! follows the run again. Used by the native API (host_tools.rs) and the OpenAI-compatible door.

use std::sync::Arc;

use legio_core::ConversationKey;
use legio_runtime::{HostToolCall, HostToolResult, HostTurn, Posted, Progress, RuntimeError};
use tokio::sync::{mpsc, oneshot};

use crate::error::ApiError;
use crate::state::AppState;

/// A turn running with host tools: its progress, then its end.
pub(crate) struct Run {
    updates: mpsc::UnboundedReceiver<Progress>,
    done: Option<oneshot::Receiver<Result<Posted, RuntimeError>>>,
    finished: Option<Result<Posted, ApiError>>,
}

/// What a run did next.
pub(crate) enum Next {
    /// A step of progress (text deltas, an agent started or done).
    Progress(Progress),
    /// The model called host tools: the run is to be parked until the host answers.
    ToolCalls(Vec<HostToolCall>),
    /// The post ended: its replies, or why it was refused.
    Finished(Result<Posted, ApiError>),
}

/// A run waiting for the host's results of `call_ids`.
pub(crate) struct Parked {
    conversation: ConversationKey,
    call_ids: Vec<String>,
    run: Run,
}

impl Run {
    /// Posts `turn` on its own task (a client that goes away does not cancel it).
    pub(crate) fn start(state: &Arc<AppState>, key: ConversationKey, turn: HostTurn) -> Self {
        let (progress, updates) = mpsc::unbounded_channel::<Progress>();
        let (done_tx, done) = oneshot::channel();
        let runtime = Arc::clone(&state.runtime);
        state.spawn_turn(async move {
            let result = runtime.post_host_turn(&key, turn, progress).await;
            let _ = done_tx.send(result);
        });
        Self {
            updates,
            done: Some(done),
            finished: None,
        }
    }

    /// The next step: progress first (every update sent before the end comes before it).
    pub(crate) async fn next(&mut self) -> Next {
        loop {
            if let Ok(update) = self.updates.try_recv() {
                return classify(update);
            }
            if let Some(finished) = self.finished.take() {
                return Next::Finished(finished);
            }
            let Some(done) = self.done.as_mut() else {
                return Next::Finished(Err(cancelled()));
            };
            tokio::select! {
                biased;
                Some(update) = self.updates.recv() => return classify(update),
                result = done => {
                    self.done = None;
                    self.finished = Some(match result {
                        Ok(Ok(posted)) => Ok(posted),
                        Ok(Err(e)) => Err(ApiError::from(e)),
                        Err(_) => Err(cancelled()),
                    });
                }
            }
        }
    }
}

fn classify(update: Progress) -> Next {
    match update {
        Progress::ToolCallsRequired { calls, .. } => Next::ToolCalls(calls),
        other => Next::Progress(other),
    }
}

/// A turn cut by shutdown.
pub(crate) fn cancelled() -> ApiError {
    ApiError::new("shutting_down", "the turn was cancelled by a shutdown")
}

impl AppState {
    /// Parks a run until the host posts the results of `calls`.
    pub(crate) fn park(&self, conversation: &ConversationKey, calls: &[HostToolCall], run: Run) {
        let mut parked = self.parked.lock().unwrap_or_else(|p| p.into_inner());
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
    /// id no call waits for refuses them all (the run stays parked).
    pub(crate) fn resume(
        &self,
        conversation: &ConversationKey,
        results: Vec<HostToolResult>,
    ) -> Result<Run, ApiError> {
        let mut parked = self.parked.lock().unwrap_or_else(|p| p.into_inner());
        let found = parked.iter().position(|p| {
            p.conversation == *conversation
                && results.iter().any(|r| p.call_ids.contains(&r.call_id))
        });
        self.runtime.submit_tool_results(conversation, results)?;
        let Some(index) = found else {
            return Err(ApiError::new(
                "no_pending_tool_call",
                "the results were taken, but no request follows that turn any more (its server restarted or the turn ended)",
            ));
        };
        Ok(parked.swap_remove(index).run)
    }
}
