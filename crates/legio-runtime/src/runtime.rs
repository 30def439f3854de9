//! The running legion ([`Runtime`]): its shared state, its root supervisor and actors, its
//! cluster layer, and what every verb needs of them (the roster's names checked, the route to a
//! conversation's supervisor, a job dispatched to agents and their replies gathered); the
//! reaper, and shutdown. The host's API is in api/ (open, post, the other verbs, reads); each
//! verb is a command (command/). One agent's failure or timeout is an error reply for that agent
//! only.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use legio_config::RuntimeConfig;
use legio_core::{AgentName, ConversationKey, Seq};
use legio_store::EventLog;
use ractor::ActorRef;
use tokio::sync::oneshot;

use crate::agent::dispatch::{gather, RootRoute};
use crate::error::RuntimeError;
use crate::messages::{ConversationMsg, Job, RootMsg};
use crate::names::IntoName;
use crate::placement::Cluster;
use crate::reply::AgentReply;
use crate::shared::{DispatchTicket, Shared};
use crate::status::Activity;
use crate::tools::memory::MemoryTools;

/// A running legion: the log, the supervisors and their agent actors.
pub struct Runtime {
    pub(crate) shared: Arc<Shared>,
    pub(crate) root: ActorRef<RootMsg>,
    pub(crate) reaper: Arc<Mutex<Option<tokio::task::JoinHandle<()>>>>,
    /// The heartbeat schedules' tasks (schedule.rs), aborted with the reaper.
    pub(crate) schedules: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    pub(crate) stopped: Arc<AtomicBool>,
    /// On the NATS backend: leases and the routing of posts to the owning node.
    pub(crate) cluster: Option<Arc<Cluster>>,
    /// The log's last seq when this runtime opened: sessions open at or before it were opened by
    /// an earlier process.
    pub(crate) started_at: Seq,
    /// False for the handle the cluster's routing serves forwarded posts with (its drop stops
    /// nothing).
    pub(crate) primary: bool,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("log", &self.shared.log)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// A second handle on this runtime's actors, for the cluster's routing to serve forwarded
    /// posts with.
    pub(crate) fn handle(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            root: self.root.clone(),
            reaper: Arc::clone(&self.reaper),
            schedules: Arc::clone(&self.schedules),
            stopped: Arc::clone(&self.stopped),
            cluster: self.cluster.clone(),
            started_at: self.started_at,
            primary: false,
        }
    }

    /// The cluster layer (`None` off a cluster).
    pub(crate) fn cluster(&self) -> Option<&Cluster> {
        self.cluster.as_deref()
    }

    /// This node's id in its cluster (`None` off a cluster).
    pub fn node(&self) -> Option<&str> {
        self.cluster.as_ref().map(|c| c.ownership.node())
    }

    /// The conversations this node owns in its cluster (empty off a cluster), in key order, each
    /// with its lease revision and the time since the lease was last renewed.
    pub fn owned_conversations(&self) -> Vec<(ConversationKey, u64, Duration)> {
        self.cluster.as_ref().map_or_else(Vec::new, |c| {
            c.ownership
                .owned()
                .into_iter()
                .map(|(key, lease, age)| (key, lease.revision, age))
                .collect()
        })
    }

    /// On a cluster, before a read of `conversation`: a node that does not own it reads what its
    /// owner appended since this node last looked (this node's copy moves only with its own
    /// appends), so the read shows the owner's appends. The runtime's own reads (history,
    /// status, context) do it themselves; call it before reading a conversation through
    /// [`Runtime::log`]. Off a cluster, and on the owner, it does nothing.
    pub async fn catch_up(&self, conversation: &ConversationKey) -> Result<(), RuntimeError> {
        match &self.cluster {
            Some(cluster) => cluster.ownership.catch_up(conversation).await,
            None => Ok(()),
        }
    }

    pub(crate) fn start_reaper(&self) {
        let interval = self.shared.config.runtime.reap_interval;
        let idle = self.shared.config.runtime.idle_timeout;
        let root = self.root.clone();
        let cluster = self.cluster.clone();
        let task = tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.tick().await;
            loop {
                ticker.tick().await;
                let reaped = reap(&root, idle).await;
                release_unused(cluster.as_deref(), &root, idle);
                if let Some(cluster) = &cluster {
                    cluster.ownership.forget_reads(idle).await;
                }
                match reaped {
                    Ok(n) if n > 0 => tracing::info!(reaped = n, "reaped idle agents"),
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        });
        if let Ok(mut slot) = self.reaper.lock() {
            *slot = Some(task);
        }
    }

    /// The event log.
    pub fn log(&self) -> &Arc<dyn EventLog> {
        &self.shared.log
    }

    /// The configuration.
    pub fn config(&self) -> &RuntimeConfig {
        &self.shared.config
    }

    pub(crate) fn check_running(&self) -> Result<(), RuntimeError> {
        if self.stopped.load(Ordering::SeqCst) {
            Err(RuntimeError::ShutDown)
        } else {
            Ok(())
        }
    }

    /// An agent of the roster.
    pub(crate) fn roster_agent(
        &self,
        agent: impl IntoName<AgentName>,
    ) -> Result<AgentName, RuntimeError> {
        let agent = agent.into_name()?;
        Ok(self.shared.roster_spec(&agent)?.name.clone())
    }

    /// A conversation key a host may write to: valid and not reserved (`legio:...`).
    pub(crate) fn host_conversation(
        conversation: impl IntoName<ConversationKey>,
    ) -> Result<ConversationKey, RuntimeError> {
        let key = conversation.into_name()?;
        if key.is_reserved() {
            return Err(RuntimeError::ReservedConversation {
                key: key.as_str().to_owned(),
            });
        }
        Ok(key)
    }

    /// The route to the conversation's supervisor: through the root, which starts it on first
    /// need and retires it once its agents are reaped (root.rs).
    pub(crate) fn route_to(&self, key: &ConversationKey) -> RootRoute {
        RootRoute {
            root: self.root.clone(),
            conversation: key.clone(),
        }
    }

    /// How long a post waits for a reply: the actor enforces the turn timeout; this margin covers
    /// a restart backoff on top.
    fn reply_wait(&self) -> Duration {
        let runtime = &self.shared.config.runtime;
        runtime.turn_timeout + runtime.restart.max_backoff + Duration::from_secs(5)
    }

    /// Sends a job to each target in parallel and gathers the replies in order.
    pub(crate) async fn dispatch(
        &self,
        key: &ConversationKey,
        job: Job,
        targets: &[AgentName],
        ticket: Option<DispatchTicket>,
    ) -> Vec<AgentReply> {
        if targets.is_empty() {
            return Vec::new();
        }
        let progress = match &job {
            Job::Turn(request) => request.progress.clone(),
            Job::Heartbeat { .. } | Job::Resume { .. } => None,
        };
        let route = self.route_to(key);
        gather(
            &route,
            job,
            targets,
            self.reply_wait(),
            progress.as_ref(),
            ticket,
        )
        .await
    }

    /// The memory tools' executor: what a tool loop calls with an agent's memory tool calls, and
    /// what describes them ([`MemoryTools::tools_for`]). It holds the log: drop every clone
    /// before opening the log again.
    pub fn memory_tools(&self) -> &Arc<MemoryTools> {
        &self.shared.memory
    }

    /// The shared memory as it stands (directives, notes, every notebook): the operator's and
    /// host's view, unrestricted.
    pub async fn memory(&self) -> Result<legio_core::MemoryState, RuntimeError> {
        self.shared.memory.snapshot().await
    }

    /// What each agent of `conversation` is doing on this node.
    pub(crate) fn board_here(&self, conversation: &ConversationKey) -> Vec<(AgentName, Activity)> {
        let board = &self.shared.conversations;
        self.shared
            .config
            .agents
            .iter()
            .map(|spec| (spec.name.clone(), board.activity(conversation, &spec.name)))
            .collect()
    }

    /// Stops every agent idle longer than the configured timeout (the reaper does this on its
    /// interval). Returns how many were stopped.
    pub async fn reap_idle(&self) -> Result<usize, RuntimeError> {
        self.reap_idle_older_than(self.shared.config.runtime.idle_timeout)
            .await
    }

    /// Like [`Runtime::reap_idle`] with an explicit idle threshold. A conversation supervisor
    /// left with no agent retires (soon after, through the root) and lets its conversation's
    /// entry go (conversation/): a conversation nobody talks to costs nothing in memory (see
    /// `docs/runtime-semantics.md`).
    pub async fn reap_idle_older_than(&self, idle: Duration) -> Result<usize, RuntimeError> {
        let reaped = reap(&self.root, idle).await;
        release_unused(self.cluster.as_deref(), &self.root, idle);
        reaped
    }

    /// How many conversations have a running supervisor (those with a live agent, and those
    /// whose agents were reaped a moment ago and that are about to retire).
    pub async fn live_conversations(&self) -> usize {
        self.supervisors().await.len()
    }

    /// How many conversations hold in-memory state in this process (one entry each: their
    /// dispatch order, keyed ids, declared host tools, waiting calls, followers, activities).
    /// An entry goes as a whole once its conversation's supervisor retired and no request is on
    /// it, so with every conversation retired this is 0.
    pub fn conversations_in_memory(&self) -> usize {
        self.shared.conversations.len()
    }

    async fn supervisors(&self) -> Vec<ActorRef<ConversationMsg>> {
        let (tx, rx) = oneshot::channel();
        if self.root.send_message(RootMsg::All { reply: tx }).is_err() {
            return Vec::new();
        }
        rx.await.unwrap_or_default()
    }

    /// Stops the reaper and the heartbeat schedules (schedule.rs).
    fn stop_reaper(&self) {
        if let Some(task) = self.reaper.lock().ok().and_then(|mut t| t.take()) {
            task.abort();
        }
        if let Ok(mut schedules) = self.schedules.lock() {
            schedules.drain(..).for_each(|task| task.abort());
        }
    }

    /// Graceful shutdown: stops the reaper, suspends (or closes) every open session, stops the
    /// actors and flushes the log; the log closes when the runtime is dropped here.
    pub async fn shutdown(self) -> Result<(), RuntimeError> {
        self.stop().await
    }

    /// [`Runtime::shutdown`] through a shared reference, for a host whose requests may still
    /// hold the runtime (a server's handlers): they get [`RuntimeError::ShutDown`] from then on;
    /// the log closes when the last holder drops the runtime.
    pub async fn stop(&self) -> Result<(), RuntimeError> {
        self.stopped.store(true, Ordering::SeqCst);
        self.stop_reaper();
        for supervisor in self.supervisors().await {
            let (tx, rx) = oneshot::channel();
            if supervisor
                .send_message(ConversationMsg::Shutdown { reply: tx })
                .is_ok()
            {
                let _ = rx.await;
            }
        }
        if let Some(cluster) = &self.cluster {
            cluster.stop(true).await;
        }
        self.teardown().await;
        let log = Arc::clone(&self.shared.log);
        tokio::task::spawn_blocking(move || log.flush())
            .await
            .map_err(|e| RuntimeError::Cancelled {
                what: "flushing the log",
                source: legio_store::ErrorSource::new(e),
            })??;
        Ok(())
    }

    /// Stops every actor at once without recording any boundary, as if the process had been
    /// killed; the next `open` recovers (open sessions are closed or suspended as crashed). For
    /// tests, demos and hosts that must stop immediately.
    pub async fn abort(self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.stop_reaper();
        if let Some(cluster) = &self.cluster {
            cluster.stop(false).await;
        }
        self.teardown().await;
    }

    async fn teardown(&self) {
        for supervisor in self.supervisors().await {
            let (tx, rx) = oneshot::channel();
            if supervisor
                .send_message(ConversationMsg::Kill { reply: tx })
                .is_ok()
            {
                let _ = rx.await;
            }
        }
        let _ = self
            .root
            .stop_and_wait(None, Some(Duration::from_secs(5)))
            .await;
        self.shared.mcp.stop().await;
    }
}

