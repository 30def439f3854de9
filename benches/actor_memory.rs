//! Memory per live idle agent actor: RSS growth of a `Runtime` after making 100k agent actors
//! (× scale) live and idle, per actor, against a baseline that does the same log writes and the
//! same provider calls without any actor, each measured in its own child process in the same run.
//! Run: `cargo bench --bench actor_memory` (`LEGIO_BENCH_SCALE=0.02` for a quick smoke run).
//!
//! Shape: 33,334 conversations × 3 agents (an orchestrator `lead` and specialists `a`, `b`), one
//! `@all` post per conversation, so every post starts three actors (and one conversation
//! supervisor), as real conversations would. Relaxed durability, a zero-latency stateful
//! scripted provider, a huge idle timeout and reap interval (nothing is reaped), 64 concurrent
//! clients. Once every post has answered, the process waits for the blocking pool to wind down
//! and measures VmRSS (and RssAnon, the heap part) from `/proc/self/status` again.
//!
//! Every phase runs in a fresh child process (the bench re-executes itself with
//! `LEGIO_BENCH_ACTOR_MEMORY_PHASE` set), because memory freed by one phase stays in the
//! allocator and would hide the next phase's growth:
//! - `runtime`: the runtime as described above.
//! - `baseline`: no runtime, no actors: the same log (same options, same small sled cache) and the
//!   same scripted provider, with each client doing the turns itself, inline: append the `@all`
//!   message, then for each agent `prepare_turn`, append `SessionOpened`, call the provider, append
//!   `ContextDelivered` + reply + `TurnCompleted`. Its growth is the log's (sled's cache and
//!   in-memory page table), the provider's record of every request, and allocator overhead.
//! - `tasks`: reference only: the same number of bare tokio tasks, each idle on its own mpsc
//!   mailbox (the floor for any design with one async entity per agent).
//!
//! The goal is judged on the runtime's growth minus the baseline's, per actor (what the actors,
//! supervisors and status board cost); the raw growth per actor is printed beside it. sled's page
//! cache is capped at 8 MiB in both phases (`StoreOptions.cache_capacity_bytes`, set on the
//! parsed `RuntimeConfig`, since the TOML has no key for it).

use legio_tests::bench::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use legio_core::{
    Audience, ContextDelivered, ConversationKey, Event, History, Message, OpenReason, Participant,
    SessionOpened, SessionStart, TurnCompleted,
};
use legio_llm::{Provider, ProviderRequest, ScriptedConfig, ScriptedProvider};
use legio_runtime::{prepare_turn, AgentSpec, Runtime, RuntimeConfig, RuntimeSettings, TurnInputs};
use legio_store::{Durability, EventLog, SledLog};
use legio_tests::{message_id, session_id, ts};

/// Live actors at scale 1.
const ACTORS: f64 = 100_000.0;
/// The agents of every conversation: the orchestrator first.
const AGENTS: [&str; 3] = ["lead", "a", "b"];
/// Concurrent client tasks.
const CLIENTS: usize = 64;
/// sled's page cache in every phase.
const CACHE_BYTES: u64 = 8 * 1024 * 1024;
/// Goal: RSS per live idle actor.
const GOAL_BYTES_PER_ACTOR: f64 = 16.0 * 1024.0;
const PHASE_VAR: &str = "LEGIO_BENCH_ACTOR_MEMORY_PHASE";
const PROMPTS: [&str; 3] = [
    "You lead a small team. Answer the user, or hand work to a specialist.",
    "You review what you are given and report problems.",
    "You plan the work you are given, step by step.",
];

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("actor_memory: benchmark only; run it with `cargo bench --bench actor_memory`");
        return;
    }
    let scale = scale();
    let conversations = ((ACTORS * scale / AGENTS.len() as f64).ceil() as usize).max(10);
    if let Ok(phase) = std::env::var(PHASE_VAR) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            // Idle blocking threads exit after 1 s, so the "after" figure does not count a pool of
            // parked threads the "before" figure did not have.
            .thread_keep_alive(Duration::from_secs(1))
            .build()
            .expect("a tokio runtime");
        let result = rt.block_on(async move {
            match phase.as_str() {
                "runtime" => phase_runtime(conversations).await,
                "baseline" => phase_baseline(conversations).await,
                "tasks" => phase_tasks(conversations * AGENTS.len()).await,
                other => panic!("unknown phase {other:?}"),
            }
        });
        println!("{}", result.to_line());
        // Exit without tearing down 100k actors: nothing else is measured in this process.
        std::process::exit(0);
    }

    println!(
        "actor_memory: {conversations} conversations × {} agents = {} actors, sled cache {} MiB \
         (LEGIO_BENCH_SCALE={scale})",
        AGENTS.len(),
        fmt_int((conversations * AGENTS.len()) as u64),
        CACHE_BYTES / (1024 * 1024)
    );
    let runtime = run_phase("runtime");
    let baseline = run_phase("baseline");
    let tasks = run_phase("tasks");
    report(&runtime, &baseline, &tasks);
}

