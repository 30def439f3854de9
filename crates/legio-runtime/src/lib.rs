//! legio-runtime: supervised agent actors that own their provider sessions (the only crate that
//! names ractor), with exact context delivery across restarts.

mod agent;
mod api;
mod clock;
mod command;
mod conversation;
mod error;
mod keyed;
mod messages;
pub mod metrics;
mod names;
mod placement;
mod progress;
mod reply;
mod runtime;
mod schedule;
mod shared;
mod status;
#[doc(hidden)]
pub mod testing;
mod tools;

pub use agent::restart::{RestartDecision, RestartTracker};
pub use api::{AgentStatus, Posting, RuntimeBuilder};
pub use command::ApprovalAnswer;
pub use error::{ErrorCode, NotWaiting, RuntimeError};
pub use legio_config::{
    AgentSpec, ConfigError, HeartbeatSchedule, ProviderSpec, RestartSettings, Role, RuntimeConfig,
    RuntimeSettings, StoreBackend, StoreSettings, UnknownMentions,
};
pub use legio_config::{McpServerSpec, McpTransport, MCP_DEFAULT_TIMEOUT, MCP_TOOL_PREFIX};
pub use legio_ops::{
    agents_with_roster, approvals_table, compaction_job, context_report, fold_memory, inspect,
    memory_table, prepare_turn, preview_turn, read_memory, require_conversation, CompactionJob,
    ContextReport, InspectKind, OpsError, PreparedTurn, ReportItem, Table, TurnInputs, TurnPreview,
    MAX_DELTA, NO_SESSION,
};
pub use legio_store::ErrorSource;
pub use names::IntoName;
pub use progress::{Progress, ProgressSink};
pub use reply::{AgentReply, Posted, Reply, TurnError, TurnErrorKind};
pub use runtime::Runtime;
pub use status::Activity;
pub use tools::host_calls::{HostToolCall, HostToolResult, HostTurn};
pub use tools::mcp_server::{serve_mcp_stdio, McpScope, McpService, ScopeResolver};
pub use tools::mcp_token::{McpTokenError, McpTokenKey, MCP_TOKEN_DEFAULT_TTL};
pub use tools::memory::{MemoryTools, ToolError, ToolSpec};
pub use tools::registry::{ToolFuture, ToolRegistry, ToolRegistryError, DISPATCH, GET_HISTORY};
pub use tools::view::tools_table;
