//! The shapes the native turn endpoints answer in, shared by turns.rs and host_tools.rs (a leaf):
//! a session id checked as a conversation key, replies as JSON, `Accept` read for streaming, and
//! the server-sent events of a turn's progress (`requires_action` among them).

use std::convert::Infallible;

use axum::http::{header, HeaderMap};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::Stream;
use legio_core::{ConversationKey, IdempotencyKey};
use legio_runtime::{AgentReply, HostToolCall, Posted, Progress};
use serde_json::{json, Value};

use crate::error::ApiError;
use legio_runtime::ErrorCode;

/// Validates a session id as a conversation key.
pub(crate) fn conversation_key(id: &str) -> Result<ConversationKey, ApiError> {
    if let Some(why) = unaddressable(id) {
        return Err(ApiError::new(ErrorCode::ReservedConversation, why));
    }
    ConversationKey::new(id)
        .map_err(|e| ApiError::new(ErrorCode::ReservedConversation, e.to_string()))
}

/// Why a key that legio-core takes (and a stored log may hold) is refused at the API: `.` and
/// `..` cannot be a URL path segment (clients and proxies resolve them away), and a key
/// starting with `-` reads as an option on the command line (`legio replay --conversation -x`).
pub(crate) fn unaddressable(id: &str) -> Option<String> {
    (id == "." || id == ".." || id.starts_with('-')).then(|| {
        format!(
            "conversation key {id:?} cannot be addressed: a key may not be `.` or `..` (a URL path drops them) nor start with `-` (the CLI reads it as an option)"
        )
    })
}

/// One reply as JSON.
pub(crate) fn reply_json(reply: &AgentReply) -> Value {
    json!({
        "agent": reply.agent.as_str(),
        "content": reply.text(),
        "message_id": reply.message_id().map(|id| id.to_string()),
        "seq": reply.seq().map(|s| s.get()),
        "error": reply.error(),
        "error_kind": reply.error_kind().map(|k| k.as_str()),
    })
}

/// A post's replies, with the `@handles` that named no agent.
pub(crate) fn replies_json(posted: &Posted) -> Value {
    json!({
        "replies": posted.replies.iter().map(reply_json).collect::<Vec<_>>(),
        "unknown_mentions": posted.unknown_mentions,
        "replayed": posted.replayed,
    })
}

/// The request's `Idempotency-Key` header, if it has one: a retry with the same key stores
/// nothing new (`Runtime::post_once`).
pub(crate) fn idempotency_key(headers: &HeaderMap) -> Result<Option<IdempotencyKey>, ApiError> {
    let mut values = headers.get_all("idempotency-key").iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let bad = |why: String| {
        ApiError::new(ErrorCode::InvalidIdempotencyKey, why).with_param("Idempotency-Key")
    };
    // Two different keys (one a proxy added, say) name no one message.
    if values.any(|other| other != value) {
        let why = "the request carries two different Idempotency-Key headers; send one";
        return Err(bad(why.to_owned()));
    }
    let text = value
        .to_str()
        .map_err(|_| bad("the Idempotency-Key header is not visible ASCII".to_owned()))?;
    IdempotencyKey::new(text)
        .map(Some)
        .map_err(|e| bad(e.to_string()))
}

pub(crate) fn wants_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"))
}

pub(crate) fn sse<S>(events: S) -> Response
where
    S: Stream<Item = Result<SseEvent, Infallible>> + Send + 'static,
{
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn event(name: &str, data: &Value) -> SseEvent {
    SseEvent::default().event(name).data(data.to_string())
}

pub(crate) fn progress_event(update: Progress) -> SseEvent {
    match update {
        Progress::AgentStarted { agent } => {
            event("agent_started", &json!({"agent": agent.as_str()}))
        }
        Progress::Delta { agent, text } => {
            event("delta", &json!({"agent": agent.as_str(), "text": text}))
        }
        Progress::CompactionFailed { agent, reason } => event(
            "compaction_failed",
            &json!({"agent": agent.as_str(), "reason": reason}),
        ),
        Progress::AgentDone { reply } => event("agent_done", &reply_json(&reply)),
        Progress::ToolCallsRequired { calls, .. } => {
            event("requires_action", &requires_action_json(&calls))
        }
        Progress::Thinking { agent, text } => {
            event("thinking", &json!({"agent": agent.as_str(), "text": text}))
        }
        Progress::ToolCalled {
            agent,
            id,
            name,
            arguments,
        } => event(
            "tool_call",
            &json!({"agent": agent.as_str(), "id": id, "name": name, "arguments": arguments}),
        ),
        Progress::ToolDone { agent, id, name } => event(
            "tool_done",
            &json!({"agent": agent.as_str(), "id": id, "name": name}),
        ),
        Progress::ToolFailed {
            agent,
            id,
            name,
            error,
        } => event(
            "tool_failed",
            &json!({"agent": agent.as_str(), "id": id, "name": name, "error": error}),
        ),
    }
}

pub(crate) fn replies_event(posted: &Posted) -> SseEvent {
    event("replies", &replies_json(posted))
}

pub(crate) fn error_event(error: ApiError) -> SseEvent {
    event("error", &error.body())
}
/// The body that tells the host to run tools.
pub(crate) fn requires_action_json(calls: &[HostToolCall]) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .map(|c| {
            json!({
                "id": c.id,
                "agent": c.agent.as_str(),
                "name": c.name,
                "arguments": c.arguments,
            })
        })
        .collect();
    json!({
        "status": "requires_action",
        "required_action": {"type": "submit_tool_outputs", "tool_calls": calls},
    })
}
