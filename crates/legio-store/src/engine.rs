//! The log's logic over any [`Backend`] (layout v2): validating and encoding appends, assigning
//! seqs, packing a group's events into chunks and its seqs into lists, re-deriving them past the
//! watermark on open, and every read.
//!
//! Readers never see an event that is not yet acknowledged: every read is capped at the
//! `committed` seq, which only moves after a group is durable (or applied, in relaxed mode).
//!
//! **The list overlay.** A group's chunks and session states are written with the group; its
//! list items go to an in-memory overlay ([`Pending`]), written every [`FLUSH_GROUPS`] groups
//! or [`FLUSH_SEQS`] seqs (and when the committer idles, on flush and on close) as one merged
//! entry per list, keyed by the list's first seq past the watermark, then the watermark. The
//! stored entries up to the stored watermark then hold exactly the seqs up to it, the overlay
//! those above it: reads take the stored ones up to the watermark and the overlay's above it,
//! and recovery re-derives exactly the seqs past the watermark (writing again, under the same
//! keys, any entry a crash left stored without its watermark).

use std::ops::ControlFlow;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use legio_core::{
    AgentName, AgentSessionState, ConversationKey, Event, Record, Seq, SeqRange, Viewer,
    VisibilityKey,
};
use tokio::sync::watch;

use crate::backend::{Backend, Direction, TreeId, WriteSet};
use crate::codec::{decode_event, decode_state, encode_event};
use crate::error::{Result, StoreError};
use crate::group::{self, GroupIndex, States};
use crate::keys;
use crate::layout::{decode_list_into, Chunk, ListItems};
use crate::metrics as m;

/// How many events before the watermark have their session states re-folded on open, as a
/// margin against a recovered state that is not an exact prefix of the writes (a fold skips
/// what a state already holds). List entries are re-derived only past the watermark.
const REFOLD_MARGIN: u64 = 1024;

/// The overlay's list items are written after this many groups...
pub(crate) const FLUSH_GROUPS: u32 = 128;

/// ... or this many seqs, whichever comes first.
pub(crate) const FLUSH_SEQS: u64 = 16384;

/// The list items of the groups applied since the last list write: per list, the seqs above
/// `indexed`, the watermark the stored entries reach. A list write takes `index` out whole into
/// `writing` (a pointer move), so neither its snapshot nor its cleanup holds the lock for longer
/// than that: the committer's next group and every reader wait for the lock, and copying or
/// pruning thousands of lists under it stalled them for milliseconds.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    /// The items of the list write in progress (the seqs in `(indexed, its watermark]`).
    writing: Option<Arc<GroupIndex>>,
    /// The items of the groups applied since (all above `writing`'s).
    pub(crate) index: GroupIndex,
    /// The stored entries hold exactly the seqs up to here (the stored watermark).
    pub(crate) indexed: Seq,
    /// The last seq applied: the overlay holds the seqs in `(indexed, through]`.
    through: Seq,
    groups: u32,
}

impl Pending {
    /// The overlay's items, oldest first: the list write's in progress, then the later ones.
    fn overlays(&self) -> impl Iterator<Item = &GroupIndex> {
        self.writing.as_deref().into_iter().chain([&self.index])
    }
}

/// Limits applied to every append.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) max_message_bytes: usize,
}

impl Limits {
    /// Records may exceed the message limit by this much (ids, names, framing).
    const RECORD_SLACK: usize = 64 * 1024;
}

/// Validates and encodes a batch under the message limit (every log backend's one rule): an empty
/// batch, a message over `max_message_bytes` or a record over it plus the slack refuses the whole
/// batch.
pub(crate) fn encode_batch(events: Vec<Event>, max_message_bytes: usize) -> Result<Vec<Encoded>> {
    if events.is_empty() {
        return Err(StoreError::EmptyBatch);
    }
    let limit = max_message_bytes;
    events
        .into_iter()
        .map(|event| {
            if let Event::MessagePosted(message) = &event {
                let size = message.content_bytes();
                if size > limit {
                    return Err(StoreError::MessageTooLarge { size, limit });
                }
            }
            let bytes = encode_event(&event)?;
            let record_limit = limit + Limits::RECORD_SLACK;
            if bytes.len() > record_limit {
                return Err(StoreError::RecordTooLarge {
                    size: bytes.len(),
                    limit: record_limit,
                });
            }
            Ok(Encoded { event, bytes })
        })
        .collect()
}

