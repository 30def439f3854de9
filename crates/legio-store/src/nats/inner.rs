//! What the NATS log's parts share (a leaf module): the state behind a `NatsLog` handle
//! ([`Inner`], its methods are in log.rs), an append on its way to the dispatcher ([`Submit`]),
//! and the read chunk.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, MutexGuard};

use legio_core::{ConversationKey, Event, Record, Seq, SeqRange};
use tokio::sync::{mpsc, oneshot, watch};

use super::grouping::Grouping;
use super::options::NatsOptions;
use super::projection::Projection;
use super::publish::Publisher;
use super::subject::Subjects;
use crate::error::Result;

/// Events read from the stream per request.
pub(super) const READ_CHUNK: usize = 4096;

pub(super) struct Inner {
    pub(super) publisher: Publisher,
    pub(super) subjects: Subjects,
    pub(super) options: NatsOptions,
    pub(super) read_only: bool,
    pub(super) projections: Mutex<HashMap<ConversationKey, Arc<Mutex<Projection>>>>,
    /// Conversations whose append was refused, with the last seq this node expected: refused
    /// until `NatsLog::refresh` (this node took the conversation over again).
    pub(super) fenced: Mutex<HashMap<ConversationKey, u64>>,
    pub(super) committed: watch::Sender<Seq>,
    pub(super) submits: Option<mpsc::UnboundedSender<Submit>>,
    pub(super) id_prefix: String,
    pub(super) next_id: AtomicU64,
    /// Which appends leave together as one atomic batch (by the replica count).
    pub(super) grouping: Grouping,
    pub(super) following: AtomicBool,
    /// The events this node appended lately, by seq (see [`Recent`]).
    pub(super) recent: Mutex<Recent>,
}

/// How many of this node's latest appended events [`Recent`] keeps.
const RECENT_EVENTS: usize = 4096;

/// The projections holding the events this node appended lately, by seq: a read of one of them
/// by seq (a turn reads the message it answers, which this node appended just before) is served
/// from the projection instead of two requests to the stream's leader (its state, then the
/// message). Bounded: the oldest seq leaves when a new one comes; a projection dropped meanwhile
/// (forgotten, stood down) lives on only until its seqs leave. Records never change, so a
/// dropped projection's copy is still the event at that seq.
#[derive(Default)]
pub(super) struct Recent {
    by_seq: HashMap<u64, Arc<Mutex<Projection>>>,
    order: VecDeque<u64>,
}

impl Recent {
    /// Remembers that `projection` holds the event at `seq` (acknowledged).
    pub(super) fn insert(&mut self, seq: Seq, projection: &Arc<Mutex<Projection>>) {
        if self.by_seq.insert(seq.0, Arc::clone(projection)).is_none() {
            self.order.push_back(seq.0);
        }
        while self.order.len() > RECENT_EVENTS {
            if let Some(old) = self.order.pop_front() {
                self.by_seq.remove(&old);
            }
        }
    }

    /// The event at `seq`, if this node appended it lately.
    pub(super) fn record(&self, seq: Seq) -> Option<Record> {
        let projection = Arc::clone(self.by_seq.get(&seq.0)?);
        let record = lock(&projection).record_at(seq);
        record
    }
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// An append waiting for its turn: its conversation may have an append in flight.
pub(super) struct Submit {
    pub(super) events: Vec<(Event, Vec<u8>)>,
    pub(super) conversations: Vec<ConversationKey>,
    pub(super) reply: oneshot::Sender<Result<SeqRange>>,
}