/// What one phase measured (printed by the child as one `key=value` line).
#[derive(Debug, Default, Clone)]
struct PhaseResult {
    phase: String,
    entities: u64,
    rss_before: u64,
    rss_after: u64,
    anon_before: u64,
    anon_after: u64,
    millis: u64,
    events: u64,
    requests: u64,
    checked_open: u64,
}

impl PhaseResult {
    fn to_line(&self) -> String {
        format!(
            "result phase={} entities={} rss_before={} rss_after={} anon_before={} anon_after={} \
             millis={} events={} requests={} checked_open={}",
            self.phase,
            self.entities,
            self.rss_before,
            self.rss_after,
            self.anon_before,
            self.anon_after,
            self.millis,
            self.events,
            self.requests,
            self.checked_open
        )
    }

    fn parse(line: &str) -> Option<Self> {
        let rest = line.strip_prefix("result ")?;
        let mut r = PhaseResult::default();
        for pair in rest.split_whitespace() {
            let (k, v) = pair.split_once('=')?;
            let n = || v.parse::<u64>().ok();
            match k {
                "phase" => r.phase = v.to_owned(),
                "entities" => r.entities = n()?,
                "rss_before" => r.rss_before = n()?,
                "rss_after" => r.rss_after = n()?,
                "anon_before" => r.anon_before = n()?,
                "anon_after" => r.anon_after = n()?,
                "millis" => r.millis = n()?,
                "events" => r.events = n()?,
                "requests" => r.requests = n()?,
                "checked_open" => r.checked_open = n()?,
                _ => return None,
            }
        }
        Some(r)
    }

    fn rss_growth(&self) -> i64 {
        self.rss_after as i64 - self.rss_before as i64
    }

    fn anon_growth(&self) -> i64 {
        self.anon_after as i64 - self.anon_before as i64
    }
}

fn run_phase(phase: &str) -> PhaseResult {
    println!("  running phase {phase:?} in a child process ...");
    let exe = std::env::current_exe().expect("the bench executable");
    let output = Command::new(exe)
        .arg("--bench")
        .env(PHASE_VAR, phase)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("running a phase");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "phase {phase} failed ({}); its output:\n{stdout}",
        output.status
    );
    stdout
        .lines()
        .find_map(PhaseResult::parse)
        .unwrap_or_else(|| panic!("phase {phase} printed no result line; its output:\n{stdout}"))
}

/// (VmRSS, RssAnon) of this process in bytes, from `/proc/self/status`.
fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("RssAnon:"))
}

/// Lets the blocking pool's idle threads exit and background work settle, then reads RSS.
async fn settled_rss() -> (u64, u64) {
    tokio::time::sleep(Duration::from_secs(3)).await;
    rss()
}

fn conversation_key(i: usize) -> String {
    format!("mem:{i}")
}

fn post_text(i: usize) -> String {
    format!(
        "@all please look at the latest numbers from the staging run and tell me whether the \
         error budget still holds (conversation {i})"
    )
}

/// Runs `work(i)` for every `i` in `0..n` on `CLIENTS` concurrent tasks.
async fn drive<F, Fut>(n: usize, work: F)
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let work = Arc::new(work);
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let (next, work) = (Arc::clone(&next), Arc::clone(&work));
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                work(i).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("a client task");
    }
}

fn write_config(dir: &Path) -> RuntimeConfig {
    for (name, text) in AGENTS.iter().zip(PROMPTS) {
        std::fs::write(dir.join(format!("{name}.md")), text).expect("writing a prompt file");
    }
    let text = r#"
[store]
path = "db"
durability = "relaxed"
[runtime]
history_window = 50
session_idle_timeout_minutes = 1000000.0
reap_interval_seconds = 1000000.0
[agents.lead]
role = "orchestrator"
description = "leads the team"
prompt = "lead.md"
provider = "local"
[agents.a]
role = "specialist"
description = "reviews"
prompt = "a.md"
provider = "local"
[agents.b]
role = "specialist"
description = "plans"
prompt = "b.md"
provider = "local"
[providers.local]
kind = "scripted"
history = "session"
"#;
    let file = dir.join("legio.toml");
    std::fs::write(&file, text).expect("writing the configuration");
    let mut config = RuntimeConfig::parse(text, &file).expect("a valid configuration");
    config.store.path = dir.join("db");
    config.store.options.durability = Durability::RELAXED;
    config.store.options.cache_capacity_bytes = CACHE_BYTES;
    config
}

