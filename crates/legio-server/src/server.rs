//! The server: binding (loopback by default; a public address needs a token), the routes and
//! their guards, and graceful shutdown (stop accepting, let in-flight requests finish within the
//! grace period, then cancel them, suspend every session and flush the log).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{DefaultBodyLimit, State};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use legio_runtime::Runtime;
use legio_store::StoreError;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower_http::timeout::RequestBodyTimeoutLayer;

use crate::error::{ApiError, ServeError};
use crate::metrics::MetricsHandle;
use crate::server_tokens::Scope;
use crate::settings::ServerSettings;
use crate::state::AppState;
use crate::{
    approvals, auth, dashboard, exporter, heartbeats, history, host_tools, limits, meta, openai,
    operator, turns,
};
use legio_runtime::ErrorCode;

/// How a shutdown went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Whether every in-flight request finished within the grace period.
    pub drained: bool,
    /// Streamed turns still running after the grace period, cancelled (their agents' turns end
    /// with the runtime's shutdown).
    pub cancelled_turns: usize,
    /// Whether every session was suspended (or closed) and the log flushed; false when agents
    /// were still inside provider calls after the grace period.
    pub suspended: bool,
}

/// A bound server, ready to serve.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    state: Arc<AppState>,
    stop: watch::Sender<bool>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Binds `settings.bind` (or `bind`, when given) for `runtime`. A non-loopback address
    /// without a token is refused.
    pub async fn bind(
        runtime: Runtime,
        mut settings: ServerSettings,
        bind: Option<SocketAddr>,
        metrics: MetricsHandle,
    ) -> Result<Self, ServeError> {
        if let Some(bind) = bind {
            settings.bind = bind;
        }
        let listener = Self::listen(&settings, settings.bind).await?;
        Ok(Self::on(listener, runtime, settings, metrics))
    }

    /// Checks and binds `bind` for `settings` without a runtime, so that a caller can fail on a
    /// busy port before opening (and creating) the log; then [`Server::on`].
    pub async fn listen(
        settings: &ServerSettings,
        bind: SocketAddr,
    ) -> Result<TcpListener, ServeError> {
        Self::check_bind(settings, bind)?;
        TcpListener::bind(bind).await.map_err(|e| ServeError::Bind {
            bind,
            reason: e.to_string(),
        })
    }

    /// A server for `runtime` on a listener from [`Server::listen`].
    pub fn on(
        listener: TcpListener,
        runtime: Runtime,
        settings: ServerSettings,
        metrics: MetricsHandle,
    ) -> Self {
        let (mcp_key, first) = crate::mcp_key::McpKey::read(&runtime.config().store);
        crate::mcp::announce(&runtime, listener.local_addr().ok(), first);
        let (stop, stopping) = watch::channel(false);
        // What the socket is bound to decides, not what the settings say (`legio serve --bind`).
        let loopback = listener
            .local_addr()
            .map_or(settings.bind.ip().is_loopback(), |a| a.ip().is_loopback());
        let origins = crate::origin::Policy::new(
            loopback,
            settings.allowed_hosts.as_deref(),
            &settings.allowed_origins,
        );
        let state = Arc::new(AppState {
            origins: Arc::new(origins),
            runtime: Arc::new(runtime),
            tokens: auth::tokens(&settings),
            turn_slots: limits::TurnSlots::new(&settings.limits),
            settings,
            metrics,
            ready: AtomicBool::new(true),
            stopping,
            turn_tasks: TaskTracker::new(),
            turn_cancel: CancellationToken::new(),
            parked: Mutex::new(Vec::new()),
            mcp_key: Arc::new(mcp_key),
        });
        Self {
            listener,
            state,
            stop,
        }
    }

    /// Refuses a non-loopback address without a token (checked before anything is opened).
    pub fn check_bind(settings: &ServerSettings, bind: SocketAddr) -> Result<(), ServeError> {
        if !bind.ip().is_loopback() && !settings.has_tokens() {
            return Err(ServeError::NoTokenForPublicBind { bind });
        }
        Ok(())
    }

    /// The address it listens on (the real port when bound to port 0).
    pub fn local_addr(&self) -> Result<SocketAddr, ServeError> {
        self.listener
            .local_addr()
            .map_err(|e| ServeError::Io(e.to_string()))
    }

    /// The routes with their guards, for driving in process (tests send requests to it with
    /// tower's `oneshot`); [`Server::serve`] adds the connection limits and the shutdown.
    pub fn router(&self) -> Router {
        router(Arc::clone(&self.state))
    }

    /// The runtime it serves.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.state.runtime
    }

    /// Resolves `server.storage_failure_exit_seconds` after the event log failed (a failed
    /// commit: a full disk, too many open files, an I/O error), with the failure; never while the
    /// log works. From the failure on, `/readyz` answers 503 with its cause and every write is
    /// refused with the same; `legio serve` stops when this resolves and exits non-zero so that
    /// its supervisor starts it again (the log does not heal in place; a new open recovers it).
    pub fn storage_failure(&self) -> impl Future<Output = StoreError> + Send + 'static {
        crate::storage::watch(
            Arc::clone(self.state.runtime.log()),
            self.state.settings.storage_failure_exit,
        )
    }

    /// Serves until `shutdown` resolves, then shuts down gracefully: new connections are refused
    /// and `/readyz` says 503, follow streams end, in-flight requests get
    /// `server.shutdown_grace_seconds` to finish (then they are cancelled), every session is
    /// suspended or closed and the log flushed.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<ShutdownReport, ServeError> {
        let Self {
            listener,
            state,
            stop,
        } = self;
        let upkeep = exporter::spawn_upkeep(Arc::clone(&state));
        let app = router(Arc::clone(&state));
        let fired_at: Arc<Mutex<Option<Instant>>> = Arc::default();
        let signal_state = Arc::clone(&state);
        let signal_at = Arc::clone(&fired_at);
        let signal = async move {
            shutdown.await;
            if let Ok(mut at) = signal_at.lock() {
                *at = Some(Instant::now());
            }
            tracing::info!("shutting down: no new connections; finishing in-flight requests");
            signal_state.ready.store(false, Ordering::SeqCst);
            let _ = stop.send(true);
        };
        // The listener is dropped when `accept` returns: no new connection after the signal.
        let open = limits::accept(listener, app, &state.settings.limits, signal).await;
        let grace = state.settings.shutdown_grace;
        let drained = tokio::time::timeout(grace, open.shutdown()).await.is_ok();
        // Streamed turns whose client went away may still run: they get the rest of the grace
        // period, then are cancelled; the runtime's shutdown then suspends or closes every
        // session.
        let deadline = fired_at
            .lock()
            .map(|t| *t)
            .ok()
            .flatten()
            .unwrap_or_else(Instant::now)
            + grace;
        state.turn_tasks.close();
        let _ = tokio::time::timeout_at(deadline.into(), state.turn_tasks.wait()).await;
        let cancelled_turns = state.cancel_turns();
        upkeep.abort();
        if !drained {
            tracing::warn!(
                grace_seconds = grace.as_secs_f64(),
                cancelled_turns,
                "in-flight requests did not finish within the grace period; cancelled"
            );
        }
        // An agent still inside a provider call finishes it before it suspends its session;
        // past the grace period the process stops without waiting (as a crash would: every
        // acknowledged event is durable, and the next start closes or suspends those sessions
        // as crashed).
        let suspended = match tokio::time::timeout(
            grace.max(Duration::from_secs(1)),
            state.runtime.stop(),
        )
        .await
        {
            Ok(result) => {
                result?;
                tracing::info!("shut down: sessions suspended, log flushed");
                true
            }
            Err(_) => {
                tracing::warn!("agents still in provider calls after the grace period: stopping without suspending their sessions (the next start recovers them)");
                false
            }
        };
        Ok(ShutdownReport {
            drained,
            cancelled_turns,
            suspended,
        })
    }
}

