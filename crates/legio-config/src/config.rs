//! Configuration: `config/legio.toml` parsed strictly into a file struct, then validated into the
//! settings the runtime uses.
//!
//! Unknown keys are errors naming the key and the file. Relative paths (the store, prompt files)
//! resolve against the config file's folder. `LEGIO_STORE_PATH` and `LEGIO_STORE_DURABILITY`
//! override the file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use legio_core::{AgentName, CompactionPolicy, History};
use legio_store::{Durability, StoreOptions};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use strum::{EnumString, IntoStaticStr};

use crate::error::ConfigError;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    store: StoreSection,
    #[serde(default)]
    runtime: RuntimeSection,
    #[serde(default)]
    agents: BTreeMap<String, AgentSection>,
    #[serde(default)]
    providers: BTreeMap<String, crate::provider_settings::ProviderSection>,
    /// Kept as written: legio-server parses its own table (`ServerSettings`).
    #[serde(default)]
    server: toml::Table,
    /// Scheduled heartbeats per agent (schedule.rs).
    #[serde(default)]
    heartbeats: BTreeMap<String, crate::schedule::HeartbeatSection>,
    /// MCP servers whose tools agents are offered (mcp_config.rs).
    #[serde(default)]
    mcp: BTreeMap<String, crate::mcp_config::McpSection>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoreSection {
    path: Option<PathBuf>,
    durability: Option<String>,
    max_message_bytes: Option<usize>,
    cache_capacity_mb: Option<u64>,
    /// `sled` (default) or `nats`: see store_backend.rs.
    backend: Option<String>,
    nats: Option<crate::store_backend::NatsSection>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuntimeSection {
    history_window: Option<usize>,
    session_idle_timeout_minutes: Option<f64>,
    max_input_tokens: Option<u64>,
    turn_timeout_seconds: Option<f64>,
    max_tool_steps: Option<usize>,
    host_tool_timeout_seconds: Option<f64>,
    reap_interval_seconds: Option<f64>,
    restart_max: Option<u32>,
    restart_window_seconds: Option<f64>,
    restart_backoff_ms: Option<u64>,
    restart_backoff_max_ms: Option<u64>,
    unknown_mentions: Option<String>,
    /// Tools whose calls wait for a person's yes, for every agent (approval.rs).
    approval: Option<Vec<String>>,
    approval_timeout_seconds: Option<f64>,
    #[serde(flatten)]
    compaction: CompactionSection,
}

/// Compaction keys, in `[runtime]` (the defaults) and in `[agents.NAME]` (overrides).
#[derive(Debug, Default, Deserialize)]
struct CompactionSection {
    compaction: Option<bool>,
    compact_after_messages: Option<usize>,
    compact_window_percent: Option<u8>,
    keep_recent: Option<usize>,
    summarizer: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentSection {
    role: String,
    #[serde(default)]
    description: String,
    prompt: PathBuf,
    provider: String,
    /// Tools whose calls wait for a person's yes, added to `runtime.approval` (approval.rs).
    approval: Option<Vec<String>>,
    #[serde(flatten)]
    compaction: CompactionSection,
}

/// Where the log lives and how it is opened.
#[derive(Clone, Debug)]
pub struct StoreSettings {
    /// The database folder.
    pub path: PathBuf,
    /// Options for opening it.
    pub options: StoreOptions,
    /// Which log: the sled database at `path` (default) or a NATS JetStream cluster.
    pub backend: crate::store_backend::StoreBackend,
}

/// How a failed agent actor is restarted.
#[derive(Clone, Copy, Debug)]
pub struct RestartSettings {
    /// Restarts allowed within `window` before the agent is marked failed.
    pub max_restarts: u32,
    /// The intensity window.
    pub window: Duration,
    /// The first backoff; it doubles with each restart in the window.
    pub backoff: Duration,
    /// The largest backoff.
    pub max_backoff: Duration,
}

/// The runtime's settings.
#[derive(Clone, Debug)]
pub struct RuntimeSettings {
    /// Visible messages in a full or bootstrap context.
    pub history_window: usize,
    /// A session idle longer than this is reaped.
    pub idle_timeout: Duration,
    /// A stateful session whose cumulative input tokens exceed this is rotated.
    pub max_input_tokens: u64,
    /// A turn that takes longer than this is cancelled and answered with an error (the whole
    /// turn: every provider call and tool call of its tool loop).
    pub turn_timeout: Duration,
    /// The most provider calls one turn makes in its tool loop; a model still calling tools at
    /// the last one gets an error reply instead of more steps.
    pub max_tool_steps: usize,
    /// How long a turn waits for the host's result of a tool the host runs (declared over the
    /// API); past it the call gets an interrupted error result and the turn goes on. The turn's
    /// own timeout still bounds the whole turn.
    pub host_tool_timeout: Duration,
    /// How often the reaper looks for idle actors.
    pub reap_interval: Duration,
    /// Restart policy.
    pub restart: RestartSettings,
    /// The compaction policy agents use unless their table overrides it.
    pub compaction: CompactionPolicy,
    /// The provider that writes summaries unless an agent names its own; `None`: each agent's
    /// own provider.
    pub summarizer: Option<String>,
    /// What an `@handle` that names no agent does to a message.
    pub unknown_mentions: UnknownMentions,
    /// `runtime.approval`: the tools every agent's calls of which wait for a person's answer.
    pub approval: crate::approval::ApprovalPolicy,
    /// How long a call waits for its answer; past it the call is denied and the model told.
    pub approval_timeout: Duration,
}

/// What an `@handle` that names no agent does (`runtime.unknown_mentions`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UnknownMentions {
    /// `"warn"` (the default): it is plain text; the message goes where its real mentions send
    /// it (or to the orchestrator), and the sender is told which handles matched nobody.
    #[default]
    Warn,
    /// `"error"`: the message is refused (nothing is stored), naming the roster.
    Error,
}

impl Default for RuntimeSettings {
    fn default() -> Self {
        Self {
            // Above the default `compact_after_messages` (100): with compaction on, a summary,
            // not a sliding window, moves a context's start (see CompactionPolicy's defaults).
            history_window: 120,
            idle_timeout: Duration::from_secs(30 * 60),
            max_input_tokens: 150_000,
            turn_timeout: Duration::from_secs(300),
            max_tool_steps: 16,
            host_tool_timeout: Duration::from_secs(120),
            reap_interval: Duration::from_secs(60),
            restart: RestartSettings {
                max_restarts: 5,
                window: Duration::from_secs(60),
                backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(10),
            },
            compaction: CompactionPolicy::default(),
            summarizer: None,
            unknown_mentions: UnknownMentions::Warn,
            approval: crate::approval::ApprovalPolicy::default(),
            approval_timeout: crate::approval::APPROVAL_TIMEOUT_DEFAULT,
        }
    }
}

/// An agent's role; its word is the variant's name in lowercase, both ways (strum).
#[derive(Clone, Copy, PartialEq, Eq, Debug, IntoStaticStr, EnumString)]
#[strum(serialize_all = "lowercase")]
pub enum Role {
    /// Talks with the user; sees everything.
    Orchestrator,
    /// Addressed with `@name`; sees what names it, what is for all, and what it sent.
    Specialist,
}

impl Role {
    /// The role as a word.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One agent of the roster.
#[derive(Clone, Debug)]
pub struct AgentSpec {
    /// Its name.
    pub name: AgentName,
    /// Its role.
    pub role: Role,
    /// What it is for (shown to the orchestrator).
    pub description: String,
    /// Its system prompt file.
    pub prompt: PathBuf,
    /// The provider it uses (a key of `providers`).
    pub provider: String,
    /// When its context is compacted.
    pub compaction: CompactionPolicy,
    /// The provider that writes its summaries (`None`: its own).
    pub summarizer: Option<String>,
    /// The tools whose calls wait for a person's answer: `runtime.approval`, then its own.
    pub approval: crate::approval::ApprovalPolicy,
}

impl AgentSpec {
    /// Whose view of a conversation this agent has.
    pub fn viewer(&self) -> legio_core::Viewer<'_> {
        match self.role {
            Role::Orchestrator => legio_core::Viewer::Everything,
            Role::Specialist => legio_core::Viewer::Specialist(&self.name),
        }
    }
}

/// A provider's configuration, validated per kind (see `provider_settings`).
pub type ProviderSpec = legio_llm::ProviderSettings;

/// The whole configuration, validated.
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// The file it came from, if any.
    pub source: Option<PathBuf>,
    /// The store.
    pub store: StoreSettings,
    /// Runtime settings.
    pub runtime: RuntimeSettings,
    /// The roster, orchestrator first, then specialists by name.
    pub agents: Vec<AgentSpec>,
    /// Providers by name.
    pub providers: BTreeMap<String, ProviderSpec>,
    /// The `[server]` table as written, for legio-server to parse (`ServerSettings`).
    pub server: crate::raw::RawSection,
    /// The `[heartbeats.AGENT]` schedules the runtime runs (schedule.rs).
    pub heartbeats: Vec<crate::schedule::HeartbeatSchedule>,
    /// The `[mcp.NAME]` tables, by name: MCP servers whose tools agents are offered.
    pub mcp: Vec<crate::mcp_config::McpServerSpec>,
}

