//! One commit group's writes in layout v2: its events packed into chunks, its seqs in every
//! (conversation, list) it touches, and the session states it changes. Appends, recovery, the
//! migration from v1 and `verify` all derive a group's list items here, so they agree. The log
//! stores a list's items of several groups as one merged entry (`engine.rs`, the overlay).

use std::collections::{BTreeMap, HashMap};

use legio_core::{visibility_keys, AgentSessionState, Event, Participant, Seq, VisibilityKey};

use crate::backend::{TreeId, WriteSet};
use crate::codec::encode_state;
use crate::error::Result;
use crate::keys;
use crate::layout::{encode_chunk, encode_list, ListItems, CHUNK_BYTES};

/// The list entries of one group: list prefix → (is the conversation list, items).
#[derive(Clone, Default, Debug)]
pub(crate) struct GroupIndex {
    pub(crate) lists: BTreeMap<Vec<u8>, (bool, ListItems)>,
}

impl GroupIndex {
    /// Lists `event` at `seq`: in its conversation's list, and a message in every named list of
    /// its visibility keys that a viewer can read (`*` is the conversation list's message flag,
    /// not a list of its own; the user sees through `*`, so no list is kept under `user`).
    pub(crate) fn add(&mut self, seq: Seq, event: &Event) {
        let conv = event.conversation();
        let message = match event {
            Event::MessagePosted(message) => Some(message),
            _ => None,
        };
        self.push(
            keys::list_prefix(conv, None),
            true,
            (seq, message.is_some()),
        );
        for key in message.map(visibility_keys).unwrap_or_default() {
            if matches!(
                key,
                VisibilityKey::All | VisibilityKey::Participant(Participant::Agent(_))
            ) {
                self.push(keys::list_prefix(conv, Some(&key)), false, (seq, false));
            }
        }
    }

    fn push(&mut self, prefix: Vec<u8>, flagged: bool, item: (Seq, bool)) {
        self.lists
            .entry(prefix)
            .or_insert_with(|| (flagged, Vec::new()))
            .1
            .push(item);
    }

    /// Appends the items of `later` (whose seqs all follow this index's) list by list: the
    /// index of several groups, each list one merged entry.
    pub(crate) fn append(&mut self, later: Self) {
        for (prefix, (flagged, items)) in later.lists {
            self.lists
                .entry(prefix)
                .or_insert_with(|| (flagged, Vec::new()))
                .1
                .extend(items);
        }
    }

    /// The stored entries: key (prefix · first seq) and value.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (Vec<u8>, Vec<u8>)> + '_ {
        self.lists.iter().filter_map(|(prefix, (flagged, items))| {
            let first = items.first()?.0;
            Some((keys::list_key(prefix, first), encode_list(items, *flagged)))
        })
    }
}

/// Packs a group's records (consecutive seqs from `group_first`) into chunk writes.
pub(crate) fn put_chunks(ws: &mut WriteSet, group_first: Seq, records: &[&[u8]]) {
    let mut start = 0;
    while start < records.len() {
        let mut end = start;
        let mut bytes = 0;
        while end < records.len() && (end == start || bytes + records[end].len() <= CHUNK_BYTES) {
            bytes += records[end].len();
            end += 1;
        }
        let first = Seq(group_first.0 + start as u64);
        ws.put_chunk(
            keys::seq_key(first).to_vec(),
            encode_chunk(group_first, &records[start..end]),
        );
        start = end;
    }
}

/// Session states touched by a group (or a recovery, or a migration), by session key.
pub(crate) type States = HashMap<Vec<u8>, AgentSessionState>;

/// Folds `event` into the state of its session agent, loading the stored state on first touch.
pub(crate) fn fold_state(
    states: &mut States,
    seq: Seq,
    event: &Event,
    load: &mut dyn FnMut(&[u8]) -> Result<Option<AgentSessionState>>,
) -> Result<()> {
    let Some(agent) = event.session_agent() else {
        return Ok(());
    };
    let conv = event.conversation();
    let key = keys::session_key(conv, agent);
    if !states.contains_key(&key) {
        let state =
            load(&key)?.unwrap_or_else(|| AgentSessionState::new(conv.clone(), agent.clone()));
        states.insert(key.clone(), state);
    }
    if let Some(state) = states.get_mut(&key) {
        state.apply(seq, event);
    }
    Ok(())
}

/// Writes the list entries of `index`.
pub(crate) fn put_lists(ws: &mut WriteSet, index: &GroupIndex) {
    for (key, value) in index.entries() {
        ws.put(TreeId::Lists, key, value);
    }
}

/// Writes `states`.
pub(crate) fn put_states(ws: &mut WriteSet, states: &States) -> Result<()> {
    for (key, state) in states {
        ws.put(TreeId::Sessions, key.clone(), encode_state(state)?);
    }
    Ok(())
}

/// Writes `states`, then the watermark `last` as a plain write (the migration, whose lists are
/// made visible by the layout marker written after them): the index covers every event up to it.
pub(crate) fn put_states_and_watermark(
    ws: &mut WriteSet,
    states: &States,
    last: Seq,
) -> Result<()> {
    put_states(ws, states)?;
    ws.put(
        TreeId::Meta,
        keys::META_INDEXED_THROUGH.to_vec(),
        keys::seq_key(last).to_vec(),
    );
    Ok(())
}
