//! Metrics: the Prometheus recorder (installed once per process, histogram buckets set), its
//! upkeep, `GET /metrics` rendered by axum, and the gauges only the server samples (log size).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::error::ServeError;
use crate::server::AppState;

/// Bytes the log occupies on disk (gauge), sampled by the server's upkeep.
pub const STORE_SIZE: &str = "legio_store_size_bytes";
/// How often upkeep runs (histogram maintenance, the log size gauge).
const UPKEEP: Duration = Duration::from_secs(5);

/// The installed Prometheus recorder's handle.
#[derive(Clone, Debug)]
pub struct MetricsHandle(PrometheusHandle);

static HANDLE: OnceLock<Result<MetricsHandle, String>> = OnceLock::new();

/// Installs the Prometheus recorder as the process's metrics recorder (once; later calls return
/// the same handle), with explicit buckets for the latency and size histograms.
pub fn install_metrics() -> Result<MetricsHandle, ServeError> {
    HANDLE
        .get_or_init(|| {
            let buckets = [
                (
                    legio_runtime::metrics::TURN_LATENCY,
                    &legio_runtime::metrics::TURN_LATENCY_BUCKETS[..],
                ),
                (
                    legio_store::metrics::APPEND_LATENCY,
                    &legio_store::metrics::APPEND_LATENCY_BUCKETS[..],
                ),
                (
                    legio_store::metrics::COMMIT_GROUP_EVENTS,
                    &legio_store::metrics::COMMIT_GROUP_BUCKETS[..],
                ),
            ];
            let mut builder = PrometheusBuilder::new();
            for (name, values) in buckets {
                builder = builder
                    .set_buckets_for_metric(Matcher::Full(name.to_owned()), values)
                    .map_err(|e| e.to_string())?;
            }
            let handle = builder.install_recorder().map_err(|e| e.to_string())?;
            legio_runtime::metrics::describe();
            legio_store::metrics::describe();
            metrics::describe_gauge!(
                STORE_SIZE,
                metrics::Unit::Bytes,
                "Bytes the event log occupies on disk"
            );
            Ok(MetricsHandle(handle))
        })
        .clone()
        .map_err(|e| ServeError::Io(format!("cannot install the metrics recorder: {e}")))
}

impl MetricsHandle {
    /// The metrics in Prometheus's text format.
    pub fn render(&self) -> String {
        self.0.render()
    }
}

pub(crate) async fn render(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
}

/// Runs the recorder's upkeep (drains histogram buffers) and samples the log's size, every few
/// seconds, until aborted.
pub(crate) fn spawn_upkeep(state: Arc<AppState>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(UPKEEP);
        loop {
            ticker.tick().await;
            state.metrics.0.run_upkeep();
            let log = Arc::clone(state.runtime.log());
            match tokio::task::spawn_blocking(move || log.size_on_disk()).await {
                Ok(Ok(bytes)) => metrics::gauge!(STORE_SIZE).set(bytes as f64),
                Ok(Err(e)) => tracing::debug!(error = %e, "cannot size the log"),
                Err(_) => return,
            }
        }
    })
}
