//! The OpenAI-compatible front door: `POST /v1/chat/completions`, `POST /v1/responses`,
//! `GET /v1/models`, so a host with an official OpenAI SDK talks to legio's agents. `model` names
//! the agent (`legio/<agent>`; plain `legio` is the orchestrator); `metadata.conversation` names
//! the conversation (a response id names it too). Only the new message is stored: earlier
//! messages a request carries are checked against the log (transcript.rs), never stored again.
//! Tools in a request are tools the host runs (runs.rs): a call pauses the turn and comes back as
//! `tool_calls` (`function_call` items on the Responses API); the next request carrying the
//! results continues it. Errors have OpenAI's shape (error.rs). The semantics are in
//! docs/http-api.md.

mod chat;
mod models;
mod response_stream;
mod responses;
mod transcript;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::routing::{get, post};
use axum::Router;
use legio_core::{AgentName, ConversationKey, Event, Seq, TokenUsage};
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::state::AppState;
use legio_runtime::ErrorCode;

/// The door's routes, behind the API token.
pub(crate) fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/chat/completions", post(chat::completions))
        .route("/v1/responses", post(responses::create))
        .route("/v1/models", get(models::list))
        .route("/v1/models/{*id}", get(models::one))
}

/// The model name of the orchestrator; `legio/<agent>` names any agent.
pub(crate) const MODEL: &str = "legio";

/// The agent a `model` names.
pub(crate) fn agent_for_model(state: &AppState, model: &str) -> Result<AgentName, ApiError> {
    let config = state.runtime.config();
    if model == MODEL {
        return Ok(config.orchestrator().name.clone());
    }
    let unknown = || {
        let known: Vec<String> = std::iter::once(MODEL.to_owned())
            .chain(config.agents.iter().map(|a| format!("{MODEL}/{}", a.name)))
            .collect();
        ApiError::new(
            ErrorCode::UnknownModel,
            format!(
                "model {model:?} names no agent; models: {}",
                known.join(", ")
            ),
        )
        .with_param("model")
    };
    let name = model.strip_prefix("legio/").ok_or_else(unknown)?;
    config
        .agent_named(name)
        .map(|spec| spec.name.clone())
        .map_err(|_| unknown())
}

/// The conversation `metadata.conversation` names.
pub(crate) fn conversation_of(
    metadata: Option<&Map<String, Value>>,
) -> Result<Option<ConversationKey>, ApiError> {
    let Some(value) = metadata.and_then(|m| m.get("conversation")) else {
        return Ok(None);
    };
    let text = value.as_str().ok_or_else(|| {
        ApiError::new(
            ErrorCode::BadRequest,
            "metadata.conversation must be a string",
        )
        .with_param("metadata.conversation")
    })?;
    crate::wire::conversation_key(text)
        .map(Some)
        .map_err(|e| e.with_param("metadata.conversation"))
}

/// The error of a request that names no conversation.
pub(crate) fn missing_conversation() -> ApiError {
    ApiError::new(
        ErrorCode::MissingField,
        "metadata.conversation is required: it names the legio conversation (session) this request belongs to, e.g. {\"metadata\": {\"conversation\": \"support:42\"}}",
    )
    .with_param("metadata.conversation")
}

/// A fresh id with `prefix` (`chatcmpl-...`): the time in nanoseconds and a process counter.
pub(crate) fn fresh_id(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{nanos:x}{n:x}")
}

/// Seconds since the Unix epoch (`created`).
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The usage the turn recorded with its reply (`TurnCompleted`, right after the reply at
/// `reply_seq`), or, for a turn paused on tool calls (`None`), the agent's latest
/// `TurnCompleted` among the log's last events. Zero when not found.
pub(crate) async fn usage(
    state: &AppState,
    key: &ConversationKey,
    agent: &AgentName,
    reply_seq: Option<Seq>,
) -> TokenUsage {
    let log = Arc::clone(state.runtime.log());
    let (key, agent) = (key.clone(), agent.clone());
    let read = tokio::task::spawn_blocking(move || {
        let last = log.last_seq();
        let (from, to) = match reply_seq {
            Some(seq) => (Seq(seq.0 + 1), Seq(seq.0 + 1)),
            None => (Seq(last.0.saturating_sub(255).max(1)), last),
        };
        let records = log.read_range(from, to, 256).unwrap_or_default();
        records.into_iter().rev().find_map(|r| match r.event {
            Event::TurnCompleted(t) if t.conversation == key && t.agent == agent => Some(t.usage),
            _ => None,
        })
    });
    read.await.ok().flatten().unwrap_or_default()
}

/// Usage in the Chat Completions shape.
pub(crate) fn chat_usage(usage: &TokenUsage) -> Value {
    let prompt = usage.context_tokens();
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": usage.output,
        "total_tokens": prompt + usage.output,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read},
    })
}

/// A message's text: a string, or an array of text parts (`text`, `input_text`, `output_text`).
/// `None` for anything else (images, audio): the door takes text.
pub(crate) fn text_of(content: &Value) -> Option<String> {
    match content {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => parts
            .iter()
            .map(|p| match p.get("type").and_then(Value::as_str) {
                Some("text" | "input_text" | "output_text") => {
                    p.get("text").and_then(Value::as_str).map(str::to_owned)
                }
                _ => None,
            })
            .collect::<Option<Vec<String>>>()
            .map(|texts| texts.join("")),
        _ => None,
    }
}

/// The host's instructions for the turn a request posts (Responses' `instructions`, the `system`
/// and `developer` messages of either API), joined by blank lines: recorded in the log before
/// the message and sent with that turn only (legio-runtime's `Posting::instructions`), on top
/// of the agent's configured prompt. `None` when there are none.
pub(crate) fn instructions(texts: impl Iterator<Item = String>) -> Option<String> {
    let texts: Vec<String> = texts.filter(|t| !t.trim().is_empty()).collect();
    (!texts.is_empty()).then(|| texts.join("\n\n"))
}

/// The door's error for an agent's failed turn. Its message is in the log by then, and the
/// official SDKs retry a 5xx (twice by default), each retry storing the message again: a turn
/// that cannot fit the agent's window, which a retry cannot mend, is 413 `context_too_large`
/// (not retried); a keyed retry of a message the agent went on from without answering is 409
/// `message_unanswered` (a retry cannot mend it either); any other failure is 502 `agent_failed`.
/// The error's `error_kind` says why the turn failed, as a native reply's does.
pub(crate) fn turn_error(error: &legio_runtime::TurnError) -> ApiError {
    let code = match error.kind {
        legio_runtime::TurnErrorKind::ContextTooLarge => ErrorCode::ContextTooLarge,
        legio_runtime::TurnErrorKind::Unanswered => ErrorCode::MessageUnanswered,
        _ => ErrorCode::AgentFailed,
    };
    let mut api = ApiError::new(code, error.message.clone());
    api.turn_error_kind = Some(error.kind);
    api
}