/// `section`'s compaction keys over `base`; errors name `where_`'s key.
fn compaction_policy(
    section: &CompactionSection,
    base: CompactionPolicy,
    where_: &str,
) -> Result<CompactionPolicy, String> {
    let mut policy = base;
    if let Some(v) = section.compaction {
        policy.enabled = v;
    }
    if let Some(v) = section.compact_after_messages {
        if v < 2 {
            return Err(format!(
                "{where_}.compact_after_messages = {v} must be at least 2"
            ));
        }
        policy.compact_after_messages = v;
    }
    if let Some(v) = section.compact_window_percent {
        if !(1..=100).contains(&v) {
            return Err(format!(
                "{where_}.compact_window_percent = {v} must be 1 to 100"
            ));
        }
        policy.window_percent = v;
    }
    if let Some(v) = section.keep_recent {
        policy.keep_recent = v;
    }
    if policy.keep_recent >= policy.compact_after_messages {
        return Err(format!(
            "{where_}.keep_recent ({}) must be below compact_after_messages ({})",
            policy.keep_recent, policy.compact_after_messages
        ));
    }
    Ok(policy)
}

/// `[store]`: where the log lives and how it writes (`LEGIO_STORE_PATH` and
/// `LEGIO_STORE_DURABILITY` override the file).
fn store_settings(section: &StoreSection, base: &Path) -> Result<StoreSettings, String> {
    let mut options = StoreOptions::default();
    let mut path = base.join(
        section
            .path
            .clone()
            .unwrap_or_else(|| PathBuf::from("../data/legio")),
    );
    if let Some(p) = std::env::var_os("LEGIO_STORE_PATH") {
        path = PathBuf::from(p);
    }
    if let Some(word) = std::env::var("LEGIO_STORE_DURABILITY")
        .ok()
        .or(section.durability.clone())
    {
        options.durability = Durability::parse(&word)
            .ok_or_else(|| format!("store.durability = {word:?} is not \"sync\" or \"relaxed\""))?;
    }
    if let Some(limit) = section.max_message_bytes {
        if limit == 0 {
            return Err("store.max_message_bytes must be above 0".into());
        }
        options.max_message_bytes = limit;
    }
    if let Some(mb) = section.cache_capacity_mb {
        if mb == 0 {
            return Err("store.cache_capacity_mb must be above 0".into());
        }
        options.cache_capacity_bytes = mb.saturating_mul(1024 * 1024);
    }
    let backend = crate::store_backend::parse_backend(
        section.backend.as_deref(),
        section.nats.as_ref(),
        base,
        options.max_message_bytes,
    )?;
    Ok(StoreSettings {
        path,
        options,
        backend,
    })
}

