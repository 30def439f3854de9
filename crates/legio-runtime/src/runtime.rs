//! The embedding API: `Runtime::open(config)`, then `post`, `history`, `reset`, `status`,
//! `shutdown`. A user message is appended durably first, then dispatched: no mention goes to the
//! orchestrator, `@a @b` to each named agent in parallel, `@all` to every agent. Replies are
//! appended before they are returned; one agent's failure or timeout is an error reply for that
//! agent only.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use legio_core::{
    find_mentions, AgentName, AgentSessionState, Audience, ConversationKey, Event, IdempotencyKey,
    Message, MessageId, Participant, Record, Seq, Viewer,
};
use legio_llm::Provider;
use legio_store::{EventLog, NatsLog, SledLog};

use legio_config::StoreBackend;
use ractor::{Actor, ActorRef};
use tokio::sync::oneshot;

use crate::clock::{fresh_uuid, now};
use crate::cluster::{
    Answered, AppendGate, Cluster, Forwarded, ForwardedPost, InUse, RequestHandler, Routed,
};
use crate::dispatch::{gather, RootRoute, Route};
use crate::error::RuntimeError;
use crate::follow::Relay;
use crate::host_calls::HostTurn;
use crate::host_tools::{check_host_tools, turn_tools};
use crate::keyed::KeyedPosts;
use crate::memory::{MemoryTools, ToolSpec};
use crate::messages::{ConversationMsg, Job, RootMsg, TurnRequest};
use crate::names::IntoName;
use crate::progress::ProgressSink;
use crate::registry::ToolRegistry;
use crate::reply::{AgentReply, Posted, TurnErrorKind};
use crate::root::RootSupervisor;
use crate::shared::{DispatchTicket, Shared};
use crate::status::{Activity, StatusBoard};
use legio_config::{Role, RuntimeConfig, UnknownMentions};
use legio_ops::ContextReport;
use legio_ops::{preview_turn, TurnInputs, TurnPreview};

/// What a host's post adds to a plain one: the one agent it is for, the tools the host runs, and
/// the key that makes a retry of it store nothing new (keyed.rs).
#[derive(Default)]
struct HostPost {
    to: Option<AgentName>,
    tools: Option<Arc<[ToolSpec]>>,
    key: Option<IdempotencyKey>,
}

/// A stored message's turns, as the post path sends them.
struct Turns {
    seq: Seq,
    id: MessageId,
    /// A keyed post's retry: the message was stored before.
    replayed: bool,
    targets: Vec<AgentName>,
    unknown_mentions: Vec<String>,
}

impl Turns {
    fn posted(self, replies: Vec<AgentReply>) -> Posted {
        Posted {
            replies,
            unknown_mentions: self.unknown_mentions,
            replayed: self.replayed,
        }
    }
}

impl HostPost {
    /// As a forwarded post carries it.
    fn forwarded(post: &mut ForwardedPost) -> Self {
        let tools = std::mem::take(&mut post.tools);
        Self {
            to: post.to.take(),
            tools: (!tools.is_empty()).then(|| tools.into()),
            key: post.key.take(),
        }
    }
}

/// One agent's status in a conversation.
#[derive(Clone, Debug)]
pub struct AgentStatus {
    /// The agent.
    pub agent: AgentName,
    /// Its role.
    pub role: Role,
    /// What it is doing now.
    pub activity: Activity,
    /// Its session state from the log, if it ever had a session here.
    pub session: Option<AgentSessionState>,
}

/// A running legion: the log, the supervisors and their agent actors.
pub struct Runtime {
    pub(crate) shared: Arc<Shared>,
    root: ActorRef<RootMsg>,
    reaper: Arc<Mutex<Option<tokio::task::JoinHandle<()>>>>,
    /// The heartbeat schedules' tasks (schedule.rs), aborted with the reaper.
    schedules: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    stopped: Arc<AtomicBool>,
    /// On the NATS backend: leases and the routing of posts to the owning node.
    cluster: Option<Arc<Cluster>>,
    /// The log's last seq when this runtime opened: sessions open at or before it were opened by
    /// an earlier process.
    started_at: Seq,
    /// The keyed messages this node has read, per conversation (keyed.rs).
    keyed: Arc<KeyedPosts>,
    /// False for the handle the cluster's routing serves forwarded posts with (its drop stops
    /// nothing).
    primary: bool,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("log", &self.shared.log)
            .finish_non_exhaustive()
    }
}

/// Builds the providers the configuration names; those the host supplies in `overrides` are
/// not built (their keys need not be set).
fn build_providers(
    config: &RuntimeConfig,
    overrides: &HashMap<String, Arc<dyn Provider>>,
) -> Result<HashMap<String, Arc<dyn Provider>>, RuntimeError> {
    let mut providers = HashMap::new();
    for (name, spec) in &config.providers {
        if overrides.contains_key(name) {
            continue;
        }
        let provider = legio_llm::build_provider(name, spec)?;
        providers.insert(name.clone(), provider);
    }
    Ok(providers)
}

