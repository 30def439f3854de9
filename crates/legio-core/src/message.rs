//! Messages: who said what to whom, as text and tool-call parts.

use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::name::{AgentName, ConversationKey, Participant};
use crate::timestamp::Timestamp;

/// A message's id: a UUID v7, so ids sort by creation time.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct MessageId(pub Uuid);

impl MessageId {
    /// Builds a UUID v7 from a timestamp and 10 random bytes, both supplied by the caller (the core
    /// reads neither a clock nor a random source).
    pub fn from_parts(at: Timestamp, random: [u8; 10]) -> Self {
        let millis = u64::try_from(at.unix_millis()).unwrap_or(0);
        Self(uuid::Builder::from_unix_timestamp_millis(millis, &random).into_uuid())
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Debug for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MessageId({})", self.0)
    }
}

/// Who a message is addressed to.
///
/// Binary formats encode it as an enum (the stored v1 format); human-readable formats (JSON) as
/// `"all"` or a list of names.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Audience {
    /// Everyone in the conversation (`@all`).
    All,
    /// The named participants, sorted and without duplicates.
    Only(Vec<Participant>),
}

/// The stored (binary) shape of an audience; keep in sync with the v1 golden file.
#[derive(Serialize, Deserialize)]
enum StoredAudience {
    All,
    Only(Vec<Participant>),
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum ReadableAudience {
    Word(String),
    Names(Vec<Participant>),
}

impl Serialize for Audience {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            match self {
                Self::All => serializer.serialize_str("all"),
                Self::Only(list) => list.serialize(serializer),
            }
        } else {
            match self {
                Self::All => StoredAudience::All,
                Self::Only(list) => StoredAudience::Only(list.clone()),
            }
            .serialize(serializer)
        }
    }
}

impl<'de> Deserialize<'de> for Audience {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            match ReadableAudience::deserialize(deserializer)? {
                ReadableAudience::Word(w) if w == "all" => Ok(Self::All),
                ReadableAudience::Word(w) => Err(serde::de::Error::custom(format!(
                    "audience {w:?} is not \"all\" or a list of names"
                ))),
                ReadableAudience::Names(list) => Ok(Self::only(list)),
            }
        } else {
            Ok(match StoredAudience::deserialize(deserializer)? {
                StoredAudience::All => Self::All,
                StoredAudience::Only(list) => Self::Only(list),
            })
        }
    }
}

impl Audience {
    /// An audience of the given participants, sorted and deduplicated.
    pub fn only(participants: impl IntoIterator<Item = Participant>) -> Self {
        let mut list: Vec<Participant> = participants.into_iter().collect();
        list.sort();
        list.dedup();
        Self::Only(list)
    }

    /// An audience of one agent.
    pub fn agent(name: AgentName) -> Self {
        Self::Only(vec![Participant::Agent(name)])
    }

    /// The audience of a reply to the user.
    pub fn user() -> Self {
        Self::Only(vec![Participant::User])
    }

    /// Whether `participant` is named in the audience (false for `All`).
    pub fn names(&self, participant: &Participant) -> bool {
        match self {
            Self::All => false,
            Self::Only(list) => list.contains(participant),
        }
    }
}

impl fmt::Display for Audience {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::All => f.write_str("all"),
            Self::Only(list) => {
                for (i, p) in list.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    f.write_str(p.as_str())?;
                }
                Ok(())
            }
        }
    }
}

/// One part of a message's content.
///
/// Binary formats encode it as an enum (the stored v1 format); human-readable formats (JSON) as
/// an object with a `type` of `text`, `tool_call` or `tool_result`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Part {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// A tool call made by a model.
    ToolCall {
        /// The provider's call id, which links the result to this call.
        id: String,
        /// The tool's name.
        name: String,
        /// The arguments as JSON text, kept exactly as the model wrote them.
        arguments: String,
    },
    /// The result of a tool call.
    ToolResult {
        /// The id of the call this answers.
        call_id: String,
        /// The result as text.
        content: String,
        /// Whether the tool failed.
        is_error: bool,
    },
}

/// The stored (binary) shape of a part; keep in sync with the v1 golden file.
#[derive(Serialize, Deserialize)]
enum StoredPart {
    Text {
        text: String,
    },
    ToolCall {
        id: String,
        name: String,
        arguments: String,
    },
    ToolResult {
        call_id: String,
        content: String,
        is_error: bool,
    },
}

/// The readable (JSON) shape of a part.
#[derive(Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum ReadablePart {
    Text {
        text: String,
    },
    ToolCall {
        id: String,
        name: String,
        arguments: String,
    },
    ToolResult {
        call_id: String,
        content: String,
        is_error: bool,
    },
}