async fn reap(root: &ActorRef<RootMsg>, idle: Duration) -> Result<usize, RuntimeError> {
    let (tx, rx) = oneshot::channel();
    root.send_message(RootMsg::All { reply: tx })
        .map_err(|_| RuntimeError::ShutDown)?;
    let supervisors = rx.await.map_err(|_| RuntimeError::ShutDown)?;
    let mut total = 0;
    for supervisor in supervisors {
        let (tx, rx) = oneshot::channel();
        if supervisor
            .send_message(ConversationMsg::Reap { idle, reply: tx })
            .is_ok()
        {
            total += rx.await.unwrap_or(0);
        }
    }
    Ok(total)
}

/// On a cluster: the conversations held with no request on them for `idle` go to the root,
/// which has the ownership layer release those that run no supervisor (the others are released
/// when their supervisor retires).
fn release_unused(cluster: Option<&Cluster>, root: &ActorRef<RootMsg>, idle: Duration) {
    let Some(cluster) = cluster else { return };
    for conversation in cluster.ownership.unused_for(idle) {
        let _ = root.send_message(RootMsg::Release { conversation });
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if self.primary && !self.stopped.load(Ordering::SeqCst) {
            if let Some(cluster) = &self.cluster {
                cluster.abort();
            }
            tracing::warn!("runtime dropped without shutdown() or abort(): stopping actors without recording boundaries");
            self.stop_reaper();
            self.root.stop(None);
        }
    }
}
