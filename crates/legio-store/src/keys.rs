//! Key layouts of the log's trees (layout v2). Every chunk and list key ends with a seq, big
//! endian, so keys sort in log order within their prefix. Strings are length-prefixed (one byte;
//! names and keys are at most 128 bytes), so no prefix is ambiguous.
//!
//! | tree       | key                                     | value                              |
//! |------------|-----------------------------------------|------------------------------------|
//! | `chunks`   | first seq                               | events of one chunk (`layout.rs`)  |
//! | `lists`    | conv · list name · first seq            | seqs of one list, some groups      |
//! | `sessions` | conv · agent                            | versioned session state            |
//! | `meta`     | `indexed_through`, `format`, `closed`   | seq; the layout version; see below |
//!
//! The conversation list (every event, each flagged whether it is a message) has the empty name;
//! a named list (`all`, a participant) holds the messages listed under that visibility key.
//! Layout v1's trees (`events`, `by_conv`, `visible`) are read only by the migration.

use legio_core::{AgentName, ConversationKey, Seq, VisibilityKey};

/// The meta key holding the index watermark.
pub(crate) const META_INDEXED_THROUGH: &[u8] = b"indexed_through";

/// The meta key holding the layout version (absent in layout v1).
pub(crate) const META_FORMAT: &[u8] = b"format";

/// The meta key a clean close leaves: `[layout version][last seq u64 LE]`, everything up to that
/// seq durable. Removed before the next group is applied (see `SledBackend::clear_closed`).
pub(crate) const META_CLOSED: &[u8] = b"closed";

pub(crate) fn seq_key(seq: Seq) -> [u8; 8] {
    seq.0.to_be_bytes()
}

/// The seq at the end of an index key, or of an events key.
pub(crate) fn seq_suffix(key: &[u8]) -> Option<Seq> {
    let start = key.len().checked_sub(8)?;
    let bytes: [u8; 8] = key[start..].try_into().ok()?;
    Some(Seq(u64::from_be_bytes(bytes)))
}

fn push_str(out: &mut Vec<u8>, s: &[u8]) {
    // Names and keys are at most 128 bytes: one length byte is enough.
    out.push(u8::try_from(s.len()).unwrap_or(u8::MAX));
    out.extend_from_slice(s);
}

pub(crate) fn conv_prefix(conv: &ConversationKey) -> Vec<u8> {
    let mut out = Vec::with_capacity(conv.as_str().len() + 9);
    push_str(&mut out, conv.as_str().as_bytes());
    out
}

/// The prefix of a list's entries: the conversation list for `None`, else the named list.
pub(crate) fn list_prefix(conv: &ConversationKey, name: Option<&VisibilityKey>) -> Vec<u8> {
    let mut out = conv_prefix(conv);
    push_str(&mut out, name.map_or(&[][..], |k| k.as_bytes()));
    out
}

/// The key of a list entry under `prefix` whose first item is `seq`.
pub(crate) fn list_key(prefix: &[u8], seq: Seq) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + 8);
    out.extend_from_slice(prefix);
    out.extend_from_slice(&seq_key(seq));
    out
}

/// Whether a list key (conv · name · seq) is a conversation list's, by its name's length.
pub(crate) fn is_conversation_list(key: &[u8]) -> bool {
    split_str(key).is_some_and(|(_, rest)| rest.first() == Some(&0))
}

pub(crate) fn session_key(conv: &ConversationKey, agent: &AgentName) -> Vec<u8> {
    let mut out = conv_prefix(conv);
    push_str(&mut out, agent.as_str().as_bytes());
    out
}

/// Splits a length-prefixed string off the front of `key`.
pub(crate) fn split_str(key: &[u8]) -> Option<(&[u8], &[u8])> {
    let (&len, rest) = key.split_first()?;
    let len = usize::from(len);
    (rest.len() >= len).then(|| rest.split_at(len))
}

/// The smallest key greater than every key starting with `prefix`. Prefixes here end in a length
/// byte or an ASCII character, never 0xff, so incrementing the last byte is exact.
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    if let Some(last) = end.last_mut() {
        *last = last.saturating_add(1);
    }
    end
}
