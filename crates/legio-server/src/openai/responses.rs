//! `POST /v1/responses`: the Responses API over legio's log. A response id names a position in
//! the log: `resp_<conversation key in hex>_<seq>`, the seq of the agent's reply (or, for a
//! response that asks for tool calls, the log's last seq when it did). `previous_response_id`
//! therefore names the conversation: the host keeps no history, legio's log is the context (the
//! agent sees what it may see of the conversation, exactly once). The input is the new user
//! message (a string or message items), or `function_call_output` items answering the tool calls
//! of the previous response. Streamed as OpenAI streams it (response_stream.rs).

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures_util::stream::{self, StreamExt};
use legio_core::{AgentName, ConversationKey, IdempotencyKey, Participant, Seq, TokenUsage};
use legio_runtime::{HostToolCall, HostToolResult, HostTurn, Progress, ToolSpec};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::chat::FunctionDef;
use super::response_stream::{message_item, ResponseStream, Streamed};
use super::transcript::{self, Earlier};
use super::{agent_for_model, conversation_of, missing_conversation, text_of, unix_now, usage};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::limits::TurnSlot;
use crate::runs::{Next, Run};
use crate::state::AppState;
use crate::wire::{idempotency_key, sse};
use legio_runtime::ErrorCode;

#[derive(Debug, Deserialize)]
pub(crate) struct ResponsesRequest {
    model: String,
    input: Value,
    #[serde(default)]
    previous_response_id: Option<String>,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    tools: Option<Vec<ResponseTool>>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
}

#[derive(Debug, Deserialize)]
struct ResponseTool {
    #[serde(rename = "type")]
    kind: String,
    #[serde(flatten)]
    function: FunctionDef,
}

/// A response id for a position of a conversation in the log.
pub(crate) fn response_id(key: &ConversationKey, seq: Seq) -> String {
    let hex: String = key.as_str().bytes().map(|b| format!("{b:02x}")).collect();
    format!("resp_{hex}_{}", seq.get())
}

/// The conversation and position a response id names.
pub(crate) fn parse_response_id(id: &str) -> Option<(ConversationKey, Seq)> {
    let (hex, seq) = id.strip_prefix("resp_")?.rsplit_once('_')?;
    // A streamed response's id goes on with `-<suffix>` (see `streamed`).
    let seq = seq.split_once('-').map_or(seq, |(seq, _)| seq);
    if hex.len() % 2 != 0 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect();
    let key = ConversationKey::new(String::from_utf8(bytes?).ok()?).ok()?;
    Some((key, Seq(seq.parse().ok()?)))
}

/// Everything a response body repeats.
#[derive(Clone)]
struct Shape {
    model: String,
    created: u64,
    agent: AgentName,
    key: ConversationKey,
    previous: Option<String>,
}

pub(crate) async fn create(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Json<ResponsesRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(body) = body?;
    let idempotency = idempotency_key(&headers)?;
    let agent = agent_for_model(&state, &body.model)?;
    let key = conversation(
        &state,
        &caller,
        body.previous_response_id.as_deref(),
        body.metadata.as_ref(),
    )
    .await?;
    let tools = response_tools(body.tools.unwrap_or_default())?;
    // The token's cap on turns in flight holds here too (see chat::completions).
    let slot = match state.turn_slots.acquire(caller.name()) {
        Ok(slot) => slot,
        Err(too_many) => return Ok(too_many.into_response()),
    };
    let asked = (tools, idempotency, body.instructions);
    let run = start(&state, &key, &agent, &body.input, asked).await?;
    let shape = Shape {
        model: body.model,
        created: unix_now(),
        agent,
        key,
        previous: body.previous_response_id,
    };
    if body.stream.unwrap_or(false) {
        return streamed(state, shape, run, slot).await;
    }
    let (output, seq, usage) = outcome(&state, &shape, run, |_| ()).await?;
    drop(slot);
    let id = response_id(&shape.key, seq);
    Ok(Json(response_json(&shape, &id, output, &usage)).into_response())
}

