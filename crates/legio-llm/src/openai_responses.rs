//! `openai-responses`: the OpenAI Responses API, session-stateful and resumable. The provider
//! keeps the conversation (`store: true`); a turn continues it with `previous_response_id` and
//! sends only the new input (the delta the runtime planned), never history the provider already
//! holds. The new response id is the provider session the runtime stores in the log, so a process
//! restart resumes it. When the provider no longer knows the id (404, `previous_response_not_found`)
//! the call answers `SessionLost` and the runtime bootstraps a new session from the log.
//!
//! Tools: the request's tools go in `tools` (`type: function`, flat `name`, `description`,
//! `parameters`); the model's calls are `function_call` output items whose `call_id` is the id
//! the runtime records. When a session is continued, the agent's own tool results in the delta
//! go back as `function_call_output` input items with that `call_id` (before the text of
//! anything else); in a new session's bootstrap they are part of the text block, since the new
//! response holds no call for them to answer.
//!
//! Prompt caching: every request carries a `prompt_cache_key` for its conversation and agent
//! ([`http::prompt_cache_key`], unless the `prompt_cache_key` setting is off), so one agent's
//! requests reach the same cache; `usage.input_tokens_details.cached_tokens` is mapped to
//! `TokenUsage::cache_read` (and taken out of `input`, which OpenAI's count includes it in).

use legio_core::{estimate_tokens_for_model, ContextPlan, History, Part, Participant, TokenUsage};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::http::{self, Auth, BuildError, HttpClient, HttpFailure};
use crate::provider::{
    Capabilities, Provider, ProviderError, ProviderFuture, ProviderReply, ProviderRequest,
    StreamDelta,
};
use crate::render::{bootstrap_block, ToolCallPart, ToolResultPart};
use crate::settings::HttpSettings;

/// The Responses provider.
#[derive(Debug)]
pub struct OpenAiResponses {
    http: HttpClient,
}

impl OpenAiResponses {
    /// A provider named `name` in the configuration.
    pub fn new(name: &str, settings: HttpSettings) -> Result<Self, BuildError> {
        Ok(Self {
            http: HttpClient::new(name, settings, Auth::Bearer, &[])?,
        })
    }

    async fn run(&self, request: ProviderRequest) -> Result<ProviderReply, ProviderError> {
        let body = request_body(&self.http.settings, &request);
        let lost = || ProviderError::SessionLost {
            session: request.resume.clone().unwrap_or_default(),
        };
        let response = match self.http.post_json("responses", &body).await {
            Ok(response) => response,
            Err(HttpFailure::Status { status, body })
                if request
                    .resume
                    .as_deref()
                    .is_some_and(|previous| is_lost(status, &body, previous)) =>
            {
                return Err(lost());
            }
            Err(failure) => return Err(self.http.error(failure)),
        };
        let done = if self.http.settings.stream {
            read_stream(&self.http, response, &request).await
        } else {
            let body = http::json_body(response)
                .await
                .map_err(|e| self.http.malformed(e))?;
            read_response(&self.http, &body)
        };
        let (id, text, usage, tool_calls) = match done {
            Err(Failed::Lost) if request.resume.is_some() => return Err(lost()),
            Err(Failed::Lost) => {
                return Err(self.http.malformed(
                    "the provider reported an unknown previous response on a new session",
                ))
            }
            Err(Failed::Other(e)) => return Err(e),
            Ok(done) => done,
        };
        self.http.record_ok();
        let usage = usage.unwrap_or_else(|| TokenUsage {
            input: estimate_tokens_for_model(&self.http.settings.model, &input_text(&body)),
            output: estimate_tokens_for_model(&self.http.settings.model, &text),
            ..TokenUsage::default()
        });
        Ok(ProviderReply {
            text,
            usage: Some(usage),
            provider_session: Some(id),
            tool_calls,
        })
    }
}

impl Provider for OpenAiResponses {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            history: History::Session { resumable: true },
            context_window: self.http.settings.context_window,
            tools: true,
        }
    }

    fn call(&self, request: ProviderRequest) -> ProviderFuture<'_> {
        Box::pin(self.run(request))
    }
}

