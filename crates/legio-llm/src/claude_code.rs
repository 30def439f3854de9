//! `claude-code`: the Claude Code CLI run as a subprocess in print mode with stream-json output.
//! Session-stateful and resumable: the provider session is the session id the CLI reports and
//! the uuid of the turn's last assistant message (`SESSION@UUID`, [`ResumePoint`]); a later turn
//! passes them back as `--resume SESSION --resume-session-at UUID`, sending only the delta. The
//! CLI then sees its session exactly as it was at the end of the last turn the log recorded:
//! what a turn cut by a crash left in the CLI's session file (it writes the prompt before it
//! calls the model) is not shown to the model again beside legio's redelivery of it. The prompt (the plan as one
//! bootstrap block) goes to the child's stdin; every stdout line is one JSON event; the reply and
//! its usage come from the final `result` event. Same inner shape as the HTTP providers: client
//! (the process), request mapping (arguments and prompt), response mapping (events), errors.
//!
//! Tools: the CLI runs its own tools (file edits, shell, search) inside its session and reports
//! only the final text. It takes none of ours as tool definitions (`Capabilities::tools` is
//! false; a request's `tools` are ignored) and never returns tool calls for the runtime to run.
//! When the request carries legio's MCP endpoint ([`McpAccess`], set while `legio serve` runs),
//! the CLI gets it as `--mcp-config FILE` (the server named `legio`, the bearer token in its
//! headers; the file has mode 0600 in the state directory and is removed after the turn, so the
//! token is never in the CLI's argv, which any local user can read) and
//! `--allowedTools mcp__legio__T,...`: it calls the agent's own legio tools (`dispatch`,
//! `get_history`, memory) over MCP, and legio records those calls.
//!
//! The child dies with legio (child.rs): its own process group, killed whole when a turn is
//! dropped or stopped, `PR_SET_PDEATHSIG(SIGKILL)` on Linux, and before a process's first turn
//! the CLIs a killed legio process left running are killed, so an orphan never finishes a turn
//! legio did not record. What legio keeps for that lives in the state directory (state.rs),
//! which also holds the CLI's working directory, one per agent and conversation: the CLI keys
//! its sessions by directory, so `--resume` works wherever legio was started.

mod child;
mod state;

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use legio_core::{estimate_tokens, History, TokenUsage};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::process::Command;
use tokio::time::timeout;

use crate::http::{cut, metric, BuildError};
use crate::provider::{
    Capabilities, McpAccess, Provider, ProviderError, ProviderFuture, ProviderReply,
    ProviderRequest, StreamDelta,
};
use crate::render::bootstrap_block;
use crate::settings::ClaudeCodeSettings;
use child::Running;
use state::McpConfigFile;

/// What the CLI says (on stderr or in its result) when `--resume` names a session it does not
/// have ("No conversation found with session ID: <id>"), or `--resume-session-at` a message the
/// session does not hold ("No message found with message.uuid of: <uuid>"), in lower case.
const SESSION_NOT_FOUND: [&str; 2] = [
    "no conversation found",
    "no message found with message.uuid",
];

/// How many stderr lines are kept for error messages, and how much of them is shown.
const STDERR_LINES: usize = 20;
const STDERR_SHOWN: usize = 1000;

/// How long to wait for the stderr reader once the child has exited or was stopped (a grandchild
/// may still hold the pipe open; its last lines are not worth a longer wait).
const STDERR_GRACE: Duration = Duration::from_millis(500);

/// The Claude Code provider.
#[derive(Debug)]
pub struct ClaudeCode {
    name: String,
    settings: ClaudeCodeSettings,
    /// Whether the state directory was searched for children a killed legio left (once, before
    /// this provider's first turn).
    reaped: AtomicBool,
}

