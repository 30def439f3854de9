//! `legio`, the operator command line: run the demo, verify a log.

mod config;
mod demo_log;
mod render;
mod verify;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// legio keeps multi-agent LLM conversations durable, exact and cheap.
///
/// Every message and every session boundary is an event in an append-only log on disk.
///
/// Examples:
///   legio demo-log                      # append a sample conversation to a temp log, read it back
///   legio demo-log --db ./my-log        # the same, keeping the log in ./my-log
///   legio verify --db ./my-log          # check the log and its indexes (exit 3 if anything is wrong)
#[derive(Debug, Parser)]
#[command(name = "legio", version, verbatim_doc_comment)]
struct Cli {
    /// The configuration file.
    #[arg(
        long,
        global = true,
        env = "LEGIO_CONFIG",
        default_value = "config/legio.toml"
    )]
    config: PathBuf,
    /// The event log's folder; overrides store.path from the configuration.
    #[arg(long, global = true)]
    db: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Append a sample multi-agent conversation to a log, close and reopen it, and print it back.
    DemoLog(demo_log::Args),
    /// Walk the log and its indexes and report gaps, corrupt records and disagreeing indexes.
    Verify(verify::Args),
}

/// Where the CLI finds its database.
#[derive(Debug)]
pub struct Context {
    /// `--db`, if given.
    pub db: Option<PathBuf>,
    /// The configuration file and whether it was named explicitly.
    pub config: PathBuf,
    /// Whether `--config`/`LEGIO_CONFIG` named it (a missing explicit file is an error).
    pub config_explicit: bool,
}

impl Context {
    /// The store settings, with `--db` applied.
    pub fn store(&self) -> anyhow::Result<config::StoreConfig> {
        let mut store = config::load(&self.config, self.config_explicit)?;
        if let Some(db) = &self.db {
            store.path = db.clone();
        }
        Ok(store)
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("LEGIO_LOG"))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let config_explicit = std::env::var_os("LEGIO_CONFIG").is_some()
        || std::env::args().any(|a| a == "--config" || a.starts_with("--config="));
    let context = Context {
        db: cli.db,
        config: cli.config,
        config_explicit,
    };
    let result = match cli.command {
        Command::DemoLog(args) => demo_log::run(&context, args),
        Command::Verify(args) => verify::run(&context, args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("legio: {e:#}");
            ExitCode::from(1)
        }
    }
}