/// `runtime.KEY = v` seconds as a duration.
fn seconds(key: &str, v: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(v)
        .map_err(|_| format!("runtime.{key} = {v} is not a valid duration"))
}

/// A count that must be above 0, or the default.
fn above_zero(key: &str, v: Option<usize>, default: usize) -> Result<usize, String> {
    match v {
        Some(0) => Err(format!("runtime.{key} must be above 0")),
        Some(v) => Ok(v),
        None => Ok(default),
    }
}

/// `[runtime]` over the defaults.
fn runtime_settings(r: &RuntimeSection) -> Result<RuntimeSettings, String> {
    let mut runtime = RuntimeSettings::default();
    runtime.compaction = compaction_policy(&r.compaction, runtime.compaction, "runtime")?;
    runtime.summarizer = r.compaction.summarizer.clone();
    runtime.history_window =
        above_zero("history_window", r.history_window, runtime.history_window)?;
    runtime.max_tool_steps =
        above_zero("max_tool_steps", r.max_tool_steps, runtime.max_tool_steps)?;
    if let Some(v) = r.session_idle_timeout_minutes {
        runtime.idle_timeout = seconds("session_idle_timeout_minutes", v * 60.0)?;
    }
    if let Some(v) = r.max_input_tokens {
        runtime.max_input_tokens = v;
    }
    if let Some(v) = r.turn_timeout_seconds {
        runtime.turn_timeout = seconds("turn_timeout_seconds", v)?;
    }
    if let Some(v) = r.host_tool_timeout_seconds {
        runtime.host_tool_timeout = seconds("host_tool_timeout_seconds", v)?;
    }
    if let Some(v) = r.reap_interval_seconds {
        runtime.reap_interval = seconds("reap_interval_seconds", v)?;
    }
    runtime.restart = restart_settings(r, runtime.restart)?;
    if let Some(written) = &r.approval {
        runtime.approval = crate::approval::ApprovalPolicy::parse("runtime.approval", written)?;
    }
    if let Some(v) = r.approval_timeout_seconds {
        runtime.approval_timeout = crate::approval::approval_timeout(v)?;
    }
    runtime.unknown_mentions = match r.unknown_mentions.as_deref() {
        None | Some("warn") => UnknownMentions::Warn,
        Some("error") => UnknownMentions::Error,
        Some(other) => {
            return Err(format!(
                "runtime.unknown_mentions = {other:?} is not \"warn\" or \"error\""
            ))
        }
    };
    Ok(runtime)
}

