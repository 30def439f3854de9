//! `legio mcp`: legio as an MCP server for one agent in one conversation. `token` prints a
//! bearer token for `legio serve`'s `/mcp` endpoint; `serve` speaks MCP on stdio (for a client
//! that spawns it). The agent's tools are exactly its own; every call is recorded in the log.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use legio_core::{AgentName, ConversationKey};
use legio_runtime::{McpScope, McpTokenKey, MCP_TOKEN_DEFAULT_TTL};

use crate::common;
use crate::invocation::Context;

/// Arguments of `legio mcp`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

/// Whose tools: one agent in one conversation.
#[derive(Debug, clap::Args)]
struct Scope {
    /// The conversation the agent's calls are recorded in (e.g. cli:local).
    #[arg(long)]
    conversation: String,
    /// The agent whose tools are served (e.g. the orchestrator, to `dispatch`).
    #[arg(long)]
    agent: String,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Print a bearer token for `legio serve`'s /mcp endpoint, scoped to one agent in one
    /// conversation.
    ///
    /// The token is signed with a key kept beside the database (<store.path>.mcp-key, created on
    /// first use; LEGIO_MCP_KEY_FILE names another file; delete it to revoke every token). On a
    /// NATS cluster the key is kept in the cluster (bucket <stream>_secrets, key mcp-token-key),
    /// so every node accepts the token; LEGIO_MCP_KEY_FILE still names a file instead. An MCP
    /// client sends it as `Authorization: Bearer TOKEN` to http://HOST:PORT/mcp. Example:
    ///
    ///   legio mcp token --conversation cli:local --agent vorenus --ttl 8h
    #[command(verbatim_doc_comment)]
    Token {
        #[command(flatten)]
        scope: Scope,
        /// How long the token is valid: seconds, or a number with s, m, h or d (default 1h, at
        /// most 365d: a longer-lived client should be given fresh tokens).
        #[arg(long, value_parser = parse_ttl)]
        ttl: Option<Duration>,
    },
    /// Speak MCP on stdin/stdout for one agent in one conversation (for a client that spawns
    /// its servers, e.g. Claude Code's `"command": "legio", "args": ["mcp", "serve", ...]`).
    ///
    /// Opens the legion itself, so no `legio serve` may hold the database; with one running, use
    /// its /mcp endpoint and a token instead.
    Serve {
        #[command(flatten)]
        scope: Scope,
    },
}

fn parse_ttl(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 90, 30m, 8h or 2d"))?;
    let unit_seconds: u64 = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("{text:?}: the unit must be s, m, h or d")),
    };
    let seconds = n.saturating_mul(unit_seconds);
    if seconds == 0 {
        return Err("the ttl must be above 0".to_owned());
    }
    if seconds > MAX_TTL_SECONDS {
        return Err(format!(
            "{text:?} is longer than a token may live (365d); give a long-lived client fresh tokens"
        ));
    }
    Ok(Duration::from_secs(seconds))
}

/// The longest `--ttl`: 365 days.
const MAX_TTL_SECONDS: u64 = 365 * 86_400;

/// The scope, checked against the configuration's roster.
fn scope(context: &Context, scope: &Scope) -> Result<(legio_runtime::RuntimeConfig, McpScope)> {
    let config = common::config(context)?;
    let agent = AgentName::new(scope.agent.as_str())?;
    if config.agent(&agent).is_none() {
        let known: Vec<&str> = config.agents.iter().map(|a| a.name.as_str()).collect();
        bail!("no agent {agent} in [agents]; agents: {}", known.join(", "));
    }
    let conversation = ConversationKey::new(scope.conversation.as_str())?;
    if conversation.is_reserved() {
        bail!("conversation {conversation} is reserved by legio; use another key");
    }
    Ok((
        config,
        McpScope {
            conversation,
            agent,
        },
    ))
}

/// Runs the command.
pub fn run(context: &Context, args: Args) -> Result<ExitCode> {
    match args.command {
        Command::Token { scope: s, ttl } => {
            let (config, scope) = scope(context, &s)?;
            let key = McpTokenKey::for_store(&config.store)?;
            println!(
                "{}",
                key.issue(&scope, ttl.unwrap_or(MCP_TOKEN_DEFAULT_TTL))
            );
        }
        Command::Serve { scope: s } => {
            let (config, scope) = scope(context, &s)?;
            common::tokio()?.block_on(async move {
                let runtime = Arc::new(legio_runtime::Runtime::open(config).await.map_err(
                    |e| match e.code() {
                        legio_runtime::ErrorCode::StoreLocked => anyhow::anyhow!(
                            "{e}\n(with `legio serve` running, point the client at its /mcp endpoint with a token from `legio mcp token` instead)"
                        ),
                        _ => anyhow::Error::new(e).context("opening the legion for `legio mcp serve`"),
                    },
                )?);
                let served = legio_runtime::serve_mcp_stdio(Arc::clone(&runtime), scope).await;
                runtime.stop().await?;
                served?;
                anyhow::Ok(())
            })?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
