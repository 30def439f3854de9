//! Context planning: exactly which messages a turn sends to an agent's provider.
//!
//! - **Full** (stateless providers): the last `history_window` visible messages before the new one,
//!   then the new message.
//! - **Bootstrap** (first turn of a stateful session): the same window, with a notice when the
//!   session was restored after a boundary.
//! - **Delta** (later turns of a stateful session): the visible messages after the checkpoint that
//!   the session has not seen in its own thread (its own replies it wrote itself), then the new
//!   message. Replies that a result of the agent's own `dispatch` call already carried (a reply
//!   to the message it dispatched, recorded before that call's results) count as delivered with
//!   the result: the delta leaves them out. The agent's own results of calls made outside a
//!   turn's step (over MCP: the call has no `reply_to`) before its last reply in the delta were
//!   got by the session as it ran during that turn: the delta leaves them out too.
//!
//! Every plan then follows the tool-call rules ([`settle_tool_calls`]): another agent's tool
//! traffic is left out, an orphaned result is dropped, an interrupted call is completed with an
//! error result, and a call's results follow it.
//!
//! No message is ever in a plan twice. The one at-least-once case: a turn that failed or died
//! after its request reached the provider but before its checkpoint was recorded leaves messages
//! after the checkpoint that the provider may already hold. They are detected from the log (a
//! message that would have triggered a turn of this agent lies after the checkpoint and before
//! the new message) and marked `redelivered`.

use serde::{Deserialize, Serialize};

use crate::compaction::{summary_tokens, ContextSummary};
pub use crate::context_item::ContextItem;
use crate::event::{DeliveryMode, Record};
use crate::lifecycle::Delivery;
use crate::message::{Audience, Message, MessageId, Part};
use crate::name::{AgentName, Participant};
use crate::seq::Seq;
use crate::tokens::estimate_message_tokens;
use crate::tool_calls::{has_tool_result, settle_tool_calls, tool_call_ids};

/// What one turn sends to an agent's provider.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct ContextPlan {
    /// Full, bootstrap or delta.
    pub mode: DeliveryMode,
    /// The restored-from-the-log notice, for a bootstrap after a boundary.
    pub notice: Option<String>,
    /// Messages before the new one, in log order.
    pub history: Vec<ContextItem>,
    /// The message the turn answers: the last of the context. (In a tool loop's later steps, the
    /// step's results, or the latest message that arrived while the calls ran: see
    /// [`settle_tool_calls`].)
    pub new_message: ContextItem,
    /// The checkpoint to record once the provider call succeeded: the seq of the message the
    /// turn (or the tool loop's step) answers.
    pub up_to: Seq,
    /// Estimated tokens of the messages in the plan (history and new message) and its summary.
    pub estimated_tokens: u64,
    /// The summary that stands for the messages before the history (a compacted full or
    /// bootstrap context); `None` when nothing was compacted, and always for a delta.
    #[serde(default)]
    pub summary: Option<ContextSummary>,
}

impl ContextPlan {
    /// Every message of the plan in order: history, then the new message.
    pub fn messages(&self) -> impl Iterator<Item = &ContextItem> {
        self.history
            .iter()
            .chain(std::iter::once(&self.new_message))
    }
}

/// Whether `message` asks `agent` for a turn: it names the agent or all, and the agent did not
/// send it.
pub fn triggers_turn(agent: &AgentName, message: &Message) -> bool {
    let me = Participant::Agent(agent.clone());
    message.sender != me && (message.audience == Audience::All || message.audience.names(&me))
}

/// The seqs of the replies in `unseen` that a result of `me`'s tool calls already carried: a reply
/// to a message `me` sent from a tool call (a `dispatch`), recorded before the results of that
/// call. The session received those replies as the call's result, so a delta does not send them
/// again. `held` holds `me`'s own messages of the delta (the dispatched message among them).
fn carried_by_results(
    me: &Participant,
    held: &[ContextItem],
    unseen: &[&Record],
    new_message: &Record,
) -> Vec<Seq> {
    let messages = || {
        unseen
            .iter()
            .copied()
            .chain(std::iter::once(new_message))
            .filter_map(|r| r.event.as_message().map(|m| (r.seq, m)))
    };
    // The calls answered in this delta: call message id -> seq of its results.
    let held_messages = held.iter().map(|i| (i.seq, &i.message));
    let results: Vec<(MessageId, Seq)> = messages()
        .chain(held_messages)
        .filter(|(_, m)| m.sender == *me && has_tool_result(m))
        .filter_map(|(seq, m)| m.reply_to.map(|call| (call, seq)))
        .collect();
    // Messages `me` sent from those calls (dispatched): message id -> seq of the call's results.
    let dispatched: Vec<(MessageId, Seq)> = held
        .iter()
        .filter_map(|i| {
            let call = i.message.reply_to?;
            let (_, results_at) = results.iter().find(|(c, _)| *c == call)?;
            Some((i.message.id, *results_at))
        })
        .collect();
    messages()
        .filter(|(_, m)| m.sender != *me)
        .filter(|(seq, m)| {
            m.reply_to.is_some_and(|to| {
                dispatched
                    .iter()
                    .any(|(id, results_at)| *id == to && seq < results_at)
            })
        })
        .map(|(seq, _)| seq)
        .collect()
}

