//! `legio export`: the log (or one conversation) as JSON lines, one event per line. With
//! `--salvage`, from a damaged sled database: every event that still decodes, the seq ranges it
//! could not read named on stderr (exit 3 when any), the database never written.

use std::io::{BufWriter, Write};
use std::process::ExitCode;

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use legio_core::{ConversationKey, Seq};
use legio_store::{ReadAround, SledLog};

use crate::common::{self, for_each_record};
use crate::invocation::Context;
use crate::output_file::OutputFile;
use crate::replay::{Format, Printer, OUT_BUFFER};

/// Arguments of `legio export`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Write to this file instead of standard output (`-` is standard output). The file is
    /// written beside FILE and renamed over it at the end, so a failed or interrupted export
    /// leaves an existing FILE as it was.
    #[arg(long, short, value_name = "FILE")]
    output: Option<std::path::PathBuf>,
    /// Do not wait for the file to reach the disk before putting it in place (faster; a power
    /// loss soon after may leave FILE empty or short).
    #[arg(long)]
    no_sync: bool,
    /// Only this conversation (its seqs are kept; an import renumbers them, and the seqs its
    /// events name with them).
    #[arg(long)]
    conversation: Option<String>,
    /// From a damaged database: write every event that still decodes and name the seq ranges
    /// that could not be read (sled databases only; the database is read from a private copy).
    #[arg(long, conflicts_with = "conversation")]
    salvage: bool,
}

/// Runs the command.
pub fn run(context: &Context, args: Args) -> Result<ExitCode> {
    let sync = !args.no_sync;
    if args.salvage {
        return salvage(context, args.output, sync);
    }
    let conversation = args.conversation.map(ConversationKey::new).transpose()?;
    let log = common::open_log_for_reading(context)?;
    let output = args.output.filter(|path| path.as_os_str() != "-");
    let mut out = Sink::open(output.as_deref(), sync)?;
    let last = log.last_seq();
    let bar = common::progress(last.get(), "export", true);
    let mut written = 0u64;
    let mut printer = Printer::new(Format::Jsonl, false);
    for_each_record(&*log, conversation.as_ref(), Seq::FIRST, last, |record| {
        if written.is_multiple_of(common::PROGRESS_EVERY) {
            bar.set_position(record.seq.get());
        }
        printer.write(&mut out, &record)?;
        written += 1;
        Ok(())
    })?;
    out.finish()?;
    bar.finish_and_clear();
    if let Some(path) = &output {
        eprintln!("exported {written} events to {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Where the lines go: a file written whole or not at all (`output_file.rs`), or standard
/// output (`-o -` means standard output, as in every Unix tool).
enum Sink {
    File(BufWriter<OutputFile>),
    Stdout(BufWriter<std::io::StdoutLock<'static>>),
}

impl Sink {
    /// With `sync`, a file reaches the disk before it is put in place.
    fn open(output: Option<&Path>, sync: bool) -> Result<Self> {
        Ok(match output {
            Some(path) => Self::File(BufWriter::with_capacity(
                OUT_BUFFER,
                OutputFile::create(path, sync)?,
            )),
            None => Self::Stdout(BufWriter::with_capacity(
                OUT_BUFFER,
                std::io::stdout().lock(),
            )),
        })
    }

    /// Writes out what is buffered and, for a file, puts it in place (synced first with the
    /// `sync` it was opened with).
    fn finish(self) -> Result<()> {
        match self {
            Self::File(out) => out
                .into_inner()
                .map_err(|e| e.into_error())
                .context("cannot write the output")?
                .commit(),
            Self::Stdout(mut out) => Ok(out.flush()?),
        }
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Self::File(out) => out.write(buf),
            Self::Stdout(out) => out.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Self::File(out) => out.flush(),
            Self::Stdout(out) => out.flush(),
        }
    }
}

/// `export --salvage`: every event that still decodes, and what could not be read, on stderr.
fn salvage(context: &Context, output: Option<PathBuf>, sync: bool) -> Result<ExitCode> {
    if common::nats_options(context)?.is_some() {
        bail!("--salvage reads a sled database; a NATS stream is read with a plain `legio export`");
    }
    let store = context.store()?;
    let output = output.filter(|path| path.as_os_str() != "-");
    let mut out = Sink::open(output.as_deref(), sync)?;
    let mut failure = None;
    let mut printer = Printer::new(Format::Jsonl, false);
    let salvaged = SledLog::salvage(&store.path, &store.options, &mut |record| match printer
        .write(&mut out, &record)
    {
        Ok(()) => ControlFlow::Continue(()),
        Err(e) => {
            failure = Some(e);
            ControlFlow::Break(())
        }
    })?;
    if let Some(e) = failure {
        return Err(e);
    }
    out.finish()?;
    let target = output.map_or("standard output".to_owned(), |p| p.display().to_string());
    eprintln!("salvaged {} events to {target}", salvaged.events);
    if let Some(why) = &salvaged.read_around {
        eprintln!("note: {why}");
    }
    for lost in &salvaged.lost {
        match lost.to {
            Some(to) if to == lost.from => eprintln!("lost: seq {}: {}", lost.from, lost.reason),
            Some(to) => eprintln!("lost: seqs {} to {}: {}", lost.from, to, lost.reason),
            None => eprintln!("lost: seqs from {} on: {}", lost.from, lost.reason),
        }
    }
    let damaged =
        !salvaged.lost.is_empty() || matches!(salvaged.read_around, Some(ReadAround::Damage(_)));
    if damaged {
        eprintln!("import the file into a new database (`legio --db NEW import FILE`) to go on from what was saved");
        return Ok(ExitCode::from(3));
    }
    Ok(ExitCode::SUCCESS)
}
