//! The durable event log on sled 0.34.7, with one committer thread doing group commit.
//!
//! Write path (docs/storage.md has the full story): writers validate and encode on their own
//! thread, then send the batch to the committer; the committer drains every waiting batch, applies
//! them in one pass (events, then indexes, then the watermark), calls sled's `flush` (which on
//! Linux only issues `sync_file_range`), then `fdatasync`s sled's data file and any new blob file
//! itself, and only then acknowledges every writer of the group.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use legio_core::{
    AgentName, AgentSessionState, ConversationKey, Event, Record, Seq, SeqRange, Viewer,
};
use tokio::sync::oneshot;

use crate::backend::{Backend, Direction, TreeId, Visitor, WriteSet};
use crate::engine::{Encoded, Engine, Limits};
use crate::error::{Result, StoreError};
use crate::log::{AppendHandle, EventLog, Subscription};
use crate::metrics as m;
use crate::migrate::{self, MigrateProgress, Migration};
use crate::options::{Durability, StoreOptions};
use crate::verify::{self, VerifyProgress, VerifyReport};

/// The most events one commit group takes.
const MAX_GROUP_EVENTS: usize = 4096;

pub(crate) struct SledBackend {
    /// sled's handles; taken (and leaked) on drop after a commit failure (see `Drop`).
    sled: Option<Sled>,
    path: PathBuf,
    /// The folder errors name: `path`, or the original of a read-only copy.
    origin: PathBuf,
    data_file: File,
    synced_blobs: Mutex<HashSet<OsString>>,
    /// The first commit failure: from then on nothing is flushed (after a failed write sled may
    /// wait forever in its flush) and every append is refused with it.
    failure: Mutex<Option<StoreError>>,
}

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
    fn open(path: &Path, origin: &Path, options: &StoreOptions) -> Result<Self> {
        if !options.create_if_missing && !path.join("db").exists() {
            return Err(StoreError::NotFound {
                path: path.to_owned(),
            });
        }
        let config = sled::Config::new()
            .path(path)
            .cache_capacity(options.cache_capacity_bytes)
            .flush_every_ms(match options.durability {
                // The committer flushes every group itself.
                Durability::Sync => None,
                Durability::Relaxed { flush_every } => Some(flush_every.as_millis().max(1) as u64),
            });
        let db = open_with_lock_grace(&config, path, origin)?;
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
            synced_blobs: Mutex::new(HashSet::new()),
            failure: Mutex::new(None),
        };
        // Make the files' directory entries durable once (a fresh database's `db` file).
        backend.sync()?;
        sync_dir(path)?;
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
    fn fail(&self, error: &StoreError) {
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

    pub(crate) fn tree(&self, id: TreeId) -> &sled::Tree {
        &self.sled().trees[id as usize]
    }

    pub(crate) fn db(&self) -> &sled::Db {
        &self.sled().db
    }

    /// Makes everything applied so far durable: sled's flush, then a real fdatasync of the data
    /// file, then fsync of blob files sled wrote since the last sync (sled never fsyncs them).
    pub(crate) fn sync(&self) -> Result<()> {
        if let Some(failure) = self.failure() {
            return Err(failure);
        }
        self.sled().db.flush().map_err(sled_err("flushing"))?;
        self.data_file
            .sync_data()
            .map_err(|e| StoreError::io("fdatasync of the data file", e))?;
        let mut fsyncs = 1;
        let blob_dir = self.path.join("blobs");
        if let Ok(entries) = std::fs::read_dir(&blob_dir) {
            let mut synced = self
                .synced_blobs
                .lock()
                .map_err(|_| StoreError::io("syncing blobs", "lock poisoned"))?;
            let mut present = HashSet::new();
            let mut new_blobs = false;
            for entry in entries.flatten() {
                let name = entry.file_name();
                if !synced.contains(&name) {
                    // A blob may be removed by sled's GC between listing and opening: skip it.
                    if let Ok(file) = File::open(entry.path()) {
                        file.sync_all()
                            .map_err(|e| StoreError::io("fsync of a blob file", e))?;
                        fsyncs += 1;
                        new_blobs = true;
                    }
                }
                present.insert(name);
            }
            if new_blobs {
                sync_dir(&blob_dir)?;
                fsyncs += 1;
            }
            *synced = present;
        }
        m::fsyncs(fsyncs);
        Ok(())
    }
}

