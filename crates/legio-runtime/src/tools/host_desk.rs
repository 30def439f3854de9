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

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use legio_core::{ConversationKey, Seq};
use tokio::sync::oneshot;

use crate::conversation::{lock, Conversations, Declared, Use};
use crate::error::{NotWaiting, RuntimeError};
use crate::tools::follow::{self, Follower};
use crate::tools::host_calls::HostToolResult;
use crate::tools::memory::ToolSpec;
use crate::tools::outcome::ToolOutcome;
use crate::tools::registry::{check_tool, ToolRegistry, ToolRegistryError};

/// The host tools declared per conversation and the calls waiting for the host's results, each
/// kept in its conversation's entry (conversation/), and the latest calls that timed out.
pub(crate) struct HostToolDesk {
    conversations: Conversations,
    /// The latest calls that waited past the host tool timeout (at most [`TIMED_OUT_KEPT`]), so
    /// that a late result is told so rather than "no such call". Kept here, not in an entry: a
    /// timed-out call outlives its turn, and its conversation's entry with it.
    timed_out: Mutex<VecDeque<(ConversationKey, String)>>,
}

/// How many timed-out calls the desk remembers.
const TIMED_OUT_KEPT: usize = 256;

/// A host call registered as waiting: the host's outcome arrives on `outcome`. Its use keeps
/// the conversation's entry, where it waits; dropped, the call is forgotten (answered, timed
/// out or cut by the turn's end).
pub(crate) struct Waiting {
    conversation: Use,
    call_id: String,
    pub(crate) outcome: oneshot::Receiver<ToolOutcome>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        lock(&self.conversation.waiting).remove(&self.call_id);
    }
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
    /// The desk of the conversations in `conversations`.
    pub(crate) fn new(conversations: Conversations) -> Self {
        Self {
            conversations,
            timed_out: Mutex::default(),
        }
    }

    /// Notes what the conversation's events in `(from, through]` declare: `Some(tools)`, the
    /// last declaration among them (or one just made at `through`), `None` when they declare
    /// nothing. `from`: where the read started (`None`: at the beginning, or a declaration just
    /// made, which holds whatever came before); a read that started past what is kept now (its
    /// entry gone since, or new) notes nothing (it missed what came before). A note older than
    /// what is known is ignored, so concurrent readers and declarers never take the desk back.
    /// Kept only while something uses the conversation (its supervisor, a request): a later use
    /// reads the conversation's declarations from the log again.
    pub(crate) fn note(
        &self,
        conversation: &ConversationKey,
        tools: Option<Vec<ToolSpec>>,
        through: Seq,
        from: Option<Seq>,
    ) {
        let Some(entry) = self.conversations.get(conversation) else {
            return;
        };
        let mut declared = lock(&entry.declared);
        if tools.is_none() && from.is_some() && declared.is_none() {
            return;
        }
        let known = declared.get_or_insert_with(|| Declared {
            tools: Vec::new(),
            through: Seq::ZERO,
        });
        if through < known.through {
            return;
        }
        known.through = through;
        if let Some(tools) = tools {
            known.tools = tools;
        }
    }

    /// How far this process has read the conversation's declarations (`None`: not at all, or
    /// not since its entry went).
    pub(crate) fn read_through(&self, conversation: &ConversationKey) -> Option<Seq> {
        let entry = self.conversations.get(conversation)?;
        let through = lock(&entry.declared).as_ref()?.through;
        Some(through)
    }

    /// The conversation's declared tools, as last read.
    pub(crate) fn declared(&self, conversation: &ConversationKey) -> Vec<ToolSpec> {
        let Some(entry) = self.conversations.get(conversation) else {
            return Vec::new();
        };
        let declared = lock(&entry.declared);
        declared
            .as_ref()
            .map(|d| d.tools.clone())
            .unwrap_or_default()
    }

    /// Registers a call that waits for the host.
    pub(crate) fn wait_for(&self, conversation: &ConversationKey, call_id: &str) -> Waiting {
        let (tx, outcome) = oneshot::channel();
        let conversation = self.conversations.enter(conversation);
        lock(&conversation.waiting).insert(call_id.to_owned(), tx);
        Waiting {
            conversation,
            call_id: call_id.to_owned(),
            outcome,
        }
    }

    /// Notes that `call` waited past the host tool timeout, and forgets it at once: a result
    /// handed over from now on is refused as late rather than taken and lost.
    pub(crate) fn timed_out(&self, call: &Waiting) {
        lock(&call.conversation.waiting).remove(&call.call_id);
        let mut kept = lock(&self.timed_out);
        if kept.len() == TIMED_OUT_KEPT {
            kept.pop_front();
        }
        kept.push_back((call.conversation.key().clone(), call.call_id.clone()));
    }

    /// The refusal of a result for `call_id` (see [`not_waiting`]), told whether it timed out.
    fn refusal(
        &self,
        pending: &Pending,
        conversation: &ConversationKey,
        call_id: &str,
        why: NotWaiting,
    ) -> RuntimeError {
        let kept = lock(&self.timed_out);
        let timed_out = kept
            .iter()
            .any(|(c, id)| c == conversation && id == call_id);
        let why = match why {
            NotWaiting::Unknown if timed_out => NotWaiting::TimedOut,
            why => why,
        };
        not_waiting(pending, call_id, why)
    }

    /// Hands the host's results to the waiting calls: all or none (every id must be waiting,
    /// each once).
    pub(crate) fn submit(
        &self,
        conversation: &ConversationKey,
        results: Vec<HostToolResult>,
    ) -> Result<(), RuntimeError> {
        let entry = self.conversations.get(conversation);
        let nothing = Mutex::default();
        let mut pending = lock(entry.as_ref().map_or(&nothing, |e| &e.waiting));
        check_waiting(&pending, &results, |_| true)
            .map_err(|(id, why)| self.refusal(&pending, conversation, &id, why))?;
        hand_over(&mut pending, results);
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
        let Some(entry) = self.conversations.get(conversation) else {
            return false;
        };
        let pending = lock(&entry.waiting);
        let still_waiting = |id: &str| pending.contains_key(id);
        follow::take_over_message(&entry, message, follower, still_waiting)
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
        let Some(entry) = self.conversations.get(conversation) else {
            let why = results
                .first()
                .map_or(NotWaiting::NoResults, |_| NotWaiting::Unknown);
            let id = results.first().map_or("", |r| r.call_id.as_str());
            return Err(self.refusal(&Pending::new(), conversation, id, why));
        };
        let mut pending = lock(&entry.waiting);
        let known = |id: &str| follow::knows(&entry, id);
        check_waiting(&pending, &results, known)
            .map_err(|(id, why)| self.refusal(&pending, conversation, &id, why))?;
        let Some(first) = results.first() else {
            return Err(not_waiting(&pending, "", NotWaiting::NoResults));
        };
        let still_waiting =
            |id: &str| pending.contains_key(id) && !results.iter().any(|r| r.call_id == id);
        if !follow::take_over(&entry, &first.call_id, follower, still_waiting) {
            let why = NotWaiting::Unknown;
            return Err(self.refusal(&pending, conversation, &first.call_id, why));
        }
        hand_over(&mut pending, results);
        Ok(())
    }
}