impl ClaudeCode {
    /// A provider named `name` in the configuration. The executable is looked for when a turn
    /// runs, so a configuration can be checked on a machine without the CLI.
    pub fn new(name: &str, settings: ClaudeCodeSettings) -> Result<Self, BuildError> {
        let invalid = |message: &str| BuildError::Invalid {
            provider: name.to_owned(),
            message: message.to_owned(),
        };
        if settings.executable.as_os_str().is_empty() {
            return Err(invalid(
                "executable is empty; set it to `claude` (on the PATH) or the CLI's full path",
            ));
        }
        if settings
            .model
            .as_deref()
            .is_some_and(|m| m.trim().is_empty())
        {
            return Err(invalid(
                "model is empty; remove it to use the CLI's default model",
            ));
        }
        if settings.context_window == 0 {
            return Err(invalid("context_window must be greater than 0"));
        }
        if settings.read_timeout.is_zero() {
            return Err(invalid("read_timeout must be greater than 0"));
        }
        if settings.state_dir.as_os_str().is_empty() {
            return Err(invalid(
                "state_dir is empty; remove it to keep the CLI's state beside the database",
            ));
        }
        Ok(Self {
            name: name.to_owned(),
            settings,
            reaped: AtomicBool::new(false),
        })
    }

    /// Its settings.
    pub fn settings(&self) -> &ClaudeCodeSettings {
        &self.settings
    }

    async fn spawn(&self, args: &[String], work_dir: &Path) -> Result<Running, ProviderError> {
        let mut command = Command::new(&self.settings.executable);
        command
            .args(args)
            .current_dir(work_dir)
            // Set inside a Claude Code session; the CLI refuses to start nested when it sees it.
            .env_remove("CLAUDECODE")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // The runtime's turn timeout drops the call's future: the child's group dies with it.
        Running::spawn(command, &self.settings.state_dir).await.map_err(|e| {
            let path = self.settings.executable.display();
            let why = match e.kind() {
                ErrorKind::NotFound => "not found".to_owned(),
                ErrorKind::PermissionDenied => "not executable (permission denied)".to_owned(),
                _ => e.to_string(),
            };
            self.failed(format!(
                "cannot run the Claude Code CLI {path:?}: {why}; install it (npm install -g @anthropic-ai/claude-code) or set providers.{}.executable to its full path",
                self.name
            ))
        })
    }

    async fn run(&self, request: ProviderRequest) -> Result<ProviderReply, ProviderError> {
        let state_dir = &self.settings.state_dir;
        if !self.reaped.swap(true, Ordering::SeqCst) {
            child::reap_orphans(state_dir);
            state::remove_stale_mcp_files(state_dir, child::is_running);
        }
        // Declared before the child, so dropped after it: the file outlives the CLI's group.
        let mcp_file = match &request.mcp {
            Some(mcp) => Some(
                McpConfigFile::write(state_dir, child::this_process(), &mcp_config(mcp)).map_err(
                    |e| {
                        self.failed(format!(
                            "cannot write the MCP configuration under {}: {e}; check providers.{}.state_dir",
                            state_dir.display(),
                            self.name
                        ))
                    },
                )?,
            ),
            None => None,
        };
        let args = arguments(
            &self.settings,
            &request,
            mcp_file.as_ref().map(McpConfigFile::path),
        );
        let prompt = bootstrap_block(&request.plan, request.status.as_deref());
        tracing::debug!(provider = %self.name, resume = ?request.resume, prompt_bytes = prompt.len(), "running the Claude Code CLI");
        // The CLI keys its sessions by working directory: a fixed one per agent and
        // conversation, whatever directory legio runs in.
        let work_dir = state::work_dir(state_dir, &request.conversation, &request.agent).map_err(|e| {
            self.failed(format!(
                "cannot make the CLI's working directory under {}: {e}; check providers.{}.state_dir",
                state_dir.display(),
                self.name
            ))
        })?;
        let mut running = self.spawn(&args, &work_dir).await?;
        let child = &mut running.child;

        // Write the prompt and close stdin, without waiting for it: the child may answer (or
        // fail) before it has read everything, and a full pipe must not block the reader.
        let stdin = child.stdin.take();
        let input = prompt.clone();
        let writer = tokio::spawn(async move {
            if let Some(mut stdin) = stdin {
                // A child that exits without reading gives a broken pipe: its exit says why.
                let _ = stdin.write_all(input.as_bytes()).await;
                let _ = stdin.shutdown().await;
            }
        });
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let stderr_reader = child
            .stderr
            .take()
            .map(|stderr| tokio::spawn(keep_tail(stderr, Arc::clone(&stderr_tail))));

        let mut events = Events::default();
        let read = match child.stdout.take() {
            Some(stdout) => {
                read_events(stdout, self.settings.read_timeout, &mut events, &request).await
            }
            None => Err(Fault::Read("no stdout pipe".into())),
        };
        let exit = match read {
            Ok(()) => match timeout(self.settings.read_timeout, running.wait()).await {
                Ok(Ok(status)) => Ok(status),
                Ok(Err(e)) => Err(Fault::Read(format!("cannot wait for the process: {e}"))),
                Err(_) => Err(Fault::NoExit),
            },
            Err(fault) => Err(fault),
        };
        if exit.is_err() {
            running.kill_group();
            let _ = timeout(STDERR_GRACE, running.wait()).await;
        }
        writer.abort();
        if let Some(mut reader) = stderr_reader {
            if timeout(STDERR_GRACE, &mut reader).await.is_err() {
                reader.abort();
            }
        }
        let stderr: Vec<String> = stderr_tail
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect();

        let outcome = self.outcome(&request, exit, events, &stderr, &prompt);
        let label = if outcome.is_ok() { "ok" } else { "error" };
        metrics::counter!(metric::REQUESTS, "provider" => self.name.clone(), "outcome" => label)
            .increment(1);
        outcome
    }

