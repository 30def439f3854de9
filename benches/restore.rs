//! Restore latency: the time from an agent actor's (re)start until its context plan is ready
//! (`prepare_turn` with no live session: session state, decision, the new message, the delta
//! reads, the plan), p50/p99 with 10k, 100k and 1M events in the log (× scale), and the ratio of
//! the largest log's p99 to the smallest's, all in the same run.
//! Run: `cargo bench --bench restore` (`LEGIO_BENCH_SCALE=0.02` for a quick smoke run).
//!
//! Each log is built fast (`SledLog`, relaxed durability, batches of 5,000 events) from realistic
//! traffic over 200 interleaved conversations (× scale, at least 10) of one orchestrator (`lead`)
//! and two specialists (`a`, `b`): user messages to the orchestrator, to one or both
//! specialists or to all, each followed by the addressed agents' turns as the runtime records
//! them (`SessionOpened` when needed, `ContextDelivered`, the reply, `TurnCompleted`), with
//! sessions now and then suspended (idle) or closed (manual reset) and later resumed or
//! bootstrapped again. The number of conversations is the same for every size, so a bigger log
//! also means longer conversations. At the end every agent whose session is open (left by a
//! crash) or suspended gets one more message addressed to it: the message its restarted actor
//! must answer. The log is then closed and reopened (sled's cache is empty, the OS page cache is
//! warm), and `prepare_turn` is timed once for every such (conversation, agent) pair in random
//! order ("first touch"), then for 5,000 random pairs ("warm"). Every plan must be a delta from
//! the checkpoint the generator recorded. The log is reopened with the default options (256 MiB
//! sled cache); `LEGIO_BENCH_RESTORE_CACHE_MB=N` sets another cache size for that reopen.
//!
//! For context (not goals): the same restore done by folding every event of the conversation
//! instead of reading the session index (what a log without per-agent session state would do),
//! and an end-to-end restart through a real `Runtime` on a durable log (abort, reopen, then the
//! first post to each agent), which includes the fsyncs of the posted message, the crash
//! cleanup, the reopened session and the turn's outcome.

use legio_tests::bench::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use legio_core::{
    plan_context, AgentName, AgentSessionState, Audience, BoundaryReason, ContextDelivered,
    ConversationKey, Delivery, DeliveryMode, Event, History, Message, OpenReason, Participant, Seq,
    SessionEnded, SessionOpened, SessionStart, TokenUsage, TurnCompleted,
};
use legio_llm::{Provider, ScriptedConfig, ScriptedProvider};
use legio_runtime::{
    prepare_turn, AgentSpec, Role, Runtime, RuntimeConfig, RuntimeSettings, TurnInputs, MAX_DELTA,
};
use legio_store::{Durability, EventLog, SledLog, StoreOptions};
use legio_tests::{message_id, session_id, ts};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// Log sizes at scale 1.
const SIZES: [f64; 3] = [10_000.0, 100_000.0, 1_000_000.0];
/// Conversations at scale 1 (the same for every size).
const CONVERSATIONS: f64 = 200.0;
/// Events per append while building.
const LOAD_BATCH: usize = 5_000;
/// Warm samples per size.
const WARM_SAMPLES: usize = 5_000;
/// Samples of the fold-everything comparison per size.
const FOLD_SAMPLES: usize = 200;
/// The agents: the orchestrator first.
const AGENTS: [&str; 3] = ["lead", "a", "b"];
/// The prompt hash every generated session was opened with (and the restore asks with).
const PROMPT_HASH: &str = "sha256:restore-bench";
const SEED: u64 = 0x5eed_7e57;
/// Overrides sled's cache size (MiB) for the measuring reopen.
const CACHE_VAR: &str = "LEGIO_BENCH_RESTORE_CACHE_MB";
/// Goal: p99 restore latency at every size.
const GOAL_P99: Duration = Duration::from_millis(1);
/// Goal: the largest log's p99 within this factor of the smallest's.
const GOAL_FLAT: f64 = 1.5;

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("restore: benchmark only; run it with `cargo bench --bench restore`");
        return;
    }
    let scale = scale();
    let conversations = ((CONVERSATIONS * scale).round() as usize).max(10);
    let sizes: Vec<usize> = SIZES
        .iter()
        .map(|s| ((s * scale).round() as usize).max(1_000))
        .collect();
    let warm_samples = ((WARM_SAMPLES as f64 * scale).round() as usize).max(500);
    println!(
        "restore: logs of {} events, {conversations} conversations × {} agents \
         (LEGIO_BENCH_SCALE={scale})",
        sizes
            .iter()
            .map(|s| fmt_int(*s as u64))
            .collect::<Vec<_>>()
            .join(" / "),
        AGENTS.len()
    );

    let mut results = Vec::new();
    for &size in &sizes {
        results.push(measure_size(size, conversations, warm_samples));
    }

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let restart_conversations = ((100.0 * scale).round() as usize).max(10);
    let e2e = rt.block_on(end_to_end(restart_conversations));

    report(&results, &e2e);
}

