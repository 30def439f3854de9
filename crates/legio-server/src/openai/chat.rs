//! `POST /v1/chat/completions`: the last message is the new one (a `user` message, posted to the
//! agent `model` names), or the results of the tool calls the previous answer asked for (`tool`
//! messages, which continue that turn). Answers a `chat.completion`, or with `stream: true`
//! `chat.completion.chunk`s ending with `data: [DONE]`.

use std::collections::VecDeque;
use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures_util::stream::{self, StreamExt};
use legio_core::{AgentName, ConversationKey, IdempotencyKey, Participant};
use legio_runtime::{HostToolCall, HostToolResult, HostTurn, Posted, Progress, Reply, ToolSpec};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::transcript::{self, Earlier};
use super::{
    agent_for_model, chat_usage, conversation_of, missing_conversation, text_of, unix_now, usage,
};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::limits::TurnSlot;
use crate::runs::{Next, Run};
use crate::state::AppState;
use crate::wire::{idempotency_key, sse};
use legio_runtime::ErrorCode;

#[derive(Debug, Deserialize)]
pub(crate) struct ChatRequest {
    model: String,
    messages: Vec<ChatMessage>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    tools: Option<Vec<ChatTool>>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
}

#[derive(Debug, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct ChatMessage {
    role: String,
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    tool_calls: Option<Vec<Value>>,
    #[serde(default)]
    tool_call_id: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ChatTool {
    #[serde(rename = "type")]
    kind: String,
    function: FunctionDef,
}

#[derive(Debug, Deserialize)]
pub(crate) struct FunctionDef {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) description: Option<String>,
    #[serde(default)]
    pub(crate) parameters: Option<Value>,
}

impl FunctionDef {
    pub(crate) fn into_spec(self) -> ToolSpec {
        ToolSpec {
            name: self.name,
            description: self.description.unwrap_or_default(),
            parameters: self
                .parameters
                .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
        }
    }
}

/// What a response carries around: its id, model, creation time, agent and conversation.
#[derive(Clone)]
struct Shape {
    id: String,
    model: String,
    created: u64,
    agent: AgentName,
    key: ConversationKey,
}

pub(crate) async fn completions(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Json<ChatRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(body) = body?;
    let idempotency = idempotency_key(&headers)?;
    let agent = agent_for_model(&state, &body.model)?;
    let key = conversation_of(body.metadata.as_ref())?.ok_or_else(missing_conversation)?;
    caller.check_conversation(key.as_str())?;
    let tools = chat_tools(body.tools.unwrap_or_default())?;
    // The token's cap on turns in flight holds at the door too; the place is held until the
    // answer is whole (or, streamed, until its stream ends).
    let slot = match state.turn_slots.acquire(caller.name()) {
        Ok(slot) => slot,
        Err(too_many) => return Ok(too_many.into_response()),
    };
    let asked = Asked {
        messages: body.messages,
        tools,
        idempotency,
    };
    let run = start(&state, &key, &agent, asked).await?;
    let shape = Shape {
        id: super::fresh_id("chatcmpl"),
        model: body.model,
        created: unix_now(),
        agent,
        key,
    };
    if body.stream.unwrap_or(false) {
        let include_usage = body
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false);
        return streamed(state, shape, run, include_usage, slot).await;
    }
    let answer = whole(&state, &shape, run).await;
    drop(slot);
    answer
}

fn chat_tools(tools: Vec<ChatTool>) -> Result<Vec<ToolSpec>, ApiError> {
    function_tools(tools.into_iter().map(|t| (t.kind, t.function)))
}

/// The request's tools as the host's tools: each must be of type `function` (both APIs' shape).
pub(crate) fn function_tools(
    tools: impl IntoIterator<Item = (String, FunctionDef)>,
) -> Result<Vec<ToolSpec>, ApiError> {
    tools
        .into_iter()
        .map(|(kind, function)| {
            if kind != "function" {
                return Err(ApiError::new(
                    ErrorCode::InvalidTool,
                    format!("tools of type {kind:?} are not supported; use \"function\""),
                )
                .with_param("tools"));
            }
            Ok(function.into_spec())
        })
        .collect()
}

/// What a request asks of [`start`]: its messages, its tools, and its `Idempotency-Key`.
struct Asked {
    messages: Vec<ChatMessage>,
    tools: Vec<ToolSpec>,
    idempotency: Option<IdempotencyKey>,
}

