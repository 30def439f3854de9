//! The log's logic over any [`Backend`]: validating and encoding appends, assigning seqs, writing
//! the indexes, recovering them from the watermark on open, and every read.
//!
//! Readers never see an event that is not yet acknowledged: every read is capped at the
//! `committed` seq, which only moves after a group is durable (or applied, in relaxed mode).

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Mutex;

use legio_core::{
    visibility_keys, AgentName, AgentSessionState, ConversationKey, Event, Record, Seq, SeqRange,
    Viewer, VisibilityKey,
};
use tokio::sync::watch;

use crate::backend::{Backend, Direction, TreeId, WriteSet};
use crate::codec::{decode_event, decode_state, encode_event, encode_state};
use crate::error::{Result, StoreError};
use crate::keys;
use crate::metrics as m;

/// How many events before the watermark are re-indexed on open, as a margin against a recovered
/// state that is not an exact prefix of the writes (re-indexing is idempotent).
const REINDEX_MARGIN: u64 = 1024;

/// Limits applied to every append.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) max_message_bytes: usize,
}

impl Limits {
    /// Records may exceed the message limit by this much (ids, names, framing).
    const RECORD_SLACK: usize = 64 * 1024;
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
}

impl<B: Backend> std::fmt::Debug for Engine<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("committed", &*self.committed.borrow())
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Engine<B> {
    /// Opens the log over `backend`, re-deriving indexes past the watermark.
    pub(crate) fn open(backend: B, limits: Limits) -> Result<Self> {
        let _span = tracing::info_span!("recovery").entered();
        let last = match backend.last(TreeId::Events)? {
            Some((key, _)) => keys::seq_suffix(&key).unwrap_or(Seq::ZERO),
            None => Seq::ZERO,
        };
        let watermark = match backend.get(TreeId::Meta, keys::META_INDEXED_THROUGH)? {
            Some(v) => keys::seq_suffix(&v).unwrap_or(Seq::ZERO),
            None => Seq::ZERO,
        };
        let engine = Self {
            backend,
            limits,
            committed: watch::Sender::new(last),
            next_seq: Mutex::new(last.next()),
        };
        let from = Seq(watermark.0.saturating_sub(REINDEX_MARGIN).max(1));
        if last >= from {
            let reindexed = engine.reindex(from, last)?;
            tracing::info!(from = %from, to = %last, watermark = %watermark, reindexed, "re-derived indexes past the watermark");
        }
        Ok(engine)
    }

    /// Re-derives every index entry for events in `from..=to`; idempotent.
    fn reindex(&self, from: Seq, to: Seq) -> Result<u64> {
        let mut ws = WriteSet::default();
        let mut states = HashMap::new();
        let mut count = 0;
        let mut failure = None;
        self.backend.scan(
            TreeId::Events,
            &keys::seq_key(from),
            Some(&keys::seq_key(to.next())),
            Direction::Forward,
            &mut |key, value| {
                let Some(seq) = keys::seq_suffix(key) else {
                    return ControlFlow::Continue(());
                };
                // An undecodable record cannot be indexed; verify reports it.
                if let Ok(event) = decode_event(seq, value) {
                    if let Err(e) = self.index_writes(seq, &event, &mut ws, &mut states) {
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
        self.finish_states(&mut ws, states)?;
        ws.put(
            TreeId::Meta,
            keys::META_INDEXED_THROUGH.to_vec(),
            keys::seq_key(to).to_vec(),
        );
        self.backend.apply(ws)?;
        Ok(count)
    }

    /// Validates and encodes a batch; nothing is stored if any event is refused.
    pub(crate) fn encode_batch(&self, events: Vec<Event>) -> Result<Vec<Encoded>> {
        if events.is_empty() {
            return Err(StoreError::EmptyBatch);
        }
        let limit = self.limits.max_message_bytes;
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

    /// Assigns seqs to a group of batches and applies them with their index entries and the new
    /// watermark. Not durable by itself: the caller flushes before acknowledging.
    pub(crate) fn apply_group(&self, batches: Vec<Vec<Encoded>>) -> Result<(Vec<SeqRange>, u64)> {
        let mut next = self.next_seq.lock().map_err(|_| StoreError::Closed)?;
        let start = *next;
        let mut seq = start;
        let mut ws = WriteSet::default();
        let mut states = HashMap::new();
        let mut ranges = Vec::with_capacity(batches.len());
        for batch in batches {
            let first = seq;
            for encoded in batch {
                self.index_writes(seq, &encoded.event, &mut ws, &mut states)?;
                ws.put(TreeId::Events, keys::seq_key(seq).to_vec(), encoded.bytes);
                seq = seq.next();
            }
            ranges.push(SeqRange {
                first,
                last: Seq(seq.0 - 1),
            });
        }
        let last = Seq(seq.0 - 1);
        self.finish_states(&mut ws, states)?;
        ws.put(
            TreeId::Meta,
            keys::META_INDEXED_THROUGH.to_vec(),
            keys::seq_key(last).to_vec(),
        );
        let bytes = ws.bytes;
        self.backend.apply(ws)?;
        *next = seq;
        Ok((ranges, bytes))
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

    fn index_writes(
        &self,
        seq: Seq,
        event: &Event,
        ws: &mut WriteSet,
        states: &mut HashMap<Vec<u8>, AgentSessionState>,
    ) -> Result<()> {
        let conv = event.conversation();
        ws.put(TreeId::ByConv, keys::conv_key(conv, seq), Vec::new());
        if let Event::MessagePosted(message) = event {
            for key in visibility_keys(message) {
                ws.put(
                    TreeId::Visible,
                    keys::visible_key(conv, &key, seq),
                    Vec::new(),
                );
            }
        }
        if let Some(agent) = event.session_agent() {
            let key = keys::session_key(conv, agent);
            if !states.contains_key(&key) {
                let state = self
                    .load_state(conv, agent)?
                    .unwrap_or_else(|| AgentSessionState::new(conv.clone(), agent.clone()));
                states.insert(key.clone(), state);
            }
            if let Some(state) = states.get_mut(&key) {
                state.apply(seq, event);
            }
        }
        Ok(())
    }

    fn finish_states(
        &self,
        ws: &mut WriteSet,
        states: HashMap<Vec<u8>, AgentSessionState>,
    ) -> Result<()> {
        for (key, state) in states {
            ws.put(TreeId::Sessions, key, encode_state(&state)?);
        }
        Ok(())
    }

    fn load_state(
        &self,
        conv: &ConversationKey,
        agent: &AgentName,
    ) -> Result<Option<AgentSessionState>> {
        self.backend
            .get(TreeId::Sessions, &keys::session_key(conv, agent))?
            .map(|bytes| decode_state(&bytes, conv.as_str(), agent.as_str()))
            .transpose()
    }

    // ---- reads ----

    fn get_record(&self, seq: Seq) -> Result<Option<Record>> {
        Ok(
            match self.backend.get(TreeId::Events, &keys::seq_key(seq))? {
                Some(bytes) => Some(Record {
                    seq,
                    event: decode_event(seq, &bytes)?,
                }),
                None => None,
            },
        )
    }

    /// Events with `from <= seq <= to`, at most `limit`, capped at the acknowledged seq.
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
        let mut out = Vec::new();
        if from > to || limit == 0 {
            return Ok(out);
        }
        let mut failure = None;
        self.backend.scan(
            TreeId::Events,
            &keys::seq_key(from),
            Some(&keys::seq_key(to.next())),
            Direction::Forward,
            &mut |key, value| {
                let seq = keys::seq_suffix(key).unwrap_or(Seq::ZERO);
                match decode_event(seq, value) {
                    Ok(event) => out.push(Record { seq, event }),
                    Err(e) => {
                        failure = Some(e);
                        return ControlFlow::Break(());
                    }
                }
                if out.len() >= limit {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            },
        )?;
        match failure {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// Seqs listed under `prefix` in `tree` (index keys end in a seq), newest first when
    /// `direction` is backward, at most `limit`, only those `> after`, `< before` and
    /// `<= committed`.
    fn index_seqs(
        &self,
        tree: TreeId,
        prefix: &[u8],
        (after, before): (Seq, Seq),
        direction: Direction,
        limit: usize,
    ) -> Result<Vec<Seq>> {
        let end_seq = before.min(self.committed().next());
        let mut start = prefix.to_vec();
        start.extend_from_slice(&keys::seq_key(after.next()));
        let mut end = prefix.to_vec();
        end.extend_from_slice(&keys::seq_key(end_seq));
        let mut out = Vec::new();
        if limit == 0 || after.next() >= end_seq {
            return Ok(out);
        }
        self.backend
            .scan(tree, &start, Some(&end), direction, &mut |key, _| {
                if key.len() == prefix.len() + 8 {
                    if let Some(seq) = keys::seq_suffix(key) {
                        out.push(seq);
                    }
                }
                if out.len() >= limit {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })?;
        Ok(out)
    }

    fn records(&self, seqs: impl IntoIterator<Item = Seq>) -> Result<Vec<Record>> {
        let mut out = Vec::new();
        for seq in seqs {
            match self.get_record(seq)? {
                Some(record) => out.push(record),
                None => {
                    return Err(StoreError::Corrupt {
                        what: format!("index entry for seq {seq}"),
                        reason: "the index names an event the log does not have".into(),
                    })
                }
            }
        }
        Ok(out)
    }

    /// A conversation's events after `after`, in log order, at most `limit`.
    pub(crate) fn conversation_events(
        &self,
        conv: &ConversationKey,
        after: Seq,
        limit: usize,
    ) -> Result<Vec<Record>> {
        m::read("conversation");
        let seqs = self.index_seqs(
            TreeId::ByConv,
            &keys::conv_prefix(conv),
            (after, Seq(u64::MAX)),
            Direction::Forward,
            limit,
        )?;
        self.records(seqs)
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
        for key in VisibilityKey::for_viewer(viewer) {
            let prefix = keys::visible_prefix(conv, &key);
            seqs.extend(self.index_seqs(TreeId::Visible, &prefix, bounds, direction, limit)?);
        }
        seqs.sort_unstable();
        seqs.dedup();
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
        self.records(seqs)
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
        self.records(seqs)
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
        let mut out = Vec::new();
        let mut start: Vec<u8> = Vec::new();
        loop {
            let mut found = None;
            self.backend.scan(
                TreeId::ByConv,
                &start,
                None,
                Direction::Forward,
                &mut |key, _| {
                    found = keys::split_str(key).map(|(conv, _)| conv.to_vec());
                    ControlFlow::Break(())
                },
            )?;
            let Some(conv) = found else { break };
            let text = String::from_utf8_lossy(&conv).into_owned();
            let key = ConversationKey::new(text).map_err(|e| StoreError::Corrupt {
                what: "conversation index key".into(),
                reason: e.to_string(),
            })?;
            start = keys::prefix_end(&keys::conv_prefix(&key));
            out.push(key);
        }
        Ok(out)
    }
}