/// What one log size measured.
struct SizeResult {
    events: u64,
    conversations: usize,
    build: Duration,
    disk_bytes: u64,
    pairs: usize,
    open_pairs: usize,
    /// Sorted nanoseconds.
    first_touch: Vec<u64>,
    warm: Vec<u64>,
    fold: Vec<u64>,
    /// Mean messages in the delta (history) of the warm plans.
    mean_delta: f64,
    max_delta: usize,
}

/// One agent's session as the generator tracks it.
#[derive(Clone)]
enum Sim {
    Never,
    Open {
        session: u64,
        provider_session: String,
    },
    Suspended {
        session: u64,
        provider_session: String,
        why: BoundaryReason,
    },
    Closed {
        why: BoundaryReason,
    },
}

#[derive(Clone)]
struct AgentSim {
    state: Sim,
    checkpoint: u64,
    /// Cumulative input tokens of the current session (rotated over the ceiling, as the runtime
    /// does).
    input: u64,
}

/// Builds realistic traffic into a log, tracking every agent's session the way the runtime would
/// record it.
struct Generator<'a> {
    rng: StdRng,
    log: &'a SledLog,
    conversations: Vec<ConversationKey>,
    agents: Vec<AgentName>,
    sims: Vec<[AgentSim; 3]>,
    batch: Vec<Event>,
    /// The seq the next pushed event will get.
    next_seq: u64,
    next_session: u64,
    words: Vec<&'static str>,
    max_input_tokens: u64,
}

