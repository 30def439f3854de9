//! The small tokio runtime each NATS handle owns (the client is async; the store's API blocks),
//! and waiting on it from any thread, including a worker of the caller's own async runtime.

use std::future::Future;

use crate::error::{Result, StoreError};

/// A runtime with `workers` threads named `legio-nats`.
pub(crate) fn build(workers: usize) -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("legio-nats")
        .enable_all()
        .build()
        .map_err(|e| StoreError::io("starting the NATS client runtime", e))
}

/// Spawns `future` on `handle` and waits for its output on this thread (unlike
/// `Runtime::block_on`, this never panics when the caller is inside another runtime).
pub(crate) fn block_on<F>(handle: &tokio::runtime::Handle, future: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    handle.spawn(async move {
        let _ = tx.send(future.await);
    });
    match rx.recv() {
        Ok(output) => output,
        Err(_) => panic!("the NATS client runtime stopped while a call was waiting"),
    }
}