/// `runtime.restart_*` over `restart`.
fn restart_settings(
    r: &RuntimeSection,
    mut restart: RestartSettings,
) -> Result<RestartSettings, String> {
    if let Some(v) = r.restart_max {
        restart.max_restarts = v;
    }
    if let Some(v) = r.restart_window_seconds {
        restart.window = seconds("restart_window_seconds", v)?;
    }
    if let Some(v) = r.restart_backoff_ms {
        restart.backoff = Duration::from_millis(v);
    }
    if let Some(v) = r.restart_backoff_max_ms {
        restart.max_backoff = Duration::from_millis(v);
    }
    Ok(restart)
}

/// `[agents.NAME]`, checked against the providers.
fn agent_spec(
    name: &str,
    a: &AgentSection,
    providers: &BTreeMap<String, ProviderSpec>,
    runtime: &RuntimeSettings,
    base: &Path,
) -> Result<AgentSpec, String> {
    let agent = AgentName::new(name).map_err(|e| format!("agents.{name}: {e}"))?;
    let role: Role = a.role.parse().map_err(|_| {
        format!(
            "agents.{name}.role = {:?} is not \"orchestrator\" or \"specialist\"",
            a.role
        )
    })?;
    if !providers.contains_key(&a.provider) {
        let known: Vec<&str> = providers.keys().map(String::as_str).collect();
        return Err(format!(
            "agents.{name}.provider = {:?} names no [providers.{}] table (known: {})",
            a.provider,
            a.provider,
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        ));
    }
    let prompt = base.join(&a.prompt);
    if !prompt.is_file() {
        return Err(format!(
            "agents.{name}.prompt: no file at {}",
            prompt.display()
        ));
    }
    let where_ = format!("agents.{name}");
    let compaction = compaction_policy(&a.compaction, runtime.compaction, &where_)?;
    let summarizer = a
        .compaction
        .summarizer
        .clone()
        .or_else(|| runtime.summarizer.clone());
    if let Some(s) = summarizer.as_ref().filter(|s| !providers.contains_key(*s)) {
        return Err(format!(
            "{where_}.summarizer (or runtime.summarizer) = {s:?} names no [providers.{s}] table"
        ));
    }
    let own = crate::approval::ApprovalPolicy::parse(
        &format!("{where_}.approval"),
        a.approval.as_deref().unwrap_or_default(),
    )?;
    Ok(AgentSpec {
        name: agent,
        role,
        description: a.description.clone(),
        prompt,
        provider: a.provider.clone(),
        compaction,
        summarizer,
        approval: runtime.approval.and(&own),
    })
}

