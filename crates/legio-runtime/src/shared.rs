//! What every actor of a runtime shares: the log, the configuration, the providers, the tools,
//! and the conversation table (conversation/), where every conversation's in-memory state is.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::SystemTime;

use legio_core::{AgentName, ConversationKey, Event, SeqRange};
use legio_llm::Provider;
use legio_store::EventLog;
use tokio::sync::oneshot;

use crate::clock::now;
use crate::conversation::{lock, Conversations, Use};
use crate::error::RuntimeError;
use crate::placement::AppendGate;
use crate::tools::memory::MemoryTools;
use crate::tools::registry::ToolRegistry;
use legio_config::{AgentSpec, RuntimeConfig};

pub(crate) struct Shared {
    pub(crate) log: Arc<dyn EventLog>,
    pub(crate) config: RuntimeConfig,
    pub(crate) providers: HashMap<String, Arc<dyn Provider>>,
    /// Every conversation's in-memory state, one entry each (conversation/).
    pub(crate) conversations: Conversations,
    /// The memory tools' executor (its cached projection of `legio:memory`).
    pub(crate) memory: Arc<MemoryTools>,
    /// The host's tools, offered to every agent whose provider takes tools.
    pub(crate) tools: ToolRegistry,
    /// The tools hosts run over the API: declared per conversation, and their waiting calls.
    pub(crate) host_desk: crate::tools::host_desk::HostToolDesk,
    /// The `[mcp.NAME]` servers' connections and the tools they listed at start.
    pub(crate) mcp: Arc<crate::tools::mcp_client::McpClients>,
    /// legio's own `/mcp` endpoint, once a server serves it (`Runtime::serve_mcp_at`), and the
    /// key its tokens are signed with: given to providers that run their own tool loop.
    pub(crate) mcp_endpoint: std::sync::OnceLock<(String, crate::tools::mcp_token::McpTokenKey)>,
    /// Composed prompts by file, valid while the file's modification time and length are the
    /// same (a stat per turn instead of a read and a hash).
    pub(crate) prompts: std::sync::Mutex<HashMap<std::path::PathBuf, CachedPrompt>>,
    /// Each provider's token calibration (fit.rs), learned as turns go.
    pub(crate) calibrations: crate::agent::calibrations::Calibrations,
    /// On a cluster, the ownership layer: asked before every append whether this node still
    /// owns the conversations, told when the log refused an append as fenced.
    pub(crate) gate: Option<Arc<dyn AppendGate>>,
    /// Answers to approvals, one at a time: a check that a call waits and its answer's append
    /// are one step (command/answer_approval.rs).
    pub(crate) approvals_lock: tokio::sync::Mutex<()>,
}

/// Held while the turns for a message are sent; dropping it lets the conversation's next message
/// send its turns. Its use keeps the conversation's entry, where the next message finds the tail.
#[derive(Debug)]
pub(crate) struct DispatchTicket {
    _done: oneshot::Sender<()>,
    _conversation: Use,
}

#[derive(Clone)]
pub(crate) struct CachedPrompt {
    modified: Option<SystemTime>,
    len: u64,
    prompt: String,
    hash: String,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("log", &self.log)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// What a runtime's actors share, with an empty conversation table that the host desk keeps
    /// its parts in too (one table: conversation/), and the memory tools over `log`.
    pub(crate) fn new(
        log: Arc<dyn EventLog>,
        config: RuntimeConfig,
        providers: HashMap<String, Arc<dyn Provider>>,
        tools: ToolRegistry,
        mcp: Arc<crate::tools::mcp_client::McpClients>,
        gate: Option<Arc<dyn AppendGate>>,
    ) -> Arc<Self> {
        let memory = Arc::new(MemoryTools::new(Arc::clone(&log), &config.agents));
        let conversations = Conversations::default();
        Arc::new(Self {
            log,
            config,
            providers,
            conversations: conversations.clone(),
            memory,
            tools,
            host_desk: crate::tools::host_desk::HostToolDesk::new(conversations),
            mcp,
            mcp_endpoint: Default::default(),
            prompts: Default::default(),
            calibrations: Default::default(),
            gate,
            approvals_lock: Default::default(),
        })
    }

