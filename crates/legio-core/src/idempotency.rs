//! A host's idempotency key: the same key posted twice to a conversation names one message.
//! The message's id is derived from the conversation and the key ([`MessageId::keyed`]), so a
//! retried post finds the message its first attempt stored, on any node, with nothing stored
//! beside the message itself.

use std::fmt;

use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::message::MessageId;
use crate::name::ConversationKey;

/// The longest key taken, in bytes.
pub const MAX_IDEMPOTENCY_KEY_BYTES: usize = 255;

/// A key a host sends with a post so that a retry of it is not stored twice: 1 to 255 visible
/// ASCII characters (a UUID is a good choice). Keys are per conversation: the same key in two
/// conversations names two messages.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

/// A key that does not have the required shape.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum IdempotencyKeyError {
    /// No characters.
    #[error("invalid idempotency key: it is empty; use 1 to {MAX_IDEMPOTENCY_KEY_BYTES} visible ASCII characters, a UUID for instance")]
    Empty,
    /// Over [`MAX_IDEMPOTENCY_KEY_BYTES`].
    #[error("invalid idempotency key: {len} bytes is too long (at most {MAX_IDEMPOTENCY_KEY_BYTES}); a UUID is 36")]
    TooLong {
        /// The key's length in bytes.
        len: usize,
    },
    /// A character outside `!` to `~` (a space, a control character, a non-ASCII letter).
    #[error("invalid idempotency key {value:?}: {found:?} is not a visible ASCII character (use `!` to `~`, no spaces)")]
    BadCharacter {
        /// The rejected value.
        value: String,
        /// The first character at fault.
        found: char,
    },
}

impl IdempotencyKey {
    /// Checks the key's shape.
    pub fn new(value: &str) -> Result<Self, IdempotencyKeyError> {
        if value.is_empty() {
            return Err(IdempotencyKeyError::Empty);
        }
        if value.len() > MAX_IDEMPOTENCY_KEY_BYTES {
            return Err(IdempotencyKeyError::TooLong { len: value.len() });
        }
        if let Some(found) = value.chars().find(|c| !('!'..='~').contains(c)) {
            return Err(IdempotencyKeyError::BadCharacter {
                value: value.to_owned(),
                found,
            });
        }
        Ok(Self(value.to_owned()))
    }

    /// The key as the host wrote it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdempotencyKey({:?})", self.0)
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl serde::Serialize for IdempotencyKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for IdempotencyKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = String::deserialize(d)?;
        Self::new(&value).map_err(serde::de::Error::custom)
    }
}

/// Tells the derived ids apart from every other use of SHA-256 over the same bytes.
const DOMAIN: &[u8] = b"legio idempotency key v1\0";

impl MessageId {
    /// The id of the message a host posts to `conversation` with `key`: a UUID v8 made of the
    /// first bytes of SHA-256 over the conversation and the key, the same on every node and
    /// version. Other messages' ids are UUID v7 (time-ordered); these are not.
    pub fn keyed(conversation: &ConversationKey, key: &IdempotencyKey) -> Self {
        let mut hash = Sha256::new();
        hash.update(DOMAIN);
        hash.update(conversation.as_str().as_bytes());
        hash.update([0]);
        hash.update(key.as_str().as_bytes());
        let digest = hash.finalize();
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&digest[..16]);
        Self(uuid::Builder::from_custom_bytes(bytes).into_uuid())
    }

    /// Whether the id was derived from an idempotency key ([`MessageId::keyed`]).
    pub fn is_keyed(&self) -> bool {
        self.0.get_version_num() == 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conversation(key: &str) -> ConversationKey {
        ConversationKey::new(key).unwrap()
    }

    #[test]
    fn keys_take_visible_ascii_only() {
        let cases: &[(&str, bool)] = &[
            ("a", true),
            ("0d9f1c2e-6b1a-4f7e-9a51-3c1b2d4e5f60", true),
            ("retry:42/#1~", true),
            ("", false),
            ("two words", false),
            ("tab\t", false),
            ("clé", false),
            ("line\n", false),
        ];
        for (value, ok) in cases {
            assert_eq!(IdempotencyKey::new(value).is_ok(), *ok, "{value:?}");
        }
        let longest = "k".repeat(MAX_IDEMPOTENCY_KEY_BYTES);
        assert!(IdempotencyKey::new(&longest).is_ok());
        let error = IdempotencyKey::new(&format!("{longest}k")).unwrap_err();
        assert_eq!(error, IdempotencyKeyError::TooLong { len: 256 });
        assert!(
            error.to_string().contains("256 bytes is too long"),
            "{error}"
        );
        assert_eq!(IdempotencyKey::new(""), Err(IdempotencyKeyError::Empty));
        let error = IdempotencyKey::new("two words").unwrap_err();
        assert!(matches!(
            error,
            IdempotencyKeyError::BadCharacter { found: ' ', .. }
        ));
    }

    #[test]
    fn a_keyed_id_depends_on_the_conversation_and_the_key_only() {
        let key = IdempotencyKey::new("k-1").unwrap();
        let id = MessageId::keyed(&conversation("c:1"), &key);
        assert_eq!(id, MessageId::keyed(&conversation("c:1"), &key));
        assert_ne!(id, MessageId::keyed(&conversation("c:2"), &key));
        let other = IdempotencyKey::new("k-2").unwrap();
        assert_ne!(id, MessageId::keyed(&conversation("c:1"), &other));
        // No ambiguity between where the conversation ends and the key starts.
        let a = MessageId::keyed(&conversation("c:1"), &IdempotencyKey::new("2k").unwrap());
        let b = MessageId::keyed(&conversation("c:12"), &IdempotencyKey::new("k").unwrap());
        assert_ne!(a, b);
        assert!(id.is_keyed());
        // Pinned: a retry reaching a node of another version must derive the same id.
        assert_eq!(id.to_string(), KEYED_ID_OF_C1_K1);
    }

    #[test]
    fn time_ordered_ids_are_not_keyed() {
        let at = crate::Timestamp::parse_rfc3339("2026-02-15T12:00:00Z").unwrap();
        assert!(!MessageId::from_parts(at, [7; 10]).is_keyed());
    }

    const KEYED_ID_OF_C1_K1: &str = "36d38680-7726-891f-9b05-b447511ce0b2";
}
