//! `legio`, the operator command line: talk to the legion, replay and inspect its log, verify,
//! export and import. Offline commands read the log directly and never call a model.

/// `println!` for the operator's output: a reader that stops early ends the command quietly
/// (`output::STDOUT_CLOSED`) instead of a panic.
macro_rules! outln {
    ($($arg:tt)*) => { $crate::output::line(format_args!($($arg)*)) };
}

/// `print!` and a flush (prompts), with `outln!`'s handling of a closed standard output.
#[allow(unused_macros)] // only `chat` prompts, and it needs the `runtime` feature
macro_rules! out {
    ($($arg:tt)*) => { $crate::output::text(format_args!($($arg)*)) };
}

#[cfg(feature = "runtime")]
mod agents;
mod approve;
#[cfg(feature = "runtime")]
mod chat;
mod common;
mod completions;
mod context;
#[cfg(feature = "runtime")]
mod demo;
mod export;
mod heartbeat;
mod import;
mod import_check;
mod inspect;
mod interrupt;
mod invocation;
#[cfg(feature = "runtime")]
mod mcp;
mod migrate;
mod output;
mod output_file;
#[cfg(feature = "runtime")]
mod post;
mod remote;
mod render;
mod replay;
mod reset;
#[cfg(feature = "runtime")]
mod serve;
mod stats;
mod verify;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use invocation::Context;

/// The CLI reads on one thread and formats on another; glibc's allocator serialises the
/// cross-thread frees that creates (a third of a 1M-event replay went to its locks). Built with
/// `no_thp`: mimalloc would ask for transparent huge pages, and a whole-log read then spent most
/// of its reading thread's time in the kernel zeroing fresh 2 MiB pages (docs/storage.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// legio keeps multi-agent LLM conversations durable, exact and cheap.
///
/// Every message and every session boundary is an event in an append-only log on disk. These
/// commands talk to the legion in the configuration, or read its log directly (never calling a
/// model).
///
/// Start here:
///   legio demo                                   # a 10-second tour on a temporary log, offline
///   legio chat                                   # talk to the legion in config/legio.toml
///   echo "@vorenus review this" | legio chat     # the same from a script, one message per line
///   legio post --json "@all status?"             # one message, replies as JSON
///
/// Look at the log:
///   legio replay --conversation cli:local        # every event, one line each
///   legio replay --agent vorenus --kind message_posted   # what vorenus could see
///   legio replay --format jsonl --follow         # JSON lines, then new events as they come
///   legio context --conversation cli:local --agent vorenus   # what vorenus's model gets next
///   legio inspect agents                         # sessions, tokens, checkpoints per agent
///   legio stats   |   legio verify               # sizes; integrity (exit 3 if anything is wrong)
///   legio migrate                                # rewrite an older stored layout (v1) to v2
///
/// Move it:
///   legio export --output log.jsonl   then   legio --db ./copy import log.jsonl
///
/// Serve it (HTTP API, metrics, dashboard), and look at it live while it runs:
///   legio serve                                  # http://127.0.0.1:7878 (see [server] in the config)
///   legio --server http://127.0.0.1:7878 replay --follow    # also inspect, context, verify, reset,
///                                                           # heartbeat
///   legio heartbeat --agent lead "anything due?" # one answer with no history, recorded
///
/// A person in the loop (tools named by `approval = [...]` wait for an answer):
///   legio inspect approvals                      # pending and answered calls
///   legio approve --conversation cli:local call_7f3a       # the call runs once, the turn goes on
///   legio deny --conversation cli:local call_7f3a --reason "not that account"
///
/// Tools over MCP (an agent's tools for an MCP client; [mcp.NAME] tables give agents a server's):
///   legio inspect tools                          # every agent's tools and where each comes from
///   legio mcp token --conversation cli:local --agent vorenus   # a bearer token for /mcp
///   legio mcp serve --conversation cli:local --agent vorenus   # MCP on stdio
///
/// Exit codes: 0 ok, 1 an error (one line on stderr, saying what to do), 2 a usage error,
/// 3 `verify` found problems, 141 standard output closed early (`legio replay | head`: the
/// command stops quietly, as if ended by SIGPIPE).
#[derive(Debug, Parser)]
#[command(name = "legio", version, verbatim_doc_comment)]
pub struct Cli {
    /// The configuration file.
    #[arg(
        long,
        global = true,
        env = "LEGIO_CONFIG",
        default_value = "config/legio.toml"
    )]
    config: PathBuf,
    /// The event log's folder (a sled log); overrides store.path from the configuration, and
    /// store.backend = "nats" too.
    #[arg(long, global = true)]
    db: Option<PathBuf>,
    /// Read a NATS JetStream cluster's log instead of --db (replay, inspect, verify, export,
    /// context, stats): server URLs, comma-separated; stream, credentials and TLS come from
    /// [store.nats] when the configuration has it. No legio node needs to run.
    #[arg(long, global = true, value_name = "URL", env = "LEGIO_NATS_URL")]
    nats: Option<String>,
    /// Live mode: ask the `legio serve` at this URL instead of opening the log (only replay,
    /// inspect, context, verify, reset and heartbeat), so the service can keep the database.
    #[arg(long, global = true, value_name = "URL")]
    server: Option<String>,
    /// The server's operator token for live mode (default: LEGIO_OPERATOR_TOKEN, then
    /// LEGIO_API_TOKEN).
    #[arg(long, global = true, hide_env_values = true)]
    token: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// A self-contained tour on a temporary log: agents, a crash, a restart, tokens saved, replay.
    #[cfg(feature = "runtime")]
    Demo(demo::Args),
    /// Talk to the legion: each line is a message; /history, /status, /reset NAME, /quit.
    #[cfg(feature = "runtime")]
    Chat(chat::Args),
    /// Post one message and print the replies (exit 1 if an agent failed).
    #[cfg(feature = "runtime")]
    Post(post::Args),
    /// One agent answers a text with no history, recorded as a heartbeat (exit 1 if it failed).
    Heartbeat(heartbeat::Args),
    /// Approve a tool call that paused its turn (`legio inspect approvals` lists them); the
    /// last answer a step waits for continues the turn and prints its reply.
    Approve(approve::ApproveArgs),
    /// Deny a tool call that paused its turn; the model gets an error result with the reason.
    Deny(approve::DenyArgs),
    /// Print the log's events in order, filtered; --follow for new ones.
    Replay(replay::Args),
    /// What an agent's model would receive for its next turn, at any point of the log.
    Context(context::Args),
    /// Tables of conversations, agents, sessions, the shared memory, a cluster's nodes, or
    /// every agent's tools.
    Inspect(inspect::Args),
    /// Log size, events by kind, per-conversation counts, size on disk.
    Stats(stats::Args),
    /// Check the log and its indexes: exit 0 when clean, 3 when anything is wrong.
    Verify(verify::Args),
    /// Rewrite a log of an older stored layout to the current one (opening it does this too).
    Migrate(migrate::Args),
    /// Write the log (or one conversation) as JSON lines.
    Export(export::Args),
    /// Append an export into an empty log; a malformed line stops it with nothing kept.
    Import(import::Args),
    /// Manually reset an agent's session (its next turn is restored from the log).
    Reset(reset::Args),
    /// Serve the HTTP API (turns, session history, operator access), /metrics and /dashboard.
    #[cfg(feature = "runtime")]
    Serve(serve::Args),
    /// legio as an MCP server for one agent: `token` for `legio serve`'s /mcp, `serve` on stdio.
    #[cfg(feature = "runtime")]
    Mcp(mcp::Args),
    /// Print shell completions, e.g. `legio completions bash > /etc/bash_completion.d/legio`.
    Completions(completions::Args),
}

