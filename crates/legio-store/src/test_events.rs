//! The event of the crate's unit tests (a leaf module: it names nothing of the crate, so any
//! module's tests can use it without a module cycle).

use legio_core::{ConversationKey, Event};

/// Message `n` from `pullo` to `audience` in `conversation`, its id and time derived from `n`:
/// the event of the crate's unit tests.
pub(crate) fn text_event(
    n: u64,
    conversation: ConversationKey,
    audience: legio_core::Audience,
) -> Event {
    use legio_core::{Message, MessageId, Participant, Timestamp};
    let at = Timestamp::from_unix_micros(1_771_156_800_000_000 + n as i64);
    let mut random = [0u8; 10];
    random[2..].copy_from_slice(&n.to_be_bytes());
    Event::MessagePosted(Message::text(
        MessageId::from_parts(at, random),
        conversation,
        Participant::parse("pullo").unwrap(),
        audience,
        format!("message {n}"),
        at,
    ))
}
