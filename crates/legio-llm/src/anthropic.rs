//! `anthropic-messages`: the Anthropic Messages API (`POST {base_url}/messages`). Stateless: every
//! turn sends the system prompt (top-level `system`) and the planned history as alternating
//! `user` / `assistant` messages of content blocks. Streaming is SSE ending with `message_stop`.
//!
//! Mapping decisions:
//! - Anthropic has no `name` on messages: a text from anyone but the user and the agent itself is
//!   attributed inline as `[sender]: text`; the user's text goes as it is.
//! - Consecutive turns of the same role are merged into one message of several content blocks
//!   (the API wants alternating roles); a conversation that would open with `assistant` gets a
//!   short user message first ([`CONTINUES`]).
//! - The agent's own tool calls become `tool_use` blocks (`input` = the arguments parsed as a JSON
//!   object, or `{}` with a text note carrying the raw arguments); tool results become
//!   `tool_result` blocks at the front of the following user message. The API rejects a
//!   `tool_use` without its `tool_result` in the next message and the reverse, so a call or a
//!   result whose partner is not adjacent (cut by the history window, never recorded) is sent as
//!   a text block instead.
//! - Usage: `input_tokens` (the uncached input, as Anthropic counts it), `output_tokens`,
//!   `cache_read_input_tokens`, `cache_creation_input_tokens` map to
//!   `TokenUsage { input, output, cache_read, cache_write }`; without usage, an estimate.
//! - The reply is the concatenation of its text blocks (in a stream, of its `text_delta`s), so
//!   streamed and non-streamed replies read the same. Its `tool_use` blocks are the model's tool
//!   calls (`id`, `name`, `input` as the arguments' JSON text); in a stream a `tool_use` block
//!   opens with `content_block_start` and its input arrives as `input_json_delta` fragments of
//!   that block's `index`. Other blocks (thinking) are ignored.
//! - The request's tools go in `tools` as `{name, description, input_schema}`.
//! - Prompt caching: every request marks cache breakpoints with `cache_control` (`{"type":
//!   "ephemeral"}`, plus `"ttl": "1h"` when `cache_ttl = "1h"`), at most four, one per place:
//!   the last tool (the API caches in the order tools, system, messages, so this covers every
//!   tool), the system prompt (sent as one text block for it), the last block of the request (the
//!   block before the volatile tail when there is one: the notice and status block, which the
//!   next request drops, see [`crate::volatile_tail`]), and the last block of the message two before it (where the previous request of an append-only
//!   exchange ended: the agent's reply and the new message follow it), so a turn that added
//!   more blocks than the API looks back over (20) still reads the previous request's prefix.
//!   The API reports what it wrote and read as `cache_creation_input_tokens` and
//!   `cache_read_input_tokens` (below).

use std::collections::HashSet;

use legio_core::{estimate_tokens, History, TokenUsage};
use serde_json::{json, Map, Value};

use crate::http::{self, Auth, BuildError, HttpClient};
use crate::provider::{
    Capabilities, Provider, ProviderError, ProviderFuture, ProviderReply, ProviderRequest,
    StreamDelta,
};
use crate::render::{structured_turns, volatile_tail, ChatRole, ToolCallPart, ToolResultPart};
use crate::settings::{CacheTtl, HttpSettings};

/// The API version sent as `anthropic-version` on every request.
pub const API_VERSION: &str = "2023-06-01";

/// The user message put first when the history would open with the agent's own message.
pub const CONTINUES: &str = "(The conversation continues from earlier messages.)";

/// The Messages provider.
#[derive(Debug)]
pub struct AnthropicMessages {
    http: HttpClient,
}

impl AnthropicMessages {
    /// A provider named `name` in the configuration; reads the key (sent as `x-api-key`) from
    /// `settings.api_key_env` now.
    pub fn new(name: &str, settings: HttpSettings) -> Result<Self, BuildError> {
        Ok(Self {
            http: HttpClient::new(
                name,
                settings,
                Auth::ApiKeyHeader,
                &[("anthropic-version", API_VERSION)],
            )?,
        })
    }

