//! The `Provider` trait: what the runtime asks of a model provider, and what it gets back.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use legio_core::{AgentName, ContextPlan, ConversationKey, History, TokenUsage};
use thiserror::Error;

use crate::render::ToolCallPart;

/// What a provider can do.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Capabilities {
    /// Whether it keeps its own history, and whether a session survives our process.
    pub history: History,
    /// Its context window in tokens.
    pub context_window: u64,
    /// Whether it takes our tools ([`ProviderRequest::tools`]) and returns the calls the model
    /// makes ([`ProviderReply::tool_calls`]). `claude-code` does not: the CLI runs its own tools.
    pub tools: bool,
}

/// A tool offered to the model: its name, what it does, and the JSON schema of its arguments.
/// (Serializable: a host's tools cross the cluster's node bus with a forwarded turn.)
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ToolDef {
    /// Its name, unique among the tools of one request.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// The JSON schema of its arguments (an object schema).
    pub parameters: serde_json::Value,
}

/// One turn's request.
#[derive(Clone, Debug)]
pub struct ProviderRequest {
    /// The conversation.
    pub conversation: ConversationKey,
    /// The agent the request is for.
    pub agent: AgentName,
    /// The agent's system prompt (for the orchestrator, with the roster).
    pub system_prompt: String,
    /// The provider session to continue; `None` starts a new one (stateful providers).
    pub resume: Option<String>,
    /// What to send: mode, notice, history and the new message.
    pub plan: ContextPlan,
    /// The specialists' current status, sent in the orchestrator's message (never the system
    /// prompt, so it cannot go stale).
    pub status: Option<String>,
    /// Where a streaming provider sends the reply's text as it arrives (each item a fragment, in
    /// order), and the model's thinking where the provider streams it; `None` when nobody
    /// listens. The reply itself still arrives whole in [`ProviderReply`]: fragments are
    /// progress, never the record (thinking is not recorded at all).
    pub deltas: Option<DeltaSink>,
    /// The tools the model may call this step (empty: none). Described in the provider's own
    /// tool format; a provider without tool support ([`Capabilities::tools`]) ignores them.
    pub tools: std::sync::Arc<[ToolDef]>,
    /// legio's own MCP endpoint for this agent in this conversation, for a provider that runs
    /// tools itself (`claude-code`) instead of taking `tools`; `None` when there is none.
    pub mcp: Option<McpAccess>,
}

/// Where a provider that runs its own tool loop reaches the agent's legio tools over MCP.
#[derive(Clone, PartialEq, Eq)]
pub struct McpAccess {
    /// The streamable-HTTP endpoint (`http://HOST:PORT/mcp`).
    pub url: String,
    /// A bearer token scoped to the request's conversation and agent.
    pub bearer: String,
    /// The names of the tools it serves (the agent's own), to allow.
    pub tools: Vec<String>,
}

impl std::fmt::Debug for McpAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpAccess")
            .field("url", &self.url)
            .field("bearer", &"<redacted>")
            .field("tools", &self.tools)
            .finish()
    }
}

/// The receiving end of a provider's fragments lives with whoever shows progress.
pub type DeltaSink = tokio::sync::mpsc::UnboundedSender<StreamDelta>;

/// One streamed fragment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamDelta {
    /// A fragment of the reply's text; concatenated, the fragments are the reply.
    Text(String),
    /// A fragment of the model's thinking, where the provider streams it (Anthropic's
    /// `thinking_delta`, the Responses API's reasoning text and summaries, a chat completion's
    /// `reasoning_content` or `reasoning`). Progress only: never part of the reply or the log.
    Thinking(String),
}

/// A successful turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderReply {
    /// The reply's text.
    pub text: String,
    /// Usage as the provider reported it, if it did.
    pub usage: Option<TokenUsage>,
    /// The provider session after this turn (stateful providers), to resume with next time.
    pub provider_session: Option<String>,
    /// The tools the model asked to call, in order, each with the provider's call id (empty: the
    /// reply is the answer). The runtime runs them and sends the results back.
    pub tool_calls: Vec<ToolCallPart>,
}

/// Why a provider call failed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ProviderError {
    /// The provider no longer knows the session to resume (expired, 404): the runtime records a
    /// boundary and bootstraps a new session from the log.
    #[error("the provider no longer knows session {session}")]
    SessionLost {
        /// The session id that was asked for.
        session: String,
    },
    /// Any other failure; the message says what to check.
    #[error("{message}")]
    Failed {
        /// What went wrong.
        message: String,
    },
}

/// The future a provider call returns.
pub type ProviderFuture<'a> =
    Pin<Box<dyn Future<Output = Result<ProviderReply, ProviderError>> + Send + 'a>>;

/// A model provider.
///
/// Contract: `call` sends exactly what the request's plan holds (the runtime decided what the
/// provider has not seen) and offers exactly the request's tools; it never records anything
/// itself and never runs a tool: the calls the model makes come back in
/// [`ProviderReply::tool_calls`], their results in a later request's plan (messages with
/// `ToolResult` parts, linked by the provider's call id). It may be cancelled at any await
/// point (the runtime's per-turn timeout drops the future). A stateful provider returns the
/// session id to resume with next time in `provider_session`.
pub trait Provider: Send + Sync + fmt::Debug {
    /// What the provider can do.
    fn capabilities(&self) -> Capabilities;

    /// Runs one turn.
    fn call(&self, request: ProviderRequest) -> ProviderFuture<'_>;
}
