//! `POST /sessions/{id}/turns`: the client sends only the new turn; the server owns the history.
//! The reply is JSON, or with `Accept: text/event-stream` a stream of progress (`agent_started`,
//! `delta`, `thinking`, `tool_call`, `tool_done`, `tool_failed`, `compaction_failed`,
//! `agent_done`) ending with the `replies`. Everything is validated before anything is
//! stored: a refused turn stores nothing.

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use axum::Json;
use std::collections::VecDeque;

use futures_util::stream::{self, StreamExt};
use legio_core::{ConversationKey, IdempotencyKey};
use legio_runtime::{Posted, Progress, ProgressSink, RuntimeError};

use crate::limits::TurnSlot;
use serde::Deserialize;
use tokio::sync::{mpsc, oneshot};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::server_tokens::Scope;
use crate::state::AppState;
use crate::wire::{
    conversation_key, error_event, idempotency_key, progress_event, replies_event, replies_json,
    sse, wants_stream,
};
use legio_runtime::ErrorCode;

/// The body of a turn.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TurnBody {
    /// The message; `@name` mentions address agents.
    content: String,
    /// `user` (the default) or an agent of the roster relaying what it says.
    #[serde(default)]
    sender: Option<String>,
    /// Tools the host runs for this turn (host_tools.rs); with these, or with tools declared
    /// for the conversation, the turn may pause with `requires_action`.
    #[serde(default)]
    tools: Option<Vec<crate::host_tools::ToolBody>>,
}

pub(crate) async fn post_turn(
    State(state): State<Arc<AppState>>,
    path: Result<Path<String>, PathRejection>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Json<TurnBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Path(id) = path?;
    let key = conversation_key(&id)?;
    caller.check_conversation(key.as_str())?;
    let Json(body) = body?;
    let idempotency = idempotency_key(&headers)?;
    // Held by the turn's task: released when the turn ends, not when the client leaves.
    let slot = match state.turn_slots.acquire(caller.name()) {
        Ok(slot) => slot,
        Err(too_many) => return Ok(too_many.into_response()),
    };
    let sender = body.sender.unwrap_or_else(|| "user".to_owned());
    check_sender(&state, &caller, &sender)?;
    if body.tools.is_some() || !state.runtime.declared_tools(&key).await?.is_empty() {
        let tools = body.tools.unwrap_or_default();
        let asked = (tools, idempotency);
        return crate::host_tools::start(&state, key, &sender, body.content, asked, &headers).await;
    }
    let post = Post {
        key,
        sender,
        content: body.content,
        idempotency,
    };
    if !wants_stream(&headers) {
        let replies = post
            .on_task(&state, None, slot)
            .await
            .map_err(|_| cancelled())??;
        return Ok(Json(replies_json(&replies)).into_response());
    }
    let (progress, mut updates) = mpsc::unbounded_channel::<Progress>();
    let mut done = post.on_task(&state, Some(progress), slot);
    // A refused turn (bad mention, empty message, unknown sender) is an error status, not a
    // stream: wait for the first progress or the end.
    let first = tokio::select! {
        biased;
        // `None` (the sender is gone) disables this branch: the end then says how it went.
        Some(update) = updates.recv() => Some(update),
        result = &mut done => {
            let replies = result.map_err(|_| cancelled())??;
            let events: Vec<SseEvent> = drain(&mut updates)
                .into_iter()
                .map(progress_event)
                .chain(std::iter::once(replies_event(&replies)))
                .collect();
            return Ok(sse(stream::iter(events).map(Ok)));
        }
    };
    let first = first.map(progress_event);
    let stream = stream::unfold(
        Step::Running {
            first,
            updates,
            done,
        },
        next_event,
    );
    Ok(sse(stream.map(Ok)))
}

type Done = oneshot::Receiver<Result<Posted, RuntimeError>>;

/// A native turn without host tools, checked.
struct Post {
    key: ConversationKey,
    sender: String,
    content: String,
    idempotency: Option<IdempotencyKey>,
}

impl Post {
    /// Posts on its own task, which holds `slot` until the turn ends: a client that goes away
    /// mid-turn does not cancel it (a stored message is answered all the same). Its progress
    /// goes to `progress` when streamed.
    fn on_task(
        self,
        state: &Arc<AppState>,
        progress: Option<ProgressSink>,
        slot: TurnSlot,
    ) -> Done {
        let (done_tx, done) = oneshot::channel();
        let runtime = Arc::clone(&state.runtime);
        state.spawn_turn(async move {
            let Self {
                key,
                sender,
                content,
                idempotency,
            } = self;
            let posting = runtime.posting(&key, &content).sender(&sender);
            let result = posting.key(idempotency).progress(progress).send().await;
            let _ = done_tx.send(result);
            drop(slot);
        });
        done
    }
}

/// Where a streamed turn is.
enum Step {
    /// The turn runs: progress comes, then the result.
    Running {
        first: Option<SseEvent>,
        updates: mpsc::UnboundedReceiver<Progress>,
        done: Done,
    },
    /// The turn finished: the last events, then the end.
    Tail(VecDeque<SseEvent>),
}

async fn next_event(step: Step) -> Option<(SseEvent, Step)> {
    match step {
        Step::Tail(mut events) => events.pop_front().map(|e| (e, Step::Tail(events))),
        Step::Running {
            first: Some(event),
            updates,
            done,
        } => Some((
            event,
            Step::Running {
                first: None,
                updates,
                done,
            },
        )),
        Step::Running {
            first: None,
            mut updates,
            mut done,
        } => {
            tokio::select! {
                biased;
                Some(update) = updates.recv() => Some((
                    progress_event(update),
                    Step::Running { first: None, updates, done },
                )),
                result = &mut done => {
                    let mut events: VecDeque<SseEvent> =
                        drain(&mut updates).into_iter().map(progress_event).collect();
                    events.push_back(match result {
                        Ok(Ok(replies)) => replies_event(&replies),
                        Ok(Err(e)) => error_event(ApiError::from(e)),
                        Err(_) => error_event(cancelled()),
                    });
                    let first = events.pop_front()?;
                    Some((first, Step::Tail(events)))
                }
            }
        }
    }
}

fn cancelled() -> ApiError {
    ApiError::new(
        ErrorCode::ShuttingDown,
        "the turn was cancelled by a shutdown",
    )
}

fn drain(updates: &mut mpsc::UnboundedReceiver<Progress>) -> Vec<Progress> {
    let mut out = Vec::new();
    while let Ok(update) = updates.try_recv() {
        out.push(update);
    }
    out
}

/// A `sender` other than the user must be an agent of the roster (refused naming the field:
/// the runtime's refusal says only "unknown agent"), and the caller's token needs the
/// `post_as_agent` scope to speak as it (403 naming the scope).
fn check_sender(state: &AppState, caller: &Caller, sender: &str) -> Result<(), ApiError> {
    if sender == "user" {
        return Ok(());
    }
    state.runtime.config().agent_named(sender).map_err(|e| {
        let known = RuntimeError::from(e);
        ApiError::from(known)
            .with_message_prefix("sender: ")
            .with_param("sender")
    })?;
    if caller.0.allows(Scope::PostAsAgent) {
        return Ok(());
    }
    Err(ApiError::new(
        ErrorCode::Forbidden,
        format!(
            "token `{}` lacks the `post_as_agent` scope that a turn with `sender` = {sender:?} (speaking as that agent) needs; post as the user (no `sender`), or give the token the scope in [[server.tokens]] (docs/http-api.md, Tokens and scopes)",
            caller.name()
        ),
    )
    .with_param("sender"))
}
