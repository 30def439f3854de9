//! The durable event log on sled 0.34.7, with one committer thread doing group commit.
//!
//! Write path (docs/storage.md has the full story): writers validate and encode on their own
//! thread, then send the batch to the committer; the committer drains every waiting batch, applies
//! them in one pass (events, then indexes, then the watermark), calls sled's `flush` (which on
//! Linux only issues `sync_file_range`), then `fdatasync`s sled's data file and any new blob file
//! itself, and only then acknowledges every writer of the group. The list entries (the indexes)
//! are written by a second thread, the lists writer, so that their write never delays a group.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use legio_core::{
    AgentName, AgentSessionState, ConversationKey, Event, Record, Seq, SeqRange, Viewer,
};
use tokio::sync::oneshot;

use crate::backend::{Backend, Direction, TreeId};
use crate::engine::{Encoded, Engine, Limits};
use crate::error::{Result, StoreError};
use crate::log::{AppendHandle, EventLog, Subscription};
use crate::metrics as m;
use crate::migrate::{self, MigrateProgress, Migration};
use crate::options::{Durability, StoreOptions};
pub use crate::salvage::ReadAround;
use crate::sled_backend::{damaged_snapshot, SledBackend};
use crate::verify::{self, VerifyProgress, VerifyReport};

/// The most events one commit group takes.
const MAX_GROUP_EVENTS: usize = 4096;