    /// The reply, or the error a finished (or stopped) run amounts to.
    fn outcome(
        &self,
        request: &ProviderRequest,
        exit: Result<ExitStatus, Fault>,
        events: Events,
        stderr: &[String],
        prompt: &str,
    ) -> Result<ProviderReply, ProviderError> {
        let result = events.result.as_ref();
        let failure = match (&exit, result) {
            (Err(fault), _) => Some(self.describe(fault)),
            (Ok(status), _) if !status.success() => Some(format!(
                "the Claude Code CLI exited with {status}{}",
                if result.is_none() {
                    " without a result"
                } else {
                    ""
                }
            )),
            (Ok(_), None) => Some("the Claude Code CLI ended without a result message".into()),
            (Ok(_), Some(result)) => result_error(result),
        };
        let Some(failure) = failure else {
            return self.reply(request, &events, prompt);
        };
        if let Some(session) = &request.resume {
            let mut evidence: Vec<&str> = stderr.iter().map(String::as_str).collect();
            let said = result.map(result_text).unwrap_or_default();
            evidence.push(&said);
            if let Err(Fault::Invalid { line, .. }) = &exit {
                evidence.push(line);
            }
            if evidence.iter().any(|text| {
                let text = text.to_lowercase();
                SESSION_NOT_FOUND.iter().any(|said| text.contains(said))
            }) {
                return Err(ProviderError::SessionLost {
                    session: session.clone(),
                });
            }
        }
        let mut message = failure;
        if !stderr.is_empty() {
            message.push_str(&format!(
                "; stderr: {}",
                cut(&stderr.join(" | "), STDERR_SHOWN)
            ));
        }
        Err(self.failed(message))
    }

    fn reply(
        &self,
        request: &ProviderRequest,
        events: &Events,
        prompt: &str,
    ) -> Result<ProviderReply, ProviderError> {
        let result = events
            .result
            .as_ref()
            .ok_or_else(|| self.failed("the Claude Code CLI ended without a result message"))?;
        let text = match result.get("result") {
            Some(Value::String(text)) => text.clone(),
            _ => {
                return Err(self.failed(format!(
                    "the result message has no text: {}",
                    cut(&result.to_string(), 300)
                )))
            }
        };
        let session = result
            .get("session_id")
            .and_then(Value::as_str)
            .or(events.session.as_deref())
            .filter(|s| !s.is_empty())
            .ok_or_else(|| self.failed("the Claude Code CLI reported no session id"))?;
        let usage = usage_of(result).unwrap_or_else(|| TokenUsage {
            input: estimate_tokens(&request.system_prompt) + estimate_tokens(prompt),
            output: estimate_tokens(&text),
            ..TokenUsage::default()
        });
        let point = ResumePoint {
            session: session.to_owned(),
            at: events.last_assistant.clone(),
        };
        Ok(ProviderReply {
            text,
            usage: Some(usage),
            provider_session: Some(point.to_string()),
            tool_calls: Vec::new(),
        })
    }

