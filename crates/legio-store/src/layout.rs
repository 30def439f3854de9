//! Layout v2's stored values: event **chunks** (many events in one sled value, with an offset
//! table so one event is read without decoding the others) and index **lists** (the seqs of one
//! conversation's list within the commit groups between two writes of the engine's list
//! overlay, or within one group in logs of the previous build; delta-encoded).
//!
//! Chunk value: `[2][group first seq u64 LE][count u32 LE][count × end offset u32 LE][records]`;
//! the chunk's key is the seq of its first event, record `i` is the event at key + `i`, and every
//! record is a versioned event record (`codec.rs`, version 1).
//!
//! List value: `[2][count varint][count × varint]`; items are seq deltas from the previous item
//! (the first from the key's seq, so it is 0). In a conversation list, every item is
//! `delta << 1 | is_message`.

use legio_core::Seq;

use crate::error::{Result, StoreError};

/// The layout version written by this build (chunks, lists, and the `meta/format` marker).
pub const LAYOUT_VERSION: u8 = 2;

/// Records are packed into one chunk up to this many bytes (a larger record gets a chunk of its
/// own). sled writes values over a quarter of a segment to separate blob files, which it never
/// fsyncs; chunks stay well below that, and so does a leaf of 17 chunks in the 4 MiB segments of
/// a new log (`sled_backend.rs`).
pub(crate) const CHUNK_BYTES: usize = 48 * 1024;

const CHUNK_HEADER: usize = 1 + 8 + 4;

fn corrupt(what: impl Into<String>, reason: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        what: what.into(),
        reason: reason.into(),
    }
}

/// Encodes a chunk of `records` belonging to the commit group that starts at `group_first`.
pub(crate) fn encode_chunk(group_first: Seq, records: &[&[u8]]) -> Vec<u8> {
    let body: usize = records.iter().map(|r| r.len()).sum();
    let mut out = Vec::with_capacity(CHUNK_HEADER + 4 * records.len() + body);
    out.push(LAYOUT_VERSION);
    out.extend_from_slice(&group_first.0.to_le_bytes());
    out.extend_from_slice(&(records.len() as u32).to_le_bytes());
    let mut end = 0u32;
    for record in records {
        end += record.len() as u32;
        out.extend_from_slice(&end.to_le_bytes());
    }
    for record in records {
        out.extend_from_slice(record);
    }
    out
}

/// A stored chunk, parsed in place: its header is checked, its records are sliced on demand.
#[derive(Debug)]
pub(crate) struct Chunk<'a> {
    pub(crate) first: Seq,
    pub(crate) group_first: Seq,
    ends: &'a [u8],
    records: &'a [u8],
}

impl<'a> Chunk<'a> {
    /// Parses the chunk stored under the key `first`.
    pub(crate) fn parse(first: Seq, bytes: &'a [u8]) -> Result<Self> {
        let what = || format!("chunk at seq {first}");
        let Some((&version, rest)) = bytes.split_first() else {
            return Err(corrupt(what(), "empty chunk"));
        };
        if version != LAYOUT_VERSION {
            return Err(StoreError::UnknownFormatVersion {
                seq: first,
                version,
                known: LAYOUT_VERSION,
            });
        }
        if rest.len() < 12 {
            return Err(corrupt(what(), "truncated chunk header"));
        }
        let group_first = Seq(u64::from_le_bytes(rest[..8].try_into().unwrap_or([0; 8])));
        let count = u32::from_le_bytes(rest[8..12].try_into().unwrap_or([0; 4])) as usize;
        let rest = &rest[12..];
        let table = count
            .checked_mul(4)
            .filter(|t| *t <= rest.len() && count > 0)
            .ok_or_else(|| corrupt(what(), format!("bad record count {count}")))?;
        let (ends, records) = rest.split_at(table);
        let chunk = Self {
            first,
            group_first,
            ends,
            records,
        };
        // Found by fuzzing (issue 16): a key naming a seq near the end of the seq space made
        // `end_seq` and `iter` overflow.
        if first.0.checked_add(count as u64).is_none() {
            return Err(corrupt(what(), "its records run past the last seq"));
        }
        if chunk.end(count - 1) != records.len() || group_first > first {
            return Err(corrupt(
                what(),
                "the offset table disagrees with the records",
            ));
        }
        Ok(chunk)
    }

