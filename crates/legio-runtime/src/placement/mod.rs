//! The cluster layer of a runtime on the NATS backend (`docs/cluster.md`), the only code that
//! knows a cluster exists: a conversation's actors run on one node at a time, the holder of the
//! conversation's lease (ownership.rs; one process per node id, node_id.rs), and a command
//! (command/) that reaches another node is carried to the one that runs its conversation over
//! the node bus (routing.rs, with its wire form in wire.rs). What it hands a command that runs
//! here is a [`Here`] guard. A runtime on sled, or on a log the host opened, has none of it.

mod locks;
mod node_id;
mod ownership;
mod routing;
mod wire;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use legio_core::ConversationKey;
use legio_store::{Leases, NatsLog, NatsOptions, NodeBus};

use serde::de::DeserializeOwned;

use crate::error::RuntimeError;
use crate::progress::ProgressSink;
use crate::reply::Posted;

pub(crate) use ownership::{InUse, Owner, Ownership};
pub(crate) use routing::{Placed, RequestHandler};

/// Asked by `Shared` around every append (see `Shared::append`).
pub(crate) trait AppendGate: Send + Sync {
    /// Whether this node may append to `conversation` now: it holds the conversation's lease
    /// and renewed it recently. Reserved conversations (`legio:memory`) are not owned.
    fn check(&self, conversation: &ConversationKey) -> Result<(), RuntimeError>;
    /// The log refused an append to `conversation` as fenced: another writer appended.
    fn fenced(&self, conversation: &str);
    /// From the root supervisor: `conversation` runs no actor and nothing is queued for it (its
    /// actors were reaped, or it never started one). The ownership layer may let it go.
    fn retired(&self, conversation: &ConversationKey);
}

/// Where a command runs on a cluster (off a cluster, always here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// On the conversation's owner: the node holding its lease, or this one, which takes the
    /// lease when nobody holds it. Served on a node that no longer owns it, it fails as moved.
    Owner,
    /// On the node holding the conversation's lease when another node does (asked once, no
    /// retry); here otherwise, taking no lease: a question only the holder's memory answers.
    Holder,
}

/// A command as the placement sees it: its kind, where it runs, its conversation, and its
/// body for the bus (made only when it is sent).
pub(crate) struct Parcel<'a> {
    pub(crate) kind: &'static str,
    pub(crate) place: Place,
    pub(crate) conversation: &'a ConversationKey,
    pub(crate) body: &'a (dyn Fn() -> serde_json::Result<serde_json::Value> + Sync),
}

/// Proof that a command runs on this node, where its conversation runs: given out only by the
/// placement (`Cluster::place`, `Cluster::served_here`, or off a cluster [`Here::alone`]). On a
/// cluster it keeps the conversation from being released until it drops.
pub(crate) struct Here {
    _in_use: Option<InUse>,
}

impl Here {
    /// Off a cluster: every conversation runs here.
    pub(crate) fn alone() -> Self {
        Self { _in_use: None }
    }

    /// This node owns the conversation; `in_use` pins it.
    fn owned(in_use: InUse) -> Self {
        Self {
            _in_use: Some(in_use),
        }
    }

    /// A question for the conversation's holder, answered here (this node holds it, nobody
    /// does, or the holder no longer answers): nothing is pinned, no lease taken.
    fn asked() -> Self {
        Self { _in_use: None }
    }
}

/// The cluster layer of one runtime: its ownership and its end of the node bus.
pub(crate) struct Cluster {
    pub(crate) ownership: Arc<Ownership>,
    bus: Arc<NodeBus>,
    serving: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("node", &self.ownership.node())
            .finish_non_exhaustive()
    }
}

/// The node id when none is given: `LEGIO_NODE`, else the host name, else `legio`.
pub(crate) fn default_node() -> String {
    std::env::var("LEGIO_NODE")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "legio".to_owned())
}

/// How often a serving node says it is still at work on a forwarded post.
const KEEPALIVE: Duration = Duration::from_millis(500);

impl Cluster {
    /// Opens the leases and the bus of the cluster the log is on (blocking: call it from a
    /// blocking thread).
    pub(crate) fn open(
        node: String,
        options: &NatsOptions,
        log: Arc<NatsLog>,
    ) -> Result<Self, RuntimeError> {
        let leases = Arc::new(Leases::open(options)?);
        let presence = node_id::claim_node_id(&leases, &node)?;
        let bus = Arc::new(NodeBus::open(options, KEEPALIVE)?);
        Ok(Self {
            ownership: Ownership::new(node, leases, log, presence),
            bus,
            serving: Mutex::new(None),
        })
    }

    /// Starts renewing leases and serving the commands other nodes send to this one.
    pub(crate) fn start(&self, handler: RequestHandler) -> Result<(), RuntimeError> {
        self.ownership.start_renewing();
        let task = routing::serve(&self.bus, self.ownership.node(), handler)?;
        if let Ok(mut slot) = self.serving.lock() {
            *slot = Some(task);
        }
        Ok(())
    }

    /// Where `parcel`'s command runs: here (with the guard to keep until it ended), or the
    /// answer of the node that runs its conversation (see routing.rs).
    pub(crate) async fn place<A: DeserializeOwned>(
        &self,
        parcel: &Parcel<'_>,
        progress: Option<&ProgressSink>,
    ) -> Placed<A> {
        routing::place(self, parcel, progress).await
    }

    /// For a command another node sent here: the guard to run it with, or why it cannot run
    /// here (never sent on).
    pub(crate) async fn served_here(
        &self,
        place: Place,
        conversation: &ConversationKey,
    ) -> Result<Here, RuntimeError> {
        routing::served_here(self, place, conversation).await
    }

    /// For work that runs only on the owner and is never carried (a command sent here, a
    /// scheduled heartbeat, which every node's schedule starts): this node owns `conversation`
    /// (taking its lease if nobody holds it), with the guard to keep until the work ended;
    /// `Moved` if another node owns it.
    pub(crate) async fn here(&self, conversation: &ConversationKey) -> Result<Here, RuntimeError> {
        let in_use = self.ownership.pin(conversation);
        match self.ownership.owner(conversation).await? {
            Owner::Here => Ok(Here::owned(in_use)),
            Owner::Node(node) => Err(RuntimeError::Moved {
                conversation: conversation.to_string(),
                reason: format!("node {node} owns it now"),
            }),
        }
    }

    /// After a post ran here: if the conversation moved away meanwhile, the turns its stand-down
    /// cut are reported as moved.
    pub(crate) fn settle(&self, conversation: &ConversationKey, posted: Posted) -> Posted {
        self.ownership.settle(conversation, posted)
    }

    /// Stops serving and renewing at once, holding on to nothing (a runtime dropped without
    /// shutdown: its leases expire).
    pub(crate) fn abort(&self) {
        if let Some(task) = self.serving.lock().ok().and_then(|mut t| t.take()) {
            task.abort();
        }
        self.ownership.abort();
    }

    /// Stops serving and renewing. With `release`, gives every lease up (graceful shutdown: the
    /// sessions were suspended first), so other nodes take the conversations over at once.
    pub(crate) async fn stop(&self, release: bool) {
        if let Some(task) = self.serving.lock().ok().and_then(|mut t| t.take()) {
            task.abort();
        }
        self.ownership.stop(release).await;
    }
}