impl Generator<'_> {
    fn push(&mut self, event: Event) -> u64 {
        let seq = self.next_seq;
        self.batch.push(event);
        self.next_seq += 1;
        if self.batch.len() >= LOAD_BATCH {
            self.flush();
        }
        seq
    }

    fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.batch);
        let range = self.log.append(batch).expect("appending a batch");
        assert_eq!(
            range.last.0,
            self.next_seq - 1,
            "the log numbers events as the generator expects"
        );
    }

    fn body(&mut self, min: usize, max: usize) -> String {
        let target = self.rng.gen_range(min..=max);
        let mut out = String::with_capacity(target + 12);
        while out.len() < target {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(self.words.choose(&mut self.rng).copied().unwrap_or("word"));
        }
        out
    }

    fn session_event_base(&self, c: usize, t: usize) -> (ConversationKey, AgentName) {
        (self.conversations[c].clone(), self.agents[t].clone())
    }

    /// One round: a user message to some agents of conversation `c`, then each addressed agent's
    /// turn.
    fn round(&mut self) {
        let c = self.rng.gen_range(0..self.conversations.len());
        let roll = self.rng.gen_range(0..100);
        let targets: &[usize] = match roll {
            0..30 => &[0],
            30..55 => &[1],
            55..80 => &[2],
            80..90 => &[0, 1, 2],
            _ => &[1, 2],
        };
        let audience = if targets.len() == 3 {
            Audience::All
        } else {
            Audience::only(
                targets
                    .iter()
                    .map(|&t| Participant::Agent(self.agents[t].clone())),
            )
        };
        let text = self.body(60, 400);
        let seq = self.next_seq;
        let request = message_id(seq);
        self.push(Event::MessagePosted(Message::text(
            request,
            self.conversations[c].clone(),
            Participant::User,
            audience,
            text,
            ts(seq),
        )));
        let user_seq = seq;
        for &t in targets {
            let (conversation, agent) = self.session_event_base(c, t);
            let mut sim = self.sims[c][t].clone();
            if sim.input > self.max_input_tokens {
                // The runtime closes a session over the token ceiling and bootstraps a new one.
                if let Sim::Open { session, .. } | Sim::Suspended { session, .. } = &sim.state {
                    let at = ts(self.next_seq);
                    self.push(Event::SessionClosed(SessionEnded {
                        conversation: conversation.clone(),
                        agent: agent.clone(),
                        session: session_id(*session),
                        at,
                        why: BoundaryReason::TokenCeiling,
                    }));
                }
                sim.state = Sim::Closed {
                    why: BoundaryReason::TokenCeiling,
                };
                sim.input = 0;
            }
            let opened = !matches!(sim.state, Sim::Open { .. });
            let (session, provider_session, mode) = match sim.state {
                Sim::Open {
                    session,
                    provider_session,
                } => (session, provider_session, DeliveryMode::Delta),
                other => {
                    self.next_session += 1;
                    let session = self.next_session;
                    let (why, how, provider_session, mode) = match other {
                        Sim::Suspended {
                            provider_session,
                            why,
                            ..
                        } => (
                            OpenReason::After(why),
                            SessionStart::Resumed {
                                provider_session: provider_session.clone(),
                                checkpoint: Seq(sim.checkpoint),
                            },
                            provider_session,
                            DeliveryMode::Delta,
                        ),
                        Sim::Closed { why } => (
                            OpenReason::After(why),
                            SessionStart::Bootstrapped {
                                up_to: Seq(user_seq),
                            },
                            format!("scripted-{agent}-{session}"),
                            DeliveryMode::Bootstrap,
                        ),
                        _ => (
                            OpenReason::FirstUse,
                            SessionStart::Bootstrapped {
                                up_to: Seq(user_seq),
                            },
                            format!("scripted-{agent}-{session}"),
                            DeliveryMode::Bootstrap,
                        ),
                    };
                    let at = ts(self.next_seq);
                    self.push(Event::SessionOpened(SessionOpened {
                        conversation: conversation.clone(),
                        agent: agent.clone(),
                        session: session_id(session),
                        at,
                        why,
                        how,
                        prompt_hash: PROMPT_HASH.into(),
                    }));
                    (session, provider_session, mode)
                }
            };
            let at = ts(self.next_seq);
            let messages = self.rng.gen_range(1..12);
            let estimated_tokens = self.rng.gen_range(40..2_000);
            self.push(Event::ContextDelivered(ContextDelivered {
                conversation: conversation.clone(),
                agent: agent.clone(),
                session: session_id(session),
                at,
                up_to: Seq(user_seq),
                mode,
                messages,
                estimated_tokens,
            }));
            let reply_text = self.body(80, 600);
            let reply_seq = self.next_seq;
            let reply = message_id(reply_seq);
            self.push(Event::MessagePosted(
                Message::text(
                    reply,
                    conversation.clone(),
                    Participant::Agent(agent.clone()),
                    Audience::user(),
                    reply_text,
                    ts(reply_seq),
                )
                .replying_to(request),
            ));
            let input = self.rng.gen_range(200..3_000);
            let at = ts(self.next_seq);
            self.push(Event::TurnCompleted(TurnCompleted {
                conversation,
                agent,
                session: session_id(session),
                at,
                usage: TokenUsage {
                    input,
                    output: input / 8,
                    ..Default::default()
                },
                provider_session: Some(provider_session.clone()),
                reply: Some(reply),
            }));
            self.sims[c][t] = AgentSim {
                state: Sim::Open {
                    session,
                    provider_session,
                },
                checkpoint: user_seq,
                input: if opened { input } else { sim.input + input },
            };
        }
        // Now and then a session ends: suspended by the idle reaper, or closed by a manual reset.
        let roll = self.rng.gen_range(0..100);
        if roll < 5 {
            let (c, t) = (
                self.rng.gen_range(0..self.conversations.len()),
                self.rng.gen_range(0..AGENTS.len()),
            );
            let sim = self.sims[c][t].clone();
            if let Sim::Open {
                session,
                provider_session,
            } = sim.state
            {
                let (conversation, agent) = self.session_event_base(c, t);
                let (why, suspend) = if roll < 4 {
                    (BoundaryReason::Idle, true)
                } else {
                    (BoundaryReason::ManualReset, false)
                };
                let ended = SessionEnded {
                    conversation,
                    agent,
                    session: session_id(session),
                    at: ts(self.next_seq),
                    why,
                };
                if suspend {
                    self.push(Event::SessionSuspended(ended));
                    self.sims[c][t].state = Sim::Suspended {
                        session,
                        provider_session,
                        why,
                    };
                } else {
                    self.push(Event::SessionClosed(ended));
                    self.sims[c][t].state = Sim::Closed { why };
                }
            }
        }
    }
}