    fn end(&self, i: usize) -> usize {
        let bytes = &self.ends[4 * i..4 * i + 4];
        u32::from_le_bytes(bytes.try_into().unwrap_or([0; 4])) as usize
    }

    /// Events in the chunk.
    pub(crate) fn len(&self) -> usize {
        self.ends.len() / 4
    }

    /// The seq after the chunk's last event.
    pub(crate) fn end_seq(&self) -> Seq {
        Seq(self.first.0 + self.len() as u64)
    }

    pub(crate) fn contains(&self, seq: Seq) -> bool {
        seq >= self.first && seq < self.end_seq()
    }

    /// The stored record of the event at `seq` (which the chunk must contain).
    pub(crate) fn record(&self, seq: Seq) -> Result<&'a [u8]> {
        let i = (seq.0 - self.first.0) as usize;
        let start = if i == 0 { 0 } else { self.end(i - 1) };
        let end = self.end(i);
        self.records.get(start..end).ok_or_else(|| {
            corrupt(
                format!("at seq {seq}"),
                "the chunk's offset table is out of order",
            )
        })
    }

    /// Every `(seq, record)` of the chunk, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Seq, Result<&'a [u8]>)> + '_ {
        (0..self.len() as u64).map(move |i| {
            let seq = Seq(self.first.0 + i);
            (seq, self.record(seq))
        })
    }
}

fn push_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn read_varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = bytes.split_first()?;
        *bytes = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// One index list entry: ascending seqs, each with a flag (`is_message` in conversation lists,
/// always false in named lists).
pub(crate) type ListItems = Vec<(Seq, bool)>;

/// Encodes a list entry whose key names `items[0]`'s seq.
pub(crate) fn encode_list(items: &[(Seq, bool)], flagged: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + 2 * items.len());
    out.push(LAYOUT_VERSION);
    push_varint(&mut out, items.len() as u64);
    let mut prev = items.first().map_or(0, |(s, _)| s.0);
    for &(seq, flag) in items {
        let delta = seq.0 - prev;
        prev = seq.0;
        push_varint(
            &mut out,
            if flagged {
                delta << 1 | u64::from(flag)
            } else {
                delta
            },
        );
    }
    out
}

/// Decodes a list entry stored under a key naming `first`.
pub(crate) fn decode_list(first: Seq, bytes: &[u8], flagged: bool) -> Result<ListItems> {
    let mut out = Vec::new();
    decode_list_into(first, bytes, flagged, &mut out)?;
    Ok(out)
}

