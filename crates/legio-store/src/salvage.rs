//! Salvage: every event of a damaged log that still decodes, in seq order, and the seq ranges
//! that could not be read, each with the reason (naming the damaged file where sled said). A
//! damaged chunk loses its own events only; a damaged sled node (its page unreadable: a flipped
//! byte in a blob, a missing blob file) hides the chunks it holds, and the walk finds the next
//! readable chunk by probing forward, then narrowing down.

use std::ops::ControlFlow;
use std::path::PathBuf;

use legio_core::{Record, Seq};

use crate::backend::{Backend, Direction, TreeId};
use crate::codec::decode_event;
use crate::error::{Result, StoreError};
use crate::keys;
use crate::layout::Chunk;

/// Seqs that could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostRange {
    /// The first seq lost.
    pub from: Seq,
    /// The last seq lost; `None` when the loss runs to the end of the log (its end unknown).
    pub to: Option<Seq>,
    /// Why, naming the damaged file where known.
    pub reason: String,
}

/// What a salvage found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Salvaged {
    /// Events read and handed to the visitor.
    pub events: u64,
    /// The seq ranges that could not be read, in order.
    pub lost: Vec<LostRange>,
    /// Why the database was read from sled's log alone, if it was.
    pub read_around: Option<ReadAround>,
}

/// Hands every readable event of the log to `visit`, in seq order (it may stop the walk with
/// `Break`), and reports what could not be read.
pub(crate) fn salvage<B: Backend>(
    backend: &B,
    visit: &mut dyn FnMut(Record) -> ControlFlow<()>,
) -> Result<Salvaged> {
    let mut walk = Walk {
        next: Seq::FIRST,
        salvaged: Salvaged::default(),
        stopped: false,
        open: false,
    };
    let mut cursor = Seq::FIRST;
    loop {
        let scanned = backend.scan(
            TreeId::Chunks,
            &keys::seq_key(cursor),
            None,
            Direction::Forward,
            &mut |key, value| walk.chunk(key, value, visit),
        );
        match scanned {
            Ok(()) => break,
            Err(_) if walk.stopped => break,
            Err(e) => {
                let why = unreadable(&e);
                close_open_loss_here(&mut walk);
                walk.open = false;
                match next_readable(backend, walk.next)? {
                    Some(first) => {
                        walk.lose(walk.next, Some(Seq(first.0 - 1)), &why);
                        walk.next = first;
                        cursor = first;
                    }
                    None => {
                        walk.lose(walk.next, None, &why);
                        break;
                    }
                }
            }
        }
    }
    hidden_tail(backend, &mut walk)?;
    Ok(walk.salvaged)
}

/// A chunk that did not parse, followed by an unreadable node: its loss ends where the walk is.
fn close_open_loss_here(walk: &mut Walk) {
    if walk.open {
        let next = walk.next;
        if let Some(last) = walk.salvaged.lost.last_mut() {
            last.to = Some(Seq(next.0 - 1));
        }
        walk.open = false;
    }
}

/// Events the index watermark says were stored past the last one read (sled drops a page it
/// cannot read, such as one whose blob is damaged, without an error).
fn hidden_tail<B: Backend>(backend: &B, walk: &mut Walk) -> Result<()> {
    let watermark = backend
        .get(TreeId::Meta, keys::META_INDEXED_THROUGH)
        .ok()
        .flatten()
        .and_then(|v| keys::seq_suffix(v.as_ref()));
    let ended = walk.salvaged.lost.last().is_some_and(|l| l.to.is_none());
    if let (Some(watermark), false) = (watermark, ended) {
        if watermark >= walk.next {
            let why = "the index watermark says these events were stored, but no readable chunk \
                       holds them: a damaged file hides them (sled drops a page it cannot read)";
            walk.lose(walk.next, Some(watermark), why);
        }
    }
    Ok(())
}

/// Why a stretch of the log could not be read (the scan's own seq is only where it started).
fn unreadable(e: &StoreError) -> String {
    match e {
        StoreError::Damaged { file, reason, .. } => {
            format!("the database file {} is damaged: {reason}", file.display())
        }
        other => other.to_string(),
    }
}

struct Walk {
    /// The next seq expected.
    next: Seq,
    salvaged: Salvaged,
    /// The visitor asked to stop.
    stopped: bool,
    /// The last lost range's end is not known yet: the next chunk found closes it.
    open: bool,
}

