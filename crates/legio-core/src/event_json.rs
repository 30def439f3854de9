//! Events as JSON lines: `{"seq": 12, "kind": "message_posted", ...the event's fields}`. The shape
//! is stable and documented by `proto/events.schema.json`; export, import and `replay --format
//! jsonl` use it.

use serde::Serialize;
use serde_json::{Map, Value};
use thiserror::Error;

use crate::event::{Event, EventKind, Record};
use crate::seq::Seq;
use crate::sorted_json::{Object, SortedJson};

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

/// An event's own fields (its kind's struct), serialized.
struct Inner<'a>(&'a Event);

impl Serialize for Inner<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Event::MessagePosted(e) => e.serialize(s),
            Event::SessionOpened(e) => e.serialize(s),
            Event::ContextDelivered(e) => e.serialize(s),
            Event::TurnCompleted(e) => e.serialize(s),
            Event::TurnFailed(e) => e.serialize(s),
            Event::SessionSuspended(e) | Event::SessionClosed(e) => e.serialize(s),
            Event::SummaryRecorded(e) => e.serialize(s),
            Event::AgentFailed(e) => e.serialize(s),
            Event::DirectivePublished(e) => e.serialize(s),
            Event::DirectiveRevoked(e) => e.serialize(s),
            Event::NoteWritten(e) => e.serialize(s),
            Event::NotebookEntryAppended(e) => e.serialize(s),
            Event::HeartbeatRan(e) => e.serialize(s),
            Event::ToolsDeclared(e) => e.serialize(s),
            Event::ApprovalRequested(e) => e.serialize(s),
            Event::ApprovalAnswered(e) => e.serialize(s),
            Event::InstructionsGiven(e) => e.serialize(s),
        }
    }
}

/// The JSON object of a record.
pub fn record_to_json(record: &Record) -> Value {
    let mut object = Map::new();
    object.insert("seq".into(), Value::from(record.seq.get()));
    object.insert("kind".into(), Value::from(record.event.kind().as_str()));
    // Serializing plain data structs to JSON cannot fail.
    if let Ok(Value::Object(fields)) = serde_json::to_value(Inner(&record.event)) {
        object.extend(fields);
    }
    Value::Object(object)
}

/// Writes records as JSON straight into a buffer: byte for byte what serializing
/// [`record_to_json`]'s value writes (keys sorted at every level, serde_json's numbers and
/// escaping), without building that value. Reusing one writer, a record allocates nothing once
/// the writer's stacks and the buffer have grown.
#[derive(Debug, Default)]
pub struct RecordJson {
    json: SortedJson,
}

impl RecordJson {
    /// Appends the JSON object of `record` to `out` (no newline).
    pub fn write(&mut self, record: &Record, out: &mut Vec<u8>) {
        let len = out.len();
        let head = |object: &mut Object<'_, '_>| {
            object.entry("seq", &record.seq.get())?;
            object.entry("kind", record.event.kind().as_str())
        };
        if self
            .json
            .write_object(out, head, &Inner(&record.event))
            .is_err()
        {
            // Not reached by plain data structs; the value's way is the reference.
            out.truncate(len);
            let value = record_to_json(record);
            // Writing a `Value` into a vector cannot fail.
            let _ = serde_json::to_writer(&mut *out, &value);
        }
    }
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
        EventKind::ToolsDeclared => {
            Event::ToolsDeclared(serde_json::from_value(fields).map_err(fail)?)
        }
        EventKind::ApprovalRequested => {
            Event::ApprovalRequested(serde_json::from_value(fields).map_err(fail)?)
        }
        EventKind::ApprovalAnswered => {
            Event::ApprovalAnswered(serde_json::from_value(fields).map_err(fail)?)
        }
        EventKind::InstructionsGiven => {
            Event::InstructionsGiven(serde_json::from_value(fields).map_err(fail)?)
        }
    };
    Ok(Record {
        seq: Seq(seq),
        event,
    })
}