    async fn run(&self, request: ProviderRequest) -> Result<ProviderReply, ProviderError> {
        let body = request_body(&self.http.settings, &request);
        let response = self
            .http
            .post_json("messages", &body)
            .await
            .map_err(|f| self.http.error(f))?;
        let (text, usage, tool_calls) = if self.http.settings.stream {
            read_stream(&self.http, response, &request).await?
        } else {
            let body = http::json_body(response)
                .await
                .map_err(|e| self.http.malformed(e))?;
            read_body(&self.http, &body)?
        };
        self.http.record_ok();
        let usage = usage.unwrap_or_else(|| estimate(&body, &text));
        Ok(ProviderReply {
            text,
            usage: Some(usage),
            provider_session: None,
            tool_calls,
        })
    }
}

impl Provider for AnthropicMessages {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            history: History::Stateless,
            context_window: self.http.settings.context_window,
            tools: true,
        }
    }

    fn call(&self, request: ProviderRequest) -> ProviderFuture<'_> {
        Box::pin(self.run(request))
    }
}

// ---------------------------------------------------------------------------------------------
// Request mapping
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Role {
    User,
    Assistant,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Assistant => "assistant",
        }
    }
}

/// One message being built: a role and its content blocks.
#[derive(Debug)]
struct Draft {
    role: Role,
    blocks: Vec<Value>,
}

fn is_type(block: &Value, kind: &str) -> bool {
    block.get("type").and_then(Value::as_str) == Some(kind)
}

