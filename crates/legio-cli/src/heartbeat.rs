//! `legio heartbeat`: one agent answers a text with no history (seed 004's scheduled checks, run
//! by hand or from cron), recorded as one `heartbeat_ran` event, never as a message. Through the
//! runtime, or with `--server` through `POST /sessions/{id}/heartbeats`. Exit code 1 if the agent
//! failed.

use std::process::ExitCode;

use anyhow::Result;
use serde_json::{json, Value};

use crate::invocation::Context;
#[cfg(feature = "runtime")]
use crate::{agents, common};

/// Arguments of `legio heartbeat`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The conversation key (its agent's live session is not touched).
    #[arg(long, default_value = "cli:local")]
    conversation: String,
    /// The agent that answers.
    #[arg(long)]
    agent: String,
    /// Print the reply as JSON (`agent`, `content`, `seq`, `error`).
    #[arg(long)]
    json: bool,
    /// What the agent answers, e.g. "anything due today?".
    text: String,
}

/// Runs the command.
pub fn run(context: &Context, args: Args) -> Result<ExitCode> {
    let reply = match context.host_remote()? {
        Some(remote) => remote.post_json(
            &format!("/sessions/{}/heartbeats", args.conversation),
            &json!({"agent": args.agent, "text": args.text}),
        )?,
        None => local(context, &args)?,
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&reply)?);
    } else {
        outln!(
            "── {} (heartbeat) ──",
            reply["agent"].as_str().unwrap_or_default()
        );
        match (reply["content"].as_str(), reply["error"].as_str()) {
            (_, Some(error)) => outln!("(error) {error}"),
            (Some(text), None) => outln!("{text}"),
            (None, None) => outln!("(no reply)"),
        }
    }
    Ok(if reply["error"].is_string() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The heartbeat through the legion in the configuration, as the server's JSON reply.
#[cfg(feature = "runtime")]
fn local(context: &Context, args: &Args) -> Result<Value> {
    common::tokio()?.block_on(async {
        let runtime = agents::open_runtime(context).await?;
        let result = runtime
            .heartbeat(args.conversation.as_str(), args.agent.as_str(), &args.text)
            .await;
        runtime.shutdown().await?;
        let reply = result?;
        Ok(json!({
            "agent": reply.agent.as_str(),
            "content": reply.text(),
            "seq": reply.seq().map(|s| s.get()),
            "error": reply.error(),
            "error_kind": reply.error_kind().map(|k| k.as_str()),
        }))
    })
}

/// Without the `runtime` feature this `legio` has no legion to run: only `--server` works.
#[cfg(not(feature = "runtime"))]
fn local(_context: &Context, _args: &Args) -> Result<Value> {
    anyhow::bail!("this legio was built without the `runtime` feature; run the heartbeat through a server: legio --server URL heartbeat ...")
}
