//! `POST /sessions/{id}/heartbeats`: a host or operator asks one agent to answer a text with no
//! history (`Runtime::heartbeat`, recorded as one `HeartbeatRan` event, never a message). The
//! answer is the agent's reply (a failed call is an `error` in it, not an HTTP error).

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::{Extension, Json};
use legio_runtime::{AgentReply, RuntimeError};
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::oneshot;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;
use crate::wire::{conversation_key, reply_json};
use legio_runtime::ErrorCode;

/// The body of a heartbeat.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HeartbeatBody {
    /// The agent that answers.
    agent: String,
    /// What it answers (not blank).
    text: String,
}

pub(crate) async fn post_heartbeat(
    State(state): State<Arc<AppState>>,
    path: Result<Path<String>, PathRejection>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<HeartbeatBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Path(id) = path?;
    let key = conversation_key(&id)?;
    caller.check_conversation(key.as_str())?;
    let Json(body) = body?;
    // On its own task, like a turn: a client that leaves does not cut the record short.
    let (done_tx, done) = oneshot::channel::<Result<AgentReply, RuntimeError>>();
    let runtime = Arc::clone(&state.runtime);
    state.spawn_turn(async move {
        let result = runtime
            .heartbeat(&key, body.agent.as_str(), &body.text)
            .await;
        let _ = done_tx.send(result);
    });
    let reply = done.await.map_err(|_| {
        ApiError::new(
            ErrorCode::ShuttingDown,
            "the server is shutting down; the heartbeat was cancelled",
        )
    })??;
    Ok(Json(reply_json(&reply)))
}
