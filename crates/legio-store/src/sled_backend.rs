//! sled as the `Engine`'s backend: the database, its trees and the fsyncs of its data file, blob
//! files and folder (a leaf module: the sled log and the layout migration both use it).

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use legio_core::Seq;

use crate::backend::{Backend, Direction, Indexed, TreeId, Visitor, WriteSet};
use crate::error::{Result, StoreError};
use crate::keys;
use crate::layout::LAYOUT_VERSION;
use crate::metrics as m;
use crate::options::{Durability, StoreOptions};

pub(crate) struct SledBackend {
    /// sled's handles; taken (and leaked) on drop after a commit failure (see `Drop`).
    sled: Option<Sled>,
    pub(crate) path: PathBuf,
    /// The folder errors name: `path`, or the original of a read-only copy.
    origin: PathBuf,
    data_file: File,
    blobs: Mutex<BlobsSeen>,
    /// The first commit failure: from then on nothing is flushed (after a failed write sled may
    /// wait forever in its flush) and every append is refused with it.
    failure: Mutex<Option<StoreError>>,
}

/// What the last listing of sled's blob folder found.
#[derive(Default)]
struct BlobsSeen {
    /// The blob files present then (each fsynced).
    synced: HashSet<OsString>,
    /// The folder's mtime, when the listing came at least [`BLOBS_QUIET`] after it.
    settled: Option<SystemTime>,
}

/// How long the blob folder must have been unchanged before a listing trusts its mtime: more
/// than the granularity of a file system's timestamps (a coarse clock tick, or seconds on some
/// file systems), so an entry added after the listing cannot leave the mtime as it was.
const BLOBS_QUIET: Duration = Duration::from_secs(3);

/// sled's database and the log's trees in it.
struct Sled {
    db: sled::Db,
    trees: [sled::Tree; 4],
}

impl Drop for SledBackend {
    fn drop(&mut self) {
        // sled flushes when its last handle drops, and after a failed write that flush waits
        // forever (it never sees the failed interval become stable): leak the handles instead.
        // The process exits with the failure reported; nothing unflushed was acknowledged.
        if self.failure().is_some() {
            std::mem::forget(self.sled.take());
        }
    }
}

impl std::fmt::Debug for SledBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledBackend")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

pub(crate) fn sled_err(during: &'static str) -> impl Fn(sled::Error) -> StoreError {
    move |e| StoreError::io(during, e)
}

impl SledBackend {
    pub(crate) fn open(path: &Path, origin: &Path, options: &StoreOptions) -> Result<Self> {
        if !options.create_if_missing && !path.join("db").exists() {
            return Err(StoreError::NotFound {
                path: path.to_owned(),
            });
        }
        let config = |segment_size: usize| {
            sled::Config::new()
                .path(path)
                .cache_capacity(options.cache_capacity_bytes)
                .segment_size(segment_size)
                .flush_every_ms(match options.durability {
                    // The committer flushes every group itself.
                    Durability::Sync => None,
                    Durability::Relaxed { flush_every } => {
                        Some(flush_every.as_millis().max(1) as u64)
                    }
                })
        };
        let db = open_with_lock_grace(config, path, origin)?;
        let tree = |id: TreeId| db.open_tree(id.name()).map_err(sled_err("opening a tree"));
        let trees = [
            tree(TreeId::Chunks)?,
            tree(TreeId::Lists)?,
            tree(TreeId::Sessions)?,
            tree(TreeId::Meta)?,
        ];
        let data_file = File::open(path.join("db"))
            .map_err(|e| StoreError::io("opening the data file for fsync", e))?;
        let backend = Self {
            sled: Some(Sled { db, trees }),
            path: path.to_owned(),
            origin: origin.to_owned(),
            data_file,
            blobs: Mutex::new(BlobsSeen::default()),
            failure: Mutex::new(None),
        };
        // Make the files' directory entries durable once (a fresh database's `db` file).
        if options.sync_on_open {
            backend.sync()?;
            sync_dir(path)?;
        }
        Ok(backend)
    }

    fn sled(&self) -> &Sled {
        match &self.sled {
            Some(sled) => sled,
            // Taken only in `drop`, after which nothing can call this.
            None => unreachable!("sled's handles are taken only on drop"),
        }
    }

