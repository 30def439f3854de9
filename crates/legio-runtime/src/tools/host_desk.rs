//! Tools the host runs (over an API, not compiled in): declared by a host for a conversation or
//! for one posted turn, each a name, a description and a JSON schema, and offered to the agents
//! that turn addresses. When a model calls one, the call is registered here, announced as
//! [`crate::Progress::ToolCallsRequired`] (the turn's caller hands it to the host) and waited
//! for: the host answers with [`crate::Runtime::submit_tool_results`], or after
//! `runtime.host_tool_timeout_seconds` the call gets an interrupted error result. Either way the
//! result is recorded like any tool result (the model's message holds the calls, the results
//! message replies to it, each result names its call id), and the turn goes on.
//!
//! This is the seam in the tool loop: a call whose result arrives later. tools/calls.rs asks
//! [`HostToolDesk::wait_for`] for each call of the step that names a host tool, before any call
//! runs, then awaits each receiver as the call's outcome.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use legio_core::{ConversationKey, Seq};
use tokio::sync::oneshot;

use crate::error::{NotWaiting, RuntimeError};
use crate::tools::follow::{Follower, Follows};
use crate::tools::host_calls::HostToolResult;
use crate::tools::memory::ToolSpec;
use crate::tools::outcome::ToolOutcome;
use crate::tools::registry::{check_tool, ToolRegistry, ToolRegistryError};

type PendingKey = (ConversationKey, String);

/// The host tools declared per conversation, as this process has read them from the log
/// (tools/declared.rs keeps them current), the calls waiting for the host's results, and who
/// follows the turns that made them (follow.rs).
#[derive(Default)]
pub(crate) struct HostToolDesk {
    declared: Mutex<HashMap<ConversationKey, Declared>>,
    pending: Mutex<HashMap<PendingKey, oneshot::Sender<ToolOutcome>>>,
    /// The latest calls that waited past the host tool timeout (at most [`TIMED_OUT_KEPT`]), so
    /// that a late result is told so rather than "no such call".
    timed_out: Mutex<std::collections::VecDeque<PendingKey>>,
    pub(crate) follows: Follows,
}

/// How many timed-out calls the desk remembers.
const TIMED_OUT_KEPT: usize = 256;

/// A conversation's declared tools as of a seq: those of its last `ToolsDeclared` event at or
/// before `through` (none when it has none); `used`: when it was last noted or read.
#[derive(Debug)]
struct Declared {
    tools: Vec<ToolSpec>,
    through: Seq,
    used: Instant,
}

impl std::fmt::Debug for HostToolDesk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostToolDesk").finish_non_exhaustive()
    }
}

/// Checks host tools: valid names, object schemas, no name twice, none taken by the process's
/// registered tools.
pub(crate) fn check_host_tools(
    tools: &[ToolSpec],
    registry: &ToolRegistry,
) -> Result<(), ToolRegistryError> {
    for (i, tool) in tools.iter().enumerate() {
        check_tool(&tool.name, &tool.parameters)?;
        let twice = tools[..i].iter().any(|t| t.name == tool.name);
        if twice || registry.get(&tool.name).is_some() {
            return Err(ToolRegistryError::Duplicate {
                name: tool.name.clone(),
            });
        }
    }
    Ok(())
}

impl HostToolDesk {
    /// Notes what the conversation's events in `(from, through]` declare: `Some(tools)`, the
    /// last declaration among them (or one just made at `through`), `None` when they declare
    /// nothing. `from`: where the read started (`None`: at the beginning, or a declaration just
    /// made, which holds whatever came before); a read that started past an entry since
    /// forgotten notes nothing (it missed what came before). A note older
    /// than what is known is ignored, so concurrent readers and declarers never take the desk
    /// back.
    pub(crate) fn note(
        &self,
        conversation: &ConversationKey,
        tools: Option<Vec<ToolSpec>>,
        through: Seq,
        from: Option<Seq>,
    ) {
        let mut declared = self.declared.lock().unwrap_or_else(|p| p.into_inner());
        if tools.is_none() && from.is_some() && !declared.contains_key(conversation) {
            return;
        }
        let entry = declared
            .entry(conversation.clone())
            .or_insert_with(|| Declared {
                tools: Vec::new(),
                through: Seq::ZERO,
                used: Instant::now(),
            });
        entry.used = Instant::now();
        if through < entry.through {
            return;
        }
        entry.through = through;
        if let Some(tools) = tools {
            entry.tools = tools;
        }
    }

    /// How far this process has read the conversation's declarations (`None`: not at all); a
    /// use of them.
    pub(crate) fn read_through(&self, conversation: &ConversationKey) -> Option<Seq> {
        let mut declared = self.declared.lock().unwrap_or_else(|p| p.into_inner());
        let entry = declared.get_mut(conversation)?;
        entry.used = Instant::now();
        Some(entry.through)
    }

