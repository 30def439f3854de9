//! `legio replay`: the log's events in order, filtered, as readable lines or JSON lines; with
//! `--follow`, new events as they are appended. Never calls an LLM.

use std::io::{BufWriter, IsTerminal, Write};
use std::process::ExitCode;

use anyhow::{bail, Result};
use legio_config::AgentSpec;
use legio_core::{
    can_see, ConversationKey, Event, EventKind, Record, RecordJson, Seq, SessionId, Timestamp,
};
use legio_store::EventLog;

use crate::common::{self, for_each_record};
use crate::{invocation::Context, render};

/// The buffer between the lines of a whole-log read and standard output or the file.
pub const OUT_BUFFER: usize = 1 << 20;

/// Output format of events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One readable line per event.
    Text,
    /// One JSON object per line (documented by proto/events.schema.json).
    Jsonl,
}

/// Arguments of `legio replay`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only this conversation.
    #[arg(long)]
    conversation: Option<String>,
    /// What this agent could see (its visibility), and its own session events.
    #[arg(long)]
    agent: Option<String>,
    /// Only the events of this session (its id, from `legio inspect sessions`).
    #[arg(long, value_parser = parse_session)]
    session: Option<SessionId>,
    /// From this seq (inclusive).
    #[arg(long)]
    from: Option<u64>,
    /// Up to this seq (inclusive).
    #[arg(long)]
    to: Option<u64>,
    /// Only events at or after this time (RFC 3339, e.g. 2026-02-15T12:00:00Z).
    #[arg(long, value_parser = parse_since)]
    since: Option<Timestamp>,
    /// Only events of these kinds (repeatable): message_posted, session_opened, context_delivered,
    /// turn_completed, turn_failed, session_suspended, session_closed, summary_recorded,
    /// agent_failed, directive_published, directive_revoked, note_written,
    /// notebook_entry_appended, heartbeat_ran, tools_declared.
    #[arg(long = "kind", value_parser = parse_kind)]
    kinds: Vec<EventKind>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Keep printing new events until interrupted (Ctrl-C).
    #[arg(long)]
    follow: bool,
}

/// The filters of a replay, resolved.
#[derive(Debug, Default)]
pub struct Filter {
    conversation: Option<ConversationKey>,
    agent: Option<AgentSpec>,
    session: Option<SessionId>,
    since: Option<Timestamp>,
    kinds: Vec<EventKind>,
}

fn session_of(event: &Event) -> Option<SessionId> {
    match event {
        Event::SessionOpened(e) => Some(e.session),
        Event::ContextDelivered(e) => Some(e.session),
        Event::TurnCompleted(e) => Some(e.session),
        Event::TurnFailed(e) => e.session,
        Event::SessionSuspended(e) | Event::SessionClosed(e) => Some(e.session),
        _ => None,
    }
}

impl Filter {
    /// Whether `record` passes.
    pub fn matches(&self, record: &Record) -> bool {
        let event = &record.event;
        if self
            .conversation
            .as_ref()
            .is_some_and(|c| c != event.conversation())
        {
            return false;
        }
        if let Some(since) = self.since {
            if event.at() < since {
                return false;
            }
        }
        if !self.kinds.is_empty() && !self.kinds.contains(&event.kind()) {
            return false;
        }
        if let Some(session) = self.session {
            if session_of(event) != Some(session) {
                return false;
            }
        }
        if let Some(spec) = &self.agent {
            return match event.as_message() {
                Some(message) => can_see(spec.viewer(), message),
                None => event.agent() == Some(&spec.name),
            };
        }
        true
    }
}

fn resolve(context: &Context, args: &Args) -> Result<Filter> {
    let mut filter = Filter {
        conversation: args
            .conversation
            .clone()
            .map(ConversationKey::new)
            .transpose()?,
        ..Filter::default()
    };
    if let Some(name) = &args.agent {
        let config = common::config(context)?;
        let spec = config.agent_named(name)?;
        filter.agent = Some(spec.clone());
    }
    filter.session = args.session;
    filter.since = args.since;
    filter.kinds = args.kinds.clone();
    Ok(filter)
}

/// `--session`: a session id, as `legio inspect sessions` shows it. A usage error otherwise
/// (exit 2, as every bad argument).
fn parse_session(id: &str) -> Result<SessionId, String> {
    id.parse()
        .map(SessionId)
        .map_err(|_| format!("{id:?} is not a session id (a UUID, see `legio inspect sessions`)"))
}

/// `--since`: an RFC 3339 time.
fn parse_since(text: &str) -> Result<Timestamp, String> {
    Timestamp::parse_rfc3339(text).map_err(|e| e.to_string())
}

/// `--kind`: an event kind's word.
fn parse_kind(word: &str) -> Result<EventKind, String> {
    EventKind::parse(word).ok_or_else(|| {
        let known: Vec<&str> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
        format!(
            "unknown event kind {word:?}; kinds are: {}",
            known.join(", ")
        )
    })
}

/// Writes records in one format, reusing its buffers from record to record (a JSON line or a
/// text line allocates nothing once they have grown).
#[derive(Debug)]
pub struct Printer {
    format: Format,
    colour: bool,
    json: RecordJson,
    bytes: Vec<u8>,
    line: String,
}

impl Printer {
    /// A printer of `format`, in colour (text only) if `colour`.
    pub fn new(format: Format, colour: bool) -> Self {
        Self {
            format,
            colour,
            json: RecordJson::default(),
            bytes: Vec::new(),
            line: String::new(),
        }
    }

