//! Test support: damage to a stored layout-v2 log, to check that reads and `verify` report it.
//! Reached only through `SledLog`'s `#[doc(hidden)]` `*_for_tests` methods.

use legio_core::{ConversationKey, Seq};

use crate::backend::{Backend, TreeId, WriteSet};
use crate::engine::Engine;
use crate::error::{Result, StoreError};
use crate::keys;
use crate::layout::{decode_list, encode_chunk, encode_list, Chunk};

fn absent(seq: Seq) -> StoreError {
    StoreError::BadRange {
        from: seq,
        to: seq,
        reason: "no stored event or list entry holds this seq".into(),
    }
}

/// Replaces the record of the event at `seq` inside its chunk with `bytes`.
pub(crate) fn overwrite_record<B: Backend>(
    engine: &Engine<B>,
    seq: Seq,
    bytes: &[u8],
) -> Result<()> {
    let backend = &engine.backend;
    let (key, value) = backend
        .floor(TreeId::Chunks, &[], &keys::seq_key(seq))?
        .ok_or_else(|| absent(seq))?;
    let first = keys::seq_suffix(&key).unwrap_or(Seq::ZERO);
    let chunk = Chunk::parse(first, value.as_ref())?;
    if !chunk.contains(seq) {
        return Err(absent(seq));
    }
    let mut records = Vec::with_capacity(chunk.len());
    for (at, record) in chunk.iter() {
        records.push(if at == seq { bytes } else { record? });
    }
    let mut ws = WriteSet::default();
    ws.put_chunk(key, encode_chunk(chunk.group_first, &records));
    backend.apply(ws)
}

/// Removes `seq` from the conversation list entry that holds it.
pub(crate) fn remove_from_conversation_list<B: Backend>(
    engine: &Engine<B>,
    conv: &ConversationKey,
    seq: Seq,
) -> Result<()> {
    let backend = &engine.backend;
    let prefix = keys::list_prefix(conv, None);
    let (key, value) = backend
        .floor(TreeId::Lists, &prefix, &keys::list_key(&prefix, seq))?
        .ok_or_else(|| absent(seq))?;
    let first = keys::seq_suffix(&key).unwrap_or(Seq::ZERO);
    let mut items = decode_list(first, value.as_ref(), true)?;
    let before = items.len();
    items.retain(|(s, _)| *s != seq);
    if items.len() == before {
        return Err(absent(seq));
    }
    let mut ws = WriteSet::default();
    ws.removes.push((TreeId::Lists, key));
    if let Some(&(new_first, _)) = items.first() {
        ws.put(
            TreeId::Lists,
            keys::list_key(&prefix, new_first),
            encode_list(&items, true),
        );
    }
    // Removes run after puts: remove the old key first when the key changes.
    if items.first().map(|(s, _)| *s) == Some(first) {
        ws.removes.clear();
    }
    backend.apply(ws)
}
