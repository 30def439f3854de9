//! Operator endpoints, for the CLI's live mode (`legio --server URL replay|inspect|context|verify|
//! reset`) while this server holds the log: the event stream from a seq (JSON lines or SSE, with
//! follow), the inspect tables (the tools table from this server's runtime), the shared memory,
//! context plans, the integrity report and manual resets. Reads run on blocking threads; a reset
//! goes through the runtime like any turn.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap};
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self, Stream, StreamExt};
use legio_core::{record_to_json, ConversationKey, Record, Seq};
use legio_runtime::{inspect as inspect_log, InspectKind, RuntimeError};
use legio_store::{EventLog, Subscription};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::error::ApiError;
use crate::metrics::EVENT_FOLLOWERS;
use crate::state::AppState;
use crate::wire::{conversation_key, sse, wants_stream};
use legio_runtime::ErrorCode;

/// Events per read while catching up.
const CHUNK: usize = 1_000;

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, RuntimeError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::new(ErrorCode::Internal, format!("a log read failed: {e}")))?
        .map_err(ApiError::from)
}

fn optional_key(key: Option<&str>) -> Result<Option<ConversationKey>, ApiError> {
    key.map(conversation_key).transpose()
}

/// The query of `GET /operator/events`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventsQuery {
    #[serde(default)]
    from: Option<u64>,
    #[serde(default)]
    to: Option<u64>,
    #[serde(default)]
    conversation: Option<String>,
    #[serde(default)]
    follow: Option<bool>,
    #[serde(default)]
    format: Option<String>,
}

/// Where an event stream is.
struct Cursor {
    log: Arc<dyn EventLog>,
    conversation: Option<ConversationKey>,
    next: Seq,
    to: Seq,
    follow: bool,
    subscription: Option<Subscription>,
    /// Counts this stream in [`EVENT_FOLLOWERS`] once it follows, until it is dropped.
    following: Option<Following>,
    stopping: watch::Receiver<bool>,
}

/// One following event stream, counted in the gauge while it lives.
struct Following;

impl Following {
    fn start() -> Self {
        metrics::gauge!(EVENT_FOLLOWERS).increment(1.0);
        Self
    }
}

impl Drop for Following {
    fn drop(&mut self) {
        metrics::gauge!(EVENT_FOLLOWERS).decrement(1.0);
    }
}

impl Cursor {
    /// The next batch of records: read from the log while catching up, then (with follow) each
    /// new event as it is appended, until the server stops. `None` at the end.
    async fn next_batch(mut self) -> Option<(Result<Vec<Record>, ApiError>, Self)> {
        if self.next > self.to {
            return None;
        }
        if self.subscription.is_none() {
            let (log, key, next, to) = (
                Arc::clone(&self.log),
                self.conversation.clone(),
                self.next,
                self.to,
            );
            let read = blocking(move || {
                let last = log.last_seq().min(to);
                if next > last {
                    return Ok(Vec::new());
                }
                let mut records = match &key {
                    Some(key) => log.conversation_events(key, Seq(next.get() - 1), CHUNK)?,
                    None => log.read_range(next, last, CHUNK)?,
                };
                records.retain(|r| r.seq <= last);
                Ok(records)
            })
            .await;
            match read {
                Err(e) => {
                    return Some((
                        Err(e),
                        Self {
                            to: Seq::ZERO,
                            ..self
                        },
                    ))
                }
                Ok(records) if !records.is_empty() => {
                    if let Some(last) = records.last() {
                        self.next = last.seq.next();
                    }
                    return Some((Ok(records), self));
                }
                Ok(_) if !self.follow => return None,
                Ok(_) => {
                    self.subscription = Some(self.log.subscribe(self.next));
                    self.following.get_or_insert_with(Following::start);
                }
            }
        }
        let mut subscription = self.subscription.take()?;
        let mut stopping = self.stopping.clone();
        loop {
            tokio::select! {
                record = subscription.next() => match record {
                    Ok(record) => {
                        self.next = record.seq.next();
                        if self.conversation.as_ref().is_some_and(|c| c != record.event.conversation()) {
                            continue;
                        }
                        self.subscription = Some(subscription);
                        return Some((Ok(vec![record]), self));
                    }
                    Err(_) => return None,
                },
                _ = stopping.wait_for(|stop| *stop) => return None,
            }
        }
    }
}