/// The request body: the instructions (sent every turn: the API does not carry them over), the
/// previous response to continue if any, and one input item holding what the plan says the
/// session has not seen (a bootstrap of the history for a new session, only the delta when
/// resuming), followed by the new message; the `prompt_cache_key` when on.
pub fn request_body(settings: &HttpSettings, request: &ProviderRequest) -> Value {
    let mut input = Vec::new();
    let text = if request.resume.is_some() {
        let (plan, results) = split_own_results(request);
        input.extend(results.iter().map(|r| {
            json!({
                "type": "function_call_output",
                "call_id": r.call_id,
                "output": if r.is_error { format!("error: {}", r.content) } else { r.content.clone() },
            })
        }));
        bootstrap_block(&plan, request.status.as_deref())
    } else {
        bootstrap_block(&request.plan, request.status.as_deref())
    };
    if input.is_empty() || !text.trim().is_empty() {
        input.push(json!({
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": text}],
        }));
    }
    let mut body = json!({
        "model": settings.model,
        "instructions": request.system_prompt,
        "input": input,
        "store": true,
        "stream": settings.stream,
        "max_output_tokens": settings.max_output_tokens,
    });
    if let Some(previous) = &request.resume {
        body["previous_response_id"] = json!(previous);
    }
    if settings.prompt_cache_key {
        // Per conversation and agent, not per response: `previous_response_id` changes every turn.
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
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                })
            })
            .collect();
    }
    body
}

/// The plan without the agent's own tool results (they go as `function_call_output` items), and
/// those results in order. A message left with no part is left out; the new message is kept
/// with empty text.
fn split_own_results(request: &ProviderRequest) -> (ContextPlan, Vec<ToolResultPart>) {
    let me = Participant::Agent(request.agent.clone());
    let mut plan = request.plan.clone();
    let mut results = Vec::new();
    let mut take = |item: &mut legio_core::ContextItem| {
        if item.message.sender != me {
            return;
        }
        item.message.parts.retain(|p| match p {
            Part::ToolResult {
                call_id,
                content,
                is_error,
            } => {
                results.push(ToolResultPart {
                    call_id: call_id.clone(),
                    content: content.clone(),
                    is_error: *is_error,
                });
                false
            }
            _ => true,
        });
    };
    for item in &mut plan.history {
        take(item);
    }
    take(&mut plan.new_message);
    plan.history.retain(|i| !i.message.parts.is_empty());
    (plan, results)
}

fn input_text(body: &Value) -> String {
    let mut text = body["instructions"].as_str().unwrap_or_default().to_owned();
    for item in body["input"].as_array().into_iter().flatten() {
        if let Some(output) = item["output"].as_str() {
            text.push('\n');
            text.push_str(output);
        }
        for part in item["content"].as_array().into_iter().flatten() {
            text.push('\n');
            text.push_str(part["text"].as_str().unwrap_or_default());
        }
    }
    text
}

/// Whether an error answer says the previous response (`previous`) is gone: its error code, or a
/// 404 that names the id. A 404 that does not (a wrong base_url or model) is a plain error, so a
/// misconfiguration never closes a session.
fn is_lost(status: StatusCode, body: &str, previous: &str) -> bool {
    body.contains("previous_response_not_found")
        || (status == StatusCode::NOT_FOUND && body.contains(previous))
}

enum Failed {
    Lost,
    Other(ProviderError),
}

impl From<ProviderError> for Failed {
    fn from(e: ProviderError) -> Self {
        Self::Other(e)
    }
}

fn usage_of(response: &Value) -> Option<TokenUsage> {
    let usage = response.get("usage").filter(|u| u.is_object())?;
    let n = |p: &str| usage.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    // OpenAI's input count includes its cache reads; `TokenUsage::input` does not.
    let cached = n("/input_tokens_details/cached_tokens");
    Some(TokenUsage {
        input: n("/input_tokens").saturating_sub(cached),
        output: n("/output_tokens"),
        cache_read: cached,
        cache_write: 0,
    })
}