    /// The first commit failure, if a commit failed.
    pub(crate) fn failure(&self) -> Option<StoreError> {
        self.failure.lock().ok().and_then(|f| f.clone())
    }

    /// Records a commit failure (the first one stays).
    pub(crate) fn fail(&self, error: &StoreError) {
        if let Ok(mut failure) = self.failure.lock() {
            failure.get_or_insert_with(|| error.clone());
        }
    }

    /// A failed read as a store error: a damaged or missing file is [`StoreError::Damaged`],
    /// naming the file and, for an event's chunk, the seq read (or scanned from).
    fn read_failure(&self, e: sled::Error, tree: TreeId, key: &[u8]) -> StoreError {
        let seq = match tree {
            TreeId::Chunks => crate::keys::seq_suffix(key),
            _ => None,
        };
        describe_failure(&self.origin, e, "reading", seq)
    }

    /// Stores list entries, then the watermark, as plain sled writes (each takes sled's global
    /// lock only shared, so groups and reads go on meanwhile; a batch or a transaction would hold
    /// it exclusively for the whole write). Every entry's key is its list's first seq past the
    /// stored watermark and readers take stored entries only up to the watermark they hold, so
    /// entries written before a crash without their watermark are ignored, and recovery writes
    /// them again under the same keys. sled's log keeps writes in order: a recovered watermark
    /// comes with every entry written before it.
    fn apply_indexed(&self, indexed: Indexed) -> Result<()> {
        let lists = self.tree(TreeId::Lists);
        for (key, value) in indexed.lists {
            lists
                .insert(key, value)
                .map_err(sled_err("writing list entries"))?;
        }
        let through = crate::keys::seq_key(indexed.through);
        self.tree(TreeId::Meta)
            .insert(crate::keys::META_INDEXED_THROUGH, &through[..])
            .map_err(sled_err("writing the index watermark"))?;
        Ok(())
    }

    pub(crate) fn tree(&self, id: TreeId) -> &sled::Tree {
        &self.sled().trees[id as usize]
    }

    pub(crate) fn db(&self) -> &sled::Db {
        &self.sled().db
    }

    /// Whether the last process that wrote the log closed it cleanly at `last`: everything on
    /// disk was made durable then, and no group was applied since (the mark is removed before
    /// any), so a reading open need not sync. A mark naming another seq is not trusted.
    pub(crate) fn closed_clean_at(&self, last: Seq) -> Result<bool> {
        let Some(value) = self.get(TreeId::Meta, keys::META_CLOSED)? else {
            return Ok(false);
        };
        let mut expected = vec![LAYOUT_VERSION];
        expected.extend_from_slice(&last.0.to_le_bytes());
        Ok(value[..] == expected[..])
    }

    /// Leaves the clean-close mark for `last`, durably. Call it only right after a sync of
    /// everything, with no group applied since.
    pub(crate) fn mark_closed(&self, last: Seq) -> Result<()> {
        let mut value = vec![LAYOUT_VERSION];
        value.extend_from_slice(&last.0.to_le_bytes());
        self.tree(TreeId::Meta)
            .insert(keys::META_CLOSED, value)
            .map_err(sled_err("marking a clean close"))?;
        self.sync()
    }

    /// Removes the clean-close mark before a group is applied. No sync: sled's log keeps writes
    /// in order, so any state of the disk that holds the group's writes holds this removal too.
    pub(crate) fn clear_closed(&self) -> Result<()> {
        self.tree(TreeId::Meta)
            .remove(keys::META_CLOSED)
            .map_err(sled_err("removing the clean-close mark"))?;
        Ok(())
    }

    /// Makes everything applied so far durable: sled's flush, then a real fdatasync of the data
    /// file, then fsync of blob files sled wrote since the last sync (sled never fsyncs them).
    pub(crate) fn sync(&self) -> Result<()> {
        if let Some(failure) = self.failure() {
            return Err(failure);
        }
        let started = Instant::now();
        self.sled().db.flush().map_err(sled_err("flushing"))?;
        let flushed = Instant::now();
        m::commit_step("flush", flushed - started);
        self.data_file
            .sync_data()
            .map_err(|e| StoreError::io("fdatasync of the data file", e))?;
        m::commit_step("fdatasync", flushed.elapsed());
        let fsyncs = 1 + self.sync_new_blobs()?;
        m::fsyncs(fsyncs);
        Ok(())
    }

