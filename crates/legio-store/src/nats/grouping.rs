//! Which appends of the NATS log leave together as one atomic batch, by the stream's replica
//! count: the dispatcher's policy (`write.rs`), kept apart so the log's state can name it; and,
//! with replicas 1, how long a batch waits to be fuller ([`Linger`]).

use std::time::Duration;

use tokio::time::Instant;

/// Replicas 1: how long a batch that would carry fewer appends than the last one waits for the
/// others ([`Linger`]). A single server's batch costs about the same whatever it holds (a few
/// milliseconds: docs/cluster.md, "The write path"; docs/benchmarks.md, cluster_turns), so a batch sent with the one reply that came
/// first makes the writers the last acknowledgement woke, back a moment later, wait a batch more.
pub(super) const LINGER: Duration = Duration::from_millis(2);

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

    /// How long a batch that would carry fewer appends than the last one may wait for more
    /// ([`Linger`]): with replicas 1 only, where one batch is in flight and costs the same
    /// whatever it holds.
    pub(super) fn linger(self) -> Option<Duration> {
        match self {
            Self::All => None,
            Self::Batches => Some(LINGER),
        }
    }

    /// Whether an append of `events` events leaves alone (as its own publish, in no slot).
    pub(super) fn alone(self, events: usize) -> bool {
        self == Self::Batches && events == 1
    }
}

/// The wait of a batch for the appends the last batch carried (replicas 1). A batch that could
/// leave waits while fewer appends that would join it are queued than the last batch carried,
/// for at most the linger from the moment it could first have left. With one writer the last
/// batch held one append, so nothing waits; with many, the writers that the last
/// acknowledgement woke come back within the linger and leave together, instead of the first
/// one alone and the others a whole batch later (`cluster_turns`, R1: about 1.7 times the turns).
#[derive(Debug, Default)]
pub(super) struct Linger {
    /// How many appends the last batch carried.
    last: usize,
    /// Until when the batch that could leave waits.
    until: Option<Instant>,
}

impl Linger {
    /// Whether a batch that could leave now, with `ready` appends, waits (for at most `linger`).
    pub(super) fn holds(&mut self, ready: usize, now: Instant, linger: Duration) -> bool {
        if ready == 0 || ready >= self.last {
            self.until = None;
            return false;
        }
        let until = *self.until.get_or_insert(now + linger);
        if now < until {
            return true;
        }
        self.until = None;
        false
    }

    /// A batch of `appends` appends left.
    pub(super) fn sent(&mut self, appends: usize) {
        self.last = appends;
        self.until = None;
    }

    /// When the batch that waits must leave, if one waits.
    pub(super) fn until(&self) -> Option<Instant> {
        self.until
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (last batch's appends, a step: (ms since the start, appends ready, holds?)).
    #[test]
    fn a_batch_waits_for_as_many_appends_as_the_last_carried_for_at_most_the_linger() {
        type Step = (u64, usize, bool);
        let cases: [(&str, usize, &[Step]); 6] = [
            ("first batch: nothing to wait for", 0, &[(0, 1, false)]),
            (
                "one writer: never waits",
                1,
                &[(0, 1, false), (5, 1, false)],
            ),
            ("fewer than last: waits", 16, &[(0, 1, true), (1, 5, true)]),
            (
                "the others came: leaves",
                16,
                &[(0, 1, true), (1, 16, false)],
            ),
            ("more than last: leaves at once", 4, &[(0, 9, false)]),
            (
                "the linger is up: leaves",
                16,
                &[(0, 1, true), (1, 3, true), (2, 3, false)],
            ),
        ];
        let start = Instant::now();
        for (case, last, steps) in cases {
            let mut linger = Linger::default();
            linger.sent(last);
            for &(ms, ready, holds) in steps {
                let now = start + Duration::from_millis(ms);
                let held = linger.holds(ready, now, Duration::from_millis(2));
                assert_eq!(held, holds, "{case}: at {ms} ms with {ready} ready");
                assert_eq!(
                    linger.until().is_some(),
                    held,
                    "{case}: the timer at {ms} ms"
                );
            }
        }
    }

    #[test]
    fn the_wait_is_counted_from_when_the_batch_could_first_leave() {
        let (start, linger) = (Instant::now(), Duration::from_millis(2));
        let mut wait = Linger::default();
        wait.sent(8);
        assert!(wait.holds(1, start, linger));
        assert_eq!(wait.until(), Some(start + linger));
        assert!(wait.holds(2, start + Duration::from_millis(1), linger));
        assert_eq!(
            wait.until(),
            Some(start + linger),
            "a later check keeps the deadline"
        );
        assert!(!wait.holds(2, start + linger, linger));
        assert_eq!(wait.until(), None);
        wait.sent(2);
        let later = start + linger * 3;
        assert!(wait.holds(1, later, linger), "the next batch waits anew");
        assert_eq!(wait.until(), Some(later + linger));
    }
}