macro_rules! convert_part {
    ($from:expr, $src:ident => $dst:ident) => {
        match $from {
            $src::Text { text } => $dst::Text { text },
            $src::ToolCall {
                id,
                name,
                arguments,
            } => $dst::ToolCall {
                id,
                name,
                arguments,
            },
            $src::ToolResult {
                call_id,
                content,
                is_error,
            } => $dst::ToolResult {
                call_id,
                content,
                is_error,
            },
        }
    };
}

/// A part's fields, borrowed: serialized as [`StoredPart`] or [`ReadablePart`] (the same serde
/// shapes, field for field) without copying its strings.
#[derive(Serialize)]
enum StoredPartRef<'a> {
    Text {
        text: &'a str,
    },
    ToolCall {
        id: &'a str,
        name: &'a str,
        arguments: &'a str,
    },
    ToolResult {
        call_id: &'a str,
        content: &'a str,
        is_error: &'a bool,
    },
}

/// [`ReadablePart`] borrowed (see [`StoredPartRef`]).
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ReadablePartRef<'a> {
    Text {
        text: &'a str,
    },
    ToolCall {
        id: &'a str,
        name: &'a str,
        arguments: &'a str,
    },
    ToolResult {
        call_id: &'a str,
        content: &'a str,
        is_error: &'a bool,
    },
}

impl Serialize for Part {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            convert_part!(self, Part => ReadablePartRef).serialize(serializer)
        } else {
            convert_part!(self, Part => StoredPartRef).serialize(serializer)
        }
    }
}

impl<'de> Deserialize<'de> for Part {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            Ok(convert_part!(ReadablePart::deserialize(deserializer)?, ReadablePart => Part))
        } else {
            Ok(convert_part!(StoredPart::deserialize(deserializer)?, StoredPart => Part))
        }
    }
}

impl Part {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text { text: text.into() }
    }

    /// The number of content bytes this part carries.
    pub fn content_bytes(&self) -> usize {
        match self {
            Self::Text { text } => text.len(),
            Self::ToolCall {
                id,
                name,
                arguments,
            } => id.len() + name.len() + arguments.len(),
            Self::ToolResult {
                call_id, content, ..
            } => call_id.len() + content.len(),
        }
    }
}

/// A message in a conversation.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Message {
    /// Unique id (UUID v7).
    pub id: MessageId,
    /// The conversation it belongs to.
    pub conversation: ConversationKey,
    /// Who sent it.
    pub sender: Participant,
    /// Who it is addressed to.
    pub audience: Audience,
    /// Its content.
    pub parts: Vec<Part>,
    /// The message this one answers, if any.
    pub reply_to: Option<MessageId>,
    /// When it was posted (UTC).
    pub at: Timestamp,
}

impl Message {
    /// A text message.
    pub fn text(
        id: MessageId,
        conversation: ConversationKey,
        sender: Participant,
        audience: Audience,
        text: impl Into<String>,
        at: Timestamp,
    ) -> Self {
        Self {
            id,
            conversation,
            sender,
            audience,
            parts: vec![Part::text(text)],
            reply_to: None,
            at,
        }
    }

    /// Sets `reply_to`.
    pub fn replying_to(mut self, id: MessageId) -> Self {
        self.reply_to = Some(id);
        self
    }

    /// The text parts joined by blank lines.
    pub fn text_content(&self) -> String {
        let texts: Vec<&str> = self
            .parts
            .iter()
            .filter_map(|p| match p {
                Part::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        texts.join("\n\n")
    }

    /// Every part as plain text, one per line: text as is, tool calls as
    /// `[tool call NAME id=ID] ARGUMENTS`, results as `[tool result id=ID] CONTENT` (or
    /// `tool error`). How a model that reads text sees a message's tool traffic.
    pub fn plain_text(&self) -> String {
        let lines: Vec<String> = self
            .parts
            .iter()
            .map(|part| match part {
                Part::Text { text } => text.clone(),
                Part::ToolCall {
                    id,
                    name,
                    arguments,
                } => format!("[tool call {name} id={id}] {arguments}"),
                Part::ToolResult {
                    call_id,
                    content,
                    is_error,
                } => format!(
                    "[{} id={call_id}] {content}",
                    if *is_error {
                        "tool error"
                    } else {
                        "tool result"
                    }
                ),
            })
            .collect();
        lines.join("\n")
    }

    /// The number of content bytes across all parts (what `max_message_bytes` limits).
    pub fn content_bytes(&self) -> usize {
        self.parts.iter().map(Part::content_bytes).sum()
    }
}