    /// The conversation's declared tools, as last read.
    pub(crate) fn declared(&self, conversation: &ConversationKey) -> Vec<ToolSpec> {
        let declared = self.declared.lock().unwrap_or_else(|p| p.into_inner());
        declared
            .get(conversation)
            .map(|d| d.tools.clone())
            .unwrap_or_default()
    }

    /// Forgets what was read of the conversations not used for `idle` (the reaper calls it), so
    /// that conversations no longer posted to cost nothing here: a later use reads the
    /// conversation's declarations from the log again.
    pub(crate) fn forget_unused(&self, idle: std::time::Duration) {
        let mut declared = self.declared.lock().unwrap_or_else(|p| p.into_inner());
        declared.retain(|_, d| d.used.elapsed() < idle);
    }

    /// Registers a call that waits for the host: its outcome arrives on the receiver.
    pub(crate) fn wait_for(
        &self,
        conversation: &ConversationKey,
        call_id: &str,
    ) -> oneshot::Receiver<ToolOutcome> {
        let (tx, rx) = oneshot::channel();
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.insert((conversation.clone(), call_id.to_owned()), tx);
        rx
    }

    /// Forgets a call (answered, timed out or cut by the turn's end).
    pub(crate) fn forget(&self, conversation: &ConversationKey, call_id: &str) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.remove(&(conversation.clone(), call_id.to_owned()));
    }

    /// Notes that `call_id` waited past the host tool timeout, and forgets it at once: a result
    /// handed over from now on is refused as late rather than taken and lost.
    pub(crate) fn timed_out(&self, conversation: &ConversationKey, call_id: &str) {
        self.forget(conversation, call_id);
        let mut kept = self.timed_out.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() == TIMED_OUT_KEPT {
            kept.pop_front();
        }
        kept.push_back((conversation.clone(), call_id.to_owned()));
    }

    /// The refusal of a result for `call_id` (see [`not_waiting`]), told whether it timed out.
    fn refusal(
        &self,
        pending: &Pending,
        conversation: &ConversationKey,
        call_id: &str,
        why: NotWaiting,
    ) -> RuntimeError {
        let key = (conversation.clone(), call_id.to_owned());
        let kept = self.timed_out.lock().unwrap_or_else(|p| p.into_inner());
        let why = match why {
            NotWaiting::Unknown if kept.contains(&key) => NotWaiting::TimedOut,
            why => why,
        };
        not_waiting(pending, conversation, call_id, why)
    }

    /// Hands the host's results to the waiting calls: all or none (every id must be waiting,
    /// each once).
    pub(crate) fn submit(
        &self,
        conversation: &ConversationKey,
        results: Vec<HostToolResult>,
    ) -> Result<(), RuntimeError> {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        check_waiting(&pending, conversation, &results, |_| true)
            .map_err(|(id, why)| self.refusal(&pending, conversation, &id, why))?;
        hand_over(&mut pending, conversation, results);
        Ok(())
    }

    /// Gives the turn of `conversation` that answers `message`, paused on the host's calls, to
    /// `follower` (a keyed post's retry whose first attempt's `requires_action` was lost), told
    /// first the calls still waiting. `false` when no such turn waits here.
    pub(crate) fn follow_turn(
        &self,
        conversation: &ConversationKey,
        message: legio_core::MessageId,
        follower: Follower,
    ) -> bool {
        let pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let still_waiting = |id: &str| pending.contains_key(&(conversation.clone(), id.to_owned()));
        self.follows
            .take_over_message(conversation, message, follower, still_waiting)
    }

    /// As [`HostToolDesk::submit`], and `follower` takes over the turn that made the first
    /// call (its later progress and its end, and first the turn's other calls still waiting:
    /// follow.rs), in the same step, so that of two submissions of the same results the one
    /// whose results the calls took follows the turn. Refused like `submit`, and when a call's
    /// turn is not followed here (its relay has not announced it yet, or it ended).
    pub(crate) fn submit_following(
        &self,
        conversation: &ConversationKey,
        results: Vec<HostToolResult>,
        follower: Follower,
    ) -> Result<(), RuntimeError> {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let known = |id: &str| self.follows.knows(conversation, id);
        check_waiting(&pending, conversation, &results, known)
            .map_err(|(id, why)| self.refusal(&pending, conversation, &id, why))?;
        let Some(first) = results.first() else {
            return Err(not_waiting(
                &pending,
                conversation,
                "",
                NotWaiting::NoResults,
            ));
        };
        let still_waiting = |id: &str| {
            pending.contains_key(&(conversation.clone(), id.to_owned()))
                && !results.iter().any(|r| r.call_id == id)
        };
        if !self
            .follows
            .take_over(conversation, &first.call_id, follower, still_waiting)
        {
            let why = NotWaiting::Unknown;
            return Err(self.refusal(&pending, conversation, &first.call_id, why));
        }
        hand_over(&mut pending, conversation, results);
        Ok(())
    }
}

type Pending = HashMap<PendingKey, oneshot::Sender<ToolOutcome>>;