/// Plans a turn's context, without a summary (see [`plan_context_with_summary`]).
pub fn plan_context(
    agent: &AgentName,
    delivery: &Delivery,
    visible: &[Record],
    new_message: &Record,
    history_window: usize,
) -> ContextPlan {
    plan_context_with_summary(agent, delivery, visible, new_message, history_window, None)
}

/// Plans a turn's context. With a `summary`, a full or bootstrap context is the compacted view:
/// the summary, then the visible messages after the seq it covers (at most `history_window`);
/// a delta is unaffected (the session already holds what the summary stands for).
///
/// `visible` holds the agent's visible messages in log order: for `Full` and `Bootstrap` at least
/// the last `history_window` before the new message; for `Delta` every visible message after the
/// checkpoint. Messages at or after the new message are ignored, so a caller may pass a window
/// that already includes it.
pub fn plan_context_with_summary(
    agent: &AgentName,
    delivery: &Delivery,
    visible: &[Record],
    new_message: &Record,
    history_window: usize,
    summary: Option<&ContextSummary>,
) -> ContextPlan {
    let summary = summary.filter(|_| !matches!(delivery, Delivery::Delta { .. }));
    let covered = summary.map_or(Seq::ZERO, |s| s.covers_up_to);
    let before = visible
        .iter()
        .filter(|r| r.seq < new_message.seq && r.seq > covered && r.event.as_message().is_some());
    let item = context_item;
    // A delta's own messages the session already holds (it wrote them): never resent, but their
    // tool calls count for the tool-call rules.
    let mut held: Vec<ContextItem> = Vec::new();
    let (mode, notice, history) = match delivery {
        Delivery::Full | Delivery::Bootstrap { .. } => {
            let window: Vec<&Record> = before.collect();
            let skip = window.len().saturating_sub(history_window);
            let history = rebuilt_history(agent, &window[skip..], new_message);
            match delivery {
                Delivery::Bootstrap { notice } => {
                    (DeliveryMode::Bootstrap, notice.clone(), history)
                }
                _ => (DeliveryMode::Full, None, history),
            }
        }
        Delivery::Delta { checkpoint } => {
            let history = delta_history(agent, before, *checkpoint, new_message, &mut held);
            (DeliveryMode::Delta, None, history)
        }
    };
    let mut items = history;
    items.push(item(new_message, false));
    let mut history = settle_tool_calls(agent, items, held);
    let new_item = history
        .pop()
        .unwrap_or_else(|| unreachable!("the new message is never left out"));
    let estimated_tokens = history
        .iter()
        .chain(std::iter::once(&new_item))
        .map(|i: &ContextItem| estimate_message_tokens(&i.message))
        .sum::<u64>()
        + summary.map_or(0, summary_tokens);
    ContextPlan {
        mode,
        notice,
        history,
        up_to: new_message.seq,
        new_message: new_item,
        estimated_tokens,
        summary: summary.cloned(),
    }
}

/// A full or bootstrap context's history from `window`, shown as a provider session would have
/// seen it: the agent's dispatched messages, whose tool call in the window carried them, are left
/// out, and so are the replies to them that the call's results carried (see
/// [`carried_by_results`]). With the call cut by the window, both stay: they are all that is
/// left of it. Each is then in the context once, where it first reached the model.
fn rebuilt_history(
    agent: &AgentName,
    window: &[&Record],
    new_message: &Record,
) -> Vec<ContextItem> {
    let me = Participant::Agent(agent.clone());
    let own: Vec<ContextItem> = window
        .iter()
        .filter(|r| r.event.as_message().is_some_and(|m| m.sender == me))
        .map(|r| context_item(r, false))
        .collect();
    let calls: Vec<MessageId> = own
        .iter()
        .filter(|i| !tool_call_ids(&i.message).is_empty())
        .map(|i| i.message.id)
        .collect();
    let dispatched = |m: &Message| {
        m.sender == me
            && m.reply_to.is_some_and(|to| calls.contains(&to))
            && !m
                .parts
                .iter()
                .any(|p| matches!(p, Part::ToolCall { .. } | Part::ToolResult { .. }))
    };
    // Only a call in the window carried anything: a result whose call was cut is left out.
    let from_calls: Vec<ContextItem> = own
        .into_iter()
        .filter(|i| i.message.reply_to.is_some_and(|to| calls.contains(&to)))
        .collect();
    let carried = carried_by_results(&me, &from_calls, window, new_message);
    window
        .iter()
        .filter(|r| !carried.contains(&r.seq))
        .filter(|r| !r.event.as_message().is_some_and(dispatched))
        .map(|r| context_item(r, false))
        .collect()
}

