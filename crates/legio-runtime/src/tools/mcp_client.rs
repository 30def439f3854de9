//! legio as an MCP client: one connection per `[mcp.NAME]` server (rmcp), its tools listed once
//! when the runtime opens and offered to the table's agents as `mcp__NAME__T`.
//!
//! A call never fails the turn: a server that answers an error, sends what is not JSON-RPC,
//! hangs past `timeout_seconds` or exits mid-call gives an error result. A connection that broke
//! is restarted on the next call, with a backoff doubling from 250 ms to 30 s between attempts
//! (calls during the backoff get an error result saying when the next attempt is).

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use legio_core::AgentName;
use rmcp::model::{CallToolRequestParams, CallToolResult, RawContent, ResourceContents};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::ServiceExt;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::error::RuntimeError;
use crate::tools::memory::ToolSpec;
use crate::tools::outcome::ToolOutcome;
use legio_config::{McpServerSpec, McpTransport, MCP_TOOL_PREFIX};

const BACKOFF_FIRST: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

type Client = RunningService<RoleClient, ()>;

/// One server's tool, as offered and as the server names it.
#[derive(Clone, Debug)]
pub(crate) struct McpTool {
    /// `mcp__NAME__T`, with the server's description and schema.
    pub(crate) offered: ToolSpec,
    /// `T`.
    pub(crate) remote: String,
}

/// The live connection, or when the next attempt may be made.
#[derive(Default)]
struct Connection {
    client: Option<Client>,
    failures: u32,
    retry_at: Option<Instant>,
    last_error: String,
}

/// One `[mcp.NAME]` server: its settings, the tools it listed at start and its connection.
pub(crate) struct McpServer {
    pub(crate) spec: McpServerSpec,
    pub(crate) tools: Vec<McpTool>,
    conn: Mutex<Connection>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("spec", &self.spec)
            .field("tools", &self.tools.len())
            .finish_non_exhaustive()
    }
}

/// Every configured MCP server of a runtime.
#[derive(Debug, Default)]
pub(crate) struct McpClients {
    pub(crate) servers: Vec<Arc<McpServer>>,
}

/// Starts `spec`'s server (a child process, or a session with the URL) and initializes MCP.
async fn connect(spec: &McpServerSpec) -> Result<Client, String> {
    let start = async {
        match &spec.transport {
            McpTransport::Stdio { command, args, env } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).envs(env);
                let (transport, stderr) = TokioChildProcess::builder(cmd)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| format!("cannot run {}: {e}", command.display()))?;
                let tail = StderrTail::default();
                if let Some(stderr) = stderr {
                    forward_stderr(spec.name.clone(), stderr, tail.clone());
                }
                match ().serve(transport).await {
                    Ok(client) => Ok(client),
                    Err(e) => Err(tail.after(plain(&e)).await),
                }
            }
            McpTransport::Http { url, headers } => {
                let mut map = reqwest::header::HeaderMap::new();
                for (name, value) in headers {
                    let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                        .map_err(|e| format!("header name {name:?}: {e}"))?;
                    let mut value = reqwest::header::HeaderValue::from_str(value)
                        .map_err(|e| format!("header {name}: {e}"))?;
                    value.set_sensitive(true);
                    map.insert(name, value);
                }
                let http = reqwest::Client::builder()
                    .default_headers(map)
                    .build()
                    .map_err(|e| e.to_string())?;
                let config = rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url.as_str());
                let transport = StreamableHttpClientTransport::with_client(http, config);
                ().serve(transport).await.map_err(|e| plain(&e))
            }
        }
    };
    match tokio::time::timeout(spec.timeout, start).await {
        Ok(result) => result,
        Err(_) => Err(format!(
            "no MCP initialize answer within {:?} (mcp.{}.timeout_seconds)",
            spec.timeout, spec.name
        )),
    }
}

