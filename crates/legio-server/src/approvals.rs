//! `POST /sessions/{id}/approvals/{call_id}`: an operator approves or denies a tool call that
//! paused its turn (`Runtime::answer_approval`), with `{"decision": "approve" | "deny",
//! "reason": ...}`. The answer is recorded as the token's (`http:NAME`); a second answer to the
//! same call is 409 `approval_answered` naming the first, an unknown call 404
//! `unknown_approval`. When it is the last answer its step waited for, the turn goes on and the
//! response carries its reply (`continued`).

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::{Extension, Json};
use legio_core::ApprovalDecision;
use legio_runtime::{ApprovalAnswer, ErrorCode, RuntimeError};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;
use crate::wire::{conversation_key, reply_json};

/// The body of an answer.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AnswerBody {
    /// `approve` or `deny`.
    decision: Decision,
    /// Why (recorded with the answer; a denial's reason reaches the model).
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Decision {
    Approve,
    Deny,
}

pub(crate) async fn answer(
    State(state): State<Arc<AppState>>,
    path: Result<Path<(String, String)>, PathRejection>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<AnswerBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Path((id, call_id)) = path?;
    let key = conversation_key(&id)?;
    caller.check_conversation(key.as_str())?;
    let Json(body) = body?;
    let decision = match body.decision {
        Decision::Approve => ApprovalDecision::Approved,
        Decision::Deny => ApprovalDecision::Denied,
    };
    let by = format!("http:{}", caller.name());
    // On its own task, like a turn: a client that leaves does not cut the continued turn short.
    let (done_tx, done) = oneshot::channel::<Result<ApprovalAnswer, RuntimeError>>();
    let runtime = Arc::clone(&state.runtime);
    state.spawn_turn(async move {
        let result = runtime
            .answer_approval(&key, &call_id, decision, &by, body.reason)
            .await;
        let _ = done_tx.send(result);
    });
    let answer = done.await.map_err(|_| {
        ApiError::new(
            ErrorCode::ShuttingDown,
            "the server is shutting down; the answer may or may not be recorded (legio inspect approvals says)",
        )
    })??;
    Ok(Json(answer_json(&answer)))
}

/// The answer as JSON: the call, the decision recorded, the step's calls still waiting, and the
/// continued turn's reply (null while calls still wait).
pub(crate) fn answer_json(answer: &ApprovalAnswer) -> Value {
    json!({
        "call_id": answer.call_id,
        "agent": answer.agent.as_str(),
        "tool": answer.tool,
        "decision": answer.decision.as_str(),
        "still_waiting": answer.still_waiting,
        "continued": answer.continued.as_ref().map(reply_json),
    })
}
