//! `NatsLog`: the event log on a NATS JetStream stream. The stream sequence is legio's seq; each
//! conversation is one subject; appends state the subject's last sequence they expect, so a node
//! that lost a conversation to another can never append to it. This file: opening, the shared
//! state's methods (projections, global reads) and the `EventLog` impl; the shared state is
//! inner.rs, the write path is write.rs, verify
//! is verify.rs. See `docs/cluster.md`.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, stream::LastRawMessageErrorKind};
use futures_util::TryStreamExt;
use legio_core::{AgentName, AgentSessionState, ConversationKey, Event, Record, Seq, Viewer};
use tokio::sync::{mpsc, oneshot, watch, Semaphore};

use super::backoff::Backoff;
use super::grouping::Grouping;
use super::inner::{Inner, Submit, READ_CHUNK};
use super::leader::Steering;
use super::options::NatsOptions;
use super::projection::Projection;
use super::publish::{Publisher, LEGIO_APPEND, MAX_BATCHES_IN_FLIGHT};
use super::reader::{scan, Scan, Stored};
use super::runtime::block_on;
use super::subject::Subjects;
use super::sync::lock;
use super::verify::verify_walk;
use super::write::{dispatch, encode_batch};
use crate::error::{Result, StoreError};
use crate::log::{AppendHandle, EventLog, Subscription};
use crate::metrics as m;
use crate::verify::{VerifyProgress, VerifyReport};

/// How often a log with subscribers asks the stream for appends made by other nodes.
const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// The event log on a NATS JetStream stream (see the module docs and `docs/cluster.md`).
///
/// Its methods block (like every [`EventLog`]): it owns a small tokio runtime that drives the
/// NATS client, so callers need none, and must call it from a blocking thread when they have one.
pub struct NatsLog {
    pub(super) inner: Arc<Inner>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for NatsLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsLog")
            .field("stream", &self.inner.options.stream)
            .field("read_only", &self.inner.read_only)
            .finish_non_exhaustive()
    }
}

impl NatsLog {
    /// Connects and opens the log for appending, creating its stream if it does not exist.
    pub fn open(options: &NatsOptions) -> Result<Self> {
        Self::start(options, false)
    }

    /// Connects and opens an existing log for reading only (the operator CLI): appends answer
    /// [`StoreError::ReadOnly`], and every per-conversation read catches up with the stream.
    pub fn open_read_only(options: &NatsOptions) -> Result<Self> {
        Self::start(options, true)
    }

    fn start(options: &NatsOptions, read_only: bool) -> Result<Self> {
        options.validate()?;
        let runtime = super::runtime::build(2)?;
        let (inner, receiver) =
            block_on(runtime.handle(), Inner::connect(options.clone(), read_only))?;
        let inner = Arc::new(inner);
        if let Some(receiver) = receiver {
            runtime.spawn(dispatch(inner.clone(), receiver));
        }
        Ok(Self {
            inner,
            runtime: Some(runtime),
        })
    }

    /// Drops what this node knows of `conversation` and reads it again from the stream; lifts a
    /// refusal ([`StoreError::Fenced`]). The ownership layer calls it when it (re)takes a
    /// conversation: the next append then expects the stream's true last seq. Call it while this
    /// node has no append to the conversation in flight.
    pub fn refresh(&self, conversation: &ConversationKey) -> Result<()> {
        let inner = self.inner.clone();
        let conversation = conversation.clone();
        self.block_on(async move {
            let mut fresh = Projection::new(conversation.clone());
            for record in inner.fetch_after(&conversation, Seq::ZERO).await? {
                fresh.apply(record);
            }
            lock(&inner.projections).insert(conversation.clone(), Arc::new(Mutex::new(fresh)));
            lock(&inner.fenced).remove(&conversation);
            Ok(())
        })
    }

    /// Reads what was appended to `conversation` since this node last read or appended to it
    /// (the whole conversation on first touch): for a node that does not own the conversation,
    /// whose copy only its own appends keep current. Unlike [`NatsLog::refresh`], it reads only
    /// the new events and lifts no refusal.
    pub fn catch_up(&self, conversation: &ConversationKey) -> Result<()> {
        let inner = self.inner.clone();
        let conversation = conversation.clone();
        self.block_on(async move {
            let known = lock(&inner.projections).get(&conversation).cloned();
            match known {
                Some(projection) => inner.catch_up(&conversation, &projection).await,
                None => inner.projection(&conversation).await.map(drop),
            }
        })
    }