/// The roster in its order (the orchestrator first, then the specialists by name), once it has
/// exactly one orchestrator.
fn roster_order(mut agents: Vec<AgentSpec>) -> Result<Vec<AgentSpec>, String> {
    let orchestrators: Vec<&str> = agents
        .iter()
        .filter(|a| a.role == Role::Orchestrator)
        .map(|a| a.name.as_str())
        .collect();
    if orchestrators.len() != 1 {
        return Err(format!(
            "exactly one agent must have role = \"orchestrator\"; found {} ({})",
            orchestrators.len(),
            orchestrators.join(", ")
        ));
    }
    agents.sort_by_key(|a| (a.role != Role::Orchestrator, a.name.clone()));
    Ok(agents)
}

impl RuntimeConfig {
    /// Loads and validates `file`.
    pub fn load(file: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(file).map_err(|e| ConfigError::Read {
            file: file.to_owned(),
            reason: e.to_string(),
        })?;
        Self::parse(&text, file)
    }

    /// Parses and validates configuration text as if read from `file` (relative paths resolve
    /// against its folder).
    pub fn parse(text: &str, file: &Path) -> Result<Self, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            file: file.to_owned(),
            message,
        };
        let parsed: FileConfig = toml::from_str(text).map_err(|e| invalid(located(text, &e)))?;
        let base = file.parent().map(Path::to_path_buf).unwrap_or_default();
        let store = store_settings(&parsed.store, &base).map_err(&invalid)?;
        let runtime = runtime_settings(&parsed.runtime).map_err(&invalid)?;
        let mut providers = BTreeMap::new();
        for (name, p) in &parsed.providers {
            let spec = crate::provider_settings::validate(name, p, &base, &store.path)
                .map_err(&invalid)?;
            providers.insert(name.clone(), spec);
        }
        let agents = parsed
            .agents
            .iter()
            .map(|(name, a)| agent_spec(name, a, &providers, &runtime, &base))
            .collect::<Result<Vec<_>, _>>()
            .and_then(roster_order)
            .map_err(&invalid)?;
        let roster: Vec<AgentName> = agents.iter().map(|a| a.name.clone()).collect();
        let heartbeats =
            crate::schedule::parse_schedules(&parsed.heartbeats, &roster).map_err(&invalid)?;
        let mcp = parsed
            .mcp
            .iter()
            .map(|(name, section)| crate::mcp_config::validate(name, section, &roster, &base))
            .collect::<Result<Vec<_>, _>>()
            .map_err(&invalid)?;
        Ok(Self {
            source: Some(file.to_owned()),
            store,
            runtime,
            agents,
            providers,
            server: crate::raw::RawSection::new(parsed.server),
            heartbeats,
            mcp,
        })
    }

    /// The orchestrator's spec.
    pub fn orchestrator(&self) -> &AgentSpec {
        &self.agents[0]
    }

    /// The specialists, by name.
    pub fn specialists(&self) -> impl Iterator<Item = &AgentSpec> {
        self.agents.iter().filter(|a| a.role == Role::Specialist)
    }

    /// The history capability of the provider `spec` uses.
    pub fn history_of(&self, spec: &AgentSpec) -> Option<History> {
        self.providers
            .get(&spec.provider)
            .map(ProviderSpec::history)
    }

    /// The agent's full system prompt from its prompt file's text `base`, and its hash. The
    /// orchestrator's carries the roster (names and descriptions), so a roster change also
    /// rotates its session.
    pub fn compose_prompt(&self, spec: &AgentSpec, base: String) -> (String, String) {
        let prompt = match spec.role {
            Role::Specialist => base,
            Role::Orchestrator => {
                let mut roster = String::from("\n\n<roster>\n");
                for a in self.specialists() {
                    roster.push_str(&format!(
                        "<agent name=\"{}\">{}</agent>\n",
                        a.name, a.description
                    ));
                }
                roster.push_str("</roster>");
                base + &roster
            }
        };
        let hash = Sha256::digest(prompt.as_bytes());
        let hex: String = hash.iter().take(16).map(|b| format!("{b:02x}")).collect();
        (prompt, format!("sha256:{hex}"))
    }

    /// The spec of the agent called `name`, or an error listing the roster.
    pub fn agent_named(&self, name: &str) -> Result<&AgentSpec, crate::error::UnknownAgent> {
        self.agents
            .iter()
            .find(|a| a.name.as_str() == name)
            .ok_or_else(|| crate::error::UnknownAgent {
                name: name.to_owned(),
                known: self.agents.iter().map(|a| a.name.to_string()).collect(),
            })
    }

    /// The spec of `name`.
    pub fn agent(&self, name: &AgentName) -> Option<&AgentSpec> {
        self.agents.iter().find(|a| &a.name == name)
    }
}

