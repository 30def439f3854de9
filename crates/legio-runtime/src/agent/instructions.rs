//! The host's instructions for one turn (`InstructionsGiven`, the OpenAI door's `instructions`
//! and chat `system` / `developer` messages): the post appends them in one batch with the message
//! they came with, right before it (a batch gets consecutive seqs), so the turn finds them at
//! the seq before its message's, whether it runs at once, after a restart or on another node.
//! The turn sends them in front of the message's text in each of its steps (render.rs's lead-in,
//! with the status block); they change neither the system prompt nor its hash, so no session is
//! bootstrapped for them.

use std::sync::Arc;

use legio_core::{AgentName, Event, MessageId, Seq};

use crate::error::RuntimeError;
use crate::shared::Shared;

/// The instructions the host gave `agent` for the message `id` at `seq`, if any.
pub(crate) async fn for_turn(
    shared: &Arc<Shared>,
    agent: &AgentName,
    seq: Seq,
    id: MessageId,
) -> Result<Option<String>, RuntimeError> {
    let Some(before) = seq.get().checked_sub(1).filter(|s| *s > 0) else {
        return Ok(None);
    };
    let records = shared
        .read(move |log| log.read_range(Seq(before), Seq(before), 1))
        .await?;
    Ok(records.into_iter().find_map(|r| match r.event {
        Event::InstructionsGiven(given) if given.for_message == id && given.agent == *agent => {
            Some(given.text)
        }
        _ => None,
    }))
}

/// The lead-in text of a turn's instructions.
pub(crate) fn lead_in(instructions: &str) -> String {
    format!("Instructions from the host for this turn:\n{instructions}\n")
}
