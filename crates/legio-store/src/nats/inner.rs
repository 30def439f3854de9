//! What the NATS log's parts share (a leaf module): the state behind a `NatsLog` handle
//! ([`Inner`], its methods are in log.rs), an append on its way to the dispatcher ([`Submit`]),
//! and the read chunk.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, MutexGuard};

use legio_core::{ConversationKey, Event, Seq, SeqRange};
use tokio::sync::{mpsc, oneshot, watch};

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
    /// Whether appends queued behind one in flight leave as one atomic batch: with replicas 3
    /// (where it raised the append rate about 3x in `nats_append`), not with 1, where a single
    /// server held every atomic batch for tens of milliseconds (nats-server 2.15.1).
    pub(super) group_appends: bool,
    pub(super) following: AtomicBool,
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
