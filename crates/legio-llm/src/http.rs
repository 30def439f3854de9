//! What the HTTP providers share: the client (connect and per-read timeouts, never one total
//! deadline), the API key from its environment variable, retries with backoff and jitter, errors
//! that say what to check, and server-sent events read to their terminal event.

use std::time::Duration;

use backon::BackoffBuilder;
use eventsource_stream::Eventsource;
use futures_util::{Stream, StreamExt};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use reqwest::StatusCode;

use legio_core::{AgentName, ConversationKey};

use crate::provider::ProviderError;
use crate::settings::HttpSettings;

/// Metric names of the HTTP providers.
pub mod metric {
    /// Retries, by provider and cause (`429`, `5xx`, `connect`, `timeout`, `reset`).
    pub const RETRIES: &str = "legio_provider_retries_total";
    /// Requests, by provider and outcome (`ok`, `error`).
    pub const REQUESTS: &str = "legio_provider_requests_total";
}

/// The longest `Retry-After` honoured; a server asking for more gets this.
pub const RETRY_AFTER_CEILING: Duration = Duration::from_secs(120);

/// Why building a provider failed.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum BuildError {
    /// The configured key variable is not set.
    #[error(
        "providers.{provider}: the environment variable {variable} (api_key_env) is not set; export it with the API key, or remove api_key_env for a local server that needs no key"
    )]
    MissingKey {
        /// The provider's name in the configuration.
        provider: String,
        /// The variable's name.
        variable: String,
    },
    /// Anything else about the settings.
    #[error("providers.{provider}: {message}")]
    Invalid {
        /// The provider's name in the configuration.
        provider: String,
        /// What is wrong.
        message: String,
    },
}

/// How a provider authenticates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Auth {
    /// `Authorization: Bearer KEY` (OpenAI and compatible servers).
    Bearer,
    /// `x-api-key: KEY` (Anthropic).
    ApiKeyHeader,
}

/// An HTTP client for one configured provider.
#[derive(Clone)]
pub struct HttpClient {
    /// The provider's name in the configuration (for metrics, traces and errors).
    pub name: String,
    /// Its settings.
    pub settings: HttpSettings,
    client: reqwest::Client,
    headers: HeaderMap,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the headers: they hold the key.
        f.debug_struct("HttpClient")
            .field("name", &self.name)
            .field("base_url", &self.settings.base_url)
            .field("model", &self.settings.model)
            .finish_non_exhaustive()
    }
}

/// A request that did not succeed.
#[derive(Debug)]
pub enum HttpFailure {
    /// The server answered with an error status (after any retries).
    Status {
        /// The status.
        status: StatusCode,
        /// The body (cut to a readable length).
        body: String,
    },
    /// No answer: connection, timeout, or a body that could not be read.
    Transport(String),
}

