//! A failed event log as a state the server reports (issue 16), not a dead end: `/readyz` answers
//! 503 naming the failure's cause (the same code and message a refused write gets), and
//! [`watch`] resolves `server.storage_failure_exit_seconds` after the failure, for `legio serve`
//! to stop and exit non-zero so that its supervisor starts it again. The sled log does not heal
//! in place (its state after a failed write is unknown; docs/storage.md, "Storage failures"); a
//! new open recovers it, with every acknowledged event.

use std::sync::Arc;
use std::time::Duration;

use legio_runtime::RuntimeError;
use legio_store::{EventLog, StoreError};

use crate::error::ApiError;

/// How often [`watch`] looks at the log's state.
const POLL: Duration = Duration::from_millis(100);

/// The 503 `/readyz` answers once the log has failed: the code of the cause (`storage_full`,
/// `too_many_open_files`, `storage_failed`) and a message with the system's own words and what
/// happens next.
pub(crate) fn not_ready(failure: StoreError, exit_after: Duration) -> ApiError {
    let refused = ApiError::from(RuntimeError::Store(failure));
    ApiError::new(
        refused.code,
        format!(
            "not ready: the event log failed and refuses every write ({}); `legio serve` exits \
             {} s after the failure (server.storage_failure_exit_seconds) so that its \
             supervisor starts it again; everything acknowledged is durable",
            refused.message,
            exit_after.as_secs_f64()
        ),
    )
}

/// Resolves `exit_after` after `log` failed, with the failure; never while the log works.
pub(crate) async fn watch(log: Arc<dyn EventLog>, exit_after: Duration) -> StoreError {
    let mut tick = tokio::time::interval(POLL);
    let failure = loop {
        tick.tick().await;
        if let Some(failure) = log.failure() {
            break failure;
        }
    };
    tracing::error!(
        error = %failure,
        exit_in_seconds = exit_after.as_secs_f64(),
        "the event log failed: not ready, every write refused; the process stops once the delay \
         has passed (server.storage_failure_exit_seconds)"
    );
    tokio::time::sleep(exit_after).await;
    failure
}
