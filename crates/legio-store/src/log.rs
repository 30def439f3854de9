//! The `EventLog` trait: the contract every log implementation keeps, and the handles it returns.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use legio_core::{
    AgentName, AgentSessionState, ConversationKey, Event, Record, Seq, SeqRange, Viewer,
};
use tokio::sync::{oneshot, watch};

use crate::error::{Result, StoreError};
use crate::verify::{VerifyProgress, VerifyReport};

/// The append-only event log: the source of truth of a legion.
///
/// Contract, for every implementation:
/// - **Order.** Seqs start at 1 and are gap-free and strictly increasing across the whole log.
///   A batch gets consecutive seqs, in the order given. Batches submitted from one thread are
///   ordered as submitted.
/// - **Atomic batches.** A batch is validated whole before anything is stored: if one event is
///   refused (too large, empty batch), none is stored.
/// - **Durability.** An append is acknowledged (its handle resolves to `Ok`) only once the batch
///   is durable under the log's durability mode (see `docs/storage.md`). An error means the batch
///   may or may not be stored; the caller must not assume either.
/// - **Reads see only acknowledged events**, and see every acknowledged event.
/// - **Errors** are values: bad bytes in storage are `StoreError::Corrupt` or
///   `UnknownFormatVersion`, never a panic. No method blocks on a slow subscriber.
/// - Methods block (the sled log does disk IO): call them from a blocking thread, never directly
///   on an async worker; [`AppendHandle`] may be awaited.
pub trait EventLog: Send + Sync + std::fmt::Debug {
    /// Validates `events` and hands them to the log; the handle resolves once they are durable.
    fn submit(&self, events: Vec<Event>) -> Result<AppendHandle>;

    /// Appends and waits until the batch is durable. Blocks; must not be called on an async worker.
    fn append(&self, events: Vec<Event>) -> Result<SeqRange> {
        self.submit(events)?.wait()
    }

    /// The last acknowledged seq (`Seq::ZERO` for an empty log).
    fn last_seq(&self) -> Seq;

    /// Events with `from <= seq <= to` in log order, at most `limit`. `from > to` is `BadRange`.
    fn read_range(&self, from: Seq, to: Seq, limit: usize) -> Result<Vec<Record>>;

    /// A conversation's events with seq after `after`, in log order, at most `limit`.
    fn conversation_events(
        &self,
        conversation: &ConversationKey,
        after: Seq,
        limit: usize,
    ) -> Result<Vec<Record>>;

    /// Every conversation with at least one event, sorted by key.
    fn conversations(&self) -> Result<Vec<ConversationKey>>;

    /// Exactly the last `limit` messages `viewer` may see in `conversation` (fewer only when fewer
    /// exist), in log order.
    fn visible_window(
        &self,
        conversation: &ConversationKey,
        viewer: Viewer<'_>,
        limit: usize,
    ) -> Result<Vec<Record>> {
        self.visible_before(conversation, viewer, Seq(u64::MAX), limit)
    }

    /// Exactly the last `limit` messages `viewer` may see in `conversation` with seq below
    /// `before` (fewer only when fewer exist), in log order.
    fn visible_before(
        &self,
        conversation: &ConversationKey,
        viewer: Viewer<'_>,
        before: Seq,
        limit: usize,
    ) -> Result<Vec<Record>>;

    /// The messages `viewer` may see in `conversation` with seq after `after`, in log order, at
    /// most `limit`.
    fn visible_after(
        &self,
        conversation: &ConversationKey,
        viewer: Viewer<'_>,
        after: Seq,
        limit: usize,
    ) -> Result<Vec<Record>>;

    /// The latest session state of `agent` in `conversation`.
    fn session_state(
        &self,
        conversation: &ConversationKey,
        agent: &AgentName,
    ) -> Result<Option<AgentSessionState>>;

    /// The session states of every agent that has one in `conversation`, by agent name.
    fn session_states(&self, conversation: &ConversationKey) -> Result<Vec<AgentSessionState>>;

    /// Follows the log from `from` (inclusive). The subscription reads from the log at its own
    /// pace: a slow subscriber never blocks writers.
    fn subscribe(&self, from: Seq) -> Subscription;

    /// Walks the log and its indexes and reports what is wrong. Corruption is reported, not
    /// returned as an error; `Err` means the walk itself could not proceed.
    fn verify(&self, progress: &mut dyn FnMut(VerifyProgress)) -> Result<VerifyReport>;

