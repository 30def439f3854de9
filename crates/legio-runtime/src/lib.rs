//! legio-runtime: supervised agent actors that own their provider sessions (the only crate that
//! names ractor), with exact context delivery across restarts.

mod agent;
mod api;
mod calibrations;
mod clock;
mod cluster;
mod command;
mod compact;
mod declared_tools;
mod dispatch;
mod error;
mod fit;
mod follow;
mod heartbeat;
mod host_calls;
mod host_tools;
mod keyed;
mod mcp_client;
mod mcp_server;
mod mcp_token;
mod memory;
mod memory_calls;
mod messages;
pub mod metrics;
mod names;
mod outcome;
mod progress;
mod registry;
mod registry_error;
mod reply;
mod restart;
mod root;
mod runtime;
mod schedule;
mod shared;
mod status;
mod supervisor;
mod taken_in;
mod tool_arguments;
mod tool_progress;
mod tool_results;
mod tools;
mod tools_view;
mod turn;

pub use api::{AgentStatus, Posting, RuntimeBuilder};
pub use error::{ErrorCode, NotWaiting, RuntimeError};
pub use host_calls::{HostToolCall, HostToolResult, HostTurn};
pub use legio_config::{
    AgentSpec, ConfigError, HeartbeatSchedule, ProviderSpec, RestartSettings, Role, RuntimeConfig,
    RuntimeSettings, StoreBackend, StoreSettings, UnknownMentions,
};
pub use legio_config::{McpServerSpec, McpTransport, MCP_DEFAULT_TIMEOUT, MCP_TOOL_PREFIX};
pub use legio_ops::{
    agents_with_roster, compaction_job, context_report, fold_memory, inspect, memory_table,
    prepare_turn, preview_turn, read_memory, require_conversation, CompactionJob, ContextReport,
    InspectKind, OpsError, PreparedTurn, ReportItem, Table, TurnInputs, TurnPreview, MAX_DELTA,
    NO_SESSION,
};
pub use mcp_server::{serve_mcp_stdio, McpScope, McpService, ScopeResolver};
pub use mcp_token::{McpTokenError, McpTokenKey, MCP_TOKEN_DEFAULT_TTL};
pub use memory::{MemoryTools, ToolError, ToolSpec};
pub use names::IntoName;
pub use progress::{Progress, ProgressSink};
pub use registry::{ToolFuture, ToolRegistry, ToolRegistryError, DISPATCH, GET_HISTORY};
pub use reply::{AgentReply, Posted, Reply, TurnError, TurnErrorKind};
pub use restart::{RestartDecision, RestartTracker};
pub use runtime::Runtime;
pub use status::Activity;
pub use tools_view::tools_table;