/// A stdio server's stderr lines, as debug traces (`LEGIO_LOG=debug` shows them); the last few
/// are kept in `tail`, for the error of a server that fails to start.
fn forward_stderr(server: String, stderr: tokio::process::ChildStderr, tail: StderrTail) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            tracing::debug!(mcp = %server, "{line}");
            tail.push(line);
        }
    });
}

/// The last lines a starting server wrote on stderr.
#[derive(Clone, Default)]
struct StderrTail(Arc<std::sync::Mutex<std::collections::VecDeque<String>>>);

impl StderrTail {
    const LINES: usize = 5;

    fn push(&self, line: String) {
        let mut lines = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if lines.len() == Self::LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    /// `error`, with the server's last stderr lines (waiting a moment for an exiting server's
    /// last words) when it wrote any: the reason it gives is often only there.
    async fn after(&self, error: String) -> String {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let lines = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if lines.is_empty() {
            return error;
        }
        let said: Vec<&str> = lines.iter().map(String::as_str).collect();
        format!("{error}; its stderr ended with: {}", said.join(" | "))
    }
}

/// An rmcp error in plain words: without the Rust type paths its messages carry
/// (`Transport [rmcp::transport::child_process::TokioChildProcess] error: Broken pipe` reads
/// `transport error: Broken pipe`), which a model or an operator cannot use.
fn plain(error: &dyn std::fmt::Display) -> String {
    let text = error.to_string();
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(open) = rest.find('[') {
        let Some(len) = closing(&rest[open..]) else {
            break;
        };
        let inner = &rest[open + 1..open + len];
        // A type path starts with a name (`rmcp::...`); `[::1]`, an IPv6 host, does not.
        let type_path = inner.contains("::") && inner.starts_with(|c: char| c.is_alphabetic());
        out.push_str(&rest[..open]);
        if !type_path {
            out.push_str(&rest[open..=open + len]);
        }
        rest = &rest[open + len + 1..];
    }
    out.push_str(rest);
    out.replace("Transport  error", "transport error")
        .replace("Transport error", "transport error")
        .replace("  ", " ")
}

/// Where the `[` that opens `text` is closed (its byte offset), counting nested brackets.
fn closing(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// The tools `client` lists, as offered under `mcp__NAME__`; a name no provider accepts (over 64
/// characters with the prefix, or other characters than `A-Z a-z 0-9 _ -`) is left out with a
/// warning.
async fn list_tools(spec: &McpServerSpec, client: &Client) -> Result<Vec<McpTool>, String> {
    let listed = tokio::time::timeout(spec.timeout, client.list_all_tools())
        .await
        .map_err(|_| format!("no tools/list answer within {:?}", spec.timeout))?
        .map_err(|e| format!("tools/list failed: {e}"))?;
    let mut tools = Vec::new();
    for tool in listed {
        let offered = format!("{MCP_TOOL_PREFIX}{}__{}", spec.name, tool.name);
        let valid = offered.len() <= 64
            && offered
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            tracing::warn!(mcp = %spec.name, tool = %tool.name, "left out: {offered:?} is not a tool name providers accept (at most 64 characters of A-Z, a-z, 0-9, '_', '-')");
            continue;
        }
        tools.push(McpTool {
            offered: ToolSpec {
                name: offered,
                description: tool.description.map(|d| d.into_owned()).unwrap_or_default(),
                parameters: Value::Object((*tool.input_schema).clone()),
            },
            remote: tool.name.into_owned(),
        });
    }
    Ok(tools)
}

impl McpClients {
    /// Connects to every server and lists its tools; a server that cannot start is an error
    /// naming its table.
    pub(crate) async fn start(specs: &[McpServerSpec]) -> Result<Self, RuntimeError> {
        let mut servers = Vec::new();
        for spec in specs {
            let failed = |reason: String| RuntimeError::McpUnavailable {
                server: spec.name.clone(),
                source: legio_store::ErrorSource::new(reason),
            };
            let client = connect(spec).await.map_err(failed)?;
            let tools = list_tools(spec, &client).await.map_err(failed)?;
            tracing::info!(mcp = %spec.name, tools = tools.len(), "MCP server started");
            servers.push(Arc::new(McpServer {
                spec: spec.clone(),
                tools,
                conn: Mutex::new(Connection {
                    client: Some(client),
                    ..Connection::default()
                }),
            }));
        }
        Ok(Self { servers })
    }