/// Starts the turn the request's last message asks for (a new message, or tool results), after
/// checking its earlier messages against the log.
async fn start(
    state: &Arc<AppState>,
    key: &ConversationKey,
    agent: &AgentName,
    asked: Asked,
) -> Result<Run, ApiError> {
    let Asked {
        messages,
        tools,
        idempotency,
    } = asked;
    let results_from = messages
        .iter()
        .rposition(|m| m.role != "tool")
        .map_or(0, |i| i + 1);
    let earlier: Vec<Earlier> = messages
        .iter()
        .enumerate()
        .take(if results_from < messages.len() {
            results_from
        } else {
            messages.len().saturating_sub(1)
        })
        .filter_map(|(index, m)| earlier_of(index, m))
        .collect();
    // A request that carries tool results posts no message, so its key names none: its earlier
    // messages (the keyed message among them) are checked against the whole log.
    let posts = results_from == messages.len();
    let keyed = idempotency.as_ref().filter(|_| posts);
    transcript::check(state, key, &earlier, keyed).await?;
    if !posts {
        let results = messages[results_from..]
            .iter()
            .map(|m| HostToolResult {
                call_id: m.tool_call_id.clone().unwrap_or_default(),
                content: m.content.as_ref().and_then(text_of).unwrap_or_default(),
                is_error: false,
            })
            .collect();
        return state.resume(key, results).await;
    }
    let last = messages.last().ok_or_else(|| {
        ApiError::new(
            ErrorCode::BadRequest,
            "messages is empty: send the new user message",
        )
        .with_param("messages")
    })?;
    let text = match (&*last.role, last.content.as_ref().and_then(text_of)) {
        ("user", Some(text)) => text,
        _ => {
            return Err(ApiError::new(
                ErrorCode::BadRequest,
                "the last message must be the new user message (text), or tool results",
            )
            .with_param("messages"))
        }
    };
    let turn = HostTurn {
        sender: Participant::User,
        to: Some(agent.clone()),
        text,
        tools,
        idempotency_key: idempotency,
    };
    let instructions = super::instructions(
        messages
            .iter()
            .filter(|m| matches!(m.role.as_str(), "system" | "developer"))
            .filter_map(|m| m.content.as_ref().and_then(text_of)),
    );
    Ok(state.start_run(key.clone(), turn, instructions))
}

/// An earlier message that is checked against the log (user and assistant text only).
fn earlier_of(index: usize, m: &ChatMessage) -> Option<Earlier> {
    let role = match m.role.as_str() {
        "user" => "user",
        "assistant" if m.tool_calls.as_ref().is_none_or(Vec::is_empty) => "assistant",
        _ => return None,
    };
    let text = m.content.as_ref().and_then(text_of)?;
    Some(Earlier { index, role, text })
}

fn tool_calls_json(calls: &[HostToolCall]) -> Vec<Value> {
    calls
        .iter()
        .enumerate()
        .map(|(index, c)| {
            json!({
                "index": index,
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            })
        })
        .collect()
}

/// The agent's reply from a finished post, or its error.
fn reply_of(posted: &Posted, agent: &AgentName) -> Result<Reply, ApiError> {
    let reply = posted
        .replies
        .iter()
        .find(|r| r.agent == *agent)
        .ok_or_else(|| ApiError::new(ErrorCode::Internal, format!("{agent} gave no reply")))?;
    match &reply.outcome {
        Ok(r) => Ok(r.clone()),
        Err(e) => Err(super::turn_error(e)),
    }
}

/// The whole answer. One that ends in a reply is named after the reply (`chatcmpl-` and the reply
/// message's id), so a retry answered with the stored reply has the first answer's id; one that
/// asks for tool calls keeps the fresh id of `shape`.
async fn whole(state: &Arc<AppState>, shape: &Shape, mut run: Run) -> Result<Response, ApiError> {
    let (message, finish, reply) = loop {
        match run.next().await {
            Next::Progress(_) => continue,
            Next::ToolCalls(calls) => {
                let message = json!({
                    "role": "assistant",
                    "content": null,
                    "tool_calls": tool_calls_json(&calls)
                        .into_iter()
                        .map(|mut c| { c.as_object_mut().map(|o| o.remove("index")); c })
                        .collect::<Vec<_>>(),
                });
                state.park(&shape.key, &calls, run);
                break (message, "tool_calls", None);
            }
            Next::Finished(result) => {
                let reply = reply_of(&result?, &shape.agent)?;
                break (
                    json!({"role": "assistant", "content": reply.text}),
                    "stop",
                    Some(reply),
                );
            }
        }
    };
    let reply_seq = reply.as_ref().map(|r| r.seq);
    let usage = usage(state, &shape.key, &shape.agent, reply_seq).await;
    let id = match reply.and_then(|r| r.message_id) {
        Some(message) => format!("chatcmpl-{message}"),
        None => shape.id.clone(),
    };
    Ok(Json(json!({
        "id": id,
        "object": "chat.completion",
        "created": shape.created,
        "model": shape.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": null}],
        "usage": chat_usage(&usage),
    }))
    .into_response())
}

