//! `openai-chat`: the OpenAI-compatible Chat Completions API (OpenAI, Ollama, llama.cpp, vLLM,
//! OpenRouter). Stateless: every turn sends the system prompt and the planned history. Messages
//! carry names, `tool_calls` and `tool_call_id`; streaming is SSE with usage requested in the
//! stream and `[DONE]` as the terminal event. The request's tools go in `tools` (`type:
//! function`); the model's calls come back in `message.tool_calls`, or streamed as
//! `delta.tool_calls` fragments accumulated by `index`. Every request carries a
//! `prompt_cache_key` for its conversation and agent ([`http::prompt_cache_key`], unless the
//! `prompt_cache_key` setting is off), so one agent's requests reach the same prompt cache; the
//! cached part of the prompt comes back as `usage.prompt_tokens_details.cached_tokens`, mapped to
//! `TokenUsage::cache_read` (and taken out of `input`, which OpenAI's count includes it in).

use legio_core::{estimate_tokens_for_model, exact_tokens_for_model, History, TokenUsage};
use serde_json::{json, Value};

use crate::http::{self, Auth, BuildError, HttpClient};
use crate::provider::{
    Capabilities, Provider, ProviderError, ProviderFuture, ProviderReply, ProviderRequest,
    StreamDelta,
};
use crate::render::{structured_turns, ChatRole, ToolCallPart};
use crate::settings::{is_openai_api, HttpSettings};

/// The Chat Completions provider.
#[derive(Debug)]
pub struct OpenAiChat {
    http: HttpClient,
}

impl OpenAiChat {
    /// A provider named `name` in the configuration.
    pub fn new(name: &str, settings: HttpSettings) -> Result<Self, BuildError> {
        Ok(Self {
            http: HttpClient::new(name, settings, Auth::Bearer, &[])?,
        })
    }

    async fn run(&self, request: ProviderRequest) -> Result<ProviderReply, ProviderError> {
        let body = request_body(&self.http.settings, &request);
        let request_tokens = || request_tokens(&self.http.settings.model, &body);
        let response = self
            .http
            .post_json("chat/completions", &body)
            .await
            .map_err(|f| self.http.error_for(f, Some(request_tokens())))?;
        let (text, usage, tool_calls) = if body["stream"] == Value::Bool(true) {
            read_stream(&self.http, response, &request, request_tokens()).await?
        } else {
            let body = http::json_body(response)
                .await
                .map_err(|e| self.http.malformed(e))?;
            read_body(&self.http, &body)?
        };
        if text.trim().is_empty() && tool_calls.is_empty() {
            return Err(ProviderError::Failed {
                message: format!(
                    "{}: the reply is empty (no text and no tool call); nothing was recorded",
                    self.http.name
                ),
            });
        }
        self.http.record_ok();
        // A server that reports no usage (llama-cpp-python's streams): counted exactly where
        // the model's vocabulary is known, otherwise none (the runtime estimates it, and never
        // calibrates against its own estimate).
        let usage = usage.or_else(|| exact_usage(&self.http.settings.model, &body, &text));
        Ok(ProviderReply {
            text,
            usage,
            provider_session: None,
            tool_calls,
        })
    }
}

impl Provider for OpenAiChat {
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

/// The request body: the system prompt, then the plan's messages mapped to Chat Completions
/// messages (the agent's own as `assistant` with its `tool_calls`, everyone else's as `user`
/// with the sender's `name`, and with `[sender]: ` in front of the text when
/// `sender_labels` is on; tool results as `tool` messages with their `tool_call_id`), the
/// output limit, the `prompt_cache_key` (when on), and the tools with `tool_choice: "auto"`
/// (non-streamed when `stream_tools` is off).
pub fn request_body(settings: &HttpSettings, request: &ProviderRequest) -> Value {
    let messages = messages(settings, request);
    let stream = settings.stream && (settings.stream_tools || request.tools.is_empty());
    let mut body = json!({
        "model": settings.model,
        "messages": messages,
        "stream": stream,
    });
    // OpenAI's own API wants `max_completion_tokens` (its reasoning models refuse `max_tokens`);
    // compatible servers (llama.cpp, Ollama, vLLM) read `max_tokens`.
    let limit_field = if is_openai_api(&settings.base_url) {
        "max_completion_tokens"
    } else {
        "max_tokens"
    };
    body[limit_field] = json!(settings.max_output_tokens);
    if stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    if settings.prompt_cache_key {
        body["prompt_cache_key"] = json!(http::prompt_cache_key(
            &request.conversation,
            &request.agent
        ));
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                })
            })
            .collect();
        // Explicit: some servers read a missing `tool_choice` as "none".
        body["tool_choice"] = json!("auto");
    }
    body
}

