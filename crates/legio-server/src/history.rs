//! `GET /sessions/{id}/history?view=full|compacted|next[&agent=NAME][&limit=N]`: a `Message[]`-
//! compatible array (seed 002). `full` is every message as stored, nothing omitted or altered
//! (its `parts` carry the exact content). `compacted` is the agent's compacted transcript, as seed
//! 002 means it: its latest summary, then every message it may see after that summary, whatever
//! its provider session holds. `next` is what its provider receives next: the planner's own plan
//! for its next turn (the same function `legio context` uses): the restored notice, the summary
//! when the context is compacted, the messages after it (a delta for a live stateful session).
//! Without `agent`, `full` is the whole conversation and `compacted` / `next` are the
//! orchestrator's. Another agent's tool calls and results are `user` messages with their text,
//! so every view parses as OpenAI's `Message[]`.

use std::sync::Arc;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use legio_core::{
    can_see, ContextItem, ContextSummary, ConversationKey, Event, Message, Part, Participant,
    Record, Seq,
};
use legio_runtime::{AgentSpec, RuntimeError};
use legio_store::EventLog;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;
use crate::wire::conversation_key;
use legio_runtime::ErrorCode;

/// The query of a history request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HistoryQuery {
    #[serde(default)]
    view: Option<String>,
    #[serde(default)]
    agent: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
}

/// How many events one read takes.
const CHUNK: usize = 10_000;

pub(crate) async fn history(
    State(state): State<Arc<AppState>>,
    path: Result<Path<String>, PathRejection>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<HistoryQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Path(id) = path?;
    let key = conversation_key(&id)?;
    if key.is_reserved() {
        // legio's own keys (`legio:memory`) hold no conversation: refused as a turn there is.
        let reserved = RuntimeError::ReservedConversation {
            key: key.as_str().to_owned(),
        };
        return Err(reserved.into());
    }
    caller.check_conversation(key.as_str())?;
    let Query(query) = query?;
    let runtime = &state.runtime;
    let spec = match &query.agent {
        Some(name) => Some(
            runtime
                .config()
                .agent_named(name)
                .map_err(RuntimeError::from)?
                .clone(),
        ),
        None => None,
    };
    // On a cluster node that does not own the conversation: what its owner appended first.
    runtime.catch_up(&key).await?;
    let view = query.view.as_deref().unwrap_or("full");
    if view != "full" && query.limit.is_some() {
        return Err(ApiError::new(
            ErrorCode::BadQuery,
            format!(
                "limit applies to view=full; view={view} is the agent's whole compacted transcript"
            ),
        ));
    }
    match view {
        "full" => full(&state, key, spec, query.limit).await,
        "compacted" => {
            let agent = spec.unwrap_or_else(|| runtime.config().orchestrator().clone());
            compacted(&state, key, agent).await
        }
        "next" => {
            let agent = spec.unwrap_or_else(|| runtime.config().orchestrator().clone());
            next(&state, key, agent).await
        }
        other => Err(ApiError::new(
            ErrorCode::BadQuery,
            format!("view={other:?} is not \"full\", \"compacted\" or \"next\""),
        )),
    }
}

/// Runs a log read on a blocking thread.
async fn read<T, F>(state: &AppState, f: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&dyn EventLog) -> Result<T, legio_store::StoreError> + Send + 'static,
{
    let log = Arc::clone(state.runtime.log());
    tokio::task::spawn_blocking(move || f(log.as_ref()))
        .await
        .map_err(|e| {
            ApiError::new(
                ErrorCode::Internal,
                format!("reading the history failed: {e}"),
            )
        })?
        .map_err(|e| legio_runtime::RuntimeError::from(e).into())
}

/// Every message as stored (as `spec`'s agent may see them, when given), the last `limit`.
async fn full(
    state: &AppState,
    key: ConversationKey,
    spec: Option<AgentSpec>,
    limit: Option<usize>,
) -> Result<Response, ApiError> {
    let viewer_spec = spec.clone();
    let records = read(state, move |log| {
        let mut out: Vec<Record> = Vec::new();
        let mut after = Seq::ZERO;
        loop {
            let chunk = log.conversation_events(&key, after, CHUNK)?;
            let Some(last) = chunk.last().map(|r| r.seq) else {
                break;
            };
            out.extend(chunk.into_iter().filter(|r| {
                r.event
                    .as_message()
                    .is_some_and(|m| viewer_spec.as_ref().is_none_or(|s| can_see(s.viewer(), m)))
            }));
            after = last;
        }
        Ok(out)
    })
    .await?;
    let skip = limit.map_or(0, |limit| records.len().saturating_sub(limit));
    let me = spec.as_ref().map(|s| Participant::Agent(s.name.clone()));
    let messages: Vec<Value> = records
        .iter()
        .skip(skip)
        .filter_map(|r| {
            r.event
                .as_message()
                .map(|m| message_json(m, r.seq, me.as_ref(), None))
        })
        .flatten()
        .collect();
    Ok(Json(messages).into_response())
}

