//! Tool calls in a context: the rules every context follows so that a provider accepts the
//! history and the model reads it right, whatever the window, a compaction or a crash cut.
//!
//! For the agent whose context it is ([`settle_tool_calls`]):
//! 1. **Another participant's tool traffic is left out.** Its calls and results are that agent's
//!    working state (its ids mean nothing to this model, its calls may still be running); their
//!    outcome reaches others as that agent's reply. The parts are removed; a message left with no
//!    part is left out.
//! 2. **An orphaned result is dropped**: a result of the agent whose call is not in the context
//!    (cut by the window or a summary), or that answers a call already answered. A result answers
//!    the latest unanswered call with its id.
//! 3. **An interrupted call is completed**: a call of the agent with no result in the context (the
//!    process died while it ran) gets an error result saying so ([`INTERRUPTED`]), right after it,
//!    so the provider accepts the history and the model knows the call did not finish.
//! 4. **A result follows its call**: messages that arrived while the calls ran (a dispatched
//!    specialist's reply, say) are moved after the results, as providers want a call's results
//!    right after it.
//!
//! A stateful session's delta does not resend the agent's own calls (the session made them), but
//! they still count: they are passed as `held`, so their results are kept and a call without one
//! is completed.

use std::collections::HashMap;

use crate::context_item::ContextItem;
use crate::message::{Audience, Message, Part};
use crate::name::{AgentName, Participant};

/// The content of the error result that completes an interrupted call.
pub const INTERRUPTED: &str = "interrupted: the process stopped while this tool call ran; it did \
not finish and its result is unknown (it may or may not have taken effect)";

/// The text a new message is left with when rule 2 removed every part of it.
pub const RESULTS_LEFT_OUT: &str =
    "(tool results whose calls are no longer in the context were left out)";

fn is_tool_part(part: &Part) -> bool {
    matches!(part, Part::ToolCall { .. } | Part::ToolResult { .. })
}

/// Whether `message` carries a tool result.
pub fn has_tool_result(message: &Message) -> bool {
    message
        .parts
        .iter()
        .any(|p| matches!(p, Part::ToolResult { .. }))
}

/// The ids of the tool calls `message` makes.
pub fn tool_call_ids(message: &Message) -> Vec<&str> {
    message
        .parts
        .iter()
        .filter_map(|p| match p {
            Part::ToolCall { id, .. } => Some(id.as_str()),
            _ => None,
        })
        .collect()
}

struct Entry {
    item: ContextItem,
    /// Sent to the provider (false: held by a stateful session already).
    send: bool,
    /// The context's last item (the new message): never left out.
    last: bool,
}

/// The interrupted results of `calls`, as one message of `agent` that answers `call`.
fn interrupted(agent: &AgentName, call: &ContextItem, calls: &[String]) -> ContextItem {
    let message = Message {
        id: call.message.id,
        conversation: call.message.conversation.clone(),
        sender: Participant::Agent(agent.clone()),
        audience: Audience::agent(agent.clone()),
        parts: calls
            .iter()
            .map(|id| Part::ToolResult {
                call_id: id.clone(),
                content: INTERRUPTED.to_owned(),
                is_error: true,
            })
            .collect(),
        reply_to: Some(call.message.id),
        at: call.message.at,
    };
    ContextItem {
        seq: call.seq,
        message,
        redelivered: false,
    }
}

/// Applies the tool-call rules (see the module docs) to `items`, a context's messages in log
/// order with the new message last, for `agent`. `held`: the agent's own messages the provider
/// already holds and that are not sent (a delta's calls after the checkpoint), in log order.
///
/// Returns the messages to send, in order. Their last is the context's last message: the new one,
/// or, when rule 4 moved the new message (a step's results) after its call, the latest message
/// that arrived while the calls ran. Interrupted results carry the seq and id of their call's
/// message (they are not in the log).
pub fn settle_tool_calls(
    agent: &AgentName,
    items: Vec<ContextItem>,
    held: Vec<ContextItem>,
) -> Vec<ContextItem> {
    let me = Participant::Agent(agent.clone());
    let mut entries = entries(items, held);
    let (open, anchor) = pair_results(&me, &mut entries);
    order(agent, &entries, open, &anchor)
}

/// The items to send, then the held ones, in log order (`last`: the new message).
fn entries(items: Vec<ContextItem>, held: Vec<ContextItem>) -> Vec<Entry> {
    let count = items.len();
    let mut entries: Vec<Entry> = items
        .into_iter()
        .enumerate()
        .map(|(i, item)| Entry {
            item,
            send: true,
            last: i + 1 == count,
        })
        .chain(held.into_iter().map(|item| Entry {
            item,
            send: false,
            last: false,
        }))
        .collect();
    // A stable sort: held calls take their place among the sent messages by seq.
    entries.sort_by_key(|e| e.item.seq);
    entries
}