    /// Drops this node's projection of `conversation` (its events and folds): for a
    /// conversation this node let go of (its lease released, no append to it in flight). A
    /// later take calls [`NatsLog::refresh`], which reads it again whole; a read before that
    /// loads it from the stream. A refusal ([`StoreError::Fenced`]) is kept: only `refresh`
    /// lifts it.
    pub fn forget(&self, conversation: &ConversationKey) {
        self.inner.forget(std::slice::from_ref(conversation));
    }

    /// Lets go of `conversation` for a node that stood down from it (its lease lost or not
    /// trusted): from now on every append to it is refused ([`StoreError::Fenced`], without
    /// asking the cluster) and the projection is dropped, so a stood-down conversation keeps
    /// nothing here but the refusal. Only [`NatsLog::refresh`] (a take) lifts it; a read reloads
    /// the conversation from the stream as any non-owner's does.
    pub fn stand_down(&self, conversation: &ConversationKey) {
        self.inner.stand_down(conversation);
    }

    /// Runs `future` on the log's runtime and waits for it on this thread.
    pub(super) fn block_on<F>(&self, future: F) -> F::Output
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        block_on(&self.runtime_handle(), future)
    }

    fn runtime_handle(&self) -> tokio::runtime::Handle {
        match &self.runtime {
            Some(runtime) => runtime.handle().clone(),
            None => unreachable!("the runtime lives as long as the log"),
        }
    }

    /// A conversation's projection, loaded on first touch; in read-only mode, caught up first.
    fn projection(&self, conversation: &ConversationKey) -> Result<Arc<Mutex<Projection>>> {
        if !self.inner.read_only {
            if let Some(p) = lock(&self.inner.projections).get(conversation) {
                return Ok(p.clone());
            }
        }
        let inner = self.inner.clone();
        let conversation = conversation.clone();
        self.block_on(async move { inner.projection(&conversation).await })
    }

    fn with_projection<T>(
        &self,
        conversation: &ConversationKey,
        read: impl FnOnce(&Projection) -> T,
    ) -> Result<T> {
        let projection = self.projection(conversation)?;
        let guard = lock(&projection);
        Ok(read(&guard))
    }
}

impl Drop for NatsLog {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Inner {
    async fn connect(
        options: NatsOptions,
        read_only: bool,
    ) -> Result<(Self, Option<mpsc::UnboundedReceiver<Submit>>)> {
        let steering = Steering::default();
        let steer = (!read_only).then(|| steering.steer());
        let client = options.connect_to(&options.servers, steer).await?;
        let js = jetstream::ContextBuilder::new()
            .timeout(options.request_timeout)
            .build(client.clone());
        let subjects = Subjects::new(&options.stream);
        let stream = if read_only {
            Self::find_stream(&js, &options).await?
        } else {
            Self::create_stream(&js, &options, &subjects).await?
        };
        if !read_only {
            if let Some(to) = steering.wanted(&options, &client, &stream, false).await {
                steering.apply(&client, to, options.request_timeout).await;
            }
        }
        let last = Self::last_sequence(&stream, options.append_deadline).await?;
        let id_prefix = client
            .new_inbox()
            .rsplit('.')
            .next()
            .unwrap_or_default()
            .to_owned();
        let publisher = Publisher {
            client,
            js,
            stream,
            timeout: options.request_timeout,
            deadline: options.append_deadline,
            batches: Semaphore::new(MAX_BATCHES_IN_FLIGHT),
        };
        let (submits, receiver) = mpsc::unbounded_channel();
        let inner = Self {
            grouping: Grouping::for_replicas(options.replicas),
            publisher,
            subjects,
            options,
            read_only,
            projections: Mutex::default(),
            fenced: Mutex::default(),
            committed: watch::Sender::new(Seq(last)),
            submits: (!read_only).then_some(submits),
            id_prefix,
            next_id: AtomicU64::new(1),
            following: AtomicBool::new(false),
            recent: Mutex::default(),
            steering,
        };
        Ok((inner, (!read_only).then_some(receiver)))
    }