impl HttpClient {
    /// A client for `settings`, reading the key from `settings.api_key_env` now (a missing
    /// variable is an error naming it). `extra` headers go on every request.
    pub fn new(
        name: &str,
        settings: HttpSettings,
        auth: Auth,
        extra: &[(&'static str, &str)],
    ) -> Result<Self, BuildError> {
        let invalid = |message: String| BuildError::Invalid {
            provider: name.to_owned(),
            message,
        };
        if !(settings.base_url.starts_with("http://") || settings.base_url.starts_with("https://"))
        {
            return Err(invalid(format!(
                "base_url {:?} must start with http:// or https:// and include the version path (e.g. https://api.openai.com/v1)",
                settings.base_url
            )));
        }
        if settings.model.trim().is_empty() {
            return Err(invalid("model is empty".into()));
        }
        let mut headers = HeaderMap::new();
        if let Some(variable) = &settings.api_key_env {
            let key = std::env::var(variable)
                .ok()
                .filter(|k| !k.trim().is_empty());
            let Some(key) = key else {
                return Err(BuildError::MissingKey {
                    provider: name.to_owned(),
                    variable: variable.clone(),
                });
            };
            let (header, value) = match auth {
                Auth::Bearer => ("authorization", format!("Bearer {}", key.trim())),
                Auth::ApiKeyHeader => ("x-api-key", key.trim().to_owned()),
            };
            let mut value = HeaderValue::from_str(&value).map_err(|_| {
                invalid(format!(
                    "the key in {variable} has characters a header cannot carry"
                ))
            })?;
            value.set_sensitive(true);
            headers.insert(HeaderName::from_static(header), value);
        }
        for (header, value) in extra {
            let value = HeaderValue::from_str(value)
                .map_err(|_| invalid(format!("header {header} has a bad value")))?;
            headers.insert(HeaderName::from_static(header), value);
        }
        let client = reqwest::Client::builder()
            .connect_timeout(settings.connect_timeout)
            .read_timeout(settings.read_timeout)
            .build()
            .map_err(|e| invalid(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            name: name.to_owned(),
            settings,
            client,
            headers,
        })
    }

    /// POSTs `body` as JSON to `path` under the base URL, retrying on 429, 5xx and connection
    /// failures with backoff and jitter (a `Retry-After` in seconds is honoured, up to
    /// [`RETRY_AFTER_CEILING`]). Returns the first successful response, or the last failure.
    pub async fn post_json(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<reqwest::Response, HttpFailure> {
        let url = self.settings.url(path);
        let bytes = serde_json::to_vec(body).map_err(|e| HttpFailure::Transport(e.to_string()))?;
        let retry = self.settings.retry;
        let mut delays = backon::ExponentialBuilder::default()
            .with_min_delay(retry.initial_backoff)
            .with_max_delay(retry.max_backoff)
            .with_max_times(retry.max_retries as usize)
            .with_jitter()
            .build();
        loop {
            let sent = self
                .client
                .post(&url)
                .headers(self.headers.clone())
                .header("content-type", "application/json")
                .body(bytes.clone())
                .send()
                .await;
            let (cause, failure, retry_after) = match sent {
                Ok(response) if response.status().is_success() => {
                    return Ok(response);
                }
                Ok(response) => {
                    let status = response.status();
                    let retry_after = retry_after(response.headers());
                    let body = cut(&response.text().await.unwrap_or_default(), 2000);
                    let failure = HttpFailure::Status { status, body };
                    let cause = if status == StatusCode::TOO_MANY_REQUESTS {
                        "429"
                    } else if status.is_server_error() {
                        "5xx"
                    } else {
                        metrics::counter!(metric::REQUESTS, "provider" => self.name.clone(), "outcome" => "error").increment(1);
                        return Err(failure);
                    };
                    (cause, failure, retry_after)
                }
                Err(e) => {
                    let cause = if e.is_connect() {
                        "connect"
                    } else if e.is_timeout() {
                        "timeout"
                    } else {
                        "reset"
                    };
                    (cause, HttpFailure::Transport(describe_transport(&e)), None)
                }
            };
            let Some(backoff) = delays.next() else {
                metrics::counter!(metric::REQUESTS, "provider" => self.name.clone(), "outcome" => "error").increment(1);
                return Err(failure);
            };
            let delay = retry_after.map_or(backoff, |d| d.min(RETRY_AFTER_CEILING));
            metrics::counter!(metric::RETRIES, "provider" => self.name.clone(), "cause" => cause)
                .increment(1);
            tracing::warn!(provider = %self.name, cause, delay_ms = delay.as_millis() as u64, "retrying a provider request");
            tokio::time::sleep(delay).await;
        }
    }

    /// Counts a request that succeeded end to end.
    pub fn record_ok(&self) {
        metrics::counter!(metric::REQUESTS, "provider" => self.name.clone(), "outcome" => "ok")
            .increment(1);
    }

    /// A failure as the error the runtime records, saying what to check.
    pub fn error(&self, failure: HttpFailure) -> ProviderError {
        self.error_for(failure, None)
    }

    /// [`HttpClient::error`] for a request of about `request_tokens` tokens: a refusal that
    /// names the context window gets a hint with the window and the request's size.
    pub fn error_for(&self, failure: HttpFailure, request_tokens: Option<u64>) -> ProviderError {
        let s = &self.settings;
        let message = match failure {
            HttpFailure::Status { status, body } if is_context_overflow(&body) => format!(
                "{}: HTTP {status} from {}: the request is over the model's context window: {}: {body}",
                self.name,
                s.base_url,
                self.overflow_hint(request_tokens)
            ),
            HttpFailure::Status { status, body } => {
                let hint = match status.as_u16() {
                    401 => match &s.api_key_env {
                        Some(v) => format!("check the key in {v}"),
                        None => {
                            "the server wants a key: set api_key_env to the variable that holds it"
                                .into()
                        }
                    },
                    403 => "the key is not allowed to use this model or endpoint".into(),
                    404 => format!(
                        "check base_url {:?} (with its version path) and model {:?}",
                        s.base_url, s.model
                    ),
                    400 | 422 => format!(
                        "the request was refused; check model {:?} and the provider kind",
                        s.model
                    ),
                    429 => format!(
                        "rate limited; gave up after {} retries",
                        s.retry.max_retries
                    ),
                    _ if status.is_server_error() => format!(
                        "the server failed; gave up after {} retries",
                        s.retry.max_retries
                    ),
                    _ => "unexpected status".into(),
                };
                format!(
                    "{}: HTTP {status} from {}: {hint}: {body}",
                    self.name, s.base_url
                )
            }
            HttpFailure::Transport(e) => format!("{}: {e} (base_url {:?})", self.name, s.base_url),
        };
        ProviderError::Failed { message }
    }

    /// The window, the output limit and the request's estimated size, for an overflow.
    pub fn overflow_hint(&self, request_tokens: Option<u64>) -> String {
        let s = &self.settings;
        let size = request_tokens.map_or_else(String::new, |t| {
            format!("the request was about {t} tokens (estimated) plus ")
        });
        format!(
            "{size}max_output_tokens {} against context_window {}; set context_window to the server's real window so that legio compacts before it is reached",
            s.max_output_tokens, s.context_window
        )
    }

    /// A malformed reply.
    pub fn malformed(&self, what: impl std::fmt::Display) -> ProviderError {
        ProviderError::Failed {
            message: format!("{}: malformed reply: {what}", self.name),
        }
    }
}

/// Whether an error body says the request was over the model's window (OpenAI's and vLLM's
/// `context_length_exceeded`, llama.cpp's "exceed context window", Anthropic's "prompt is too
/// long", Ollama's "context length").
pub fn is_context_overflow(body: &str) -> bool {
    let body = body.to_ascii_lowercase();
    [
        "context_length_exceeded",
        "exceed context window",
        "exceeds the context window",
        "maximum context length",
        "context length",
        "prompt is too long",
    ]
    .iter()
    .any(|needle| body.contains(needle))
}

fn describe_transport(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "timed out waiting for the server (connect_timeout_seconds / read_timeout_seconds)".into()
    } else if e.is_connect() {
        "cannot connect to the server; is it running and is base_url right?".into()
    } else {
        let mut message = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            message.push_str(": ");
            message.push_str(&s.to_string());
            source = s.source();
        }
        message
    }
}

/// `Retry-After` in seconds (the HTTP-date form is rare for these APIs and is ignored).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    value
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
}

