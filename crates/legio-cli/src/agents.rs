//! What the commands that talk to agents share (`chat`, `post`): opening the legion and posting
//! with warnings. Built only with the `runtime` feature, so the offline commands never link the
//! actor crates.

use anyhow::Result;
use legio_runtime::{Posted, Progress, Runtime, RuntimeError};

use crate::common::config;
use crate::invocation::Context;

/// Opens the legion described by the configuration.
pub async fn open_runtime(context: &Context) -> Result<Runtime> {
    Ok(Runtime::open(config(context)?).await?)
}

/// Posts `text` as the user and prints a warning line on stderr for each compaction that failed
/// during the turns (the turn goes on; older messages may be left out to fit the window).
pub async fn post_with_warnings(
    runtime: &Runtime,
    conversation: &str,
    text: &str,
) -> std::result::Result<Posted, RuntimeError> {
    let (sink, mut progress) = tokio::sync::mpsc::unbounded_channel();
    let warnings = tokio::spawn(async move {
        while let Some(step) = progress.recv().await {
            if let Progress::CompactionFailed { agent, reason } = step {
                eprintln!("warning: {agent}: compacting the context failed ({reason}); the turn went on without a new summary");
            }
        }
    });
    let replies = runtime
        .post_streaming(conversation, "user", text, sink)
        .await;
    let _ = warnings.await;
    replies
}
