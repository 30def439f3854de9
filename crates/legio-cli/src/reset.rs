//! `legio reset`: a manual reset of one agent in one conversation, recorded as a session-closed
//! event (it also clears a failed agent). The agent's next turn opens a new session restored from
//! the log.

use std::process::ExitCode;

use anyhow::Result;
use legio_core::{manual_reset, ConversationKey, Timestamp};

use crate::common;
use crate::invocation::Context;

/// Arguments of `legio reset`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The conversation.
    #[arg(long)]
    conversation: String,
    /// The agent to reset.
    #[arg(long)]
    agent: String,
}

/// Runs the command.
pub fn run(context: &Context, args: Args) -> Result<ExitCode> {
    if let Some(remote) = context.remote()? {
        let done = remote.post_json(
            "/operator/reset",
            &serde_json::json!({"conversation": args.conversation, "agent": args.agent}),
        )?;
        if done["reset"] == false {
            let (agent, conversation) = (done["agent"].as_str(), done["conversation"].as_str());
            outln!(
                "{}",
                nothing_to_reset(agent.unwrap_or_default(), conversation.unwrap_or_default())
            );
            return Ok(ExitCode::SUCCESS);
        }
        outln!(
            "reset {} in {} at seq {}{}; its next turn opens a new session restored from the log",
            done["agent"].as_str().unwrap_or_default(),
            done["conversation"].as_str().unwrap_or_default(),
            done["last_seq"],
            if done["was_failed"] == true {
                " (it was failed; it is cleared)"
            } else {
                ""
            }
        );
        return Ok(ExitCode::SUCCESS);
    }
    let config = common::config(context)?;
    let conversation = ConversationKey::new(args.conversation)?;
    let spec = config.agent_named(&args.agent)?;
    let log = common::open_log(context)?;
    // A mistyped conversation is an error, as for replay, inspect and context (it said "nothing
    // to reset").
    legio_ops::require_conversation(&*log, &conversation)?;
    let state = log.session_state(&conversation, &spec.name)?;
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    let at = Timestamp::from_unix_micros(i64::try_from(micros).unwrap_or(i64::MAX));
    let Some(reset) = manual_reset(state.as_ref(), &conversation, &spec.name, at) else {
        outln!(
            "{}",
            nothing_to_reset(spec.name.as_str(), conversation.as_str())
        );
        return Ok(ExitCode::SUCCESS);
    };
    let range = log.append(vec![reset])?;
    let was_failed = state.is_some_and(|s| s.failed.is_some());
    outln!(
        "reset {} in {} at seq {}{}; its next turn opens a new session restored from the log",
        spec.name,
        conversation,
        range.first,
        if was_failed {
            " (it was failed; it is cleared)"
        } else {
            ""
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// What a reset with nothing to reset says (nothing was written).
fn nothing_to_reset(agent: &str, conversation: &str) -> String {
    format!("nothing to reset: {agent} has no open session in {conversation} and is not failed; nothing was written")
}
