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
use crate::replay::{Format, Printer, OUT_BUFFER};

/// Arguments of `legio export`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Write to this file instead of standard output (`-` is standard output).
    #[arg(long, short)]
    output: Option<std::path::PathBuf>,
    /// Only this conversation (its seqs are kept; an import renumbers them).
    #[arg(long)]
    conversation: Option<String>,
    /// From a damaged database: write every event that still decodes and name the seq ranges
    /// that could not be read (sled databases only; the database is read from a private copy).
    #[arg(long, conflicts_with = "conversation")]
    salvage: bool,
}

/// Runs the command.
pub fn run(context: &Context, args: Args) -> Result<ExitCode> {
    if args.salvage {
        return salvage(context, args.output);
    }
    let conversation = args.conversation.map(ConversationKey::new).transpose()?;
    let log = common::open_log_for_reading(context)?;
    let output = args.output.filter(|path| path.as_os_str() != "-");
    let mut out = sink(output.as_deref())?;
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
    out.flush()?;
    bar.finish_and_clear();
    if let Some(path) = &output {
        eprintln!("exported {written} events to {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Where the lines go: the file, or standard output (`-o -` means standard output, as in every
/// Unix tool).
fn sink(output: Option<&Path>) -> Result<BufWriter<Box<dyn Write>>> {
    let sink: Box<dyn Write> = match output {
        Some(path) => Box::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        ),
        None => Box::new(std::io::stdout().lock()),
    };
    Ok(BufWriter::with_capacity(OUT_BUFFER, sink))
}

/// `export --salvage`: every event that still decodes, and what could not be read, on stderr.
fn salvage(context: &Context, output: Option<PathBuf>) -> Result<ExitCode> {
    if common::nats_options(context)?.is_some() {
        bail!("--salvage reads a sled database; a NATS stream is read with a plain `legio export`");
    }
    let store = context.store()?;
    let output = output.filter(|path| path.as_os_str() != "-");
    let mut out = sink(output.as_deref())?;
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
    out.flush()?;
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
