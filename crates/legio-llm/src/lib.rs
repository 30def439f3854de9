//! legio-llm: LLM providers, the only crate that knows provider JSON. The [`Provider`] trait every
//! provider implements, helpers that render a context plan as chat turns, a deterministic
//! [`ScriptedProvider`] for tests, demos and benchmarks, and the real providers: `openai-chat`,
//! `anthropic-messages` (stateless), `openai-responses` and `claude-code` (session-stateful and
//! resumable). Every real provider module has the same inner shape: client, request mapping,
//! response mapping, errors.

pub mod anthropic;
mod build;
pub mod claude_code;
pub mod http;
pub mod openai_chat;
pub mod openai_responses;
mod provider;
mod render;
mod scripted;
mod settings;

pub use build::{build_provider, ProviderSettings};
pub use http::BuildError;
pub use provider::{
    Capabilities, DeltaSink, McpAccess, Provider, ProviderError, ProviderFuture, ProviderReply,
    ProviderRequest, StreamDelta, ToolDef,
};
pub use render::{
    bootstrap_block, chat_turns, structured_turns, volatile_tail, ChatRole, ChatTurn,
    StructuredTurn, ToolCallPart, ToolResultPart,
};
pub use scripted::{
    read_shared_sessions, Fault, RecordedRequest, ScriptedConfig, ScriptedProvider,
    SHARED_SESSIONS_ENV,
};
pub use settings::{
    default_max_output_tokens, is_openai_api, CacheTtl, ClaudeCodeSettings, HttpSettings,
    RetrySettings, KINDS,
};
