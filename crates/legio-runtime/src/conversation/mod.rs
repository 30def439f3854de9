//! The conversation table: one entry per conversation this process is working on, holding all of
//! its in-memory state (the order its posts dispatch in, the keyed ids read from the log, the
//! host tools it declared, the host calls waiting for results, who follows its turns, what its
//! agents are doing). Everything in an entry is derived from the log or lives only as long as a
//! request or a turn does, so an entry can go whenever nothing uses it.
//!
//! An entry lives while a [`Use`] of it does: a request holds one while it works on the
//! conversation (a keyed post's gate, a dispatch ticket, a relay, a turn), and the conversation's
//! supervisor holds one for its life. When the last use is dropped the entry is removed as a
//! whole, in that step: a conversation whose agents retired and that nobody posts to costs
//! nothing here, and nothing has to be pruned by the reaper.
//!
//! The cluster's own per-conversation state (leases held, read copies, the ownership locks) is
//! not here: a lease lives by its TTL and its release, past the agents' life on this node, so the
//! placement keeps it (placement/ownership.rs).

pub(crate) mod followed;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use legio_core::{AgentName, ConversationKey, MessageId, Seq};
use legio_llm::ToolDef;
use tokio::sync::oneshot;

use crate::status::Activity;
use crate::tools::outcome::ToolOutcome;

pub(crate) use followed::{Ended, FollowedTurn, Follower};

/// The entries of the conversations something here uses.
#[derive(Clone, Default)]
pub(crate) struct Conversations {
    entries: Arc<Mutex<HashMap<ConversationKey, Arc<Conversation>>>>,
}

/// One conversation's in-memory state. Each part has its own lock; where two are taken together
/// `waiting` comes before `follows`.
#[derive(Default)]
pub(crate) struct Conversation {
    /// The signal of the last message appended for dispatch: set once its turns are sent
    /// (shared.rs, `append_for_dispatch`).
    pub(crate) dispatch_tail: Mutex<Option<oneshot::Receiver<()>>>,
    /// The keyed ids read from the log, and how far (keyed.rs); held by a keyed post from its
    /// check to its append.
    pub(crate) keyed: Arc<tokio::sync::Mutex<KeyedIds>>,
    /// The host tools it declared, as read from the log (tools/declared.rs).
    pub(crate) declared: Mutex<Option<Declared>>,
    /// Its host calls waiting for the host's results, by call id (tools/host_desk.rs).
    pub(crate) waiting: Mutex<HashMap<String, oneshot::Sender<ToolOutcome>>>,
    /// The turns whose host calls were announced, by call id (tools/follow.rs).
    pub(crate) follows: Mutex<HashMap<String, Arc<Mutex<FollowedTurn>>>>,
    /// What its agents are doing; an agent not here is idle (status.rs).
    pub(crate) activity: Mutex<HashMap<AgentName, Activity>>,
}

/// A conversation's keyed messages, as read from the log up to `read_to`.
#[derive(Default)]
pub(crate) struct KeyedIds {
    pub(crate) read_to: Seq,
    pub(crate) ids: HashMap<MessageId, Seq>,
}

/// A conversation's declared tools as of a seq: those of its last `ToolsDeclared` event at or
/// before `through` (none when it has none).
#[derive(Debug)]
pub(crate) struct Declared {
    pub(crate) tools: Vec<ToolDef>,
    pub(crate) through: Seq,
}

/// A use of a conversation's entry: the entry lives while one does (see the module docs).
pub(crate) struct Use {
    entries: Arc<Mutex<HashMap<ConversationKey, Arc<Conversation>>>>,
    key: ConversationKey,
    entry: Arc<Conversation>,
}