/// Logs on stderr, filtered by `LEGIO_LOG`; without it, warnings and errors (a node's restart
/// boundaries, a lease given up, an MCP server that failed: before, nothing below an error
/// showed; not the MCP SDK's client-side traces), but for the demo, whose tour says what happens itself (it panics an agent on
/// purpose). Colours only on a terminal, not in a node's log file.
fn init_logging(command: &Command) {
    let level = match command {
        #[cfg(feature = "runtime")]
        Command::Demo(_) => tracing_subscriber::filter::LevelFilter::ERROR,
        _ => tracing_subscriber::filter::LevelFilter::WARN,
    };
    let mut filter = tracing_subscriber::EnvFilter::builder()
        .with_default_directive(level.into())
        .with_env_var("LEGIO_LOG")
        .from_env_lossy();
    // The MCP SDK's client side (its transports, and its service's handshake: a command that
    // is no MCP server, such as `cat`, is "Received unexpected message" and a Rust debug dump)
    // traces failures with Rust type names; legio says what failed in its own words
    // (mcp_client.rs). Its server side (`legio mcp serve`, /mcp) still logs. `LEGIO_LOG` set
    // shows them all as asked.
    if std::env::var_os("LEGIO_LOG").is_none() {
        for quiet in [
            "rmcp::transport::worker=off",
            "rmcp::transport::child_process=off",
            "rmcp::service::client=off",
        ] {
            if let Ok(quiet) = quiet.parse() {
                filter = filter.add_directive(quiet);
            }
        }
    }
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(&cli.command);
    let config_explicit = std::env::var_os("LEGIO_CONFIG").is_some()
        || std::env::args().any(|a| a == "--config" || a.starts_with("--config="));
    // LEGIO_NATS_URL serves the commands that read the log; it is no --nats for the others
    // (`serve`, `post`, ...), which an exported variable would otherwise refuse, nor beside an
    // explicit --db.
    let nats_flag = std::env::args().any(|a| a == "--nats" || a.starts_with("--nats="));
    if nats_flag && cli.db.is_some() {
        eprintln!("legio: --db names a sled log and --nats a cluster's: give one of them");
        return ExitCode::from(2);
    }
    let nats = cli
        .nats
        .filter(|_| nats_flag || (reads_the_log(&cli.command) && cli.db.is_none()))
        .map(|urls| urls.split(',').map(|u| u.trim().to_owned()).collect());
    let context = Context {
        db: cli.db,
        nats,
        config: cli.config,
        config_explicit,
        server: cli.server,
        token: cli.token,
    };
    let live = match check_remote_flags(&cli.command, &context) {
        Ok(live) => live,
        Err(code) => return code,
    };
    let result = match cli.command {
        #[cfg(feature = "runtime")]
        Command::Demo(args) => demo::run(&context, args),
        #[cfg(feature = "runtime")]
        Command::Mcp(args) => mcp::run(&context, args),
        #[cfg(feature = "runtime")]
        Command::Chat(args) => chat::run(&context, args),
        #[cfg(feature = "runtime")]
        Command::Post(args) => post::run(&context, args),
        Command::Heartbeat(args) => heartbeat::run(&context, args),
        Command::Approve(args) => approve::approve(&context, args),
        Command::Deny(args) => approve::deny(&context, args),
        Command::Replay(args) => replay::run(&context, args),
        Command::Context(args) => context::run(&context, args),
        Command::Inspect(args) => inspect::run(&context, args),
        Command::Stats(args) => stats::run(&context, args),
        Command::Verify(args) => verify::run(&context, args),
        Command::Migrate(args) => migrate::run(&context, args),
        Command::Export(args) => export::run(&context, args),
        Command::Import(args) => import::run(&context, args),
        Command::Reset(args) => reset::run(&context, args),
        #[cfg(feature = "runtime")]
        Command::Serve(args) => serve::run(&context, args),
        Command::Completions(args) => completions::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) if output::is_closed(&e) => ExitCode::from(output::STDOUT_CLOSED),
        Err(e) if live && is_locked(&e) => {
            eprintln!("legio: {}; if `legio serve` holds it, ask the server instead: legio --server http://ADDRESS (e.g. http://127.0.0.1:7878) replay|inspect|context|verify|reset|heartbeat", one_line(&e));
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("legio: {}", one_line(&e));
            ExitCode::from(1)
        }
    }
}