/// Whether `event` passes the append limits of every log backend (`encode_batch`'s rule) under
/// `max_message_bytes`: for tools that check a whole file before writing any of it (import).
pub fn check_event(event: &Event, max_message_bytes: usize) -> Result<()> {
    encode_batch(vec![event.clone()], max_message_bytes).map(|_| ())
}

/// An event, validated and encoded, waiting for its seq.
#[derive(Debug)]
pub(crate) struct Encoded {
    pub(crate) event: Event,
    pub(crate) bytes: Vec<u8>,
}

pub(crate) struct Engine<B: Backend> {
    pub(crate) backend: B,
    limits: Limits,
    committed: watch::Sender<Seq>,
    next_seq: Mutex<Seq>,
    /// Seqs the watermark says were stored after the last one that reads (see
    /// [`Engine::hidden_events`]).
    hidden: Option<(Seq, Seq)>,
    pending: RwLock<Pending>,
    /// Held while the overlay is written (the committer, or a flush, or verify).
    writing_lists: Mutex<()>,
}

impl<B: Backend> std::fmt::Debug for Engine<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("committed", &*self.committed.borrow())
            .finish_non_exhaustive()
    }
}

/// The last seq stored in `backend` (from its last chunk).
pub(crate) fn last_stored_seq<B: Backend>(backend: &B) -> Result<Seq> {
    Ok(match backend.last(TreeId::Chunks)? {
        Some((key, value)) => {
            let first = keys::seq_suffix(&key).unwrap_or(Seq::ZERO);
            Seq(Chunk::parse(first, value.as_ref())?.end_seq().0 - 1)
        }
        None => Seq::ZERO,
    })
}

impl<B: Backend> Engine<B> {
    /// Opens the log over `backend`, re-deriving indexes past the watermark.
    pub(crate) fn open(backend: B, limits: Limits) -> Result<Self> {
        let _span = tracing::info_span!("recovery").entered();
        let last = last_stored_seq(&backend)?;
        let watermark = match backend.get(TreeId::Meta, keys::META_INDEXED_THROUGH)? {
            Some(v) => keys::seq_suffix(v.as_ref()).unwrap_or(Seq::ZERO),
            None => Seq::ZERO,
        };
        // The watermark is written after a group's events (sled keeps writes in order), so one
        // past the last readable event means a damaged file hides the events between.
        let hidden = (watermark > last).then(|| (last.next(), watermark));
        let engine = Self {
            backend,
            limits,
            committed: watch::Sender::new(last),
            next_seq: Mutex::new(last.next()),
            hidden,
            pending: RwLock::new(Pending {
                indexed: watermark.max(last),
                through: watermark.max(last),
                ..Pending::default()
            }),
            writing_lists: Mutex::new(()),
        };
        let from = Seq(watermark.0.saturating_sub(REFOLD_MARGIN).max(1));
        if hidden.is_none() && last >= from {
            let reindexed = engine.reindex(from, watermark, last)?;
            tracing::info!(from = %from, to = %last, watermark = %watermark, reindexed, "re-derived indexes past the watermark");
        }
        Ok(engine)
    }

    /// Seqs (first, last) that the index watermark says were stored but that no readable chunk
    /// holds: a damaged file hides them. Such a log must not take appends (their seqs would be
    /// handed out again); verify reports them.
    pub(crate) fn hidden_events(&self) -> Option<(Seq, Seq)> {
        self.hidden
    }