/// How long `open` keeps retrying a held lock. sled hands some writes to its own thread pool,
/// which can hold the file (and its lock) for a moment after the last handle in this process is
/// dropped; a lock held by another live process is still reported within this time.
const LOCK_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

fn open_with_lock_grace(config: &sled::Config, path: &Path, origin: &Path) -> Result<sled::Db> {
    let deadline = Instant::now() + LOCK_GRACE;
    let mut cleared = false;
    loop {
        match config.open() {
            Ok(db) => return Ok(db),
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
                            StoreError::Io { during, kind, .. } => StoreError::Io {
                                during,
                                kind,
                                reason: format!("{} ({text})", path.display()),
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
                std::thread::sleep(std::time::Duration::from_millis(10));
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
        // One sled batch for the chunks: a group's events are stored all or none. List entries,
        // session states and the watermark are plain writes after them, in that order: sled's
        // log keeps writes in order, and recovery re-derives every group past the watermark, so
        // they need no batch of their own (each sled batch costs a manifest and a transaction).
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
        Ok(())
    }

    fn size_on_disk(&self) -> Result<u64> {
        self.sled()
            .db
            .size_on_disk()
            .map_err(sled_err("measuring size"))
    }
}

struct Request {
    batch: Vec<Encoded>,
    ack: oneshot::Sender<Result<SeqRange>>,
    submitted: Instant,
}

/// The durable event log. One process may open a database at a time; a second gets
/// `StoreError::Locked`. Dropping the log (or [`SledLog::close`]) drains pending appends, flushes
/// and releases the database.
pub struct SledLog {
    engine: Arc<Engine<SledBackend>>,
    sender: Mutex<Option<mpsc::Sender<Request>>>,
    committer: Mutex<Option<JoinHandle<()>>>,
    durability: Durability,
    migration: Migration,
    /// Set when opened read-only: the private copy the log really is (removed on drop, after the
    /// engine: fields drop in order).
    read_only: Option<ReadOnly>,
}

/// What a read-only open worked on.
#[derive(Debug)]
struct ReadOnly {
    /// The database folder that was asked for (never written).
    original: PathBuf,
    /// Why sled could not open the folder as it is, when the copy had to be read from sled's
    /// log alone (see [`SledLog::read_around`]).
    read_around: Option<ReadAround>,
    _copy: crate::copy::Copy,
}

impl std::fmt::Debug for SledLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledLog")
            .field("path", &self.engine.backend.path)
            .field("durability", &self.durability)
            .field("last_seq", &self.engine.committed())
            .finish()
    }
}

impl SledLog {
    /// Opens (or creates) the log in the folder `path`. A log in layout v1 is migrated to v2
    /// first (crash-safe; see [`SledLog::open_with_progress`]).
    pub fn open(path: impl AsRef<Path>, options: &StoreOptions) -> Result<Self> {
        Self::open_with_progress(path, options, &mut |_| {})
    }

    /// Opens (or creates) the log in the folder `path`, migrating a layout-v1 log to v2 first
    /// and reporting the migration's progress. A migration stopped half way (a crash, a kill)
    /// starts again on the next open: the v1 data is removed only after v2 is complete and
    /// durable.
    pub fn open_with_progress(
        path: impl AsRef<Path>,
        options: &StoreOptions,
        progress: &mut dyn FnMut(MigrateProgress),
    ) -> Result<Self> {
        let path = path.as_ref();
        Self::open_at(path, path, true, options, progress)
    }

