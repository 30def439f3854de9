//! `GET /meta`: who this server is, its roster, and which history views it serves.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use legio_core::History;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::state::AppState;

/// The history views the server serves (seed 002's `capabilities.history`).
pub(crate) const HISTORY_VIEWS: [&str; 2] = ["compacted", "full"];

/// A provider's history capability as a word (the configuration's words).
pub(crate) fn history_word(history: History) -> &'static str {
    history.as_str()
}

pub(crate) async fn meta(State(state): State<Arc<AppState>>) -> Result<Json<Value>, ApiError> {
    let runtime = &state.runtime;
    let mut agents = Vec::new();
    for spec in &runtime.config().agents {
        let history = runtime.provider_history(&spec.name)?;
        agents.push(json!({
            "name": spec.name.as_str(),
            "role": spec.role.as_str(),
            "description": spec.description,
            "provider": spec.provider,
            "history": history_word(history),
        }));
    }
    let mut meta = json!({
        "name": "legio",
        "version": env!("CARGO_PKG_VERSION"),
        "agents": agents,
        "capabilities": {
            "history": HISTORY_VIEWS,
            "streaming": true,
        },
    });
    if let Some(node) = runtime.node() {
        let held = runtime.owned_conversations();
        let conversations: Vec<&str> = held.iter().map(|(key, _, _)| key.as_str()).collect();
        meta["cluster"] = json!({ "node": node, "conversations": conversations });
    }
    Ok(Json(meta))
}
