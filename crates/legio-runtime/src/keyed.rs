//! Posts with an idempotency key (a host's retry stores nothing twice). The message's id is
//! derived from the conversation and the key (`MessageId::keyed`), so the question "was this post
//! stored already?" is "does the conversation hold a message with this id?". This process keeps,
//! in the conversation's entry (conversation/), the keyed ids it has read from the log and how
//! far it read; each keyed post reads the conversation's events after that point first, so what
//! another node appended (before a failover, say) counts as well. A conversation's keyed posts are checked and appended one at
//! a time ([`KeyedGate`]), so two attempts arriving together store one message.

use std::sync::Arc;

use legio_core::{ConversationKey, Event, IdempotencyKey, Message, MessageId, Record, Seq};
use tokio::sync::OwnedMutexGuard;

use crate::conversation::{KeyedIds, Use};
use crate::error::RuntimeError;
use crate::shared::Shared;

/// Events read per request while catching up with a conversation.
const PAGE: usize = 4_096;

/// A conversation's keyed posts go one at a time while this is held: the check, then the append.
/// Its use keeps the conversation's entry, where the ids are (conversation/): they are kept while
/// something uses the conversation, and read from the log again after.
pub(crate) struct KeyedGate {
    seen: OwnedMutexGuard<KeyedIds>,
    _conversation: Use,
}

/// Waits for the conversation's earlier keyed post, then reads what the log gained since this
/// process last looked.
pub(crate) async fn enter(
    shared: &Arc<Shared>,
    conversation: &ConversationKey,
) -> Result<KeyedGate, RuntimeError> {
    let entry = shared.conversations.enter(conversation);
    let mut seen = Arc::clone(&entry.keyed).lock_owned().await;
    loop {
        let (key, after) = (conversation.clone(), seen.read_to);
        let records = shared
            .read(move |log| log.conversation_events(&key, after, PAGE))
            .await?;
        let full = records.len() == PAGE;
        take(&mut seen, &records);
        if !full {
            return Ok(KeyedGate {
                seen,
                _conversation: entry,
            });
        }
    }
}

/// Notes the keyed messages among `records`, and how far they go.
fn take(seen: &mut KeyedIds, records: &[Record]) {
    for record in records {
        if let Event::MessagePosted(m) = &record.event {
            if m.id.is_keyed() {
                seen.ids.insert(m.id, record.seq);
            }
        }
        seen.read_to = seen.read_to.max(record.seq);
    }
}

impl KeyedGate {
    /// Where the conversation holds the message with this id, if it does.
    pub(crate) fn find(&self, id: MessageId) -> Option<Seq> {
        self.seen.ids.get(&id).copied()
    }

    /// Notes a keyed message this node just appended.
    pub(crate) fn stored(&mut self, id: MessageId, seq: Seq) {
        self.seen.ids.insert(id, seq);
    }
}

/// Refuses a retry that is not the stored message's: the same key with another sender, text or
/// audience (on the door, another model: the message would go to an agent it was not for).
pub(crate) async fn check_same(
    shared: &Arc<Shared>,
    key: &IdempotencyKey,
    seq: Seq,
    retry: &Message,
) -> Result<(), RuntimeError> {
    let records = shared.read(move |log| log.read_range(seq, seq, 1)).await?;
    let same = records.iter().any(|record| match &record.event {
        Event::MessagePosted(m) => {
            m.sender == retry.sender
                && m.audience == retry.audience
                && m.text_content() == retry.text_content()
        }
        _ => false,
    });
    if same {
        Ok(())
    } else {
        Err(RuntimeError::IdempotencyKeyReused {
            key: key.as_str().to_owned(),
            seq,
        })
    }
}
