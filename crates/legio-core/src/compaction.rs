//! Compaction: when an agent's context grows past its policy, the older part is replaced in the
//! context (never in the log) by a summary. The compacted view is the latest summary plus the
//! visible messages after the seq it covers; the log keeps every message.
//!
//! Everything here is pure: the policy, when it triggers, where the summarized part ends (never
//! between a tool call and its result), how the summarizer's input is split into parts that fit
//! its window, which single messages are too large to include, and the prompts. The runtime makes
//! the summarizer calls and records the `SummaryRecorded` event.

use serde::{Deserialize, Serialize};

use crate::context_item::ContextItem;
use crate::message::Part;
use crate::seq::Seq;
use crate::tokens::{estimate_message_tokens, estimate_tokens};

/// When and how an agent's context is compacted. The defaults follow what a prompt cache bills:
/// a longer context is cheap to keep (its prefix is read back at a tenth of the input price),
/// while each compaction starts a new prefix (written at a premium) and costs a summarizer call;
/// so compaction comes in large, rare steps, at 100 messages or 75% of the window.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct CompactionPolicy {
    /// Off: contexts are only windowed, never summarized.
    pub enabled: bool,
    /// Compact when the context (history and new message) would hold more messages than this.
    pub compact_after_messages: usize,
    /// ... or when its estimated tokens would exceed this percentage of the provider's window.
    pub window_percent: u8,
    /// The most recent messages always kept verbatim.
    pub keep_recent: usize,
}

impl Default for CompactionPolicy {
    fn default() -> Self {
        Self {
            enabled: true,
            compact_after_messages: 100,
            window_percent: 75,
            keep_recent: 4,
        }
    }
}

/// A summary as a context carries it.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct ContextSummary {
    /// The last seq it covers: the context holds only messages after it.
    pub covers_up_to: Seq,
    /// The summary.
    pub text: String,
}

/// Estimated tokens of a summary as the context carries it.
pub fn summary_tokens(summary: &ContextSummary) -> u64 {
    estimate_tokens(&summary.text) + 8
}

/// Whether a context of `history` plus the new message (and `fixed_tokens` of system prompt and
/// summary) crosses the policy, and has something older than `keep_recent` to summarize.
pub fn needs_compaction(
    policy: &CompactionPolicy,
    history: &[ContextItem],
    new_message: &ContextItem,
    fixed_tokens: u64,
    context_window: u64,
) -> bool {
    let tokens: u64 = fixed_tokens
        + history
            .iter()
            .chain(std::iter::once(new_message))
            .map(|i| estimate_message_tokens(&i.message))
            .sum::<u64>();
    crosses_policy(policy, history.len(), tokens, context_window)
}

/// [`needs_compaction`] from counts a caller already has: `history` messages before the new
/// one, and the context's estimated `tokens` in all (system prompt, summary, messages).
pub fn crosses_policy(
    policy: &CompactionPolicy,
    history: usize,
    tokens: u64,
    context_window: u64,
) -> bool {
    if !policy.enabled || history <= policy.keep_recent {
        return false;
    }
    history + 1 > policy.compact_after_messages
        || tokens.saturating_mul(100)
            > context_window.saturating_mul(u64::from(policy.window_percent))
}

/// How many of `history`'s oldest items to summarize: all but the last `keep_recent`, moved
/// earlier until the cut is clean. May return 0: nothing can be summarized. A cut is clean when
/// - no kept message holds the result of a call made in the summarized part (a call and its
///   result always stay on the same side), and
/// - every kept message comes after every summarized one in the log (a context may hold a call's
///   results right after it, ahead of messages logged in between; the summary covers a seq
///   range, so the cut must not fall inside such a reordering).
pub fn summary_boundary(history: &[ContextItem], keep_recent: usize) -> usize {
    summary_boundary_before(history, keep_recent, Seq(u64::MAX))
}

/// [`summary_boundary`] that also stops before the first message at or after `protect_from`:
/// the turn's question, so that compaction inside a tool loop never summarizes the question
/// the loop answers, nor the loop itself.
pub fn summary_boundary_before(
    history: &[ContextItem],
    keep_recent: usize,
    protect_from: Seq,
) -> usize {
    let protected = history
        .iter()
        .position(|i| i.seq >= protect_from)
        .unwrap_or(history.len());
    let mut boundary = history.len().saturating_sub(keep_recent).min(protected);
    while boundary > 0 && !clean_cut(history, boundary) {
        boundary -= 1;
    }
    boundary
}