    /// Fsyncs the blob files sled wrote since the last sync, then the blob folder; returns how
    /// many fsyncs that took. The folder is listed only when its mtime moved since a listing
    /// that came [`BLOBS_QUIET`] after its last change (any entry added later moves the mtime
    /// past the one remembered), so a sync with no new blob costs one `stat`.
    fn sync_new_blobs(&self) -> Result<u64> {
        let blob_dir = self.path.join("blobs");
        let Ok(mtime) = std::fs::metadata(&blob_dir).and_then(|m| m.modified()) else {
            return Ok(0);
        };
        let mut seen = self
            .blobs
            .lock()
            .map_err(|_| StoreError::io("syncing blobs", "lock poisoned"))?;
        if seen.settled == Some(mtime) {
            return Ok(0);
        }
        let Ok(entries) = std::fs::read_dir(&blob_dir) else {
            return Ok(0);
        };
        let mut fsyncs = 0;
        let mut present = HashSet::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            // A blob may be removed by sled's GC between listing and opening: skip it.
            if !seen.synced.contains(&name) {
                if let Ok(file) = File::open(entry.path()) {
                    file.sync_all()
                        .map_err(|e| StoreError::io("fsync of a blob file", e))?;
                    fsyncs += 1;
                }
            }
            present.insert(name);
        }
        if fsyncs > 0 {
            sync_dir(&blob_dir)?;
            fsyncs += 1;
        }
        seen.synced = present;
        seen.settled = SystemTime::now()
            .duration_since(mtime)
            .is_ok_and(|age| age >= BLOBS_QUIET)
            .then_some(mtime);
        Ok(fsyncs)
    }
}

/// How long `open` keeps retrying a held lock. sled hands some writes to its own thread pool,
/// which can hold the file (and its lock) for a moment after the last handle in this process is
/// dropped; a lock held by another live process is still reported within this time.
pub(crate) const LOCK_GRACE: Duration = Duration::from_millis(500);

/// The size of sled's log segments (and io buffers) in a database this build creates. sled
/// writes a page whose serialized size is over a quarter of a segment to a blob file of its own,
/// which a sync must then fsync with the blob folder; a leaf of 17 chunks of
/// [`crate::layout::CHUNK_BYTES`] (sled splits leaves above 16 items) is about 840 KB, which
/// 4 MiB segments keep in the log (sled's default of 512 KiB did not). sled refuses to open a
/// database with another segment size than the one it was created with (its `conf` file).
const SEGMENT_BYTES: usize = 4 << 20;

/// The segment size of databases created by earlier builds (sled's default).
const OLD_SEGMENT_BYTES: usize = 512 << 10;

