//! legio-runtime: supervised agent actors that own their provider sessions (the only crate that
//! names ractor), with exact context delivery across restarts.

mod agent;
mod clock;
mod cluster;
mod compact;
mod config;
mod dispatch;
mod error;
mod fit;
mod heartbeat;
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
mod turn;

pub use config::{
    AgentSpec, ProviderSpec, RestartSettings, Role, RuntimeConfig, RuntimeSettings, StoreSettings,
    UnknownMentions,
};
pub use error::{ConfigError, ErrorCode, RuntimeError};
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
