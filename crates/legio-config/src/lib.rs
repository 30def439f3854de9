//! legio-config: `config/legio.toml` parsed strictly into the settings every layer uses (the
//! store, the runtime, the roster, the providers), with no actor and no async runtime, so the
//! offline commands and the server read the same file the runtime does.

mod approval;
mod config;
mod error;
mod mcp_config;
mod provider_settings;
mod raw;
mod schedule;
mod store_backend;

pub use approval::{ApprovalPolicy, ToolPattern, APPROVAL_TIMEOUT_DEFAULT};
pub use config::{
    AgentSpec, ProviderSpec, RestartSettings, Role, RuntimeConfig, RuntimeSettings, StoreSettings,
    UnknownMentions,
};
pub use error::{ConfigError, UnknownAgent};
pub use mcp_config::{McpServerSpec, McpTransport, MCP_DEFAULT_TIMEOUT, MCP_TOOL_PREFIX};
pub use raw::RawSection;
pub use schedule::HeartbeatSchedule;
pub use store_backend::StoreBackend;