    /// The stream's last sequence, asked of its leader; a failure of the cluster is tried again
    /// until `deadline`.
    async fn last_sequence(stream: &jetstream::stream::Stream, deadline: Duration) -> Result<u64> {
        let mut backoff = Backoff::new(deadline);
        loop {
            match stream.get_info().await {
                Ok(info) => return Ok(info.state.last_sequence),
                Err(e) => {
                    let Some(pause) = backoff.next() else {
                        return Err(StoreError::cluster("reading the stream's state", e));
                    };
                    tracing::debug!(error = %e, "reading the stream's state failed, retrying");
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }

    /// The stream, which must exist (a reader never creates it). A failure of the cluster (a
    /// leader election, a request timed out) is tried again, as reads are, until
    /// `append_deadline`.
    async fn find_stream(
        js: &jetstream::Context,
        options: &NatsOptions,
    ) -> Result<jetstream::stream::Stream> {
        let mut backoff = Backoff::new(options.append_deadline);
        loop {
            let e = match js.get_stream(&options.stream).await {
                Ok(stream) => return Ok(stream),
                Err(e) => e,
            };
            if let jetstream::context::GetStreamErrorKind::JetStream(error) = e.kind() {
                if error.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND {
                    return Err(StoreError::StreamNotFound {
                        stream: options.stream.clone(),
                    });
                }
            }
            let Some(pause) = backoff.next() else {
                return Err(StoreError::cluster("opening the stream", e));
            };
            tracing::debug!(error = %e, "opening the stream failed, retrying");
            tokio::time::sleep(pause).await;
        }
    }

    async fn create_stream(
        js: &jetstream::Context,
        options: &NatsOptions,
        subjects: &Subjects,
    ) -> Result<jetstream::stream::Stream> {
        let config = jetstream::stream::Config {
            name: options.stream.clone(),
            subjects: vec![subjects.all()],
            storage: jetstream::stream::StorageType::File,
            num_replicas: options.replicas,
            allow_atomic_publish: true,
            deny_delete: true,
            deny_purge: true,
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        };
        // A cluster that has just started (or is loaded) may answer the first requests late
        // while it elects its leaders: try again for a while before giving up.
        let mut backoff = Backoff::paced(
            Duration::from_millis(250),
            Duration::from_secs(2),
            Duration::from_secs(30),
        );
        let mut stream = loop {
            match js.get_or_create_stream(config.clone()).await {
                Ok(stream) => break stream,
                Err(e) => {
                    let Some(pause) = backoff.next() else {
                        return Err(StoreError::cluster("creating the stream", e));
                    };
                    tracing::debug!(error = %e, "creating the stream failed; trying again");
                    tokio::time::sleep(pause).await;
                }
            }
        };
        let info = stream
            .info()
            .await
            .map_err(|e| StoreError::cluster("reading the stream's configuration", e))?;
        if info.config.num_replicas != options.replicas || !info.config.allow_atomic_publish {
            return Err(StoreError::BadOptions {
                reason: format!(
                    "stream {} exists with {} replicas{}; store.nats.replicas asks for {}",
                    options.stream,
                    info.config.num_replicas,
                    if info.config.allow_atomic_publish {
                        ""
                    } else {
                        " and without atomic batches"
                    },
                    options.replicas
                ),
            });
        }
        Ok(stream)
    }
}

// ---- per-conversation projections ----

impl Inner {
    /// The seq of the last event on `subject` (0: none), asked of the stream's leader; a
    /// failure of the cluster (a leader election) is tried again, as every read is.
    pub(super) async fn subject_last(&self, subject: &str) -> Result<u64> {
        let last = self.last_message_of(subject, "reading a conversation's last seq");
        Ok(last.await?.map_or(0, |message| message.sequence))
    }

    /// Whether the last message on `subject` belongs to an append of this log (its
    /// `Legio-Append` id carries this log's prefix).
    pub(super) async fn last_is_own_append(&self, subject: &str) -> Result<bool> {
        let last = self.last_message_of(subject, "reading a conversation's last message");
        Ok(last.await?.is_some_and(|message| {
            message.headers.get(LEGIO_APPEND).is_some_and(|id| {
                id.as_str()
                    .strip_prefix(self.id_prefix.as_str())
                    .is_some_and(|rest| rest.starts_with('-'))
            })
        }))
    }

    /// The last message on `subject` (`None`: no message), read again after a cluster error
    /// until `append_deadline` ([`Inner::retried`]); a stream that is gone is no error to retry.
    async fn last_message_of(
        &self,
        subject: &str,
        during: &'static str,
    ) -> Result<Option<async_nats::jetstream::message::StreamMessage>> {
        self.retried(|| async {
            let stream = &self.publisher.stream;
            let e = match stream.get_last_raw_message_by_subject(subject).await {
                Ok(message) => return Ok(Some(message)),
                Err(e) => e,
            };
            match e.kind() {
                LastRawMessageErrorKind::NoMessageFound => Ok(None),
                LastRawMessageErrorKind::JetStream(error)
                    if error.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND =>
                {
                    Err(StoreError::StreamNotFound {
                        stream: self.options.stream.clone(),
                    })
                }
                _ => Err(StoreError::cluster(during, e)),
            }
        })
        .await
    }

    /// The conversation's events after `after`, read from its subject.
    async fn fetch_after(&self, conversation: &ConversationKey, after: Seq) -> Result<Vec<Record>> {
        let subject = self.subjects.of(conversation);
        let last = self.subject_last(&subject).await?;
        let mut out = Vec::new();
        let mut from = after.0 + 1;
        while from <= last {
            let stored = self
                .scan(Scan {
                    from,
                    to: last,
                    filter: Some(subject.clone()),
                    limit: READ_CHUNK,
                    reader: self.next_reader(),
                    whole_through: 0,
                })
                .await?;
            let Some(tail) = stored.last() else { break };
            from = tail.seq + 1;
            for message in &stored {
                out.push(message.decode(&self.subjects)?);
            }
        }
        Ok(out)
    }

    /// The projection of `conversation`: loaded from its subject on first touch (and, read-only,
    /// caught up on every call). A projection is shared only once complete: a concurrent load
    /// that finishes second adopts the first one (which this node's appends keep current).
    pub(super) async fn projection(
        &self,
        conversation: &ConversationKey,
    ) -> Result<Arc<Mutex<Projection>>> {
        let known = lock(&self.projections).get(conversation).cloned();
        match known {
            Some(projection) if !self.read_only => Ok(projection),
            Some(projection) => {
                self.catch_up(conversation, &projection).await?;
                Ok(projection)
            }
            None => {
                let mut fresh = Projection::new(conversation.clone());
                for record in self.fetch_after(conversation, Seq::ZERO).await? {
                    fresh.apply(record);
                }
                Ok(lock(&self.projections)
                    .entry(conversation.clone())
                    .or_insert_with(|| Arc::new(Mutex::new(fresh)))
                    .clone())
            }
        }
    }

    /// Folds into `projection` what the stream holds of `conversation` after its last event
    /// (events before it never change).
    async fn catch_up(
        &self,
        conversation: &ConversationKey,
        projection: &Mutex<Projection>,
    ) -> Result<()> {
        let after = lock(projection).last();
        let records = self.fetch_after(conversation, after).await?;
        let mut guard = lock(projection);
        for record in records {
            guard.apply(record);
        }
        Ok(())
    }

    pub(super) fn stand_down(&self, conversation: &ConversationKey) {
        let known = lock(&self.projections).remove(conversation);
        let last = known.map_or(0, |p| lock(&p).last().0);
        lock(&self.fenced)
            .entry(conversation.clone())
            .or_insert(last);
    }

    pub(super) fn forget(&self, conversations: &[ConversationKey]) {
        let mut projections = lock(&self.projections);
        for conversation in conversations {
            projections.remove(conversation);
        }
    }

    /// A scan of the stream (reader.rs), with its own consumer name should it need one (a fresh
    /// one for each attempt), [retried](Self::retried).
    pub(super) async fn scan(&self, next: Scan) -> Result<Vec<Stored>> {
        let mut reader = Some(next.reader.clone());
        self.retried(|| {
            let attempt = Scan {
                reader: reader.take().unwrap_or_else(|| self.next_reader()),
                ..next.clone()
            };
            async move {
                let stored = scan(
                    &self.publisher.stream,
                    attempt.clone(),
                    self.options.request_timeout,
                )
                .await?;
                attempt.check_whole(&stored)?;
                Ok(stored)
            }
        })
        .await
    }

    /// Runs `read` again after a cluster error (a leader election, a lost connection, a server
    /// catching up after a partition healed: reads are idempotent) until `append_deadline`.
    pub(super) async fn retried<T, F: Future<Output = Result<T>>>(
        &self,
        mut read: impl FnMut() -> F,
    ) -> Result<T> {
        let mut backoff = Backoff::new(self.options.append_deadline);
        loop {
            match read().await {
                Err(StoreError::Cluster { during, source }) => match backoff.next() {
                    Some(pause) => {
                        tracing::debug!(during, %source, "a read failed, retrying");
                        tokio::time::sleep(pause).await;
                    }
                    None => return Err(StoreError::Cluster { during, source }),
                },
                other => return other,
            }
        }
    }

    /// A fresh consumer name for a scan: this connection's prefix and a counter.
    pub(super) fn next_reader(&self) -> String {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        format!("{}_read_{n}", self.id_prefix)
    }

    pub(super) fn next_append_id(&self) -> String {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n}", self.id_prefix)
    }

    pub(super) fn acknowledge(&self, last: Seq) {
        self.committed.send_if_modified(|current| {
            if last > *current {
                *current = last;
                true
            } else {
                false
            }
        });
    }
}

// ---- global reads ----

impl Inner {
    /// The stream's last seq, never less than what this node knows acknowledged. A server can
    /// answer with less when it is behind: a stream leader cut off by a partition answers
    /// `STREAM.INFO` from its stale store until it learns of the new leader. (The partition test
    /// caught a read of the whole log that ended at such an answer, so it left out the events
    /// acknowledged through the majority during the cut.)
    async fn stream_last(&self) -> Result<Seq> {
        let info = self
            .retried(|| async {
                self.publisher
                    .stream
                    .get_info()
                    .await
                    .map_err(|e| StoreError::cluster("reading the stream's state", e))
            })
            .await?;
        let answered = Seq(info.state.last_sequence);
        self.acknowledge(answered);
        let known = *self.committed.borrow();
        if answered < known {
            tracing::debug!(
                %answered,
                %known,
                "the stream's last seq as answered is below what this node knows acknowledged \
                 (a server behind, or an append acknowledged meanwhile)"
            );
        }
        Ok(known)
    }

    async fn read_range(&self, from: Seq, to: Seq, limit: usize) -> Result<Vec<Record>> {
        // Up to what this node knows acknowledged, no need to ask the stream how far it goes.
        let known = *self.committed.borrow();
        let to = match to <= known {
            true => to,
            false => to.min(self.stream_last().await?),
        };
        // Every seq up to `to` is now known acknowledged, so the scan must come back whole.
        let whole_through = known.max(to);
        let mut out = Vec::new();
        let mut from = from.max(Seq::FIRST).0;
        while from <= to.0 && out.len() < limit {
            let stored = self
                .scan(Scan {
                    from,
                    to: to.0,
                    filter: None,
                    limit: (limit - out.len()).min(READ_CHUNK),
                    reader: self.next_reader(),
                    whole_through: whole_through.0,
                })
                .await?;
            let Some(tail) = stored.last() else { break };
            from = tail.seq + 1;
            for message in &stored {
                out.push(message.decode(&self.subjects)?);
            }
        }
        Ok(out)
    }

    async fn conversations(&self) -> Result<Vec<ConversationKey>> {
        let stream = self.publisher.stream.clone();
        let mut subjects = stream
            .info_with_subjects(self.subjects.all())
            .await
            .map_err(|e| StoreError::cluster("listing conversations", e))?;
        let mut out = Vec::new();
        while let Some((subject, count)) = subjects
            .try_next()
            .await
            .map_err(|e| StoreError::cluster("listing conversations", e))?
        {
            match self.subjects.conversation(&subject) {
                Some(conversation) if count > 0 => out.push(conversation),
                Some(_) => {}
                None => {
                    return Err(StoreError::Corrupt {
                        what: format!("subject {subject}"),
                        reason: "it names no valid conversation key".into(),
                    })
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// Polls the stream's last seq for subscribers, so they see other nodes' appends.
    async fn follow(self: Arc<Self>) {
        loop {
            tokio::time::sleep(FOLLOW_POLL).await;
            if self.committed.receiver_count() == 0 {
                continue;
            }
            if let Err(e) = self.stream_last().await {
                tracing::debug!(error = %e, "polling the stream's last seq failed");
            }
        }
    }
}

impl EventLog for NatsLog {
    fn catch_up(&self, conversation: &ConversationKey) -> Result<()> {
        NatsLog::catch_up(self, conversation)
    }

    fn submit(&self, events: Vec<Event>) -> Result<AppendHandle> {
        let Some(submits) = &self.inner.submits else {
            return Err(StoreError::ReadOnly);
        };
        let events = encode_batch(events, self.inner.options.max_message_bytes)?;
        let mut conversations: Vec<ConversationKey> = Vec::new();
        for (event, _) in &events {
            if !conversations.contains(event.conversation()) {
                conversations.push(event.conversation().clone());
            }
        }
        let (reply, rx) = oneshot::channel();
        submits
            .send(Submit {
                events,
                conversations,
                reply,
            })
            .map_err(|_| StoreError::Closed)?;
        Ok(AppendHandle::pending(rx))
    }

    fn last_seq(&self) -> Seq {
        let inner = self.inner.clone();
        match self.block_on(async move { inner.stream_last().await }) {
            Ok(last) => last,
            // Unreachable cluster: what this node last knew.
            Err(_) => *self.inner.committed.borrow(),
        }
    }

    fn read_range(&self, from: Seq, to: Seq, limit: usize) -> Result<Vec<Record>> {
        m::read("range");
        if from > to {
            return Err(StoreError::BadRange {
                from,
                to,
                reason: "the start is after the end".into(),
            });
        }
        // One event this node appended lately (a turn's read of the message it answers).
        if from == to && limit > 0 {
            if let Some(record) = lock(&self.inner.recent).record(from) {
                return Ok(vec![record]);
            }
        }
        let inner = self.inner.clone();
        self.block_on(async move { inner.read_range(from, to, limit).await })
    }

    fn conversation_events(
        &self,
        conversation: &ConversationKey,
        after: Seq,
        limit: usize,
    ) -> Result<Vec<Record>> {
        m::read("conversation");
        self.with_projection(conversation, |p| p.events_after(after, limit))
    }

    fn conversations(&self) -> Result<Vec<ConversationKey>> {
        m::read("conversations");
        let inner = self.inner.clone();
        self.block_on(async move { inner.conversations().await })
    }

    fn visible_before(
        &self,
        conversation: &ConversationKey,
        viewer: Viewer<'_>,
        before: Seq,
        limit: usize,
    ) -> Result<Vec<Record>> {
        m::read("visible_window");
        self.with_projection(conversation, |p| p.visible_before(viewer, before, limit))
    }

    fn visible_after(
        &self,
        conversation: &ConversationKey,
        viewer: Viewer<'_>,
        after: Seq,
        limit: usize,
    ) -> Result<Vec<Record>> {
        m::read("visible_after");
        self.with_projection(conversation, |p| p.visible_after(viewer, after, limit))
    }

    fn session_state(
        &self,
        conversation: &ConversationKey,
        agent: &AgentName,
    ) -> Result<Option<AgentSessionState>> {
        m::read("session");
        self.with_projection(conversation, |p| p.session_state(agent))
    }

    fn session_states(&self, conversation: &ConversationKey) -> Result<Vec<AgentSessionState>> {
        m::read("sessions");
        self.with_projection(conversation, |p| p.session_states())
    }

    fn subscribe(&self, from: Seq) -> Subscription {
        if !self.inner.following.swap(true, Ordering::Relaxed) {
            self.runtime_handle().spawn(self.inner.clone().follow());
        }
        let inner = self.inner.clone();
        let handle = self.runtime_handle();
        let read = Arc::new(move |from: Seq, to: Seq, limit: usize| {
            let inner = inner.clone();
            block_on(
                &handle,
                async move { inner.read_range(from, to, limit).await },
            )
        });
        Subscription::new(read, self.inner.committed.subscribe(), from)
    }

    fn verify(&self, progress: &mut dyn FnMut(VerifyProgress)) -> Result<VerifyReport> {
        let _span = tracing::info_span!("verify").entered();
        verify_walk(
            &self.inner,
            &self.runtime_handle(),
            self.last_seq(),
            progress,
        )
    }

    fn flush(&self) -> Result<()> {
        // An acknowledged append is stored by JetStream already (see docs/cluster.md).
        Ok(())
    }

    fn size_on_disk(&self) -> Result<u64> {
        let stream = self.inner.publisher.stream.clone();
        self.block_on(async move {
            stream
                .get_info()
                .await
                .map(|info| info.state.bytes)
                .map_err(|e| StoreError::cluster("reading the stream's size", e))
        })
    }
}
