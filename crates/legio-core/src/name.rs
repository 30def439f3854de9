//! Validated names: agent names, conversation keys and the participants of a conversation.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::NameError;

/// The reserved conversation key every memory event belongs to. Hosts cannot post to it.
pub const MEMORY_CONVERSATION: &str = "legio:memory";
/// The prefix of conversation keys legio reserves for itself.
pub const RESERVED_CONVERSATION_PREFIX: &str = "legio:";

/// The longest agent name, in bytes (all valid names are ASCII).
pub const MAX_AGENT_NAME_LEN: usize = 32;
/// The longest conversation key, in bytes (all valid keys are ASCII).
pub const MAX_CONVERSATION_KEY_LEN: usize = 128;
/// Names no agent may take: `user` is the human, `all` is the broadcast audience.
pub const RESERVED_NAMES: [&str; 2] = ["user", "all"];

/// An agent's name: `[a-z][a-z0-9_-]{0,31}`, never `user` or `all`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct AgentName(String);

impl AgentName {
    /// Validates `name` as an agent name.
    pub fn new(name: impl Into<String>) -> Result<Self, NameError> {
        let name = name.into();
        let bytes = name.as_bytes();
        let shape_ok = !bytes.is_empty()
            && bytes.len() <= MAX_AGENT_NAME_LEN
            && bytes[0].is_ascii_lowercase()
            && bytes[1..]
                .iter()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'-');
        if !shape_ok {
            return Err(NameError::InvalidAgentName { value: name });
        }
        if RESERVED_NAMES.contains(&name.as_str()) {
            return Err(NameError::ReservedAgentName { value: name });
        }
        Ok(Self(name))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for AgentName {
    type Error = NameError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl From<AgentName> for String {
    fn from(value: AgentName) -> Self {
        value.0
    }
}

impl fmt::Display for AgentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for AgentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AgentName({})", self.0)
    }
}

impl std::str::FromStr for AgentName {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

/// A conversation key such as `telegram:123456` or `cli:local`: 1 to 128 characters of
/// `[A-Za-z0-9:._@+-]`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ConversationKey(String);

impl ConversationKey {
    /// Validates `key` as a conversation key.
    pub fn new(key: impl Into<String>) -> Result<Self, NameError> {
        let key = key.into();
        let ok = !key.is_empty()
            && key.len() <= MAX_CONVERSATION_KEY_LEN
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b":._@+-".contains(&b));
        if ok {
            Ok(Self(key))
        } else {
            Err(NameError::InvalidConversationKey { value: key })
        }
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The reserved key of the shared memory stores, `legio:memory` (see `MemoryState`). It
    /// is a valid key, so the log indexes memory events like any conversation's.
    pub fn memory() -> &'static ConversationKey {
        static MEMORY: std::sync::OnceLock<ConversationKey> = std::sync::OnceLock::new();
        MEMORY.get_or_init(|| ConversationKey(MEMORY_CONVERSATION.to_owned()))
    }

    /// Whether legio reserves this key for itself (it starts with `legio:`): hosts cannot post to
    /// it, though the log accepts it.
    pub fn is_reserved(&self) -> bool {
        self.0.starts_with(RESERVED_CONVERSATION_PREFIX)
    }
}

impl TryFrom<String> for ConversationKey {
    type Error = NameError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl From<ConversationKey> for String {
    fn from(value: ConversationKey) -> Self {
        value.0
    }
}

impl fmt::Display for ConversationKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ConversationKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ConversationKey({})", self.0)
    }
}

impl std::str::FromStr for ConversationKey {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

/// Someone who takes part in a conversation: the human user or a named agent.
///
/// Binary formats encode it as an enum (the stored v1 format); human-readable formats (JSON) as
/// a plain name: `"user"` or the agent's name.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum Participant {
    /// The human on the other side of the host service.
    User,
    /// An agent (orchestrator or specialist).
    Agent(AgentName),
}

/// The stored (binary) shape of a participant; keep in sync with the v1 golden file.
#[derive(Serialize, Deserialize)]
enum StoredParticipant {
    User,
    Agent(AgentName),
}

impl Serialize for Participant {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            serializer.serialize_str(self.as_str())
        } else {
            match self {
                Self::User => StoredParticipant::User,
                Self::Agent(name) => StoredParticipant::Agent(name.clone()),
            }
            .serialize(serializer)
        }
    }
}

impl<'de> Deserialize<'de> for Participant {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            let text = String::deserialize(deserializer)?;
            Participant::parse(&text).map_err(serde::de::Error::custom)
        } else {
            Ok(match StoredParticipant::deserialize(deserializer)? {
                StoredParticipant::User => Self::User,
                StoredParticipant::Agent(name) => Self::Agent(name),
            })
        }
    }
}

impl Participant {
    /// Parses `user` or an agent name.
    pub fn parse(value: &str) -> Result<Self, NameError> {
        if value == "user" {
            Ok(Self::User)
        } else {
            AgentName::new(value).map(Self::Agent)
        }
    }

    /// The participant's name as text (`user` for the human).
    pub fn as_str(&self) -> &str {
        match self {
            Self::User => "user",
            Self::Agent(name) => name.as_str(),
        }
    }

    /// The agent's name, if this is an agent.
    pub fn agent(&self) -> Option<&AgentName> {
        match self {
            Self::User => None,
            Self::Agent(name) => Some(name),
        }
    }
}

impl fmt::Display for Participant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<AgentName> for Participant {
    fn from(value: AgentName) -> Self {
        Self::Agent(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_agent(input: &str, ok: bool) {
        assert_eq!(AgentName::new(input).is_ok(), ok, "agent name {input:?}");
    }

    #[test]
    fn agent_names() {
        for ok in [
            "a",
            "vorenus",
            "pullo-2",
            "x_y",
            "a234567890123456789012345678901",
        ] {
            check_agent(ok, true);
        }
        let max = format!("a{}", "b".repeat(31));
        check_agent(&max, true);
        let too_long = format!("a{}", "b".repeat(32));
        check_agent(&too_long, false);
        for bad in [
            "", "User", "1abc", "-a", "a b", "ä", "a.b", "a@b", "user", "all",
        ] {
            check_agent(bad, false);
        }
    }

    #[test]
    fn reserved_names_get_their_own_error() {
        let err = AgentName::new("user").unwrap_err();
        assert!(matches!(err, NameError::ReservedAgentName { .. }));
        assert!(err.to_string().contains("\"user\""), "{err}");
    }

    #[test]
    fn errors_quote_the_bad_value() {
        let err = AgentName::new("Bad Name").unwrap_err();
        assert!(err.to_string().contains("\"Bad Name\""), "{err}");
        let err = ConversationKey::new("sp ace").unwrap_err();
        assert!(err.to_string().contains("\"sp ace\""), "{err}");
    }

    #[test]
    fn conversation_keys() {
        for ok in [
            "telegram:123456",
            "cli:local",
            "a",
            "x.y_z@host+1-2",
            &"k".repeat(128),
        ] {
            assert!(ConversationKey::new(ok).is_ok(), "{ok:?}");
        }
        for bad in ["", "a b", "tab\t", "slash/no", "é", &"k".repeat(129)] {
            assert!(ConversationKey::new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn participants() {
        assert_eq!(Participant::parse("user").unwrap(), Participant::User);
        assert_eq!(Participant::parse("pullo").unwrap().as_str(), "pullo");
        assert!(Participant::parse("all").is_err());
    }
}
