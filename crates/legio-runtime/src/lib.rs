//! legio-runtime: supervised agent actors that own their provider sessions (the only crate that
//! names ractor), with exact context delivery across restarts.

mod agent;
mod compact;
mod config;
mod error;
mod fit;
mod heartbeat;
mod memory;
pub mod metrics;
mod operator;
mod prepare;
mod progress;
mod provider_settings;
mod restart;
mod runtime;
mod server_settings;
mod shared;
mod status;
mod supervisor;
mod tools;

pub use agent::AgentReply;
pub use config::{
    AgentSpec, ProviderSpec, RestartSettings, Role, RuntimeConfig, RuntimeSettings, StoreSettings,
};
pub use error::{ConfigError, RuntimeError};
pub use memory::{fold_memory, memory_table, read_memory, MemoryTools, ToolError, ToolSpec};
pub use operator::{
    context_report, inspect, require_conversation, ContextReport, InspectKind, ReportItem, Table,
};
pub use prepare::{
    compaction_job, prepare_turn, preview_turn, CompactionJob, PreparedTurn, TurnInputs,
    TurnPreview, MAX_DELTA,
};
pub use progress::{Progress, ProgressSink};
pub use restart::{RestartDecision, RestartTracker};
pub use runtime::{AgentStatus, Runtime};
pub use server_settings::{ServerSettings, DEFAULT_BIND};
pub use status::Activity;
pub use tools::{ToolFuture, ToolRegistry, ToolRegistryError, DISPATCH, GET_HISTORY};