    /// Opens the log in `path`, naming `origin` in errors (the original of a read-only copy).
    fn open_at(
        path: &Path,
        origin: &Path,
        writable: bool,
        options: &StoreOptions,
        progress: &mut dyn FnMut(MigrateProgress),
    ) -> Result<Self> {
        let _span = tracing::info_span!("open", path = %origin.display()).entered();
        let backend = SledBackend::open(path, origin, options)?;
        let migration = migrate::run(&backend, progress)?;
        let limits = Limits {
            max_message_bytes: options.max_message_bytes,
        };
        let engine = Arc::new(Engine::open(backend, limits)?);
        if let (Some((from, to)), true) = (engine.hidden_events(), writable) {
            return Err(StoreError::Damaged {
                file: origin.to_owned(),
                seq: Some(from),
                reason: format!(
                    "the index watermark says events up to seq {to} were stored, but the last \
                     one that reads is seq {}: a damaged file (a blob?) hides the rest; the log \
                     takes no appends like this",
                    from.0 - 1
                ),
            });
        }
        // Recovery may have re-derived index entries: make them durable before serving.
        engine.backend.sync()?;
        let (sender, receiver) = mpsc::channel();
        let committer = {
            let engine = Arc::clone(&engine);
            let durability = options.durability;
            std::thread::Builder::new()
                .name("legio-committer".into())
                .spawn(move || run_committer(&engine, &receiver, durability))
                .map_err(|e| StoreError::io("starting the committer thread", e))?
        };
        tracing::info!(last_seq = %engine.committed(), "event log open");
        Ok(Self {
            engine,
            sender: Mutex::new(Some(sender)),
            committer: Mutex::new(Some(committer)),
            durability: options.durability,
            migration,
            read_only: None,
        })
    }

    /// Opens the log in the folder `path` without writing to it: sled and legio's recovery work
    /// on a private copy of the folder (in the system's temporary folder; see `copy.rs`), and
    /// appends are refused with [`StoreError::ReadOnly`]. For `legio verify` and
    /// `legio export --salvage`. When sled's snapshot file is damaged, the copy leaves it out
    /// (sled then rebuilds its page table from the log) and
    /// [`SledLog::damaged_snapshot`] names it.
    pub fn open_read_only(path: impl AsRef<Path>, options: &StoreOptions) -> Result<Self> {
        let original = path.as_ref().to_owned();
        let mut options = options.clone();
        options.create_if_missing = false;
        let (mut log, copy, read_around) = on_copy(&original, |copy| {
            Self::open_at(copy, &original, false, &options, &mut |_| {})
        })?;
        log.read_only = Some(ReadOnly {
            original,
            read_around,
            _copy: copy,
        });
        Ok(log)
    }

    /// Hands every event of the log in the folder `path` that still decodes to `visit`, in seq
    /// order (`Break` stops the walk), and reports the seq ranges that could not be read, each
    /// with its reason (`legio export --salvage`). Works on a private copy, as
    /// [`SledLog::open_read_only`] does, and needs neither the indexes nor the last chunk to
    /// read: only sled's own open (without its snapshot file, when that is damaged).
    pub fn salvage(
        path: impl AsRef<Path>,
        options: &StoreOptions,
        visit: &mut dyn FnMut(Record) -> std::ops::ControlFlow<()>,
    ) -> Result<crate::salvage::Salvaged> {
        let original = path.as_ref().to_owned();
        let mut options = options.clone();
        options.create_if_missing = false;
        // The backend alone opens even when the chunks it would read first are damaged: check
        // that the first and the last chunk read, else read from sled's log alone.
        let (backend, _copy, read_around) = on_copy(&original, |copy| {
            let backend = SledBackend::open(copy, &original, &options)?;
            backend.last(TreeId::Chunks)?;
            backend.scan(
                TreeId::Chunks,
                &[],
                None,
                Direction::Forward,
                &mut |_, _| std::ops::ControlFlow::Break(()),
            )?;
            Ok(backend)
        })?;
        let mut salvaged = crate::salvage::salvage(&backend, visit)?;
        salvaged.read_around = read_around;
        Ok(salvaged)
    }

    /// After [`SledLog::open_read_only`]: why sled could not open the folder as it is, when the
    /// log was read from sled's log alone (a damaged snapshot file, data file or blob).
    pub fn read_around(&self) -> Option<&ReadAround> {
        self.read_only.as_ref()?.read_around.as_ref()
    }

    /// What opening did to the stored layout (`from == to` when nothing needed migrating).
    pub fn migration(&self) -> Migration {
        self.migration
    }