    /// Runs a blocking log read off the async workers.
    pub(crate) async fn read<T, F>(self: &Arc<Self>, f: F) -> Result<T, RuntimeError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn EventLog) -> Result<T, legio_store::StoreError> + Send + 'static,
    {
        self.read_with(f).await
    }

    /// [`Shared::read`] of a read with another error (legio-ops' views).
    pub(crate) async fn read_with<T, E, F>(self: &Arc<Self>, f: F) -> Result<T, RuntimeError>
    where
        T: Send + 'static,
        E: Send + 'static,
        RuntimeError: From<E>,
        F: FnOnce(&dyn EventLog) -> Result<T, E> + Send + 'static,
    {
        let shared = Arc::clone(self);
        tokio::task::spawn_blocking(move || f(shared.log.as_ref()))
            .await
            .map_err(|e| RuntimeError::Cancelled {
                what: "a log read",
                source: legio_store::ErrorSource::new(e),
            })?
            .map_err(RuntimeError::from)
    }

    /// Appends a message that starts turns, and waits until it is durable and every message
    /// appended this way before it in the conversation has sent its turns. The caller sends its
    /// turns, then drops the ticket. So one agent's turns reach its mailbox in log order even
    /// under concurrent posts (the planner's redelivery rule relies on it), while concurrent
    /// appends still share a commit group.
    pub(crate) async fn append_for_dispatch(
        &self,
        conversation: &ConversationKey,
        events: Vec<Event>,
    ) -> Result<(SeqRange, DispatchTicket), RuntimeError> {
        self.check_gate(&events)?;
        crate::testing::before_publish(conversation).await;
        let (handle, previous, ticket) = self.queued(conversation, || self.log.submit(events))?;
        let range = self.observe(handle.await)?;
        Self::after(previous).await;
        Ok((range, ticket))
    }

    /// A ticket for sending the turns of a message already in the log (a keyed post's retry,
    /// keyed.rs), in order with the messages appended for dispatch: it waits until the
    /// conversation's messages appended before it have sent their turns.
    pub(crate) async fn queue_for_dispatch(
        &self,
        conversation: &ConversationKey,
    ) -> DispatchTicket {
        let Ok(((), previous, ticket)) = self.queued(conversation, || Ok::<_, Infallible>(()));
        Self::after(previous).await;
        ticket
    }

    /// Runs `submit` and becomes the conversation's dispatch tail in one step (under the lock,
    /// submit order, the seq order, is the order of the tails).
    fn queued<T, E>(
        &self,
        conversation: &ConversationKey,
        submit: impl FnOnce() -> Result<T, E>,
    ) -> Result<(T, Option<oneshot::Receiver<()>>, DispatchTicket), E> {
        let (done, signal) = oneshot::channel();
        let entry = self.conversations.enter(conversation);
        let mut tail = lock(&entry.dispatch_tail);
        let submitted = submit()?;
        let previous = tail.replace(signal);
        drop(tail);
        let ticket = DispatchTicket {
            _done: done,
            _conversation: entry,
        };
        Ok((submitted, previous, ticket))
    }

    /// Waits for the previous tail. An error means the earlier post gave up (its append failed
    /// or it was dropped).
    async fn after(previous: Option<oneshot::Receiver<()>>) {
        if let Some(previous) = previous {
            let _ = previous.await;
        }
    }

    /// Appends and waits until durable (awaiting the committer, never blocking a worker).
    pub(crate) async fn append(&self, events: Vec<Event>) -> Result<SeqRange, RuntimeError> {
        self.check_gate(&events)?;
        if let Some(event) = events.first() {
            crate::testing::before_publish(event.conversation()).await;
        }
        let handle = self.log.submit(events)?;
        self.observe(handle.await)
    }

    /// On a cluster: whether this node may run `conversation`'s agents now (it holds the
    /// conversation's lease and renewed it recently); off a cluster, always.
    pub(crate) fn may_run(&self, conversation: &ConversationKey) -> Result<(), RuntimeError> {
        match &self.gate {
            Some(gate) => gate.check(conversation),
            None => Ok(()),
        }
    }

    /// On a cluster: refuses an append to a conversation this node does not own (any more).
    fn check_gate(&self, events: &[Event]) -> Result<(), RuntimeError> {
        let Some(gate) = &self.gate else {
            return Ok(());
        };
        for event in events {
            gate.check(event.conversation())?;
        }
        Ok(())
    }

    /// On a cluster: tells the ownership layer that `conversation` runs nothing here now.
    pub(crate) fn retired(&self, conversation: &ConversationKey) {
        if let Some(gate) = &self.gate {
            gate.retired(conversation);
        }
    }

    /// On a cluster: tells the ownership layer of an append refused as fenced.
    fn observe(
        &self,
        outcome: Result<SeqRange, legio_store::StoreError>,
    ) -> Result<SeqRange, RuntimeError> {
        if let (Some(gate), Err(legio_store::StoreError::Fenced { conversation, .. })) =
            (&self.gate, &outcome)
        {
            gate.fenced(conversation);
        }
        Ok(outcome?)
    }

    pub(crate) fn spec(&self, agent: &AgentName) -> Option<&AgentSpec> {
        self.config.agent(agent)
    }

    /// The agent's spec; an agent not in the roster is [`RuntimeError::UnknownAgent`].
    pub(crate) fn roster_spec(&self, agent: &AgentName) -> Result<&AgentSpec, RuntimeError> {
        Ok(self.config.agent_named(agent.as_str())?)
    }

    pub(crate) fn provider(&self, spec: &AgentSpec) -> Result<Arc<dyn Provider>, RuntimeError> {
        self.providers.get(&spec.provider).cloned().ok_or_else(|| {
            RuntimeError::ProviderUnavailable {
                agent: spec.name.to_string(),
                provider: spec.provider.clone(),
            }
        })
    }

    /// The agent's system prompt and its hash (see [`RuntimeConfig::compose_prompt`]). The file
    /// is read again only when its modification time or length changed; a stat of a small local
    /// file is cheaper than the hop to a blocking thread, so it is done in place.
    pub(crate) fn system_prompt(&self, spec: &AgentSpec) -> Result<(String, String), RuntimeError> {
        let unreadable = |e: std::io::Error| RuntimeError::PromptUnreadable {
            agent: spec.name.to_string(),
            path: spec.prompt.clone(),
            kind: e.kind(),
            source: legio_store::ErrorSource::new(e),
        };
        let meta = std::fs::metadata(&spec.prompt).map_err(unreadable)?;
        let (modified, len) = (meta.modified().ok(), meta.len());
        if let Some(cached) = self
            .prompts
            .lock()
            .ok()
            .and_then(|c| c.get(&spec.prompt).cloned())
        {
            if cached.modified == modified && cached.len == len && modified.is_some() {
                return Ok((cached.prompt, cached.hash));
            }
        }
        let base = std::fs::read_to_string(&spec.prompt).map_err(unreadable)?;
        let (prompt, hash) = self.config.compose_prompt(spec, base);
        if let Ok(mut cache) = self.prompts.lock() {
            cache.insert(
                spec.prompt.clone(),
                CachedPrompt {
                    modified,
                    len,
                    prompt: prompt.clone(),
                    hash: hash.clone(),
                },
            );
        }
        Ok((prompt, hash))
    }

    /// Records a manual reset of `agent` in `conversation`: its latest session closed as
    /// `manual_reset` (which also clears a failed agent).
    pub(crate) async fn record_reset(
        self: &Arc<Self>,
        conversation: &ConversationKey,
        agent: &AgentName,
    ) -> Result<(), RuntimeError> {
        let (c, a) = (conversation.clone(), agent.clone());
        let state = self.read(move |log| log.session_state(&c, &a)).await?;
        let Some(reset) = legio_core::manual_reset(state.as_ref(), conversation, agent, now())
        else {
            return Ok(()); // nothing to reset: nothing written
        };
        self.append(vec![reset]).await?;
        metrics::counter!(crate::metrics::SESSIONS_CLOSED, "reason" => "manual_reset").increment(1);
        Ok(())
    }

    /// The specialists' current status, for the orchestrator's message.
    pub(crate) fn status_block(&self, conversation: &ConversationKey) -> String {
        let activities: Vec<(&AgentName, &str)> = self
            .config
            .specialists()
            .map(|a| {
                (
                    &a.name,
                    self.conversations.activity(conversation, &a.name).as_str(),
                )
            })
            .collect();
        legio_ops::status_block(activities)
    }
}
