//! Test support, not an API: damage a live log's stored trees on purpose, one function per kind
//! of damage, so that tests can show `verify` (and recovery) finding exactly that damage. Every
//! test that damages a store goes through [`damage`]: a new storage layout ports this one file.
//! It also exposes the session-state codec for the golden files. Never use it outside tests.

use legio_core::{AgentName, AgentSessionState, ConversationKey, Seq};

use crate::backend::{Backend, TreeId, WriteSet};
use crate::codec;
use crate::error::{Result, StoreError};
use crate::keys;
use crate::log::EventLog;
use crate::sled_log::SledLog;
use crate::verify::expected_keys;

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
    /// Removes the `by_conv` entry of the event at `seq`.
    RemoveConversationIndexEntry(Seq),
    /// Adds a `by_conv` entry filing `seq` under `conversation`, which its event does not name.
    StrayConversationIndexEntry {
        /// The conversation the entry wrongly names.
        conversation: ConversationKey,
        /// The seq it names.
        seq: Seq,
    },
    /// Removes the visibility index entries of the event at `seq`.
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
    /// Sets the index watermark to `seq`, as if the indexes past it were never written.
    RewindWatermark(Seq),
}

/// Applies `damage` to the log's trees directly (no seq, no index, no check) and syncs it.
pub fn damage(log: &SledLog, damage: Damage) -> Result<()> {
    let backend = log.backend();
    let mut ws = WriteSet::default();
    match damage {
        Damage::RemoveEvent(seq) => {
            let (conv_key, visible_keys) = index_keys_of(log, seq)?;
            ws.removes
                .push((TreeId::Events, keys::seq_key(seq).to_vec()));
            ws.removes.push((TreeId::ByConv, conv_key));
            ws.removes
                .extend(visible_keys.into_iter().map(|k| (TreeId::Visible, k)));
        }
        Damage::OverwriteRecord { seq, bytes } => {
            ws.put(TreeId::Events, keys::seq_key(seq).to_vec(), bytes);
        }
        Damage::RemoveConversationIndexEntry(seq) => {
            ws.removes
                .push((TreeId::ByConv, index_keys_of(log, seq)?.0));
        }
        Damage::StrayConversationIndexEntry { conversation, seq } => {
            ws.put(
                TreeId::ByConv,
                keys::conv_key(&conversation, seq),
                Vec::new(),
            );
        }
        Damage::RemoveVisibleIndexEntries(seq) => {
            let visible_keys = index_keys_of(log, seq)?.1;
            ws.removes
                .extend(visible_keys.into_iter().map(|k| (TreeId::Visible, k)));
        }
        Damage::ReplaceSessionState {
            conversation,
            agent,
            state,
        } => {
            ws.put(
                TreeId::Sessions,
                keys::session_key(&conversation, &agent),
                codec::encode_state(&state)?,
            );
        }
        Damage::RewindWatermark(seq) => {
            ws.put(
                TreeId::Meta,
                keys::META_INDEXED_THROUGH.to_vec(),
                keys::seq_key(seq).to_vec(),
            );
        }
    }
    backend.apply(ws)?;
    log.flush()
}

/// The index keys the stored event at `seq` calls for.
fn index_keys_of(log: &SledLog, seq: Seq) -> Result<(Vec<u8>, Vec<Vec<u8>>)> {
    let bytes = log
        .backend()
        .get(TreeId::Events, &keys::seq_key(seq))?
        .ok_or_else(|| StoreError::Corrupt {
            what: format!("seq {seq}"),
            reason: "no event to damage there".into(),
        })?;
    Ok(expected_keys(seq, &codec::decode_event(seq, &bytes)?))
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