    /// Re-derives the list entries of the seqs in `(watermark, to]` (one entry per list, keyed
    /// by its first seq past the watermark, then the watermark `to`) and re-folds the session
    /// states of every group from the one holding `from` to `to`. Exact: the stored entries at
    /// or below the stored watermark hold exactly the seqs up to it (the watermark is written
    /// after its entries), and an entry a crash left past it has the key of the re-derived one,
    /// which replaces it; so no seq is listed twice. A fold skips the events a state already
    /// holds.
    fn reindex(&self, from: Seq, watermark: Seq, to: Seq) -> Result<u64> {
        let start = match self
            .backend
            .floor(TreeId::Chunks, &[], &keys::seq_key(from))?
        {
            Some((key, value)) => {
                let first = keys::seq_suffix(&key).unwrap_or(Seq::ZERO);
                Chunk::parse(first, value.as_ref())?.group_first
            }
            None => Seq::FIRST,
        };
        let mut ws = WriteSet::default();
        let mut states = States::new();
        let mut index = GroupIndex::default();
        let mut count = 0;
        let mut failure = None;
        self.backend.scan(
            TreeId::Chunks,
            &keys::seq_key(start),
            None,
            Direction::Forward,
            &mut |key, value| {
                let first = keys::seq_suffix(key).unwrap_or(Seq::ZERO);
                // A chunk that does not parse cannot be indexed; verify reports it.
                let Ok(chunk) = Chunk::parse(first, value) else {
                    return ControlFlow::Continue(());
                };
                for (seq, record) in chunk.iter() {
                    // An undecodable record cannot be indexed; verify reports it.
                    let Ok(event) = record.and_then(|bytes| decode_event(seq, bytes)) else {
                        continue;
                    };
                    if seq > watermark {
                        index.add(seq, &event);
                    }
                    let mut load = |key: &[u8]| self.load_state_key(key);
                    if let Err(e) = group::fold_state(&mut states, seq, &event, &mut load) {
                        failure = Some(e);
                        return ControlFlow::Break(());
                    }
                    count += 1;
                }
                ControlFlow::Continue(())
            },
        )?;
        if let Some(e) = failure {
            return Err(e);
        }
        group::put_states(&mut ws, &states)?;
        if to > watermark {
            ws.index(index.entries().collect(), to);
        }
        self.backend.apply(ws)?;
        Ok(count)
    }

    /// Validates and encodes a batch; nothing is stored if any event is refused.
    pub(crate) fn encode_batch(&self, events: Vec<Event>) -> Result<Vec<Encoded>> {
        encode_batch(events, self.limits.max_message_bytes)
    }

    /// Assigns seqs to a group of batches and applies them with their index entries and the new
    /// watermark. Not durable by itself: the caller flushes before acknowledging.
    pub(crate) fn apply_group(&self, batches: Vec<Vec<Encoded>>) -> Result<(Vec<SeqRange>, u64)> {
        let mut next = self.next_seq.lock().map_err(|_| StoreError::Closed)?;
        let start = *next;
        let mut seq = start;
        let mut index = GroupIndex::default();
        let mut states = States::new();
        let mut records = Vec::new();
        let mut ranges = Vec::with_capacity(batches.len());
        for batch in &batches {
            let first = seq;
            for encoded in batch {
                index.add(seq, &encoded.event);
                let mut load = |key: &[u8]| self.load_state_key(key);
                group::fold_state(&mut states, seq, &encoded.event, &mut load)?;
                records.push(&encoded.bytes[..]);
                seq = seq.next();
            }
            ranges.push(SeqRange {
                first,
                last: Seq(seq.0 - 1),
            });
        }
        let last = Seq(seq.0 - 1);
        let mut ws = WriteSet::default();
        group::put_chunks(&mut ws, start, &records);
        group::put_states(&mut ws, &states)?;
        let bytes = ws.bytes;
        self.backend.apply(ws)?;
        // After the chunks: the overlay only ever names stored events.
        let mut pending = self.pending.write().map_err(|_| StoreError::Closed)?;
        pending.index.append(index);
        pending.through = last;
        pending.groups += 1;
        drop(pending);
        *next = seq;
        Ok((ranges, bytes))
    }

    /// Whether the overlay's list items are due to be written: [`FLUSH_GROUPS`] groups or
    /// [`FLUSH_SEQS`] seqs are pending.
    pub(crate) fn lists_due(&self) -> bool {
        self.pending.read().is_ok_and(|pending| {
            pending.groups >= FLUSH_GROUPS || pending.through.0 - pending.indexed.0 >= FLUSH_SEQS
        })
    }

    /// Whether the overlay holds list items not yet written.
    pub(crate) fn lists_pending(&self) -> bool {
        self.pending
            .read()
            .is_ok_and(|pending| pending.through > pending.indexed)
    }