    /// The server and remote name of the tool `name`, if `agent` is offered it.
    pub(crate) fn find(&self, agent: &AgentName, name: &str) -> Option<(Arc<McpServer>, String)> {
        if !name.starts_with(MCP_TOOL_PREFIX) {
            return None;
        }
        self.servers
            .iter()
            .filter(|s| s.spec.agents.contains(agent))
            .find_map(|s| {
                s.tools
                    .iter()
                    .find(|t| t.offered.name == name)
                    .map(|t| (Arc::clone(s), t.remote.clone()))
            })
    }

    /// Closes every connection (stdio servers are stopped).
    pub(crate) async fn stop(&self) {
        for server in &self.servers {
            if let Some(client) = server.conn.lock().await.client.take() {
                let _ = client.cancel().await;
            }
        }
    }
}

impl McpServer {
    /// Calls the server's tool `remote` with `args`; every failure is an error outcome.
    pub(crate) async fn call(&self, remote: String, args: Value) -> ToolOutcome {
        let arguments = match args {
            Value::Null => None,
            Value::Object(map) => Some(map),
            other => {
                return ToolOutcome::Failed(format!(
                    "the arguments must be a JSON object, not {other}"
                ))
            }
        };
        let peer = match self.peer().await {
            Ok(peer) => peer,
            Err(e) => return ToolOutcome::Failed(e),
        };
        let params = CallToolRequestParams {
            meta: None,
            name: remote.clone().into(),
            arguments,
            task: None,
        };
        let name = &self.spec.name;
        match tokio::time::timeout(self.spec.timeout, peer.call_tool(params)).await {
            Ok(Ok(result)) => outcome(result),
            Ok(Err(ServiceError::McpError(e))) => {
                ToolOutcome::Failed(format!("the MCP server {name} refused the call: {e}"))
            }
            Ok(Err(e)) => {
                let e = plain(&e);
                let reason = format!("the MCP server {name} failed during the call ({e})");
                self.broken(&reason).await;
                ToolOutcome::Failed(format!("{reason}; it is restarted on the next call"))
            }
            Err(_) => ToolOutcome::Failed(format!(
                "the MCP server {name} did not answer {remote} within {:?} (mcp.{name}.timeout_seconds)",
                self.spec.timeout
            )),
        }
    }

    /// The live connection's peer, restarting a broken connection once its backoff has passed.
    async fn peer(&self) -> Result<rmcp::Peer<RoleClient>, String> {
        let mut conn = self.conn.lock().await;
        if let Some(client) = &conn.client {
            if !client.is_transport_closed() {
                return Ok(client.peer().clone());
            }
            conn.client = None;
            conn.last_error = "its connection closed".to_owned();
        }
        let name = &self.spec.name;
        if let Some(at) = conn.retry_at.filter(|at| *at > Instant::now()) {
            return Err(format!(
                "the MCP server {name} is down ({}); the next restart is in {} ms",
                conn.last_error,
                at.saturating_duration_since(Instant::now()).as_millis()
            ));
        }
        match connect(&self.spec).await {
            Ok(client) => {
                tracing::info!(mcp = %name, failures = conn.failures, "MCP server restarted");
                let peer = client.peer().clone();
                *conn = Connection {
                    client: Some(client),
                    ..Connection::default()
                };
                Ok(peer)
            }
            Err(e) => {
                conn.failures += 1;
                // 250 ms after the first failure, doubling.
                let backoff = BACKOFF_FIRST
                    .saturating_mul(1 << (conn.failures - 1).min(8))
                    .min(BACKOFF_MAX);
                conn.retry_at = Some(Instant::now() + backoff);
                conn.last_error = e.clone();
                Err(format!(
                    "the MCP server {name} cannot be restarted ({e}); the next try is in {} ms",
                    backoff.as_millis()
                ))
            }
        }
    }

