//! What the commands share: opening the log, the configuration, progress bars and colour that appear
//! only on a terminal, reading the whole log in chunks.

use std::io::IsTerminal;

use anyhow::{Context as _, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use legio_config::{RuntimeConfig, StoreBackend};
use legio_core::{ConversationKey, Record, Seq};
use legio_store::{EventLog, NatsLog, NatsOptions, SledLog};

use crate::invocation::Context;

/// How many events a command reads from the log at a time.
pub const CHUNK: usize = 10_000;

/// Opens an existing log for an offline command: the sled database, or with `--nats` (or
/// `store.backend = "nats"`) the cluster's stream, read-only.
pub fn open_log(context: &Context) -> Result<Box<dyn EventLog>> {
    open_existing(context, true)
}

/// Opens an existing log to read it (`replay`, `export`, `inspect`, `stats`, `context`): as
/// [`open_log`], without the fsyncs of everything already on disk that a writer's open does
/// (`StoreOptions::sync_on_open`) when the last writer closed the log cleanly; after a crash it
/// syncs as a writer would, so it never shows what a power loss could take back.
pub fn open_log_for_reading(context: &Context) -> Result<Box<dyn EventLog>> {
    open_existing(context, false)
}

fn open_existing(context: &Context, sync_on_open: bool) -> Result<Box<dyn EventLog>> {
    if let Some(options) = nats_options(context)? {
        return Ok(Box::new(NatsLog::open_read_only(&options)?));
    }
    let store = context.store()?;
    let mut options = store.options.clone();
    options.create_if_missing = false;
    options.sync_on_open = sync_on_open;
    Ok(Box::new(SledLog::open(&store.path, &options)?))
}

/// Opens an existing log without writing to it (`verify`): the sled database through a private
/// copy (`SledLog::open_read_only`), or the cluster's stream read-only. The second value says why
/// the sled database had to be read from sled's log alone, if it had.
pub fn open_log_read_only(
    context: &Context,
) -> Result<(Box<dyn EventLog>, Option<legio_store::ReadAround>)> {
    if let Some(options) = nats_options(context)? {
        return Ok((Box::new(NatsLog::open_read_only(&options)?), None));
    }
    let store = context.store()?;
    let log = SledLog::open_read_only(&store.path, &store.options)?;
    let read_around = log.read_around().cloned();
    Ok((Box::new(log), read_around))
}

/// The cluster to read, if any: `--nats` URLs over the configuration's `[store.nats]` (or its
/// defaults), or the configuration's own when its backend is nats.
pub fn nats_options(context: &Context) -> Result<Option<NatsOptions>> {
    let configured = match context.store()?.backend {
        StoreBackend::Nats(options) => Some(*options),
        StoreBackend::Sled => None,
    };
    Ok(match (&context.nats, configured) {
        (Some(servers), configured) => Some(NatsOptions {
            servers: servers.clone(),
            ..configured.unwrap_or_default()
        }),
        (None, configured) => configured,
    })
}

/// Where the log is, in words, for a command's summary line.
pub fn log_location(context: &Context) -> Result<String> {
    Ok(match nats_options(context)? {
        Some(options) => format!(
            "stream {} on {}",
            options.stream,
            options.servers.join(", ")
        ),
        None => context.store()?.path.display().to_string(),
    })
}

/// The configuration (the roster is needed to know roles and providers). A missing file is said
/// to be needed; an invalid one's error says what is wrong and where, with nothing before it.
pub fn config(context: &Context) -> Result<RuntimeConfig> {
    let config = context.runtime_config();
    if context.config.exists() {
        return config;
    }
    config.with_context(|| "this command needs the roster from the configuration")
}

/// A tokio runtime for the commands that talk to agents.
pub fn tokio() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// How many events a whole-log command handles between two moves of its progress bar (a move
/// reads the clock and takes locks: per event, a visible share of a replay).
pub const PROGRESS_EVERY: u64 = 1024;

/// A progress bar on stderr when stderr is a terminal and `show` (hidden otherwise).
pub fn progress(total: u64, what: &str, show: bool) -> ProgressBar {
    let bar = ProgressBar::new(total);
    if show && std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template(
                "{msg} [{bar:30}] {pos}/{len} events ({per_sec}, eta {eta})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.set_message(what.to_owned());
    } else {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar
}

/// Whether stdout should get colour: a terminal, and `NO_COLOR` unset.
pub fn colour() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

/// Calls `visit` with every event of the log in `from..=to`, in order; with `conversation`, only
/// that conversation's events, read through its index rather than by scanning the whole log. A
/// reader thread fetches the next chunks while `visit` handles the current one (reading and
/// formatting overlap: on two cores a full replay takes about as long as the slower of the two,
/// not their sum).
pub fn for_each_record(
    log: &(dyn EventLog + Sync),
    conversation: Option<&ConversationKey>,
    from: Seq,
    to: Seq,
    mut visit: impl FnMut(Record) -> Result<()>,
) -> Result<()> {
    let last = to.min(log.last_seq());
    let first = from.max(Seq::FIRST);
    if first > last {
        return Ok(());
    }
    let read = |next: Seq| -> legio_store::Result<Vec<Record>> {
        match conversation {
            None => log.read_range(next, last, CHUNK),
            Some(key) => {
                let mut records = log.conversation_events(key, Seq(next.get() - 1), CHUNK)?;
                records.retain(|r| r.seq <= last);
                Ok(records)
            }
        }
    };
    std::thread::scope(|scope| {
        let (sender, receiver) =
            std::sync::mpsc::sync_channel::<legio_store::Result<Vec<Record>>>(4);
        scope.spawn(move || {
            let mut next = first;
            while next <= last {
                let chunk = read(next);
                let end = match &chunk {
                    Ok(records) => records.last().map(|r| r.seq),
                    Err(_) => None,
                };
                let failed = chunk.is_err();
                // The consumer stopped (an error on its side): stop reading.
                if sender.send(chunk).is_err() || failed {
                    return;
                }
                match end {
                    Some(end) => next = end.next(),
                    None => return,
                }
            }
        });
        for chunk in receiver {
            for record in chunk? {
                visit(record)?;
            }
        }
        Ok(())
    })
}