impl Walk {
    fn lose(&mut self, from: Seq, to: Option<Seq>, why: &str) {
        if to.is_some_and(|to| to < from) {
            return;
        }
        self.salvaged.lost.push(LostRange {
            from,
            to,
            reason: why.to_owned(),
        });
    }

    /// Closes a loss whose end was unknown (a chunk that did not parse) before `first`.
    fn close_open_loss(&mut self, first: Seq) {
        if self.open {
            if let Some(last) = self.salvaged.lost.last_mut() {
                last.to = Some(Seq(first.0 - 1));
            }
            self.open = false;
            self.next = first;
        }
    }

    fn chunk(
        &mut self,
        key: &[u8],
        value: &[u8],
        visit: &mut dyn FnMut(Record) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let Some(first) = keys::seq_suffix(key) else {
            return ControlFlow::Continue(());
        };
        if first < self.next {
            return ControlFlow::Continue(()); // already read (a probe landed before it)
        }
        self.close_open_loss(first);
        if first > self.next {
            let why = "no stored chunk holds these events (removed from the database)";
            self.lose(self.next, Some(Seq(first.0 - 1)), why);
        }
        self.next = first;
        let chunk = match Chunk::parse(first, value) {
            Ok(chunk) => chunk,
            Err(e) => {
                // Its length is unknown: the next chunk's key closes the range.
                self.lose(first, None, &e.to_string());
                self.open = true;
                self.next = first.next();
                return ControlFlow::Continue(());
            }
        };
        for (seq, record) in chunk.iter() {
            match record.and_then(|bytes| decode_event(seq, bytes)) {
                Ok(event) => {
                    self.salvaged.events += 1;
                    if visit(Record { seq, event }).is_break() {
                        self.stopped = true;
                        return ControlFlow::Break(());
                    }
                }
                Err(e) => self.lose(seq, Some(seq), &e.to_string()),
            }
        }
        self.next = chunk.end_seq();
        ControlFlow::Continue(())
    }
}

/// The first seq of the first chunk that reads at or after `from` (skipping an unreadable
/// node), or `None` when nothing after `from` reads.
fn next_readable<B: Backend>(backend: &B, from: Seq) -> Result<Option<Seq>> {
    // Probe forward with doubling steps until a probe reads, then narrow down between the last
    // failing probe and it.
    let mut failing = from.0;
    let mut step = 1u64;
    let found = loop {
        let Some(at) = from.0.checked_add(step) else {
            return Ok(None);
        };
        match probe(backend, Seq(at)) {
            Probe::Found(first) => break (at, first),
            Probe::End => return Ok(None),
            Probe::Unreadable => {
                failing = at;
                step = step.saturating_mul(2);
            }
        }
    };
    let (mut readable, mut first) = found;
    while readable - failing > 1 {
        let mid = failing + (readable - failing) / 2;
        match probe(backend, Seq(mid)) {
            Probe::Found(at) => {
                readable = mid;
                first = at;
            }
            Probe::End | Probe::Unreadable => failing = mid,
        }
    }
    Ok(Some(first))
}

enum Probe {
    Found(Seq),
    End,
    Unreadable,
}

/// The first chunk stored at or after `at`.
fn probe<B: Backend>(backend: &B, at: Seq) -> Probe {
    let mut found = None;
    let scanned = backend.scan(
        TreeId::Chunks,
        &keys::seq_key(at),
        None,
        Direction::Forward,
        &mut |key, _| {
            found = keys::seq_suffix(key);
            ControlFlow::Break(())
        },
    );
    match (scanned, found) {
        (Err(_), _) => Probe::Unreadable,
        (Ok(()), Some(first)) => Probe::Found(first),
        (Ok(()), None) => Probe::End,
    }
}

/// Why a read-only open or a salvage read the database from sled's log alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadAround {
    /// sled's snapshot file is damaged; it is only a cache of the log: nothing is lost.
    Snapshot(PathBuf),
    /// sled could not open or read the database as it is (a damaged data or blob file): read
    /// from its log alone, which ends at the first record it cannot read, so events stored after
    /// it may be missing without a trace.
    Damage(StoreError),
}

impl std::fmt::Display for ReadAround {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Snapshot(file) => write!(
                f,
                "sled's snapshot file {} is damaged; it is only a cache of the log, which was read \
                 without it (move the file away and the database opens again)",
                file.display()
            ),
            Self::Damage(e) => write!(
                f,
                "{e}; the log was read from sled's log alone, which ends at the first record \
                 sled cannot read: events stored after it may be missing"
            ),
        }
    }
}
