//! `legio`, the operator command line: run the demo, verify a log.

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

/// Where the CLI finds its configuration and database.
#[derive(Debug)]
pub struct Context {
    /// `--db`, if given.
    pub db: Option<PathBuf>,
    /// The configuration file.
    pub config: PathBuf,
    /// Whether `--config` or `LEGIO_CONFIG` named it; the default file may be absent, and then
    /// store-only commands use the built-in store defaults.
    pub config_explicit: bool,
}

impl Context {
    /// The validated configuration, with `--db` applied.
    pub fn runtime_config(&self) -> anyhow::Result<legio_runtime::RuntimeConfig> {
        let mut config = legio_runtime::RuntimeConfig::load(&self.config)?;
        if let Some(db) = &self.db {
            config.store.path = db.clone();
        }
        Ok(config)
    }

    /// The store settings, with `--db` applied.
    pub fn store(&self) -> anyhow::Result<legio_runtime::StoreSettings> {
        if !self.config_explicit && !self.config.exists() {
            return Ok(legio_runtime::StoreSettings {
                path: self
                    .db
                    .clone()
                    .unwrap_or_else(|| PathBuf::from("data/legio")),
                options: legio_store::StoreOptions::default(),
            });
        }
        Ok(self.runtime_config()?.store)
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
