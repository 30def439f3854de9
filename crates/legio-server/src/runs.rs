//! Turns posted with tools the host runs, as runs that pause: a [`Run`] is a turn on its own task
//! with its progress and its end. When a model calls a host tool the run is parked
//! (`AppState::park`, parking.rs) under the calls' ids and the caller answers with the calls; the request
//! carrying the results takes it back (`AppState::resume`), hands the results to the runtime and
//! follows the run again. Used by the native API (host_tools.rs) and the OpenAI-compatible door.

use legio_core::ConversationKey;
use legio_runtime::{HostToolCall, Posted, Progress, RuntimeError};
use tokio::sync::{mpsc, oneshot};

use crate::error::ApiError;
use legio_runtime::ErrorCode;

/// A turn running with host tools: its progress, then its end.
pub(crate) struct Run {
    updates: mpsc::UnboundedReceiver<Progress>,
    pub(crate) done: Option<oneshot::Receiver<Result<Posted, RuntimeError>>>,
    finished: Option<Result<Posted, ApiError>>,
    /// A step read ahead by [`Run::refusal`], given first by the next [`Run::next`].
    ahead: Option<Next>,
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
    pub(crate) conversation: ConversationKey,
    pub(crate) call_ids: Vec<String>,
    pub(crate) run: Run,
}

impl Run {
    /// A run fed by `updates` and ended by `done` (see `AppState::start_run`, parking.rs).
    pub(crate) fn new(
        updates: mpsc::UnboundedReceiver<Progress>,
        done: oneshot::Receiver<Result<Posted, RuntimeError>>,
    ) -> Self {
        Self {
            updates,
            done: Some(done),
            finished: None,
            ahead: None,
        }
    }

    /// Waits for the run's first step: the error when the run was refused (it ended at once,
    /// with an error and no progress), else `None` (the step is kept for [`Run::next`]).
    pub(crate) async fn refusal(&mut self) -> Option<ApiError> {
        match self.next().await {
            Next::Finished(Err(e)) => Some(e),
            next => {
                self.ahead = Some(next);
                None
            }
        }
    }

    /// The next step: progress first (every update sent before the end comes before it).
    pub(crate) async fn next(&mut self) -> Next {
        if let Some(next) = self.ahead.take() {
            return next;
        }
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
    ApiError::new(
        ErrorCode::ShuttingDown,
        "the turn was cancelled by a shutdown",
    )
}