/// A conversation's waiting calls, by call id.
type Pending = HashMap<String, oneshot::Sender<ToolOutcome>>;

/// Checks that every result answers a waiting call of `conversation` that `known` knows, each
/// once, and that there is one: else the call id at fault and why.
fn check_waiting(
    pending: &Pending,
    results: &[HostToolResult],
    known: impl Fn(&str) -> bool,
) -> Result<(), (String, NotWaiting)> {
    if results.is_empty() {
        return Err((String::new(), NotWaiting::NoResults));
    }
    for (i, result) in results.iter().enumerate() {
        if results[..i].iter().any(|r| r.call_id == result.call_id) {
            return Err((result.call_id.clone(), NotWaiting::Twice));
        }
        if !pending.contains_key(&result.call_id) || !known(&result.call_id) {
            return Err((result.call_id.clone(), NotWaiting::Unknown));
        }
    }
    Ok(())
}

/// The refusal of a result for `call_id`, naming the calls that wait in its conversation.
fn not_waiting(pending: &Pending, call_id: &str, why: NotWaiting) -> RuntimeError {
    let mut waiting: Vec<String> = pending.keys().cloned().collect();
    waiting.sort();
    RuntimeError::NoPendingToolCall {
        call_id: call_id.to_owned(),
        waiting,
        why,
    }
}