/// Rules 1 and 2, in one pass in log order: other senders' tool parts and orphaned results
/// dropped. A result answers the latest open call with its id (a provider may reuse an id in a
/// later step). Returns the calls left open (id → entry) and each entry's `anchor`, the call
/// message it answers.
fn pair_results(
    me: &Participant,
    entries: &mut [Entry],
) -> (HashMap<String, usize>, Vec<Option<usize>>) {
    let mut open: HashMap<String, usize> = HashMap::new();
    let mut anchor: Vec<Option<usize>> = vec![None; entries.len()];
    for (i, entry) in entries.iter_mut().enumerate() {
        let message = &mut entry.item.message;
        let before = message.parts.len();
        if message.sender != *me {
            message.parts.retain(|p| !is_tool_part(p));
        } else {
            message.parts.retain(|p| match p {
                Part::ToolCall { id, .. } => {
                    open.insert(id.clone(), i);
                    true
                }
                Part::ToolResult { call_id, .. } => match open.remove(call_id) {
                    Some(call) => {
                        anchor[i] = anchor[i].max(Some(call));
                        true
                    }
                    None => false,
                },
                Part::Text { .. } => true,
            });
        }
        if message.parts.is_empty() && before > 0 && entry.last {
            message.parts.push(Part::text(RESULTS_LEFT_OUT));
        }
    }
    (open, anchor)
}