async fn phase_runtime(conversations: usize) -> PhaseResult {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let config = write_config(dir.path());
    let provider = ScriptedProvider::new(ScriptedConfig::new(History::Session { resumable: true }));
    let shared: Arc<dyn Provider> = Arc::new(provider.clone());
    let runtime = Arc::new(
        Runtime::builder(config)
            .provider("local", shared)
            .open()
            .await
            .expect("opening the runtime"),
    );
    // Warm every code path once (thread pools, lazy statics) before the first reading.
    runtime
        .post("mem:warmup", &post_text(0))
        .await
        .expect("a warm-up post");
    let (rss_before, anon_before) = settled_rss().await;

    let t0 = Instant::now();
    let rt = Arc::clone(&runtime);
    drive(conversations, move |i| {
        let rt = Arc::clone(&rt);
        async move {
            let replies = rt
                .post(&conversation_key(i), &post_text(i))
                .await
                .expect("a post");
            assert_eq!(replies.len(), AGENTS.len());
            assert!(
                replies.iter().all(|r| r.error().is_none()),
                "a turn failed: {replies:?}"
            );
        }
    })
    .await;
    let millis = t0.elapsed().as_millis() as u64;
    let (rss_after, anon_after) = settled_rss().await;

    // Check (after measuring) that the actors are still live: sessions open, nobody reaped.
    let mut checked_open = 0;
    for i in (0..conversations).step_by((conversations / 100).max(1)) {
        for status in runtime
            .status(&conversation_key(i))
            .await
            .expect("a status")
        {
            let open = status
                .session
                .and_then(|s| s.current)
                .is_some_and(|c| c.status == legio_core::SessionStatus::Open);
            assert!(open, "{} of conversation {i} is not open", status.agent);
            checked_open += 1;
        }
    }
    let events = runtime.log().last_seq().0;
    eprintln!(
        "    runtime: {} posts in {:.1} s",
        conversations,
        millis as f64 / 1e3
    );
    PhaseResult {
        phase: "runtime".into(),
        entities: (conversations * AGENTS.len()) as u64,
        rss_before,
        rss_after,
        anon_before,
        anon_after,
        millis,
        events,
        requests: provider.requests().len() as u64,
        checked_open,
    }
}

/// What the baseline's clients share.
struct Inline {
    log: Arc<dyn EventLog>,
    provider: ScriptedProvider,
    specs: Vec<AgentSpec>,
    prompts: Vec<String>,
    settings: RuntimeSettings,
    ids: AtomicUsize,
}

