//! `legio import`: appends an export's events into an empty log. Every line is checked before
//! anything is written: a malformed line is reported with its number and nothing is kept.

use std::io::{BufRead, BufReader};
use std::process::ExitCode;

use anyhow::{bail, Context as _, Result};
use legio_core::{record_from_json, Event, Seq};
use legio_store::EventLog;

use crate::common;
use crate::invocation::Context;

/// Arguments of `legio import`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The JSON lines file written by `legio export`.
    file: std::path::PathBuf,
}

/// Runs the command.
pub fn run(context: &Context, args: Args) -> Result<ExitCode> {
    let file = std::fs::File::open(&args.file)
        .with_context(|| format!("cannot open {}", args.file.display()))?;
    let total = file.metadata().map(|m| m.len()).unwrap_or(0);
    let bar = common::progress(total, "reading", true);
    let mut events: Vec<Event> = Vec::new();
    let mut expected = Seq::FIRST;
    let mut renumbered = false;
    for (index, line) in BufReader::new(file).lines().enumerate() {
        let number = index + 1;
        let line =
            line.with_context(|| format!("{}: line {number} cannot be read", args.file.display()))?;
        bar.inc(line.len() as u64 + 1);
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value = serde_json::from_str(&line).map_err(|e| {
            anyhow::anyhow!(
                "{}: line {number} is not JSON ({e}); nothing was imported",
                args.file.display()
            )
        })?;
        let record = record_from_json(value).map_err(|e| {
            anyhow::anyhow!(
                "{}: line {number}: {e}; nothing was imported",
                args.file.display()
            )
        })?;
        renumbered |= record.seq != expected;
        expected = expected.next();
        events.push(record.event);
    }
    bar.finish_and_clear();
    if events.is_empty() {
        bail!(
            "{} holds no events; nothing was imported",
            args.file.display()
        );
    }
    let log = common::open_or_create_log(context)?;
    if log.last_seq() != Seq::ZERO {
        bail!(
            "the database at {} already holds {} events; import only into an empty database (pass --db NEW_PATH)",
            context.store()?.path.display(),
            log.last_seq()
        );
    }
    let bar = common::progress(events.len() as u64, "import", true);
    let count = events.len();
    let mut batch = Vec::with_capacity(common::CHUNK);
    for event in events {
        batch.push(event);
        if batch.len() == common::CHUNK {
            bar.inc(batch.len() as u64);
            log.append(std::mem::take(&mut batch))?;
        }
    }
    if !batch.is_empty() {
        bar.inc(batch.len() as u64);
        log.append(batch)?;
    }
    log.flush()?;
    bar.finish_and_clear();
    outln!(
        "imported {count} events into {}",
        context.store()?.path.display()
    );
    if renumbered {
        outln!("note: the file's seqs were not 1, 2, 3, ...: events were renumbered in file order");
    }
    Ok(ExitCode::SUCCESS)
}