/// Rules 3 and 4: each call message is followed by the interrupted results of its open calls,
/// then by the messages holding its results.
fn order(
    agent: &AgentName,
    entries: &[Entry],
    open: HashMap<String, usize>,
    anchor: &[Option<usize>],
) -> Vec<ContextItem> {
    let mut unanswered: Vec<Vec<String>> = vec![Vec::new(); entries.len()];
    for (id, call) in open {
        unanswered[call].push(id);
    }
    let mut followers: Vec<Vec<usize>> = vec![Vec::new(); entries.len()];
    for (i, a) in anchor.iter().enumerate() {
        if let Some(a) = a {
            followers[*a].push(i);
        }
    }
    let kept = |entry: &Entry| entry.send && !entry.item.message.parts.is_empty();
    let mut out = Vec::with_capacity(entries.len());
    for (i, entry) in entries.iter().enumerate() {
        if anchor[i].is_some() {
            continue;
        }
        if kept(entry) || entry.last {
            out.push(entry.item.clone());
        }
        if !unanswered[i].is_empty() {
            // In the order the calls were made.
            let ids = tool_call_ids(&entry.item.message);
            unanswered[i].sort_by_key(|id| ids.iter().position(|c| c == id));
            out.push(interrupted(agent, &entry.item, &unanswered[i]));
        }
        for &f in &followers[i] {
            if kept(&entries[f]) || entries[f].last {
                out.push(entries[f].item.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seq::Seq;
    use crate::test_support::{agent, message};

    fn item(seq: u64, sender: &str, audience: &str, parts: Vec<Part>) -> ContextItem {
        let mut m = message(seq as u8, sender, audience, "");
        m.parts = parts;
        ContextItem {
            seq: Seq(seq),
            message: m,
            redelivered: false,
        }
    }

    fn text(t: &str) -> Part {
        Part::text(t)
    }

    fn call(id: &str) -> Part {
        Part::ToolCall {
            id: id.into(),
            name: "get_history".into(),
            arguments: "{}".into(),
        }
    }

    fn result(id: &str) -> Part {
        Part::ToolResult {
            call_id: id.into(),
            content: format!("result of {id}"),
            is_error: false,
        }
    }

    /// The settled context as one word per item: `seq:` then `T` text, `C(id)` call,
    /// `R(id)` result, `I(id)` interrupted result.
    fn shape(items: &[ContextItem]) -> String {
        items
            .iter()
            .map(|i| {
                let parts: Vec<String> = i
                    .message
                    .parts
                    .iter()
                    .map(|p| match p {
                        Part::Text { .. } => "T".to_owned(),
                        Part::ToolCall { id, .. } => format!("C({id})"),
                        Part::ToolResult {
                            call_id, content, ..
                        } if content == INTERRUPTED => format!("I({call_id})"),
                        Part::ToolResult { call_id, .. } => format!("R({call_id})"),
                    })
                    .collect();
                format!("{}:{}", i.seq, parts.join("+"))
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn check(items: Vec<ContextItem>, held: Vec<ContextItem>, expected: &str) {
        let settled = settle_tool_calls(&agent("ann"), items, held);
        assert_eq!(shape(&settled), expected);
    }

    #[test]
    fn complete_pairs_are_kept_as_they_are() {
        check(
            vec![
                item(1, "user", "ann", vec![text("q")]),
                item(2, "ann", "ann", vec![text("looking"), call("a")]),
                item(3, "ann", "ann", vec![result("a")]),
            ],
            vec![],
            "1:T 2:T+C(a) 3:R(a)",
        );
    }

    #[test]
    fn an_orphaned_result_is_dropped() {
        // The window cut the call at seq 2.
        check(
            vec![
                item(3, "ann", "ann", vec![result("a")]),
                item(4, "user", "ann", vec![text("next")]),
            ],
            vec![],
            "4:T",
        );
        // A result answering a call that was already answered is dropped too.
        check(
            vec![
                item(2, "ann", "ann", vec![call("a")]),
                item(3, "ann", "ann", vec![result("a")]),
                item(4, "ann", "ann", vec![result("a")]),
                item(5, "user", "ann", vec![text("next")]),
            ],
            vec![],
            "2:C(a) 3:R(a) 5:T",
        );
    }

    #[test]
    fn an_orphaned_new_message_keeps_a_note() {
        let settled = settle_tool_calls(
            &agent("ann"),
            vec![item(3, "ann", "ann", vec![result("a")])],
            vec![],
        );
        assert_eq!(settled.len(), 1);
        assert_eq!(settled[0].message.text_content(), RESULTS_LEFT_OUT);
    }

    #[test]
    fn an_interrupted_call_is_completed_right_after_it() {
        check(
            vec![
                item(1, "user", "ann", vec![text("q")]),
                item(2, "ann", "ann", vec![call("a"), call("b")]),
                item(3, "ann", "ann", vec![result("a")]),
                item(4, "user", "ann", vec![text("still there?")]),
            ],
            vec![],
            "1:T 2:C(a)+C(b) 2:I(b) 3:R(a) 4:T",
        );
        let settled = settle_tool_calls(
            &agent("ann"),
            vec![
                item(2, "ann", "ann", vec![call("a")]),
                item(4, "user", "ann", vec![text("?")]),
            ],
            vec![],
        );
        match &settled[1].message.parts[0] {
            Part::ToolResult {
                is_error, call_id, ..
            } => assert!(*is_error && call_id == "a"),
            other => panic!("expected an interrupted result, got {other:?}"),
        }
        assert_eq!(settled[1].message.sender, settled[0].message.sender);
    }

    #[test]
    fn another_agents_tool_traffic_is_left_out() {
        check(
            vec![
                item(1, "user", "all", vec![text("q")]),
                item(2, "bob", "bob", vec![call("x")]),
                item(3, "bob", "bob", vec![result("x")]),
                item(4, "bob", "user", vec![text("done"), call("y")]),
                item(5, "user", "ann", vec![text("and you?")]),
            ],
            vec![],
            "1:T 4:T 5:T",
        );
    }

    #[test]
    fn messages_that_arrived_while_calls_ran_follow_the_results() {
        // A dispatch: the call, the dispatched message and the replies, then the step's results
        // as the new message. The replies end up last.
        check(
            vec![
                item(1, "user", "ann", vec![text("ask bob")]),
                item(2, "ann", "ann", vec![call("d")]),
                item(3, "ann", "bob", vec![text("@bob?")]),
                item(4, "bob", "user", vec![text("bob says")]),
                item(5, "ann", "ann", vec![result("d")]),
            ],
            vec![],
            "1:T 2:C(d) 5:R(d) 3:T 4:T",
        );
    }

    #[test]
    fn a_delta_holds_its_calls_sends_their_results_and_completes_the_open_ones() {
        // The session made the calls at 2 and 6 (held, not resent); 3 answers 2; 6 never got a
        // result (the process died).
        check(
            vec![
                item(3, "ann", "ann", vec![result("a")]),
                item(4, "bob", "ann", vec![text("hi")]),
                item(7, "user", "ann", vec![text("new")]),
            ],
            vec![
                item(2, "ann", "ann", vec![call("a")]),
                item(6, "ann", "ann", vec![call("b")]),
            ],
            "3:R(a) 4:T 6:I(b) 7:T",
        );
    }

    #[test]
    fn a_reused_call_id_pairs_with_the_latest_open_call() {
        check(
            vec![
                item(1, "ann", "ann", vec![call("x")]),
                item(2, "ann", "ann", vec![result("x")]),
                item(3, "ann", "ann", vec![call("x")]),
                item(4, "user", "ann", vec![text("?")]),
            ],
            vec![],
            "1:C(x) 2:R(x) 3:C(x) 3:I(x) 4:T",
        );
    }
}