/// A restart to measure: the agent's pending message and the checkpoint its plan must start from.
#[derive(Clone)]
struct Pending {
    conversation: usize,
    agent: usize,
    new_message: u64,
    checkpoint: u64,
    open: bool,
}

fn specs() -> Vec<AgentSpec> {
    AGENTS
        .iter()
        .enumerate()
        .map(|(i, name)| AgentSpec {
            name: AgentName::new(*name).expect("a valid agent name"),
            role: if i == 0 {
                Role::Orchestrator
            } else {
                Role::Specialist
            },
            description: String::new(),
            prompt: PathBuf::new(),
            provider: "local".into(),
            compaction: legio_core::CompactionPolicy::default(),
            summarizer: None,
            approval: Default::default(),
        })
        .collect()
}

fn build_log(path: &Path, events: usize, conversations: usize) -> (Vec<Pending>, u64) {
    let options = StoreOptions {
        durability: Durability::RELAXED,
        ..StoreOptions::default()
    };
    let log = SledLog::open(path, &options).expect("opening the log");
    let mut generator = Generator {
        rng: StdRng::seed_from_u64(SEED ^ events as u64),
        log: &log,
        conversations: (0..conversations)
            .map(|i| ConversationKey::new(format!("restore:{i}")).expect("a valid key"))
            .collect(),
        agents: AGENTS
            .iter()
            .map(|a| AgentName::new(*a).expect("a valid agent name"))
            .collect(),
        sims: vec![
            std::array::from_fn(|_| AgentSim {
                state: Sim::Never,
                checkpoint: 0,
                input: 0,
            });
            conversations
        ],
        batch: Vec::with_capacity(LOAD_BATCH),
        next_seq: 1,
        next_session: 0,
        words: WORDS.split_whitespace().collect(),
        max_input_tokens: RuntimeSettings::default().max_input_tokens,
    };
    // Leave room for the pending messages so the log ends near `events`.
    let pending_room = conversations * AGENTS.len();
    while (generator.next_seq as usize) < events.saturating_sub(pending_room) {
        generator.round();
    }
    // The messages the restarted actors must answer.
    let mut pending = Vec::new();
    for c in 0..conversations {
        for t in 0..AGENTS.len() {
            let sim = generator.sims[c][t].clone();
            if sim.input > generator.max_input_tokens {
                // Its next turn rotates the session (a bootstrap): not the resume path.
                continue;
            }
            let open = match sim.state {
                Sim::Open { .. } => true,
                Sim::Suspended { .. } => false,
                Sim::Never | Sim::Closed { .. } => continue,
            };
            let text = generator.body(60, 300);
            let seq = generator.next_seq;
            generator.push(Event::MessagePosted(Message::text(
                message_id(seq),
                generator.conversations[c].clone(),
                Participant::User,
                Audience::agent(generator.agents[t].clone()),
                text,
                ts(seq),
            )));
            pending.push(Pending {
                conversation: c,
                agent: t,
                new_message: seq,
                checkpoint: sim.checkpoint,
                open,
            });
        }
    }
    generator.flush();
    log.flush().expect("flushing the log");
    let last = log.last_seq().0;
    log.close().expect("closing the log");
    (pending, last)
}

/// How the log is reopened for measuring: the default options (sync, 256 MiB sled cache), or
/// with the sled cache set by `LEGIO_BENCH_RESTORE_CACHE_MB`.
fn measure_options() -> StoreOptions {
    let mut options = StoreOptions::default();
    if let Ok(mb) = std::env::var(CACHE_VAR) {
        let mb: u64 = mb
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{CACHE_VAR} must be a whole number of MiB, got {mb:?}"));
        options.cache_capacity_bytes = mb * 1024 * 1024;
    }
    options
}