/// How a [`Runtime`] is made: `Runtime::builder(config)`, then any of the host's providers, its
/// tools or an already open log, then [`RuntimeBuilder::open`].
#[must_use = "a builder does nothing until `open` is called"]
pub struct RuntimeBuilder {
    config: RuntimeConfig,
    providers: HashMap<String, Arc<dyn Provider>>,
    tools: ToolRegistry,
    log: Option<Arc<dyn EventLog>>,
    node: Option<String>,
}

impl std::fmt::Debug for RuntimeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeBuilder")
            .field("providers", &self.providers.keys().collect::<Vec<_>>())
            .field("tools", &self.tools)
            .finish_non_exhaustive()
    }
}

impl RuntimeBuilder {
    /// Supplies the provider `name` instead of building it from the configuration (a host-made
    /// provider, or a shared scripted provider whose record a test reads); its key need not be
    /// set.
    pub fn provider(mut self, name: impl Into<String>, provider: Arc<dyn Provider>) -> Self {
        self.providers.insert(name.into(), provider);
        self
    }

    /// Supplies several providers by name (see [`RuntimeBuilder::provider`]).
    pub fn providers(mut self, providers: HashMap<String, Arc<dyn Provider>>) -> Self {
        self.providers.extend(providers);
        self
    }

    /// The host's own tools: every agent whose provider takes tools is offered them next to the
    /// built-in ones, and the agent loop runs the calls.
    pub fn tools(mut self, tools: ToolRegistry) -> Self {
        self.tools = tools;
        self
    }

    /// Runs on an already open log (an in-memory log for tests, for example) instead of opening
    /// the one the configuration names.
    pub fn log(mut self, log: Arc<dyn EventLog>) -> Self {
        self.log = Some(log);
        self
    }

    /// This node's id in a cluster (`[store] backend = "nats"`): who holds a conversation's
    /// lease and where other nodes send its posts. Default: `LEGIO_NODE`, else the host name.
    pub fn node(mut self, node: impl Into<String>) -> Self {
        self.node = Some(node.into());
        self
    }

    /// Opens the log (unless one was given) and starts the supervisors. Must be called within a
    /// multi-threaded tokio runtime. On the NATS backend the node also joins the cluster: it
    /// takes conversations by lease and serves the posts other nodes forward to it.
    pub async fn open(self) -> Result<Runtime, RuntimeError> {
        let (log, cluster) = match self.log {
            Some(log) => (log, None),
            None => {
                let store = self.config.store.clone();
                let node = self.node.unwrap_or_else(crate::cluster::default_node);
                tokio::task::spawn_blocking(move || open_log(&store, node))
                    .await
                    .map_err(|e| RuntimeError::Cancelled {
                        what: "opening the log",
                        reason: e.to_string(),
                    })??
            }
        };
        Runtime::launch(self.config, log, self.providers, self.tools, cluster).await
    }
}

/// The log the configuration names, and on the NATS backend the node's cluster layer.
fn open_log(
    store: &legio_config::StoreSettings,
    node: String,
) -> Result<(Arc<dyn EventLog>, Option<Cluster>), RuntimeError> {
    Ok(match &store.backend {
        StoreBackend::Sled => (Arc::new(SledLog::open(&store.path, &store.options)?), None),
        StoreBackend::Nats(options) => {
            let log = Arc::new(NatsLog::open(options.as_ref())?);
            let cluster = Cluster::open(node, options.as_ref(), Arc::clone(&log))?;
            (log, Some(cluster))
        }
    })
}

impl Runtime {
    /// A builder of a runtime with `config` (see [`RuntimeBuilder`]).
    pub fn builder(config: RuntimeConfig) -> RuntimeBuilder {
        RuntimeBuilder {
            config,
            providers: HashMap::new(),
            tools: ToolRegistry::new(),
            log: None,
            node: None,
        }
    }

    /// Opens the log named by the configuration and starts the supervisors, with every provider
    /// built from the configuration: `Runtime::builder(config).open()`.
    pub async fn open(config: RuntimeConfig) -> Result<Self, RuntimeError> {
        Self::builder(config).open().await
    }