/// Hands each result to its waiting call (checked by `check_waiting`).
fn hand_over(pending: &mut Pending, results: Vec<HostToolResult>) {
    for result in results {
        if let Some(tx) = pending.remove(&result.call_id) {
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
    /// seq on reads that declare nothing, keeps it only while the conversation is in use, and
    /// after that notes only a whole read.
    #[test]
    fn the_desk_keeps_the_latest_declaration_while_the_conversation_is_used() {
        let table = Conversations::default();
        let desk = HostToolDesk::new(table.clone());
        let c = ConversationKey::new("d:1").unwrap();
        desk.note(&c, Some(vec![spec("b")]), Seq(7), None);
        assert_eq!(
            desk.read_through(&c),
            None,
            "nothing uses d:1: nothing kept"
        );
        let used = table.enter(&c);
        desk.note(&c, Some(vec![spec("b")]), Seq(7), None);
        desk.note(&c, Some(vec![spec("a")]), Seq(5), Some(Seq(3)));
        assert_eq!(names(&desk.declared(&c)), ["b"], "an older note is ignored");
        desk.note(&c, None, Seq(9), Some(Seq(7)));
        assert_eq!(desk.read_through(&c), Some(Seq(9)));
        assert_eq!(names(&desk.declared(&c)), ["b"], "nothing new declared");
        desk.note(&c, Some(Vec::new()), Seq(12), Some(Seq::ZERO));
        assert!(desk.declared(&c).is_empty(), "cleared");
        drop(used);
        let used = table.enter(&c);
        assert_eq!(
            desk.read_through(&c),
            None,
            "gone with its entry: read again"
        );
        // A read that started past the forgotten entry missed what came before: nothing noted.
        desk.note(&c, None, Seq(15), Some(Seq(12)));
        assert_eq!(desk.read_through(&c), None, "a partial read notes nothing");
        desk.note(&c, None, Seq(15), None);
        assert_eq!(desk.read_through(&c), Some(Seq(15)), "a whole read does");
        drop(used);
    }

    /// A waiting call takes its result, once; a call forgotten (its waiting dropped) or timed
    /// out is refused, the latter as late; a result for a conversation nobody uses is refused.
    #[test]
    fn results_go_to_waiting_calls_once_and_late_ones_are_told_so() {
        let table = Conversations::default();
        let desk = HostToolDesk::new(table.clone());
        let c = ConversationKey::new("d:2").unwrap();
        let result = |id: &str| HostToolResult {
            call_id: id.into(),
            content: "ok".into(),
            is_error: false,
        };
        let refused = |r: Result<(), RuntimeError>| match r {
            Err(RuntimeError::NoPendingToolCall { why, waiting, .. }) => (why, waiting),
            other => panic!("not refused: {other:?}"),
        };
        let (why, _) = refused(desk.submit(&c, vec![result("x")]));
        assert_eq!(why, NotWaiting::Unknown, "no entry");
        let mut one = desk.wait_for(&c, "one");
        let two = desk.wait_for(&c, "two");
        let (why, waiting) = refused(desk.submit(&c, vec![result("one"), result("one")]));
        assert_eq!(
            (why, waiting),
            (NotWaiting::Twice, vec!["one".into(), "two".into()])
        );
        desk.submit(&c, vec![result("one")]).unwrap();
        assert!(matches!(one.outcome.try_recv(), Ok(ToolOutcome::Done(t)) if t == "ok"));
        desk.timed_out(&two);
        drop(two);
        let (why, _) = refused(desk.submit(&c, vec![result("two")]));
        assert_eq!(why, NotWaiting::TimedOut);
        drop(one);
        assert_eq!(table.len(), 0, "the calls' uses were the entry's last");
    }

    #[test]
    fn a_turns_own_tool_replaces_a_declared_one_of_its_name() {
        let declared = vec![spec("a"), spec("b")];
        let tools = turn_tools(declared, vec![spec("b"), spec("c")]).unwrap();
        assert_eq!(names(&tools), ["a", "b", "c"]);
        assert!(turn_tools(Vec::new(), Vec::new()).is_none());
    }
}