/// Seed 002's compacted history: the agent's latest summary, then every message it may see after
/// it, whatever its provider session holds.
async fn compacted(
    state: &AppState,
    key: ConversationKey,
    agent: AgentSpec,
) -> Result<Response, ApiError> {
    let name = agent.name.clone();
    let me = Participant::Agent(agent.name.clone());
    let (summary, records) = read(state, move |log| {
        let summary = match log
            .session_state(&key, &name)?
            .and_then(|s| s.latest_summary)
        {
            Some(at) => log
                .read_range(at.event, at.event, 1)?
                .into_iter()
                .find_map(|r| match r.event {
                    Event::SummaryRecorded(e) => Some(ContextSummary {
                        covers_up_to: e.covers_up_to,
                        text: e.text,
                    }),
                    _ => None,
                }),
            None => None,
        };
        let mut after = summary.as_ref().map_or(Seq::ZERO, |s| s.covers_up_to);
        let mut records = Vec::new();
        loop {
            let chunk = log.visible_after(&key, agent.viewer(), after, CHUNK)?;
            let Some(last) = chunk.last().map(|r| r.seq) else {
                break;
            };
            records.extend(chunk);
            after = last;
        }
        Ok((summary, records))
    })
    .await?;
    let mut messages: Vec<Value> = summary.iter().map(summary_json).collect();
    messages.extend(
        records
            .iter()
            .filter_map(|r| {
                r.event
                    .as_message()
                    .map(|m| message_json(m, r.seq, Some(&me), None))
            })
            .flatten(),
    );
    Ok(Json(messages).into_response())
}

/// What the agent's provider receives next: the planner's own plan for its next turn.
async fn next(
    state: &AppState,
    key: ConversationKey,
    agent: AgentSpec,
) -> Result<Response, ApiError> {
    let preview = state.runtime.next_context(&key, &agent.name, None).await?;
    let plan = &preview.turn.plan;
    let me = Participant::Agent(agent.name.clone());
    let mut messages = Vec::new();
    // The summary stands for the oldest messages, so it leads (as it leads the rendered
    // context); the restored notice follows it, before the messages.
    if let Some(summary) = &plan.summary {
        messages.push(summary_json(summary));
    }
    if let Some(notice) = &plan.notice {
        messages.push(json!({"role": "system", "content": notice}));
    }
    let item = |i: &ContextItem| message_json(&i.message, i.seq, Some(&me), Some(i));
    messages.extend(plan.history.iter().flat_map(item));
    if preview.answers_message {
        messages.extend(item(&plan.new_message));
    }
    let mut response = Json(messages).into_response();
    response.headers_mut().insert(
        "legio-context-mode",
        HeaderValue::from_static(plan.mode.as_str()),
    );
    Ok(response)
}

/// A compacted context's summary as a `Message[]` entry: a `user` turn whose content is the
/// summary exactly as `legio_llm::render` puts it in front of a chat context
/// (`<conversation_summary covers_up_to="N">…</conversation_summary>`), marked `summary` and
/// with `covers_up_to` (the last seq it stands for; the messages that follow are all after it).
/// It has no `id`, `seq` or `parts`: it is not a stored message (its record is the
/// `SummaryRecorded` event).
fn summary_json(summary: &ContextSummary) -> Value {
    json!({
        "role": "user",
        "content": format!(
            "<conversation_summary covers_up_to=\"{}\">\n{}\n</conversation_summary>",
            summary.covers_up_to, summary.text
        ),
        "summary": true,
        "covers_up_to": summary.covers_up_to.get(),
    })
}

/// A stored message as a `Message[]` entry: `role`, `content`, `name`, `tool_calls` (with ids),
/// `tool_call_id`, plus legio's exact record (`id`, `seq`, `sender`, `audience`, `reply_to`,
/// `at`, `parts`). The role is relative to `me` (an agent's own messages are `assistant`, others'
/// `user` with their `name`); without `me`, every agent's message is `assistant`. A message
/// carrying a tool result is `tool`; one carrying several results (parallel calls) becomes one
/// `tool` entry per result, each with its `tool_call_id` and the same record fields, as the
/// Chat Completions format wants one tool message per call.
pub(crate) fn message_json(
    message: &Message,
    seq: Seq,
    me: Option<&Participant>,
    item: Option<&ContextItem>,
) -> Vec<Value> {
    if let Some(me) = me.filter(|me| message.sender != **me && has_tool_parts(message)) {
        return vec![others_tool_traffic_json(message, seq, me, item)];
    }
    let one = single_message_json(message, seq, me, item);
    let results: Vec<(&String, &String)> = message
        .parts
        .iter()
        .filter_map(|p| match p {
            Part::ToolResult {
                call_id, content, ..
            } => Some((call_id, content)),
            _ => None,
        })
        .collect();
    if results.len() < 2 {
        return vec![one];
    }
    results
        .into_iter()
        .map(|(call_id, content)| {
            let mut entry = one.clone();
            entry["content"] = json!(content);
            entry["tool_call_id"] = json!(call_id);
            entry
        })
        .collect()
}