/// The user text of another sender's turn: labelled `[sender]: text` when asked (the user's
/// own text goes as it is).
fn labelled(settings: &HttpSettings, name: Option<&str>, text: &str) -> String {
    match name {
        Some(name) if settings.sender_labels && name != "user" => format!("[{name}]: {text}"),
        _ => text.to_owned(),
    }
}

fn messages(settings: &HttpSettings, request: &ProviderRequest) -> Vec<Value> {
    let mut messages = vec![json!({"role": "system", "content": request.system_prompt})];
    for turn in structured_turns(&request.agent, &request.plan, request.status.as_deref()) {
        for result in &turn.tool_results {
            let content = if result.is_error {
                format!("error: {}", result.content)
            } else {
                result.content.clone()
            };
            messages.push(json!({
                "role": "tool",
                "tool_call_id": result.call_id,
                "content": content,
            }));
        }
        match turn.role {
            ChatRole::Assistant => {
                if turn.text.is_empty() && turn.tool_calls.is_empty() {
                    continue;
                }
                let mut message = json!({"role": "assistant", "content": turn.text});
                if !turn.tool_calls.is_empty() {
                    message["tool_calls"] = turn
                        .tool_calls
                        .iter()
                        .map(|c| {
                            json!({
                                "id": c.id,
                                "type": "function",
                                "function": {"name": c.name, "arguments": c.arguments},
                            })
                        })
                        .collect();
                }
                messages.push(message);
            }
            ChatRole::User => {
                if turn.text.is_empty() {
                    continue;
                }
                let content = labelled(settings, turn.name.as_deref(), &turn.text);
                let mut message = json!({"role": "user", "content": content});
                if let Some(name) = &turn.name {
                    message["name"] = json!(name);
                }
                messages.push(message);
            }
        }
    }
    messages
}

fn usage_of(value: &Value) -> Option<TokenUsage> {
    let usage = value.get("usage").filter(|u| u.is_object())?;
    let n = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
    let cached = n(usage.pointer("/prompt_tokens_details/cached_tokens"));
    // OpenAI's prompt count includes its cache reads; `TokenUsage::input` does not.
    Some(TokenUsage {
        input: n(usage.get("prompt_tokens")).saturating_sub(cached),
        output: n(usage.get("completion_tokens")),
        cache_read: cached,
        cache_write: 0,
    })
}

fn api_error(http: &HttpClient, value: &Value) -> Option<ProviderError> {
    let error = value.get("error")?;
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .map_or_else(|| error.to_string(), str::to_owned);
    Some(ProviderError::Failed {
        message: format!("{}: the provider reported an error: {message}", http.name),
    })
}

/// What a reply carries: its text, usage, and the tool calls the model made.
type Read = (String, Option<TokenUsage>, Vec<ToolCallPart>);

/// A `tool_calls` entry of a message as a call; one without an id or a name is malformed.
fn tool_call(http: &HttpClient, value: &Value) -> Result<ToolCallPart, ProviderError> {
    let s = |p: &str| value.pointer(p).and_then(Value::as_str);
    let (Some(id), Some(name)) = (s("/id"), s("/function/name")) else {
        return Err(http.malformed(format!("a tool call without id or name: {value}")));
    };
    Ok(ToolCallPart {
        id: id.to_owned(),
        name: name.to_owned(),
        arguments: s("/function/arguments").unwrap_or("{}").to_owned(),
    })
}

