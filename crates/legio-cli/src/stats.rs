//! `legio stats`: log size, events by kind, per-conversation counts, size on disk.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::Result;
use legio_core::{EventKind, Seq};

use crate::common::{self, for_each_record};
use crate::invocation::Context;

/// Arguments of `legio stats`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs the command.
pub fn run(context: &Context, _args: Args) -> Result<ExitCode> {
    let log = common::open_log_for_reading(context)?;
    let last = log.last_seq();
    let bar = common::progress(last.get(), "stats", true);
    let mut kinds: BTreeMap<EventKind, u64> = BTreeMap::new();
    let mut conversations: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for_each_record(&*log, None, Seq::FIRST, last, |record| {
        bar.inc(1);
        *kinds.entry(record.event.kind()).or_default() += 1;
        let entry = conversations
            .entry(record.event.conversation().to_string())
            .or_default();
        entry.0 += 1;
        entry.1 += u64::from(record.event.as_message().is_some());
        Ok(())
    })?;
    bar.finish_and_clear();
    outln!("events: {}", last.get());
    outln!(
        "on disk: {:.1} MiB at {}",
        log.size_on_disk()? as f64 / (1024.0 * 1024.0),
        common::log_location(context)?
    );
    outln!("by kind:");
    for (kind, count) in &kinds {
        outln!("  {:<18} {count}", kind.as_str());
    }
    outln!("by conversation ({}):", conversations.len());
    for (conversation, (events, messages)) in &conversations {
        outln!("  {conversation:<24} {events} events, {messages} messages");
    }
    Ok(ExitCode::SUCCESS)
}