    /// Writes `record` and a newline.
    pub fn write(&mut self, out: &mut impl Write, record: &Record) -> Result<()> {
        match self.format {
            Format::Jsonl => {
                self.bytes.clear();
                self.json.write(record, &mut self.bytes);
                self.bytes.push(b'\n');
                out.write_all(&self.bytes)?;
            }
            Format::Text => {
                self.line.clear();
                render::push_line(&mut self.line, record);
                if self.colour {
                    let code = match record.event.kind() {
                        EventKind::MessagePosted => "0",
                        EventKind::TurnFailed | EventKind::AgentFailed => "31",
                        EventKind::SessionOpened
                        | EventKind::SessionSuspended
                        | EventKind::SessionClosed => "36",
                        _ => "2",
                    };
                    writeln!(out, "\x1b[{code}m{}\x1b[0m", self.line)?;
                } else {
                    self.line.push('\n');
                    out.write_all(self.line.as_bytes())?;
                }
            }
        }
        Ok(())
    }
}

/// Runs the command.
pub fn run(context: &Context, args: Args) -> Result<ExitCode> {
    let (from, to) = (
        Seq(args.from.unwrap_or(1)),
        Seq(args.to.unwrap_or(u64::MAX)),
    );
    if from > to {
        eprintln!("legio: bad seq range: --from {} is after --to {}", from, to);
        return Ok(ExitCode::from(2));
    }
    let filter = resolve(context, &args)?;
    if let Some(remote) = context.remote()? {
        return live(&remote, &args, &filter, from, to);
    }
    let log = common::open_log_for_reading(context)?;
    if let Some(conversation) = &filter.conversation {
        if log
            .conversation_events(conversation, Seq::ZERO, 1)?
            .is_empty()
        {
            let known: Vec<String> = log.conversations()?.iter().map(|c| c.to_string()).collect();
            bail!(
                "no conversation {:?} in the log; conversations: {}",
                conversation.as_str(),
                if known.is_empty() {
                    "none".into()
                } else {
                    known.join(", ")
                }
            );
        }
    }
    let colour = args.format == Format::Text && common::colour();
    let stdout = std::io::stdout();
    let to_terminal = stdout.is_terminal();
    let mut out = BufWriter::with_capacity(OUT_BUFFER, stdout.lock());
    let mut printer = Printer::new(args.format, colour);
    let last = log.last_seq().min(to);
    let bar = common::progress(
        last.get().saturating_sub(from.get()) + 1,
        "replay",
        !to_terminal,
    );
    let mut printed = Seq::ZERO;
    let mut read = 0u64;
    for_each_record(&*log, filter.conversation.as_ref(), from, last, |record| {
        if read.is_multiple_of(common::PROGRESS_EVERY) {
            bar.set_position(record.seq.get() - from.get() + 1);
        }
        read += 1;
        printed = record.seq;
        if filter.matches(&record) {
            printer.write(&mut out, &record)?;
        }
        Ok(())
    })?;
    bar.finish_and_clear();
    out.flush()?;
    if args.follow && to == Seq(u64::MAX) {
        drop(out);
        follow(
            &*log,
            printed.max(last).next(),
            &filter,
            args.format,
            colour,
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Live mode: the same lines from the server's event stream (the filters but the conversation
/// apply here, exactly as offline).
fn live(
    remote: &crate::remote::Remote,
    args: &Args,
    filter: &Filter,
    from: Seq,
    to: Seq,
) -> Result<ExitCode> {
    let mut query = vec![("from", from.get().to_string())];
    if to != Seq(u64::MAX) {
        query.push(("to", to.get().to_string()));
    }
    if let Some(conversation) = &filter.conversation {
        query.push(("conversation", conversation.as_str().to_owned()));
    }
    if args.follow && to == Seq(u64::MAX) {
        query.push(("follow", "true".to_owned()));
    }
    let colour = args.format == Format::Text && common::colour();
    let stdout = std::io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut printer = Printer::new(args.format, colour);
    remote.stream_lines("/operator/events", &query, |line| {
        let value: serde_json::Value = serde_json::from_str(line)?;
        // The server's error line is `{"error": {"code", "message"}}`; a record may have an
        // `error` field of its own (turn_failed, heartbeat_ran), never without its `kind`.
        if let (None, Some(error)) = (value.get("kind"), value.get("error")) {
            bail!("the server says: {}", error["message"]);
        }
        let record = legio_core::record_from_json(value)?;
        if filter.matches(&record) {
            printer.write(&mut out, &record)?;
            if args.follow {
                out.flush()?;
            }
        }
        Ok(())
    })?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn follow(
    log: &dyn EventLog,
    from: Seq,
    filter: &Filter,
    format: Format,
    colour: bool,
) -> Result<()> {
    let runtime = common::tokio()?;
    let mut subscription = log.subscribe(from);
    let mut printer = Printer::new(format, colour);
    runtime.block_on(async {
        loop {
            tokio::select! {
                next = subscription.next() => {
                    let record = next?;
                    if filter.matches(&record) {
                        let mut out = std::io::stdout().lock();
                        printer.write(&mut out, &record)?;
                        out.flush()?;
                    }
                }
                _ = tokio::signal::ctrl_c() => return Ok(()),
            }
        }
    })
}
