//! Ownership: which conversations this node runs, by lease. Before a conversation's actors start
//! here the node takes the conversation's lease (create-if-absent; its revision is the fencing
//! token) and reads the conversation again from the stream (`NatsLog::refresh`), so its agents
//! start from the log with the usual crash boundaries. One task renews every lease at TTL/3 and
//! watches, at TTL/8, for leases no longer trusted. A node that cannot renew for 3/4 of the TTL
//! (even while a renewal still waits on the cluster), whose lease was taken, or whose append
//! the log refused as fenced, stands down: the conversation's actors are killed (nothing more is
//! appended; turns in flight fail as moved) before the lease can expire. A conversation whose
//! actors were all reaped (idle), with no request of this node on it, is released: its lease
//! deleted by revision and its projection dropped, so any node may take it at the next post.
//! Beside them the node holds its presence lease (`legio:node:<id>`), claimed when it opens
//! (node_id.rs, which refuses an id another running process holds), renewed
//! with the others and released on a graceful stop, so `legio inspect nodes` lists a running
//! node that owns no conversation too; nothing is fenced by it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use legio_core::ConversationKey;
use legio_store::{node_lease_name, Lease, LeaseError, Leases, NatsLog};
use ractor::ActorRef;
use tokio::sync::oneshot;

use super::locks::ConversationLocks;
use super::AppendGate;
use crate::error::RuntimeError;
use crate::messages::RootMsg;
use crate::metrics as m;
use crate::reply::{Posted, TurnError, TurnErrorKind};

/// Who runs a conversation now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Owner {
    /// This node (it holds the lease).
    Here,
    /// Another node, by its id.
    Node(String),
}

struct Held {
    lease: Lease,
    renewed: Instant,
    /// When a request of this node on it last ended (or it was taken): for the idle sweep.
    used: Instant,
    /// Its actors retired and no request is on it: a release is under way (the lease is not
    /// trusted for appends any more; a request that comes first takes it back).
    releasing: bool,
}

/// The leases this node holds and what it does with them (see the module docs).
pub(crate) struct Ownership {
    /// Itself, for the release tasks it spawns.
    me: Weak<Ownership>,
    node: String,
    leases: Arc<Leases>,
    log: Arc<NatsLog>,
    held: Mutex<HashMap<ConversationKey, Held>>,
    /// How many requests of this node are on each conversation ([`InUse`]): taken before the
    /// request asks who owns the conversation, dropped when it ended. Locked before `held`.
    busy: Mutex<HashMap<ConversationKey, usize>>,
    /// Conversations stood down from since their last acquisition (for `settle`).
    left: Mutex<HashSet<ConversationKey>>,
    /// One take, renewal, release or catch-up of a conversation at a time (so two posts never
    /// race for the same lease on one node), each conversation on its own.
    acquiring: ConversationLocks,
    /// Reads of a conversation's subject running now (at most [`READS_IN_FLIGHT`]).
    reads: tokio::sync::Semaphore,
    root: OnceLock<ActorRef<RootMsg>>,
    renewer: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// This node's presence lease, once taken.
    presence: Mutex<Option<Lease>>,
    /// Conversations this node read without holding them (the log keeps a copy of each), with
    /// when last: `forget_reads` drops the copies unread for the idle timeout.
    read: Mutex<HashMap<ConversationKey, Instant>>,
}

/// How often taking a lease is tried before the post fails (within a TTL after a cluster error),
/// and the pause after a cluster error.
const ACQUIRE_ATTEMPTS: u32 = 5;
const ACQUIRE_PAUSE: Duration = Duration::from_millis(200);
/// How many leases `renew_all` renews at once.
const RENEWALS_IN_FLIGHT: usize = 16;
/// How many reads of a conversation's subject (a take's, a catch-up's) run at once on a node:
/// takes of different conversations do not wait for each other's locks, but a failover of many
/// conversations does not open a reader per conversation at once either.
const READS_IN_FLIGHT: usize = 4;

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn blocking<T: Send + 'static>(
    what: &'static str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, RuntimeError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| RuntimeError::Cancelled {
            what,
            source: legio_store::ErrorSource::new(e),
        })
}