    /// Makes everything acknowledged so far durable (a no-op in `sync` mode and in memory).
    fn flush(&self) -> Result<()>;

    /// Bytes the log occupies on disk (0 in memory).
    fn size_on_disk(&self) -> Result<u64>;

    /// Brings this process's view of `conversation` up to what the log holds, for a log other
    /// processes append to as well (the NATS log: another node's appends, e.g. to the shared
    /// `legio:memory`). A log this process alone writes is always current: nothing to do.
    fn catch_up(&self, conversation: &ConversationKey) -> Result<()> {
        let _ = conversation;
        Ok(())
    }

    /// The failure that stopped the log taking appends (a failed commit: a full disk, too many
    /// open files, an I/O error; `docs/storage.md`, "Storage failures"), once there is one. Such
    /// a log refuses every append with it until it is opened again. `None` for a log that never
    /// fails this way.
    fn failure(&self) -> Option<StoreError> {
        None
    }
}

/// Resolves when an append is durable: `.wait()` from a blocking thread, or `.await`.
#[derive(Debug)]
pub struct AppendHandle {
    inner: HandleInner,
}

#[derive(Debug)]
enum HandleInner {
    Ready(Option<Result<SeqRange>>),
    Pending(oneshot::Receiver<Result<SeqRange>>),
}

impl AppendHandle {
    pub(crate) fn ready(result: Result<SeqRange>) -> Self {
        Self {
            inner: HandleInner::Ready(Some(result)),
        }
    }

    pub(crate) fn pending(rx: oneshot::Receiver<Result<SeqRange>>) -> Self {
        Self {
            inner: HandleInner::Pending(rx),
        }
    }

    /// Blocks until the append is durable. Panics if called on an async worker thread (tokio's
    /// rule for blocking receives); await the handle there instead.
    pub fn wait(self) -> Result<SeqRange> {
        match self.inner {
            HandleInner::Ready(result) => result.unwrap_or(Err(StoreError::Closed)),
            HandleInner::Pending(rx) => rx.blocking_recv().unwrap_or(Err(StoreError::Closed)),
        }
    }
}

impl Future for AppendHandle {
    type Output = Result<SeqRange>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.inner {
            HandleInner::Ready(result) => {
                Poll::Ready(result.take().unwrap_or(Err(StoreError::Closed)))
            }
            HandleInner::Pending(rx) => Pin::new(rx)
                .poll(cx)
                .map(|r| r.unwrap_or(Err(StoreError::Closed))),
        }
    }
}

type RangeReader = Arc<dyn Fn(Seq, Seq, usize) -> Result<Vec<Record>> + Send + Sync>;

/// Follows the log from a seq: yields every acknowledged event in order, then waits for more.
pub struct Subscription {
    read: RangeReader,
    committed: watch::Receiver<Seq>,
    next: Seq,
    buffer: std::collections::VecDeque<Record>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

/// How many events a subscription reads from the log at a time.
const SUBSCRIPTION_CHUNK: usize = 1024;

impl Subscription {
    pub(crate) fn new(read: RangeReader, committed: watch::Receiver<Seq>, from: Seq) -> Self {
        Self {
            read,
            committed,
            next: from.max(Seq::FIRST),
            buffer: Default::default(),
        }
    }

    /// The next event if one is acknowledged already, without waiting.
    pub fn try_next(&mut self) -> Result<Option<Record>> {
        if self.buffer.is_empty() {
            let last = *self.committed.borrow_and_update();
            if self.next <= last {
                let records = (self.read)(self.next, last, SUBSCRIPTION_CHUNK)?;
                if let Some(r) = records.last() {
                    self.next = r.seq.next();
                }
                self.buffer.extend(records);
            }
        }
        Ok(self.buffer.pop_front())
    }

    /// The next event, waiting for it if need be. `Err(Closed)` once the log is closed and every
    /// event was yielded.
    pub async fn next(&mut self) -> Result<Record> {
        loop {
            if let Some(record) = self.try_next()? {
                return Ok(record);
            }
            if self.committed.changed().await.is_err() {
                // The log is gone: drain what is left, then report closed.
                return self.try_next()?.ok_or(StoreError::Closed);
            }
        }
    }
}