    /// The database folder (the one asked for, also when opened read-only).
    pub fn path(&self) -> &Path {
        match &self.read_only {
            Some(read_only) => &read_only.original,
            None => &self.engine.backend.path,
        }
    }

    /// Stops accepting appends, commits what is pending, flushes and waits for the committer.
    pub fn close(&self) -> Result<()> {
        if let Ok(mut sender) = self.sender.lock() {
            sender.take();
        }
        let handle = self.committer.lock().ok().and_then(|mut h| h.take());
        if let Some(handle) = handle {
            handle
                .join()
                .map_err(|_| StoreError::io("closing", "the committer thread panicked"))?;
        }
        // After a commit failure there is nothing safe to flush: sync answers that failure.
        self.engine.backend.sync()
    }

    /// The backend, for the test-support damage helpers (`crate::testing`).
    pub(crate) fn backend(&self) -> &SledBackend {
        &self.engine.backend
    }

    #[doc(hidden)]
    /// Test support: overwrites the stored bytes of one event (its record inside its chunk),
    /// bypassing every check, to simulate corruption on disk. Never use this outside tests.
    pub fn overwrite_raw_record_for_tests(&self, seq: Seq, bytes: &[u8]) -> Result<()> {
        crate::damage::overwrite_record(&self.engine, seq, bytes)?;
        self.engine.backend.sync()
    }

    #[doc(hidden)]
    /// Test support: removes the event at `seq` from its conversation's list (the `by_conv`
    /// index), to simulate an index that disagrees with the log. Never use this outside tests.
    pub fn remove_conversation_index_entry_for_tests(
        &self,
        conversation: &ConversationKey,
        seq: Seq,
    ) -> Result<()> {
        crate::damage::remove_from_conversation_list(&self.engine, conversation, seq)?;
        self.engine.backend.sync()
    }
}

impl Drop for SledLog {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            tracing::error!(error = %e, "closing the event log failed");
        }
    }
}

