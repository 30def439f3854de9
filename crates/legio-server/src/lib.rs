//! legio-server: the host-facing HTTP server (the only crate with HTTP types). Hosts post turns
//! and read session history; operators use the CLI's live mode against it; Prometheus scrapes its
//! metrics; a dashboard shows them. `legio serve` starts it. The API is `proto/openapi.yaml`; its
//! semantics are in `docs/http-api.md`.

mod approvals;
mod auth;
mod dashboard;
mod error;
mod exporter;
mod heartbeats;
mod history;
mod host_tools;
mod limits;
mod mcp;
mod mcp_key;
mod meta;
mod metrics;
mod openai;
mod operator;
mod origin;
mod parking;
mod runs;
mod server;
mod server_limits;
mod server_tokens;
mod settings;
mod state;
mod storage;
mod turns;
mod wire;

pub use error::{ApiError, ServeError};
pub use metrics::{install_metrics, MetricsHandle};
pub use server::{Server, ShutdownReport};
pub use server_limits::ServerLimits;
pub use server_tokens::{Scope, ScopedToken};
pub use settings::{ServerSettings, DEFAULT_BIND};