/// The reply text, usage and tool calls of a non-streamed response.
fn read_body(http: &HttpClient, body: &Value) -> Result<Read, ProviderError> {
    if let Some(e) = api_error(http, body) {
        return Err(e);
    }
    check_finish(
        http,
        body.pointer("/choices/0/finish_reason")
            .and_then(Value::as_str),
    )?;
    let message = body
        .pointer("/choices/0/message")
        .ok_or_else(|| http.malformed("no choices[0].message"))?;
    let text = match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => return Err(http.malformed(format!("content is not text: {other}"))),
    };
    let calls = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| tool_call(http, c))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((text, usage_of(body), calls))
}

/// A reply the provider cut (`length`: the output limit; `content_filter`) is an error, never a
/// complete reply.
fn check_finish(http: &HttpClient, reason: Option<&str>) -> Result<(), ProviderError> {
    match reason {
        Some("length") => Err(ProviderError::Failed {
            message: format!(
                "{}: the reply was cut at the model's output limit (finish_reason \"length\"); nothing was recorded",
                http.name
            ),
        }),
        Some("content_filter") => Err(ProviderError::Failed {
            message: format!(
                "{}: the provider's content filter cut the reply (finish_reason \"content_filter\")",
                http.name
            ),
        }),
        _ => Ok(()),
    }
}

/// The most tool calls one streamed reply may carry (a bound on the provider's `index`).
const MAX_STREAMED_CALLS: usize = 128;

/// A tool call being streamed: `delta.tool_calls` fragments of one `index` (the id and name
/// arrive first, the arguments in pieces).
#[derive(Default)]
struct StreamedCall {
    id: String,
    name: String,
    arguments: String,
}

fn accumulate_calls(
    http: &HttpClient,
    calls: &mut Vec<StreamedCall>,
    fragments: &[Value],
) -> Result<(), ProviderError> {
    for (position, fragment) in fragments.iter().enumerate() {
        let index = fragment
            .get("index")
            .and_then(Value::as_u64)
            .map_or(Some(position), |i| usize::try_from(i).ok())
            .filter(|i| *i < MAX_STREAMED_CALLS)
            .ok_or_else(|| http.malformed("a streamed tool call with an out-of-range index"))?;
        if calls.len() <= index {
            calls.resize_with(index + 1, StreamedCall::default);
        }
        let call = &mut calls[index];
        let s = |p: &str| fragment.pointer(p).and_then(Value::as_str);
        // The id and name arrive whole (some servers repeat them in every fragment); the
        // arguments arrive in pieces.
        if let Some(id) = s("/id").filter(|id| !id.is_empty()) {
            if call.id.is_empty() {
                call.id = id.to_owned();
            }
        }
        if let Some(name) = s("/function/name").filter(|n| !n.is_empty()) {
            if call.name.is_empty() {
                call.name = name.to_owned();
            }
        }
        if let Some(arguments) = s("/function/arguments") {
            call.arguments.push_str(arguments);
        }
    }
    Ok(())
}

fn finish_calls(
    http: &HttpClient,
    calls: Vec<StreamedCall>,
) -> Result<Vec<ToolCallPart>, ProviderError> {
    calls
        .into_iter()
        .filter(|c| !(c.id.is_empty() && c.name.is_empty() && c.arguments.is_empty()))
        .map(|c| {
            if c.id.is_empty() || c.name.is_empty() {
                return Err(http.malformed("a streamed tool call without id or name"));
            }
            Ok(ToolCallPart {
                id: c.id,
                name: c.name,
                arguments: if c.arguments.is_empty() {
                    "{}".to_owned()
                } else {
                    c.arguments
                },
            })
        })
        .collect()
}

