//! `legio post`: one message to a conversation; prints the replies (JSON with `--json`). Exit code
//! 1 if any agent failed.

use std::process::ExitCode;

use anyhow::Result;
use legio_runtime::{AgentReply, Posted};
use serde_json::json;

use crate::invocation::Context;
use crate::{agents, common};

/// Arguments of `legio post`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The conversation key.
    #[arg(long, default_value = "cli:local")]
    conversation: String,
    /// Print the replies as JSON.
    #[arg(long)]
    json: bool,
    /// Post at most once with this key: run again with the same key and text (after a crash, a
    /// timeout), the message is not stored again and the replies it had are printed (a key is
    /// 1 to 255 visible ASCII characters, a UUID for instance; keys are per conversation).
    #[arg(long, value_name = "KEY", value_parser = parse_key)]
    idempotency_key: Option<legio_core::IdempotencyKey>,
    /// The message; `@name` addresses a specialist, `@all` everyone, no mention the orchestrator.
    text: String,
}

/// Prints replies with the agent's name as a header.
pub fn print_replies(replies: &[AgentReply], colour: bool) {
    for reply in replies {
        let header = format!("── {} ──", reply.agent);
        if colour {
            outln!("\x1b[1m{header}\x1b[0m");
        } else {
            outln!("{header}");
        }
        match &reply.outcome {
            Ok(reply) => outln!("{}", reply.text),
            Err(error) => outln!("(error) {error}"),
        }
    }
}

/// The warning line about `@handles` that named no agent (`None` when every handle matched).
pub fn unknown_mentions_warning(posted: &Posted) -> Option<String> {
    if posted.unknown_mentions.is_empty() {
        return None;
    }
    let handles: Vec<String> = posted
        .unknown_mentions
        .iter()
        .map(|h| format!("@{h}"))
        .collect();
    Some(format!(
        "warning: {} named no agent and was sent as plain text",
        handles.join(", ")
    ))
}

/// The replies as JSON.
pub fn replies_json(replies: &[AgentReply]) -> serde_json::Value {
    json!(replies
        .iter()
        .map(|r| json!({
            "agent": r.agent.as_str(),
            "text": r.text(),
            "message_id": r.message_id().map(|id| id.to_string()),
            "seq": r.seq().map(|s| s.get()),
            "error": r.error(),
            "error_kind": r.error_kind().map(|k| k.as_str()),
        }))
        .collect::<Vec<_>>())
}

fn parse_key(text: &str) -> std::result::Result<legio_core::IdempotencyKey, String> {
    legio_core::IdempotencyKey::new(text).map_err(|e| e.to_string())
}

/// Runs the command.
pub fn run(context: &Context, args: Args) -> Result<ExitCode> {
    let tokio = common::tokio()?;
    tokio.block_on(async {
        let runtime = agents::open_runtime(context).await?;
        let (conversation, text) = (&args.conversation, &args.text);
        let result = agents::post_with_status(&runtime, conversation, text, args.idempotency_key)
            .await;
        runtime.shutdown().await?;
        let replies = result?;
        if replies.replayed {
            eprintln!("note: this message was stored before with the same --idempotency-key, so it was not stored again; agents that had answered it give that answer again, the others answer now");
        }
        if let Some(warning) = unknown_mentions_warning(&replies) {
            eprintln!("{warning}");
        }
        if args.json {
            outln!("{}", serde_json::to_string_pretty(&replies_json(&replies))?);
        } else {
            print_replies(&replies, common::colour());
        }
        Ok(if replies.iter().any(|r| r.outcome.is_err()) {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        })
    })
}