/// One restore: exactly what a restarted actor does before its first turn.
fn restore(
    log: &dyn EventLog,
    specs: &[AgentSpec],
    keys: &[ConversationKey],
    settings: &RuntimeSettings,
    p: &Pending,
) -> (Duration, usize) {
    let spec = &specs[p.agent];
    let t0 = Instant::now();
    let prepared = prepare_turn(
        log,
        TurnInputs {
            spec,
            conversation: &keys[p.conversation],
            history: History::Session { resumable: true },
            settings,
            prompt_hash: PROMPT_HASH,
            live_session: None,
            new_message: Seq(p.new_message),
        },
    )
    .expect("prepare_turn");
    let elapsed = t0.elapsed();
    assert_eq!(
        prepared.decision.delivery,
        Delivery::Delta {
            checkpoint: Seq(p.checkpoint)
        },
        "a restored session resumes from its checkpoint"
    );
    assert_eq!(prepared.plan.new_message.seq, Seq(p.new_message));
    (elapsed, prepared.plan.history.len())
}

/// The same restore without the session index: fold every event of the conversation.
fn restore_by_folding(
    log: &dyn EventLog,
    specs: &[AgentSpec],
    keys: &[ConversationKey],
    settings: &RuntimeSettings,
    p: &Pending,
) -> Duration {
    let spec = &specs[p.agent];
    let key = &keys[p.conversation];
    let t0 = Instant::now();
    let mut state = AgentSessionState::new(key.clone(), spec.name.clone());
    for r in log
        .conversation_events(key, Seq::ZERO, usize::MAX)
        .expect("reading the conversation")
    {
        state.apply(r.seq, &r.event);
    }
    let checkpoint = state
        .current
        .as_ref()
        .map(|c| c.checkpoint)
        .expect("a session");
    let new = log
        .read_range(Seq(p.new_message), Seq(p.new_message), 1)
        .expect("the new message")
        .remove(0);
    let visible = log
        .visible_after(key, spec.viewer(), checkpoint, MAX_DELTA)
        .expect("the delta");
    let plan = plan_context(
        &spec.name,
        &Delivery::Delta { checkpoint },
        &visible,
        &new,
        settings.history_window,
    );
    let elapsed = t0.elapsed();
    assert_eq!(checkpoint, Seq(p.checkpoint));
    assert_eq!(plan.new_message.seq, Seq(p.new_message));
    elapsed
}

fn measure_size(events: usize, conversations: usize, warm_samples: usize) -> SizeResult {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let path = dir.path().join("log");
    let t0 = Instant::now();
    let (pending, last) = build_log(&path, events, conversations);
    let build = t0.elapsed();
    println!(
        "  built {} events in {:.1} s ({} restart pairs); measuring",
        fmt_int(last),
        build.as_secs_f64(),
        pending.len()
    );
    // Reopened in sync mode: nothing is written while measuring, and sync mode runs no
    // background flusher thread that could compete for the two cores.
    let log = SledLog::open(&path, &measure_options()).expect("reopening the log");
    let disk_bytes = log.size_on_disk().unwrap_or(0);
    let specs = specs();
    let keys: Vec<ConversationKey> = (0..conversations)
        .map(|i| ConversationKey::new(format!("restore:{i}")).expect("a valid key"))
        .collect();
    let settings = RuntimeSettings::default();
    let mut rng = StdRng::seed_from_u64(SEED ^ 0xface ^ events as u64);

    // First touch after reopening: every pair once, in random order.
    let mut order = pending.clone();
    order.shuffle(&mut rng);
    let mut first_touch: Vec<u64> = order
        .iter()
        .map(|p| restore(&log, &specs, &keys, &settings, p).0.as_nanos() as u64)
        .collect();
    first_touch.sort_unstable();

    // Warm: random pairs.
    let (mut warm, mut delta_total, mut max_delta) = (Vec::with_capacity(warm_samples), 0, 0);
    for _ in 0..warm_samples {
        let p = &pending[rng.gen_range(0..pending.len())];
        let (d, delta) = restore(&log, &specs, &keys, &settings, p);
        warm.push(d.as_nanos() as u64);
        delta_total += delta;
        max_delta = max_delta.max(delta);
    }
    warm.sort_unstable();

    let mut fold: Vec<u64> = (0..FOLD_SAMPLES.min(pending.len() * 2))
        .map(|_| {
            let p = &pending[rng.gen_range(0..pending.len())];
            restore_by_folding(&log, &specs, &keys, &settings, p).as_nanos() as u64
        })
        .collect();
    fold.sort_unstable();

    SizeResult {
        events: last,
        conversations,
        build,
        disk_bytes,
        pairs: pending.len(),
        open_pairs: pending.iter().filter(|p| p.open).count(),
        first_touch,
        warm,
        fold,
        mean_delta: delta_total as f64 / warm_samples.max(1) as f64,
        max_delta,
    }
}

