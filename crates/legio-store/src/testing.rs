//! Test support, not an API: damage a live log's stored trees on purpose, one function per kind
//! of damage, so that tests can show `verify` (and recovery) finding exactly that damage. Every
//! test that damages a store goes through [`damage`]: a new storage layout ports this one file.
//! It also exposes the session-state codec for the golden files. Never use it outside tests.

use legio_core::{AgentName, AgentSessionState, ConversationKey, Event, Seq};

use crate::backend::{Backend, TreeId, WriteSet};
use crate::codec;
use crate::error::{Result, StoreError};
use crate::group::GroupIndex;
use crate::keys;
use crate::layout::{decode_list, encode_chunk, encode_list, Chunk, ListItems};
use crate::log::EventLog;
use crate::sled_log::SledLog;

/// One kind of damage to a stored log.
#[derive(Clone, Debug)]
pub enum Damage {
    /// Removes the event at `seq` and every index entry it calls for: a gap in the seqs, and
    /// nothing else (choose a message no other message replies to).
    RemoveEvent(Seq),
    /// Overwrites the stored bytes of the event at `seq`.
    OverwriteRecord {
        /// Which event.
        seq: Seq,
        /// The new stored bytes (a version byte and a payload, or garbage).
        bytes: Vec<u8>,
    },
    /// Removes the `by_conv` entry of the event at `seq` (its seq in its conversation's list).
    RemoveConversationIndexEntry(Seq),
    /// Adds a `by_conv` entry filing `seq` under `conversation`, which its event does not name.
    StrayConversationIndexEntry {
        /// The conversation the entry wrongly names.
        conversation: ConversationKey,
        /// The seq it names.
        seq: Seq,
    },
    /// Removes the visibility index entries of the event at `seq` (its seq in every named list,
    /// and its message flag in the conversation list).
    RemoveVisibleIndexEntries(Seq),
    /// Replaces the stored session state of `agent` in `conversation` by `state`.
    ReplaceSessionState {
        /// Its conversation.
        conversation: ConversationKey,
        /// Its agent.
        agent: AgentName,
        /// What to store instead.
        state: Box<AgentSessionState>,
    },
    /// Sets the index watermark to `seq` (and nothing else: the list entries past it stay).
    RewindWatermark(Seq),
    /// Removes every seq above `seq` from the lists and sets the watermark to `seq`: what a
    /// crash leaves when the list entries past `seq` were not yet written (nor, since it is
    /// written after them, their watermark).
    DropIndexesAfter(Seq),
}

/// Applies `damage` to the log's trees directly (no seq, no index, no check) and syncs it.
/// The log's pending list items are written first, so that the damage meets them stored.
pub fn damage(log: &SledLog, damage: Damage) -> Result<()> {
    log.flush()?;
    match damage {
        Damage::RemoveEvent(seq) => remove_event(log, seq)?,
        Damage::OverwriteRecord { seq, bytes } => {
            return log.overwrite_raw_record_for_tests(seq, &bytes);
        }
        Damage::RemoveConversationIndexEntry(seq) => {
            let event = event_at(log, seq)?;
            edit_lists(log, &event, seq, true, |items| {
                items.retain(|(s, _)| *s != seq)
            })?;
        }
        Damage::StrayConversationIndexEntry { conversation, seq } => {
            let prefix = keys::list_prefix(&conversation, None);
            let mut ws = WriteSet::default();
            ws.put(
                TreeId::Lists,
                keys::list_key(&prefix, seq),
                encode_list(&[(seq, false)], true),
            );
            log.backend().apply(ws)?;
        }
        Damage::RemoveVisibleIndexEntries(seq) => {
            let event = event_at(log, seq)?;
            edit_lists(log, &event, seq, false, |items| {
                items.retain(|(s, _)| *s != seq)
            })?;
            edit_lists(log, &event, seq, true, |items| {
                for item in items.iter_mut().filter(|(s, _)| *s == seq) {
                    item.1 = false;
                }
            })?;
        }
        Damage::ReplaceSessionState {
            conversation,
            agent,
            state,
        } => {
            let mut ws = WriteSet::default();
            ws.put(
                TreeId::Sessions,
                keys::session_key(&conversation, &agent),
                codec::encode_state(&state)?,
            );
            log.backend().apply(ws)?;
        }
        Damage::DropIndexesAfter(seq) => {
            drop_indexes_after(log, seq)?;
            rewind_watermark(log, seq)?;
        }
        Damage::RewindWatermark(seq) => rewind_watermark(log, seq)?,
    }
    log.flush()
}

fn rewind_watermark(log: &SledLog, seq: Seq) -> Result<()> {
    let mut ws = WriteSet::default();
    ws.put(
        TreeId::Meta,
        keys::META_INDEXED_THROUGH.to_vec(),
        keys::seq_key(seq).to_vec(),
    );
    log.backend().apply(ws)
}

