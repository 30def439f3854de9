//! What the NATS log's parts share (a leaf module): the state behind a `NatsLog` handle
//! ([`Inner`], its methods are in log.rs), an append on its way to the dispatcher ([`Submit`]),
//! and the read chunk.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, Weak};

use legio_core::{ConversationKey, Event, Record, Seq, SeqRange};
use tokio::sync::{mpsc, oneshot, watch};

use super::grouping::Grouping;
use super::leader::Steering;
use super::options::NatsOptions;
use super::projection::Projection;
use super::publish::Publisher;
use super::subject::Subjects;
use super::sync::lock;
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
    /// Keeps a writer's connection on the stream's leader.
    pub(super) steering: Steering,
}

/// How many of this node's latest appended events [`Recent`] keeps.
const RECENT_EVENTS: usize = 4096;

/// The projections holding the events this node appended lately, by seq: a read of one of them
/// by seq (a turn reads the message it answers, which this node appended just before) is served
/// from the projection instead of two requests to the stream's leader (its state, then the
/// message). Bounded: the oldest seq leaves when a new one comes. It holds the projections
/// weakly, so a projection this node dropped (forgotten, stood down) is freed at once, and a read
/// of its seqs goes to the stream.
#[derive(Default)]
pub(super) struct Recent {
    by_seq: HashMap<u64, Weak<Mutex<Projection>>>,
    order: VecDeque<u64>,
}

impl Recent {
    /// Remembers that `projection` holds the event at `seq` (acknowledged).
    pub(super) fn insert(&mut self, seq: Seq, projection: &Arc<Mutex<Projection>>) {
        if self
            .by_seq
            .insert(seq.0, Arc::downgrade(projection))
            .is_none()
        {
            self.order.push_back(seq.0);
        }
        while self.order.len() > RECENT_EVENTS {
            if let Some(old) = self.order.pop_front() {
                self.by_seq.remove(&old);
            }
        }
    }

    /// The event at `seq`, if this node appended it lately and still holds its projection.
    pub(super) fn record(&self, seq: Seq) -> Option<Record> {
        let projection = self.by_seq.get(&seq.0)?.upgrade()?;
        let record = lock(&projection).record_at(seq);
        record
    }
}

/// An append waiting for its turn: its conversation may have an append in flight.
pub(super) struct Submit {
    pub(super) events: Vec<(Event, Vec<u8>)>,
    pub(super) conversations: Vec<ConversationKey>,
    pub(super) reply: oneshot::Sender<Result<SeqRange>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_events::text_event;
    use legio_core::{Audience, ConversationKey};

    fn record(seq: u64, conversation: &ConversationKey) -> Record {
        Record {
            seq: Seq(seq),
            event: text_event(seq, conversation.clone(), Audience::All),
        }
    }

    #[test]
    fn recent_serves_a_held_projection_and_lets_a_dropped_one_go() {
        let kept = ConversationKey::new("t:kept").unwrap();
        let dropped = ConversationKey::new("t:dropped").unwrap();
        let mut recent = Recent::default();
        let held = Arc::new(Mutex::new(Projection::new(kept.clone())));
        let gone = Arc::new(Mutex::new(Projection::new(dropped.clone())));
        lock(&held).apply(record(1, &kept));
        lock(&gone).apply(record(2, &dropped));
        recent.insert(Seq(1), &held);
        recent.insert(Seq(2), &gone);
        assert_eq!(recent.record(Seq(2)).map(|r| r.seq), Some(Seq(2)));
        let weak = Arc::downgrade(&gone);
        drop(gone);
        assert!(
            weak.upgrade().is_none(),
            "Recent must not keep a dropped projection alive"
        );
        assert!(recent.record(Seq(2)).is_none());
        assert_eq!(recent.record(Seq(1)).map(|r| r.seq), Some(Seq(1)));
        // Bounded: the oldest seqs leave as new ones come.
        for seq in 3..3 + RECENT_EVENTS as u64 {
            lock(&held).apply(record(seq, &kept));
            recent.insert(Seq(seq), &held);
        }
        assert!(recent.record(Seq(1)).is_none());
        assert_eq!(recent.by_seq.len(), RECENT_EVENTS);
    }
}
