//! One conversation's projection on the node that uses it: its events, the subject's last seq
//! (the expectation of the next append) and the agents' session states, all derived from the
//! conversation's subject and kept current by this node's own appends.

use std::collections::BTreeMap;

use legio_core::{can_see, AgentName, AgentSessionState, ConversationKey, Record, Seq, Viewer};

/// The events of one conversation in log order, with the folds the log answers from.
#[derive(Debug)]
pub(crate) struct Projection {
    conversation: ConversationKey,
    records: Vec<Record>,
    states: BTreeMap<AgentName, AgentSessionState>,
}

impl Projection {
    pub(crate) fn new(conversation: ConversationKey) -> Self {
        Self {
            conversation,
            records: Vec::new(),
            states: BTreeMap::new(),
        }
    }

    /// The seq of the conversation's last event known here (`Seq::ZERO`: none): what the next
    /// append expects the subject's last sequence to be.
    pub(crate) fn last(&self) -> Seq {
        self.records.last().map_or(Seq::ZERO, |r| r.seq)
    }

    /// Folds one more event in; events must come in log order (older ones are ignored).
    pub(crate) fn apply(&mut self, record: Record) {
        if record.seq <= self.last() {
            return;
        }
        if let Some(agent) = record.event.session_agent() {
            self.states
                .entry(agent.clone())
                .or_insert_with(|| AgentSessionState::new(self.conversation.clone(), agent.clone()))
                .apply(record.seq, &record.event);
        }
        self.records.push(record);
    }

    /// The event at `seq`, if it is this conversation's.
    pub(crate) fn record_at(&self, seq: Seq) -> Option<Record> {
        let i = self.records.binary_search_by_key(&seq, |r| r.seq).ok()?;
        Some(self.records[i].clone())
    }

    /// Index of the first record with seq above `seq`.
    fn after_index(&self, seq: Seq) -> usize {
        self.records.partition_point(|r| r.seq <= seq)
    }

    /// Events after `after`, at most `limit`.
    pub(crate) fn events_after(&self, after: Seq, limit: usize) -> Vec<Record> {
        self.records[self.after_index(after)..]
            .iter()
            .take(limit)
            .cloned()
            .collect()
    }

    fn visible(viewer: Viewer<'_>, record: &Record) -> bool {
        record
            .event
            .as_message()
            .is_some_and(|message| can_see(viewer, message))
    }

    /// The last `limit` messages `viewer` may see with seq below `before`, in log order.
    pub(crate) fn visible_before(
        &self,
        viewer: Viewer<'_>,
        before: Seq,
        limit: usize,
    ) -> Vec<Record> {
        let end = self.records.partition_point(|r| r.seq < before);
        let mut out: Vec<Record> = self.records[..end]
            .iter()
            .rev()
            .filter(|r| Self::visible(viewer, r))
            .take(limit)
            .cloned()
            .collect();
        out.reverse();
        out
    }

    /// The messages `viewer` may see with seq after `after`, at most `limit`, in log order.
    pub(crate) fn visible_after(
        &self,
        viewer: Viewer<'_>,
        after: Seq,
        limit: usize,
    ) -> Vec<Record> {
        self.records[self.after_index(after)..]
            .iter()
            .filter(|r| Self::visible(viewer, r))
            .take(limit)
            .cloned()
            .collect()
    }

    pub(crate) fn session_state(&self, agent: &AgentName) -> Option<AgentSessionState> {
        self.states.get(agent).cloned()
    }

    pub(crate) fn session_states(&self) -> Vec<AgentSessionState> {
        self.states.values().cloned().collect()
    }
}