/// An end-to-end restart through a real runtime on a durable log.
struct EndToEnd {
    conversations: usize,
    /// Sorted nanoseconds: a post to an agent whose actor is live.
    steady: Vec<u64>,
    /// Sorted nanoseconds: the first post to each agent after abort and reopen.
    first_after_restart: Vec<u64>,
    reopen: Duration,
    resumed: usize,
}

/// One post to each agent of each conversation, in turn; the sorted latencies.
async fn post_all(runtime: &Runtime, conversations: usize) -> Vec<u64> {
    let texts = ["what changed today?", "@a check this", "@b plan this"];
    let mut latencies = Vec::new();
    for c in 0..conversations {
        for text in texts {
            let t0 = Instant::now();
            let replies = runtime
                .post(&format!("restart:{c}"), text)
                .await
                .expect("a post");
            latencies.push(t0.elapsed().as_nanos() as u64);
            assert!(replies.iter().all(|r| r.error().is_none()), "{replies:?}");
        }
    }
    latencies.sort_unstable();
    latencies
}

async fn end_to_end(conversations: usize) -> EndToEnd {
    let dir = tempfile::tempdir().expect("a temporary folder");
    for name in AGENTS {
        std::fs::write(
            dir.path().join(format!("{name}.md")),
            format!("You are {name}."),
        )
        .expect("writing a prompt");
    }
    let text = r#"
[store]
path = "db"
[runtime]
session_idle_timeout_minutes = 1000000.0
[agents.lead]
role = "orchestrator"
description = "leads"
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
    let file = dir.path().join("legio.toml");
    std::fs::write(&file, text).expect("writing the configuration");
    let mut config = RuntimeConfig::parse(text, &file).expect("a valid configuration");
    config.store.path = dir.path().join("db");
    config.store.options.durability = Durability::Sync;
    // One provider for both processes, as a provider's server would keep its sessions.
    let provider = ScriptedProvider::new(ScriptedConfig::new(History::Session { resumable: true }));
    let overrides = || {
        let p: Arc<dyn Provider> = Arc::new(provider.clone());
        HashMap::from([("local".to_owned(), p)])
    };
    let runtime = Runtime::builder(config.clone())
        .providers(overrides())
        .open()
        .await
        .expect("opening the runtime");
    let _first_use = post_all(&runtime, conversations).await;
    let steady = post_all(&runtime, conversations).await;
    runtime.abort().await;
    let before = provider.requests().len();
    let t0 = Instant::now();
    let runtime = Runtime::builder(config)
        .providers(overrides())
        .open()
        .await
        .expect("reopening the runtime");
    let reopen = t0.elapsed();
    let first_after_restart = post_all(&runtime, conversations).await;
    let resumed = provider.requests()[before..]
        .iter()
        .filter(|r| r.resumed.is_some() && r.plan.mode == DeliveryMode::Delta)
        .count();
    runtime.shutdown().await.expect("a clean shutdown");
    EndToEnd {
        conversations,
        steady,
        first_after_restart,
        reopen,
        resumed,
    }
}