/// Removes every listed seq above `seq` (an entry left empty goes; one keeps its key, since
/// its first seq stays).
fn drop_indexes_after(log: &SledLog, seq: Seq) -> Result<()> {
    let backend = log.backend();
    let mut entries = Vec::new();
    backend.scan(
        TreeId::Lists,
        &[],
        None,
        crate::backend::Direction::Forward,
        &mut |key, value| {
            entries.push((key.to_vec(), value.to_vec()));
            std::ops::ControlFlow::Continue(())
        },
    )?;
    for (key, value) in entries {
        let first = keys::seq_suffix(&key).unwrap_or(Seq::ZERO);
        let flagged = keys::is_conversation_list(&key);
        let mut items = decode_list(first, &value, flagged)?;
        let before = items.len();
        items.retain(|(s, _)| *s <= seq);
        let mut ws = WriteSet::default();
        if items.is_empty() {
            ws.removes.push((TreeId::Lists, key));
        } else if items.len() < before {
            ws.put(TreeId::Lists, key, encode_list(&items, flagged));
        }
        backend.apply(ws)?;
    }
    Ok(())
}

fn absent(seq: Seq, reason: &str) -> StoreError {
    StoreError::Corrupt {
        what: format!("seq {seq}"),
        reason: reason.into(),
    }
}

/// The stored event at `seq`.
fn event_at(log: &SledLog, seq: Seq) -> Result<Event> {
    let mut records = log.read_range(seq, seq, 1)?;
    records
        .pop()
        .map(|r| r.event)
        .ok_or_else(|| absent(seq, "no event to damage there"))
}

/// Cuts `seq` out of its chunk (the records before and after it stay, as chunks of the same
/// group) and out of every list.
fn remove_event(log: &SledLog, seq: Seq) -> Result<()> {
    let event = event_at(log, seq)?;
    let backend = log.backend();
    let (key, value) = backend
        .floor(TreeId::Chunks, &[], &keys::seq_key(seq))?
        .ok_or_else(|| absent(seq, "no chunk holds it"))?;
    let first = keys::seq_suffix(&key).unwrap_or(Seq::ZERO);
    let chunk = Chunk::parse(first, value.as_ref())?;
    let mut before = Vec::new();
    let mut after = Vec::new();
    for (at, record) in chunk.iter() {
        match at.cmp(&seq) {
            std::cmp::Ordering::Less => before.push(record?),
            std::cmp::Ordering::Greater => after.push(record?),
            std::cmp::Ordering::Equal => {}
        }
    }
    let mut ws = WriteSet::default();
    ws.removes.push((TreeId::Chunks, key));
    backend.apply(ws)?;
    let mut ws = WriteSet::default();
    if !before.is_empty() {
        ws.put_chunk(
            keys::seq_key(first).to_vec(),
            encode_chunk(chunk.group_first, &before),
        );
    }
    if !after.is_empty() {
        ws.put_chunk(
            keys::seq_key(seq.next()).to_vec(),
            encode_chunk(chunk.group_first, &after),
        );
    }
    backend.apply(ws)?;
    edit_lists(log, &event, seq, true, |items| {
        items.retain(|(s, _)| *s != seq)
    })?;
    edit_lists(log, &event, seq, false, |items| {
        items.retain(|(s, _)| *s != seq)
    })
}

/// Rewrites the list entries holding `seq` among the lists `event` calls for: the conversation
/// list (`conversation`) or the named lists (not `conversation`), with `edit` applied.
fn edit_lists(
    log: &SledLog,
    event: &Event,
    seq: Seq,
    conversation: bool,
    edit: impl Fn(&mut ListItems),
) -> Result<()> {
    let mut index = GroupIndex::default();
    index.add(seq, event);
    let backend = log.backend();
    for (prefix, (flagged, _)) in &index.lists {
        if *flagged != conversation {
            continue;
        }
        let Some((key, value)) =
            backend.floor(TreeId::Lists, prefix, &keys::list_key(prefix, seq))?
        else {
            continue;
        };
        let first = keys::seq_suffix(&key).unwrap_or(Seq::ZERO);
        let mut items = decode_list(first, value.as_ref(), *flagged)?;
        edit(&mut items);
        // Removes run after puts: remove the old key in a write of its own.
        let mut ws = WriteSet::default();
        ws.removes.push((TreeId::Lists, key));
        backend.apply(ws)?;
        if let Some(&(new_first, _)) = items.first() {
            let mut ws = WriteSet::default();
            ws.put(
                TreeId::Lists,
                keys::list_key(prefix, new_first),
                encode_list(&items, *flagged),
            );
            backend.apply(ws)?;
        }
    }
    Ok(())
}

/// Encodes a session state as this build stores it (for golden files).
pub fn encode_session_state(state: &AgentSessionState) -> Result<Vec<u8>> {
    codec::encode_state(state)
}

/// Decodes a stored session state of any known version (for golden files).
pub fn decode_session_state(
    bytes: &[u8],
    conversation: &str,
    agent: &str,
) -> Result<AgentSessionState> {
    codec::decode_state(bytes, conversation, agent)
}

/// The session-state format version this build writes.
pub const STATE_FORMAT_VERSION: u8 = codec::STATE_FORMAT_VERSION;

/// Decodes an event record through serde only, as every record was decoded before the hand
/// decoder of messages (`decode_event` takes it for messages): tests compare the two.
pub fn decode_event_with_serde(seq: Seq, bytes: &[u8]) -> Result<Event> {
    codec::decode_event_with_serde(seq, bytes)
}
