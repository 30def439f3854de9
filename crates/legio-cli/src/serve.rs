//! `legio serve`: the host-facing HTTP server (crate legio-server) on the legion in the
//! configuration. Loopback by default; a public address needs a token. SIGTERM or Ctrl-C shuts it
//! down gracefully: in-flight turns finish within `server.shutdown_grace_seconds`, sessions are
//! suspended, the log is flushed. After a storage failure it stops on its own once
//! `server.storage_failure_exit_seconds` have passed and exits with [`STORAGE_FAILED`], so that
//! a supervisor starts it again (a new open recovers the log).

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use legio_runtime::Runtime;
use legio_server::{install_metrics, Server, ServerSettings};

use crate::common;
use crate::invocation::Context;

/// The exit code after a storage failure: `EX_TEMPFAIL` (a temporary failure; start again).
pub const STORAGE_FAILED: u8 = 75;

/// Arguments of `legio serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The address to listen on (default: server.bind, 127.0.0.1:7878). Port 0 picks a free port;
    /// the first line printed says which.
    #[arg(long)]
    bind: Option<SocketAddr>,
    /// This node's id in a cluster (`[store] backend = "nats"`): the holder of the leases of the
    /// conversations it runs, and where other nodes send their posts. Default: the host name.
    /// One process per id: a start under an id another running node holds fails. After a
    /// crash, a restart within the lease TTL first waits up to the TTL for the old process's
    /// lease to expire (docs/cluster.md).
    #[arg(long, env = "LEGIO_NODE")]
    node: Option<String>,
}

/// Resolves on SIGTERM or SIGINT.
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Once a stop is asked for, makes sure the process ends within `deadline` even if shutting down
/// hangs (after a storage failure sled can wait forever in a flush): past it, says so and exits
/// with `code`. Everything acknowledged is already durable; the next start recovers the rest.
fn exit_after(deadline: Duration, code: u8) {
    let spawned = std::thread::Builder::new()
        .name("legio-exit-deadline".into())
        .spawn(move || {
            std::thread::sleep(deadline);
            eprintln!(
                "legio: shutdown did not finish within {} s (the event log did not close: a \
                 storage failure?); exiting now; everything acknowledged is durable, and the next \
                 start recovers the open sessions",
                deadline.as_secs()
            );
            std::process::exit(i32::from(code));
        });
    if let Err(e) = spawned {
        eprintln!("legio: cannot start the shutdown deadline ({e})");
    }
}

/// Runs the command.
pub fn run(context: &Context, args: Args) -> Result<ExitCode> {
    let config = common::config(context)?;
    let settings = ServerSettings::from_config(&config)?;
    let bind = args.bind.unwrap_or(settings.bind);
    Server::check_bind(&settings, bind)?;
    let tokio = common::tokio()?;
    tokio.block_on(async move {
        // The port first: a busy one fails before the log is opened (or its folder created).
        let listener = Server::listen(&settings, bind).await?;
        let metrics = install_metrics()?;
        let mut builder = Runtime::builder(config);
        if let Some(node) = args.node {
            builder = builder.node(node);
        }
        let runtime = builder.open().await?;
        if let Some(node) = runtime.node() {
            eprintln!("legio: node {node} of the cluster");
        }
        let server = Server::on(listener, runtime, settings.clone(), metrics);
        let addr = server.local_addr()?;
        outln!("legio: serving http://{addr} (dashboard: http://{addr}/dashboard{})", if settings.has_tokens() { "?token=…" } else { "" });
        std::io::stdout().flush()?;
        let deadline = settings.shutdown_grace * 3 + Duration::from_secs(5);
        let storage_failure = server.storage_failure();
        let failed = std::sync::Arc::new(std::sync::OnceLock::new());
        let stopped_by = std::sync::Arc::clone(&failed);
        let served = server
            .serve(async move {
                tokio::select! {
                    () = stop_signal() => exit_after(deadline, 1),
                    failure = storage_failure => {
                        eprintln!(
                            "legio: the event log failed ({failure}); stopping, to exit with code \
                             {STORAGE_FAILED} so that a supervisor starts legio again (a new open \
                             recovers the log; everything acknowledged is durable)"
                        );
                        let _ = stopped_by.set(failure);
                        exit_after(deadline, STORAGE_FAILED);
                    }
                }
            })
            .await;
        if let Some(failure) = failed.get() {
            eprintln!(
                "legio: stopped after a storage failure: {}; exit code {STORAGE_FAILED}",
                failure.io_cause().map_or("the event log failed", |c| c.describe())
            );
            return Ok(ExitCode::from(STORAGE_FAILED));
        }
        let report = served?;
        eprintln!(
            "legio: stopped{}{}",
            if report.drained { "" } else { "; in-flight requests outlived the grace period and were cancelled" },
            if report.suspended { "; sessions suspended, log flushed" } else { "; some agents were still in provider calls: their sessions are recovered on the next start" }
        );
        Ok(ExitCode::SUCCESS)
    })
}