/// Opens the database, waiting up to [`LOCK_GRACE`] for a held lock; a database sled created
/// with [`OLD_SEGMENT_BYTES`] is opened again with that size (`config` builds sled's
/// configuration for a segment size).
fn open_with_lock_grace(
    config: impl Fn(usize) -> sled::Config,
    path: &Path,
    origin: &Path,
) -> Result<sled::Db> {
    let deadline = Instant::now() + LOCK_GRACE;
    let mut cleared = false;
    let mut segment_size = SEGMENT_BYTES;
    loop {
        match config(segment_size).open() {
            Ok(db) => return Ok(db),
            Err(sled::Error::Unsupported(why))
                if why.contains("io buffer size") && segment_size != OLD_SEGMENT_BYTES =>
            {
                segment_size = OLD_SEGMENT_BYTES;
            }
            Err(sled::Error::Corruption { .. })
                if !cleared && remove_unfinished_snapshots(path)? =>
            {
                cleared = true;
            }
            Err(e) => {
                let text = e.to_string();
                if !text.contains("could not acquire lock") {
                    return Err(
                        match describe_failure(origin, e, "opening the database", None) {
                            StoreError::Io {
                                during,
                                kind,
                                cause,
                                ..
                            } => StoreError::Io {
                                during,
                                kind,
                                cause,
                                source: crate::ErrorSource::new(format!(
                                    "{} ({text})",
                                    path.display()
                                )),
                            },
                            damaged => damaged,
                        },
                    );
                }
                if Instant::now() >= deadline {
                    return Err(StoreError::Locked {
                        path: path.to_owned(),
                    });
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// A sled failure as a store error. Corruption names the file sled found it in: a blob file
/// (`blobs/N`), else, on open, sled's newest snapshot file when there is one (a damaged snapshot
/// is reported with no location), else the data file `db`. A missing blob (or blob folder) is
/// damage too, not an I/O failure.
pub(crate) fn describe_failure(
    path: &Path,
    e: sled::Error,
    during: &'static str,
    seq: Option<Seq>,
) -> StoreError {
    let damaged = |file: PathBuf, reason: String| StoreError::Damaged { file, seq, reason };
    match e {
        sled::Error::Corruption { at, .. } => {
            let at = format!("{at:?}");
            if let Some(blob) = blob_named(&at) {
                let reason = "sled found corrupt data in this blob file".to_owned();
                return damaged(path.join("blobs").join(blob), reason);
            }
            if at == "None" && during != "reading" {
                // Opening: sled's snapshot, or (it says no more) the data file or a blob.
                if let Some(snapshot) = damaged_snapshot(path) {
                    let reason =
                        "its checksum does not match; it is only a cache of the log".into();
                    return damaged(snapshot, reason);
                }
                let reason = "sled found corrupt data while opening it (in the data file `db` or \
                              a blob file)";
                return damaged(path.to_owned(), reason.into());
            }
            damaged(
                path.join("db"),
                format!("sled found corrupt data (at {at})"),
            )
        }
        sled::Error::Io(io) if io.kind() == std::io::ErrorKind::NotFound && during == "reading" => {
            let blobs = path.join("blobs");
            let reason = if blobs.is_dir() {
                "a blob file is missing"
            } else {
                "the blob folder is missing"
            };
            damaged(blobs, format!("{reason} ({io})"))
        }
        e => StoreError::io(during, e),
    }
}

/// The blob pointer in sled's `Some(Blob(lid, ptr))`, which is the blob file's name.
fn blob_named(at: &str) -> Option<String> {
    let inner = at.split("Blob(").nth(1)?;
    let ptr = inner.split(')').next()?.split(',').nth(1)?.trim();
    ptr.parse::<u64>().ok().map(|n| n.to_string())
}

/// sled's newest finished snapshot file when it is damaged: shorter than its trailer, or its
/// CRC-32 (sled's trailer: the length as 8 bytes, then the CRC of what comes before them, as 4
/// little-endian bytes) does not match.
pub(crate) fn damaged_snapshot(path: &Path) -> Option<PathBuf> {
    let snapshot = newest_snapshot(path)?;
    let bytes = std::fs::read(&snapshot).ok()?;
    if bytes.len() <= 12 {
        return Some(snapshot);
    }
    let (body, trailer) = bytes.split_at(bytes.len() - 12);
    let expected = u32::from_le_bytes(trailer[8..12].try_into().ok()?);
    (crc32(body) != expected).then_some(snapshot)
}

/// CRC-32 (IEEE, reflected), as sled computes it for its snapshot files.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// sled's newest finished snapshot file in the database folder.
fn newest_snapshot(path: &Path) -> Option<PathBuf> {
    let mut snapshots: Vec<PathBuf> = std::fs::read_dir(path)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("snap.") && !n.ends_with(".generating"))
        })
        .collect();
    snapshots.sort();
    snapshots.pop()
}

/// Removes sled's unfinished snapshot files (`snap.*.generating`) and says whether there were
/// any. sled writes a snapshot to such a file and renames it only once it is complete and
/// synced, so one left behind (a full disk during an open, a crash) holds nothing the log needs;
/// but sled 0.34 picks it as the newest snapshot and then reports the whole log corrupt. Called
/// only after an open failed as corrupt: the failed open held the lock, so no other process is
/// writing a snapshot here.
fn remove_unfinished_snapshots(path: &Path) -> Result<bool> {
    let entries =
        std::fs::read_dir(path).map_err(|e| StoreError::io("listing the database folder", e))?;
    let mut removed = false;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("snap.") && name.ends_with(".generating") {
            std::fs::remove_file(entry.path())
                .map_err(|e| StoreError::io("removing an unfinished snapshot file", e))?;
            tracing::warn!(file = %entry.path().display(), "removed an unfinished snapshot file (left by a full disk or a crash during an earlier open)");
            removed = true;
        }
    }
    Ok(removed)
}

fn sync_dir(path: &Path) -> Result<()> {
    File::open(path)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io("fsync of the database folder", e))
}

