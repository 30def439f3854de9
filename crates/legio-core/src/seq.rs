//! Log positions: `Seq`, assigned by the log, gap-free and strictly increasing across the whole log.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The position of an event in the log. The first event has seq 1; `Seq::ZERO` means "before the
/// first event" (for example "nothing delivered yet").
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct Seq(pub u64);

impl Seq {
    /// Before the first event.
    pub const ZERO: Seq = Seq(0);
    /// The first event's seq.
    pub const FIRST: Seq = Seq(1);

    /// The next seq.
    pub fn next(self) -> Seq {
        Seq(self.0 + 1)
    }

    /// The seq as a number.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Debug for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// An inclusive, non-empty range of seqs: what one append was given.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct SeqRange {
    /// The first seq of the range.
    pub first: Seq,
    /// The last seq of the range (equal to `first` for one event).
    pub last: Seq,
}

impl SeqRange {
    /// How many seqs the range holds.
    pub fn len(&self) -> u64 {
        self.last.0 - self.first.0 + 1
    }

    /// Never true: a range holds at least one seq.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Every seq in the range, in order.
    pub fn iter(&self) -> impl Iterator<Item = Seq> {
        (self.first.0..=self.last.0).map(Seq)
    }
}
