//! The key-value surface the log is built on: a few ordered trees. The sled backend and the
//! in-memory backend both provide it, so the log's logic (seq assignment, indexes, reads, verify)
//! is written once.

use std::ops::ControlFlow;

use legio_core::Seq;

use crate::error::Result;

/// The trees of the log (see `keys` for their layouts).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub(crate) enum TreeId {
    Chunks,
    Lists,
    Sessions,
    Meta,
}

impl TreeId {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Chunks => "chunks",
            Self::Lists => "lists",
            Self::Sessions => "sessions",
            Self::Meta => "meta",
        }
    }
}

/// Writes for one commit. The backend applies `chunks` as one atomic batch first (a group's
/// events are stored all or none), then `puts` and `removes` in order, then `indexed` (list
/// entries, then the watermark).
#[derive(Default, Debug)]
pub(crate) struct WriteSet {
    pub(crate) chunks: Vec<(Vec<u8>, Vec<u8>)>,
    pub(crate) puts: Vec<(TreeId, Vec<u8>, Vec<u8>)>,
    pub(crate) removes: Vec<(TreeId, Vec<u8>)>,
    pub(crate) indexed: Option<Indexed>,
    pub(crate) bytes: u64,
}

/// List entries and the watermark `meta/indexed_through` they bring the lists up to, the
/// watermark stored last: the stored entries at or below the stored watermark then hold exactly
/// the seqs up to it. Entries above it (a write cut short) are ignored by readers and written
/// again, under the same keys, by recovery.
#[derive(Debug)]
pub(crate) struct Indexed {
    pub(crate) lists: Vec<(Vec<u8>, Vec<u8>)>,
    pub(crate) through: Seq,
}

impl WriteSet {
    pub(crate) fn put(&mut self, tree: TreeId, key: Vec<u8>, value: Vec<u8>) {
        self.bytes += (key.len() + value.len()) as u64;
        self.puts.push((tree, key, value));
    }

    pub(crate) fn put_chunk(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.bytes += (key.len() + value.len()) as u64;
        self.chunks.push((key, value));
    }

    /// Sets the list entries to store together with the watermark `through`.
    pub(crate) fn index(&mut self, lists: Vec<(Vec<u8>, Vec<u8>)>, through: Seq) {
        self.bytes += lists
            .iter()
            .map(|(k, v)| (k.len() + v.len()) as u64)
            .sum::<u64>();
        self.indexed = Some(Indexed { lists, through });
    }
}

/// What a scan calls for each key and value; `Break` stops the scan.
pub(crate) type Visitor<'a> = dyn FnMut(&[u8], &[u8]) -> ControlFlow<()> + 'a;

/// Direction of a scan.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Direction {
    Forward,
    Backward,
}

/// An ordered key-value store with named trees.
pub(crate) trait Backend: Send + Sync + 'static {
    /// A stored value, shared rather than copied where the backend can.
    type Value: AsRef<[u8]> + Clone + Send + Sync + std::fmt::Debug;

    /// Reads one key.
    fn get(&self, tree: TreeId, key: &[u8]) -> Result<Option<Self::Value>>;

    /// The last entry whose key is at most `key`, if its key starts with `prefix`.
    fn floor(
        &self,
        tree: TreeId,
        prefix: &[u8],
        key: &[u8],
    ) -> Result<Option<(Vec<u8>, Self::Value)>>;

    /// Visits keys in `[start, end)` in `direction` until `visit` breaks.
    fn scan(
        &self,
        tree: TreeId,
        start: &[u8],
        end: Option<&[u8]>,
        direction: Direction,
        visit: &mut Visitor<'_>,
    ) -> Result<()>;

    /// The last key and value of a tree.
    fn last(&self, tree: TreeId) -> Result<Option<(Vec<u8>, Self::Value)>>;

    /// Applies a write set (not yet durable).
    fn apply(&self, writes: WriteSet) -> Result<()>;

    /// Bytes on disk, if the backend has a disk.
    fn size_on_disk(&self) -> Result<u64>;
}