/// Locks a part of an entry; a panic elsewhere never makes the state unreadable.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Conversations {
    /// A use of `conversation`'s entry, made if it has none.
    pub(crate) fn enter(&self, conversation: &ConversationKey) -> Use {
        let mut entries = lock(&self.entries);
        let entry = Arc::clone(entries.entry(conversation.clone()).or_default());
        Use {
            entries: Arc::clone(&self.entries),
            key: conversation.clone(),
            entry,
        }
    }

    /// A use of `conversation`'s entry if something uses it already (a read that should not
    /// make one).
    pub(crate) fn get(&self, conversation: &ConversationKey) -> Option<Use> {
        let entries = lock(&self.entries);
        let entry = Arc::clone(entries.get(conversation)?);
        Some(Use {
            entries: Arc::clone(&self.entries),
            key: conversation.clone(),
            entry,
        })
    }

    /// Notes what `agent` of `conversation` is doing now (its supervisor's use keeps the entry:
    /// on a conversation nobody uses, nothing is noted). Idle is what [`Conversations::activity`]
    /// answers for an agent it does not know: no entry is kept for it, so the entry holds only
    /// agents at work.
    pub(crate) fn set_activity(
        &self,
        conversation: &ConversationKey,
        agent: &AgentName,
        activity: Activity,
    ) {
        let Some(entry) = self.get(conversation) else {
            return;
        };
        let mut activities = lock(&entry.activity);
        if activity == Activity::Idle {
            activities.remove(agent);
        } else {
            activities.insert(agent.clone(), activity);
        }
    }

    /// What `agent` of `conversation` is doing now.
    pub(crate) fn activity(&self, conversation: &ConversationKey, agent: &AgentName) -> Activity {
        self.get(conversation)
            .and_then(|entry| lock(&entry.activity).get(agent).copied())
            .unwrap_or(Activity::Idle)
    }

    /// How many conversations have an entry.
    pub(crate) fn len(&self) -> usize {
        lock(&self.entries).len()
    }
}

impl Use {
    /// The conversation this is a use of.
    pub(crate) fn key(&self) -> &ConversationKey {
        &self.key
    }
}

impl Clone for Use {
    fn clone(&self) -> Self {
        // Under the table's lock, so that a use dropped at the same time sees this one.
        let _entries = lock(&self.entries);
        Self {
            entries: Arc::clone(&self.entries),
            key: self.key.clone(),
            entry: Arc::clone(&self.entry),
        }
    }
}

impl std::ops::Deref for Use {
    type Target = Conversation;
    fn deref(&self) -> &Conversation {
        &self.entry
    }
}

impl Drop for Use {
    /// The last use removes the entry, whole. Counted under the table's lock, where every use is
    /// made: the table's own reference and this one are all there are when it is the last.
    fn drop(&mut self) {
        let mut entries = lock(&self.entries);
        if Arc::strong_count(&self.entry) == 2 {
            entries.remove(&self.key);
        }
    }
}

impl std::fmt::Debug for Use {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Use").field("key", &self.key).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ConversationKey {
        ConversationKey::new(name).unwrap()
    }

    /// An entry lives while a use of it does, is shared by its uses, and goes with the last.
    #[test]
    fn an_entry_lives_while_a_use_of_it_does_and_goes_whole_with_the_last() {
        let table = Conversations::default();
        assert!(table.get(&key("c:1")).is_none(), "get makes no entry");
        let first = table.enter(&key("c:1"));
        first
            .activity
            .lock()
            .unwrap()
            .insert(AgentName::new("a").unwrap(), Activity::Working);
        let second = table.get(&key("c:1")).expect("in use");
        assert_eq!(
            second.activity.lock().unwrap().len(),
            1,
            "one entry, shared"
        );
        let other = table.enter(&key("c:2"));
        assert_eq!(table.len(), 2);
        drop(first);
        assert_eq!(table.len(), 2, "still used by the second");
        let third = second.clone();
        drop(second);
        assert_eq!(table.len(), 2, "still used by the clone");
        drop(third);
        assert_eq!(table.len(), 1, "the last use removed c:1");
        let again = table.enter(&key("c:1"));
        assert!(
            again.activity.lock().unwrap().is_empty(),
            "a new entry starts empty"
        );
        drop((again, other));
        assert_eq!(table.len(), 0);
    }

    /// Uses made and dropped on many threads at once leave no entry behind and never two entries
    /// for one conversation at the same time.
    #[test]
    fn uses_on_many_threads_leave_nothing_behind() {
        let table = Conversations::default();
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let table = table.clone();
                std::thread::spawn(move || {
                    for i in 0..2_000 {
                        let one = table.enter(&key(&format!("c:{}", (i + t) % 3)));
                        let two = table.get(one.key()).expect("in use");
                        assert!(Arc::ptr_eq(&one.entry, &two.entry), "one entry per key");
                        drop(one);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(table.len(), 0);
    }
}