fn text_block(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

/// The API accepts ids and tool names made of `[A-Za-z0-9_-]` only; anything else becomes `_`
/// (the same on both sides of a call, so pairs still match).
fn api_word(raw: &str, max: usize) -> String {
    let word: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(max)
        .collect();
    if word.is_empty() {
        "_".into()
    } else {
        word
    }
}

fn tool_id(raw: &str) -> String {
    api_word(raw, 256)
}

/// A tool call as blocks: a note with the raw arguments when they are not a JSON object, then the
/// `tool_use` block.
fn tool_use_blocks(call: &ToolCallPart) -> Vec<Value> {
    let parsed = serde_json::from_str::<Value>(&call.arguments)
        .ok()
        .filter(Value::is_object);
    let mut blocks = Vec::new();
    let input = parsed.unwrap_or_else(|| {
        blocks.push(text_block(&format!(
            "[tool call {} id={}: its arguments were not a JSON object and are sent as {{}}; they were: {}]",
            call.name, call.id, call.arguments
        )));
        Value::Object(Map::new())
    });
    blocks.push(json!({
        "type": "tool_use",
        "id": tool_id(&call.id),
        "name": api_word(&call.name, 64),
        "input": input,
    }));
    blocks
}

fn tool_result_block(result: &ToolResultPart) -> Value {
    json!({
        "type": "tool_result",
        "tool_use_id": tool_id(&result.call_id),
        "content": result.content,
        "is_error": result.is_error,
    })
}

/// A `tool_use` or `tool_result` block whose partner is not adjacent, as text.
fn as_text(block: &Value) -> Value {
    let s = |key: &str| block.get(key).and_then(Value::as_str).unwrap_or_default();
    if is_type(block, "tool_use") {
        text_block(&format!(
            "[tool call {} id={}] {}",
            s("name"),
            s("id"),
            block.get("input").unwrap_or(&Value::Null)
        ))
    } else {
        let label = if block.get("is_error").and_then(Value::as_bool) == Some(true) {
            "tool error"
        } else {
            "tool result"
        };
        text_block(&format!(
            "[{label} id={}] {}",
            s("tool_use_id"),
            s("content")
        ))
    }
}

/// Appends `blocks` as a message of `role`, merged into the last message when it has the same
/// role ([`pair_tools`] later puts a user message's `tool_result` blocks in front).
fn push(drafts: &mut Vec<Draft>, role: Role, blocks: Vec<Value>) {
    if blocks.is_empty() {
        return;
    }
    match drafts.last_mut() {
        Some(last) if last.role == role => last.blocks.extend(blocks),
        _ => drafts.push(Draft { role, blocks }),
    }
}

fn results_first(blocks: &mut [Value]) {
    // A stable sort: results keep their order, and so does everything else.
    blocks.sort_by_key(|b| !is_type(b, "tool_result"));
}

fn ids(blocks: &[Value], kind: &str, key: &str) -> HashSet<String> {
    blocks
        .iter()
        .filter(|b| is_type(b, kind))
        .filter_map(|b| b.get(key).and_then(Value::as_str).map(str::to_owned))
        .collect()
}

/// Keeps a `tool_use` only when the next message holds its `tool_result`, and a `tool_result`
/// only when the previous message holds its `tool_use` (each id once); the others become text
/// where they stand. Then a user message's `tool_result` blocks go in front of its other blocks
/// (the API wants them first).
fn pair_tools(drafts: &mut [Draft]) {
    let uses: Vec<HashSet<String>> = drafts
        .iter()
        .map(|d| match d.role {
            Role::Assistant => ids(&d.blocks, "tool_use", "id"),
            Role::User => HashSet::new(),
        })
        .collect();
    let results: Vec<HashSet<String>> = drafts
        .iter()
        .map(|d| match d.role {
            Role::User => ids(&d.blocks, "tool_result", "tool_use_id"),
            Role::Assistant => HashSet::new(),
        })
        .collect();
    let empty = HashSet::new();
    for (i, draft) in drafts.iter_mut().enumerate() {
        let (kind, key, partners) = match draft.role {
            Role::Assistant => ("tool_use", "id", results.get(i + 1).unwrap_or(&empty)),
            Role::User => (
                "tool_result",
                "tool_use_id",
                i.checked_sub(1).and_then(|p| uses.get(p)).unwrap_or(&empty),
            ),
        };
        let mut kept = HashSet::new();
        for block in &mut draft.blocks {
            if !is_type(block, kind) {
                continue;
            }
            let id = block.get(key).and_then(Value::as_str).unwrap_or_default();
            if !(partners.contains(id) && kept.insert(id.to_owned())) {
                *block = as_text(block);
            }
        }
        if draft.role == Role::User {
            results_first(&mut draft.blocks);
        }
    }
}

/// `text` as the user sees it, or attributed to its sender: `[sender]: text`.
fn attributed(name: Option<&str>, text: &str) -> String {
    match name {
        Some(name) if name != "user" => format!("[{name}]: {text}"),
        _ => text.to_owned(),
    }
}

/// The request body: the model, `max_tokens`, the system prompt, then the plan's messages as
/// alternating user / assistant messages of content blocks (see the module docs).
pub fn request_body(settings: &HttpSettings, request: &ProviderRequest) -> Value {
    let mut drafts: Vec<Draft> = Vec::new();
    for turn in structured_turns(&request.agent, &request.plan, request.status.as_deref()) {
        let has_text = !turn.text.trim().is_empty();
        match turn.role {
            ChatRole::Assistant => {
                let mut blocks = Vec::new();
                if has_text {
                    blocks.push(text_block(&turn.text));
                }
                blocks.extend(turn.tool_calls.iter().flat_map(tool_use_blocks));
                push(&mut drafts, Role::Assistant, blocks);
                // Results recorded with the agent's own message answer its calls: they go in the
                // user message that follows.
                let results = turn.tool_results.iter().map(tool_result_block).collect();
                push(&mut drafts, Role::User, results);
            }
            ChatRole::User => {
                let mut blocks: Vec<Value> =
                    turn.tool_results.iter().map(tool_result_block).collect();
                if has_text {
                    blocks.push(text_block(&attributed(turn.name.as_deref(), &turn.text)));
                }
                // Tool calls in someone else's message are not this model's: described as text.
                for call in &turn.tool_calls {
                    blocks.push(text_block(&attributed(
                        turn.name.as_deref(),
                        &format!(
                            "[tool call {} id={}] {}",
                            call.name, call.id, call.arguments
                        ),
                    )));
                }
                push(&mut drafts, Role::User, blocks);
            }
        }
    }
    pair_tools(&mut drafts);
    if drafts.first().is_none_or(|d| d.role == Role::Assistant) {
        drafts.insert(
            0,
            Draft {
                role: Role::User,
                blocks: vec![text_block(CONTINUES)],
            },
        );
    }
    let breakpoint = cache_control(settings.cache_ttl);
    let tail = volatile_tail(&request.plan, request.status.as_deref()).is_some();
    mark_messages(&mut drafts, &breakpoint, tail);
    let messages: Vec<Value> = drafts
        .into_iter()
        .map(|d| json!({"role": d.role.as_str(), "content": d.blocks}))
        .collect();
    let mut body = json!({
        "model": settings.model,
        "max_tokens": settings.max_output_tokens,
        "messages": messages,
        "stream": settings.stream,
    });
    if !request.system_prompt.trim().is_empty() {
        // A breakpoint goes on a block: the system prompt as a list of one text block.
        let mut system = text_block(&request.system_prompt);
        system["cache_control"] = breakpoint.clone();
        body["system"] = json!([system]);
    }
    if !request.tools.is_empty() {
        let mut tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "description": t.description,
                    "input_schema": t.parameters,
                })
            })
            .collect();
        if let Some(last) = tools.last_mut() {
            last["cache_control"] = breakpoint;
        }
        body["tools"] = Value::Array(tools);
    }
    body
}