/// A TOML error with where it is: `line N: `the line`: what is wrong` (the message alone did
/// not name a mistyped value's key, `invalid type: string "10s", expected f64`, nor the line of
/// a syntax error).
fn located(text: &str, error: &toml::de::Error) -> String {
    let message = error.message().trim_end();
    let Some(span) = error.span() else {
        return message.to_owned();
    };
    let start = span.start.min(text.len());
    let line = text[..start].matches('\n').count() + 1;
    let shown = text.lines().nth(line - 1).unwrap_or("").trim();
    match shown.is_empty() {
        true => format!("line {line}: {message}"),
        false => format!("line {line} (`{shown}`): {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use legio_llm::ScriptedConfig;

    fn load_text(text: &str) -> Result<RuntimeConfig, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("lead.md"), "You lead.").unwrap();
        std::fs::write(dir.path().join("spec.md"), "You help.").unwrap();
        let file = dir.path().join("legio.toml");
        std::fs::write(&file, text).unwrap();
        RuntimeConfig::load(&file)
    }

    const GOOD: &str = r#"
[store]
path = "db"
[runtime]
history_window = 20
[agents.lead]
role = "orchestrator"
description = "leads"
prompt = "lead.md"
provider = "local"
[agents.ann]
role = "specialist"
prompt = "spec.md"
provider = "local"
[providers.local]
kind = "scripted"
history = "session-not-resumable"
"#;

    #[test]
    fn a_good_file_validates() {
        let c = load_text(GOOD).unwrap();
        assert_eq!(c.orchestrator().name.as_str(), "lead");
        assert_eq!(c.agents.len(), 2);
        assert_eq!(c.runtime.history_window, 20);
        assert!(c.store.path.is_absolute() && c.store.path.ends_with("db"));
        assert!(matches!(
            c.providers["local"],
            ProviderSpec::Scripted(ScriptedConfig {
                history: History::Session { resumable: false },
                ..
            })
        ));
    }

    fn err(text: &str) -> String {
        load_text(text).unwrap_err().to_string()
    }

    #[test]
    fn approval_policies_add_the_agents_own_to_the_runtimes() {
        let text = GOOD
            .replace(
                "history_window = 20",
                "history_window = 20\napproval = [\"pay\"]\napproval_timeout_seconds = 90",
            )
            .replace(
                "prompt = \"spec.md\"",
                "prompt = \"spec.md\"\napproval = [\"mcp__fs__*\"]",
            );
        let c = load_text(&text).unwrap();
        assert_eq!(c.runtime.approval_timeout, Duration::from_secs(90));
        let ann = c.agent_named("ann").unwrap();
        assert!(ann.approval.needs_approval("pay").is_some());
        assert!(ann.approval.needs_approval("mcp__fs__rm").is_some());
        let lead = c.orchestrator();
        assert!(lead.approval.needs_approval("pay").is_some());
        assert!(lead.approval.needs_approval("mcp__fs__rm").is_none());
        let e = err(&GOOD.replace("history_window = 20", "approval_timeout_seconds = 0"));
        assert!(
            e.contains("runtime.approval_timeout_seconds") && e.contains("legio.toml"),
            "{e}"
        );
        let e = err(&GOOD.replace(
            "prompt = \"spec.md\"",
            "prompt = \"spec.md\"\napproval = [\"a b\"]",
        ));
        assert!(
            e.contains("agents.ann.approval") && e.contains("\"a b\""),
            "{e}"
        );
        let e = err(&GOOD.replace("history_window = 20", "approval = \"pay\""));
        assert!(e.contains("approval"), "{e}");
    }

    #[test]
    fn errors_name_the_key_and_the_file() {
        let e = err(&GOOD.replace("history_window", "histroy_window"));
        assert!(
            e.contains("histroy_window") && e.contains("legio.toml"),
            "{e}"
        );
        let e = err(&GOOD.replace("[store]", "[stroe]"));
        assert!(e.contains("stroe"), "{e}");
        let e = err(&GOOD.replace(
            "provider = \"local\"\n[agents.ann]",
            "provider = \"nope\"\n[agents.ann]",
        ));
        assert!(
            e.contains("agents.lead.provider") && e.contains("nope"),
            "{e}"
        );
        let e = err(&GOOD.replace("spec.md", "missing.md"));
        assert!(e.contains("missing.md"), "{e}");
        let e = err(&GOOD.replace("role = \"specialist\"", "role = \"orchestrator\""));
        assert!(e.contains("exactly one"), "{e}");
        let e = err(&GOOD.replace("session-not-resumable", "forever"));
        assert!(e.contains("forever"), "{e}");
        let e = err(&GOOD.replace("[agents.ann]", "[agents.Ann]"));
        assert!(e.contains("\"Ann\""), "{e}");
        // A value of the wrong type, and a syntax error, with their line (an operator's
        // walkthrough: neither named where it was).
        let e = err(&GOOD.replace("history_window = 20", "history_window = \"20\""));
        assert!(e.contains("line 5 (`history_window = \"20\"`)"), "{e}");
        let e = err(&GOOD.replace("path = \"db\"", "path = \"db\", durability = \"relaxed\""));
        assert!(e.contains("line 3"), "{e}");
    }

    #[test]
    fn compaction_has_runtime_defaults_and_per_agent_overrides() {
        let c = load_text(GOOD).unwrap();
        assert_eq!(c.agents[0].compaction, CompactionPolicy::default());
        assert_eq!(c.agents[0].summarizer, None);
        let text = GOOD
            .replace(
                "history_window = 20",
                "history_window = 20\ncompact_after_messages = 30\nkeep_recent = 6\nsummarizer = \"local\"",
            )
            .replace(
                "prompt = \"spec.md\"",
                "prompt = \"spec.md\"\ncompaction = false\nkeep_recent = 2",
            );
        let c = load_text(&text).unwrap();
        let lead = &c.agents[0];
        assert_eq!(
            (
                lead.compaction.compact_after_messages,
                lead.compaction.keep_recent
            ),
            (30, 6)
        );
        assert_eq!(lead.summarizer.as_deref(), Some("local"));
        let ann = &c.agents[1];
        assert!(!ann.compaction.enabled);
        assert_eq!(
            (
                ann.compaction.compact_after_messages,
                ann.compaction.keep_recent
            ),
            (30, 2)
        );
        for (from, to, needle) in [
            (
                "history_window = 20",
                "keep_recent = 140",
                "keep_recent (140)",
            ),
            (
                "history_window = 20",
                "summarizer = \"nope\"",
                "names no [providers.nope]",
            ),
            (
                "history_window = 20",
                "compact_window_percent = 0",
                "compact_window_percent",
            ),
            (
                "prompt = \"spec.md\"",
                "prompt = \"spec.md\"\nkeep_recnt = 3",
                "keep_recnt",
            ),
            (
                "history_window = 20",
                "histroy_window = 20",
                "histroy_window",
            ),
        ] {
            let e = err(&GOOD.replace(from, to));
            assert!(e.contains(needle), "{to}: {e}");
        }
    }

    /// A role reads from its word in the file and shows as it (`legio agents`, `/v1/meta`).
    #[test]
    fn every_role_reads_as_its_word_and_back() {
        let c = load_text(GOOD).unwrap();
        let roles: Vec<(&str, Role, &str)> = c
            .agents
            .iter()
            .map(|a| (a.name.as_str(), a.role, a.role.as_str()))
            .collect();
        assert_eq!(
            roles,
            [
                ("lead", Role::Orchestrator, "orchestrator"),
                ("ann", Role::Specialist, "specialist")
            ]
        );
        for word in ["Specialist", "specialists", ""] {
            let e = err(&GOOD.replace("role = \"specialist\"", &format!("role = {word:?}")));
            assert!(
                e.contains(&format!(
                    "agents.ann.role = {word:?} is not \"orchestrator\" or \"specialist\""
                )),
                "{e}"
            );
        }
    }

    #[test]
    fn a_missing_file_is_named() {
        let e = RuntimeConfig::load(Path::new("/nonexistent/legio.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/legio.toml"), "{e}");
    }
}