impl Inline {
    fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed) as u64 + 1
    }

    async fn append(&self, events: Vec<Event>) -> legio_core::SeqRange {
        self.log
            .submit(events)
            .expect("submit")
            .await
            .expect("append")
    }

    /// One post and its three turns, done inline: the runtime's work without its actors.
    async fn post(self: &Arc<Self>, conversation: ConversationKey, text: String) {
        let n = self.next_id();
        let request = message_id(n);
        let range = self
            .append(vec![Event::MessagePosted(Message::text(
                request,
                conversation.clone(),
                Participant::User,
                Audience::All,
                text,
                ts(n),
            ))])
            .await;
        let new_message = range.first;
        let turns = (0..AGENTS.len()).map(|t| {
            let (me, conversation) = (Arc::clone(self), conversation.clone());
            async move { me.turn(t, conversation, new_message, request).await }
        });
        let mut handles = Vec::new();
        for turn in turns {
            handles.push(tokio::spawn(turn));
        }
        for h in handles {
            h.await.expect("a turn");
        }
    }

    async fn turn(
        self: Arc<Self>,
        t: usize,
        conversation: ConversationKey,
        new_message: legio_core::Seq,
        request: legio_core::MessageId,
    ) {
        let spec = self.specs[t].clone();
        let prepared = {
            let (me, conversation, spec) = (Arc::clone(&self), conversation.clone(), spec.clone());
            tokio::task::spawn_blocking(move || {
                prepare_turn(
                    me.log.as_ref(),
                    TurnInputs {
                        spec: &spec,
                        conversation: &conversation,
                        history: History::Session { resumable: true },
                        settings: &me.settings,
                        prompt_hash: "sha256:baseline",
                        live_session: None,
                        new_message,
                    },
                )
            })
            .await
            .expect("the prepare task")
            .expect("prepare_turn")
        };
        let plan = prepared.plan;
        let n = self.next_id();
        let session = session_id(n);
        self.append(vec![Event::SessionOpened(SessionOpened {
            conversation: conversation.clone(),
            agent: spec.name.clone(),
            session,
            at: ts(n),
            why: OpenReason::FirstUse,
            how: SessionStart::Bootstrapped { up_to: plan.up_to },
            prompt_hash: "sha256:baseline".into(),
        })])
        .await;
        let status = (t == 0).then(|| {
            "<agent_status>\n<agent name=\"a\" status=\"working\"/>\n<agent name=\"b\" \
             status=\"working\"/>\n</agent_status>"
                .to_owned()
        });
        let reply = self
            .provider
            .call(ProviderRequest {
                conversation: conversation.clone(),
                agent: spec.name.clone(),
                system_prompt: self.prompts[t].clone(),
                resume: None,
                plan: plan.clone(),
                status,
                deltas: None,
                tools: Default::default(),
                mcp: None,
            })
            .await
            .expect("a provider call");
        let reply_id = message_id(self.next_id());
        self.append(vec![
            Event::ContextDelivered(ContextDelivered {
                conversation: conversation.clone(),
                agent: spec.name.clone(),
                session,
                at: ts(n),
                up_to: plan.up_to,
                mode: plan.mode,
                messages: (plan.history.len() + 1) as u32,
                estimated_tokens: plan.estimated_tokens,
            }),
            Event::MessagePosted(
                Message::text(
                    reply_id,
                    conversation.clone(),
                    Participant::Agent(spec.name.clone()),
                    Audience::user(),
                    reply.text,
                    ts(n),
                )
                .replying_to(request),
            ),
            Event::TurnCompleted(TurnCompleted {
                conversation,
                agent: spec.name,
                session,
                at: ts(n),
                usage: reply.usage.unwrap_or_default(),
                provider_session: reply.provider_session,
                reply: Some(reply_id),
            }),
        ])
        .await;
    }
}

async fn phase_baseline(conversations: usize) -> PhaseResult {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let config = write_config(dir.path());
    let options = config.store.options.clone();
    let path = config.store.path.clone();
    let log: Arc<dyn EventLog> = Arc::new(
        tokio::task::spawn_blocking(move || SledLog::open(path, &options))
            .await
            .expect("the open task")
            .expect("opening the log"),
    );
    let provider = ScriptedProvider::new(ScriptedConfig::new(History::Session { resumable: true }));
    let roster = "\n\n<roster>\n<agent name=\"a\">reviews</agent>\n<agent name=\"b\">plans</agent>\n</roster>";
    let inline = Arc::new(Inline {
        log: Arc::clone(&log),
        provider: provider.clone(),
        specs: config.agents.clone(),
        prompts: PROMPTS
            .iter()
            .enumerate()
            .map(|(i, p)| {
                if i == 0 {
                    format!("{p}{roster}")
                } else {
                    (*p).to_owned()
                }
            })
            .collect(),
        settings: config.runtime.clone(),
        ids: AtomicUsize::new(0),
    });
    assert!(
        inline
            .specs
            .iter()
            .zip(AGENTS)
            .all(|(s, a)| s.name.as_str() == a),
        "the roster is lead, a, b"
    );
    let key = |s: String| ConversationKey::new(s).expect("a valid key");
    inline.post(key("mem:warmup".into()), post_text(0)).await;
    let (rss_before, anon_before) = settled_rss().await;

    let t0 = Instant::now();
    let me = Arc::clone(&inline);
    drive(conversations, move |i| {
        let me = Arc::clone(&me);
        async move { me.post(key(conversation_key(i)), post_text(i)).await }
    })
    .await;
    let millis = t0.elapsed().as_millis() as u64;
    let (rss_after, anon_after) = settled_rss().await;
    eprintln!(
        "    baseline: {} posts in {:.1} s",
        conversations,
        millis as f64 / 1e3
    );
    PhaseResult {
        phase: "baseline".into(),
        entities: (conversations * AGENTS.len()) as u64,
        rss_before,
        rss_after,
        anon_before,
        anon_after,
        millis,
        events: log.last_seq().0,
        requests: provider.requests().len() as u64,
        checked_open: 0,
    }
}

