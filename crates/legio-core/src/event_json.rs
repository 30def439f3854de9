//! Events as JSON lines: `{"seq": 12, "kind": "message_posted", ...the event's fields}`. The shape
//! is stable and documented by `proto/events.schema.json`; export, import and `replay --format
//! jsonl` use it.

use serde_json::{Map, Value};
use thiserror::Error;

use crate::event::{Event, EventKind, Record};
use crate::seq::Seq;

/// A JSON line that is not an event.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum JsonEventError {
    /// Not a JSON object with a numeric `seq` and a known `kind`.
    #[error("{0}")]
    Shape(String),
    /// The fields do not fit the kind.
    #[error("invalid {kind} event: {reason}")]
    Fields {
        /// The kind.
        kind: &'static str,
        /// What serde said.
        reason: String,
    },
}

fn inner(event: &Event) -> Result<Value, serde_json::Error> {
    match event {
        Event::MessagePosted(e) => serde_json::to_value(e),
        Event::SessionOpened(e) => serde_json::to_value(e),
        Event::ContextDelivered(e) => serde_json::to_value(e),
        Event::TurnCompleted(e) => serde_json::to_value(e),
        Event::TurnFailed(e) => serde_json::to_value(e),
        Event::SessionSuspended(e) | Event::SessionClosed(e) => serde_json::to_value(e),
        Event::SummaryRecorded(e) => serde_json::to_value(e),
        Event::AgentFailed(e) => serde_json::to_value(e),
        Event::DirectivePublished(e) => serde_json::to_value(e),
        Event::DirectiveRevoked(e) => serde_json::to_value(e),
        Event::NoteWritten(e) => serde_json::to_value(e),
        Event::NotebookEntryAppended(e) => serde_json::to_value(e),
        Event::HeartbeatRan(e) => serde_json::to_value(e),
    }
}

/// The JSON object of a record.
pub fn record_to_json(record: &Record) -> Value {
    let mut object = Map::new();
    object.insert("seq".into(), Value::from(record.seq.get()));
    object.insert("kind".into(), Value::from(record.event.kind().as_str()));
    // Serializing plain data structs to JSON cannot fail.
    if let Ok(Value::Object(fields)) = inner(&record.event) {
        object.extend(fields);
    }
    Value::Object(object)
}

/// Reads a record back from its JSON object.
pub fn record_from_json(value: Value) -> Result<Record, JsonEventError> {
    let Value::Object(mut object) = value else {
        return Err(JsonEventError::Shape("expected a JSON object".into()));
    };
    let seq = object
        .remove("seq")
        .and_then(|v| v.as_u64())
        .ok_or_else(|| JsonEventError::Shape("missing or non-numeric \"seq\"".into()))?;
    let kind_word = object
        .remove("kind")
        .and_then(|v| v.as_str().map(str::to_owned))
        .ok_or_else(|| JsonEventError::Shape("missing \"kind\"".into()))?;
    let kind = EventKind::parse(&kind_word)
        .ok_or_else(|| JsonEventError::Shape(format!("unknown kind {kind_word:?}")))?;
    let fields = Value::Object(object);
    let fail = |e: serde_json::Error| JsonEventError::Fields {
        kind: kind.as_str(),
        reason: e.to_string(),
    };
    let event = match kind {
        EventKind::MessagePosted => {
            Event::MessagePosted(serde_json::from_value(fields).map_err(fail)?)
        }
        EventKind::SessionOpened => {
            Event::SessionOpened(serde_json::from_value(fields).map_err(fail)?)
        }
        EventKind::ContextDelivered => {
            Event::ContextDelivered(serde_json::from_value(fields).map_err(fail)?)
        }
        EventKind::TurnCompleted => {
            Event::TurnCompleted(serde_json::from_value(fields).map_err(fail)?)
        }
        EventKind::TurnFailed => Event::TurnFailed(serde_json::from_value(fields).map_err(fail)?),
        EventKind::SessionSuspended => {
            Event::SessionSuspended(serde_json::from_value(fields).map_err(fail)?)
        }
        EventKind::SessionClosed => {
            Event::SessionClosed(serde_json::from_value(fields).map_err(fail)?)
        }
        EventKind::SummaryRecorded => {
            Event::SummaryRecorded(serde_json::from_value(fields).map_err(fail)?)
        }
        EventKind::AgentFailed => Event::AgentFailed(serde_json::from_value(fields).map_err(fail)?),
        EventKind::DirectivePublished => {
            Event::DirectivePublished(serde_json::from_value(fields).map_err(fail)?)
        }
        EventKind::DirectiveRevoked => {
            Event::DirectiveRevoked(serde_json::from_value(fields).map_err(fail)?)
        }
        EventKind::NoteWritten => Event::NoteWritten(serde_json::from_value(fields).map_err(fail)?),
        EventKind::NotebookEntryAppended => {
            Event::NotebookEntryAppended(serde_json::from_value(fields).map_err(fail)?)
        }
        EventKind::HeartbeatRan => {
            Event::HeartbeatRan(serde_json::from_value(fields).map_err(fail)?)
        }
    };
    Ok(Record {
        seq: Seq(seq),
        event,
    })
}
