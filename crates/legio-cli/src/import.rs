//! `legio import`: an export's events into a new database, all or nothing. The whole file is
//! read and checked first (`import_check.rs`: limits, ids, replies, reserved conversations, the
//! roster, session events); then the events are written into a new folder beside the target,
//! which replaces the target (absent, or an empty database) only once everything is durable. A
//! failure at any step leaves the target as it was and removes the new folder: a retry starts
//! afresh.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use legio_core::{record_from_json, AgentName, Event, Seq};
use legio_store::{EventLog, SledLog, StoreError, StoreOptions};

use crate::common;
use crate::import_check::Checker;
use crate::invocation::Context;

/// Arguments of `legio import`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The JSON lines file written by `legio export`.
    file: std::path::PathBuf,
}

/// The events of a file, checked.
struct Checked {
    events: Vec<Event>,
    renumbered: bool,
}

/// The file's seqs, to renumber the seqs events name as the events are renumbered (1, 2, 3,
/// ... in file order): a name of seq S becomes the new seq of the file's last event at or before
/// S, so "everything up to S" keeps covering the same events of the file. A seq not after the
/// one before it starts a new run (a file made of several exports): names resolve in their run.
#[derive(Default)]
struct Renumbering {
    /// How many events came before the current run.
    before: u64,
    /// The current run's seqs, ascending.
    run: Vec<Seq>,
}

impl Renumbering {
    /// Notes the record's seq and renumbers the seqs its event names; refuses an event that
    /// names a seq after its own.
    fn take(&mut self, record: &mut legio_core::Record) -> Result<(), String> {
        if self.run.last().is_some_and(|last| *last >= record.seq) {
            self.before += self.run.len() as u64;
            self.run.clear();
        }
        self.run.push(record.seq);
        for named in record.event.seq_references_mut() {
            if *named > record.seq {
                return Err(format!(
                    "the event names #{named}, after its own seq #{}",
                    record.seq
                ));
            }
            let at_or_before = self.run.partition_point(|s| s <= named) as u64;
            *named = Seq(self.before + at_or_before);
        }
        Ok(())
    }
}

/// Runs the command.
pub fn run(context: &Context, args: Args) -> Result<ExitCode> {
    let store = context.store()?;
    let roster = roster(context);
    let checked = read_and_check(&args.file, store.options.max_message_bytes, roster.as_ref())?;
    let target = store.path.clone();
    let replace = target_is_replaceable(&target, &store.options)?;
    let count = checked.events.len();
    let staging = staging_folder(&target);
    if let Err(e) = write_staged(&staging, &store.options, checked.events) {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e.context(format!(
            "nothing was imported into {}; fix the cause and import again",
            target.display()
        )));
    }
    swap_in(&staging, &target, replace)?;
    outln!("imported {count} events into {}", target.display());
    if checked.renumbered {
        outln!("note: the file's seqs were not 1, 2, 3, ...: events were renumbered in file order, and the seqs they name with them");
    }
    Ok(ExitCode::SUCCESS)
}

/// The configured roster, when a configuration can be read (else agents are not checked).
fn roster(context: &Context) -> Option<HashSet<AgentName>> {
    match context.runtime_config() {
        Ok(config) => Some(config.agents.iter().map(|a| a.name.clone()).collect()),
        Err(e) => {
            eprintln!("note: no configuration ({e}); agents are not checked against a roster");
            None
        }
    }
}

/// Reads every line and checks every event; the first problem, with its line, stops it.
fn read_and_check(
    path: &Path,
    max_message_bytes: usize,
    roster: Option<&HashSet<AgentName>>,
) -> Result<Checked> {
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let total = file.metadata().map(|m| m.len()).unwrap_or(0);
    let bar = common::progress(total, "checking", true);
    let mut checker = Checker::new(max_message_bytes, roster);
    let mut events = Vec::new();
    let mut expected = Seq::FIRST;
    let mut renumbered = false;
    let mut seqs = Renumbering::default();
    let refuse = |number: usize, what: String| {
        anyhow::anyhow!(
            "{}: line {number}: {what}; nothing was imported",
            path.display()
        )
    };
    for (index, line) in BufReader::new(file).lines().enumerate() {
        let number = index + 1;
        let line = line.map_err(|e| refuse(number, format!("cannot be read ({e})")))?;
        bar.inc(line.len() as u64 + 1);
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value = serde_json::from_str(&line)
            .map_err(|e| refuse(number, format!("is not JSON ({e})")))?;
        let mut record = record_from_json(value).map_err(|e| refuse(number, e.to_string()))?;
        checker
            .check(&record.event)
            .map_err(|what| refuse(number, what))?;
        seqs.take(&mut record)
            .map_err(|what| refuse(number, what))?;
        renumbered |= record.seq != expected;
        expected = expected.next();
        events.push(record.event);
    }
    bar.finish_and_clear();
    if events.is_empty() {
        bail!("{} holds no events; nothing was imported", path.display());
    }
    Ok(Checked { events, renumbered })
}