/// The `cache_control` of every breakpoint: ephemeral, with a `ttl` when it is not the API's
/// default of five minutes.
fn cache_control(ttl: CacheTtl) -> Value {
    match ttl {
        CacheTtl::FiveMinutes => json!({"type": "ephemeral"}),
        CacheTtl::OneHour => json!({"type": "ephemeral", "ttl": ttl.as_str()}),
    }
}

/// Marks the last block of the last message, and of the message two before it, as cache
/// breakpoints (with the tools' and the system prompt's, at most four in a request). With a
/// volatile `tail` (the notice and status, the request's last block), the block before it takes
/// the last breakpoint: the next request drops the tail, and a breakpoint on it would cache a
/// prefix no later request has.
fn mark_messages(drafts: &mut [Draft], breakpoint: &Value, tail: bool) {
    let previous = drafts.len().checked_sub(3);
    if let Some(index) = previous {
        if let Some(block) = drafts[index].blocks.last_mut() {
            block["cache_control"] = breakpoint.clone();
        }
    }
    let mut blocks = drafts
        .iter_mut()
        .rev()
        .flat_map(|d| d.blocks.iter_mut().rev());
    if tail {
        blocks.next();
    }
    if let Some(block) = blocks.next() {
        block["cache_control"] = breakpoint.clone();
    }
}

// ---------------------------------------------------------------------------------------------
// Response mapping
// ---------------------------------------------------------------------------------------------

/// Folds a `usage` object into `usage`: fields present replace what was there (a stream reports
/// input and cache counts in `message_start`, the cumulative output count in `message_delta`).
fn merge_usage(usage: &mut Option<TokenUsage>, value: Option<&Value>) {
    let Some(value) = value.filter(|v| v.is_object()) else {
        return;
    };
    let u = usage.get_or_insert_with(TokenUsage::default);
    let n = |key: &str| value.get(key).and_then(Value::as_u64);
    if let Some(v) = n("input_tokens") {
        u.input = v;
    }
    if let Some(v) = n("output_tokens") {
        u.output = v;
    }
    if let Some(v) = n("cache_read_input_tokens") {
        u.cache_read = v;
    }
    if let Some(v) = n("cache_creation_input_tokens") {
        u.cache_write = v;
    }
}

/// An `{"type": "error", "error": {"type": ..., "message": ...}}` body or event as an error.
fn api_error(http: &HttpClient, value: &Value) -> Option<ProviderError> {
    let error = value.get("error")?;
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .map_or_else(|| error.to_string(), str::to_owned);
    let message = match error.get("type").and_then(Value::as_str) {
        Some(kind) => format!("{kind}: {message}"),
        None => message,
    };
    Some(ProviderError::Failed {
        message: format!("{}: the provider reported an error: {message}", http.name),
    })
}