fn has_tool_parts(message: &Message) -> bool {
    message
        .parts
        .iter()
        .any(|p| matches!(p, Part::ToolCall { .. } | Part::ToolResult { .. }))
}

/// Another agent's tool calls or results, as `me` reads them: a `user` message (with the
/// sender's `name`) whose content is the plain text of its parts (`[tool call NAME id=ID] ARGS`,
/// `[tool result id=ID] CONTENT`), so the array stays a valid `Message[]` (a `user` message
/// carries no `tool_calls`, and a `tool` message must answer a call of the reader's own). The
/// exact parts are in `parts`.
fn others_tool_traffic_json(
    message: &Message,
    seq: Seq,
    me: &Participant,
    item: Option<&ContextItem>,
) -> Value {
    let mut out = single_message_json(message, seq, Some(me), item);
    if let Some(entry) = out.as_object_mut() {
        entry.remove("tool_calls");
        entry.remove("tool_call_id");
        entry.insert("role".into(), json!("user"));
        entry.insert("content".into(), json!(message.plain_text()));
    }
    out
}

fn single_message_json(
    message: &Message,
    seq: Seq,
    me: Option<&Participant>,
    item: Option<&ContextItem>,
) -> Value {
    let tool_result = message.parts.iter().find_map(|p| match p {
        Part::ToolResult {
            call_id, content, ..
        } => Some((call_id, content)),
        _ => None,
    });
    let role = match (&message.sender, tool_result, me) {
        (_, Some(_), _) => "tool",
        (Participant::User, _, _) => "user",
        (sender, _, Some(me)) if sender == me => "assistant",
        (_, _, Some(_)) => "user",
        (Participant::Agent(_), _, None) => "assistant",
    };
    let text = message.text_content();
    let content = match tool_result {
        Some((_, result)) if text.is_empty() => result.clone(),
        _ => text,
    };
    let tool_calls: Vec<Value> = message
        .parts
        .iter()
        .filter_map(|p| match p {
            Part::ToolCall {
                id,
                name,
                arguments,
            } => Some(json!({
                "id": id,
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            })),
            _ => None,
        })
        .collect();
    let mut out = Map::new();
    out.insert("role".into(), json!(role));
    out.insert("content".into(), json!(content));
    // OpenAI's tool message has no `name`; the sender is in `sender`.
    if role != "tool" {
        out.insert("name".into(), json!(message.sender.as_str()));
    }
    if !tool_calls.is_empty() {
        out.insert("tool_calls".into(), Value::Array(tool_calls));
    }
    if let Some((call_id, _)) = tool_result {
        out.insert("tool_call_id".into(), json!(call_id));
    }
    out.insert("id".into(), json!(message.id.to_string()));
    out.insert("seq".into(), json!(seq.get()));
    out.insert("sender".into(), json!(message.sender.as_str()));
    out.insert(
        "audience".into(),
        serde_json::to_value(&message.audience).unwrap_or(Value::Null),
    );
    out.insert(
        "reply_to".into(),
        json!(message.reply_to.map(|id| id.to_string())),
    );
    out.insert("at".into(), json!(message.at.to_rfc3339()));
    out.insert(
        "parts".into(),
        serde_json::to_value(&message.parts).unwrap_or(Value::Null),
    );
    if let Some(item) = item {
        out.insert("redelivered".into(), json!(item.redelivered));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use legio_core::{AgentName, Audience, ConversationKey, MessageId, Timestamp};

    #[test]
    fn a_message_with_parallel_results_is_one_tool_entry_per_result() {
        let at = Timestamp::from_unix_micros(1);
        let ann = Participant::Agent(AgentName::new("ann").unwrap());
        let mut message = Message::text(
            MessageId::from_parts(at, [1; 10]),
            ConversationKey::new("t:1").unwrap(),
            ann.clone(),
            Audience::agent(AgentName::new("ann").unwrap()),
            "",
            at,
        );
        message.parts = vec![
            Part::ToolResult {
                call_id: "a".into(),
                content: "first".into(),
                is_error: false,
            },
            Part::ToolResult {
                call_id: "b".into(),
                content: "second".into(),
                is_error: true,
            },
        ];
        let entries = message_json(&message, Seq(7), Some(&ann), None);
        let pairs: Vec<(&str, &str, &str)> = entries
            .iter()
            .map(|e| {
                (
                    e["role"].as_str().unwrap(),
                    e["tool_call_id"].as_str().unwrap(),
                    e["content"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(pairs, [("tool", "a", "first"), ("tool", "b", "second")]);
        assert!(entries
            .iter()
            .all(|e| e["seq"] == 7 && e["parts"].as_array().unwrap().len() == 2));
        message.parts.truncate(1);
        assert_eq!(message_json(&message, Seq(7), Some(&ann), None).len(), 1);
    }
}