pub(crate) async fn events(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    query: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query?;
    let conversation = optional_key(query.conversation.as_deref())?;
    let follow = query.follow.unwrap_or(false) && query.to.is_none();
    if let Some(key) = &conversation {
        // On a cluster node that does not own it: what its owner appended first.
        state.runtime.catch_up(key).await?;
        // A mistyped conversation is 404, as for inspect, context and reset; a follower may wait
        // for a conversation's first event.
        if !follow {
            let (log, lookup) = (Arc::clone(state.runtime.log()), key.clone());
            blocking(move || Ok(legio_runtime::require_conversation(log.as_ref(), &lookup)?))
                .await?;
        }
    }
    let from = Seq(query.from.unwrap_or(1).max(1));
    let to = Seq(query.to.unwrap_or(u64::MAX));
    if from > to {
        return Err(ApiError::new(
            ErrorCode::BadSeq,
            format!("from={from} is after to={to}"),
        ));
    }
    let sse_wanted = wants_sse(query.format.as_deref(), &headers)?;
    let cursor = Cursor {
        log: Arc::clone(state.runtime.log()),
        conversation,
        next: from,
        to,
        follow,
        subscription: None,
        following: None,
        stopping: state.stopping.clone(),
    };
    let batches = stream::unfold(cursor, Cursor::next_batch);
    Ok(if sse_wanted {
        sse_records(batches)
    } else {
        jsonl_records(batches)
    })
}

/// Whether the events go as server-sent events: `format=sse` or `jsonl`, else the `Accept`
/// header says.
fn wants_sse(format: Option<&str>, headers: &HeaderMap) -> Result<bool, ApiError> {
    match format {
        Some("sse") => Ok(true),
        Some("jsonl") => Ok(false),
        Some(other) => Err(ApiError::new(
            ErrorCode::BadQuery,
            format!("format={other:?} is not \"jsonl\" or \"sse\""),
        )),
        None => Ok(wants_stream(headers)),
    }
}

/// The batches as server-sent events: one `record` event per record (its seq as the id), an
/// `error` event for a failed read.
fn sse_records<S>(batches: S) -> Response
where
    S: Stream<Item = Result<Vec<Record>, ApiError>> + Send + 'static,
{
    let events = batches.flat_map(|batch| {
        let events: Vec<SseEvent> = match batch {
            Ok(records) => records
                .iter()
                .map(|r| {
                    SseEvent::default()
                        .id(r.seq.get().to_string())
                        .event("record")
                        .data(record_to_json(r).to_string())
                })
                .collect(),
            Err(e) => vec![SseEvent::default()
                .event("error")
                .data(e.body().to_string())],
        };
        stream::iter(events.into_iter().map(Ok::<_, Infallible>))
    });
    sse(events)
}

/// The batches as JSON lines: one line per record, the error body for a failed read.
fn jsonl_records<S>(batches: S) -> Response
where
    S: Stream<Item = Result<Vec<Record>, ApiError>> + Send + 'static,
{
    let lines = batches.map(|batch| {
        let mut out = Vec::new();
        match batch {
            Ok(records) => {
                for record in &records {
                    out.extend_from_slice(record_to_json(record).to_string().as_bytes());
                    out.push(b'\n');
                }
            }
            Err(e) => {
                out.extend_from_slice(e.body().to_string().as_bytes());
                out.push(b'\n');
            }
        }
        Ok::<_, Infallible>(Bytes::from(out))
    });
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(lines),
    )
        .into_response()
}

/// The query of `GET /operator/inspect/{what}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct InspectQuery {
    #[serde(default)]
    conversation: Option<String>,
}

pub(crate) async fn inspect(
    State(state): State<Arc<AppState>>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<InspectQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Path(what) = path?;
    let Query(query) = query?;
    if what == "tools" {
        // No log view: this server's own configuration, providers and MCP servers, not the
        // caller's.
        let only = optional_key(query.conversation.as_deref())?;
        let table = state.runtime.tools_table(only.as_ref()).await?;
        return Ok(Json(serde_json::to_value(table).unwrap_or(Value::Null)));
    }
    if what == "approvals" {
        // The tool calls that wait, or waited, for a person's answer (issue 49).
        let only = optional_key(query.conversation.as_deref())?;
        if let Some(key) = &only {
            state.runtime.catch_up(key).await?;
        }
        let log = Arc::clone(state.runtime.log());
        let table = blocking(move || {
            legio_runtime::approvals_table(log.as_ref(), only.as_ref()).map_err(RuntimeError::from)
        })
        .await?;
        return Ok(Json(serde_json::to_value(table).unwrap_or(Value::Null)));
    }
    let kind = InspectKind::parse(&what).ok_or_else(|| {
        ApiError::new(
            ErrorCode::NotFound,
            format!("cannot inspect {what:?}; choose conversations, agents, sessions, tools or approvals (the shared memory is GET /operator/memory; a cluster's nodes, legio --nats URL inspect nodes)"),
        )
    })?;
    let only = optional_key(query.conversation.as_deref())?;
    // On a cluster node: what the owners appended first, to the conversation named, or to every
    // conversation for the agents table (its rows read each conversation's session states).
    let caught_up = match (&only, kind) {
        (Some(key), _) => vec![key.clone()],
        (None, InspectKind::Agents) if state.runtime.node().is_some() => {
            let log = Arc::clone(state.runtime.log());
            blocking(move || log.conversations().map_err(RuntimeError::from)).await?
        }
        (None, _) => Vec::new(),
    };
    for key in &caught_up {
        state.runtime.catch_up(key).await?;
    }
    let log = Arc::clone(state.runtime.log());
    let runtime = Arc::clone(&state.runtime);
    let table = blocking(move || {
        match kind {
            // With the roster: every configured agent, even before its first session.
            InspectKind::Agents => {
                legio_runtime::agents_with_roster(log.as_ref(), runtime.config(), only.as_ref())
            }
            _ => inspect_log(log.as_ref(), kind, only.as_ref()),
        }
        .map_err(RuntimeError::from)
    })
    .await?;
    Ok(Json(serde_json::to_value(table).unwrap_or(Value::Null)))
}