/// Checks that every result answers a waiting call of `conversation` that `known` knows, each
/// once, and that there is one: else the call id at fault and why.
fn check_waiting(
    pending: &Pending,
    conversation: &ConversationKey,
    results: &[HostToolResult],
    known: impl Fn(&str) -> bool,
) -> Result<(), (String, NotWaiting)> {
    if results.is_empty() {
        return Err((String::new(), NotWaiting::NoResults));
    }
    for (i, result) in results.iter().enumerate() {
        let key = (conversation.clone(), result.call_id.clone());
        if results[..i].iter().any(|r| r.call_id == result.call_id) {
            return Err((result.call_id.clone(), NotWaiting::Twice));
        }
        if !pending.contains_key(&key) || !known(&result.call_id) {
            return Err((result.call_id.clone(), NotWaiting::Unknown));
        }
    }
    Ok(())
}

/// The refusal of a result for `call_id`, naming the calls that wait in `conversation`.
fn not_waiting(
    pending: &Pending,
    conversation: &ConversationKey,
    call_id: &str,
    why: NotWaiting,
) -> RuntimeError {
    let mut waiting: Vec<String> = pending
        .keys()
        .filter(|(c, _)| c == conversation)
        .map(|(_, id)| id.clone())
        .collect();
    waiting.sort();
    RuntimeError::NoPendingToolCall {
        call_id: call_id.to_owned(),
        waiting,
        why,
    }
}

/// Hands each result to its waiting call (checked by `check_waiting`).
fn hand_over(pending: &mut Pending, conversation: &ConversationKey, results: Vec<HostToolResult>) {
    for result in results {
        let key = (conversation.clone(), result.call_id);
        if let Some(tx) = pending.remove(&key) {
            let outcome = if result.is_error {
                ToolOutcome::Failed(result.content)
            } else {
                ToolOutcome::Done(result.content)
            };
            // A call cut by the turn's end in the meantime drops its receiver: nothing waits.
            let _ = tx.send(outcome);
        }
    }
}

/// The host tools of a turn: the conversation's `declared` ones, then the turn's own (replacing
/// a declared one of the same name). `None` when there are none.
pub(crate) fn turn_tools(declared: Vec<ToolSpec>, turn: Vec<ToolSpec>) -> Option<Arc<[ToolSpec]>> {
    let mut tools: Vec<ToolSpec> = declared
        .into_iter()
        .filter(|d| !turn.iter().any(|t| t.name == d.name))
        .collect();
    tools.extend(turn);
    (!tools.is_empty()).then(|| tools.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: String::new(),
            parameters: serde_json::json!({"type": "object"}),
        }
    }

    fn names(tools: &[ToolSpec]) -> Vec<&str> {
        tools.iter().map(|t| t.name.as_str()).collect()
    }

    /// The desk keeps the latest declaration by seq whatever order notes arrive in, moves its
    /// seq on reads that declare nothing, and forgets conversations unused for the idle time.
    #[test]
    fn the_desk_keeps_the_latest_declaration_and_forgets_unused_ones() {
        let desk = HostToolDesk::default();
        let c = ConversationKey::new("d:1").unwrap();
        assert_eq!(desk.read_through(&c), None);
        desk.note(&c, Some(vec![spec("b")]), Seq(7), None);
        desk.note(&c, Some(vec![spec("a")]), Seq(5), Some(Seq(3)));
        assert_eq!(names(&desk.declared(&c)), ["b"], "an older note is ignored");
        desk.note(&c, None, Seq(9), Some(Seq(7)));
        assert_eq!(desk.read_through(&c), Some(Seq(9)));
        assert_eq!(names(&desk.declared(&c)), ["b"], "nothing new declared");
        desk.note(&c, Some(Vec::new()), Seq(12), Some(Seq::ZERO));
        assert!(desk.declared(&c).is_empty(), "cleared");
        desk.forget_unused(std::time::Duration::from_secs(60));
        assert_eq!(desk.read_through(&c), Some(Seq(12)), "used just now");
        desk.forget_unused(std::time::Duration::ZERO);
        assert_eq!(desk.read_through(&c), None, "forgotten: read again");
        // A read that started past the forgotten entry missed what came before: nothing noted.
        desk.note(&c, None, Seq(15), Some(Seq(12)));
        assert_eq!(desk.read_through(&c), None, "a partial read notes nothing");
        desk.note(&c, None, Seq(15), None);
        assert_eq!(desk.read_through(&c), Some(Seq(15)), "a whole read does");
    }

    #[test]
    fn a_turns_own_tool_replaces_a_declared_one_of_its_name() {
        let declared = vec![spec("a"), spec("b")];
        let tools = turn_tools(declared, vec![spec("b"), spec("c")]).unwrap();
        assert_eq!(names(&tools), ["a", "b", "c"]);
        assert!(turn_tools(Vec::new(), Vec::new()).is_none());
    }
}
