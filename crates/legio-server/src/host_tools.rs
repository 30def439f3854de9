//! Tools the host runs, on the native API: `POST /sessions/{id}/tools` declares them for the
//! conversation (`GET` lists them), a turn may carry its own (`tools` in the turn's body), and
//! `POST /sessions/{id}/tool_results` answers a turn that paused on them. A paused turn answers
//! `{"status": "requires_action", "required_action": {"type": "submit_tool_outputs",
//! "tool_calls": [...]}}` (JSON) or ends its stream with a `requires_action` event of that body;
//! the results request then answers like a turn (JSON or a stream), until the next pause or the
//! replies.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures_util::stream::{self, StreamExt};
use legio_core::{ConversationKey, IdempotencyKey};
use legio_runtime::{HostToolResult, HostTurn, ToolSpec};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::runs::{Next, Run};
use crate::state::AppState;
use crate::wire::{
    conversation_key, progress_event, replies_json, requires_action_json, sse, wants_stream,
};
use legio_runtime::ErrorCode;

/// A tool the host runs, as the host declares it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolBody {
    name: String,
    #[serde(default)]
    description: String,
    /// The JSON schema of the arguments (an object schema); default: no arguments.
    #[serde(default)]
    parameters: Option<Value>,
}

impl ToolBody {
    pub(crate) fn into_spec(self) -> ToolSpec {
        ToolSpec {
            name: self.name,
            description: self.description,
            parameters: self
                .parameters
                .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolsBody {
    tools: Vec<ToolBody>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResultBody {
    tool_call_id: String,
    content: String,
    #[serde(default)]
    is_error: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResultsBody {
    tool_results: Vec<ResultBody>,
}

fn tools_json(tools: &[ToolSpec]) -> Value {
    let tools: Vec<Value> = tools
        .iter()
        .map(|t| json!({"name": t.name, "description": t.description, "parameters": t.parameters}))
        .collect();
    json!({ "tools": tools })
}

pub(crate) async fn declare(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<ToolsBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let key = conversation_key(&id)?;
    caller.check_conversation(key.as_str())?;
    let Json(body) = body?;
    let tools: Vec<ToolSpec> = body.tools.into_iter().map(ToolBody::into_spec).collect();
    state.runtime.declare_tools(&key, tools.clone()).await?;
    Ok(Json(tools_json(&tools)))
}

pub(crate) async fn declared(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>, ApiError> {
    let key = conversation_key(&id)?;
    caller.check_conversation(key.as_str())?;
    Ok(Json(tools_json(&state.runtime.declared_tools(&key).await?)))
}

pub(crate) async fn results(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Json<ResultsBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let key = conversation_key(&id)?;
    caller.check_conversation(key.as_str())?;
    let Json(body) = body?;
    let results = body
        .tool_results
        .into_iter()
        .map(|r| HostToolResult {
            call_id: r.tool_call_id,
            content: r.content,
            is_error: r.is_error,
        })
        .collect();
    let run = state.resume(&key, results).await?;
    follow(&state, key, run, wants_stream(&headers), Answers::Results).await
}

/// Starts a native turn with host tools and follows it.
pub(crate) async fn start(
    state: &Arc<AppState>,
    key: ConversationKey,
    sender: &str,
    content: String,
    (tools, idempotency_key): (Vec<ToolBody>, Option<IdempotencyKey>),
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let sender = legio_core::Participant::parse(sender)
        .map_err(|e| ApiError::new(ErrorCode::BadName, e.to_string()))?;
    let turn = HostTurn {
        sender,
        to: None,
        text: content,
        tools: tools.into_iter().map(ToolBody::into_spec).collect(),
        idempotency_key,
    };
    let run = state.start_run(key.clone(), turn, None);
    follow(state, key, run, wants_stream(headers), Answers::Turn).await
}

/// What a followed run's answer answers: a turn's request (its `replayed` says whether that
/// request was a retry that stored nothing), or the host's tool results (they were stored: never
/// `replayed`, even when the turn they resume was a keyed retry's).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answers {
    Turn,
    Results,
}

/// Follows a run to its next pause or its end: as JSON, or as a stream of the turn's events
/// (a refused turn is an error status, never a stream).
pub(crate) async fn follow(
    state: &Arc<AppState>,
    key: ConversationKey,
    mut run: Run,
    stream: bool,
    answers: Answers,
) -> Result<Response, ApiError> {
    let first = loop {
        match run.next().await {
            Next::Progress(_) if !stream => continue,
            Next::Finished(result) => {
                let mut posted = result?;
                posted.replayed &= answers == Answers::Turn;
                if !stream {
                    return Ok(Json(replies_json(&posted)).into_response());
                }
                break Next::Finished(Ok(posted));
            }
            Next::ToolCalls(calls) if !stream => {
                state.park(&key, &calls, run);
                return Ok(Json(requires_action_json(&calls)).into_response());
            }
            next => break next,
        }
    };
    let state = Arc::clone(state);
    let events = stream::unfold(
        (Some(first), Some(run), state, key),
        move |(first, run, state, key)| async move {
            let mut run = run?;
            let next = match first {
                Some(next) => next,
                None => run.next().await,
            };
            let (event, run) = match next {
                Next::Progress(update) => (progress_event(update), Some(run)),
                Next::ToolCalls(calls) => {
                    let event = SseEvent::default()
                        .event("requires_action")
                        .data(requires_action_json(&calls).to_string());
                    state.park(&key, &calls, run);
                    (event, None)
                }
                Next::Finished(Ok(mut posted)) => {
                    posted.replayed &= answers == Answers::Turn;
                    let replies = replies_json(&posted).to_string();
                    (SseEvent::default().event("replies").data(replies), None)
                }
                Next::Finished(Err(e)) => (
                    SseEvent::default()
                        .event("error")
                        .data(e.body().to_string()),
                    None,
                ),
            };
            Some((event, (None, run, state, key)))
        },
    );
    Ok(sse(events.map(Ok)))
}