/// `GET /operator/memory`: the shared memory as it stands (`legio inspect memory`'s JSON, the
/// `MemoryState` projection: every directive, revoked ones marked, the notes by key and every
/// notebook), unrestricted, as an operator sees it. The runtime's memory fold, brought up to date
/// from the log, so it includes every write acknowledged before the request.
pub(crate) async fn memory(State(state): State<Arc<AppState>>) -> Result<Json<Value>, ApiError> {
    let memory = state.runtime.memory().await?;
    let value = serde_json::to_value(memory).map_err(|e| {
        ApiError::new(
            ErrorCode::Internal,
            format!("encoding the memory failed: {e}"),
        )
    })?;
    Ok(Json(value))
}

/// The query of `GET /operator/context`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ContextQuery {
    conversation: String,
    agent: String,
    #[serde(default)]
    at: Option<u64>,
}

pub(crate) async fn context(
    State(state): State<Arc<AppState>>,
    query: Result<Query<ContextQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query?;
    let key = conversation_key(&query.conversation)?;
    let last = state.runtime.log().last_seq();
    if let Some(at) = query.at {
        if Seq(at) > last {
            return Err(ApiError::new(
                ErrorCode::BadSeq,
                format!("at={at} is past the end of the log ({last})"),
            ));
        }
    }
    let report = state
        .runtime
        .context_report(&key, &query.agent, query.at.map(Seq))
        .await?;
    Ok(Json(serde_json::to_value(report).unwrap_or(Value::Null)))
}

pub(crate) async fn verify(State(state): State<Arc<AppState>>) -> Result<Json<Value>, ApiError> {
    let log = Arc::clone(state.runtime.log());
    let report = blocking(move || Ok(log.verify(&mut |_| {})?)).await?;
    let counts: serde_json::Map<String, Value> = report
        .counts
        .iter()
        .map(|(kind, n)| ((*kind).to_owned(), json!(n)))
        .collect();
    Ok(Json(json!({
        "events": report.events,
        "last_seq": report.last_seq.get(),
        "clean": report.is_clean(),
        "total_findings": report.total_findings(),
        "findings": report.findings.iter().map(|f| f.to_string()).collect::<Vec<_>>(),
        "counts": counts,
    })))
}

/// The body of `POST /operator/reset`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResetBody {
    conversation: String,
    agent: String,
}

pub(crate) async fn reset(
    State(state): State<Arc<AppState>>,
    body: Result<Json<ResetBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(body) = body?;
    let key = conversation_key(&body.conversation)?;
    let runtime = &state.runtime;
    let agent = runtime
        .config()
        .agent_named(&body.agent)
        .map_err(RuntimeError::from)?
        .name
        .clone();
    // A mistyped conversation is 404, as for the context report (it answered `reset: false`).
    runtime.catch_up(&key).await?;
    let (log, lookup) = (Arc::clone(runtime.log()), key.clone());
    blocking(move || Ok(legio_runtime::require_conversation(log.as_ref(), &lookup)?)).await?;
    let status = runtime.status(key.as_str()).await?;
    let session = status
        .iter()
        .find(|s| s.agent == agent)
        .and_then(|s| s.session.as_ref());
    let was_failed = session.is_some_and(|x| x.failed.is_some());
    let resettable = legio_core::resettable(session);
    runtime.reset(&key, &agent).await?;
    Ok(Json(json!({
        "conversation": key.as_str(),
        "agent": agent.as_str(),
        // Whether there was anything to reset (an open session, a failure): none is written
        // otherwise.
        "reset": resettable,
        "was_failed": was_failed,
        "last_seq": runtime.log().last_seq().get(),
    })))
}
