//! A streamed response's events, in the order OpenAI sends them (the official SDK's stream helper,
//! `client.responses.stream()`, checks it): `response.created` and `response.in_progress`; a
//! message item added with its text part (`response.output_item.added`,
//! `response.content_part.added`) before its first `response.output_text.delta`; then
//! `response.output_text.done`, `response.content_part.done` and `response.output_item.done`;
//! each tool call's item added and done; `response.completed` (or `error` and
//! `response.failed`). The response's id and its items' ids are fixed when they start and kept
//! to the end (the SDK refuses an identity that changes). A provider that does not stream gets
//! the reply's whole text as one delta. Text the agent streamed in a step that went on to call
//! tools (its own or MCP ones) is a message item of its own, before the reply's, as OpenAI gives
//! each step its item: so the final output holds every text streamed.

use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedSender;

use crate::error::ApiError;

/// What the run streamed for the response's agent.
pub(super) enum Streamed {
    /// A fragment of text.
    Delta(String),
    /// The step whose text this was called tools: the text is not the reply's.
    StepEnded,
}

/// Sends one streamed response's events, in order.
pub(super) struct ResponseStream {
    tx: UnboundedSender<Value>,
    /// The stem of the message items' ids, fixed at the start (`<stem>`, `<stem>_1`, ...).
    stem: String,
    /// The message item being streamed (its output index, id and text), once a delta came.
    open: Option<(usize, String, String)>,
    /// The items already done (earlier steps' text), in output order.
    done: Vec<Value>,
}

impl ResponseStream {
    /// Starts the stream of `response` (its id, status `in_progress` and empty output), whose
    /// message items' ids start with `stem`.
    pub(super) fn start(tx: UnboundedSender<Value>, response: Value, stem: String) -> Self {
        let _ = tx.send(json!({"type": "response.created", "response": response}));
        let _ = tx.send(json!({"type": "response.in_progress", "response": response}));
        Self {
            tx,
            stem,
            open: None,
            done: Vec::new(),
        }
    }

    /// A fragment of the text.
    pub(super) fn delta(&mut self, text: String) {
        let (index, id, streamed) = self.open();
        streamed.push_str(&text);
        let (index, id) = (*index, id.clone());
        let _ = self.tx.send(json!({
            "type": "response.output_text.delta", "item_id": id,
            "output_index": index, "content_index": 0, "delta": text, "logprobs": [],
        }));
    }

    /// The step whose text was streamed called tools: its message item is done.
    pub(super) fn step_ended(&mut self) {
        if let Some((index, id, text)) = self.open.take() {
            let item = message_item(&text, &id);
            self.message_done(index, &item);
            self.done.push(item);
        }
    }

    /// Ends the stream with `output` (the reply's message item, or tool call items) and the
    /// completed `response`: the reply's message item takes the open item's place and id.
    pub(super) fn finish(mut self, output: Vec<Value>, mut response: Value) {
        for mut item in output {
            if is_message(&item) {
                let text = item["content"][0]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                if self
                    .open
                    .as_ref()
                    .is_none_or(|(_, _, streamed)| streamed.is_empty())
                {
                    self.delta(text.clone());
                }
                let (index, id, _) = self.open.take().expect("opened by the delta");
                item["id"] = json!(id);
                self.message_done(index, &item);
            } else {
                self.step_ended();
                let index = self.done.len();
                let mut added = item.clone();
                added["status"] = json!("in_progress");
                self.item_event("response.output_item.added", index, &added);
                self.item_event("response.output_item.done", index, &item);
            }
            self.done.push(item);
        }
        self.step_ended();
        response["output"] = Value::Array(self.done);
        let _ = self
            .tx
            .send(json!({"type": "response.completed", "response": response}));
    }

    /// Ends the stream with `error`: an `error` event, then `response.failed` with what was
    /// done.
    pub(super) fn fail(mut self, error: &ApiError, mut response: Value) {
        self.step_ended();
        let body = error.body();
        let _ = self.tx.send(json!({
            "type": "error", "code": error.code, "message": error.message,
            "param": body["error"]["param"],
        }));
        response["status"] = json!("failed");
        response["error"] = json!({"code": error.code, "message": error.message});
        response["output"] = Value::Array(self.done);
        let _ = self
            .tx
            .send(json!({"type": "response.failed", "response": response}));
    }

