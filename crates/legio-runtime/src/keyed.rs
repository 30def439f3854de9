//! Posts with an idempotency key (a host's retry stores nothing twice). The message's id is
//! derived from the conversation and the key (`MessageId::keyed`), so the question "was this post
//! stored already?" is "does the conversation hold a message with this id?". This node keeps, per
//! conversation, the keyed ids it has read from the log and how far it read; each keyed post
//! reads the conversation's events after that point first, so what another node appended (before
//! a failover, say) counts as well. A conversation's keyed posts are checked and appended one at
//! a time ([`KeyedGate`]), so two attempts arriving together store one message.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use legio_core::{ConversationKey, Event, IdempotencyKey, Message, MessageId, Record, Seq};
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

use crate::error::RuntimeError;
use crate::shared::Shared;

/// Events read per request while catching up with a conversation.
const PAGE: usize = 4_096;

/// Conversations whose keyed ids this node keeps; past it, the least recently used is forgotten
/// (and read again from the start if it is posted to with a key again).
const KEEP: usize = 4_096;

/// The keyed ids this node has read, per conversation.
#[derive(Default)]
pub(crate) struct KeyedPosts {
    conversations: Mutex<Conversations>,
}

#[derive(Default)]
struct Conversations {
    tick: u64,
    seen: HashMap<ConversationKey, (u64, Arc<AsyncMutex<Seen>>)>,
}

/// One conversation's keyed messages, as read from the log up to `read_to`.
#[derive(Default)]
struct Seen {
    read_to: Seq,
    ids: HashMap<MessageId, Seq>,
}

/// A conversation's keyed posts go one at a time while this is held: the check, then the append.
pub(crate) struct KeyedGate {
    seen: OwnedMutexGuard<Seen>,
}

impl KeyedPosts {
    /// Waits for the conversation's earlier keyed post, then reads what the log gained since this
    /// node last looked.
    pub(crate) async fn enter(
        &self,
        shared: &Arc<Shared>,
        conversation: &ConversationKey,
    ) -> Result<KeyedGate, RuntimeError> {
        let mut seen = self.of(conversation).lock_owned().await;
        loop {
            let (key, after) = (conversation.clone(), seen.read_to);
            let records = shared
                .read(move |log| log.conversation_events(&key, after, PAGE))
                .await?;
            let full = records.len() == PAGE;
            seen.take(&records);
            if !full {
                return Ok(KeyedGate { seen });
            }
        }
    }

    fn of(&self, conversation: &ConversationKey) -> Arc<AsyncMutex<Seen>> {
        let mut all = self
            .conversations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        all.tick += 1;
        let tick = all.tick;
        if !all.seen.contains_key(conversation) && all.seen.len() >= KEEP {
            all.forget_oldest();
        }
        let entry = all
            .seen
            .entry(conversation.clone())
            .or_insert_with(|| (tick, Arc::default()));
        entry.0 = tick;
        Arc::clone(&entry.1)
    }
}

impl Conversations {
    /// Forgets the least recently used conversation that no post is using.
    fn forget_oldest(&mut self) {
        let oldest = self
            .seen
            .iter()
            .filter(|(_, (_, seen))| Arc::strong_count(seen) == 1)
            .min_by_key(|(_, (tick, _))| *tick)
            .map(|(key, _)| key.clone());
        if let Some(key) = oldest {
            self.seen.remove(&key);
        }
    }
}

impl Seen {
    fn take(&mut self, records: &[Record]) {
        for record in records {
            if let Event::MessagePosted(m) = &record.event {
                if m.id.is_keyed() {
                    self.ids.insert(m.id, record.seq);
                }
            }
            self.read_to = self.read_to.max(record.seq);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_forgets_the_least_recently_used_conversation_not_in_use() {
        let posts = KeyedPosts::default();
        let key = |i: usize| ConversationKey::new(format!("c:{i}")).unwrap();
        let in_use = posts.of(&key(0));
        for i in 1..KEEP {
            drop(posts.of(&key(i)));
        }
        drop(posts.of(&key(1))); // used again: now the most recent
        drop(posts.of(&key(KEEP)));
        let all = posts.conversations.lock().unwrap();
        assert_eq!(all.seen.len(), KEEP);
        assert!(all.seen.contains_key(&key(0)), "in use: kept");
        assert!(all.seen.contains_key(&key(1)), "used lately: kept");
        assert!(
            !all.seen.contains_key(&key(2)),
            "the oldest unused: forgotten"
        );
        drop(in_use);
    }
}