impl Backend for SledBackend {
    type Value = sled::IVec;

    fn get(&self, tree: TreeId, key: &[u8]) -> Result<Option<Self::Value>> {
        self.tree(tree)
            .get(key)
            .map_err(|e| self.read_failure(e, tree, key))
    }

    fn floor(
        &self,
        tree: TreeId,
        prefix: &[u8],
        key: &[u8],
    ) -> Result<Option<(Vec<u8>, Self::Value)>> {
        let found = self
            .tree(tree)
            .range::<&[u8], _>(..=key)
            .next_back()
            .transpose()
            .map_err(|e| self.read_failure(e, tree, key))?;
        Ok(found
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.to_vec(), v)))
    }

    fn scan(
        &self,
        tree: TreeId,
        start: &[u8],
        end: Option<&[u8]>,
        direction: Direction,
        visit: &mut Visitor<'_>,
    ) -> Result<()> {
        let tree_id = tree;
        let tree = self.tree(tree);
        let iter = match end {
            Some(end) => tree.range(start..end),
            None => tree.range(start..),
        };
        let mut step = |item: sled::Result<(sled::IVec, sled::IVec)>| -> Result<bool> {
            let (k, v) = item.map_err(|e| self.read_failure(e, tree_id, start))?;
            Ok(visit(&k, &v).is_break())
        };
        match direction {
            Direction::Forward => {
                for item in iter {
                    if step(item)? {
                        break;
                    }
                }
            }
            Direction::Backward => {
                for item in iter.rev() {
                    if step(item)? {
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    fn last(&self, tree: TreeId) -> Result<Option<(Vec<u8>, Self::Value)>> {
        Ok(self
            .tree(tree)
            .last()
            .map_err(|e| self.read_failure(e, tree, &[]))?
            .map(|(k, v)| (k.to_vec(), v)))
    }

    fn apply(&self, writes: WriteSet) -> Result<()> {
        // One sled batch for the chunks: a group's events are stored all or none. Session states
        // are plain writes after them (recovery re-folds every event past the watermark, and a
        // fold skips what a state already holds); list entries and the watermark go last, in
        // plain writes (`apply_indexed`), written every few groups, not per group.
        if !writes.chunks.is_empty() {
            let mut chunks = sled::Batch::default();
            for (key, value) in writes.chunks {
                chunks.insert(key, value);
            }
            self.tree(TreeId::Chunks)
                .apply_batch(chunks)
                .map_err(sled_err("applying a batch"))?;
        }
        for (tree, key, value) in writes.puts {
            self.tree(tree)
                .insert(key, value)
                .map_err(sled_err("writing an index entry"))?;
        }
        for (tree, key) in writes.removes {
            self.tree(tree)
                .remove(key)
                .map_err(sled_err("removing a key"))?;
        }
        match writes.indexed {
            Some(indexed) => self.apply_indexed(indexed),
            None => Ok(()),
        }
    }

    fn size_on_disk(&self) -> Result<u64> {
        self.sled()
            .db
            .size_on_disk()
            .map_err(sled_err("measuring size"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A blob sled writes after the folder's mtime was trusted moves the mtime, and the next
    /// sync finds and fsyncs it (with the folder).
    #[test]
    fn a_blob_written_after_the_folder_settled_is_fsynced() {
        let dir = tempfile::tempdir().unwrap();
        let backend = SledBackend::open(dir.path(), dir.path(), &StoreOptions::default()).unwrap();
        let blobs = dir.path().join("blobs");
        let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
        File::open(&blobs)
            .unwrap()
            .set_modified(an_hour_ago)
            .unwrap();
        assert_eq!(backend.sync_new_blobs().unwrap(), 0, "an empty folder");
        assert_eq!(backend.blobs.lock().unwrap().settled, Some(an_hour_ago));
        // Over a quarter of a 4 MiB segment: sled writes it to a blob file.
        backend
            .tree(TreeId::Chunks)
            .insert(b"big", vec![7u8; 2 << 20])
            .unwrap();
        backend.db().flush().unwrap();
        assert_eq!(std::fs::read_dir(&blobs).unwrap().count(), 1);
        assert_eq!(
            backend.sync_new_blobs().unwrap(),
            2,
            "the blob and the folder"
        );
        assert_eq!(backend.sync_new_blobs().unwrap(), 0, "nothing new");
    }
}