fn run_committer(
    engine: &Engine<SledBackend>,
    receiver: &mpsc::Receiver<Request>,
    durability: Durability,
) {
    // After a failed write or fsync the state on disk is unknown: refuse everything from then
    // on, and flush nothing (sled may wait forever in a flush after a failed write).
    while let Ok(first) = receiver.recv() {
        let mut events = first.batch.len();
        let mut group = vec![first];
        while events < MAX_GROUP_EVENTS {
            match receiver.try_recv() {
                Ok(request) => {
                    events += request.batch.len();
                    group.push(request);
                }
                Err(_) => break,
            }
        }
        if let Some(error) = engine.backend.failure() {
            for request in group {
                let _ = request.ack.send(Err(error.clone()));
            }
            continue;
        }
        let _span = tracing::debug_span!("commit", events, writers = group.len()).entered();
        let mut acks = Vec::with_capacity(group.len());
        let mut batches = Vec::with_capacity(group.len());
        for request in group {
            acks.push((request.ack, request.submitted));
            batches.push(request.batch);
        }
        let result = engine.apply_group(batches).and_then(|(ranges, bytes)| {
            if durability == Durability::Sync {
                engine.backend.sync()?;
            }
            Ok((ranges, bytes))
        });
        match result {
            Ok((ranges, bytes)) => {
                let last = ranges.last().map_or(Seq::ZERO, |r| r.last);
                engine.publish(last);
                m::committed(events as u64, bytes, last.0);
                for ((ack, submitted), range) in acks.into_iter().zip(ranges) {
                    m::ack_latency(submitted.elapsed());
                    let _ = ack.send(Ok(range));
                }
            }
            Err(error) => {
                tracing::error!(error = %error, "commit failed; the log refuses further appends");
                engine.backend.fail(&error);
                for (ack, _) in acks {
                    let _ = ack.send(Err(error.clone()));
                }
            }
        }
    }
    if engine.backend.failure().is_none() {
        if let Err(e) = engine.backend.sync() {
            tracing::error!(error = %e, "final flush failed");
        }
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

/// Copies the database folder `original` and opens the copy with `open`; when that fails on
/// damage, copies it again without sled's snapshot files (sled then rebuilds its page table from
/// its log, reading around a damaged snapshot, a missing blob, or up to a damaged one) and says
/// why.
fn on_copy<T>(
    original: &Path,
    open: impl Fn(&Path) -> Result<T>,
) -> Result<(T, crate::copy::Copy, Option<ReadAround>)> {
    use crate::copy::{copy_database, Snapshots};
    let copy = copy_database(original, Snapshots::Keep)?;
    match open(&copy.path) {
        Ok(opened) => Ok((opened, copy, None)),
        // sled could not open it: without its snapshot it recovers from the log alone, reading
        // around a damaged snapshot, and around a damaged blob as if the log ended there (what
        // that hides, verify reports and salvage names).
        Err(e @ StoreError::Damaged { seq: None, .. }) => {
            drop(copy);
            let copy = copy_database(original, Snapshots::Leave)?;
            let why = match damaged_snapshot(original) {
                Some(snapshot) => ReadAround::Snapshot(snapshot),
                None => ReadAround::Damage(e),
            };
            Ok((open(&copy.path)?, copy, Some(why)))
        }
        Err(e) => Err(e),
    }
}

impl EventLog for SledLog {
    fn submit(&self, events: Vec<Event>) -> Result<AppendHandle> {
        if self.read_only.is_some() {
            return Err(StoreError::ReadOnly);
        }
        if let Some(failure) = self.engine.backend.failure() {
            return Err(failure);
        }
        let batch = self.engine.encode_batch(events)?;
        let (ack, rx) = oneshot::channel();
        let sender = self.sender.lock().map_err(|_| StoreError::Closed)?;
        let sender = sender.as_ref().ok_or(StoreError::Closed)?;
        sender
            .send(Request {
                batch,
                ack,
                submitted: Instant::now(),
            })
            .map_err(|_| StoreError::Closed)?;
        Ok(AppendHandle::pending(rx))
    }

    fn last_seq(&self) -> Seq {
        self.engine.committed()
    }

    fn read_range(&self, from: Seq, to: Seq, limit: usize) -> Result<Vec<Record>> {
        self.engine.read_range(from, to, limit)
    }

    fn conversation_events(
        &self,
        conversation: &ConversationKey,
        after: Seq,
        limit: usize,
    ) -> Result<Vec<Record>> {
        self.engine.conversation_events(conversation, after, limit)
    }

    fn conversations(&self) -> Result<Vec<ConversationKey>> {
        self.engine.conversations()
    }

    fn visible_before(
        &self,
        conversation: &ConversationKey,
        viewer: Viewer<'_>,
        before: Seq,
        limit: usize,
    ) -> Result<Vec<Record>> {
        self.engine
            .visible_before(conversation, viewer, before, limit)
    }

    fn visible_after(
        &self,
        conversation: &ConversationKey,
        viewer: Viewer<'_>,
        after: Seq,
        limit: usize,
    ) -> Result<Vec<Record>> {
        self.engine
            .visible_after(conversation, viewer, after, limit)
    }

    fn session_state(
        &self,
        conversation: &ConversationKey,
        agent: &AgentName,
    ) -> Result<Option<AgentSessionState>> {
        self.engine.session_state(conversation, agent)
    }

    fn session_states(&self, conversation: &ConversationKey) -> Result<Vec<AgentSessionState>> {
        self.engine.session_states(conversation)
    }

    fn subscribe(&self, from: Seq) -> Subscription {
        // A subscription must not keep the database open (and locked) after the log is dropped.
        let weak = Arc::downgrade(&self.engine);
        Subscription::new(
            Arc::new(move |a, b, n| {
                weak.upgrade()
                    .ok_or(StoreError::Closed)?
                    .read_range(a, b, n)
            }),
            self.engine.watch(),
            from,
        )
    }

    fn verify(&self, progress: &mut dyn FnMut(VerifyProgress)) -> Result<VerifyReport> {
        verify::verify(&self.engine, progress)
    }

    fn flush(&self) -> Result<()> {
        self.engine.backend.sync()
    }

    fn size_on_disk(&self) -> Result<u64> {
        self.engine.backend.size_on_disk()
    }
}
