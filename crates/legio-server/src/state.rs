//! The state every handler shares ([`AppState`]): a leaf module, so the server's modules (the
//! routes in server.rs, metrics.rs' upkeep, the handlers) need not import each other.

use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use legio_runtime::Runtime;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

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
    /// Streamed turns run on their own tasks (a client that goes away does not cancel a turn),
    /// tracked here; shutdown waits for them through the grace period, then cancels the rest.
    pub(crate) turn_tasks: TaskTracker,
    /// Cancels the turn tasks still running after the grace period.
    pub(crate) turn_cancel: CancellationToken,
    /// Turns waiting for the results of tools the host runs (runs.rs).
    pub(crate) parked: Mutex<Vec<crate::runs::Parked>>,
    /// The `Host` and `Origin` values accepted (origin.rs), fixed by the bound address.
    pub(crate) origins: Arc<crate::origin::Policy>,
    /// The key `/mcp` checks tokens with (mcp.rs).
    pub(crate) mcp_key: Arc<crate::mcp_key::McpKey>,
}

impl AppState {
    /// Spawns a streamed turn's task, tracked until it ends (or is cancelled at shutdown).
    pub(crate) fn spawn_turn<F>(self: &Arc<Self>, future: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let cancelled = self.turn_cancel.clone();
        self.turn_tasks.spawn(async move {
            tokio::select! {
                () = future => {}
                () = cancelled.cancelled() => {}
            }
        });
    }

    /// Cancels every turn task still running; answers how many there were.
    pub(crate) fn cancel_turns(&self) -> usize {
        let running = self.turn_tasks.len();
        self.turn_cancel.cancel();
        running
    }
}