    fn describe(&self, fault: &Fault) -> String {
        match fault {
            Fault::Silent => format!(
                "the Claude Code CLI wrote nothing for {} s (read_timeout) and was stopped",
                self.settings.read_timeout.as_secs_f64()
            ),
            Fault::NoExit => format!(
                "the Claude Code CLI closed its output but did not exit within {} s (read_timeout) and was stopped",
                self.settings.read_timeout.as_secs_f64()
            ),
            Fault::Invalid { line, error } => format!(
                "the Claude Code CLI wrote a line that is not a JSON object ({error}): {line}; is executable {:?} the Claude Code CLI, and do extra_args leave --output-format alone?",
                self.settings.executable.display()
            ),
            Fault::Read(e) => format!("cannot read the Claude Code CLI's output: {e}"),
        }
    }

    fn failed(&self, message: impl std::fmt::Display) -> ProviderError {
        ProviderError::Failed {
            message: format!("{}: {message}", self.name),
        }
    }
}

impl Provider for ClaudeCode {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            history: History::Session { resumable: true },
            context_window: self.settings.context_window,
            tools: false,
        }
    }

    fn call(&self, request: ProviderRequest) -> ProviderFuture<'_> {
        Box::pin(self.run(request))
    }
}

/// The CLI's arguments for `request`: the configured extra arguments, print mode with stream-json
/// output (which the CLI only allows with `--verbose`), the model, the session to resume, the
/// agent's system prompt appended to Claude Code's own, and with the request's MCP endpoint
/// `--mcp-config mcp_config` (the file holding [`mcp_config`]'s text) and the tools to allow.
/// The prompt itself goes to stdin.
pub fn arguments(
    settings: &ClaudeCodeSettings,
    request: &ProviderRequest,
    mcp_config: Option<&Path>,
) -> Vec<String> {
    let mut args = settings.extra_args.clone();
    args.extend(
        ["-p", "--output-format", "stream-json", "--verbose"]
            .iter()
            .map(|s| (*s).to_owned()),
    );
    if let Some(model) = &settings.model {
        args.push("--model".into());
        args.push(model.clone());
    }
    if let Some(resume) = &request.resume {
        let point = ResumePoint::parse(resume);
        args.push("--resume".into());
        args.push(point.session);
        if let Some(at) = point.at {
            args.push("--resume-session-at".into());
            args.push(at);
        }
    }
    if !request.system_prompt.is_empty() {
        args.push("--append-system-prompt".into());
        args.push(request.system_prompt.clone());
    }
    if let (Some(mcp), Some(file)) = (&request.mcp, mcp_config) {
        args.extend(mcp_arguments(mcp, file));
    }
    args
}

/// Where a CLI session is resumed: its id, and the uuid of the last message of the last turn
/// legio recorded (none for a session recorded before legio kept it, or a turn that reported
/// no assistant message). As the provider session text: `SESSION@UUID`, or `SESSION`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResumePoint {
    /// The CLI's session id (`--resume`).
    pub session: String,
    /// The message to resume at (`--resume-session-at`).
    pub at: Option<String>,
}

impl ResumePoint {
    /// Reads a provider session as recorded (`SESSION@UUID` or `SESSION`).
    pub fn parse(provider_session: &str) -> Self {
        match provider_session.split_once('@') {
            Some((session, at)) if !at.is_empty() => Self {
                session: session.to_owned(),
                at: Some(at.to_owned()),
            },
            _ => Self {
                session: provider_session.to_owned(),
                at: None,
            },
        }
    }
}

impl std::fmt::Display for ResumePoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.at {
            Some(at) => write!(f, "{}@{at}", self.session),
            None => f.write_str(&self.session),
        }
    }
}

/// The server name legio's endpoint has in `--mcp-config`: its tools are `mcp__legio__T`.
pub const MCP_SERVER_NAME: &str = "legio";

