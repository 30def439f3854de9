//! The in-memory event log: the same logic as the sled log over `BTreeMap`s, for tests and hosts
//! that need no durability. Appends are acknowledged as soon as they are applied.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, RwLock};

use legio_core::{AgentName, AgentSessionState, ConversationKey, Event, Record, Seq, Viewer};

use crate::backend::{Backend, Direction, TreeId, Visitor, WriteSet};
use crate::engine::{Engine, Limits};
use crate::error::{Result, StoreError};
use crate::log::{AppendHandle, EventLog, Subscription};
use crate::options::StoreOptions;
use crate::verify::{self, VerifyProgress, VerifyReport};

type Trees = [BTreeMap<Vec<u8>, Arc<[u8]>>; 4];

#[derive(Default)]
pub(crate) struct MemoryBackend {
    trees: RwLock<Trees>,
}

fn index(tree: TreeId) -> usize {
    tree as usize
}

impl MemoryBackend {
    fn read(&self) -> Result<std::sync::RwLockReadGuard<'_, Trees>> {
        self.trees
            .read()
            .map_err(|_| StoreError::io("reading memory", "lock poisoned"))
    }
}

impl Backend for MemoryBackend {
    type Value = Arc<[u8]>;

    fn get(&self, tree: TreeId, key: &[u8]) -> Result<Option<Self::Value>> {
        Ok(self.read()?[index(tree)].get(key).cloned())
    }

    fn floor(
        &self,
        tree: TreeId,
        prefix: &[u8],
        key: &[u8],
    ) -> Result<Option<(Vec<u8>, Self::Value)>> {
        let trees = self.read()?;
        let found = trees[index(tree)]
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()
            .filter(|(k, _)| k.starts_with(prefix));
        Ok(found.map(|(k, v)| (k.clone(), v.clone())))
    }

    fn scan(
        &self,
        tree: TreeId,
        start: &[u8],
        end: Option<&[u8]>,
        direction: Direction,
        visit: &mut Visitor<'_>,
    ) -> Result<()> {
        let trees = self.read()?;
        let upper = end.map_or(Bound::Unbounded, Bound::Excluded);
        let range = trees[index(tree)].range::<[u8], _>((Bound::Included(start), upper));
        let mut step = |(k, v): (&Vec<u8>, &Arc<[u8]>)| visit(k, v);
        match direction {
            Direction::Forward => {
                for kv in range {
                    if step(kv).is_break() {
                        break;
                    }
                }
            }
            Direction::Backward => {
                for kv in range.rev() {
                    if step(kv).is_break() {
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    fn last(&self, tree: TreeId) -> Result<Option<(Vec<u8>, Self::Value)>> {
        Ok(self.read()?[index(tree)]
            .iter()
            .next_back()
            .map(|(k, v)| (k.clone(), v.clone())))
    }

    fn apply(&self, writes: WriteSet) -> Result<()> {
        let mut trees = self
            .trees
            .write()
            .map_err(|_| StoreError::io("writing memory", "lock poisoned"))?;
        for (key, value) in writes.chunks {
            trees[index(TreeId::Chunks)].insert(key, value.into());
        }
        for (tree, key, value) in writes.puts {
            trees[index(tree)].insert(key, value.into());
        }
        for (tree, key) in writes.removes {
            trees[index(tree)].remove(&key);
        }
        // The entries, then the watermark, as the sled backend writes them (here under one lock).
        if let Some(indexed) = writes.indexed {
            for (key, value) in indexed.lists {
                trees[index(TreeId::Lists)].insert(key, value.into());
            }
            trees[index(TreeId::Meta)].insert(
                crate::keys::META_INDEXED_THROUGH.to_vec(),
                crate::keys::seq_key(indexed.through).to_vec().into(),
            );
        }
        Ok(())
    }

    fn size_on_disk(&self) -> Result<u64> {
        Ok(0)
    }
}

/// An event log held in memory. Cloning gives another handle to the same log.
#[derive(Clone, Debug)]
pub struct MemoryLog {
    engine: Arc<Engine<MemoryBackend>>,
}

impl std::fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemoryBackend")
    }
}

impl MemoryLog {
    /// An empty log with default options.
    pub fn new() -> Self {
        Self::with_options(&StoreOptions::default())
    }

    /// An empty log with the given limits (durability options do not apply in memory).
    pub fn with_options(options: &StoreOptions) -> Self {
        let limits = Limits {
            max_message_bytes: options.max_message_bytes,
        };
        let engine = Engine::open(MemoryBackend::default(), limits)
            .unwrap_or_else(|_| unreachable!("opening an empty in-memory log cannot fail"));
        Self {
            engine: Arc::new(engine),
        }
    }
}

impl Default for MemoryLog {
    fn default() -> Self {
        Self::new()
    }
}

impl EventLog for MemoryLog {
    fn submit(&self, events: Vec<Event>) -> Result<AppendHandle> {
        let encoded = self.engine.encode_batch(events)?;
        let (mut ranges, bytes) = self.engine.apply_group(vec![encoded])?;
        if self.engine.lists_due() {
            self.engine.flush_lists()?;
        }
        let range = ranges.pop().ok_or(StoreError::EmptyBatch)?;
        crate::metrics::committed(range.len(), bytes, range.last.0);
        self.engine.publish(range.last);
        Ok(AppendHandle::ready(Ok(range)))
    }

    fn last_seq(&self) -> Seq {
        self.engine.committed()
    }

    fn read_range(&self, from: Seq, to: Seq, limit: usize) -> Result<Vec<Record>> {
        self.engine.read_range(from, to, limit)
    }

    fn conversation_events(
        &self,
        conversation: &ConversationKey,
        after: Seq,
        limit: usize,
    ) -> Result<Vec<Record>> {
        self.engine.conversation_events(conversation, after, limit)
    }

    fn conversations(&self) -> Result<Vec<ConversationKey>> {
        self.engine.conversations()
    }

    fn visible_before(
        &self,
        conversation: &ConversationKey,
        viewer: Viewer<'_>,
        before: Seq,
        limit: usize,
    ) -> Result<Vec<Record>> {
        self.engine
            .visible_before(conversation, viewer, before, limit)
    }

    fn visible_after(
        &self,
        conversation: &ConversationKey,
        viewer: Viewer<'_>,
        after: Seq,
        limit: usize,
    ) -> Result<Vec<Record>> {
        self.engine
            .visible_after(conversation, viewer, after, limit)
    }

    fn session_state(
        &self,
        conversation: &ConversationKey,
        agent: &AgentName,
    ) -> Result<Option<AgentSessionState>> {
        self.engine.session_state(conversation, agent)
    }

    fn session_states(&self, conversation: &ConversationKey) -> Result<Vec<AgentSessionState>> {
        self.engine.session_states(conversation)
    }

    fn subscribe(&self, from: Seq) -> Subscription {
        let engine = Arc::clone(&self.engine);
        Subscription::new(
            Arc::new(move |a, b, n| engine.read_range(a, b, n)),
            self.engine.watch(),
            from,
        )
    }

    fn verify(&self, progress: &mut dyn FnMut(VerifyProgress)) -> Result<VerifyReport> {
        verify::verify(&self.engine, progress)
    }

    fn flush(&self) -> Result<()> {
        // Nothing to make durable; the pending list items are written, as on sled.
        self.engine.flush_lists()
    }

    fn size_on_disk(&self) -> Result<u64> {
        Ok(0)
    }
}