/// `error` and its causes on one line, each cause once: an error that says its source in its
/// own message (legio's errors do, so that a message read alone is whole) is not followed by
/// that source again.
fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// Refuses `--nats` with a command that does not read the log and `--server` with one that has
/// no live form (exit code 2, said on stderr); answers whether the command has a live form.
fn check_remote_flags(command: &Command, context: &Context) -> Result<bool, ExitCode> {
    let live = matches!(
        command,
        Command::Replay(_)
            | Command::Inspect(_)
            | Command::Context(_)
            | Command::Verify(_)
            | Command::Reset(_)
            | Command::Heartbeat(_)
            | Command::Approve(_)
            | Command::Deny(_)
            | Command::Completions(_)
    );
    if context.nats.is_some() && !reads_the_log(command) {
        eprintln!("legio: --nats works with replay, inspect, context, verify, export and stats (it reads the cluster's log); other commands run through a legio node");
        return Err(ExitCode::from(2));
    }
    if context.server.is_some() && !live {
        eprintln!("legio: --server works with replay, inspect, context, verify, reset, heartbeat, approve and deny; this command opens the log or the legion itself");
        return Err(ExitCode::from(2));
    }
    Ok(live)
}

/// Whether `command` reads the log, and so may read a cluster's (`--nats`).
fn reads_the_log(command: &Command) -> bool {
    matches!(
        command,
        Command::Replay(_)
            | Command::Inspect(_)
            | Command::Context(_)
            | Command::Verify(_)
            | Command::Export(_)
            | Command::Stats(_)
            | Command::Completions(_)
    )
}

/// Whether `error` is the log being held by another process (directly or through the runtime).
fn is_locked(error: &anyhow::Error) -> bool {
    use legio_store::StoreError;
    error.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<StoreError>(),
            Some(StoreError::Locked { .. })
        ) || runtime_locked(cause)
    })
}

/// Whether `cause` is the runtime's error for a log held by another process.
#[cfg(feature = "runtime")]
fn runtime_locked(cause: &(dyn std::error::Error + 'static)) -> bool {
    matches!(
        cause.downcast_ref::<legio_runtime::RuntimeError>(),
        Some(legio_runtime::RuntimeError::Store(
            legio_store::StoreError::Locked { .. }
        ))
    )
}

/// Without the runtime, no error comes from it.
#[cfg(not(feature = "runtime"))]
fn runtime_locked(_cause: &(dyn std::error::Error + 'static)) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::one_line;
    use legio_store::{ErrorSource, IoCause, StoreError};

    /// A store error says its source in its message and keeps it as its source: the line says
    /// it once, after the context.
    #[test]
    fn a_cause_said_in_its_errors_message_is_not_said_again() {
        let full = std::io::Error::from_raw_os_error(28); // ENOSPC on Linux
        let store = StoreError::Io {
            during: "committing",
            kind: full.kind(),
            cause: IoCause::DiskFull,
            source: ErrorSource::new(full),
        };
        let said = store.to_string();
        assert!(
            std::error::Error::source(&store).is_some(),
            "the source is kept"
        );
        let error = anyhow::Error::new(store).context("opening the log");
        assert_eq!(one_line(&error), format!("opening the log: {said}"));
    }
}
