//! `legio reset`: a manual reset of one agent in one conversation, recorded as a session-closed
//! event (it also clears a failed agent). The agent's next turn opens a new session restored from
//! the log.

use std::process::ExitCode;

use anyhow::Result;
use legio_core::{BoundaryReason, ConversationKey, Event, SessionEnded, SessionId, Timestamp};
use legio_store::EventLog;

use crate::common;
use crate::Context;

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
    let config = common::config(context)?;
    let conversation = ConversationKey::new(args.conversation)?;
    let spec = config
        .agents
        .iter()
        .find(|a| a.name.as_str() == args.agent)
        .ok_or_else(|| {
            let known: Vec<String> = config.agents.iter().map(|a| a.name.to_string()).collect();
            anyhow::anyhow!(
                "unknown agent {:?}; the roster has: {}",
                args.agent,
                known.join(", ")
            )
        })?;
    let log = common::open_log(context)?;
    let state = log.session_state(&conversation, &spec.name)?;
    let session = state
        .as_ref()
        .and_then(|s| s.current.as_ref())
        .map(|c| c.session)
        .unwrap_or(SessionId(uuid::Uuid::nil()));
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    let range = log.append(vec![Event::SessionClosed(SessionEnded {
        conversation: conversation.clone(),
        agent: spec.name.clone(),
        session,
        at: Timestamp::from_unix_micros(i64::try_from(micros).unwrap_or(i64::MAX)),
        why: BoundaryReason::ManualReset,
    })])?;
    let was_failed = state.is_some_and(|s| s.failed.is_some());
    println!(
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