/// The last seq a summary of `history[..boundary]` covers: the largest seq summarized.
pub fn covered_seq(history: &[ContextItem], boundary: usize) -> Option<Seq> {
    history[..boundary].iter().map(|i| i.seq).max()
}

pub(crate) fn clean_cut(history: &[ContextItem], boundary: usize) -> bool {
    let Some(covers) = covered_seq(history, boundary) else {
        return true;
    };
    if history[boundary..].iter().any(|i| i.seq <= covers) {
        return false;
    }
    let kept_results: Vec<&str> = history[boundary..]
        .iter()
        .flat_map(|i| &i.message.parts)
        .filter_map(|p| match p {
            Part::ToolResult { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    !history[..boundary].iter().any(|i| {
        i.message
            .parts
            .iter()
            .any(|p| matches!(p, Part::ToolCall { id, .. } if kept_results.contains(&id.as_str())))
    })
}

/// A message left out of the summarizer's input because it alone is larger than a part's
/// budget.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct LeftOut {
    /// Its seq.
    pub seq: Seq,
    /// Who sent it.
    pub sender: String,
    /// Its estimated tokens.
    pub tokens: u64,
}

/// The summarizer's input, split into parts that each fit a part's budget.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SummaryJob {
    /// The parts, in log order (each non-empty); more than one means a merge call follows.
    pub parts: Vec<Vec<ContextItem>>,
    /// Messages left out as too large.
    pub left_out: Vec<LeftOut>,
}

/// Splits `items` (what is to be summarized) into parts of at most `part_budget` estimated
/// tokens each (see [`crate::summarizer_part_budget`]: a part, the instructions and the output
/// limit fit the summarizer's window); a message larger than that on its own is left out and
/// listed. The previous summary, if any, counts against the first part.
pub fn split_for_summarizer(
    items: &[ContextItem],
    previous: Option<&ContextSummary>,
    part_budget: u64,
) -> SummaryJob {
    let budget = part_budget.max(1);
    let mut parts: Vec<Vec<ContextItem>> = Vec::new();
    let mut left_out = Vec::new();
    let mut current: Vec<ContextItem> = Vec::new();
    let mut used = previous.map_or(0, summary_tokens);
    for item in items {
        let tokens = estimate_message_tokens(&item.message);
        if tokens > budget {
            left_out.push(LeftOut {
                seq: item.seq,
                sender: item.message.sender.as_str().to_owned(),
                tokens,
            });
            continue;
        }
        if used + tokens > budget && !current.is_empty() {
            parts.push(std::mem::take(&mut current));
            used = 0;
        }
        used += tokens;
        current.push(item.clone());
    }
    if !current.is_empty() {
        parts.push(current);
    }
    SummaryJob { parts, left_out }
}

/// The summarizer's system prompt.
pub const SUMMARIZER_PROMPT: &str = "You compact a multi-agent conversation so that an agent can \
continue it without the full history. Write a faithful, dense summary in plain prose and short \
lists. Keep: decisions made and by whom; facts learned; open tasks, questions and promises; names, \
identifiers, ids, numbers, paths and URLs exactly as written; tool calls made and what they \
returned. Drop small talk and repetition. Do not invent anything. Reply with the summary only.";

fn render(items: &[ContextItem]) -> String {
    let mut out = String::new();
    for item in items {
        out.push_str(&format!(
            "<message seq=\"{}\" sender=\"{}\">\n",
            item.seq, item.message.sender
        ));
        out.push_str(&item.message.plain_text());
        out.push('\n');
        out.push_str("</message>\n");
    }
    out
}

/// The request text for one part: the previous summary (first part only), the messages, and
/// what to do.
pub fn part_prompt(
    previous: Option<&ContextSummary>,
    part: &[ContextItem],
    index: usize,
    parts: usize,
) -> String {
    let mut out = String::new();
    if let Some(previous) = previous.filter(|_| index == 0) {
        out.push_str(&format!(
            "<previous_summary covers_up_to=\"{}\">\n{}\n</previous_summary>\n",
            previous.covers_up_to, previous.text
        ));
    }
    out.push_str(&render(part));
    if parts > 1 {
        out.push_str(&format!(
            "Summarize part {} of {} of the conversation above{}.",
            index + 1,
            parts,
            if index == 0 && previous.is_some() {
                ", folding in the previous summary"
            } else {
                ""
            }
        ));
    } else if previous.is_some() {
        out.push_str("Write one summary of the previous summary and the messages above.");
    } else {
        out.push_str("Summarize the conversation above.");
    }
    out
}

/// The request text that merges partial summaries into one.
pub fn merge_prompt(partials: &[String]) -> String {
    let mut out = String::new();
    for (i, text) in partials.iter().enumerate() {
        out.push_str(&format!(
            "<partial_summary part=\"{}\">\n{text}\n</partial_summary>\n",
            i + 1
        ));
    }
    out.push_str(
        "Merge these partial summaries of consecutive parts of one conversation into a single \
         summary, in order, keeping every decision, fact, open task and id.",
    );
    out
}

/// The summary as recorded: the summarizer's text, and a line naming every message left out.
pub fn finish_summary(text: &str, left_out: &[LeftOut]) -> String {
    let mut out = text.trim().to_owned();
    if !left_out.is_empty() {
        out.push_str("\n\n[Left out of this summary, too large to summarize: ");
        let names: Vec<String> = left_out
            .iter()
            .map(|l| {
                format!(
                    "message #{} from {} (~{} tokens)",
                    l.seq, l.sender, l.tokens
                )
            })
            .collect();
        out.push_str(&names.join(", "));
        out.push_str(". The full text is in the log.]");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Audience, Message, MessageId};
    use crate::name::Participant;
    use crate::name::{AgentName, ConversationKey};
    use crate::timestamp::Timestamp;

    fn item(seq: u64, parts: Vec<Part>) -> ContextItem {
        let at = Timestamp::from_unix_micros(seq as i64);
        let mut message = Message::text(
            MessageId::from_parts(at, [seq as u8; 10]),
            ConversationKey::new("t:1").unwrap(),
            Participant::Agent(AgentName::new("ann").unwrap()),
            Audience::All,
            "",
            at,
        );
        message.parts = parts;
        ContextItem {
            seq: Seq(seq),
            message,
            redelivered: false,
        }
    }

    fn text(seq: u64, words: usize) -> ContextItem {
        item(seq, vec![Part::text("word ".repeat(words))])
    }

    fn call(seq: u64, id: &str) -> ContextItem {
        item(
            seq,
            vec![Part::ToolCall {
                id: id.into(),
                name: "search".into(),
                arguments: "{}".into(),
            }],
        )
    }

    fn result(seq: u64, id: &str) -> ContextItem {
        item(
            seq,
            vec![Part::ToolResult {
                call_id: id.into(),
                content: "found".into(),
                is_error: false,
            }],
        )
    }

    #[test]
    fn triggers_on_message_count_or_window_share_never_without_an_older_part() {
        let policy = CompactionPolicy::default();
        let new = text(100, 1);
        let history: Vec<ContextItem> = (1..=99).map(|s| text(s, 1)).collect();
        assert!(
            !needs_compaction(&policy, &history, &new, 0, 200_000),
            "100 messages is the limit"
        );
        let history: Vec<ContextItem> = (1..=100).map(|s| text(s, 1)).collect();
        assert!(
            needs_compaction(&policy, &history, &new, 0, 200_000),
            "101 is over"
        );
        // Few messages, but large: 6 messages of ~1250 tokens against a 8k window (75% = 6k).
        let history: Vec<ContextItem> = (1..=6).map(|s| text(s, 1000)).collect();
        assert!(needs_compaction(&policy, &history, &new, 0, 8_000));
        assert!(!needs_compaction(&policy, &history, &new, 0, 80_000));
        // The system prompt and summary count too.
        let small: Vec<ContextItem> = (1..=6).map(|s| text(s, 1)).collect();
        assert!(needs_compaction(&policy, &small, &new, 7_000, 8_000));
        // Only keep_recent messages: nothing to summarize, however large.
        let history: Vec<ContextItem> = (1..=4).map(|s| text(s, 10_000)).collect();
        assert!(!needs_compaction(&policy, &history, &new, 0, 8_000));
        let off = CompactionPolicy {
            enabled: false,
            ..policy
        };
        let history: Vec<ContextItem> = (1..=50).map(|s| text(s, 1)).collect();
        assert!(!needs_compaction(&off, &history, &new, 0, 200_000));
    }

    #[test]
    fn the_boundary_keeps_recent_messages_and_never_splits_a_call_from_its_result() {
        // Table: history as a string (t = text, cN = call N, rN = result N), keep_recent, boundary.
        for (shape, keep, want) in [
            ("t t t t t t", 4, 2),
            ("t t", 4, 0),
            ("t c1 r1 t t t", 4, 1),
            ("t t c1 t r1 t", 2, 2),
            ("c1 c2 t r2 t r1", 2, 0),
            ("t c1 r1 c2 r2 t", 3, 3),
            ("t t t c1 r1", 1, 3),
            ("c1 t t t t", 4, 1),
        ] {
            let history: Vec<ContextItem> = shape
                .split(' ')
                .enumerate()
                .map(|(i, w)| {
                    let seq = i as u64 + 1;
                    match (w.as_bytes()[0], &w[1..]) {
                        (b'c', id) => call(seq, id),
                        (b'r', id) => result(seq, id),
                        _ => text(seq, 1),
                    }
                })
                .collect();
            let boundary = summary_boundary(&history, keep);
            assert_eq!(boundary, want, "{shape} keep {keep}");
        }
        // A context that holds a call's result right after it, ahead of two messages logged
        // in between (seqs 10, 13, 11, 12): no cut may fall inside the reordering.
        let history = vec![
            text(8, 1),
            text(9, 1),
            call(10, "d"),
            result(13, "d"),
            text(11, 1),
            text(12, 1),
            text(14, 1),
        ];
        for keep in 1..=6 {
            let boundary = summary_boundary(&history, keep);
            let covers = covered_seq(&history, boundary).unwrap_or(Seq::ZERO);
            assert!(
                history[boundary..].iter().all(|i| i.seq > covers),
                "keep {keep}: boundary {boundary} covers {covers}"
            );
        }
        assert_eq!(summary_boundary(&history, 2), 2, "before the call");
        assert_eq!(summary_boundary(&history, 1), 6);
    }

    #[test]
    fn inside_a_tool_loop_the_question_and_the_loop_are_never_summarized() {
        // The question at seq 5, then the loop: call, result, call, result (the new message
        // of the step is the last result).
        let history = vec![
            text(1, 1),
            text(2, 1),
            text(3, 1),
            text(4, 1),
            text(5, 1),
            call(6, "a"),
            result(7, "a"),
            call(8, "b"),
        ];
        assert_eq!(
            summary_boundary(&history, 1),
            7,
            "unprotected, the question goes"
        );
        assert_eq!(summary_boundary_before(&history, 1, Seq(5)), 4);
        assert_eq!(summary_boundary_before(&history, 1, Seq(1)), 0);
        assert_eq!(
            summary_boundary_before(&history, 6, Seq(5)),
            2,
            "keep_recent still holds"
        );
    }

    #[test]
    fn parts_fit_half_the_window_and_oversized_messages_are_left_out_and_named() {
        // ~258 tokens a message, 1000 per part: 3 messages a part.
        let items: Vec<ContextItem> = (1..=7).map(|s| text(s, 200)).collect();
        let job = split_for_summarizer(&items, None, 1_000);
        assert_eq!(
            job.parts.iter().map(Vec::len).collect::<Vec<_>>(),
            [3, 3, 1]
        );
        assert!(job.left_out.is_empty());
        let mut items = items;
        items.insert(2, text(99, 5_000));
        let job = split_for_summarizer(&items, None, 1_000);
        assert_eq!(job.left_out.len(), 1);
        assert_eq!(job.left_out[0].seq, Seq(99));
        assert_eq!(
            job.parts.iter().map(Vec::len).sum::<usize>(),
            7,
            "the rest is kept"
        );
        let text = finish_summary("the summary", &job.left_out);
        assert!(text.starts_with("the summary") && text.contains("message #99 from ann"));
        // A previous summary takes room in the first part.
        let previous = ContextSummary {
            covers_up_to: Seq(0),
            text: "x ".repeat(2_000),
        };
        let job = split_for_summarizer(&items[..3], Some(&previous), 1_000);
        assert_eq!(job.parts[0].len(), 1);
        let prompt = part_prompt(Some(&previous), &job.parts[0], 0, job.parts.len());
        assert!(prompt.contains("<previous_summary") && prompt.contains("part 1 of"));
        let second = part_prompt(Some(&previous), &job.parts[1], 1, job.parts.len());
        assert!(
            !second.contains("<previous_summary"),
            "only the first part carries it"
        );
        assert!(merge_prompt(&["a".into(), "b".into()]).contains("<partial_summary part=\"2\">"));
    }
}