/// Reference: `n` tokio tasks, each idle on its own mpsc mailbox.
async fn phase_tasks(n: usize) -> PhaseResult {
    let (rss_before, anon_before) = settled_rss().await;
    let t0 = Instant::now();
    let mut mailboxes = Vec::with_capacity(n);
    let mut handles = Vec::with_capacity(n);
    for _ in 0..n {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
        handles.push(tokio::spawn(async move {
            let mut sum = 0;
            while let Some(v) = rx.recv().await {
                sum += v;
            }
            sum
        }));
        mailboxes.push(tx);
    }
    // Every task has run once and is parked on its mailbox.
    for tx in &mailboxes {
        tx.send(1).expect("a live task");
    }
    let millis = t0.elapsed().as_millis() as u64;
    let (rss_after, anon_after) = settled_rss().await;
    let live = handles.iter().filter(|h| !h.is_finished()).count() as u64;
    drop(mailboxes);
    PhaseResult {
        phase: "tasks".into(),
        entities: n as u64,
        rss_before,
        rss_after,
        anon_before,
        anon_after,
        millis,
        events: 0,
        requests: 0,
        checked_open: live,
    }
}

fn per(bytes: i64, n: u64) -> f64 {
    bytes as f64 / n.max(1) as f64
}

fn fmt_bytes(b: f64) -> String {
    let a = b.abs();
    if a >= 1024.0 * 1024.0 {
        format!("{:.1} MiB", b / (1024.0 * 1024.0))
    } else if a >= 1024.0 {
        format!("{:.2} KiB", b / 1024.0)
    } else {
        format!("{b:.0} B")
    }
}

fn report(runtime: &PhaseResult, baseline: &PhaseResult, tasks: &PhaseResult) {
    println!();
    println!("RSS growth (VmRSS; RssAnon = the heap part), each phase in its own process:");
    let row = |label: &str, r: &PhaseResult, unit: &str| {
        vec![
            label.to_owned(),
            format!("{} {unit}", fmt_int(r.entities)),
            fmt_bytes(r.rss_before as f64),
            fmt_bytes(r.rss_after as f64),
            fmt_bytes(r.rss_growth() as f64),
            fmt_bytes(per(r.rss_growth(), r.entities)),
            fmt_bytes(per(r.anon_growth(), r.entities)),
            format!("{:.1} s", r.millis as f64 / 1e3),
        ]
    };
    print_table(
        &[
            "phase",
            "live",
            "RSS before",
            "RSS after",
            "growth",
            "per entity",
            "anon per entity",
            "time",
        ],
        &[
            row("runtime: actors live and idle", runtime, "actors"),
            row("baseline: same work, no actors", baseline, "turns"),
            row("reference: bare tokio task + mailbox", tasks, "tasks"),
        ],
    );
    println!(
        "  runtime: {} events in the log, {} provider requests, {} sampled agents checked open",
        fmt_int(runtime.events),
        fmt_int(runtime.requests),
        runtime.checked_open
    );
    println!(
        "  baseline: {} events in the log, {} provider requests",
        fmt_int(baseline.events),
        fmt_int(baseline.requests)
    );
    println!(
        "  tasks: {} of {} still parked when measured",
        fmt_int(tasks.checked_open),
        fmt_int(tasks.entities)
    );

    let actors = runtime.entities;
    let net = per(runtime.rss_growth() - baseline.rss_growth(), actors);
    let net_anon = per(runtime.anon_growth() - baseline.anon_growth(), actors);
    let raw = per(runtime.rss_growth(), actors);
    println!();
    println!("Per live idle actor (an actor's share of its conversation supervisor included):");
    print_table(
        &["figure", "bytes per actor"],
        &[
            vec![
                "runtime growth − baseline growth (VmRSS)".into(),
                fmt_bytes(net),
            ],
            vec![
                "runtime growth − baseline growth (RssAnon)".into(),
                fmt_bytes(net_anon),
            ],
            vec![
                "runtime growth, raw (log + provider record included)".into(),
                fmt_bytes(raw),
            ],
            vec![
                "bare tokio task + mailbox (reference)".into(),
                fmt_bytes(per(tasks.rss_growth(), tasks.entities)),
            ],
        ],
    );
    println!();
    println!("Goals:");
    print_goals(&[(
        format!(
            "RSS per live idle actor, net of baseline < {}",
            fmt_bytes(GOAL_BYTES_PER_ACTOR)
        ),
        fmt_bytes(net),
        net < GOAL_BYTES_PER_ACTOR,
    )]);
}
