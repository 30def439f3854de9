//! legio-server: the host-facing HTTP server (the only crate with HTTP types). Hosts post turns
//! and read session history; operators use the CLI's live mode against it; Prometheus scrapes its
//! metrics; a dashboard shows them. `legio serve` starts it. The API is `proto/openapi.yaml`; its
//! semantics are in `docs/http-api.md`.

mod auth;
mod dashboard;
mod error;
mod exporter;
mod history;
mod mcp;
mod meta;
mod metrics;
mod operator;
mod server;
mod state;
mod turns;

pub use error::{ApiError, ServeError};
pub use metrics::{install_metrics, MetricsHandle};
pub use server::{Server, ShutdownReport};