/// The pending list items are written (by the lists writer) when no append came for this long.
const IDLE_LISTS: std::time::Duration = std::time::Duration::from_millis(50);

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
    /// The committer; it answers whether it applied any group.
    committer: Mutex<Option<JoinHandle<bool>>>,
    durability: Durability,
    /// Whether the open synced everything (`StoreOptions::sync_on_open`, or a reading open of a
    /// log not closed cleanly): then closing syncs and leaves the clean-close mark even when
    /// nothing was appended.
    sync_on_close: bool,
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
        // Recovery may have re-derived index entries: make them durable before serving. A
        // reading open need not (they are re-derived again on the next open) when the last
        // writer closed cleanly; after a crash it syncs too, so it never shows a group that a
        // power loss could still take back.
        let closed_clean = engine.backend.closed_clean_at(engine.committed())?;
        let synced = options.sync_on_open || !closed_clean;
        if synced {
            engine.backend.sync()?;
        }
        let (sender, receiver) = mpsc::channel();
        let committer = {
            let engine = Arc::clone(&engine);
            let durability = options.durability;
            std::thread::Builder::new()
                .name("legio-committer".into())
                .spawn(move || run_committer(&engine, &receiver, durability, synced, closed_clean))
                .map_err(|e| StoreError::io("starting the committer thread", e))?
        };
        tracing::info!(last_seq = %engine.committed(), "event log open");
        Ok(Self {
            engine,
            sender: Mutex::new(Some(sender)),
            committer: Mutex::new(Some(committer)),
            durability: options.durability,
            sync_on_close: synced,
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
        let applied = match handle {
            Some(handle) => handle
                .join()
                .map_err(|_| StoreError::io("closing", "the committer thread panicked"))?,
            None => false,
        };
        if !self.sync_on_close && !applied {
            // A reading process: it leaves the log as durable as it found it.
            return Ok(());
        }
        // After a commit failure there is nothing safe to flush: sync answers that failure.
        self.engine.backend.sync()?;
        self.engine.backend.mark_closed(self.engine.committed())
    }

    /// Whether this open made everything already on disk durable: a writer's open always
    /// (`StoreOptions::sync_on_open`); a reading open only when the last process that wrote the
    /// log did not close it cleanly (a crash, a kill), so that it never shows an event a power
    /// loss could still take back.
    pub fn synced_on_open(&self) -> bool {
        self.sync_on_close
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
        self.flush()?;
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

/// Commits groups until the log closes, then flushes, unless this process only read
/// (`sync_on_close` false and no group applied: nothing to make durable). The lists writer runs
/// beside it for as long.
fn run_committer(
    engine: &Engine<SledBackend>,
    receiver: &mpsc::Receiver<Request>,
    durability: Durability,
    sync_on_close: bool,
    closed_mark: bool,
) -> bool {
    let (lists_due, due) = mpsc::sync_channel(1);
    let applied = std::thread::scope(|scope| {
        let lists_writer = std::thread::Builder::new()
            .name("legio-lists".into())
            .spawn_scoped(scope, move || {
                // Each signal: write what is pending then (one write may cover several).
                // After a commit failure nothing more is written (the state on disk is unknown).
                while due.recv().is_ok() {
                    if engine.backend.failure().is_none() {
                        write_lists(engine, Engine::flush_lists);
                    }
                }
            });
        if let Err(e) = lists_writer {
            // Without it the committer writes the lists itself (between groups).
            tracing::warn!(error = %e, "no lists writer thread; the committer writes the lists");
        }
        let applied = commit_groups(engine, receiver, durability, closed_mark, &lists_due);
        drop(lists_due);
        applied
    });
    if engine.backend.failure().is_none() && (sync_on_close || applied) {
        write_lists(engine, Engine::flush_lists);
        if let Err(e) = engine.backend.sync() {
            tracing::error!(error = %e, "final flush failed");
        }
    }
    applied
}

/// The committer's loop: takes every waiting request as one group, applies and syncs it,
/// acknowledges its writers, and signals `lists_due` when the list items are due. Answers
/// whether it applied any group.
fn commit_groups(
    engine: &Engine<SledBackend>,
    receiver: &mpsc::Receiver<Request>,
    durability: Durability,
    mut closed_mark: bool,
    lists_due: &mpsc::SyncSender<()>,
) -> bool {
    let mut applied = false;
    // After a failed write or fsync the state on disk is unknown: refuse everything from then
    // on, and flush nothing (sled may wait forever in a flush after a failed write).
    while let Some(first) = next_request(engine, receiver, lists_due) {
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
        applied = true;
        let _span = tracing::debug_span!("commit", events, writers = group.len()).entered();
        let mut acks = Vec::with_capacity(group.len());
        let mut batches = Vec::with_capacity(group.len());
        for request in group {
            acks.push((request.ack, request.submitted));
            batches.push(request.batch);
        }
        let result = clear_closed_mark(engine, &mut closed_mark)
            .and_then(|()| {
                let started = Instant::now();
                let applied = engine.apply_group(batches);
                m::commit_step("apply", started.elapsed());
                applied
            })
            .and_then(|(ranges, bytes)| {
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
                signal_lists(engine, lists_due);
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
    applied
}

/// When the list items are due: has them written ([`wake_lists_writer`]).
fn signal_lists(engine: &Engine<SledBackend>, lists_due: &mpsc::SyncSender<()>) {
    if engine.lists_due() {
        wake_lists_writer(engine, lists_due);
    }
}

/// Wakes the lists writer (a signal already waiting covers this one too), or writes the list
/// items here when there is no lists writer.
fn wake_lists_writer(engine: &Engine<SledBackend>, lists_due: &mpsc::SyncSender<()>) {
    if let Err(mpsc::TrySendError::Disconnected(())) = lists_due.try_send(()) {
        write_lists(engine, Engine::flush_lists);
    }
}

/// Before the first group this process applies: removes the clean-close mark it found.
fn clear_closed_mark(engine: &Engine<SledBackend>, mark: &mut bool) -> Result<()> {
    if *mark {
        engine.backend.clear_closed()?;
        *mark = false;
    }
    Ok(())
}

/// The next request; while list items are pending, waiting at most [`IDLE_LISTS`] before
/// having the lists writer write them (a group arriving meanwhile need not wait for that
/// write). `None` once the log closes.
fn next_request(
    engine: &Engine<SledBackend>,
    receiver: &mpsc::Receiver<Request>,
    lists_due: &mpsc::SyncSender<()>,
) -> Option<Request> {
    if engine.lists_pending() && engine.backend.failure().is_none() {
        match receiver.recv_timeout(IDLE_LISTS) {
            Ok(request) => return Some(request),
            Err(mpsc::RecvTimeoutError::Disconnected) => return None,
            Err(mpsc::RecvTimeoutError::Timeout) => wake_lists_writer(engine, lists_due),
        }
    }
    receiver.recv().ok()
}

/// Writes the overlay's list items with `write`; a failure is a commit failure (the state on
/// disk is unknown): the log refuses every later append.
fn write_lists(engine: &Engine<SledBackend>, write: fn(&Engine<SledBackend>) -> Result<()>) {
    if let Err(error) = write(engine) {
        tracing::error!(error = %error, "writing list entries failed; the log refuses further appends");
        engine.backend.fail(&error);
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
        if self.engine.backend.failure().is_none() {
            self.engine.flush_lists()?;
        }
        self.engine.backend.sync()
    }

    fn failure(&self) -> Option<StoreError> {
        self.engine.backend.failure()
    }

    fn size_on_disk(&self) -> Result<u64> {
        self.engine.backend.size_on_disk()
    }
}