/// The `prompt_cache_key` of the requests of `agent` in `conversation` (`openai-chat`,
/// `openai-responses`): `legio-` and 16 hex digits of a 64-bit FNV-1a hash of the two names.
/// Stable across processes and releases (the same agent session keeps reaching the same cache
/// after a restart), within OpenAI's 64 characters, and without the names themselves (a
/// conversation key may name a person).
pub fn prompt_cache_key(conversation: &ConversationKey, agent: &AgentName) -> String {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    // The separator cannot occur in either name, so ("a:b", "c") and ("a", "b:c") differ.
    let bytes = conversation
        .as_str()
        .bytes()
        .chain([0])
        .chain(agent.as_str().bytes());
    for byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(PRIME);
    }
    format!("legio-{hash:016x}")
}

/// `text` cut to at most `max` bytes on a character boundary.
pub fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SseEvent {
    /// The `event:` name (empty when absent).
    pub event: String,
    /// The `data:` payload.
    pub data: String,
}

/// The events of a streamed response, in order. A read that fails (a cut connection, a read
/// timeout) ends the stream with an error; the caller decides which event is terminal and
/// treats a stream that ends before it as an error.
fn sse(
    response: reqwest::Response,
) -> impl Stream<Item = Result<SseEvent, HttpFailure>> + Send + Unpin {
    Box::pin(response.bytes_stream().eventsource().map(|item| {
        item.map(|e| SseEvent {
            event: e.event,
            data: e.data,
        })
        .map_err(|e| HttpFailure::Transport(format!("the stream broke: {e}")))
    }))
}

