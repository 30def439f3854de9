//! A streamed response's events, in the order OpenAI sends them (the official SDK's stream helper,
//! `client.responses.stream()`, checks it): `response.created` and `response.in_progress`; the
//! message item added with its text part (`response.output_item.added`,
//! `response.content_part.added`) before the first `response.output_text.delta`; then
//! `response.output_text.done`, `response.content_part.done` and `response.output_item.done`;
//! each tool call's item added and done; `response.completed`. The response's id and its message
//! item's id are fixed when it starts and kept to the end (the SDK refuses a response whose
//! identity changes). A provider that does not stream gets its whole text as one delta.

use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedSender;

/// Sends one streamed response's events, in order.
pub(super) struct ResponseStream {
    tx: UnboundedSender<Value>,
    /// The message item's id, fixed at the start.
    item_id: String,
    /// Whether the message item was added (on the first delta).
    opened: bool,
    /// The text streamed so far.
    text: String,
}

impl ResponseStream {
    /// Starts the stream of `response` (its id, status `in_progress` and empty output), whose
    /// message item will be `item_id`.
    pub(super) fn start(tx: UnboundedSender<Value>, response: Value, item_id: String) -> Self {
        let _ = tx.send(json!({"type": "response.created", "response": response}));
        let _ = tx.send(json!({"type": "response.in_progress", "response": response}));
        Self {
            tx,
            item_id,
            opened: false,
            text: String::new(),
        }
    }

    /// A fragment of the reply's text.
    pub(super) fn delta(&mut self, text: String) {
        self.open();
        self.text.push_str(&text);
        let _ = self.tx.send(json!({
            "type": "response.output_text.delta", "item_id": self.item_id,
            "output_index": 0, "content_index": 0, "delta": text, "logprobs": [],
        }));
    }

    /// Ends the stream with `output` (a message item and tool call items, in order) and the
    /// completed `response`, its message item given the stream's id. Text streamed along tool
    /// calls (no message in `output`) is kept as a message item of its own, first.
    pub(super) fn finish(mut self, mut output: Vec<Value>, mut response: Value) {
        if self.opened && !output.iter().any(is_message) {
            output.insert(0, message_item(&self.text, &self.item_id));
        }
        for (index, item) in output.iter_mut().enumerate() {
            if is_message(item) {
                item["id"] = json!(self.item_id);
                self.message_done(index, item);
            } else {
                let mut added = item.clone();
                added["status"] = json!("in_progress");
                self.item_event("response.output_item.added", index, &added);
                self.item_event("response.output_item.done", index, item);
            }
        }
        response["output"] = Value::Array(output);
        let _ = self
            .tx
            .send(json!({"type": "response.completed", "response": response}));
    }

    /// The message item added, with its empty text part (once).
    fn open(&mut self) {
        if self.opened {
            return;
        }
        self.opened = true;
        let item = json!({
            "type": "message", "id": self.item_id, "status": "in_progress",
            "role": "assistant", "content": [],
        });
        self.item_event("response.output_item.added", 0, &item);
        let _ = self.tx.send(json!({
            "type": "response.content_part.added", "item_id": self.item_id,
            "output_index": 0, "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": []},
        }));
    }

    /// The message item's text, part and item done (its text streamed first, whole, when the
    /// provider streamed none).
    fn message_done(&mut self, index: usize, item: &Value) {
        let text = item["content"][0]["text"].as_str().unwrap_or_default();
        if !self.opened || self.text.is_empty() {
            self.delta(text.to_owned());
        }
        let ids = (&self.item_id, index);
        let _ = self.tx.send(json!({
            "type": "response.output_text.done", "item_id": ids.0,
            "output_index": ids.1, "content_index": 0, "text": text, "logprobs": [],
        }));
        let _ = self.tx.send(json!({
            "type": "response.content_part.done", "item_id": ids.0,
            "output_index": ids.1, "content_index": 0,
            "part": {"type": "output_text", "text": text, "annotations": []},
        }));
        self.item_event("response.output_item.done", index, item);
    }

    fn item_event(&self, kind: &str, index: usize, item: &Value) {
        let _ = self
            .tx
            .send(json!({"type": kind, "output_index": index, "item": item}));
    }
}

fn is_message(item: &Value) -> bool {
    item["type"] == "message"
}

/// A message item of the output, with id `id` (`msg_<seq>`).
pub(super) fn message_item(text: &str, id: &str) -> Value {
    json!({
        "type": "message",
        "id": id,
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    })
}