/// Whether the target exists and must be replaced: an existing database with events is refused
/// (as is one that another process holds); an empty one is replaced.
fn target_is_replaceable(target: &Path, options: &StoreOptions) -> Result<bool> {
    if !target.exists() {
        return Ok(false);
    }
    let mut options = options.clone();
    options.create_if_missing = false;
    let log = match SledLog::open(target, &options) {
        Ok(log) => log,
        Err(StoreError::NotFound { .. }) => bail!(
            "{} exists and is not a legio database; import into a new path (--db NEW_PATH)",
            target.display()
        ),
        Err(e) => return Err(e.into()),
    };
    if log.last_seq() != Seq::ZERO {
        bail!(
            "the database at {} already holds {} events; import only into an empty database (pass --db NEW_PATH)",
            target.display(),
            log.last_seq()
        );
    }
    Ok(true)
}

/// The new folder beside the target that the import writes first.
fn staging_folder(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "legio".into());
    target.with_file_name(format!(".{name}.importing-{}", std::process::id()))
}

/// How long one batch may take to become durable before the import gives up:
/// `LEGIO_IMPORT_STALL_SECONDS`, default 120. sled does not report a full disk: its writes wait
/// forever, so a stall is how a full disk shows.
fn stall_limit() -> Duration {
    std::env::var("LEGIO_IMPORT_STALL_SECONDS")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(Duration::from_secs(120), Duration::from_secs_f64)
}

/// Writes every event into a new database at `staging`, durably.
fn write_staged(staging: &Path, options: &StoreOptions, events: Vec<Event>) -> Result<()> {
    if staging.exists() {
        std::fs::remove_dir_all(staging)
            .with_context(|| format!("cannot remove {}", staging.display()))?;
    }
    let mut options = options.clone();
    options.create_if_missing = true;
    let log = SledLog::open(staging, &options)?;
    let rt = common::tokio()?;
    let bar = common::progress(events.len() as u64, "import", true);
    for batch in events.chunks(common::CHUNK) {
        bar.inc(batch.len() as u64);
        let handle = log.submit(batch.to_vec())?;
        let stall = stall_limit();
        match rt.block_on(async { tokio::time::timeout(stall, handle).await }) {
            Ok(done) => {
                done?;
            }
            Err(_) => {
                // The committer is stuck inside sled: closing the log would wait for it forever.
                std::mem::forget(log);
                bail!(
                    "the database stopped writing for {} s (sled waits forever when the disk is \
                     full); check the free space of {}",
                    stall.as_secs_f64(),
                    staging.parent().unwrap_or(staging).display()
                );
            }
        }
    }
    log.close()?;
    bar.finish_and_clear();
    Ok(())
}

/// Puts the staged database in the target's place (removing the empty target first) and makes
/// the rename durable.
fn swap_in(staging: &Path, target: &Path, replace: bool) -> Result<()> {
    if replace {
        std::fs::remove_dir_all(target)
            .with_context(|| format!("cannot replace the empty database {}", target.display()))?;
    }
    if let Err(e) = std::fs::rename(staging, target) {
        let _ = std::fs::remove_dir_all(staging);
        return Err(anyhow::anyhow!(
            "cannot move the imported database into {} ({e}); nothing was imported",
            target.display()
        ));
    }
    if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::File::open(parent)
            .and_then(|dir| dir.sync_all())
            .with_context(|| format!("cannot sync {}", parent.display()))?;
    }
    Ok(())
}
