//! `GET /v1/models` (and `GET /v1/models/{id}`): the agents as models, `legio` (the
//! orchestrator) first, then `legio/<agent>` for every agent of the roster.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Value};

use super::{agent_for_model, MODEL};
use crate::error::ApiError;
use crate::state::AppState;

fn model_json(id: &str) -> Value {
    json!({"id": id, "object": "model", "created": 0, "owned_by": "legio"})
}

pub(crate) async fn list(State(state): State<Arc<AppState>>) -> Json<Value> {
    let agents = &state.runtime.config().agents;
    let data: Vec<Value> = std::iter::once(model_json(MODEL))
        .chain(
            agents
                .iter()
                .map(|a| model_json(&format!("{MODEL}/{}", a.name))),
        )
        .collect();
    Json(json!({"object": "list", "data": data}))
}

pub(crate) async fn one(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    agent_for_model(&state, &id)?;
    Ok(Json(model_json(&id)))
}
