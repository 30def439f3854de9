//! `legio replay`: the log's events in order, filtered, as readable lines or JSON lines; with
//! `--follow`, new events as they are appended. Never calls an LLM.

use std::io::{BufWriter, IsTerminal, Write};
use std::process::ExitCode;

use anyhow::{bail, Context as _, Result};
use legio_config::AgentSpec;
use legio_core::{
    can_see, ConversationKey, Event, EventKind, Record, RecordJson, Seq, SessionId, Timestamp,
};
use legio_ops::{InspectKind, OpsError, Table};
use legio_store::EventLog;

use crate::common::{self, for_each_record};
use crate::interrupt::Interrupt;
use crate::remote::{Remote, ServerError, Streamed};
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
    /// Only this conversation. One the log does not have is an error naming those it has; with
    /// --follow on a server's or a cluster's log, a note on stderr, and its events as they come.
    #[arg(long)]
    conversation: Option<String>,
    /// What this agent could see (its visibility), and its own session events.
    #[arg(long)]
    agent: Option<String>,
    /// Only the events of this session: its id (from `legio inspect sessions`), or the id's end as
    /// the text lines show it (`session d3e3e509`: its last 8 characters or more), or its first 8
    /// or more. An abbreviation that names no session of the log, or several, is an error.
    #[arg(long, value_parser = parse_session)]
    session: Option<SessionArg>,
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
    /// Keep printing new events until interrupted (Ctrl-C); with --to, the replay ends there.
    /// Live (--server), a server that stops ends the follow with exit 1 and a line on stderr
    /// saying the --from to go on from.
    #[arg(long)]
    follow: bool,
}

/// `--session`: a whole session id, or an abbreviation of one resolved against the log.
#[derive(Clone, Debug)]
enum SessionArg {
    /// A whole id (a UUID), taken as given.
    Id(SessionId),
    /// At least [`SHORT_ID`] hex digits (lowercase) that begin or end a session id, in its
    /// hyphenated form.
    Short(String),
}

/// The fewest hex digits of an abbreviated session id: as many as a text line shows.
const SHORT_ID: usize = 8;

/// The most sessions an ambiguous abbreviation's error lists.
const LISTED: usize = 10;

impl SessionArg {
    /// The session meant: a whole id as it is; an abbreviation, the one session of `sessions`
    /// (the sessions table, `legio inspect sessions`, of the log or of `conversation`) whose id
    /// begins or ends with it. None or several is an error naming what to do.
    fn resolve(
        &self,
        conversation: Option<&ConversationKey>,
        sessions: impl FnOnce() -> Result<Table>,
    ) -> Result<SessionId> {
        let short = match self {
            Self::Id(id) => return Ok(*id),
            Self::Short(short) => short,
        };
        let table = sessions()?;
        let column = |name: &str| table.header.iter().position(|h| h == name);
        let (Some(at), agent, key) = (column("session"), column("agent"), column("conversation"))
        else {
            bail!("the sessions table has no session column; give the whole session id");
        };
        let mut found: Vec<(SessionId, String)> = Vec::new();
        for row in &table.rows {
            let Some(id) = row.get(at) else { continue };
            if !(id.starts_with(short.as_str()) || id.ends_with(short.as_str())) {
                continue;
            }
            let Ok(parsed) = id.parse() else { continue };
            let parsed = SessionId(parsed);
            if found.iter().any(|(known, _)| *known == parsed) {
                continue;
            }
            let cell = |i: Option<usize>| i.and_then(|i| row.get(i)).map_or("?", String::as_str);
            found.push((parsed, format!("{id} ({} in {})", cell(agent), cell(key))));
        }
        let scope = match conversation {
            Some(key) => format!("conversation {:?}", key.as_str()),
            None => "the log".to_owned(),
        };
        match found.len() {
            1 => Ok(found[0].0),
            0 => bail!(
                "no session of {scope} has an id beginning or ending with {short:?}; `legio inspect sessions` lists them"
            ),
            n => {
                let listed: Vec<&str> = found.iter().take(LISTED).map(|(_, s)| s.as_str()).collect();
                let more = if n > LISTED {
                    format!(" and {} more", n - LISTED)
                } else {
                    String::new()
                };
                bail!(
                    "{short:?} names {n} sessions of {scope}: {}{more}; give more of the id",
                    listed.join(", ")
                )
            }
        }
    }
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

/// The filters but the session (resolved against the log, [`SessionArg::resolve`]).
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
    filter.since = args.since;
    filter.kinds = args.kinds.clone();
    Ok(filter)
}

