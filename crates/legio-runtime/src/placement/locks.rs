//! One async lock per conversation, for the ownership layer's work on a conversation's lease
//! and copy (a take, a renewal, a release, a catch-up, dropping a read copy): two of them never
//! run at once on one conversation, while work on other conversations goes on (a long stream
//! read of one conversation once held up every take and renewal of the node). A lock exists
//! while someone holds or waits for it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use legio_core::ConversationKey;
use tokio::sync::OwnedMutexGuard;

type Lock = Arc<tokio::sync::Mutex<()>>;

/// The locks of the conversations someone holds or waits for.
#[derive(Default)]
pub(crate) struct ConversationLocks {
    locks: Mutex<HashMap<ConversationKey, Lock>>,
}

/// A conversation's lock, held until dropped.
pub(crate) struct Locked<'a> {
    locks: &'a ConversationLocks,
    conversation: ConversationKey,
    guard: Option<OwnedMutexGuard<()>>,
}

impl ConversationLocks {
    /// Waits for `conversation`'s lock (in the order asked) and holds it.
    pub(crate) async fn lock(&self, conversation: &ConversationKey) -> Locked<'_> {
        let lock = {
            let mut map = self.map();
            // Locks left by waiters that gave up (nobody holds or waits for them) go.
            map.retain(|_, lock| Arc::strong_count(lock) > 1);
            Arc::clone(map.entry(conversation.clone()).or_default())
        };
        let guard = lock.lock_owned().await;
        Locked {
            locks: self,
            conversation: conversation.clone(),
            guard: Some(guard),
        }
    }

    /// `conversation`'s lock if nobody holds or waits for it now.
    pub(crate) fn try_lock(&self, conversation: &ConversationKey) -> Option<Locked<'_>> {
        let lock = Arc::clone(self.map().entry(conversation.clone()).or_default());
        let guard = lock.try_lock_owned().ok();
        // Made with no holder: dropped as a holder's would be (by `Locked`, or swept).
        Some(Locked {
            locks: self,
            conversation: conversation.clone(),
            guard: Some(guard?),
        })
    }

    fn map(&self) -> MutexGuard<'_, HashMap<ConversationKey, Lock>> {
        self.locks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many conversations have a lock now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.map().len()
    }
}

impl Drop for Locked<'_> {
    /// Unlocks, and drops the lock if nobody waits for it (a waiter holds a reference to it).
    /// A lock whose last waiter gave up is dropped by the next call of `lock`.
    fn drop(&mut self) {
        let mut map = self.locks.map();
        drop(self.guard.take());
        if map
            .get(&self.conversation)
            .is_some_and(|lock| Arc::strong_count(lock) == 1)
        {
            map.remove(&self.conversation);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn key(name: &str) -> ConversationKey {
        ConversationKey::new(name).unwrap()
    }

    /// A conversation's lock waits for its holder, another conversation's does not, and a lock
    /// nobody holds or waits for is dropped.
    #[tokio::test]
    async fn one_conversation_waits_for_its_lock_and_not_for_anothers() {
        let locks = ConversationLocks::default();
        let held = locks.lock(&key("c:1")).await;
        let other = tokio::time::timeout(Duration::from_secs(5), locks.lock(&key("c:2")))
            .await
            .expect("another conversation's lock is free");
        let same = tokio::time::timeout(Duration::from_millis(50), locks.lock(&key("c:1"))).await;
        assert!(same.is_err(), "c:1 waits for its holder");
        assert_eq!(locks.len(), 2);
        drop(other);
        assert_eq!(locks.len(), 1, "c:2's lock dropped with its holder");
        let c1 = key("c:1");
        let waiter = locks.lock(&c1);
        tokio::pin!(waiter);
        assert!(futures_poll_pending(&mut waiter).await);
        drop(held);
        assert_eq!(locks.len(), 1, "kept for its waiter");
        let again = waiter.await;
        drop(again);
        assert_eq!(locks.len(), 0, "dropped with its last holder");
        // A waiter that gives up after its lock's holder let go leaves the lock behind; the
        // next lock of any conversation drops it.
        let held = locks.lock(&c1).await;
        let mut waiter = Box::pin(locks.lock(&c1));
        assert!(futures_poll_pending(&mut waiter).await);
        drop(held);
        drop(waiter);
        assert_eq!(locks.len(), 1, "left behind by the waiter that gave up");
        drop(locks.lock(&key("c:3")).await);
        assert_eq!(locks.len(), 0, "swept");
        // try_lock: the lock if free, none if held.
        let held = locks.try_lock(&c1).expect("free");
        assert!(locks.try_lock(&c1).is_none(), "held");
        drop(held);
        assert_eq!(locks.len(), 0);
    }

    /// Polls `future` once: whether it is still pending.
    async fn futures_poll_pending<F: std::future::Future + Unpin>(future: &mut F) -> bool {
        tokio::time::timeout(Duration::from_millis(20), future)
            .await
            .is_err()
    }
}