    /// Writes the overlay's list items as one merged entry per list, then the watermark; then
    /// drops them from the overlay. Not durable by itself (nothing needs it to be: recovery
    /// re-derives them from the chunks).
    ///
    /// Readers stay exact throughout: until the overlay moves its watermark, a reader takes
    /// stored entries only up to the old one (the new entries' keys are above it) and the
    /// overlay's items above it, those being written included. The lock is held only to move
    /// the items aside and to drop them (see [`Pending`]); encoding and writing them hold none.
    pub(crate) fn flush_lists(&self) -> Result<()> {
        let _writing = self.writing_lists.lock().map_err(|_| StoreError::Closed)?;
        let (items, through) = {
            let mut pending = self.pending.write().map_err(|_| StoreError::Closed)?;
            if pending.through <= pending.indexed {
                return Ok(());
            }
            let items = Arc::new(std::mem::take(&mut pending.index));
            pending.writing = Some(Arc::clone(&items));
            pending.groups = 0;
            (items, pending.through)
        };
        let started = Instant::now();
        let mut ws = WriteSet::default();
        ws.index(items.entries().collect(), through);
        drop(items);
        let written = self.backend.apply(ws);
        m::list_write(started.elapsed());
        let mut pending = self.pending.write().map_err(|_| StoreError::Closed)?;
        let items = pending.writing.take();
        match written {
            Ok(()) => pending.indexed = through,
            // Not stored: the items go back in front of the later ones, for the next write.
            Err(e) => {
                let later = std::mem::take(&mut pending.index);
                let mut items = items.map_or_else(GroupIndex::default, Arc::unwrap_or_clone);
                items.append(later);
                pending.index = items;
                return Err(e);
            }
        }
        drop(pending);
        // Dropped here, after the lock: freeing thousands of lists takes a while.
        drop(items);
        Ok(())
    }

    /// The stored watermark and the overlay's items of the list at `prefix` below `end_seq`.
    fn pending_items(&self, prefix: &[u8], end_seq: Seq) -> Result<(Seq, ListItems)> {
        let pending = self.pending.read().map_err(|_| StoreError::Closed)?;
        let mut out = ListItems::new();
        for overlay in pending.overlays() {
            if let Some((_, items)) = overlay.lists.get(prefix) {
                let end = items.partition_point(|(seq, _)| *seq < end_seq);
                out.extend_from_slice(&items[..end]);
            }
        }
        Ok((pending.indexed, out))
    }

    /// Marks everything up to `seq` as acknowledged: readers and subscribers may now see it.
    pub(crate) fn publish(&self, seq: Seq) {
        self.committed.send_if_modified(|current| {
            if seq > *current {
                *current = seq;
                true
            } else {
                false
            }
        });
    }

    pub(crate) fn committed(&self) -> Seq {
        *self.committed.borrow()
    }

    pub(crate) fn watch(&self) -> watch::Receiver<Seq> {
        self.committed.subscribe()
    }

    fn load_state_key(&self, key: &[u8]) -> Result<Option<AgentSessionState>> {
        let what = String::from_utf8_lossy(key);
        self.backend
            .get(TreeId::Sessions, key)?
            .map(|bytes| decode_state(bytes.as_ref(), &what, ""))
            .transpose()
    }

    fn load_state(
        &self,
        conv: &ConversationKey,
        agent: &AgentName,
    ) -> Result<Option<AgentSessionState>> {
        self.backend
            .get(TreeId::Sessions, &keys::session_key(conv, agent))?
            .map(|bytes| decode_state(bytes.as_ref(), conv.as_str(), agent.as_str()))
            .transpose()
    }

    // ---- reads ----

    /// The chunk holding `seq` (its key's seq and value), if any.
    fn chunk_at(&self, seq: Seq) -> Result<Option<(Seq, B::Value)>> {
        Ok(self
            .backend
            .floor(TreeId::Chunks, &[], &keys::seq_key(seq))?
            .map(|(key, value)| (keys::seq_suffix(&key).unwrap_or(Seq::ZERO), value)))
    }

