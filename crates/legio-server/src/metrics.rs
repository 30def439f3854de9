//! Metrics: the Prometheus recorder (installed once per process, histogram buckets set) and the
//! gauges only the server samples (log size). Its route and upkeep are in exporter.rs.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::error::ServeError;

/// Bytes the log occupies on disk (gauge), sampled by the server's upkeep.
pub const STORE_SIZE: &str = "legio_store_size_bytes";

/// Event streams following the log (`GET /operator/events?follow=true` past their catch-up:
/// `legio --server URL replay --follow`), open now (gauge).
pub const EVENT_FOLLOWERS: &str = "legio_event_followers";

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
                    legio_runtime::metrics::LEASE_RENEW_LATENCY,
                    &legio_store::metrics::APPEND_LATENCY_BUCKETS[..],
                ),
                (
                    legio_store::metrics::COMMIT_STEP,
                    &legio_store::metrics::APPEND_LATENCY_BUCKETS[..],
                ),
                (
                    legio_store::metrics::LIST_WRITE,
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
            metrics::describe_gauge!(
                EVENT_FOLLOWERS,
                "Operator event streams following the log now"
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

    /// Drains the recorder's histogram buffers.
    pub(crate) fn run_upkeep(&self) {
        self.0.run_upkeep();
    }
}
