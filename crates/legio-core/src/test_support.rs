//! Small builders for the core's own unit tests.

use crate::message::{Audience, Message, MessageId};
use crate::name::{AgentName, ConversationKey, Participant};
use crate::timestamp::Timestamp;

pub(crate) fn agent(name: &str) -> AgentName {
    AgentName::new(name).unwrap()
}

pub(crate) fn conv() -> ConversationKey {
    ConversationKey::new("test:1").unwrap()
}

pub(crate) fn ts(secs: i64) -> Timestamp {
    Timestamp::from_unix_micros(1_700_000_000_000_000 + secs * 1_000_000)
}

/// `audience`: "all" or a comma-separated list of participants.
pub(crate) fn message(n: u8, sender: &str, audience: &str, text: &str) -> Message {
    let audience = if audience == "all" {
        Audience::All
    } else {
        Audience::only(audience.split(',').map(|p| Participant::parse(p).unwrap()))
    };
    Message::text(
        MessageId::from_parts(ts(n.into()), [n; 10]),
        conv(),
        Participant::parse(sender).unwrap(),
        audience,
        text,
        ts(n.into()),
    )
}
