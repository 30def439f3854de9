//! A hand decoder for the payload of a version-1 `MessagePosted` record, the event every read of
//! a conversation's messages decodes (`visible_window`, a turn's delta, scans).
//!
//! It reads the same bytes as the serde decoder (`codec.rs`: bincode 2.0.1, `standard()`:
//! little endian, varint integers) and builds each `String` once from the stored bytes, where
//! bincode through serde zero-fills a buffer, copies into it and walks serde's visitors per
//! field. It accepts only what the serde decoder accepts, with the same value: the same varint
//! forms, bool and option bytes, 16-byte UUIDs, UTF-8 check and name rules (`AgentName::new`,
//! `ConversationKey::new`). Anything else (another event kind, bytes it does not accept) answers
//! `None` and the caller decodes with serde, which also produces the error for bad bytes, so
//! errors read exactly as before. `tests/it/message_codec.rs` compares both decoders on every
//! golden sample, real transcripts, generated events of every kind and damaged records.

use legio_core::{
    AgentName, Audience, ConversationKey, Event, Message, MessageId, Part, Participant, Timestamp,
};
use uuid::Uuid;

/// bincode's varint markers: a byte up to 250 is the value; these announce a wider value.
const U16_BYTE: u8 = 251;
const U32_BYTE: u8 = 252;
const U64_BYTE: u8 = 253;

/// The variant index of `Event::MessagePosted`.
const MESSAGE_POSTED: u32 = 0;

/// Decodes `payload` (a version-1 record without its version byte) if it is a message the hand
/// decoder accepts; `None` for every other payload (the serde decoder then decides).
pub(crate) fn decode_message_posted(payload: &[u8]) -> Option<Event> {
    let mut r = Reader(payload);
    if r.u32()? != MESSAGE_POSTED {
        return None;
    }
    let message = r.message()?;
    r.0.is_empty().then_some(Event::MessagePosted(message))
}

/// The unread rest of a payload.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    /// bincode's varint `u64`: one byte up to 250, else a marker and 2, 4 or 8 bytes (LE).
    fn u64(&mut self) -> Option<u64> {
        Some(match self.byte()? {
            b @ 0..=250 => u64::from(b),
            U16_BYTE => u64::from(u16::from_le_bytes(self.take(2)?.try_into().ok()?)),
            U32_BYTE => u64::from(u32::from_le_bytes(self.take(4)?.try_into().ok()?)),
            U64_BYTE => u64::from_le_bytes(self.take(8)?.try_into().ok()?),
            _ => return None,
        })
    }

    /// bincode's varint `u32` (enum variant indexes): as `u64`, without the 8-byte form.
    fn u32(&mut self) -> Option<u32> {
        match self.0.first()? {
            &U64_BYTE => None,
            _ => u32::try_from(self.u64()?).ok(),
        }
    }

    /// bincode's zigzag varint `i64`.
    fn i64(&mut self) -> Option<i64> {
        let n = self.u64()?;
        let half = (n >> 1) as i64;
        Some(if n & 1 == 0 { half } else { !half })
    }

    /// A length-prefixed byte string, borrowed.
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.u64()?).ok()?;
        self.take(len)
    }

    fn str(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.bytes()?).ok()
    }

    fn string(&mut self) -> Option<String> {
        self.str().map(str::to_owned)
    }

    fn bool(&mut self) -> Option<bool> {
        match self.byte()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }

    /// A collection's length, as a capacity no larger than the bytes left could hold (each
    /// item takes at least one byte), so a damaged length allocates nothing large.
    fn len(&mut self) -> Option<(usize, usize)> {
        let len = usize::try_from(self.u64()?).ok()?;
        Some((len, len.min(self.0.len())))
    }

    fn message_id(&mut self) -> Option<MessageId> {
        let bytes: [u8; 16] = self.bytes()?.try_into().ok()?;
        Some(MessageId(Uuid::from_bytes(bytes)))
    }

    fn agent(&mut self) -> Option<AgentName> {
        AgentName::new(self.str()?).ok()
    }

    fn participant(&mut self) -> Option<Participant> {
        match self.u32()? {
            0 => Some(Participant::User),
            1 => self.agent().map(Participant::Agent),
            _ => None,
        }
    }

    fn audience(&mut self) -> Option<Audience> {
        match self.u32()? {
            0 => Some(Audience::All),
            1 => {
                let (len, capacity) = self.len()?;
                let mut list = Vec::with_capacity(capacity);
                for _ in 0..len {
                    list.push(self.participant()?);
                }
                Some(Audience::Only(list))
            }
            _ => None,
        }
    }

    fn part(&mut self) -> Option<Part> {
        Some(match self.u32()? {
            0 => Part::Text {
                text: self.string()?,
            },
            1 => Part::ToolCall {
                id: self.string()?,
                name: self.string()?,
                arguments: self.string()?,
            },
            2 => Part::ToolResult {
                call_id: self.string()?,
                content: self.string()?,
                is_error: self.bool()?,
            },
            _ => return None,
        })
    }

    fn message(&mut self) -> Option<Message> {
        let id = self.message_id()?;
        let conversation = ConversationKey::new(self.str()?).ok()?;
        let sender = self.participant()?;
        let audience = self.audience()?;
        let (len, capacity) = self.len()?;
        let mut parts = Vec::with_capacity(capacity);
        for _ in 0..len {
            parts.push(self.part()?);
        }
        let reply_to = match self.byte()? {
            0 => None,
            1 => Some(self.message_id()?),
            _ => return None,
        };
        let at = Timestamp::from_unix_micros(self.i64()?);
        Some(Message {
            id,
            conversation,
            sender,
            audience,
            parts,
            reply_to,
            at,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each varint form bincode writes or accepts reads back as bincode reads it.
    #[test]
    fn varints_read_as_bincode_reads_them() {
        let config = bincode::config::standard();
        for value in [
            0u64,
            1,
            250,
            251,
            255,
            65_535,
            65_536,
            u64::from(u32::MAX),
            u64::from(u32::MAX) + 1,
            u64::MAX,
        ] {
            let bytes = bincode::encode_to_vec(value, config).unwrap();
            assert_eq!(Reader(&bytes).u64(), Some(value), "{value}");
            let as_u32: Result<(u32, usize), _> = bincode::decode_from_slice(&bytes, config);
            assert_eq!(Reader(&bytes).u32(), as_u32.ok().map(|(v, _)| v), "{value}");
        }
        for value in [
            0i64,
            1,
            -1,
            63,
            -64,
            i64::MAX,
            i64::MIN,
            1_771_156_800_000_000,
        ] {
            let bytes = bincode::encode_to_vec(value, config).unwrap();
            assert_eq!(Reader(&bytes).i64(), Some(value), "{value}");
        }
        // A wide form of a small value (bincode accepts it), and the reserved markers.
        assert_eq!(Reader(&[U16_BYTE, 5, 0]).u64(), Some(5));
        assert_eq!(Reader(&[254, 0]).u64(), None);
        assert_eq!(Reader(&[255]).u64(), None);
    }
}
