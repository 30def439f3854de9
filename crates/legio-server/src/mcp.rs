//! `/mcp`: legio's MCP server over streamable HTTP (rmcp's tower service). A request needs
//! `Authorization: Bearer TOKEN` with a token from `legio mcp token` (not the `[server]` token):
//! the guard verifies it with the MCP key (beside the database, or on a cluster the one the
//! nodes share: `McpTokenKey::for_store`) and puts its scope (one agent in one conversation) in
//! the request's extensions, where `legio_runtime::McpService` finds it. So every request is
//! authorized by its own credential, and the tools it reaches are that agent's.

use std::net::SocketAddr;
use std::sync::Arc;

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

type Key = Arc<McpKey>;

/// The `/mcp` routes with their guard.
pub(crate) fn routes(state: &Arc<AppState>) -> Router<Arc<AppState>> {
    let key: Key = Arc::clone(&state.mcp_key);
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
        .layer(middleware::from_fn_with_state(key, require_mcp_token))
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

/// Verifies the bearer token and attaches its scope to the request.
async fn require_mcp_token(State(key): State<Key>, mut request: Request, next: Next) -> Response {
    let key = match key.get().await {
        Ok(key) => key,
        Err(reason) => return ApiError::new("internal", reason).into_response(),
    };
    let Some(token) = crate::auth::bearer(&request) else {
        return ApiError::new(
            "unauthorized",
            "send `Authorization: Bearer TOKEN` with a token from `legio mcp token --conversation C --agent A`",
        )
        .into_response();
    };
    match key.verify(token) {
        Ok(scope) => {
            request.extensions_mut().insert(scope);
            next.run(request).await
        }
        Err(e) => ApiError::new("unauthorized", e.to_string()).into_response(),
    }
}
