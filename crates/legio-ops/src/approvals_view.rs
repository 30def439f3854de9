//! The approvals of a conversation as read from the log (the paused steps, their calls, and the
//! message each step's turn answers), and the operator's table of them (`legio inspect
//! approvals`). Reads only; blocks on log reads.

use std::collections::HashMap;

use legio_core::{Approvals, ConversationKey, Event, Message, MessageId, Part, Seq};
use legio_store::EventLog;

use crate::error::OpsError;
use crate::operator::Table;

/// How many events are read from the log at a time.
const CHUNK: usize = 10_000;

/// One conversation's approvals, with what continuing a step needs: the step's message (its
/// calls) and the seq and id of every message (for the turn's own message, which the calls
/// reply to).
#[derive(Clone, Debug, Default)]
pub struct ConversationApprovals {
    /// The projection.
    pub approvals: Approvals,
    /// Each message holding tool calls, by id, with its seq.
    pub call_messages: HashMap<MessageId, (Seq, Message)>,
    /// Every message's seq, by id.
    pub seqs: HashMap<MessageId, Seq>,
}

impl ConversationApprovals {
    /// The step `call_message`'s calls: (id, tool, arguments), in the order the model made them.
    pub fn calls(&self, call_message: MessageId) -> Vec<(String, String, String)> {
        let Some((_, message)) = self.call_messages.get(&call_message) else {
            return Vec::new();
        };
        message
            .parts
            .iter()
            .filter_map(|p| match p {
                Part::ToolCall {
                    id,
                    name,
                    arguments,
                } => Some((id.clone(), name.clone(), arguments.clone())),
                _ => None,
            })
            .collect()
    }
}

/// Reads `conversation`'s approvals from the log.
pub fn read_approvals(
    log: &dyn EventLog,
    conversation: &ConversationKey,
) -> Result<ConversationApprovals, OpsError> {
    let mut out = ConversationApprovals::default();
    let mut after = Seq::ZERO;
    loop {
        let page = log.conversation_events(conversation, after, CHUNK)?;
        for record in &page {
            out.approvals.apply(record);
            if let Event::MessagePosted(m) = &record.event {
                out.seqs.insert(m.id, record.seq);
                if m.parts.iter().any(|p| matches!(p, Part::ToolCall { .. })) {
                    out.call_messages.insert(m.id, (record.seq, m.clone()));
                }
            }
        }
        let Some(last) = page.last() else { break };
        after = last.seq;
        if page.len() < CHUNK {
            break;
        }
    }
    Ok(out)
}

/// The approvals table: one row per call that asked, pending and answered, of `conversation` or
/// of every conversation.
pub fn approvals_table(
    log: &dyn EventLog,
    conversation: Option<&ConversationKey>,
) -> Result<Table, OpsError> {
    let keys = match conversation {
        Some(key) => vec![key.clone()],
        None => log.conversations()?,
    };
    let mut rows = Vec::new();
    for key in keys.iter().filter(|k| !k.is_reserved()) {
        let read = read_approvals(log, key)?;
        for a in &read.approvals.items {
            let r = &a.requested;
            let (by, reason) = match &a.answer {
                Some(answer) => (
                    format!("{} {}", answer.by, answer.at),
                    answer.reason.clone().unwrap_or_default(),
                ),
                None => (String::new(), String::new()),
            };
            rows.push(vec![
                key.to_string(),
                r.agent.to_string(),
                r.call_id.clone(),
                r.tool.clone(),
                crate::memory_view::one_line(&r.arguments),
                a.state().to_owned(),
                r.deadline.to_string(),
                by,
                reason,
            ]);
        }
    }
    let header = [
        "conversation",
        "agent",
        "call_id",
        "tool",
        "arguments",
        "state",
        "deadline",
        "answered",
        "reason",
    ];
    Ok(Table {
        header: header.iter().map(|h| (*h).to_owned()).collect(),
        rows,
    })
}
