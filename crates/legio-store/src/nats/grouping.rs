//! Which appends of the NATS log leave together as one atomic batch, by the stream's replica
//! count: the dispatcher's policy (`write.rs`), kept apart so the log's state can name it.

/// Which appends leave together as one atomic batch (chosen by the stream's replica count).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Grouping {
    /// Replicas 3: every append queued meanwhile, of any conversation, joins one batch, at most
    /// 4 batches in flight: one commit of the cluster for all of them (it raised the append
    /// rate about 3x in `nats_append`).
    All,
    /// Replicas 1: an append of one event leaves alone, as one publish, at once; appends of
    /// several events queued meanwhile leave together as one batch, one batch in flight. A
    /// single nats-server stages every atomic batch of a file stream in a file store of its own
    /// (created, fsynced and removed before the ack), one batch at a time and at about the same
    /// cost whatever its size, while one publish costs about a tenth of a millisecond.
    Batches,
}

impl Grouping {
    /// The grouping for a stream of `replicas` copies.
    pub(super) fn for_replicas(replicas: usize) -> Self {
        if replicas > 1 {
            Self::All
        } else {
            Self::Batches
        }
    }

    /// How many batches may be in flight at once; appends that come meanwhile queue and leave
    /// together as the next one.
    pub(super) fn slots(self) -> usize {
        match self {
            Self::All => 4,
            Self::Batches => 1,
        }
    }

    /// Whether an append of `events` events leaves alone (as its own publish, in no slot).
    pub(super) fn alone(self, events: usize) -> bool {
        self == Self::Batches && events == 1
    }
}