/// One event of a JSON stream.
#[derive(Debug)]
pub enum JsonEvent {
    /// `data: [DONE]`, OpenAI Chat Completions' terminal event.
    Done,
    /// A JSON payload, with its kind: the payload's own `type`, else the `event:` line.
    Json {
        /// The event's kind (empty when neither names one).
        kind: String,
        /// The payload.
        value: serde_json::Value,
    },
}

/// A streamed response read as JSON events: empty events skipped, a break or invalid JSON an
/// error naming the provider.
pub struct JsonEvents<'a> {
    http: &'a HttpClient,
    /// How many events were read so far (for the error of a stream that ends early).
    pub seen: usize,
    events: std::pin::Pin<Box<dyn Stream<Item = Result<SseEvent, HttpFailure>> + Send + 'a>>,
}

impl std::fmt::Debug for JsonEvents<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonEvents")
            .field("provider", &self.http.name)
            .finish_non_exhaustive()
    }
}

impl<'a> JsonEvents<'a> {
    /// The events of `response`, a stream from `http`'s provider.
    pub fn new(http: &'a HttpClient, response: reqwest::Response) -> Self {
        Self {
            http,
            seen: 0,
            events: Box::pin(sse(response)),
        }
    }

    /// The next event; `None` when the stream ended (the caller decides whether it ended
    /// before its terminal event).
    pub async fn next(&mut self) -> Result<Option<JsonEvent>, ProviderError> {
        while let Some(event) = self.events.next().await {
            let event = event.map_err(|f| self.http.error(f))?;
            self.seen += 1;
            let data = event.data.trim();
            if data == "[DONE]" {
                return Ok(Some(JsonEvent::Done));
            }
            if data.is_empty() {
                continue;
            }
            if event.event == "error" && !data.starts_with('{') {
                return Err(ProviderError::Failed {
                    message: format!(
                        "{}: the provider reported an error in the stream: {}",
                        self.http.name,
                        cut(data, 2000)
                    ),
                });
            }
            let value: serde_json::Value = serde_json::from_str(data).map_err(|e| {
                self.http.malformed(format!(
                    "invalid JSON in the stream ({e}): {}",
                    cut(data, 200)
                ))
            })?;
            let kind = value
                .get("type")
                .and_then(serde_json::Value::as_str)
                .unwrap_or(event.event.as_str())
                .to_owned();
            return Ok(Some(JsonEvent::Json { kind, value }));
        }
        Ok(None)
    }
}

/// Reads a whole (non-streamed) body as JSON.
pub async fn json_body(response: reqwest::Response) -> Result<serde_json::Value, String> {
    let text = response
        .text()
        .await
        .map_err(|e| format!("cannot read the body: {}", describe_transport(&e)))?;
    serde_json::from_str(&text).map_err(|e| format!("invalid JSON ({e}): {}", cut(&text, 300)))
}