/// What a reply carries: its text, usage, and the tool calls the model made.
type Read = (String, Option<TokenUsage>, Vec<ToolCallPart>);

/// A `tool_use` block (its `input` given as JSON text) as a call.
fn tool_call(
    http: &HttpClient,
    block: &Value,
    input: String,
) -> Result<ToolCallPart, ProviderError> {
    let s = |key: &str| block.get(key).and_then(Value::as_str);
    let (Some(id), Some(name)) = (s("id"), s("name")) else {
        return Err(http.malformed(format!("a tool_use block without id or name: {block}")));
    };
    Ok(ToolCallPart {
        id: id.to_owned(),
        name: name.to_owned(),
        arguments: if input.trim().is_empty() {
            "{}".to_owned()
        } else {
            input
        },
    })
}

/// The reply text, usage and tool calls of a non-streamed response: its text blocks joined, its
/// `tool_use` blocks in order.
fn read_body(http: &HttpClient, body: &Value) -> Result<Read, ProviderError> {
    if let Some(e) = api_error(http, body) {
        return Err(e);
    }
    let content = body
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            http.malformed(format!(
                "no content[]: {}",
                http::cut(&body.to_string(), 300)
            ))
        })?;
    check_stop(http, body.get("stop_reason").and_then(Value::as_str))?;
    let mut text = String::new();
    for block in content.iter().filter(|b| is_type(b, "text")) {
        let fragment = block
            .get("text")
            .and_then(Value::as_str)
            .ok_or_else(|| http.malformed(format!("a text block without text: {block}")))?;
        text.push_str(fragment);
    }
    let calls = content
        .iter()
        .filter(|b| is_type(b, "tool_use"))
        .map(|b| {
            let input = b.get("input").map_or_else(String::new, Value::to_string);
            tool_call(http, b, input)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut usage = None;
    merge_usage(&mut usage, body.get("usage"));
    Ok((text, usage, calls))
}

/// A reply cut at `max_tokens` is an error, never a complete reply (a cut `tool_use` would carry
/// arguments that are not JSON).
fn check_stop(http: &HttpClient, reason: Option<&str>) -> Result<(), ProviderError> {
    if reason == Some("max_tokens") {
        return Err(ProviderError::Failed {
            message: format!(
                "{}: the reply was cut at max_tokens ({}; raise max_output_tokens); nothing was recorded",
                http.name, http.settings.max_output_tokens
            ),
        });
    }
    Ok(())
}

/// Reads a stream to `message_stop`, forwarding text fragments to the request's delta sink. A
/// stream that ends before `message_stop`, breaks, carries invalid JSON or an `error` event is an
/// error, never a partial reply.
async fn read_stream(
    http: &HttpClient,
    response: reqwest::Response,
    request: &ProviderRequest,
) -> Result<Read, ProviderError> {
    let mut events = http::JsonEvents::new(http, response);
    let mut reply = StreamedReply::new(request);
    while let Some(event) = events.next().await? {
        let http::JsonEvent::Json { kind, value } = event else {
            return Err(http.malformed("an unexpected [DONE] in the stream"));
        };
        match kind.as_str() {
            "message_start" => merge_usage(&mut reply.usage, value.pointer("/message/usage")),
            "content_block_start" => reply.block_start(&value),
            "content_block_delta" => reply.block_delta(http, &value)?,
            "message_delta" => {
                merge_usage(&mut reply.usage, value.get("usage"));
                check_stop(
                    http,
                    value.pointer("/delta/stop_reason").and_then(Value::as_str),
                )?;
            }
            "message_stop" => return reply.finish(http),
            "error" => {
                return Err(api_error(http, &value)
                    .unwrap_or_else(|| http.malformed(format!("an error event: {value}"))))
            }
            // `ping`, `content_block_stop` and event types added later carry nothing we read.
            _ => {}
        }
    }
    Err(http.malformed("the stream ended before message_stop"))
}

/// A streamed reply as its events arrive: the text (each fragment also sent to the request's
/// delta sink), the usage, and the tool-use blocks by content index with their input's JSON
/// fragments. Thinking is progress only: it never joins the reply.
struct StreamedReply<'a> {
    request: &'a ProviderRequest,
    text: String,
    usage: Option<TokenUsage>,
    calls: Vec<(u64, Value, String)>,
}