fn report(results: &[SizeResult], e2e: &EndToEnd) {
    println!();
    println!(
        "Restore latency (prepare_turn after an actor restart: state, decision, reads, plan):"
    );
    let mut rows = Vec::new();
    for r in results {
        rows.push(vec![
            fmt_int(r.events),
            fmt_int(r.conversations as u64),
            format!("{:.0} MB", r.disk_bytes as f64 / 1e6),
            format!("{} ({} open)", r.pairs, r.open_pairs),
            fmt_dur(percentile(&r.first_touch, 0.50)),
            fmt_dur(percentile(&r.first_touch, 0.99)),
            fmt_dur(percentile(&r.warm, 0.50)),
            fmt_dur(percentile(&r.warm, 0.99)),
            format!("{:.1} / {}", r.mean_delta, r.max_delta),
            fmt_dur(percentile(&r.fold, 0.50)),
            fmt_dur(percentile(&r.fold, 0.99)),
        ]);
    }
    print_table(
        &[
            "events",
            "convs",
            "on disk",
            "pairs",
            "first p50",
            "first p99",
            "warm p50",
            "warm p99",
            "delta mean/max",
            "fold p50",
            "fold p99",
        ],
        &rows,
    );
    println!(
        "  first = each restart pair once right after reopening the log (sled cache empty, {} MiB);",
        measure_options().cache_capacity_bytes / (1024 * 1024)
    );
    println!(
        "  warm  = {} random pairs afterwards; delta = history messages in the plan;",
        fmt_int(results.first().map_or(0, |r| r.warm.len() as u64))
    );
    println!("  fold  = context only: the same restore replaying every event of the conversation");
    println!("          instead of reading the session index.");
    for r in results {
        println!(
            "  {} events: built in {:.1} s",
            fmt_int(r.events),
            r.build.as_secs_f64()
        );
    }

    println!();
    println!(
        "End to end through a Runtime, durable log, {} conversations × 3 agents, one client \
         (context, not a goal):",
        e2e.conversations
    );
    print_table(
        &["post", "count", "p50", "p99", "max"],
        &[
            vec![
                "actor live, session open (2 fsyncs)".into(),
                e2e.steady.len().to_string(),
                fmt_dur(percentile(&e2e.steady, 0.50)),
                fmt_dur(percentile(&e2e.steady, 0.99)),
                fmt_dur(percentile(&e2e.steady, 1.0)),
            ],
            vec![
                "first after abort + reopen (4 fsyncs)".into(),
                e2e.first_after_restart.len().to_string(),
                fmt_dur(percentile(&e2e.first_after_restart, 0.50)),
                fmt_dur(percentile(&e2e.first_after_restart, 0.99)),
                fmt_dur(percentile(&e2e.first_after_restart, 1.0)),
            ],
        ],
    );
    println!(
        "  reopen (RuntimeBuilder::open) took {}; {} of {} first turns resumed the provider session \
         with a delta.",
        fmt_dur(e2e.reopen),
        e2e.resumed,
        e2e.first_after_restart.len()
    );
    println!("  The first post after a restart also spawns the actor and makes two more durable");
    println!(
        "  appends than a steady one: SessionSuspended(crashed) in the actor's pre_start, then"
    );
    println!("  SessionOpened(resumed) before the provider call.");

    let (Some(small), Some(large)) = (results.first(), results.last()) else {
        return;
    };
    let p99 = |r: &SizeResult| percentile(&r.warm, 0.99);
    let p99_first = |r: &SizeResult| percentile(&r.first_touch, 0.99);
    let ratio = p99(large).as_secs_f64() / p99(small).as_secs_f64().max(1e-12);
    let ratio_first = p99_first(large).as_secs_f64() / p99_first(small).as_secs_f64().max(1e-12);
    println!();
    println!(
        "Ratio {} / {} events: warm p99 {ratio:.2}x, first-touch p99 {ratio_first:.2}x",
        fmt_int(large.events),
        fmt_int(small.events)
    );
    println!();
    println!("Goals:");
    let mut goals = Vec::new();
    for r in results {
        goals.push((
            format!(
                "warm p99 < {} at {} events",
                fmt_dur(GOAL_P99),
                fmt_int(r.events)
            ),
            fmt_dur(p99(r)),
            p99(r) < GOAL_P99,
        ));
    }
    for r in results {
        goals.push((
            format!(
                "first-touch p99 < {} at {} events",
                fmt_dur(GOAL_P99),
                fmt_int(r.events)
            ),
            fmt_dur(p99_first(r)),
            p99_first(r) < GOAL_P99,
        ));
    }
    goals.push((
        format!(
            "flat: warm p99 {} within {GOAL_FLAT}x of {}",
            fmt_int(large.events),
            fmt_int(small.events)
        ),
        format!("{ratio:.2}x"),
        ratio <= GOAL_FLAT,
    ));
    goals.push((
        format!(
            "flat: first-touch p99 {} within {GOAL_FLAT}x of {}",
            fmt_int(large.events),
            fmt_int(small.events)
        ),
        format!("{ratio_first:.2}x"),
        ratio_first <= GOAL_FLAT,
    ));
    print_goals(&goals);
}

const WORDS: &str = "the build failed again on the staging cluster after the config change and \
    we need to know whether the migration touched the orders table or only the index so please \
    check the logs from last night compare them with the deploy at noon and tell me which service \
    restarted first the latency budget is tight this week because the payment provider is slow \
    and customers are waiting for refunds review the patch plan the rollout write the summary \
    for the team include numbers where you have them and flag anything that looks risky";