/// `--session`: a session id, as `legio inspect sessions` shows it, or at least [`SHORT_ID`] hex
/// digits of one (its end, as a text line shows it, or its beginning). A usage error otherwise
/// (exit 2, as every bad argument).
fn parse_session(id: &str) -> Result<SessionArg, String> {
    if let Ok(uuid) = id.parse() {
        return Ok(SessionArg::Id(SessionId(uuid)));
    }
    let digits = id.chars().filter(char::is_ascii_hexdigit).count();
    if digits >= SHORT_ID && id.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
        return Ok(SessionArg::Short(id.to_ascii_lowercase()));
    }
    Err(format!(
        "{id:?} is not a session id: give one from `legio inspect sessions` (a UUID), or its last {SHORT_ID} characters or more as replay's lines show it (`session d3e3e509`)"
    ))
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
    let mut filter = resolve(context, &args)?;
    // With --to the replay ends there: nothing to follow.
    let following = args.follow && to == Seq(u64::MAX);
    if let Some(remote) = context.remote()? {
        if let Some(session) = &args.session {
            let query: Vec<(&str, String)> = filter
                .conversation
                .iter()
                .map(|c| ("conversation", c.as_str().to_owned()))
                .collect();
            filter.session = Some(session.resolve(filter.conversation.as_ref(), || {
                Ok(serde_json::from_value(
                    remote.get_json("/operator/inspect/sessions", &query)?,
                )?)
            })?);
        }
        return live(&remote, &args, &filter, from, to, following);
    }
    let log = common::open_log_for_reading(context)?;
    if let Some(session) = &args.session {
        filter.session = Some(session.resolve(filter.conversation.as_ref(), || {
            Ok(legio_ops::inspect(
                &*log,
                InspectKind::Sessions,
                filter.conversation.as_ref(),
            )?)
        })?);
    }
    if let Some(conversation) = &filter.conversation {
        require_conversation(context, &*log, conversation, following)?;
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
    if following {
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

/// Errors when the log does not have `conversation`, unless `following` a log others may add it
/// to (a cluster's: a note on stderr then); a sled log cannot gain it, as this process holds it.
fn require_conversation(
    context: &Context,
    log: &dyn EventLog,
    conversation: &ConversationKey,
    following: bool,
) -> Result<()> {
    let shared = common::nats_options(context)?.is_some();
    match legio_ops::require_conversation(log, conversation) {
        Ok(()) => Ok(()),
        Err(e @ OpsError::UnknownConversation { .. }) if following && shared => {
            note_not_yet(&e.to_string());
            Ok(())
        }
        Err(e @ OpsError::UnknownConversation { .. }) if following => bail!(
            "{e}; this command holds the log, so nothing can add it while it follows: follow a running server's log with legio --server URL replay --follow"
        ),
        Err(e) => Err(e.into()),
    }
}

/// `--follow` on a conversation the log does not have (yet): said on stderr, then its events
/// as they come.
fn note_not_yet(why: &str) {
    eprintln!("note: {why}; waiting for its first event (Ctrl-C stops)");
}

/// Live mode: the same lines from the server's event stream (the filters but the conversation
/// apply here, exactly as offline). The events so far, then with `following` the new ones from
/// the seq after the last received (a second request: the first, which does not follow, is the
/// server's 404 for a conversation the log does not have, an error unless following).
fn live(
    remote: &Remote,
    args: &Args,
    filter: &Filter,
    from: Seq,
    to: Seq,
    following: bool,
) -> Result<ExitCode> {
    let query = |from: Seq, follow: bool| {
        let mut query = vec![("from", from.get().to_string())];
        if to != Seq(u64::MAX) {
            query.push(("to", to.get().to_string()));
        }
        if let Some(conversation) = &filter.conversation {
            query.push(("conversation", conversation.as_str().to_owned()));
        }
        if follow {
            query.push(("follow", "true".to_owned()));
        }
        query
    };
    let colour = args.format == Format::Text && common::colour();
    let stdout = std::io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut printer = Printer::new(args.format, colour);
    let mut next = from;
    let so_far = stream(
        remote,
        &query(from, false),
        filter,
        &mut printer,
        &mut out,
        &mut next,
    );
    out.flush()?;
    match so_far {
        Ok(Streamed::Ended) if following => {}
        Ok(Streamed::Ended) => return Ok(ExitCode::SUCCESS),
        // Ctrl-C is how a follow ends; a replay that was not following it ended short (the
        // exit status of a shell's interrupted command, as offline, where Ctrl-C ends the
        // process).
        Ok(Streamed::Interrupted) if following => return Ok(ExitCode::SUCCESS),
        Ok(Streamed::Interrupted) => return Ok(ExitCode::from(130)),
        Err(e) => match e.downcast_ref::<ServerError>() {
            Some(error) if following && error.code == "unknown_conversation" => {
                note_not_yet(&error.message);
            }
            _ => return Err(e),
        },
    }
    let followed = stream(
        remote,
        &query(next, true),
        filter,
        &mut printer,
        &mut out,
        &mut next,
    )?;
    out.flush()?;
    if followed == Streamed::Ended {
        // Only the server ends a follow: it stopped or restarted. A script that supervises the
        // follow must tell that from Ctrl-C, and know where to go on from.
        eprintln!(
            "legio: the server ended the event stream (it stopped or restarted); go on from where it ended with --follow --from {next}"
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// The server's events of `query` through `filter` to `out` (flushed after each record when the
/// query follows); `next` becomes the seq after the last received.
fn stream(
    remote: &Remote,
    query: &[(&str, String)],
    filter: &Filter,
    printer: &mut Printer,
    out: &mut impl Write,
    next: &mut Seq,
) -> Result<Streamed> {
    let follow = query.iter().any(|(name, _)| *name == "follow");
    remote.stream_lines("/operator/events", query, |line| {
        let value: serde_json::Value = serde_json::from_str(line)?;
        // The server's error line is `{"error": {"code", "message"}}`; a record may have an
        // `error` field of its own (turn_failed, heartbeat_ran), never without its `kind`.
        if let (None, Some(error)) = (value.get("kind"), value.get("error")) {
            bail!("the server says: {}", error["message"]);
        }
        let record = legio_core::record_from_json(value)?;
        *next = record.seq.next();
        if filter.matches(&record) {
            printer.write(out, &record)?;
            if follow {
                out.flush()?;
            }
        }
        Ok(())
    })
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
        let mut interrupt = Interrupt::new().context("cannot listen for Ctrl-C")?;
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
                () = interrupt.pressed() => return Ok(()),
            }
        }
    })
}