/// The conversation, one `caller` may use: named by `previous_response_id` (whose conversation
/// the log must have, at a seq it has reached; checked after the caller's scope, so that a
/// scoped token learns nothing of other conversations) or `metadata.conversation` (both: they
/// must agree).
async fn conversation(
    state: &AppState,
    caller: &Caller,
    previous: Option<&str>,
    metadata: Option<&Map<String, Value>>,
) -> Result<ConversationKey, ApiError> {
    let named = conversation_of(metadata)?;
    let Some(previous) = previous else {
        let key = named.ok_or_else(missing_conversation)?;
        caller.check_conversation(key.as_str())?;
        return Ok(key);
    };
    let unknown = || {
        ApiError::new(
            ErrorCode::UnknownResponse,
            format!("no response {previous:?}: a response id is resp_<conversation in hex>_<seq>, as legio returned it"),
        )
        .with_param("previous_response_id")
    };
    let (key, seq) = parse_response_id(previous).ok_or_else(unknown)?;
    caller.check_conversation(key.as_str())?;
    let log = Arc::clone(state.runtime.log());
    let asked = key.clone();
    let had = tokio::task::spawn_blocking(move || log.conversation_events(&asked, Seq::ZERO, 1))
        .await
        .map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))?
        .map_err(|e| ApiError::from(legio_runtime::RuntimeError::from(e)))?;
    if seq > state.runtime.log().last_seq() || had.is_empty() {
        return Err(unknown());
    }
    match named {
        Some(named) if named != key => Err(ApiError::new(
            ErrorCode::BadRequest,
            format!(
                "previous_response_id belongs to conversation {:?}, metadata.conversation names {:?}",
                key.as_str(),
                named.as_str()
            ),
        )
        .with_param("metadata.conversation")),
        _ => Ok(key),
    }
}

fn response_tools(tools: Vec<ResponseTool>) -> Result<Vec<ToolSpec>, ApiError> {
    super::chat::function_tools(tools.into_iter().map(|t| (t.kind, t.function)))
}

/// Starts the turn the input asks for: a new message, or tool results.
async fn start(
    state: &Arc<AppState>,
    key: &ConversationKey,
    agent: &AgentName,
    input: &Value,
    (tools, idempotency, instructions): (Vec<ToolSpec>, Option<IdempotencyKey>, Option<String>),
) -> Result<Run, ApiError> {
    let bad = |why: &str| ApiError::new(ErrorCode::BadRequest, why.to_owned()).with_param("input");
    let items: Vec<Value> = match input {
        Value::String(text) => vec![json!({"role": "user", "content": text})],
        Value::Array(items) => items.clone(),
        _ => return Err(bad("input must be a string or a list of items")),
    };
    // The trailing `function_call_output` items answer the previous response's calls; earlier
    // `function_call` and `function_call_output` items are tool traffic the log holds already
    // (a session resends it), not compared, as chat's tool messages are not.
    let is_output =
        |i: &Value| i.get("type").and_then(Value::as_str) == Some("function_call_output");
    let results_from = items
        .iter()
        .rposition(|i| !is_output(i))
        .map_or(0, |i| i + 1);
    let posts = results_from == items.len();
    let said: Vec<(usize, &str, Option<String>)> = items[..results_from]
        .iter()
        .enumerate()
        .filter(|(_, i)| i.get("type").is_none_or(|t| t == "message"))
        .map(|(index, i)| {
            let role = i.get("role").and_then(Value::as_str).unwrap_or("");
            (index, role, i.get("content").and_then(text_of))
        })
        .collect();
    let (text, before) = if posts {
        let Some((_, "user", Some(text))) = said.last().cloned() else {
            return Err(bad("the last input item must be the new user message (text), or function_call_output items"));
        };
        (Some(text), &said[..said.len() - 1])
    } else {
        (None, &said[..])
    };
    let earlier = earlier_messages(before);
    // Tool results post no message, so a key names none: checked against the whole log.
    transcript::check(state, key, &earlier, idempotency.as_ref().filter(|_| posts)).await?;
    let Some(text) = text else {
        let outputs = tool_outputs(&items[results_from..]);
        return state.resume(key, outputs).await;
    };
    let turn = HostTurn {
        sender: Participant::User,
        to: Some(agent.clone()),
        text,
        tools,
        idempotency_key: idempotency,
    };
    let instructions = given_instructions(&items, instructions);
    Ok(state.start_run(key.clone(), turn, instructions))
}

/// The user and assistant messages with text among the earlier input items (what the resent
/// history check compares).
fn earlier_messages(said: &[(usize, &str, Option<String>)]) -> Vec<Earlier> {
    said.iter()
        .filter_map(|(index, role, text)| {
            let role = match *role {
                "user" => "user",
                "assistant" => "assistant",
                _ => return None,
            };
            Some(Earlier {
                index: *index,
                role,
                text: text.clone()?,
            })
        })
        .collect()
}

/// The trailing `function_call_output` items as the host's tool results.
fn tool_outputs(items: &[Value]) -> Vec<HostToolResult> {
    items
        .iter()
        .map(|i| HostToolResult {
            call_id: i["call_id"].as_str().unwrap_or_default().to_owned(),
            content: i.get("output").and_then(text_of).unwrap_or_default(),
            is_error: false,
        })
        .collect()
}

/// `instructions`, then any system or developer message items: chat's rule (mod.rs).
fn given_instructions(items: &[Value], instructions: Option<String>) -> Option<String> {
    let given = items
        .iter()
        .filter(|i| i.get("type").is_none_or(|t| t == "message"))
        .filter(|i| {
            matches!(
                i.get("role").and_then(Value::as_str),
                Some("system" | "developer")
            )
        })
        .filter_map(|i| i.get("content").and_then(text_of));
    super::instructions(instructions.into_iter().chain(given))
}

