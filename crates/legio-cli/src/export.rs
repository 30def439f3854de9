//! `legio export`: the log (or one conversation) as JSON lines, one event per line.

use std::io::{BufWriter, Write};
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use legio_core::{ConversationKey, Seq};

use crate::common::{self, for_each_record};
use crate::invocation::Context;
use crate::replay::{write_record, Format};

/// Arguments of `legio export`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Write to this file instead of standard output (`-` is standard output).
    #[arg(long, short)]
    output: Option<std::path::PathBuf>,
    /// Only this conversation (its seqs are kept; an import renumbers them).
    #[arg(long)]
    conversation: Option<String>,
}

/// Runs the command.
pub fn run(context: &Context, args: Args) -> Result<ExitCode> {
    let conversation = args.conversation.map(ConversationKey::new).transpose()?;
    let log = common::open_log(context)?;
    // `-o -` means standard output, as in every Unix tool.
    let output = args.output.filter(|path| path.as_os_str() != "-");
    let sink: Box<dyn Write> = match &output {
        Some(path) => Box::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        ),
        None => Box::new(std::io::stdout().lock()),
    };
    let mut out = BufWriter::with_capacity(1 << 16, sink);
    let last = log.last_seq();
    let bar = common::progress(last.get(), "export", true);
    let mut written = 0u64;
    for_each_record(&*log, conversation.as_ref(), Seq::FIRST, last, |record| {
        bar.set_position(record.seq.get());
        write_record(&mut out, &record, Format::Jsonl, false)?;
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