    async fn launch(
        config: RuntimeConfig,
        log: Arc<dyn EventLog>,
        overrides: HashMap<String, Arc<dyn Provider>>,
        tools: ToolRegistry,
        cluster: Option<Cluster>,
    ) -> Result<Self, RuntimeError> {
        crate::metrics::describe();
        legio_store::metrics::describe();
        let mut providers = build_providers(&config, &overrides)?;
        providers.extend(overrides);
        let memory = Arc::new(MemoryTools::new(Arc::clone(&log), &config.agents));
        let mcp = Arc::new(crate::mcp_client::McpClients::start(&config.mcp).await?);
        let shared = Arc::new(Shared {
            log,
            config,
            providers,
            board: StatusBoard::default(),
            memory,
            tools,
            host_desk: Default::default(),
            mcp,
            mcp_endpoint: Default::default(),
            prompts: Default::default(),
            dispatch_tails: Default::default(),
            calibrations: Default::default(),
            gate: cluster
                .as_ref()
                .map(|c| Arc::clone(&c.ownership) as Arc<dyn AppendGate>),
        });
        let started_at = shared.log.last_seq();
        let root = RootSupervisor {
            shared: Arc::clone(&shared),
        };
        let (root, _handle) =
            Actor::spawn(None, root, ())
                .await
                .map_err(|e| RuntimeError::SupervisorStart {
                    what: "the root supervisor".to_owned(),
                    reason: e.to_string(),
                })?;
        let runtime = Self {
            shared,
            root,
            reaper: Default::default(),
            schedules: Default::default(),
            stopped: Default::default(),
            cluster: cluster.map(Arc::new),
            started_at,
            keyed: Arc::default(),
            primary: true,
        };
        runtime.start_reaper();
        if let Ok(mut slot) = runtime.schedules.lock() {
            *slot =
                crate::schedule::start(&runtime.shared, &runtime.root, runtime.cluster.as_ref());
        }
        if let Some(cluster) = &runtime.cluster {
            cluster.ownership.set_root(runtime.root.clone());
            if let Err(e) = cluster.start(runtime.forwarded_requests()) {
                runtime.abort().await;
                return Err(e);
            }
        }
        Ok(runtime)
    }