/// Where a streamed completion is.
struct Streaming {
    state: Arc<AppState>,
    shape: Shape,
    run: Option<Run>,
    first: Option<Next>,
    queued: VecDeque<String>,
    streamed: bool,
    include_usage: bool,
    /// The token's place among its turns in flight, released when the stream is dropped.
    _slot: TurnSlot,
}

impl Streaming {
    fn chunk(&self, delta: Value, finish: Option<&str>) -> String {
        json!({
            "id": self.shape.id,
            "object": "chat.completion.chunk",
            "created": self.shape.created,
            "model": self.shape.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": null}],
        })
        .to_string()
    }

    /// The last chunks: the finish reason, the usage when asked for, `[DONE]`.
    async fn finish(&mut self, reason: &str, reply_seq: Option<legio_core::Seq>) {
        let last = self.chunk(json!({}), Some(reason));
        self.queued.push_back(last);
        if self.include_usage {
            let usage = usage(&self.state, &self.shape.key, &self.shape.agent, reply_seq).await;
            let chunk = json!({
                "id": self.shape.id,
                "object": "chat.completion.chunk",
                "created": self.shape.created,
                "model": self.shape.model,
                "choices": [],
                "usage": chat_usage(&usage),
            });
            self.queued.push_back(chunk.to_string());
        }
        self.queued.push_back("[DONE]".to_owned());
    }

    /// Turns the run's next step into chunks.
    async fn advance(&mut self, next: Next) {
        match next {
            Next::Progress(Progress::Delta { agent, text }) if agent == self.shape.agent => {
                self.streamed = true;
                let chunk = self.chunk(json!({"content": text}), None);
                self.queued.push_back(chunk);
            }
            Next::Progress(_) => {}
            Next::ToolCalls(calls) => {
                let chunk = self.chunk(json!({"tool_calls": tool_calls_json(&calls)}), None);
                self.queued.push_back(chunk);
                if let Some(run) = self.run.take() {
                    self.state.park(&self.shape.key, &calls, run);
                }
                self.finish("tool_calls", None).await;
            }
            Next::Finished(result) => {
                self.run = None;
                match result.and_then(|posted| reply_of(&posted, &self.shape.agent)) {
                    Ok(reply) => {
                        if !self.streamed {
                            let chunk = self.chunk(json!({"content": reply.text}), None);
                            self.queued.push_back(chunk);
                        }
                        self.finish("stop", Some(reply.seq)).await;
                    }
                    Err(e) => self.queued.push_back(e.body().to_string()),
                }
            }
        }
    }
}

async fn streamed(
    state: Arc<AppState>,
    shape: Shape,
    mut run: Run,
    include_usage: bool,
    slot: TurnSlot,
) -> Result<Response, ApiError> {
    // A refused turn is an error status, not a stream.
    let first = match run.next().await {
        Next::Finished(Err(e)) => return Err(e),
        next => next,
    };
    let mut streaming = Streaming {
        state,
        shape,
        run: Some(run),
        first: Some(first),
        queued: VecDeque::new(),
        streamed: false,
        include_usage,
        _slot: slot,
    };
    let opening = streaming.chunk(json!({"role": "assistant", "content": ""}), None);
    streaming.queued.push_back(opening);
    let chunks = stream::unfold(streaming, |mut s| async move {
        loop {
            if let Some(data) = s.queued.pop_front() {
                return Some((SseEvent::default().data(data), s));
            }
            let next = match (s.first.take(), s.run.as_mut()) {
                (Some(next), _) => next,
                (None, Some(run)) => run.next().await,
                (None, None) => return None,
            };
            s.advance(next).await;
        }
    });
    Ok(sse(chunks.map(Ok)))
}