/// Every route and its guard.
pub(crate) fn router(state: Arc<AppState>) -> Router {
    let guard =
        |scope: Scope| middleware::from_fn_with_state((Arc::clone(&state), scope), auth::require);
    let host = Router::new()
        .route("/meta", get(meta::meta))
        .route("/sessions/{id}/turns", post(turns::post_turn))
        .route("/sessions/{id}/history", get(history::history))
        .route(
            "/sessions/{id}/tools",
            get(host_tools::declared).post(host_tools::declare),
        )
        .route("/sessions/{id}/tool_results", post(host_tools::results))
        .route(
            "/sessions/{id}/heartbeats",
            post(heartbeats::post_heartbeat),
        )
        .merge(openai::router())
        .route_layer(guard(Scope::Host));
    let metrics = Router::new()
        .route("/metrics", get(exporter::render))
        .route("/dashboard", get(dashboard::page))
        .route("/dashboard.js", get(dashboard::script))
        .route_layer(guard(Scope::Metrics));
    let operator = Router::new()
        .route("/operator/events", get(operator::events))
        .route("/operator/inspect/{what}", get(operator::inspect))
        .route("/operator/memory", get(operator::memory))
        .route("/operator/context", get(operator::context))
        .route("/operator/verify", get(operator::verify))
        .route("/operator/reset", post(operator::reset))
        .route(
            "/sessions/{id}/approvals/{call_id}",
            post(approvals::answer),
        )
        .route_layer(guard(Scope::Operator));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(host)
        .merge(metrics)
        .merge(operator)
        .merge(crate::mcp::routes(&state))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(state.settings.body_limit_bytes))
        .layer(middleware::from_fn_with_state(
            state.settings.body_limit_bytes,
            limits::refuse_declared_overlong,
        ))
        .layer(RequestBodyTimeoutLayer::new(
            state.settings.limits.body_read_timeout,
        ))
        // Outermost: a rebinding page's request is refused before any guard or handler.
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state.origins),
            crate::origin::guard,
        ))
        .with_state(state)
}

async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({"status": "ok"}))
}

/// 200 while the server takes work; 503 once the event log failed (naming the cause) or shutdown
/// began.
async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    if let Some(failure) = state.runtime.log().failure() {
        crate::storage::not_ready(failure, state.settings.storage_failure_exit).into_response()
    } else if state.ready.load(Ordering::SeqCst) {
        Json(serde_json::json!({"status": "ready"})).into_response()
    } else {
        ApiError::new(ErrorCode::ShuttingDown, "the server is shutting down").into_response()
    }
}

async fn not_found() -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        "no such endpoint; the API is described in proto/openapi.yaml",
    )
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        "this endpoint does not take that method; see proto/openapi.yaml",
    )
}