    /// Drops a connection that failed, so the next call restarts it.
    async fn broken(&self, reason: &str) {
        let mut conn = self.conn.lock().await;
        if let Some(client) = conn.client.take() {
            tokio::spawn(async move {
                let _ = client.cancel().await;
            });
        }
        conn.last_error = reason.to_owned();
        tracing::warn!(mcp = %self.spec.name, "{reason}");
    }
}

/// What stands for media content in a result: its kind, type and size.
fn left_out(kind: &str, mime_type: &str, base64: &str) -> String {
    let bytes = base64.len() / 4 * 3;
    format!("[{kind} {mime_type}, about {bytes} bytes, not shown: legio passes on text only]")
}

/// A call's result as text: its text parts joined (images, audio and binary resources as a
/// short note, a text resource as its uri and text, other parts as JSON), or the structured
/// content when it has no parts; `isError` makes it an error result.
fn outcome(result: CallToolResult) -> ToolOutcome {
    let mut parts: Vec<String> = result
        .content
        .iter()
        .map(|c| match &c.raw {
            RawContent::Text(t) => t.text.clone(),
            // Base64 the model cannot look at, only pay for: said, not passed on.
            RawContent::Image(i) => left_out("image", &i.mime_type, &i.data),
            RawContent::Audio(a) => left_out("audio", &a.mime_type, &a.data),
            RawContent::Resource(r) => match &r.resource {
                ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob,
                    ..
                } => {
                    let mime = mime_type.as_deref().unwrap_or("application/octet-stream");
                    format!("{uri}: {}", left_out("resource", mime, blob))
                }
                ResourceContents::TextResourceContents { uri, text, .. } => {
                    format!("{uri}:\n{text}")
                }
            },
            other => serde_json::to_string(other).unwrap_or_default(),
        })
        .collect();
    if parts.is_empty() {
        if let Some(structured) = &result.structured_content {
            parts.push(structured.to_string());
        }
    }
    let text = parts.join("\n");
    if result.is_error == Some(true) {
        ToolOutcome::Failed(text)
    } else {
        ToolOutcome::Done(text)
    }
}

#[cfg(test)]
mod tests {
    use super::{outcome, plain};
    use crate::tools::outcome::ToolOutcome;
    use rmcp::model::{CallToolResult, Content};

    #[test]
    fn media_in_a_result_is_said_not_passed_on() {
        let result = CallToolResult::success(vec![
            Content::text("a tiny image:"),
            Content::image("iVBORw0KGgoAAAANSUhEUg==", "image/png"),
        ]);
        let ToolOutcome::Done(text) = outcome(result) else {
            panic!("a result")
        };
        assert_eq!(
            text,
            "a tiny image:\n[image image/png, about 18 bytes, not shown: legio passes on text only]"
        );
    }

    #[test]
    fn rmcp_errors_read_without_rust_type_paths() {
        let cases = [
            (
                "Send message error Transport [rmcp::transport::child_process::TokioChildProcess] error: Broken pipe (os error 32)",
                "Send message error transport error: Broken pipe (os error 32)",
            ),
            (
                "Transport [rmcp::transport::worker::WorkerTransport<rmcp::transport::streamable_http_client::StreamableHttpClientWorker<reqwest::async_impl::client::Client>>] error: connection refused",
                "transport error: connection refused",
            ),
            ("connection closed: initialize response", "connection closed: initialize response"),
            ("bad list [1, 2] here", "bad list [1, 2] here"),
            ("an open [bracket", "an open [bracket"),
            (
                "error sending request for url (http://[::1]:3000/mcp)",
                "error sending request for url (http://[::1]:3000/mcp)",
            ),
            ("line one\nline two", "line one\nline two"),
        ];
        for (raw, want) in cases {
            assert_eq!(plain(&raw), want, "{raw}");
        }
    }
}