impl Ownership {
    /// The ownership of `node`, which holds its presence lease `presence` (claimed at open:
    /// node_id.rs).
    pub(crate) fn new(
        node: String,
        leases: Arc<Leases>,
        log: Arc<NatsLog>,
        presence: Lease,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            me: me.clone(),
            node,
            leases,
            log,
            held: Mutex::new(HashMap::new()),
            busy: Mutex::new(HashMap::new()),
            left: Mutex::new(HashSet::new()),
            acquiring: ConversationLocks::default(),
            reads: tokio::sync::Semaphore::new(READS_IN_FLIGHT),
            root: OnceLock::new(),
            renewer: Mutex::new(None),
            presence: Mutex::new(Some(presence)),
            read: Mutex::new(HashMap::new()),
        })
    }

    /// This node's id.
    pub(crate) fn node(&self) -> &str {
        &self.node
    }

    /// How long a lease lives without renewal.
    pub(crate) fn ttl(&self) -> Duration {
        self.leases.ttl()
    }

    /// The root supervisor, whose conversations a stand-down stops.
    pub(crate) fn set_root(&self, root: ActorRef<RootMsg>) {
        let _ = self.root.set(root);
    }

    /// How long after its last renewal (measured from before the renewal was sent, so before
    /// the servers restarted the lease's TTL) a lease is trusted: 3/4 of the TTL, so a node
    /// stands down before another can take the lease.
    fn trust(&self) -> Duration {
        self.leases.ttl() * 3 / 4
    }

    fn fresh(&self, conversation: &ConversationKey) -> bool {
        lock(&self.held)
            .get(conversation)
            .is_some_and(|h| !h.releasing && h.renewed.elapsed() < self.trust())
    }

    /// Marks a request of this node on `conversation` until the guard drops: while one is on
    /// it, the conversation is not released. Take it before asking who owns the conversation.
    pub(crate) fn pin(&self, conversation: &ConversationKey) -> InUse {
        *lock(&self.busy).entry(conversation.clone()).or_insert(0) += 1;
        InUse {
            ownership: self.me.clone(),
            conversation: conversation.clone(),
        }
    }

    fn unpin(&self, conversation: &ConversationKey) {
        let mut busy = lock(&self.busy);
        if let Some(count) = busy.get_mut(conversation) {
            *count -= 1;
            if *count == 0 {
                busy.remove(conversation);
            }
        }
        if let Some(h) = lock(&self.held).get_mut(conversation) {
            h.used = Instant::now();
        }
    }

    /// Before a read of `conversation` on a node that does not own it: reads what was appended
    /// to it since this node last looked, so the read shows what its owner appended (this node's
    /// copy is only kept current by its own appends). The owner's own copy is current.
    pub(crate) async fn catch_up(
        &self,
        conversation: &ConversationKey,
    ) -> Result<(), RuntimeError> {
        if conversation.is_reserved() || self.fresh(conversation) {
            return Ok(());
        }
        // Not while this node takes the conversation (and starts appending to it).
        let _one = self.acquiring.lock(conversation).await;
        if self.fresh(conversation) {
            return Ok(());
        }
        let (log, key) = (Arc::clone(&self.log), conversation.clone());
        let _reading = self.reads.acquire().await;
        blocking("reading a conversation another node owns", move || {
            log.catch_up(&key)
        })
        .await??;
        let mut read = lock(&self.read);
        read.insert(conversation.clone(), Instant::now());
        metrics::gauge!(m::READ_COPIES).set(read.len() as f64);
        Ok(())
    }

    /// Drops the log's copies of the conversations this node read without holding them and has
    /// not read since `idle` (the reaper calls it): a later read loads them again from the
    /// stream. Each under its conversation's lock, so no take or catch-up of it runs meanwhile;
    /// a conversation held now, or read again meanwhile, is left alone (a held one's copy is the
    /// owner's).
    pub(crate) async fn forget_reads(&self, idle: Duration) {
        let stale: Vec<ConversationKey> = {
            let held = lock(&self.held);
            let mut read = lock(&self.read);
            read.retain(|key, _| !held.contains_key(key));
            metrics::gauge!(m::READ_COPIES).set(read.len() as f64);
            read.iter()
                .filter(|(_, at)| at.elapsed() >= idle)
                .map(|(key, _)| key.clone())
                .collect()
        };
        let mut dropped = 0;
        for conversation in &stale {
            let _one = self.acquiring.lock(conversation).await;
            {
                let held = lock(&self.held);
                let mut read = lock(&self.read);
                let unread = read
                    .get(conversation)
                    .is_some_and(|at| at.elapsed() >= idle);
                if held.contains_key(conversation) || !unread {
                    continue;
                }
                read.remove(conversation);
                metrics::gauge!(m::READ_COPIES).set(read.len() as f64);
            }
            self.log.forget(conversation);
            dropped += 1;
        }
        if dropped > 0 {
            tracing::debug!(node = %self.node, dropped, "dropped the copies of conversations read but not owned");
        }
    }

    /// The conversations this node owns, with their leases and when they were last renewed.
    pub(crate) fn owned(&self) -> Vec<(ConversationKey, Lease, Duration)> {
        let mut out: Vec<_> = lock(&self.held)
            .iter()
            .filter(|(_, h)| !h.releasing)
            .map(|(k, h)| (k.clone(), h.lease.clone(), h.renewed.elapsed()))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Who holds `conversation`'s lease now (`None`: nobody), without taking it.
    pub(crate) async fn holder(
        &self,
        conversation: &ConversationKey,
    ) -> Result<Option<String>, RuntimeError> {
        if self.fresh(conversation) {
            return Ok(Some(self.node.clone()));
        }
        // Retried for a TTL at most, as taking a lease is: with the cluster down, the request
        // that asks fails as soon as a post would (not at the append deadline).
        let (leases, name, within) = (
            Arc::clone(&self.leases),
            conversation.to_string(),
            self.ttl(),
        );
        let lease = blocking("reading a lease", move || leases.get_within(&name, within)).await??;
        Ok(lease
            .map(|(lease, _)| lease.holder)
            .filter(|holder| !holder.is_empty()))
    }

    /// Who runs `conversation`: this node if it holds the lease, or takes it now because nobody
    /// does; otherwise the holder.
    pub(crate) async fn owner(
        &self,
        conversation: &ConversationKey,
    ) -> Result<Owner, RuntimeError> {
        if self.fresh(conversation) {
            return Ok(Owner::Here);
        }
        let _one = self.acquiring.lock(conversation).await;
        if self.fresh(conversation) {
            return Ok(Owner::Here);
        }
        // Being released (its actors retired): the caller's pin keeps it; the release, which
        // waits for the conversation's lock, then finds it taken back and lets it be.
        if let Some(h) = lock(&self.held).get_mut(conversation) {
            h.releasing = false;
        }
        if self.fresh(conversation) {
            return Ok(Owner::Here);
        }
        // Held but not renewed lately (a slow or failed renewal): renew it now; if it is lost
        // or cannot be renewed, this node stood down and tries to take it as anyone would.
        if lock(&self.held).contains_key(conversation) && self.renew(conversation).await? {
            return Ok(Owner::Here);
        }
        let started = Instant::now();
        for attempt in 1..=ACQUIRE_ATTEMPTS {
            let (leases, name, node) = (
                Arc::clone(&self.leases),
                conversation.to_string(),
                self.node.clone(),
            );
            let taken = blocking("taking a lease", move || leases.acquire(&name, &node)).await?;
            let lease = match taken {
                Ok(lease) => lease,
                // Our own lease from before a restart of this node: take it back by revision.
                Err(LeaseError::Held {
                    name,
                    holder,
                    revision,
                }) if holder == self.node => {
                    let leases = Arc::clone(&self.leases);
                    let old = Lease {
                        name,
                        holder,
                        revision,
                    };
                    match blocking("taking a lease", move || leases.renew(&old)).await? {
                        Ok(lease) => lease,
                        Err(LeaseError::Lost { .. }) => continue,
                        Err(e) => return Err(e.into()),
                    }
                }
                // Expired between the refused create and the read: try again.
                Err(LeaseError::Held { holder, .. }) if holder.is_empty() => continue,
                Err(LeaseError::Held { holder, .. }) => return Ok(Owner::Node(holder)),
                // A replica of the bucket not ready yet (a server restarting, a leader moving);
                // for up to a TTL, not for five timeouts with the cluster out of reach. (Within
                // one try, a create the cluster refused retries its read of the holder for a
                // `request_timeout` and a TTL: `Leases::acquire`.)
                Err(LeaseError::Store(e))
                    if attempt < ACQUIRE_ATTEMPTS && started.elapsed() < self.ttl() =>
                {
                    tracing::info!(conversation = %conversation, error = %e, "taking a lease failed; trying again");
                    tokio::time::sleep(ACQUIRE_PAUSE).await;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            self.take(conversation, lease).await?;
            return Ok(Owner::Here);
        }
        Err(RuntimeError::Moved {
            conversation: conversation.to_string(),
            reason: "its lease changed hands while this node tried to take it".into(),
        })
    }

    /// Starts owning `conversation` under `lease`: reads it again from the stream first (the
    /// projection, and the lifting of an old refusal), so appends expect its true last seq.
    async fn take(&self, conversation: &ConversationKey, lease: Lease) -> Result<(), RuntimeError> {
        let started = Instant::now();
        let (log, key) = (Arc::clone(&self.log), conversation.clone());
        let reading = self.reads.acquire().await;
        blocking("reading a conversation taken over", move || {
            log.refresh(&key)
        })
        .await??;
        drop(reading);
        tracing::info!(conversation = %conversation, node = %self.node, revision = lease.revision, "took the conversation's lease");
        metrics::counter!(m::LEASES_ACQUIRED).increment(1);
        lock(&self.left).remove(conversation);
        let mut held = lock(&self.held);
        held.insert(
            conversation.clone(),
            Held {
                lease,
                renewed: started,
                used: Instant::now(),
                releasing: false,
            },
        );
        metrics::gauge!(m::LEASES_HELD).set(held.len() as f64);
        Ok(())
    }

    /// Starts the task that renews every lease at TTL/3 and, beside it, stands down at TTL/8
    /// from every lease no longer trusted: a renewal can wait for the cluster longer than the
    /// lease lives (`request_timeout`, 5 s, against a TTL of 2 s; or several conversations
    /// renewed one after another), and the actors must stop before the lease can expire. Each
    /// presence round also reads the bucket's TTL again (`Leases::follow_bucket_ttl`), and the
    /// periods follow the TTL trusted.
    pub(crate) fn start_renewing(self: &Arc<Self>) {
        let ownership = Arc::clone(self);
        let task = tokio::spawn(async move {
            let renewing = async {
                loop {
                    tokio::time::sleep(ownership.ttl() / 3).await;
                    ownership.renew_all().await;
                }
            };
            // Beside the conversations' renewals, never delaying them; a failed take is tried
            // again soon (the first one can meet a lease bucket still electing its leader).
            let present = async {
                loop {
                    let pause = if ownership.keep_presence().await {
                        ownership.follow_bucket_ttl().await;
                        ownership.ttl() / 3
                    } else {
                        ACQUIRE_PAUSE
                    };
                    tokio::time::sleep(pause).await;
                }
            };
            let watching = async {
                loop {
                    tokio::time::sleep(ownership.ttl() / 8).await;
                    ownership.stand_down_untrusted().await;
                }
            };
            tokio::join!(renewing, watching, present);
        });
        *lock(&self.renewer) = Some(task);
    }

    /// Stands down from every held conversation whose lease was not renewed within its trust
    /// (3/4 of the TTL), without waiting for a renewal still pending on the cluster.
    async fn stand_down_untrusted(&self) {
        let stale: Vec<ConversationKey> = lock(&self.held)
            .iter()
            .filter(|(_, h)| !h.releasing && h.renewed.elapsed() >= self.trust())
            .map(|(conversation, _)| conversation.clone())
            .collect();
        for conversation in stale {
            self.stand_down(&conversation, "unrenewed").await;
        }
    }

    /// Trusts the bucket's TTL if another node made it shorter (a failed read keeps the TTL
    /// trusted so far; the next round reads again).
    async fn follow_bucket_ttl(&self) {
        let leases = Arc::clone(&self.leases);
        let read = blocking("reading the lease bucket's TTL", move || {
            leases.follow_bucket_ttl()
        })
        .await;
        if let Ok(Err(e)) = read {
            tracing::debug!(error = %e, "reading the lease bucket's TTL failed; trying next round");
        }
    }

    /// Takes this node's presence lease, or renews it (taking back its own from before a
    /// restart within the TTL); answers whether it holds it. A failure is logged.
    async fn keep_presence(&self) -> bool {
        let held = lock(&self.presence).clone();
        let (leases, node) = (Arc::clone(&self.leases), self.node.clone());
        let kept = blocking("keeping the node's presence", move || {
            keep_presence(&leases, &node, held)
        })
        .await;
        match kept {
            Ok(Ok(lease)) => {
                *lock(&self.presence) = Some(lease);
                true
            }
            Ok(Err(e)) => {
                tracing::warn!(node = %self.node, error = %e, "cannot keep the node's presence lease; trying again");
                false
            }
            Err(_) => false, // the runtime is stopping
        }
    }

    /// Renews every lease held, up to [`RENEWALS_IN_FLIGHT`] at once, each under its
    /// conversation's lock. A conversation whose lock is busy is left for this round: whoever
    /// holds the lock is taking it (then it is not held yet), releasing it, or serving a request
    /// on it (`owner`, which renews a lease not renewed lately itself); so a long take of one
    /// conversation holds up no other's renewal.
    async fn renew_all(self: &Arc<Self>) {
        let conversations: Vec<ConversationKey> = lock(&self.held).keys().cloned().collect();
        let slots = Arc::new(tokio::sync::Semaphore::new(RENEWALS_IN_FLIGHT));
        let mut renewals = tokio::task::JoinSet::new();
        for conversation in conversations {
            let (me, slots) = (Arc::clone(self), Arc::clone(&slots));
            renewals.spawn(async move {
                let _slot = slots.acquire_owned().await;
                let Some(_one) = me.acquiring.try_lock(&conversation) else {
                    return;
                };
                // An error: the runtime is stopping.
                let _ = me.renew(&conversation).await;
            });
        }
        while renewals.join_next().await.is_some() {}
    }

    /// Renews `conversation`'s lease if this node holds it (the caller holds its lock, so a
    /// renewal never races another with the same revision). Stands down when the lease is lost,
    /// or when it cannot be renewed and is no longer trusted. Answers whether it is held and
    /// trusted afterwards.
    async fn renew(&self, conversation: &ConversationKey) -> Result<bool, RuntimeError> {
        let Some(lease) = lock(&self.held).get(conversation).map(|h| h.lease.clone()) else {
            return Ok(false);
        };
        let started = Instant::now();
        let store = Arc::clone(&self.leases);
        let renewed = blocking("renewing a lease", move || store.renew(&lease)).await?;
        metrics::histogram!(m::LEASE_RENEW_LATENCY).record(started.elapsed().as_secs_f64());
        match renewed {
            Ok(lease) => {
                if let Some(h) = lock(&self.held).get_mut(conversation) {
                    h.lease = lease;
                    h.renewed = started;
                }
            }
            Err(LeaseError::Lost { .. }) => self.stand_down(conversation, "lost").await,
            Err(e) => {
                tracing::warn!(conversation = %conversation, error = %e, "cannot renew a lease");
                if !self.fresh(conversation) {
                    self.stand_down(conversation, "unrenewed").await;
                }
            }
        }
        Ok(self.fresh(conversation))
    }

    /// Stops running `conversation` here: forgets its lease (without releasing it: it is lost or
    /// not trusted) and kills its actors, recording nothing.
    pub(crate) async fn stand_down(&self, conversation: &ConversationKey, why: &'static str) {
        if let Some(stopped) = self.forget(conversation, why) {
            let _ = stopped.await;
        }
    }

    /// The stand-down itself: forgets the lease, counts it, makes the log refuse every append
    /// to the conversation and drop its projection (until a take refreshes it), and asks the
    /// root to kill the conversation's actors; the answer comes when they are stopped.
    fn forget(
        &self,
        conversation: &ConversationKey,
        why: &'static str,
    ) -> Option<oneshot::Receiver<()>> {
        self.log.stand_down(conversation);
        {
            let mut held = lock(&self.held);
            if held.remove(conversation).is_some() {
                tracing::warn!(conversation = %conversation, node = %self.node, why, "stood down from the conversation");
                metrics::counter!(m::LEASES_LOST, "why" => why).increment(1);
            }
            metrics::gauge!(m::LEASES_HELD).set(held.len() as f64);
        }
        lock(&self.left).insert(conversation.clone());
        let (tx, rx) = oneshot::channel();
        let message = RootMsg::StandDown {
            conversation: conversation.clone(),
            reply: tx,
        };
        self.root.get()?.send_message(message).ok()?;
        Some(rx)
    }

    /// `conversation`'s actors all stopped and nothing is queued for it (the root says so, in
    /// its order with the routing): unless a request of this node is on it, its lease is
    /// released in the background (see [`Ownership::release`]). At once, appends to it are
    /// refused and a request for it goes through `owner` (which keeps it).
    pub(crate) fn retired(&self, conversation: &ConversationKey) {
        {
            let busy = lock(&self.busy);
            if busy.contains_key(conversation) {
                return;
            }
            let mut held = lock(&self.held);
            let Some(h) = held.get_mut(conversation).filter(|h| !h.releasing) else {
                return;
            };
            h.releasing = true;
        }
        let Some(me) = self.me.upgrade() else { return };
        let conversation = conversation.clone();
        tokio::spawn(async move { me.release(conversation).await });
    }

    /// The conversations held here with no request on them since `idle`: the reaper asks the
    /// root to release those that run no actor (a post that started none, a failed one).
    pub(crate) fn unused_for(&self, idle: Duration) -> Vec<ConversationKey> {
        let busy = lock(&self.busy);
        lock(&self.held)
            .iter()
            .filter(|(k, h)| !h.releasing && h.used.elapsed() >= idle && !busy.contains_key(*k))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Releases a conversation marked `releasing`, under its lock (so no take, renewal or
    /// catch-up of it runs meanwhile on this node): forgets it, drops the log's projection of it (a
    /// later take reads it again with `refresh`; a read here reloads it) and deletes the lease
    /// by the revision held (a lease taken back meanwhile has a newer one and stays).
    async fn release(&self, conversation: ConversationKey) {
        let _one = self.acquiring.lock(&conversation).await;
        let lease = {
            let mut held = lock(&self.held);
            if !held.get(&conversation).is_some_and(|h| h.releasing) {
                return; // taken back by a request, or stood down
            }
            let lease = held.remove(&conversation).map(|h| h.lease);
            metrics::gauge!(m::LEASES_HELD).set(held.len() as f64);
            lease
        };
        let Some(lease) = lease else { return };
        let (log, leases, key) = (
            Arc::clone(&self.log),
            Arc::clone(&self.leases),
            conversation.clone(),
        );
        let released = blocking("releasing an idle lease", move || {
            log.forget(&key);
            leases.release(lease)
        })
        .await;
        match released {
            Ok(Ok(())) => {
                tracing::info!(conversation = %conversation, node = %self.node, "released the lease of an idle conversation");
                metrics::counter!(m::LEASES_RELEASED).increment(1);
            }
            Ok(Err(e)) => {
                tracing::warn!(conversation = %conversation, error = %e, "cannot release an idle lease; it expires after its TTL");
            }
            Err(_) => {} // the runtime is stopping
        }
    }

    /// Turns cut by a stand-down during a post answer as moved, not as crashed.
    pub(crate) fn settle(&self, conversation: &ConversationKey, mut posted: Posted) -> Posted {
        if !lock(&self.left).contains(conversation) {
            return posted;
        }
        for reply in &mut posted.replies {
            if let Err(e) = &mut reply.outcome {
                if matches!(e.kind, TurnErrorKind::Crashed | TurnErrorKind::ShutDown) {
                    *e = TurnError::new(
                        TurnErrorKind::Moved,
                        format!(
                            "conversation {conversation} moved to another node during the turn; its outcome is in the log"
                        ),
                    );
                }
            }
        }
        posted
    }

    /// Stops renewing.
    pub(crate) fn abort(&self) {
        if let Some(task) = lock(&self.renewer).take() {
            task.abort();
        }
    }

    /// Stops renewing; with `release`, gives every lease up, its presence last.
    pub(crate) async fn stop(&self, release: bool) {
        self.abort();
        let held: Vec<Lease> = lock(&self.held).drain().map(|(_, h)| h.lease).collect();
        let presence = lock(&self.presence).take();
        metrics::gauge!(m::LEASES_HELD).set(0.0);
        if !release {
            return;
        }
        let leases = Arc::clone(&self.leases);
        let _ = blocking("releasing leases", move || {
            for lease in held.into_iter().chain(presence) {
                // A renewal the stop cut short (its blocking call runs on after the renewing
                // task is aborted) may have moved the lease's revision: release its latest.
                if let Err(e) = leases.release_latest(lease) {
                    tracing::warn!(error = %e, "cannot release a lease; it expires after its TTL");
                }
            }
        })
        .await;
    }
}

/// Renews `held`, this node's presence lease, or takes it back when it lost it (it expired
/// while renewals failed, or was written by a renewal whose answer never came).
fn keep_presence(leases: &Leases, node: &str, held: Option<Lease>) -> Result<Lease, LeaseError> {
    if let Some(lease) = held {
        match leases.renew(&lease) {
            Err(LeaseError::Lost { revision, .. }) => tracing::warn!(
                node,
                revision,
                "node {node}'s presence lease moved past the revision this process holds: it \
                 expired, a renewal's answer was lost, or another process runs as {node} \
                 (each start checks for one: docs/cluster.md); taking it back"
            ),
            kept => return kept,
        }
    }
    match leases.acquire(&node_lease_name(node), node) {
        Err(LeaseError::Held {
            name,
            holder,
            revision,
        }) if holder == node => leases.renew(&Lease {
            name,
            holder,
            revision,
        }),
        taken => taken,
    }
}

/// A request of this node on a conversation ([`Ownership::pin`]): the conversation is not
/// released while it lives.
pub(crate) struct InUse {
    ownership: Weak<Ownership>,
    conversation: ConversationKey,
}

impl Drop for InUse {
    fn drop(&mut self) {
        if let Some(ownership) = self.ownership.upgrade() {
            ownership.unpin(&self.conversation);
        }
    }
}

impl AppendGate for Ownership {
    fn check(&self, conversation: &ConversationKey) -> Result<(), RuntimeError> {
        if conversation.is_reserved() || self.fresh(conversation) {
            return Ok(());
        }
        Err(RuntimeError::Moved {
            conversation: conversation.to_string(),
            reason: "this node does not hold its lease".into(),
        })
    }

    fn fenced(&self, conversation: &str) {
        let Ok(key) = ConversationKey::new(conversation.to_owned()) else {
            return;
        };
        if key.is_reserved() {
            return;
        }
        // Called from an append, perhaps by one of the actors to stop: do not wait for them.
        let _ = self.forget(&key, "fenced");
    }

    fn retired(&self, conversation: &ConversationKey) {
        Ownership::retired(self, conversation);
    }
}