fn function_call_item(call: &HostToolCall) -> Value {
    json!({
        "type": "function_call",
        "id": format!("fc_{}", call.id),
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments,
        "status": "completed",
    })
}

/// Follows the run to its output (a message, or tool calls: the run is parked), reporting the
/// agent's text deltas and the ends of its steps that called tools to `on_text`: the output
/// items, the response's seq and the usage.
async fn outcome(
    state: &Arc<AppState>,
    shape: &Shape,
    mut run: Run,
    mut on_text: impl FnMut(Streamed),
) -> Result<(Vec<Value>, Seq, TokenUsage), ApiError> {
    loop {
        match run.next().await {
            Next::Progress(Progress::Delta { agent, text }) if agent == shape.agent => {
                on_text(Streamed::Delta(text))
            }
            // The agent's step called tools (its own, or MCP ones): the text it streamed is that
            // step's, not the reply's.
            Next::Progress(Progress::ToolCalled { agent, .. }) if agent == shape.agent => {
                on_text(Streamed::StepEnded)
            }
            Next::Progress(_) => {}
            Next::ToolCalls(calls) => {
                let items = calls.iter().map(function_call_item).collect();
                state.park(&shape.key, &calls, run);
                let seq = state.runtime.log().last_seq();
                let usage = usage(state, &shape.key, &shape.agent, None).await;
                return Ok((items, seq, usage));
            }
            Next::Finished(result) => {
                let posted = result?;
                let reply = posted
                    .replies
                    .iter()
                    .find(|r| r.agent == shape.agent)
                    .ok_or_else(|| ApiError::new(ErrorCode::Internal, "the agent gave no reply"))?;
                let reply = reply.outcome.as_ref().map_err(super::turn_error)?;
                let usage = usage(state, &shape.key, &shape.agent, Some(reply.seq)).await;
                let id = format!("msg_{}", reply.seq.get());
                return Ok((vec![message_item(&reply.text, &id)], reply.seq, usage));
            }
        }
    }
}

fn response_json(shape: &Shape, id: &str, output: Vec<Value>, usage: &TokenUsage) -> Value {
    let input = usage.context_tokens();
    json!({
        "id": id,
        "object": "response",
        "created_at": shape.created,
        "status": "completed",
        "model": shape.model,
        "output": output,
        "previous_response_id": shape.previous,
        "metadata": {"conversation": shape.key.as_str()},
        "parallel_tool_calls": true,
        "tool_choice": "auto",
        "tools": [],
        "error": null,
        "incomplete_details": null,
        "instructions": null,
        "usage": {
            "input_tokens": input,
            "input_tokens_details": {"cached_tokens": usage.cache_read},
            "output_tokens": usage.output,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input + usage.output,
        },
    })
}

fn event(data: &Value) -> SseEvent {
    let name = data["type"].as_str().unwrap_or("message").to_owned();
    SseEvent::default().event(name).data(data.to_string())
}

/// The streamed response (response_stream.rs): the run goes on its own task, its events through
/// a channel. Its id is fixed as it starts, by the log's last seq then (the reply's seq is not
/// known yet), and so is its message item's.
async fn streamed(
    state: Arc<AppState>,
    shape: Shape,
    run: Run,
    slot: TurnSlot,
) -> Result<Response, ApiError> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let at = state.runtime.log().last_seq();
    // The log's last seq alone could repeat (a streamed follow-up of a paused response, before
    // its results are appended): a counter makes the id unique.
    let id = format!("{}-{}", response_id(&shape.key, at), super::fresh_id("s"));
    let mut started = response_json(&shape, &id, Vec::new(), &TokenUsage::default());
    started["status"] = json!("in_progress");
    started["usage"] = Value::Null;
    let item_id = format!("msg_{}", id.trim_start_matches("resp_"));
    let mut events = ResponseStream::start(tx, started, item_id);
    tokio::spawn(async move {
        let _slot = slot;
        let sent = outcome(&state, &shape, run, |text| match text {
            Streamed::Delta(text) => events.delta(text),
            Streamed::StepEnded => events.step_ended(),
        })
        .await;
        let response = |usage| response_json(&shape, &id, Vec::new(), usage);
        match sent {
            Ok((output, _, usage)) => events.finish(output, response(&usage)),
            Err(e) => events.fail(&e, response(&TokenUsage::default())),
        }
    });
    let numbered = stream::unfold((rx, 0u64), |(mut rx, n)| async move {
        let mut data = rx.recv().await?;
        data["sequence_number"] = json!(n);
        Some((event(&data), (rx, n + 1)))
    });
    Ok(sse(numbered.map(Ok)))
}