/// [`decode_list`] into `out` (cleared first), so that a read of many entries reuses one buffer.
pub(crate) fn decode_list_into(
    first: Seq,
    bytes: &[u8],
    flagged: bool,
    out: &mut ListItems,
) -> Result<()> {
    out.clear();
    let what = || format!("index list entry at seq {first}");
    let Some((&version, mut rest)) = bytes.split_first() else {
        return Err(corrupt(what(), "empty list entry"));
    };
    if version != LAYOUT_VERSION {
        return Err(StoreError::UnknownFormatVersion {
            seq: first,
            version,
            known: LAYOUT_VERSION,
        });
    }
    let count = read_varint(&mut rest).ok_or_else(|| corrupt(what(), "truncated count"))?;
    out.reserve(count.min(1 << 16) as usize);
    let mut seq = first.0;
    for _ in 0..count {
        let item = read_varint(&mut rest).ok_or_else(|| corrupt(what(), "truncated item"))?;
        let (delta, flag) = if flagged {
            (item >> 1, item & 1 == 1)
        } else {
            (item, false)
        };
        seq = seq
            .checked_add(delta)
            .ok_or_else(|| corrupt(what(), "seq overflow"))?;
        out.push((Seq(seq), flag));
    }
    if !rest.is_empty() || out.first().is_some_and(|(s, _)| *s != first) {
        return Err(corrupt(what(), "the entry disagrees with its key"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_round_trip_and_bad_chunks_are_errors() {
        let records: Vec<&[u8]> = vec![b"one", b"", b"three"];
        let bytes = encode_chunk(Seq(5), &records);
        let chunk = Chunk::parse(Seq(7), &bytes).unwrap();
        assert_eq!(
            (chunk.len(), chunk.group_first, chunk.end_seq()),
            (3, Seq(5), Seq(10))
        );
        assert_eq!(chunk.record(Seq(9)).unwrap(), b"three");
        assert_eq!(chunk.record(Seq(8)).unwrap(), b"");
        for bad in [&[][..], &[2, 0, 0][..], &bytes[..bytes.len() - 1]] {
            assert!(Chunk::parse(Seq(7), bad).is_err());
        }
        let mut newer = bytes.clone();
        newer[0] = 9;
        assert!(matches!(
            Chunk::parse(Seq(7), &newer),
            Err(StoreError::UnknownFormatVersion { version: 9, .. })
        ));
    }

    /// The fuzzer's case (issue 16): a valid chunk under a key naming a seq whose records would
    /// run past `u64::MAX` is an error, not an overflow panic.
    #[test]
    fn a_chunk_past_the_last_seq_is_corrupt() {
        let records: Vec<&[u8]> = vec![b"one", b"", b"three"];
        let bytes = encode_chunk(Seq(3), &records);
        for first in [u64::MAX, u64::MAX - 1, u64::MAX - 2] {
            assert!(matches!(
                Chunk::parse(Seq(first), &bytes),
                Err(StoreError::Corrupt { .. })
            ));
        }
        let last = Chunk::parse(Seq(u64::MAX - 3), &bytes).unwrap();
        assert_eq!(last.end_seq(), Seq(u64::MAX));
    }

    #[test]
    fn lists_round_trip() {
        let items = vec![(Seq(300), true), (Seq(301), false), (Seq(100_000), true)];
        for flagged in [true, false] {
            let bytes = encode_list(&items, flagged);
            let back = decode_list(Seq(300), &bytes, flagged).unwrap();
            let want: ListItems = items.iter().map(|&(s, f)| (s, f && flagged)).collect();
            assert_eq!(back, want);
            assert!(decode_list(Seq(300), &bytes[..bytes.len() - 1], flagged).is_err());
        }
    }

    /// Cases per property: `LEGIO_FUZZ_CASES`, or a small default for CI.
    fn fuzz_config() -> proptest::prelude::ProptestConfig {
        let cases = std::env::var("LEGIO_FUZZ_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(256);
        proptest::prelude::ProptestConfig {
            cases,
            failure_persistence: None,
            ..Default::default()
        }
    }

    /// A real chunk or list with a few bytes changed, or arbitrary bytes.
    fn damaged(real: Vec<u8>) -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..96),
            prop::collection::vec((any::<usize>(), any::<u8>()), 1..6).prop_map(move |edits| {
                let mut bytes = real.clone();
                for (at, byte) in edits {
                    let at = at % bytes.len();
                    bytes[at] = byte;
                }
                bytes
            }),
        ]
    }

    proptest::proptest! {
        #![proptest_config(fuzz_config())]

        /// Issue 16: a chunk's bytes (and the seq its key names) come from disk; parsing and
        /// reading every record of whatever parses answers values or errors, never panics.
        #[test]
        fn any_chunk_parses_or_fails_cleanly(
            first in proptest::prop_oneof![proptest::prelude::any::<u64>(), 0..16u64, (u64::MAX - 16)..=u64::MAX],
            bytes in damaged(encode_chunk(Seq(3), &[b"one", b"", b"three"])),
        ) {
            if let Ok(chunk) = Chunk::parse(Seq(first), &bytes) {
                for (_, record) in chunk.iter() {
                    let _ = record;
                }
                let _ = (chunk.len(), chunk.end_seq(), chunk.contains(Seq(first)));
            }
        }

        #[test]
        fn any_list_decodes_or_fails_cleanly(
            first in proptest::prop_oneof![proptest::prelude::any::<u64>(), (u64::MAX - 16)..=u64::MAX],
            flagged in proptest::prelude::any::<bool>(),
            bytes in damaged(encode_list(&[(Seq(5), true), (Seq(9), false)], true)),
        ) {
            let _ = decode_list(Seq(first), &bytes, flagged);
        }
    }
}
