//! Opening a runtime: [`Runtime::open`] with the configuration, or [`Runtime::builder`] for a
//! host's own providers, tools or log. It builds the providers, opens the log (on the NATS
//! backend, the node's cluster layer too), starts the root supervisor, the reaper and the
//! heartbeat schedules, and on a cluster serves the commands other nodes send (command/).

use std::collections::HashMap;
use std::sync::Arc;

use legio_config::{RuntimeConfig, StoreBackend};
use legio_llm::Provider;
use legio_store::{EventLog, NatsLog, SledLog};
use ractor::Actor;

use crate::agent::root::RootSupervisor;
use crate::error::RuntimeError;
use crate::placement::{AppendGate, Cluster, RequestHandler};
use crate::runtime::Runtime;
use crate::shared::Shared;
use crate::tools::registry::ToolRegistry;

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
                let node = self.node.unwrap_or_else(crate::placement::default_node);
                tokio::task::spawn_blocking(move || open_log(&store, node))
                    .await
                    .map_err(|e| RuntimeError::Cancelled {
                        what: "opening the log",
                        source: legio_store::ErrorSource::new(e),
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
        let mcp = Arc::new(crate::tools::mcp_client::McpClients::start(&config.mcp).await?);
        let gate = cluster
            .as_ref()
            .map(|c| Arc::clone(&c.ownership) as Arc<dyn AppendGate>);
        let shared = Shared::new(log, config, providers, tools, mcp, gate);
        let started_at = shared.log.last_seq();
        let root = RootSupervisor {
            shared: Arc::clone(&shared),
        };
        let (root, _handle) =
            Actor::spawn(None, root, ())
                .await
                .map_err(|e| RuntimeError::SupervisorStart {
                    what: "the root supervisor".to_owned(),
                    source: legio_store::ErrorSource::new(e),
                })?;
        let runtime = Self {
            shared,
            root,
            reaper: Default::default(),
            schedules: Default::default(),
            stopped: Default::default(),
            cluster: cluster.map(Arc::new),
            started_at,
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

    /// What serves a command another node sent here: the runtime's own paths (command/), never
    /// sending it on.
    fn forwarded_requests(&self) -> RequestHandler {
        let runtime = Arc::new(self.handle());
        Arc::new(move |kind: String, body, progress| {
            let runtime = Arc::clone(&runtime);
            Box::pin(async move { crate::command::serve(&runtime, &kind, body, progress).await })
        })
    }
}
