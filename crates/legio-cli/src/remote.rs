//! The CLI's live mode: `legio --server URL replay|inspect|context|verify|reset` asks a running
//! `legio serve` (its operator endpoints) instead of opening the log, so an operator can work
//! while the service holds the database. The output is the same as offline.

use std::io::Write;

use anyhow::{bail, Context as _, Result};
use serde_json::Value;

use crate::interrupt::Interrupt;

/// An error the server answered with (`{"error": {"code", "message"}}`).
#[derive(Debug)]
pub struct ServerError {
    /// The error's code.
    pub code: String,
    /// Its message.
    pub message: String,
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the server says: {} ({})", self.message, self.code)
    }
}

impl std::error::Error for ServerError {}

/// How a stream of lines ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Streamed {
    /// The server ended it.
    Ended,
    /// Ctrl-C.
    Interrupted,
}

/// A running server's operator endpoints.
pub struct Remote {
    base: String,
    token: Option<String>,
    client: reqwest::Client,
    runtime: tokio::runtime::Runtime,
    /// Ctrl-C, listened for from the first stream on, through every later one.
    interrupt: std::sync::Mutex<Option<Interrupt>>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("Remote")
            .field("base", &self.base)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

impl Remote {
    /// A client of the server at `url` (http://host:port), with the operator token if any.
    pub fn new(url: &str, token: Option<String>) -> Result<Self> {
        let base = url.trim_end_matches('/').to_owned();
        if !base.starts_with("http://") && !base.starts_with("https://") {
            bail!("--server {url:?} is not an http:// URL (e.g. http://127.0.0.1:7878)");
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        Ok(Self {
            base,
            token,
            client: reqwest::Client::new(),
            runtime,
            interrupt: std::sync::Mutex::new(None),
        })
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.client.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<reqwest::Response> {
        let response = request.send().await.with_context(|| {
            format!(
                "cannot reach the server at {}; is `legio serve` running?",
                self.base
            )
        })?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status();
        let body: Value = serde_json::from_slice(&response.bytes().await.unwrap_or_default())
            .unwrap_or(Value::Null);
        let error = &body["error"];
        Err(ServerError {
            code: error["code"].as_str().unwrap_or("http").to_owned(),
            message: error["message"]
                .as_str()
                .map_or_else(|| format!("HTTP {status}"), str::to_owned),
        }
        .into())
    }

    /// GET `path` with `query`, as JSON.
    pub fn get_json(&self, path: &str, query: &[(&str, String)]) -> Result<Value> {
        self.runtime.block_on(async {
            let response = self
                .send(self.request(reqwest::Method::GET, path).query(query))
                .await?;
            Ok(serde_json::from_slice(&response.bytes().await?)?)
        })
    }

    /// POST `body` to `path`, as JSON.
    pub fn post_json(&self, path: &str, body: &Value) -> Result<Value> {
        self.runtime.block_on(async {
            let response = self
                .send(
                    self.request(reqwest::Method::POST, path)
                        .header("content-type", "application/json")
                        .body(body.to_string()),
                )
                .await?;
            Ok(serde_json::from_slice(&response.bytes().await?)?)
        })
    }

    /// GET `path` as JSON lines, calling `visit` with each line as it arrives, until the server
    /// ends the stream or Ctrl-C (which of them, the answer says). A Ctrl-C pressed since the
    /// first stream began, between two streams included, ends the next one at once.
    pub fn stream_lines(
        &self,
        path: &str,
        query: &[(&str, String)],
        mut visit: impl FnMut(&str) -> Result<()>,
    ) -> Result<Streamed> {
        let mut interrupt = self.interrupt.lock().unwrap_or_else(|e| e.into_inner());
        self.runtime.block_on(async {
            let interrupt = match &mut *interrupt {
                Some(interrupt) => interrupt,
                empty => empty.insert(Interrupt::new().context("cannot listen for Ctrl-C")?),
            };
            let mut response = tokio::select! {
                sent = self.send(self.request(reqwest::Method::GET, path).query(query)) => sent?,
                () = interrupt.pressed() => return Ok(Streamed::Interrupted),
            };
            let mut pending: Vec<u8> = Vec::new();
            loop {
                let chunk = tokio::select! {
                    chunk = response.chunk() => chunk?,
                    () = interrupt.pressed() => return Ok(Streamed::Interrupted),
                };
                let Some(chunk) = chunk else { break };
                pending.extend_from_slice(&chunk);
                while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=end).collect();
                    let line =
                        std::str::from_utf8(&line[..end]).context("the server sent bad UTF-8")?;
                    if !line.is_empty() {
                        visit(line)?;
                    }
                }
                std::io::stdout().flush()?;
            }
            if !pending.is_empty() {
                visit(std::str::from_utf8(&pending).context("the server sent bad UTF-8")?)?;
            }
            Ok(Streamed::Ended)
        })
    }
}

/// Whether `error` is the server's error with `code`.
pub fn is_code(error: &anyhow::Error, code: &str) -> bool {
    error
        .downcast_ref::<ServerError>()
        .is_some_and(|e| e.code == code)
}