/// A message record as a context item.
fn context_item(r: &Record, redelivered: bool) -> ContextItem {
    ContextItem {
        seq: r.seq,
        message: r
            .event
            .as_message()
            .cloned()
            .unwrap_or_else(|| unreachable!("filtered to messages")),
        redelivered,
    }
}

/// The seq of `me`'s last turn reply in `after`: its message with no tool part that is not one it
/// sent from a tool call (a dispatched message replies to its call). Its own results before it
/// were recorded during a turn that completed after them: calls the session made itself (over
/// MCP) and got the results of. (A tool loop's step records its checkpoint at its results, so
/// their results are never after the checkpoint once the turn has replied.)
fn last_turn_reply(me: &Participant, after: &[&Record]) -> Option<Seq> {
    let own = || {
        after
            .iter()
            .filter_map(|r| r.event.as_message().map(|m| (r.seq, m)))
            .filter(|(_, m)| m.sender == *me)
    };
    let calls: Vec<MessageId> = own()
        .filter(|(_, m)| !tool_call_ids(m).is_empty())
        .map(|(_, m)| m.id)
        .collect();
    own()
        .filter(|(_, m)| {
            !m.parts
                .iter()
                .any(|p| matches!(p, Part::ToolCall { .. } | Part::ToolResult { .. }))
        })
        .filter(|(_, m)| !m.reply_to.is_some_and(|to| calls.contains(&to)))
        .map(|(seq, _)| seq)
        .next_back()
}

/// A delta's history: the visible messages after `checkpoint` the session does not hold, each
/// marked redelivered when an earlier turn's request may have carried it. The agent's own
/// messages go to `held` (the session wrote them; their tool calls still count).
fn delta_history<'a>(
    agent: &AgentName,
    before: impl Iterator<Item = &'a Record>,
    checkpoint: Seq,
    new_message: &Record,
    held: &mut Vec<ContextItem>,
) -> Vec<ContextItem> {
    let item = context_item;
    let me = Participant::Agent(agent.clone());
    let after: Vec<&Record> = before.filter(|r| r.seq > checkpoint).collect();
    let replied_at = last_turn_reply(&me, &after);
    // Calls made outside a turn's step (over MCP: no `reply_to`; a step's calls reply to the
    // message the step answered).
    let outside: Vec<MessageId> = after
        .iter()
        .filter_map(|r| r.event.as_message())
        .filter(|m| m.sender == me && m.reply_to.is_none() && !tool_call_ids(m).is_empty())
        .map(|m| m.id)
        .collect();
    let session_held = |seq: Seq, m: &Message| {
        Some(seq) < replied_at && m.reply_to.is_some_and(|call| outside.contains(&call))
    };
    let mut unseen: Vec<&Record> = Vec::new();
    for r in after {
        match r.event.as_message() {
            // The results of its tool calls were written by the runtime, not the session, unless
            // the session made the calls over MCP during a turn that then replied (it got their
            // results as it ran).
            Some(m) if m.sender == me && (!has_tool_result(m) || session_held(r.seq, m)) => {
                held.push(item(r, false))
            }
            Some(_) => unseen.push(r),
            None => {}
        }
    }
    // Everything up to the last message that would have triggered an earlier turn of
    // this agent may have reached the provider in that turn's request.
    let last_trigger = unseen.iter().rposition(|r| {
        r.event
            .as_message()
            .is_some_and(|m| triggers_turn(agent, m))
    });
    let carried = carried_by_results(&me, held.as_slice(), &unseen, new_message);
    unseen
        .iter()
        .enumerate()
        .filter(|(_, r)| !carried.contains(&r.seq))
        .map(|(i, r)| item(r, last_trigger.is_some_and(|t| i <= t)))
        .collect()
}
