//! The cluster layer of a runtime on the NATS backend (`docs/cluster.md`): a conversation's
//! actors run on one node at a time, the holder of the conversation's lease (ownership.rs; one
//! process per node id, node_id.rs), and a
//! post (a host's turn with tools too), reset, heartbeat, host's tool results or MCP client's
//! tool call that reaches another node is carried to the owner over the node bus
//! (routing.rs, with its wire form in wire.rs). A runtime on sled, or on a log the host opened,
//! has none of it.

mod locks;
mod node_id;
mod ownership;
mod routing;
mod wire;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use legio_core::{AgentName, ConversationKey, IdempotencyKey, Participant};
use legio_store::{Leases, NatsLog, NatsOptions, NodeBus};

use crate::error::RuntimeError;
use crate::host_calls::HostToolResult;
use crate::memory::ToolSpec;
use crate::progress::ProgressSink;
use crate::reply::{AgentReply, Posted};
use crate::status::Activity;

pub(crate) use ownership::{InUse, Owner, Ownership};
pub(crate) use routing::{RequestHandler, Routed};

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

/// A post as the node that owns its conversation receives it: already parsed and checked.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct ForwardedPost {
    pub(crate) conversation: ConversationKey,
    pub(crate) sender: Participant,
    pub(crate) text: String,
    /// A host's turn: the one agent it is for (`None`: its mentions say).
    #[serde(default)]
    pub(crate) to: Option<AgentName>,
    /// A host's turn: the tools the host runs, the conversation's declared ones (on the node
    /// the turn reached) and the turn's own; the owner offers them, and its calls of them come
    /// back as progress and wait there for `Forwarded::ToolResults`.
    #[serde(default)]
    pub(crate) tools: Vec<ToolSpec>,
    /// The host's idempotency key (keyed.rs); a node that predates it stores the post anew.
    #[serde(default)]
    pub(crate) key: Option<IdempotencyKey>,
}

/// A request the owner of its conversation serves, as it crosses the bus: already parsed and
/// checked by the node it reached (wire.rs sends it as it is).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(crate) enum Forwarded {
    /// `Runtime::post` and a host's turn (`Runtime::post_host_turn`).
    Post(ForwardedPost),
    /// `Runtime::reset`.
    Reset {
        conversation: ConversationKey,
        agent: AgentName,
    },
    /// `Runtime::heartbeat`.
    Heartbeat {
        conversation: ConversationKey,
        agent: AgentName,
        text: String,
    },
    /// `Runtime::submit_tool_results`: the host's results, for calls waiting on the owner.
    ToolResults {
        conversation: ConversationKey,
        results: Vec<HostToolResult>,
    },
    /// `Runtime::follow_tool_results`: the host's results, for calls waiting on the owner, whose
    /// turn the asking node then follows (its progress comes back as frames, its replies as
    /// the answer).
    FollowToolResults {
        conversation: ConversationKey,
        results: Vec<HostToolResult>,
    },
    /// `Runtime::call_tool_as`: an MCP client's call of an agent's tool.
    ToolCall {
        conversation: ConversationKey,
        agent: AgentName,
        name: String,
        arguments: String,
    },
    /// For `Runtime::status`: what the conversation's agents are doing (only the node that runs
    /// their actors knows).
    Activities { conversation: ConversationKey },
    /// `Runtime::declare_tools`: the host's declaration, recorded by the owner.
    DeclareTools {
        conversation: ConversationKey,
        tools: Vec<ToolSpec>,
    },
    /// `Runtime::declared_tools`: the conversation's declared tools, as its holder reads them.
    DeclaredTools { conversation: ConversationKey },
}

impl Forwarded {
    pub(crate) fn conversation(&self) -> &ConversationKey {
        match self {
            Self::Post(post) => &post.conversation,
            Self::Reset { conversation, .. }
            | Self::Heartbeat { conversation, .. }
            | Self::ToolResults { conversation, .. }
            | Self::FollowToolResults { conversation, .. }
            | Self::ToolCall { conversation, .. }
            | Self::Activities { conversation }
            | Self::DeclareTools { conversation, .. }
            | Self::DeclaredTools { conversation } => conversation,
        }
    }

    /// Its name in metrics and errors.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::Post(_) => "post",
            Self::Reset { .. } => "reset",
            Self::Heartbeat { .. } => "heartbeat",
            Self::ToolResults { .. } => "tool_results",
            Self::FollowToolResults { .. } => "follow_tool_results",
            Self::ToolCall { .. } => "tool_call",
            Self::Activities { .. } => "activities",
            Self::DeclareTools { .. } => "declare_tools",
            Self::DeclaredTools { .. } => "declared_tools",
        }
    }
}