/// The `--mcp-config` text naming legio's endpoint with its bearer token (a secret: it goes in
/// a file, never on the command line).
pub fn mcp_config(mcp: &McpAccess) -> String {
    serde_json::json!({"mcpServers": {MCP_SERVER_NAME: {
        "type": "http",
        "url": mcp.url,
        "headers": {"Authorization": format!("Bearer {}", mcp.bearer)},
    }}})
    .to_string()
}

/// `--mcp-config FILE` and `--allowedTools` allowing exactly the agent's tools there.
fn mcp_arguments(mcp: &McpAccess, file: &Path) -> Vec<String> {
    let allowed: Vec<String> = mcp
        .tools
        .iter()
        .map(|t| format!("mcp__{MCP_SERVER_NAME}__{t}"))
        .collect();
    let mut args = vec!["--mcp-config".to_owned(), file.display().to_string()];
    if !allowed.is_empty() {
        args.push("--allowedTools".to_owned());
        args.push(allowed.join(","));
    }
    args
}

/// Why reading a run stopped before its output ended cleanly.
#[derive(Debug)]
enum Fault {
    /// No line within `read_timeout`.
    Silent,
    /// Stdout closed but the process did not exit within `read_timeout`.
    NoExit,
    /// A line that is not a JSON object (cut).
    Invalid { line: String, error: String },
    /// The pipe failed (or carried bytes that are not UTF-8).
    Read(String),
}

/// What the events of a run said so far.
#[derive(Default, Debug)]
struct Events {
    /// The session id of the `system`/`init` event.
    session: Option<String>,
    /// The last `result` event.
    result: Option<Value>,
    /// The uuid of the last assistant message of the main thread (not a subagent's).
    last_assistant: Option<String>,
    /// Whether partial text deltas (`stream_event`, with `--include-partial-messages` in
    /// `extra_args`) were seen: then whole assistant messages are not forwarded again.
    partial: bool,
}

impl Events {
    /// Takes one stdout line, forwarding reply text to the request's delta sink.
    fn take(&mut self, line: &str, request: &ProviderRequest) -> Result<(), Fault> {
        let line = line.trim();
        if line.is_empty() {
            return Ok(());
        }
        let invalid = |error: String| Fault::Invalid {
            line: cut(line, 200),
            error,
        };
        let event: Value = serde_json::from_str(line).map_err(|e| invalid(e.to_string()))?;
        if !event.is_object() {
            return Err(invalid("not an object".into()));
        }
        let send = |text: &str| {
            if let (Some(sink), false) = (&request.deltas, text.is_empty()) {
                let _ = sink.send(StreamDelta::Text(text.to_owned()));
            }
        };
        match event.get("type").and_then(Value::as_str) {
            Some("system") if event.get("subtype").and_then(Value::as_str) == Some("init") => {
                if let Some(id) = event.get("session_id").and_then(Value::as_str) {
                    self.session = Some(id.to_owned());
                }
            }
            Some("assistant") => {
                let main_thread = event.get("parent_tool_use_id").is_none_or(Value::is_null);
                if let (true, Some(uuid)) = (main_thread, event.get("uuid").and_then(Value::as_str))
                {
                    self.last_assistant = Some(uuid.to_owned());
                }
                if self.partial {
                    return Ok(());
                }
                let blocks = event.pointer("/message/content").and_then(Value::as_array);
                for block in blocks.into_iter().flatten() {
                    if block.get("type").and_then(Value::as_str) == Some("text") {
                        send(block.get("text").and_then(Value::as_str).unwrap_or(""));
                    }
                }
            }
            Some("stream_event") => {
                let delta = event.pointer("/event/delta");
                if event.pointer("/event/type").and_then(Value::as_str)
                    == Some("content_block_delta")
                    && delta.and_then(|d| d.get("type")).and_then(Value::as_str)
                        == Some("text_delta")
                {
                    self.partial = true;
                    send(
                        delta
                            .and_then(|d| d.get("text"))
                            .and_then(Value::as_str)
                            .unwrap_or(""),
                    );
                }
            }
            Some("result") => self.result = Some(event),
            _ => {}
        }
        Ok(())
    }
}

