//! Runtime tests: scenarios for every session boundary, parallel dispatch with failures, restart
//! intensity, and a property test of exactly-once context delivery.

mod append_only;
mod approvals;
mod behaviours;
mod compaction;
mod declared_tools;
mod exactly_once;
mod follow;
mod heartbeat;
mod keyed;
mod mcp;
mod providers;
mod retirement;
mod scenarios;
mod tools;

use std::collections::HashMap;
use std::sync::Arc;

use legio_core::{AgentName, Event, History, Record, Seq};
use legio_llm::{Provider, RecordedRequest, ScriptedProvider};
use legio_runtime::{Runtime, RuntimeConfig, ToolRegistry};

/// A legion in a temp dir: three agents (lead orchestrator, ann and bob specialists) on one
/// scripted provider that survives runtime restarts, as a provider's server would.
pub struct Legion {
    pub dir: tempfile::TempDir,
    pub config: RuntimeConfig,
    pub provider: ScriptedProvider,
    /// The host tools the runtime opens with (none unless a test sets them and reopens).
    pub tools: ToolRegistry,
    rt: Option<Runtime>,
}

pub const CONV: &str = "test:1";

impl Legion {
    /// `runtime`: extra lines for the `[runtime]` table. Compaction is off unless they mention
    /// it (most scenarios check exact delivery of the windowed history).
    pub async fn new(history: History, runtime: &str) -> Self {
        Self::with_provider(history, runtime, "").await
    }

    /// Like [`Legion::new`], with extra lines for the `[providers.local]` table (e.g. its
    /// `context_window`).
    pub async fn with_provider(history: History, runtime: &str, provider: &str) -> Self {
        let compaction = if runtime.contains("compact") {
            ""
        } else {
            "compaction = false"
        };
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in [
            ("lead", "You lead."),
            ("ann", "You review."),
            ("bob", "You plan."),
        ] {
            std::fs::write(dir.path().join(format!("{name}.md")), text).unwrap();
        }
        let history_word = match history {
            History::Stateless => "stateless",
            History::Session { resumable: true } => "session",
            History::Session { resumable: false } => "session-not-resumable",
        };
        let text = format!(
            r#"
[store]
path = "db"
durability = "relaxed"
[runtime]
{runtime}
{compaction}
[agents.lead]
role = "orchestrator"
description = "leads"
prompt = "lead.md"
provider = "local"
[agents.ann]
role = "specialist"
description = "reviews"
prompt = "ann.md"
provider = "local"
[agents.bob]
role = "specialist"
description = "plans"
prompt = "bob.md"
provider = "local"
[providers.local]
kind = "scripted"
history = "{history_word}"
{provider}
"#
        );
        let file = dir.path().join("legio.toml");
        std::fs::write(&file, &text).unwrap();
        let config = RuntimeConfig::load(&file).unwrap();
        let provider = match &config.providers["local"] {
            legio_runtime::ProviderSpec::Scripted(c) => ScriptedProvider::new(*c),
            other => panic!("the fixture's provider is scripted, not {other:?}"),
        };
        let mut legion = Self {
            dir,
            config,
            provider,
            tools: ToolRegistry::new(),
            rt: None,
        };
        legion.open().await;
        legion
    }

    /// Opens the runtime. A runtime just aborted in this process may still hold the database
    /// for a moment (its aborted tasks and blocking reads drop their handles as they finish; a
    /// crashed process would release it at once): a lock error is retried with a generous
    /// deadline.
    pub async fn open(&mut self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let provider: Arc<dyn Provider> = Arc::new(self.provider.clone());
            let overrides = HashMap::from([("local".to_owned(), provider)]);
            let opened = Runtime::builder(self.config.clone())
                .providers(overrides)
                .tools(self.tools.clone())
                .open()
                .await;
            match opened {
                Ok(rt) => {
                    self.rt = Some(rt);
                    return;
                }
                Err(legio_runtime::RuntimeError::Store(legio_store::StoreError::Locked {
                    ..
                })) if std::time::Instant::now() < deadline => {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await
                }
                Err(e) => panic!("opening the runtime: {e}"),
            }
        }
    }

    pub fn rt(&self) -> &Runtime {
        self.rt.as_ref().unwrap()
    }

    /// A process crash and restart: every actor stops without recording anything, the log is
    /// closed, and a new runtime opens the same database.
    pub async fn crash_and_restart(&mut self) {
        self.rt.take().unwrap().abort().await;
        self.open().await;
    }

    /// Reopens the runtime with `tools` as the host's tools (a graceful restart).
    pub async fn with_tools(&mut self, tools: ToolRegistry) {
        self.tools = tools;
        self.shutdown_and_restart().await;
    }

    /// A graceful restart.
    pub async fn shutdown_and_restart(&mut self) {
        self.rt.take().unwrap().shutdown().await.unwrap();
        self.open().await;
    }

    pub async fn post(&self, text: &str) -> legio_runtime::Posted {
        self.rt().post(CONV, text).await.unwrap()
    }

    pub fn requests(&self, agent: &str) -> Vec<RecordedRequest> {
        self.provider
            .requests()
            .into_iter()
            .filter(|r| r.agent.as_str() == agent)
            .collect()
    }

    pub fn events(&self) -> Vec<Record> {
        let log = self.rt().log();
        if log.last_seq() == Seq::ZERO {
            return Vec::new();
        }
        log.read_range(Seq(1), log.last_seq(), usize::MAX).unwrap()
    }

    /// Session boundary events of `agent`, as "kind:reason" words.
    pub fn boundaries(&self, agent: &str) -> Vec<String> {
        self.events()
            .into_iter()
            .filter_map(|r| match r.event {
                Event::SessionOpened(e) if e.agent.as_str() == agent => Some(format!(
                    "opened:{}",
                    match e.why {
                        legio_core::OpenReason::FirstUse => "first_use".to_owned(),
                        legio_core::OpenReason::After(w) => w.to_string(),
                    }
                )),
                Event::SessionSuspended(e) if e.agent.as_str() == agent => {
                    Some(format!("suspended:{}", e.why))
                }
                Event::SessionClosed(e) if e.agent.as_str() == agent => {
                    Some(format!("closed:{}", e.why))
                }
                _ => None,
            })
            .collect()
    }

    pub fn agent(name: &str) -> AgentName {
        AgentName::new(name).unwrap()
    }
}

/// The seqs of a request's history and new message, with `*` for redelivered items.
pub fn shape(request: &RecordedRequest) -> String {
    let history: Vec<String> = request
        .plan
        .history
        .iter()
        .map(|i| format!("{}{}", i.seq, if i.redelivered { "*" } else { "" }))
        .collect();
    format!(
        "{} {} | {}",
        request.plan.mode.as_str(),
        history.join(" "),
        request.plan.new_message.seq
    )
}