impl<'a> StreamedReply<'a> {
    fn new(request: &'a ProviderRequest) -> Self {
        Self {
            request,
            text: String::new(),
            usage: None,
            calls: Vec::new(),
        }
    }

    fn emit(&mut self, fragment: &str) {
        if fragment.is_empty() {
            return;
        }
        self.text.push_str(fragment);
        if let Some(sink) = &self.request.deltas {
            let _ = sink.send(StreamDelta::Text(fragment.to_owned()));
        }
    }

    fn think(&self, fragment: Option<&str>) {
        if let (Some(sink), Some(fragment)) =
            (&self.request.deltas, fragment.filter(|f| !f.is_empty()))
        {
            let _ = sink.send(StreamDelta::Thinking(fragment.to_owned()));
        }
    }

    /// `content_block_start`: a tool use (its whole input when not empty), thinking or text.
    fn block_start(&mut self, value: &Value) {
        let block = value.get("content_block").unwrap_or(&Value::Null);
        if is_type(block, "tool_use") {
            let index = value.get("index").and_then(Value::as_u64).unwrap_or(0);
            // A non-empty `input` here is the whole input (deltas would follow otherwise).
            let input = block
                .get("input")
                .filter(|i| i.as_object().is_some_and(|o| !o.is_empty()))
                .map_or_else(String::new, Value::to_string);
            self.calls.push((index, block.clone(), input));
        }
        if is_type(block, "thinking") {
            self.think(block.get("thinking").and_then(Value::as_str));
        }
        if is_type(block, "text") {
            self.emit(
                block
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
            );
        }
    }

    /// `content_block_delta`: text, thinking, or a fragment of a tool use's input.
    fn block_delta(&mut self, http: &HttpClient, value: &Value) -> Result<(), ProviderError> {
        let delta = value.get("delta").unwrap_or(&Value::Null);
        if is_type(delta, "text_delta") {
            let fragment = delta.get("text").and_then(Value::as_str).ok_or_else(|| {
                http.malformed(format!(
                    "a text_delta without text: {}",
                    http::cut(&value.to_string(), 200)
                ))
            })?;
            self.emit(fragment);
        }
        if is_type(delta, "thinking_delta") {
            self.think(delta.get("thinking").and_then(Value::as_str));
        }
        if is_type(delta, "input_json_delta") {
            let index = value.get("index").and_then(Value::as_u64).unwrap_or(0);
            let fragment = delta
                .get("partial_json")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let call = self.calls.iter_mut().rev().find(|(i, _, _)| *i == index);
            let Some((_, _, input)) = call else {
                return Err(http.malformed(format!(
                    "an input_json_delta for block {index}, which is no tool_use"
                )));
            };
            input.push_str(fragment);
        }
        Ok(())
    }

    /// `message_stop`: the reply, with its tool calls parsed.
    fn finish(self, http: &HttpClient) -> Result<Read, ProviderError> {
        let calls = self
            .calls
            .into_iter()
            .map(|(_, block, input)| tool_call(http, &block, input))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((self.text, self.usage, calls))
    }
}

/// A token estimate when the server reported no usage (Claude's tokenizer is not public).
fn estimate(body: &Value, text: &str) -> TokenUsage {
    let mut input = String::new();
    for block in body["system"].as_array().into_iter().flatten() {
        input.push_str(block["text"].as_str().unwrap_or_default());
    }
    for block in body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_array())
        .flatten()
    {
        input.push('\n');
        match block["type"].as_str() {
            Some("text") => input.push_str(block["text"].as_str().unwrap_or_default()),
            Some("tool_result") => input.push_str(block["content"].as_str().unwrap_or_default()),
            _ => input.push_str(&block.to_string()),
        }
    }
    TokenUsage {
        input: estimate_tokens(&input),
        output: estimate_tokens(text),
        ..TokenUsage::default()
    }
}
