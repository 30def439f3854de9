//! `/mcp`: legio's MCP server over streamable HTTP (rmcp's tower service). A request needs
//! `Authorization: Bearer TOKEN` with a token from `legio mcp token` (not the `[server]` token):
//! the guard verifies it with the MCP key (beside the database, or on a cluster the one the
//! nodes share: `McpTokenKey::for_store`) and puts its scope (one agent in one conversation) in
//! the request's extensions, where `legio_runtime::McpService` finds it. So every request is
//! authorized by its own credential, and the tools it reaches are that agent's. A session (its
//! `mcp-session-id`) is bound to the scope of the token that opened it: a request of that
//! session with a token of another scope is refused (403), and one of a session this server did
//! not open is 404 (before rmcp sees it), so a session serves exactly one agent in one
//! conversation.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use legio_runtime::{McpScope, McpService, McpTokenKey, Runtime, ScopeResolver};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

use crate::error::ApiError;
use crate::mcp_key::McpKey;
use crate::state::AppState;
use legio_runtime::ErrorCode;

/// The guard's state: the key tokens are verified with, and each open session's scope.
pub(crate) struct Guard {
    key: Arc<McpKey>,
    sessions: Mutex<Sessions>,
}

/// The open sessions' scopes, each with when it was last used.
#[derive(Default)]
struct Sessions {
    tick: u64,
    open: HashMap<String, (u64, McpScope)>,
}

/// Sessions remembered; past it, the least recently used is forgotten (its client is told to
/// start a new session, as after a restart, which loses every session).
const SESSIONS: usize = 10_000;

const SESSION_HEADER: &str = "mcp-session-id";

/// The `/mcp` routes with their guard.
pub(crate) fn routes(state: &Arc<AppState>) -> Router<Arc<AppState>> {
    let guard = Arc::new(Guard {
        key: Arc::clone(&state.mcp_key),
        sessions: Mutex::default(),
    });
    let resolve: ScopeResolver = Arc::new(|extensions| {
        extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<McpScope>())
            .cloned()
    });
    let config = StreamableHttpServerConfig::default();
    // Shutdown ends the SSE streams, so in-flight requests can drain.
    let cancel = config.cancellation_token.clone();
    let mut stopping = state.stopping.clone();
    tokio::spawn(async move {
        let _ = stopping.wait_for(|s| *s).await;
        cancel.cancel();
    });
    let runtime = Arc::clone(&state.runtime);
    let service = StreamableHttpService::new(
        move || {
            Ok(McpService::per_request(
                Arc::clone(&runtime),
                Arc::clone(&resolve),
            ))
        },
        Arc::new(LocalSessionManager::default()),
        config,
    );
    Router::new()
        .nest_service("/mcp", service)
        .layer(middleware::from_fn_with_state(guard, require_mcp_token))
}

/// Tells the runtime where `/mcp` is served (`addr`; an unspecified address as loopback), so
/// `claude-code` agents get it with a fresh token on every call, signed with `key` (the key as
/// read at start). Without it (the key file cannot be made, the cluster is out of reach) they
/// get none, with a warning; `/mcp` tries to read the key again on each request until it has it.
pub(crate) fn announce(
    runtime: &Runtime,
    addr: Option<SocketAddr>,
    key: Result<McpTokenKey, String>,
) {
    let Some(mut addr) = addr else { return };
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    match key {
        Ok(key) => runtime.serve_mcp_at(format!("http://{addr}/mcp"), key),
        Err(e) => tracing::warn!("claude-code agents get no MCP endpoint (until a restart): {e}"),
    }
}

/// Verifies the bearer token, checks that the session (if any) was opened with the same scope,
/// and attaches the scope to the request.
async fn require_mcp_token(
    State(guard): State<Arc<Guard>>,
    mut request: Request,
    next: Next,
) -> Response {
    let key = match guard.key.get().await {
        Ok(key) => key,
        Err(reason) => return ApiError::new(ErrorCode::Internal, reason).into_response(),
    };
    let Some(token) = crate::auth::bearer(&request) else {
        return ApiError::new(
            ErrorCode::Unauthorized,
            "send `Authorization: Bearer TOKEN` with a token from `legio mcp token --conversation C --agent A`",
        )
        .into_response();
    };
    let scope = match key.verify(token) {
        Ok(scope) => scope,
        Err(e) => return ApiError::new(ErrorCode::Unauthorized, e.to_string()).into_response(),
    };
    let session = header_text(request.headers());
    if let Some(refused) = session.as_deref().and_then(|s| guard.check(s, &scope)) {
        return refused.into_response();
    }
    let closing = request.method() == axum::http::Method::DELETE;
    request.extensions_mut().insert(scope.clone());
    let mut response = next.run(request).await;
    // rmcp ends a session with 202, which the Python SDK warns of on every close
    // ("Session termination failed: 202"); the session is ended, so say so plainly.
    if closing && response.status() == axum::http::StatusCode::ACCEPTED {
        *response.status_mut() = axum::http::StatusCode::OK;
    }
    match (session, header_text(response.headers())) {
        (Some(session), _) if closing && response.status().is_success() => guard.forget(&session),
        (None, Some(opened)) => guard.bind(opened, scope),
        _ => {}
    }
    response
}

fn header_text(headers: &axum::http::HeaderMap) -> Option<String> {
    let value = headers.get(SESSION_HEADER)?;
    value.to_str().ok().map(str::to_owned)
}

impl Guard {
    fn sessions(&self) -> std::sync::MutexGuard<'_, Sessions> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The refusal of a request of `session` made with a token of `scope`: 404 for a session
    /// this server did not open (or forgot; MCP clients then start a new one), 403 for one
    /// opened with a token of another scope.
    fn check(&self, session: &str, scope: &McpScope) -> Option<ApiError> {
        let mut sessions = self.sessions();
        sessions.tick += 1;
        let tick = sessions.tick;
        let Some((used, opened)) = sessions.open.get_mut(session) else {
            let why = "no such MCP session here (it ended, or the server restarted): start a new one with initialize";
            return Some(ApiError::new(ErrorCode::NotFound, why));
        };
        *used = tick;
        (opened != scope).then(|| {
            ApiError::new(
                ErrorCode::Forbidden,
                format!(
                    "this MCP session serves agent {} in conversation {}, not agent {} in {}: open a new session with this token",
                    opened.agent, opened.conversation, scope.agent, scope.conversation
                ),
            )
        })
    }

    /// Binds a session just opened (its initialize answered) to its token's scope.
    fn bind(&self, session: String, scope: McpScope) {
        let mut sessions = self.sessions();
        if sessions.open.len() >= SESSIONS {
            let oldest = sessions.open.iter().min_by_key(|(_, (used, _))| *used);
            if let Some(key) = oldest.map(|(key, _)| key.clone()) {
                sessions.open.remove(&key);
            }
        }
        sessions.tick += 1;
        let tick = sessions.tick;
        sessions.open.insert(session, (tick, scope));
    }

    fn forget(&self, session: &str) {
        self.sessions().open.remove(session);
    }
}