    /// A second handle on this runtime's actors, for the cluster's routing to serve forwarded
    /// posts with.
    fn handle(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            root: self.root.clone(),
            reaper: Arc::clone(&self.reaper),
            schedules: Arc::clone(&self.schedules),
            stopped: Arc::clone(&self.stopped),
            cluster: self.cluster.clone(),
            started_at: self.started_at,
            keyed: Arc::clone(&self.keyed),
            primary: false,
        }
    }

    /// What serves a request another node forwarded here: the runtime's own paths, never
    /// forwarding again.
    fn forwarded_requests(&self) -> RequestHandler {
        let runtime = Arc::new(self.handle());
        Arc::new(move |request: Forwarded, progress| {
            let runtime = Arc::clone(&runtime);
            Box::pin(async move { runtime.serve_forwarded(request, progress).await })
        })
    }

    /// Runs a request another node forwarded here (see `forwarded_requests`).
    async fn serve_forwarded(
        &self,
        request: Forwarded,
        progress: Option<ProgressSink>,
    ) -> Result<Answered, RuntimeError> {
        match request {
            Forwarded::Post(mut post) => {
                // Checked where it arrived; again against this process's own tools.
                check_host_tools(&post.tools, &self.shared.tools)?;
                let host = HostPost::forwarded(&mut post);
                self.post_with(
                    post.conversation,
                    post.sender,
                    &post.text,
                    progress,
                    host,
                    true,
                )
                .await
                .map(Answered::Posted)
            }
            Forwarded::Reset {
                conversation,
                agent,
            } => self
                .reset_with(conversation, agent, true)
                .await
                .map(|()| Answered::Reset),
            Forwarded::Heartbeat {
                conversation,
                agent,
                text,
            } => self
                .heartbeat_with(conversation, agent, &text, true)
                .await
                .map(Answered::Heartbeat),
            Forwarded::ToolResults {
                conversation,
                results,
            } => self
                .submit_tool_results_with(conversation, results, true)
                .await
                .map(|()| Answered::ToolResults),
            Forwarded::FollowToolResults {
                conversation,
                results,
            } => {
                self.serve_followed_results(conversation, results, progress)
                    .await
            }
            Forwarded::ToolCall {
                conversation,
                agent,
                name,
                arguments,
            } => self
                .call_tool_with(&conversation, &agent, &name, &arguments, true)
                .await
                .map(Answered::ToolCall),
            Forwarded::Activities { conversation } => {
                Ok(Answered::Activities(self.board_here(&conversation)))
            }
            Forwarded::DeclareTools {
                conversation,
                tools,
            } => {
                check_host_tools(&tools, &self.shared.tools)?;
                self.declare_tools_with(conversation, tools, true)
                    .await
                    .map(|()| Answered::Declared)
            }
            Forwarded::DeclaredTools { conversation } => self
                .declared_here(&conversation)
                .await
                .map(Answered::DeclaredTools),
        }
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

    /// On a cluster, where a request runs: `Ok` here (this node owns the conversation, taking
    /// its lease if nobody holds it; keep the guard until the request ended, so the conversation
    /// is not released under it), `Err` with the owner's answer (the request was carried there,
    /// unless it was `forwarded` here already: then it fails as moved).
    /// `request` is built only on a cluster (a post copies its text into it).
    pub(crate) async fn elsewhere(
        &self,
        request: impl FnOnce() -> Forwarded,
        progress: Option<&ProgressSink>,
        forwarded: bool,
    ) -> Result<Option<InUse>, Result<Answered, RuntimeError>> {
        let Some(cluster) = &self.cluster else {
            return Ok(None);
        };
        match cluster.elsewhere(&request(), progress, forwarded).await {
            Routed::Here(in_use) => Ok(Some(in_use)),
            Routed::There(answer) => Err(answer),
        }
    }

    fn start_reaper(&self) {
        let interval = self.shared.config.runtime.reap_interval;
        let idle = self.shared.config.runtime.idle_timeout;
        let root = self.root.clone();
        let shared = Arc::clone(&self.shared);
        let cluster = self.cluster.clone();
        let task = tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.tick().await;
            loop {
                ticker.tick().await;
                let reaped = reap(&root, idle).await;
                shared.prune_dispatch_tails();
                shared.host_desk.forget_unused(idle);
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

    fn known_agents(&self) -> Vec<AgentName> {
        self.shared
            .config
            .agents
            .iter()
            .map(|a| a.name.clone())
            .collect()
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

    /// Posts a user message: appended durably, then dispatched. Answers one reply per addressed
    /// agent, in roster order (a failed agent's reply is its error), and the `@handles` that named
    /// no agent. `conversation`: a `ConversationKey`, or its text.
    pub async fn post(
        &self,
        conversation: impl IntoName<ConversationKey>,
        text: &str,
    ) -> Result<Posted, RuntimeError> {
        self.post_as(conversation, Participant::User, text).await
    }

    /// Posts a message from `sender`: the user, or an agent of the roster (a host relaying what
    /// one agent says to others; as a `Participant` or its text, `user` or the agent's name).
    /// Mentions address agents as in [`Runtime::post`]; without one, a specialist's message goes
    /// to the orchestrator, and the orchestrator's to the user (no turn). The sender never gets a
    /// turn for its own message.
    pub async fn post_as(
        &self,
        conversation: impl IntoName<ConversationKey>,
        sender: impl IntoName<Participant>,
        text: &str,
    ) -> Result<Posted, RuntimeError> {
        self.post_with(conversation, sender, text, None, HostPost::default(), false)
            .await
    }

    /// Like [`Runtime::post_as`], reporting each addressed agent's progress to `progress` as it
    /// happens: started, text fragments where the provider streams, done (see
    /// [`crate::Progress`]). Nothing is sent when the post is refused (an error) or addresses no
    /// agent.
    pub async fn post_streaming(
        &self,
        conversation: impl IntoName<ConversationKey>,
        sender: impl IntoName<Participant>,
        text: &str,
        progress: ProgressSink,
    ) -> Result<Posted, RuntimeError> {
        self.post_with(
            conversation,
            sender,
            text,
            Some(progress),
            HostPost::default(),
            false,
        )
        .await
    }

    /// Like [`Runtime::post_streaming`] (with `progress` or without), stored at most once per
    /// `key` in the conversation, on whichever node: a retry of a post whose answer was lost (a
    /// timeout, a node that died) stores nothing new and answers with `replayed` set; an agent
    /// that has answered the message gives that reply again (waiting for it if its turn still
    /// runs), one that has not answers now, unless it has since replied to a later message (its
    /// reply is then the error [`crate::TurnErrorKind::Unanswered`]). The same key with another
    /// sender or text is refused ([`RuntimeError::IdempotencyKeyReused`]). See keyed.rs.
    pub async fn post_once(
        &self,
        conversation: impl IntoName<ConversationKey>,
        sender: impl IntoName<Participant>,
        text: &str,
        key: IdempotencyKey,
        progress: Option<ProgressSink>,
    ) -> Result<Posted, RuntimeError> {
        let host = HostPost {
            key: Some(key),
            ..HostPost::default()
        };
        self.post_with(conversation, sender, text, progress, host, false)
            .await
    }

    /// Posts a host's message with tools the host runs (host_tools.rs): the conversation's
    /// declared tools and the turn's own are offered to the addressed agents; a model's calls of
    /// them reach `progress` as [`crate::Progress::ToolCallsRequired`] and wait for
    /// [`Runtime::submit_tool_results`] (or `runtime.host_tool_timeout_seconds`). With `to`, the
    /// message goes to that agent only, whatever its mentions. Invalid tools refuse the message
    /// (nothing is stored).
    pub async fn post_host_turn(
        &self,
        conversation: impl IntoName<ConversationKey>,
        turn: HostTurn,
        progress: ProgressSink,
    ) -> Result<Posted, RuntimeError> {
        let key = Self::host_conversation(conversation)?;
        check_host_tools(&turn.tools, &self.shared.tools)?;
        let declared = self.declared_tools(&key).await?;
        let to = match turn.to {
            Some(agent) => Some(self.roster_agent(agent)?),
            None => None,
        };
        let host = HostPost {
            to,
            tools: turn_tools(declared, turn.tools),
            key: turn.idempotency_key,
        };
        self.post_with(key, turn.sender, &turn.text, Some(progress), host, false)
            .await
    }

    /// On a cluster, for a request only the node holding `conversation` can answer and that
    /// must not take the conversation: that node's answer, or `None` to answer here (off a
    /// cluster, nobody holds it, this node does, or the holder no longer answers on the bus: it
    /// died with its lease still running, and nobody runs the conversation).
    pub(crate) async fn ask_holder(
        &self,
        conversation: &ConversationKey,
        request: impl FnOnce() -> Forwarded,
    ) -> Result<Option<Answered>, RuntimeError> {
        self.ask_holder_with(conversation, request, None).await
    }

    /// [`Runtime::ask_holder`], with the holder's progress relayed to `progress` while it
    /// answers.
    pub(crate) async fn ask_holder_with(
        &self,
        conversation: &ConversationKey,
        request: impl FnOnce() -> Forwarded,
        progress: Option<&ProgressSink>,
    ) -> Result<Option<Answered>, RuntimeError> {
        let Some(cluster) = &self.cluster else {
            return Ok(None);
        };
        let node = match cluster.ownership.holder(conversation).await? {
            Some(node) if node != cluster.ownership.node() => node,
            _ => return Ok(None),
        };
        match cluster.ask(&node, &request(), progress).await {
            Err(RuntimeError::Bus(legio_store::BusError::NoResponder { .. })) => Ok(None),
            answer => answer.map(Some),
        }
    }

    /// The post path; on a cluster, a post to a conversation another node owns goes there
    /// (unless it was `forwarded` here already), a host's turn with its addressee and tools too:
    /// its calls wait there, announced through `progress`, for the host's results
    /// ([`Runtime::submit_tool_results`] carries them to it).
    async fn post_with(
        &self,
        conversation: impl IntoName<ConversationKey>,
        sender: impl IntoName<Participant>,
        text: &str,
        progress: Option<ProgressSink>,
        host: HostPost,
        forwarded: bool,
    ) -> Result<Posted, RuntimeError> {
        self.check_running()?;
        let key = Self::host_conversation(conversation)?;
        if text.trim().is_empty() {
            return Err(RuntimeError::EmptyMessage);
        }
        let sender = match sender.into_name()? {
            Participant::User => Participant::User,
            Participant::Agent(name) => Participant::Agent(self.roster_agent(name)?),
        };
        let post = || {
            Forwarded::Post(ForwardedPost {
                conversation: key.clone(),
                sender: sender.clone(),
                text: text.to_owned(),
                to: host.to.clone(),
                tools: host.tools.as_deref().map(<[_]>::to_vec).unwrap_or_default(),
                key: host.key.clone(),
            })
        };
        let _in_use = match self.elsewhere(post, progress.as_ref(), forwarded).await {
            Ok(in_use) => in_use,
            Err(answer) => return answer.and_then(Answered::into_posted),
        };
        let (audience, targets, unknown_mentions) = match &host.to {
            Some(to) => Self::only(&sender, to),
            None => self.address(&sender, text)?,
        };
        let turns = Turns {
            seq: Seq::ZERO,
            id: MessageId(fresh_uuid()),
            replayed: false,
            targets,
            unknown_mentions,
        };
        let message = Message::text(turns.id, key.clone(), sender, audience, text, now());
        self.post_here(message, turns, progress, host).await
    }

    /// The post path on the node that runs the conversation: the message appended, then its
    /// turns sent. A keyed post takes its id from its key, and a retry of one already stored
    /// (keyed.rs) sends the stored message's turns again instead, marked `replayed`.
    async fn post_here(
        &self,
        mut message: Message,
        mut turns: Turns,
        progress: Option<ProgressSink>,
        host: HostPost,
    ) -> Result<Posted, RuntimeError> {
        let key = message.conversation.clone();
        let mut gate = None;
        if let Some(k) = &host.key {
            let entered = self.keyed.enter(&self.shared, &key).await?;
            let id = MessageId::keyed(&key, k);
            (message.id, turns.id) = (id, id);
            if let Some(seq) = entered.find(message.id) {
                drop(entered);
                crate::keyed::check_same(&self.shared, k, seq, &message).await?;
                let paused = match (&progress, &host.tools) {
                    (Some(progress), Some(_)) => self.follow_paused(&key, id, progress).await,
                    _ => None,
                };
                if let Some(posted) = paused {
                    return posted;
                }
                (turns.seq, turns.replayed) = (seq, true);
                if turns.targets.is_empty() {
                    return Ok(turns.posted(Vec::new()));
                }
                let ticket = self.shared.queue_for_dispatch(&key).await;
                let posted = self.send_turns(&key, turns, progress, host.tools, ticket);
                return Ok(posted.await);
            }
            gate = Some(entered);
        }
        let events = vec![Event::MessagePosted(message)];
        if turns.targets.is_empty() {
            let range = self.shared.append(events).await?;
            if let Some(gate) = &mut gate {
                gate.stored(turns.id, range.first);
            }
            return Ok(turns.posted(Vec::new()));
        }
        let (range, ticket) = self.shared.append_for_dispatch(&key, events).await?;
        if let Some(gate) = &mut gate {
            gate.stored(turns.id, range.first);
        }
        drop(gate);
        turns.seq = range.first;
        Ok(self
            .send_turns(&key, turns, progress, host.tools, ticket)
            .await)
    }

    /// A host's message for one agent: its audience, and its turn (none when the agent sent it).
    fn only(sender: &Participant, to: &AgentName) -> (Audience, Vec<AgentName>, Vec<String>) {
        let targets = (sender.agent() != Some(to)).then(|| to.clone());
        (
            Audience::agent(to.clone()),
            targets.into_iter().collect(),
            Vec::new(),
        )
    }

    /// Sends the message's turns to its agents and gathers their replies; a host's calls of its
    /// tools go out through `progress` (relayed to whoever follows the turn, follow.rs).
    async fn send_turns(
        &self,
        key: &ConversationKey,
        turns: Turns,
        progress: Option<ProgressSink>,
        host_tools: Option<Arc<[ToolSpec]>>,
        ticket: DispatchTicket,
    ) -> Posted {
        let host_tools = host_tools.filter(|_| progress.is_some());
        let follows = &self.shared.host_desk.follows;
        let turn = (key, turns.id);
        let relay = Relay::for_turn(follows, turn, host_tools.is_some(), progress);
        let request = TurnRequest {
            seq: turns.seq,
            id: turns.id,
            progress: relay.as_ref().map(|r| r.sink.clone()),
            host_tools,
            replayed: turns.replayed,
        };
        let replies = self
            .dispatch(key, Job::Turn(request), &turns.targets, Some(ticket))
            .await;
        let posted = self.settled(key, turns.posted(replies));
        if let Some(relay) = relay {
            relay.finish(&posted).await;
        }
        posted
    }

    /// `posted`, its turns cut by a stand-down during it answered as moved (on a cluster).
    fn settled(&self, conversation: &ConversationKey, posted: Posted) -> Posted {
        match &self.cluster {
            Some(cluster) => cluster.settle(conversation, posted),
            None => posted,
        }
    }

    /// Whom a message of `sender` addresses: its audience, the agents that get a turn (never the
    /// sender) and the handles that named no agent. With `runtime.unknown_mentions = "error"`,
    /// such a handle refuses the message.
    fn address(
        &self,
        sender: &Participant,
        text: &str,
    ) -> Result<(Audience, Vec<AgentName>, Vec<String>), RuntimeError> {
        let known = self.known_agents();
        if self.shared.config.runtime.unknown_mentions == UnknownMentions::Error {
            legio_core::parse_mentions(text, &known)?;
        }
        let mentions = find_mentions(text, &known);
        let orchestrator = self.shared.config.orchestrator().name.clone();
        let (audience, targets) = match mentions.audience {
            None if *sender == Participant::Agent(orchestrator.clone()) => {
                (Audience::user(), Vec::new())
            }
            None => (Audience::agent(orchestrator.clone()), vec![orchestrator]),
            Some(Audience::All) => (Audience::All, known),
            Some(Audience::Only(list)) => {
                let named: Vec<AgentName> = known
                    .into_iter()
                    .filter(|k| list.contains(&Participant::Agent(k.clone())))
                    .collect();
                (Audience::Only(list), named)
            }
        };
        let targets = targets
            .into_iter()
            .filter(|t| sender.agent() != Some(t))
            .collect();
        Ok((audience, targets, mentions.unknown))
    }

    /// Sends a job to each target in parallel and gathers the replies in order.
    async fn dispatch(
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
            Job::Heartbeat { .. } => None,
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

    /// A heartbeat: `agent` answers `text` with no history. Its provider gets only the system
    /// prompt and the text (never its live provider session); the exchange is recorded as one
    /// `HeartbeatRan` event, not as messages, so no later context shows it, and the agent's
    /// session is untouched. Runs in the agent's actor between its turns. A failed call is an
    /// error reply (recorded too), as in [`Runtime::post`].
    pub async fn heartbeat(
        &self,
        conversation: impl IntoName<ConversationKey>,
        agent: impl IntoName<AgentName>,
        text: &str,
    ) -> Result<AgentReply, RuntimeError> {
        let key = Self::host_conversation(conversation)?;
        let agent = self.roster_agent(agent)?;
        self.heartbeat_with(key, agent, text, false).await
    }

    /// The heartbeat path; on a cluster, a heartbeat to a conversation another node owns goes
    /// there (unless it was `forwarded` here already).
    async fn heartbeat_with(
        &self,
        key: ConversationKey,
        agent: AgentName,
        text: &str,
        forwarded: bool,
    ) -> Result<AgentReply, RuntimeError> {
        self.check_running()?;
        if text.trim().is_empty() {
            return Err(RuntimeError::EmptyMessage);
        }
        let request = || Forwarded::Heartbeat {
            conversation: key.clone(),
            agent: agent.clone(),
            text: text.to_owned(),
        };
        let _in_use = match self.elsewhere(request, None, forwarded).await {
            Ok(in_use) => in_use,
            Err(answer) => return answer.and_then(Answered::into_heartbeat),
        };
        let job = Job::Heartbeat {
            text: text.to_owned(),
        };
        let mut replies = self
            .dispatch(&key, job, std::slice::from_ref(&agent), None)
            .await;
        Ok(replies.pop().unwrap_or_else(|| {
            AgentReply::failed(&agent, TurnErrorKind::Runtime, "no reply to the heartbeat")
        }))
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

    /// The last `limit` messages of a conversation, as `agent` may see them (`None`: everything,
    /// the user's and orchestrator's view).
    pub async fn history(
        &self,
        conversation: impl IntoName<ConversationKey>,
        agent: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Record>, RuntimeError> {
        let key = conversation.into_name()?;
        let spec = match agent {
            Some(name) => {
                let name = self.roster_agent(name)?;
                self.shared.spec(&name).cloned()
            }
            None => None,
        };
        self.catch_up(&key).await?;
        self.shared
            .read(move |log| {
                let viewer = spec.as_ref().map_or(Viewer::Everything, |s| s.viewer());
                log.visible_window(&key, viewer, limit)
            })
            .await
    }

    /// What `agent`'s provider would receive for its next turn in `conversation` had the log
    /// ended at `at` (default: now): the same decision and planner the agent actor uses
    /// ([`preview_turn`]), with the agent's current prompt and its provider's capability. Never
    /// calls a provider; writes nothing.
    pub async fn next_context(
        &self,
        conversation: impl IntoName<ConversationKey>,
        agent: impl IntoName<AgentName>,
        at: Option<Seq>,
    ) -> Result<TurnPreview, RuntimeError> {
        let key = conversation.into_name()?;
        let spec = self.shared.roster_spec(&agent.into_name()?)?.clone();
        let history = self.shared.provider(&spec)?.capabilities().history;
        let (_, prompt_hash) = self.shared.system_prompt(&spec)?;
        self.catch_up(&key).await?;
        let shared = Arc::clone(&self.shared);
        // A session this process opened is live; one open from before it started was left by a
        // dead process (a graceful stop suspends them). On a cluster another node may hold it.
        let live_since = Some(match self.cluster {
            Some(_) => Seq::ZERO,
            None => self.started_at,
        });
        tokio::task::spawn_blocking(move || {
            let at = at.unwrap_or_else(|| shared.log.last_seq());
            let inputs = TurnInputs {
                spec: &spec,
                conversation: &key,
                history,
                settings: &shared.config.runtime,
                prompt_hash: &prompt_hash,
                live_session: None,
                new_message: at,
            };
            preview_turn(shared.log.as_ref(), inputs, at, live_since).map_err(RuntimeError::from)
        })
        .await
        .map_err(|e| RuntimeError::Cancelled {
            what: "previewing the context",
            reason: e.to_string(),
        })?
    }

    /// [`Runtime::next_context`] as the operator's report (`legio context`'s JSON). An unknown
    /// conversation is an error.
    pub async fn context_report(
        &self,
        conversation: impl IntoName<ConversationKey>,
        agent: impl IntoName<AgentName>,
        at: Option<Seq>,
    ) -> Result<ContextReport, RuntimeError> {
        let key = conversation.into_name()?;
        let agent = self.roster_agent(agent)?;
        // Before the lookup: an earlier read on this node may have left it an empty copy of a
        // conversation another node has written since.
        self.catch_up(&key).await?;
        let lookup = key.clone();
        let last = self
            .shared
            .read(move |log| {
                Ok(legio_ops::require_conversation(log, &lookup).map(|()| log.last_seq()))
            })
            .await??;
        let at = at.unwrap_or(last).min(last);
        let history = self.provider_history(&agent)?;
        let mut preview = self.next_context(&key, &agent, Some(at)).await?;
        self.fit_preview(&key, &agent, &mut preview).await?;
        Ok(legio_ops::context_report(
            &preview,
            &key,
            agent.as_str(),
            at,
            history,
        ))
    }

    /// Applies the window check to `preview` as the agent's next turn would: its provider's
    /// window, the calibration the runtime holds (or would seed from the log), the system prompt
    /// and the orchestrator's status block as it stands (not the tools: `legio_ops::fit_preview`).
    async fn fit_preview(
        &self,
        conversation: &ConversationKey,
        agent: &AgentName,
        preview: &mut TurnPreview,
    ) -> Result<(), RuntimeError> {
        let spec = self.shared.roster_spec(agent)?.clone();
        let provider = self.shared.provider(&spec)?;
        let (system_prompt, _) = self.shared.system_prompt(&spec)?;
        let status =
            (spec.role == Role::Orchestrator).then(|| self.shared.status_block(conversation));
        let fixed = legio_ops::Fixed {
            system_prompt: &system_prompt,
            status: status.as_deref(),
            tools: &[],
            tool_tokens: 0,
        };
        let calibration =
            crate::fit::calibration(&self.shared, conversation, &spec, fixed.estimated()).await?;
        let window = provider.capabilities().context_window;
        let budget = crate::fit::budget(&self.shared, &spec.provider, window, calibration);
        legio_ops::fit_preview(preview, fixed, &budget);
        Ok(())
    }

    /// The history capability of `agent`'s provider.
    pub fn provider_history(
        &self,
        agent: impl IntoName<AgentName>,
    ) -> Result<legio_core::History, RuntimeError> {
        let spec = self.shared.roster_spec(&agent.into_name()?)?;
        Ok(self.shared.provider(spec)?.capabilities().history)
    }

    /// A manual reset: closes the agent's session (and clears a failed agent); its next turn opens
    /// a new session restored from the log.
    pub async fn reset(
        &self,
        conversation: impl IntoName<ConversationKey>,
        agent: impl IntoName<AgentName>,
    ) -> Result<(), RuntimeError> {
        let key = Self::host_conversation(conversation)?;
        let agent = self.roster_agent(agent)?;
        self.reset_with(key, agent, false).await
    }

    /// The reset path; on a cluster, a reset of a conversation another node owns goes there
    /// (unless it was `forwarded` here already).
    async fn reset_with(
        &self,
        key: ConversationKey,
        agent: AgentName,
        forwarded: bool,
    ) -> Result<(), RuntimeError> {
        self.check_running()?;
        let request = || Forwarded::Reset {
            conversation: key.clone(),
            agent: agent.clone(),
        };
        let _in_use = match self.elsewhere(request, None, forwarded).await {
            Ok(in_use) => in_use,
            Err(answer) => return answer.and_then(Answered::into_reset),
        };
        let (tx, rx) = oneshot::channel();
        let reset = ConversationMsg::Reset { agent, reply: tx };
        if !self.route_to(&key).send(reset).await {
            return Err(RuntimeError::ShutDown);
        }
        rx.await.map_err(|_| RuntimeError::ShutDown)?
    }

    /// Every agent's status in a conversation, in roster order.
    pub async fn status(
        &self,
        conversation: impl IntoName<ConversationKey>,
    ) -> Result<Vec<AgentStatus>, RuntimeError> {
        let key = conversation.into_name()?;
        self.catch_up(&key).await?;
        let lookup = key.clone();
        let states = self
            .shared
            .read(move |log| log.session_states(&lookup))
            .await?;
        let board = self.board(&key).await;
        Ok(self
            .shared
            .config
            .agents
            .iter()
            .map(|spec| {
                let session = states.iter().find(|s| s.agent == spec.name).cloned();
                let failed = session.as_ref().is_some_and(|s| s.failed.is_some());
                let activity = match board.iter().find(|(agent, _)| *agent == spec.name) {
                    _ if failed => Activity::Failed,
                    Some((_, activity)) => *activity,
                    None => Activity::Idle,
                };
                AgentStatus {
                    agent: spec.name.clone(),
                    role: spec.role,
                    activity,
                    session,
                }
            })
            .collect())
    }

    /// What each agent of `conversation` is doing on this node.
    fn board_here(&self, conversation: &ConversationKey) -> Vec<(AgentName, Activity)> {
        let board = &self.shared.board;
        self.shared
            .config
            .agents
            .iter()
            .map(|spec| (spec.name.clone(), board.get(conversation, &spec.name)))
            .collect()
    }

    /// What each agent of `conversation` is doing where its actors run: here, or on a cluster
    /// on the node holding the conversation (asked over the bus; this node's own board, where
    /// they all idle, if that node cannot answer). Nobody holding it, no lease is taken.
    async fn board(&self, conversation: &ConversationKey) -> Vec<(AgentName, Activity)> {
        let request = || Forwarded::Activities {
            conversation: conversation.clone(),
        };
        let answer = match self.ask_holder(conversation, request).await {
            Ok(None) => return self.board_here(conversation),
            Ok(Some(answer)) => answer.into_activities(),
            Err(e) => Err(e),
        };
        answer.unwrap_or_else(|e| {
            tracing::debug!(conversation = %conversation, error = %e, "the owner did not say what its agents are doing");
            self.board_here(conversation)
        })
    }

    /// Stops every agent idle longer than the configured timeout (the reaper does this on its
    /// interval). Returns how many were stopped.
    pub async fn reap_idle(&self) -> Result<usize, RuntimeError> {
        self.reap_idle_older_than(self.shared.config.runtime.idle_timeout)
            .await
    }

    /// Like [`Runtime::reap_idle`] with an explicit idle threshold. A conversation supervisor
    /// left with no agent retires (soon after, through the root), and the runtime forgets the
    /// dispatch tails of conversations with no post in flight: a conversation nobody talks to
    /// costs nothing in memory (see `docs/runtime-semantics.md`).
    pub async fn reap_idle_older_than(&self, idle: Duration) -> Result<usize, RuntimeError> {
        let reaped = reap(&self.root, idle).await;
        self.shared.prune_dispatch_tails();
        release_unused(self.cluster.as_deref(), &self.root, idle);
        reaped
    }

    /// How many conversations have a running supervisor (those with a live agent, and those
    /// whose agents were reaped a moment ago and that are about to retire).
    pub async fn live_conversations(&self) -> usize {
        self.supervisors().await.len()
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
                reason: e.to_string(),
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