/// The owner's answer to a [`Forwarded`] request, of the same kind.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Answered {
    Posted(Posted),
    Reset,
    Heartbeat(AgentReply),
    /// The results were handed to the calls waiting for them.
    ToolResults,
    /// The tool's result text, or the error text the model would get.
    ToolCall(Result<String, String>),
    /// Each agent of the roster, with what it is doing on the owner.
    Activities(Vec<(AgentName, Activity)>),
    /// The declaration is recorded.
    Declared,
    /// The conversation's declared tools.
    DeclaredTools(Vec<ToolSpec>),
}

impl Answered {
    fn mismatch(self, wanted: &str) -> RuntimeError {
        RuntimeError::Remote {
            node: "the owner".to_owned(),
            code: crate::error::ErrorCode::Internal,
            message: format!("answered a {wanted} with {self:?}"),
        }
    }

    pub(crate) fn into_posted(self) -> Result<Posted, RuntimeError> {
        match self {
            Self::Posted(posted) => Ok(posted),
            other => Err(other.mismatch("post")),
        }
    }

    pub(crate) fn into_reset(self) -> Result<(), RuntimeError> {
        match self {
            Self::Reset => Ok(()),
            other => Err(other.mismatch("reset")),
        }
    }

    pub(crate) fn into_heartbeat(self) -> Result<AgentReply, RuntimeError> {
        match self {
            Self::Heartbeat(reply) => Ok(reply),
            other => Err(other.mismatch("heartbeat")),
        }
    }

    pub(crate) fn into_tool_results(self) -> Result<(), RuntimeError> {
        match self {
            Self::ToolResults => Ok(()),
            other => Err(other.mismatch("tool results")),
        }
    }

    pub(crate) fn into_tool_call(self) -> Result<Result<String, String>, RuntimeError> {
        match self {
            Self::ToolCall(outcome) => Ok(outcome),
            other => Err(other.mismatch("tool call")),
        }
    }

    pub(crate) fn into_declared(self) -> Result<(), RuntimeError> {
        match self {
            Self::Declared => Ok(()),
            other => Err(other.mismatch("tool declaration")),
        }
    }

    pub(crate) fn into_declared_tools(self) -> Result<Vec<ToolSpec>, RuntimeError> {
        match self {
            Self::DeclaredTools(tools) => Ok(tools),
            other => Err(other.mismatch("declared tools")),
        }
    }

    pub(crate) fn into_activities(self) -> Result<Vec<(AgentName, Activity)>, RuntimeError> {
        match self {
            Self::Activities(activities) => Ok(activities),
            other => Err(other.mismatch("activities")),
        }
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

    /// Starts renewing leases and serving the requests other nodes forward to this one.
    pub(crate) fn start(&self, handler: RequestHandler) -> Result<(), RuntimeError> {
        self.ownership.start_renewing();
        let task = routing::serve(&self.bus, self.ownership.node(), handler)?;
        if let Ok(mut slot) = self.serving.lock() {
            *slot = Some(task);
        }
        Ok(())
    }

    /// Where a request to its conversation runs: here (this node owns it now; the request
    /// keeps the guard until it ended, so the conversation is not released under it), or the
    /// answer of the node that owns it. A request that was itself forwarded (`forwarded`) is
    /// never sent on: it fails as moved instead.
    pub(crate) async fn elsewhere(
        &self,
        request: &Forwarded,
        progress: Option<&ProgressSink>,
        forwarded: bool,
    ) -> Routed {
        routing::route(self, request, progress, forwarded).await
    }

    /// Asks `node`, which holds `request`'s conversation, for its answer (no lease read, no
    /// take, no retry).
    pub(crate) async fn ask(
        &self,
        node: &str,
        request: &Forwarded,
        progress: Option<&ProgressSink>,
    ) -> Result<Answered, RuntimeError> {
        routing::ask(self, node, request, progress).await
    }

    /// For work that runs only on the owner and is never carried (a scheduled heartbeat, which
    /// every node's schedule starts): this node owns `conversation` (taking its lease if nobody
    /// holds it), with the guard to keep until the work ended; `Moved` if another node owns it.
    pub(crate) async fn here(&self, conversation: &ConversationKey) -> Result<InUse, RuntimeError> {
        let in_use = self.ownership.pin(conversation);
        match self.ownership.owner(conversation).await? {
            Owner::Here => Ok(in_use),
            Owner::Node(node) => Err(RuntimeError::Moved {
                conversation: conversation.to_string(),
                reason: format!("node {node} owns it"),
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