fn error_of(http: &HttpClient, error: &Value) -> Failed {
    let code = error.get("code").and_then(Value::as_str).unwrap_or("");
    if code == "previous_response_not_found" {
        return Failed::Lost;
    }
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .map_or_else(|| error.to_string(), str::to_owned);
    Failed::Other(ProviderError::Failed {
        message: format!("{}: the provider reported an error: {message}", http.name),
    })
}

/// What a finished response carries: its id, text, usage and the tool calls the model made.
type Done = (String, String, Option<TokenUsage>, Vec<ToolCallPart>);

/// The id, text, usage and tool calls (`function_call` items) of a finished response object.
fn read_response(http: &HttpClient, response: &Value) -> Result<Done, Failed> {
    if let Some(error) = response.get("error").filter(|e| !e.is_null()) {
        return Err(error_of(http, error));
    }
    let id = response
        .get("id")
        .and_then(Value::as_str)
        .ok_or_else(|| http.malformed("the response has no id"))?;
    match response.get("status").and_then(Value::as_str) {
        Some("completed") | None => {}
        Some(other) => {
            let why = response
                .pointer("/incomplete_details/reason")
                .and_then(Value::as_str)
                .unwrap_or("no reason given");
            return Err(http
                .malformed(format!("the response is {other} ({why})"))
                .into());
        }
    }
    let output = response
        .get("output")
        .and_then(Value::as_array)
        .ok_or_else(|| http.malformed("the response has no output"))?;
    let mut text = String::new();
    for item in output.iter().filter(|i| i["type"] == "message") {
        for part in item["content"].as_array().into_iter().flatten() {
            if part["type"] == "output_text" {
                text.push_str(part["text"].as_str().unwrap_or_default());
            }
        }
    }
    let mut calls = Vec::new();
    for item in output.iter().filter(|i| i["type"] == "function_call") {
        let (Some(call_id), Some(name)) = (item["call_id"].as_str(), item["name"].as_str()) else {
            return Err(http
                .malformed(format!("a function_call without call_id or name: {item}"))
                .into());
        };
        calls.push(ToolCallPart {
            id: call_id.to_owned(),
            name: name.to_owned(),
            arguments: item["arguments"].as_str().unwrap_or("{}").to_owned(),
        });
    }
    Ok((id.to_owned(), text, usage_of(response), calls))
}

/// Reads a stream to `response.completed`, forwarding text deltas. A stream that ends before it,
/// breaks, or carries invalid JSON is an error, never a partial reply.
async fn read_stream(
    http: &HttpClient,
    response: reqwest::Response,
    request: &ProviderRequest,
) -> Result<Done, Failed> {
    let mut events = http::JsonEvents::new(http, response);
    while let Some(event) = events.next().await? {
        let http::JsonEvent::Json { kind, value } = event else {
            return Err(http.malformed("an unexpected [DONE] in the stream").into());
        };
        match kind.as_str() {
            "response.output_text.delta" => {
                if let (Some(sink), Some(delta)) = (&request.deltas, value["delta"].as_str()) {
                    let _ = sink.send(StreamDelta::Text(delta.to_owned()));
                }
            }
            // Reasoning, where the model shares it (its text or its summary): progress only.
            "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
                if let (Some(sink), Some(delta)) = (&request.deltas, value["delta"].as_str()) {
                    let _ = sink.send(StreamDelta::Thinking(delta.to_owned()));
                }
            }
            "response.completed" => return read_response(http, &value["response"]),
            "response.failed" | "response.incomplete" => {
                let response = &value["response"];
                if let Some(error) = response.get("error").filter(|e| !e.is_null()) {
                    return Err(error_of(http, error));
                }
                return read_response(http, response);
            }
            "error" => return Err(error_of(http, value.get("error").unwrap_or(&value))),
            _ => {}
        }
    }
    Err(http
        .malformed("the stream ended before response.completed")
        .into())
}
