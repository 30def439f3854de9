//! `GET /metrics` (the recorder's text) and the upkeep task that drains its histogram buffers and
//! samples the log's size.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use crate::state::AppState;

/// How often upkeep runs (histogram maintenance, the log size gauge).
const UPKEEP: Duration = Duration::from_secs(5);

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
            state.metrics.run_upkeep();
            let log = Arc::clone(state.runtime.log());
            match tokio::task::spawn_blocking(move || log.size_on_disk()).await {
                Ok(Ok(bytes)) => metrics::gauge!(crate::metrics::STORE_SIZE).set(bytes as f64),
                Ok(Err(e)) => tracing::debug!(error = %e, "cannot size the log"),
                Err(_) => return,
            }
        }
    })
}