/// Reads stdout line by line to its end, each line within `read_timeout` of the previous one.
async fn read_events(
    stdout: impl AsyncRead + Unpin,
    read_timeout: Duration,
    events: &mut Events,
    request: &ProviderRequest,
) -> Result<(), Fault> {
    let mut lines = BufReader::new(stdout).lines();
    loop {
        match timeout(read_timeout, lines.next_line()).await {
            Err(_) => return Err(Fault::Silent),
            Ok(Err(e)) => return Err(Fault::Read(e.to_string())),
            Ok(Ok(None)) => return Ok(()),
            Ok(Ok(Some(line))) => events.take(&line, request)?,
        }
    }
}

/// Keeps the last lines of stderr (each cut) in `tail` until the pipe closes.
async fn keep_tail(stderr: impl AsyncRead + Unpin, tail: Arc<Mutex<VecDeque<String>>>) {
    let mut reader = BufReader::new(stderr);
    let mut buffer = Vec::new();
    loop {
        buffer.clear();
        match reader.read_until(b'\n', &mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let line = String::from_utf8_lossy(&buffer);
                let line = line.trim();
                if line.is_empty() {
                    continue;
                }
                let mut tail = tail.lock().unwrap_or_else(|p| p.into_inner());
                if tail.len() == STDERR_LINES {
                    tail.pop_front();
                }
                tail.push_back(cut(line, 300));
            }
        }
    }
}

/// What a result event says: its `result` text and any `errors`.
fn result_text(result: &Value) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(text) = result.get("result").and_then(Value::as_str) {
        parts.push(text.to_owned());
    }
    for error in result
        .get("errors")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        parts.push(
            error
                .as_str()
                .map_or_else(|| error.to_string(), str::to_owned),
        );
    }
    parts.join("; ")
}

/// The failure a result event reports (`is_error`, or a subtype other than `success`), if any.
fn result_error(result: &Value) -> Option<String> {
    let subtype = result
        .get("subtype")
        .and_then(Value::as_str)
        .unwrap_or("(none)");
    let is_error = result
        .get("is_error")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if !is_error && subtype == "success" {
        return None;
    }
    let said = result_text(result);
    let said = if said.is_empty() {
        "no details".to_owned()
    } else {
        cut(&said, 500)
    };
    Some(format!(
        "the Claude Code CLI reported an error (subtype {subtype}): {said}"
    ))
}

/// The usage of a result event, as the CLI reports it (summed over the run's model calls).
fn usage_of(result: &Value) -> Option<TokenUsage> {
    let usage = result.get("usage").filter(|u| u.is_object())?;
    let n = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
    Some(TokenUsage {
        input: n("input_tokens"),
        output: n("output_tokens"),
        cache_read: n("cache_read_input_tokens"),
        cache_write: n("cache_creation_input_tokens"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_is_an_error_when_flagged_or_not_a_success() {
        let ok = serde_json::json!({"type": "result", "subtype": "success", "is_error": false, "result": "hi"});
        assert_eq!(result_error(&ok), None);
        let flagged = serde_json::json!({"type": "result", "subtype": "success", "is_error": true, "result": "API Error: 500"});
        assert!(result_error(&flagged).unwrap().contains("API Error: 500"));
        let turns =
            serde_json::json!({"type": "result", "subtype": "error_max_turns", "is_error": false});
        assert!(result_error(&turns).unwrap().contains("error_max_turns"));
        let listed = serde_json::json!({"type": "result", "subtype": "error_during_execution", "errors": ["boom"]});
        assert!(result_error(&listed).unwrap().contains("boom"));
    }

    #[test]
    fn usage_maps_every_field_and_is_none_without_usage() {
        let result = serde_json::json!({"usage": {"input_tokens": 1, "output_tokens": 2, "cache_read_input_tokens": 3, "cache_creation_input_tokens": 4}});
        assert_eq!(
            usage_of(&result),
            Some(TokenUsage {
                input: 1,
                output: 2,
                cache_read: 3,
                cache_write: 4
            })
        );
        assert_eq!(usage_of(&serde_json::json!({"result": "x"})), None);
    }
}
