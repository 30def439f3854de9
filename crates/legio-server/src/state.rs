//! The state every handler shares ([`AppState`]): a leaf module, so the server's modules (the
//! routes in server.rs, metrics.rs' upkeep, the handlers) need not import each other.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use legio_runtime::Runtime;
use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::limits::TurnSlots;
use crate::metrics::MetricsHandle;
use crate::server_tokens::ScopedToken;
use crate::settings::ServerSettings;

/// What every handler shares.
pub(crate) struct AppState {
    pub(crate) runtime: Arc<Runtime>,
    pub(crate) settings: ServerSettings,
    /// Every accepted token with its scopes (auth.rs); empty on an open loopback server.
    pub(crate) tokens: Vec<Arc<ScopedToken>>,
    /// Turns in flight per token (limits.rs).
    pub(crate) turn_slots: Arc<TurnSlots>,
    pub(crate) metrics: MetricsHandle,
    /// False once shutdown began (`/readyz` answers 503).
    pub(crate) ready: AtomicBool,
    /// Becomes true when shutdown begins: long-lived streams (follow) end.
    pub(crate) stopping: watch::Receiver<bool>,
    /// Streamed turns run on their own tasks (a client that goes away does not cancel a turn);
    /// shutdown cancels those still running after the grace period.
    pub(crate) turn_tasks: Mutex<HashMap<u64, AbortHandle>>,
    pub(crate) next_task: AtomicU64,
    /// Turns waiting for the results of tools the host runs (runs.rs).
    pub(crate) parked: Mutex<Vec<crate::runs::Parked>>,
}

impl AppState {
    /// Spawns a streamed turn's task, tracked until it ends.
    pub(crate) fn spawn_turn<F>(self: &Arc<Self>, future: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let id = self.next_task.fetch_add(1, Ordering::Relaxed);
        let state = Arc::clone(self);
        let mut tasks = self.turn_tasks.lock().unwrap_or_else(|p| p.into_inner());
        let task = tokio::spawn(async move {
            future.await;
            state
                .turn_tasks
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
        });
        tasks.insert(id, task.abort_handle());
    }

    pub(crate) fn cancel_turns(&self) -> usize {
        let mut tasks = self.turn_tasks.lock().unwrap_or_else(|p| p.into_inner());
        let n = tasks.len();
        for (_, task) in tasks.drain() {
            task.abort();
        }
        n
    }
}