    /// The message item being streamed, added with its empty text part if it was not yet.
    fn open(&mut self) -> &mut (usize, String, String) {
        if self.open.is_none() {
            let index = self.done.len();
            let id = match index {
                0 => self.stem.clone(),
                n => format!("{}_{n}", self.stem),
            };
            let item = json!({
                "type": "message", "id": id, "status": "in_progress",
                "role": "assistant", "content": [],
            });
            self.item_event("response.output_item.added", index, &item);
            let _ = self.tx.send(json!({
                "type": "response.content_part.added", "item_id": id,
                "output_index": index, "content_index": 0,
                "part": {"type": "output_text", "text": "", "annotations": []},
            }));
            self.open = Some((index, id, String::new()));
        }
        self.open.as_mut().expect("just opened")
    }

    /// A message item's text, part and item done.
    fn message_done(&self, index: usize, item: &Value) {
        let (id, text) = (&item["id"], &item["content"][0]["text"]);
        let _ = self.tx.send(json!({
            "type": "response.output_text.done", "item_id": id,
            "output_index": index, "content_index": 0, "text": text, "logprobs": [],
        }));
        let _ = self.tx.send(json!({
            "type": "response.content_part.done", "item_id": id,
            "output_index": index, "content_index": 0,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn events(feed: impl FnOnce(&mut ResponseStream), output: Vec<Value>) -> Vec<Value> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut stream = ResponseStream::start(tx, json!({"id": "resp_x"}), "msg_x".into());
        feed(&mut stream);
        stream.finish(output, json!({"id": "resp_x"}));
        std::iter::from_fn(|| rx.try_recv().ok()).collect()
    }

    /// Each event as "type@output_index", the text deltas as "delta@index:text".
    fn shape(events: &[Value]) -> Vec<String> {
        events
            .iter()
            .map(
                |e| match (e["type"].as_str().unwrap(), e["output_index"].as_u64()) {
                    ("response.output_text.delta", Some(i)) => {
                        format!("delta@{i}:{}", e["delta"].as_str().unwrap())
                    }
                    (kind, Some(i)) => format!("{}@{i}", kind.trim_start_matches("response.")),
                    (kind, None) => kind.trim_start_matches("response.").to_owned(),
                },
            )
            .collect()
    }

    /// The events of a message item at `index` whose text is `text`, as [`shape`] writes them.
    fn message_events(index: usize, text: &str) -> Vec<String> {
        let kinds = ["output_item.added", "content_part.added"];
        let done = ["output_text.done", "content_part.done", "output_item.done"];
        let delta = format!("delta@{index}:{text}");
        (kinds.iter().map(|k| format!("{k}@{index}")))
            .chain(std::iter::once(delta))
            .chain(done.iter().map(|k| format!("{k}@{index}")))
            .collect()
    }

    /// The whole stream: started, then `items`, then completed.
    fn stream_of(items: Vec<Vec<String>>) -> Vec<String> {
        let ends = |k: &str| vec![k.to_owned()];
        [ends("created"), ends("in_progress")]
            .into_iter()
            .chain(items)
            .chain([ends("completed")])
            .flatten()
            .collect()
    }

    type Feed = fn(&mut ResponseStream);
    type Case = (Feed, Vec<Value>, Vec<String>, Vec<&'static str>);

    /// (what was streamed, the output, the events expected, the output's item ids)
    fn cases() -> Vec<Case> {
        let call =
            json!({"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"});
        let call_events = vec!["output_item.added@1".into(), "output_item.done@1".into()];
        vec![
            // A step that called the agent's own tools, then the reply.
            (
                |s| {
                    s.delta("Let me check. ".into());
                    s.step_ended();
                    s.delta("The answer.".into());
                },
                vec![message_item("The answer.", "msg_9")],
                stream_of(vec![
                    message_events(0, "Let me check. "),
                    message_events(1, "The answer."),
                ]),
                vec!["msg_x", "msg_x_1"],
            ),
            // A provider that does not stream: the reply's text as one delta.
            (
                |_| {},
                vec![message_item("Whole.", "msg_9")],
                stream_of(vec![message_events(0, "Whole.")]),
                vec!["msg_x"],
            ),
            // Text streamed along host tool calls: its item, then the calls'.
            (
                |s| s.delta("Looking.".into()),
                vec![call],
                stream_of(vec![message_events(0, "Looking."), call_events]),
                vec!["msg_x", ""],
            ),
        ]
    }

    #[test]
    fn each_step_that_streamed_text_is_an_item_and_the_output_holds_every_item() {
        for (i, (feed, output, expected, ids)) in cases().into_iter().enumerate() {
            let events = events(feed, output);
            assert_eq!(shape(&events), expected, "case {i}");
            let completed = &events.last().unwrap()["response"]["output"];
            let got: Vec<&str> = completed
                .as_array()
                .unwrap()
                .iter()
                .map(|item| item["id"].as_str().unwrap_or(""))
                .collect();
            assert_eq!(got, ids, "case {i}");
        }
    }
}