/// Reads a stream to `[DONE]`, forwarding text fragments to the request's delta sink. A stream
/// that ends before `[DONE]`, breaks, or carries invalid JSON is an error, never a partial reply.
async fn read_stream(
    http: &HttpClient,
    response: reqwest::Response,
    request: &ProviderRequest,
    request_tokens: u64,
) -> Result<Read, ProviderError> {
    let mut events = http::JsonEvents::new(http, response);
    let (mut text, mut usage) = (String::new(), None);
    let mut calls: Vec<StreamedCall> = Vec::new();
    let mut finished = false;
    while let Some(event) = events.next().await? {
        let chunk = match event {
            http::JsonEvent::Done if finished => {
                return Ok((text, usage, finish_calls(http, calls)?))
            }
            http::JsonEvent::Done => return Err(stopped_early(http, &text)),
            http::JsonEvent::Json { value, .. } => value,
        };
        finished |= chunk
            .pointer("/choices/0/finish_reason")
            .is_some_and(Value::is_string);
        if let Some(e) = api_error(http, &chunk) {
            return Err(e);
        }
        if let Some(u) = usage_of(&chunk) {
            usage = Some(u);
        }
        if let Some(fragments) = chunk
            .pointer("/choices/0/delta/tool_calls")
            .and_then(Value::as_array)
        {
            accumulate_calls(http, &mut calls, fragments)?;
        }
        check_finish(
            http,
            chunk
                .pointer("/choices/0/finish_reason")
                .and_then(Value::as_str),
        )?;
        if let Some(fragment) = chunk
            .pointer("/choices/0/delta/content")
            .and_then(Value::as_str)
        {
            if !fragment.is_empty() {
                text.push_str(fragment);
                if let Some(sink) = &request.deltas {
                    let _ = sink.send(StreamDelta::Text(fragment.to_owned()));
                }
            }
        }
        forward_reasoning(&chunk, request);
    }
    Err(ended_early(
        http,
        events.seen,
        request_tokens,
        !request.tools.is_empty(),
    ))
}

/// Reasoning a server streams beside the text (`reasoning_content`: llama.cpp, vLLM, DeepSeek;
/// `reasoning`: OpenRouter, Ollama) goes to the delta sink as thinking: progress, never the reply.
fn forward_reasoning(chunk: &Value, request: &ProviderRequest) {
    let Some(sink) = &request.deltas else { return };
    for key in ["reasoning_content", "reasoning"] {
        let fragment = chunk
            .pointer(&format!("/choices/0/delta/{key}"))
            .and_then(Value::as_str)
            .filter(|f| !f.is_empty());
        if let Some(fragment) = fragment {
            let _ = sink.send(StreamDelta::Thinking(fragment.to_owned()));
        }
    }
}

/// `[DONE]` without a `finish_reason`: the server stopped the reply (llama.cpp's server does when
/// another request waits for the model); what arrived is not a reply.
fn stopped_early(http: &HttpClient, text: &str) -> ProviderError {
    let got = if text.is_empty() {
        "no text".to_owned()
    } else {
        format!("{} characters of text", text.chars().count())
    };
    ProviderError::Failed {
        message: format!(
            "{}: the server ended the stream without finishing the reply (no finish_reason, {got}); it was interrupted, often because another request was waiting for the same model; nothing was recorded",
            http.name
        ),
    }
}

/// A stream that closed before `[DONE]` with no error event: say so, with what the server
/// likely refused when the request was large.
fn ended_early(http: &HttpClient, seen: usize, request_tokens: u64, tools: bool) -> ProviderError {
    let window = http.settings.context_window;
    let hint = if tools && seen == 0 {
        "; the request offered tools and was streamed: a server that cannot stream tool calls (llama-cpp-python) ends such a stream at once, set stream_tools = false for this provider; see the server's log".to_owned()
    } else if request_tokens.saturating_mul(10) >= window.saturating_mul(7) {
        format!(
            "; the request was large ({}), a server may abort a stream it cannot fit: see the server's log",
            http.overflow_hint(Some(request_tokens))
        )
    } else {
        "; the server sent no error: see the server's log".to_owned()
    };
    http.malformed(format!(
        "the stream ended before [DONE] after {seen} events{hint}"
    ))
}

fn request_text(body: &Value) -> String {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A token estimate of the request, with the model's own vocabulary when it is an OpenAI model.
fn request_tokens(model: &str, body: &Value) -> u64 {
    estimate_tokens_for_model(model, &request_text(body))
}

/// Usage counted with the model's own vocabulary, when tiktoken knows it.
fn exact_usage(model: &str, body: &Value, text: &str) -> Option<TokenUsage> {
    Some(TokenUsage {
        input: exact_tokens_for_model(model, &request_text(body))?,
        output: exact_tokens_for_model(model, text)?,
        ..TokenUsage::default()
    })
}
