//! legio-runtime: supervised agent actors that own their provider sessions (the only crate that
//! names ractor), with exact context delivery across restarts.

mod agent;
mod clock;
mod compact;
mod config;
mod dispatch;
mod error;
mod fit;
mod heartbeat;
mod mcp_client;
mod mcp_config;
mod mcp_server;
mod mcp_token;
mod memory;
mod messages;
pub mod metrics;
mod names;
mod operator;
mod prepare;
mod progress;
mod provider_settings;
mod registry;
mod reply;
mod restart;
mod runtime;
mod server_settings;
mod shared;
mod status;
mod store_backend;
mod supervisor;
mod tools;
mod tools_view;
mod turn;

pub use config::{
    AgentSpec, ProviderSpec, RestartSettings, Role, RuntimeConfig, RuntimeSettings, StoreSettings,
    UnknownMentions,
};
pub use error::{ConfigError, ErrorCode, RuntimeError};
pub use mcp_config::{McpServerSpec, McpTransport, MCP_DEFAULT_TIMEOUT, MCP_TOOL_PREFIX};
pub use mcp_server::{serve_mcp_stdio, McpScope, McpService, ScopeResolver};
pub use mcp_token::{McpTokenError, McpTokenKey, MCP_TOKEN_DEFAULT_TTL};
pub use memory::{fold_memory, memory_table, read_memory, MemoryTools, ToolError, ToolSpec};
pub use names::IntoName;
pub use operator::{
    context_report, inspect, require_conversation, ContextReport, InspectKind, ReportItem, Table,
};
pub use prepare::{
    compaction_job, prepare_turn, preview_turn, CompactionJob, PreparedTurn, TurnInputs,
    TurnPreview, MAX_DELTA,
};
pub use progress::{Progress, ProgressSink};
pub use registry::{ToolFuture, ToolRegistry, ToolRegistryError, DISPATCH, GET_HISTORY};
pub use reply::{AgentReply, Posted, Reply, TurnError, TurnErrorKind};
pub use restart::{RestartDecision, RestartTracker};
pub use runtime::{AgentStatus, Runtime, RuntimeBuilder};
pub use server_settings::{ServerSettings, DEFAULT_BIND};
pub use status::Activity;
pub use store_backend::StoreBackend;
pub use tools_view::tools_table;