    /// Events with `from <= seq <= to`, at most `limit`, capped at the acknowledged seq.
    ///
    /// The chunk holding `from` is the one the floor lookup returns: only its records in the
    /// range are decoded (the offset table seeks to them), and the scan of the following chunks
    /// starts after it, so no chunk is read twice.
    pub(crate) fn read_range(&self, from: Seq, to: Seq, limit: usize) -> Result<Vec<Record>> {
        m::read("range");
        if from > to {
            return Err(StoreError::BadRange {
                from,
                to,
                reason: "the start is after the end".into(),
            });
        }
        let to = to.min(self.committed());
        if from > to || limit == 0 {
            return Ok(Vec::new());
        }
        // Sized once: growing a vector of thousands of records copies them over and over.
        let span = usize::try_from(to.0 - from.0 + 1).unwrap_or(usize::MAX);
        let mut out = Vec::with_capacity(limit.min(span).min(READ_RANGE_RESERVE));
        let mut next = from;
        if let Some((first, value)) = self.chunk_at(from)? {
            let chunk = Chunk::parse(first, value.as_ref())?;
            if chunk.contains(from) {
                decode_span(&chunk, (from, to), limit, &mut out)?;
                next = chunk.end_seq();
            }
        }
        if next > to || out.len() >= limit {
            return Ok(out);
        }
        let mut failure = None;
        self.backend.scan(
            TreeId::Chunks,
            &keys::seq_key(next),
            Some(&keys::seq_key(to.next())),
            Direction::Forward,
            &mut |key, value| {
                let first = keys::seq_suffix(key).unwrap_or(Seq::ZERO);
                let result = Chunk::parse(first, value)
                    .and_then(|chunk| decode_span(&chunk, (from, to), limit, &mut out));
                match result {
                    Err(e) => {
                        failure = Some(e);
                        ControlFlow::Break(())
                    }
                    Ok(()) if out.len() >= limit => ControlFlow::Break(()),
                    Ok(()) => ControlFlow::Continue(()),
                }
            },
        )?;
        match failure {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// Seqs listed in `list` (only messages if `messages_only`), newest first when `direction`
    /// is backward, at most `limit`, only those `> after`, `< before` and `<= committed`: the
    /// stored entries' up to the stored watermark, the overlay's above it.
    fn list_seqs(
        &self,
        list: ListRef<'_>,
        (after, before): (Seq, Seq),
        direction: Direction,
        limit: usize,
    ) -> Result<Vec<Seq>> {
        let end_seq = before.min(self.committed().next());
        let mut take = ListTake {
            list,
            after,
            end_seq,
            direction,
            limit,
            out: Vec::new(),
            buffer: ListItems::new(),
        };
        if limit == 0 || after.next() >= end_seq {
            return Ok(take.out);
        }
        // Read after `committed`: every seq up to it is stored (up to `indexed`) or in the
        // overlay (above it).
        let (indexed, pending) = self.pending_items(list.prefix, end_seq)?;
        let stored_end = end_seq.min(indexed.next());
        match direction {
            Direction::Backward => {
                if take.items(&pending).is_continue() && after.next() < stored_end {
                    take.end_seq = stored_end;
                    self.stored_list_seqs(&mut take)?;
                }
            }
            Direction::Forward => {
                if after.next() < stored_end {
                    take.end_seq = stored_end;
                    self.stored_list_seqs(&mut take)?;
                    take.end_seq = end_seq;
                }
                if take.out.len() < limit {
                    let _ = take.items(&pending);
                }
            }
        }
        Ok(take.out)
    }

    /// Takes the seqs `take` wants from the stored entries of its list (keys below its end).
    fn stored_list_seqs(&self, take: &mut ListTake<'_>) -> Result<()> {
        let (list, after, end_seq) = (take.list, take.after, take.end_seq);
        let end = keys::list_key(list.prefix, end_seq);
        let start = match take.direction {
            Direction::Backward => keys::list_key(list.prefix, Seq::ZERO),
            Direction::Forward => match self.list_tail(list.prefix, after.next(), &end)? {
                Some(entries) => {
                    for (first, value) in &entries {
                        if take.entry(*first, value)?.is_break() {
                            break;
                        }
                    }
                    return Ok(());
                }
                // The entry holding `after + 1` may start at or before it.
                None => self
                    .backend
                    .floor(
                        TreeId::Lists,
                        list.prefix,
                        &keys::list_key(list.prefix, after.next()),
                    )?
                    .map_or_else(|| keys::list_key(list.prefix, Seq::ZERO), |(key, _)| key),
            },
        };
        let mut failure = None;
        self.backend.scan(
            TreeId::Lists,
            &start,
            Some(&end),
            take.direction,
            &mut |key, value| {
                let first = keys::seq_suffix(key).unwrap_or(Seq::ZERO);
                take.entry(first, value).unwrap_or_else(|e| {
                    failure = Some(e);
                    ControlFlow::Break(())
                })
            },
        )?;
        match failure {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The last entries of the list at `prefix` below the key `end`, in order, back to the one
    /// holding `target` (the last whose first seq is at most `target`), if that takes at most
    /// [`LIST_TAIL_ENTRIES`] entries: one backward walk instead of a floor lookup and a scan,
    /// for the usual forward read of what came after a recent checkpoint. `None` when the
    /// entry holding `target` is further back.
    fn list_tail(&self, prefix: &[u8], target: Seq, end: &[u8]) -> Result<Option<Vec<ListEntry>>> {
        let mut entries = Vec::new();
        let mut reached = true;
        self.backend.scan(
            TreeId::Lists,
            &keys::list_key(prefix, Seq::ZERO),
            Some(end),
            Direction::Backward,
            &mut |key, value| {
                let first = keys::seq_suffix(key).unwrap_or(Seq::ZERO);
                entries.push((first, value.to_vec()));
                if first <= target {
                    ControlFlow::Break(())
                } else if entries.len() >= LIST_TAIL_ENTRIES {
                    reached = false;
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            },
        )?;
        entries.reverse();
        Ok(reached.then_some(entries))
    }

    /// The records at `seqs` (ascending), reading each chunk once: the chunk of the first seq by
    /// a floor lookup, and each later one by [`Engine::chunk_after`].
    fn records(&self, seqs: &[Seq]) -> Result<Vec<Record>> {
        let mut out = Vec::with_capacity(seqs.len());
        let mut current: Option<(Seq, B::Value)> = None;
        let mut rest = seqs;
        while let Some(&seq) = rest.first() {
            current = match current {
                Some((first, value)) => self.chunk_after(first, value, seq)?,
                None => self.chunk_at(seq)?,
            };
            let missing = || StoreError::Corrupt {
                what: format!("index entry for seq {seq}"),
                reason: "the index names an event the log does not have".into(),
            };
            let (first, value) = current.as_ref().ok_or_else(missing)?;
            let chunk = Chunk::parse(*first, value.as_ref())?;
            if !chunk.contains(seq) {
                return Err(missing());
            }
            let held = rest.partition_point(|s| chunk.contains(*s));
            for &seq in &rest[..held] {
                let event = decode_event(seq, chunk.record(seq)?)?;
                out.push(Record { seq, event });
            }
            rest = &rest[held..];
        }
        Ok(out)
    }

    /// The chunk holding `seq`, which is past the chunk stored under `first`: when `seq` is in
    /// the next chunk (the usual case in a window), that chunk is read by its key (its first
    /// seq, the one after this chunk's last) with a point lookup, cheaper in sled than the
    /// floor lookup (a backward iterator) used otherwise.
    fn chunk_after(
        &self,
        first: Seq,
        value: B::Value,
        seq: Seq,
    ) -> Result<Option<(Seq, B::Value)>> {
        let next = Chunk::parse(first, value.as_ref())?.end_seq();
        if next <= seq {
            if let Some(value) = self.backend.get(TreeId::Chunks, &keys::seq_key(next))? {
                // A chunk that does not parse is left to the floor lookup, as before.
                if Chunk::parse(next, value.as_ref()).is_ok_and(|c| c.contains(seq)) {
                    return Ok(Some((next, value)));
                }
            }
        }
        self.chunk_at(seq)
    }

    /// A conversation's events after `after`, in log order, at most `limit`.
    pub(crate) fn conversation_events(
        &self,
        conv: &ConversationKey,
        after: Seq,
        limit: usize,
    ) -> Result<Vec<Record>> {
        m::read("conversation");
        let prefix = keys::list_prefix(conv, None);
        let list = ListRef {
            prefix: &prefix,
            conversation: true,
            messages_only: false,
        };
        let seqs = self.list_seqs(list, (after, Seq(u64::MAX)), Direction::Forward, limit)?;
        self.records(&seqs)
    }

    /// The seqs of the messages `viewer` may see, merged from the viewer's index lists.
    fn visible_seqs(
        &self,
        conv: &ConversationKey,
        viewer: Viewer<'_>,
        bounds: (Seq, Seq),
        direction: Direction,
        limit: usize,
    ) -> Result<Vec<Seq>> {
        let mut seqs = Vec::new();
        let (mut after, before) = bounds;
        // Backward, the `all` list (usually the denser one) first; see below.
        for key in VisibilityKey::for_viewer(viewer).into_iter().rev() {
            let everything = key == VisibilityKey::Everything;
            let prefix = keys::list_prefix(conv, (!everything).then_some(&key));
            let list = ListRef {
                prefix: &prefix,
                conversation: everything,
                messages_only: everything,
            };
            seqs.extend(self.list_seqs(list, (after, before), direction, limit)?);
            seqs.sort_unstable();
            seqs.dedup();
            // Backward, nothing at or below the `limit`-th newest seq found so far can be in
            // the window (those `limit` are newer), so the next list is read only down to it:
            // the result is the same, with fewer list entries read.
            if direction == Direction::Backward && seqs.len() >= limit {
                after = after.max(seqs[seqs.len() - limit]);
            }
        }
        if direction == Direction::Backward {
            let skip = seqs.len().saturating_sub(limit);
            seqs.drain(..skip);
        } else {
            seqs.truncate(limit);
        }
        Ok(seqs)
    }

    /// Exactly the last `limit` messages `viewer` may see with seq below `before` (fewer only
    /// if fewer exist), in log order.
    pub(crate) fn visible_before(
        &self,
        conv: &ConversationKey,
        viewer: Viewer<'_>,
        before: Seq,
        limit: usize,
    ) -> Result<Vec<Record>> {
        m::read("visible_window");
        let seqs = self.visible_seqs(
            conv,
            viewer,
            (Seq::ZERO, before),
            Direction::Backward,
            limit,
        )?;
        self.records(&seqs)
    }

    /// The messages `viewer` may see with seq after `after`, in log order, at most `limit`.
    pub(crate) fn visible_after(
        &self,
        conv: &ConversationKey,
        viewer: Viewer<'_>,
        after: Seq,
        limit: usize,
    ) -> Result<Vec<Record>> {
        m::read("visible_after");
        let seqs = self.visible_seqs(
            conv,
            viewer,
            (after, Seq(u64::MAX)),
            Direction::Forward,
            limit,
        )?;
        self.records(&seqs)
    }

    /// The session state of `agent` in `conv`.
    pub(crate) fn session_state(
        &self,
        conv: &ConversationKey,
        agent: &AgentName,
    ) -> Result<Option<AgentSessionState>> {
        m::read("session");
        self.load_state(conv, agent)
    }

    /// Every agent's session state in `conv`, by agent name.
    pub(crate) fn session_states(&self, conv: &ConversationKey) -> Result<Vec<AgentSessionState>> {
        m::read("sessions");
        let prefix = keys::conv_prefix(conv);
        let end = keys::prefix_end(&prefix);
        let mut out = Vec::new();
        let mut failure = None;
        self.backend.scan(
            TreeId::Sessions,
            &prefix,
            Some(&end),
            Direction::Forward,
            &mut |key, value| {
                let agent = keys::split_str(&key[prefix.len()..])
                    .map(|(a, _)| String::from_utf8_lossy(a).into_owned())
                    .unwrap_or_default();
                match decode_state(value, conv.as_str(), &agent) {
                    Ok(state) => {
                        out.push(state);
                        ControlFlow::Continue(())
                    }
                    Err(e) => {
                        failure = Some(e);
                        ControlFlow::Break(())
                    }
                }
            },
        )?;
        match failure {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// Every conversation that has at least one event, sorted by key.
    pub(crate) fn conversations(&self) -> Result<Vec<ConversationKey>> {
        m::read("conversations");
        let committed = self.committed();
        // The overlay's first (its conversations may have no stored entry yet).
        let mut pending: Vec<Vec<u8>> = {
            let pending = self.pending.read().map_err(|_| StoreError::Closed)?;
            pending
                .overlays()
                .flat_map(|overlay| &overlay.lists)
                .filter(|(_, (_, items))| items.first().is_some_and(|(s, _)| *s <= committed))
                .filter_map(|(prefix, _)| keys::split_str(prefix).map(|(conv, _)| conv.to_vec()))
                .collect()
        };
        pending.dedup();
        let mut out = Vec::new();
        for conv in pending {
            out.push(conversation_key(&conv)?);
        }
        let mut start: Vec<u8> = Vec::new();
        loop {
            let mut found = None;
            self.backend.scan(
                TreeId::Lists,
                &start,
                None,
                Direction::Forward,
                &mut |key, _| {
                    found = keys::split_str(key).map(|(conv, _)| conv.to_vec());
                    ControlFlow::Break(())
                },
            )?;
            let Some(conv) = found else { break };
            let key = conversation_key(&conv)?;
            start = keys::prefix_end(&keys::conv_prefix(&key));
            out.push(key);
        }
        // In stored key order (length-prefixed names), as the stored entries alone give it.
        out.sort_unstable_by_key(keys::conv_prefix);
        out.dedup();
        Ok(out)
    }
}

/// The conversation a list key names.
fn conversation_key(conv: &[u8]) -> Result<ConversationKey> {
    let text = String::from_utf8_lossy(conv).into_owned();
    ConversationKey::new(text).map_err(|e| StoreError::Corrupt {
        what: "conversation index key".into(),
        reason: e.to_string(),
    })
}

/// Decodes the records of `chunk` with `from <= seq <= to` into `out` until it holds `limit`
/// records; the others are not decoded (the offset table seeks to the first one wanted).
fn decode_span(
    chunk: &Chunk<'_>,
    (from, to): (Seq, Seq),
    limit: usize,
    out: &mut Vec<Record>,
) -> Result<()> {
    let mut seq = from.max(chunk.first);
    let end = to.min(Seq(chunk.end_seq().0 - 1));
    while seq <= end && out.len() < limit {
        let event = decode_event(seq, chunk.record(seq)?)?;
        out.push(Record { seq, event });
        seq = seq.next();
    }
    Ok(())
}

/// The most records `read_range` reserves room for up front (it grows past it if asked for more).
const READ_RANGE_RESERVE: usize = 16_384;

/// How many list entries a forward list read walks back from the end before it looks the
/// entry holding its start up instead (see [`Engine::list_tail`]).
const LIST_TAIL_ENTRIES: usize = 8;

/// A stored list entry: the seq its key names, and its value.
type ListEntry = (Seq, Vec<u8>);

/// A list read in progress: the seqs wanted from each entry, in the read's direction.
struct ListTake<'a> {
    list: ListRef<'a>,
    after: Seq,
    end_seq: Seq,
    direction: Direction,
    limit: usize,
    out: Vec<Seq>,
    /// The entry being read, decoded into one buffer for every entry of the read.
    buffer: ListItems,
}

impl ListTake<'_> {
    /// Takes the wanted seqs of the entry stored under a key naming `first`; `Break` once the
    /// read has all it wants.
    fn entry(&mut self, first: Seq, value: &[u8]) -> Result<ControlFlow<()>> {
        let mut buffer = std::mem::take(&mut self.buffer);
        decode_list_into(first, value, self.list.conversation, &mut buffer)?;
        let flow = self.items(&buffer);
        self.buffer = buffer;
        Ok(flow)
    }

    /// Takes the wanted seqs of `items` (one entry's, or the overlay's: ascending); `Break`
    /// once the read has all it wants.
    fn items(&mut self, items: &[(Seq, bool)]) -> ControlFlow<()> {
        let Some(&(first, _)) = items.first() else {
            return ControlFlow::Continue(());
        };
        let (after, end_seq, messages_only) = (self.after, self.end_seq, self.list.messages_only);
        let wanted = |&&(seq, is_message): &&(Seq, bool)| {
            seq > after && seq < end_seq && (is_message || !messages_only)
        };
        let room = self.limit - self.out.len();
        let seqs = |(s, _): &(Seq, bool)| *s;
        match self.direction {
            Direction::Forward => self
                .out
                .extend(items.iter().filter(wanted).take(room).map(seqs)),
            Direction::Backward => self
                .out
                .extend(items.iter().rev().filter(wanted).take(room).map(seqs)),
        }
        let below_after = self.direction == Direction::Backward && first <= after;
        if self.out.len() >= self.limit || below_after {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

/// One index list to read: its prefix, whether it is a conversation list (flagged items), and
/// whether only its messages are wanted (the `*` view).
#[derive(Clone, Copy, Debug)]
struct ListRef<'a> {
    prefix: &'a [u8],
    conversation: bool,
    messages_only: bool,
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
