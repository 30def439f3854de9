//! Memory after many conversations were touched and reaped: VmRSS of one `Runtime` after 1,000
//! distinct conversations had a turn and were reaped, and again after 100,000 (× scale), in the
//! same process, with the ratio, each also after `malloc_trim` (glibc keeps freed memory
//! resident). Reaping stops the agents and the runtime forgets their status and dispatch tails;
//! the conversation supervisors themselves still stay (issue 16.4 is open on that), so the
//! figures show what one reaped conversation still costs.
//! Run: `cargo bench --bench conversation_memory` (`LEGIO_BENCH_SCALE=0.1` for a quick run).
//!
//! Shape: one orchestrator on a zero-latency stateless scripted provider whose record of requests
//! is cleared before each reading, relaxed durability, sled's cache capped at 8 MiB, 64
//! concurrent clients each posting one message to a new conversation; every 5,000
//! conversations everything idle is reaped (`reap_idle_older_than(0)`), and again before each
//! reading, after which the blocking pool winds down for 3 s.

use legio_tests::bench::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use legio_core::History;
use legio_llm::{Provider, ScriptedConfig, ScriptedProvider};
use legio_runtime::{Runtime, RuntimeConfig};
use legio_store::Durability;

/// Conversations at scale 1.
const CONVERSATIONS: f64 = 100_000.0;
/// The first reading.
const FIRST: usize = 1_000;
/// Conversations between two reaps.
const REAP_EVERY: usize = 5_000;
const CLIENTS: usize = 64;
const CACHE_BYTES: u64 = 8 * 1024 * 1024;

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("conversation_memory: benchmark only; run it with `cargo bench --bench conversation_memory`");
        return;
    }
    let total = ((CONVERSATIONS * scale()) as usize).max(FIRST * 2);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_keep_alive(Duration::from_secs(1))
        .build()
        .expect("a tokio runtime");
    rt.block_on(run(total));
    // Exit without tearing the runtime down: nothing else is measured.
    std::process::exit(0);
}

async fn run(total: usize) {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let config = write_config(dir.path());
    let provider = ScriptedProvider::new(ScriptedConfig::new(History::Stateless));
    let shared: Arc<dyn Provider> = Arc::new(provider.clone());
    let runtime = Arc::new(
        Runtime::builder(config)
            .provider("local", shared)
            .open()
            .await
            .expect("opening the runtime"),
    );
    println!(
        "conversation_memory: {} then {} distinct conversations, one turn each, reaped every {} \
         (LEGIO_BENCH_SCALE={})",
        fmt_int(FIRST as u64),
        fmt_int(total as u64),
        fmt_int(REAP_EVERY as u64),
        scale()
    );
    // Warm every code path (pools, lazy statics, the log's first pages) before the baseline.
    touch(&runtime, 0, 200).await;
    let base = reading(&runtime, &provider).await;
    let t0 = Instant::now();
    touch(&runtime, 200, FIRST).await;
    let first = reading(&runtime, &provider).await;
    touch(&runtime, FIRST, total).await;
    let last = reading(&runtime, &provider).await;
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "  {:<34} {:>12} {:>22}",
        "after", "VmRSS", "VmRSS after malloc_trim"
    );
    for (what, r) in [
        ("warm-up (200 conversations)".to_owned(), base),
        (
            format!("{} conversations reaped", fmt_int(FIRST as u64)),
            first,
        ),
        (
            format!("{} conversations reaped", fmt_int(total as u64)),
            last,
        ),
    ] {
        println!("  {what:<34} {:>12} {:>22}", mib(r.rss), mib(r.trimmed));
    }
    for (name, pick) in [
        ("VmRSS", (|r: Reading| r.rss) as fn(Reading) -> u64),
        ("after malloc_trim", |r: Reading| r.trimmed),
    ] {
        println!(
            "  {name}: ratio {} / {} conversations = {:.2}; growth per conversation {:.0} B \
             (200 -> {}) and {:.0} B ({} -> {})",
            fmt_int(total as u64),
            fmt_int(FIRST as u64),
            pick(last) as f64 / pick(first) as f64,
            per_conversation(pick(base), pick(first), FIRST - 200),
            fmt_int(FIRST as u64),
            per_conversation(pick(first), pick(last), total - FIRST),
            fmt_int(FIRST as u64),
            fmt_int(total as u64),
        );
    }
    println!("  {:.0} conversations/s", (total - 200) as f64 / secs);
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn per_conversation(before: u64, after: u64, n: usize) -> f64 {
    (after as f64 - before as f64) / n as f64
}

/// One turn in each conversation `from..to`, reaping every `REAP_EVERY`.
async fn touch(runtime: &Arc<Runtime>, from: usize, to: usize) {
    let mut start = from;
    while start < to {
        let end = (start + REAP_EVERY).min(to);
        drive(start, end, runtime).await;
        runtime
            .reap_idle_older_than(Duration::ZERO)
            .await
            .expect("a reap");
        start = end;
    }
}

/// VmRSS before and after handing the allocator's free pages back to the system.
#[derive(Clone, Copy)]
struct Reading {
    rss: u64,
    trimmed: u64,
}

/// Reaps every idle agent, clears the provider's record, lets the blocking pool wind down and
/// reads VmRSS; then asks glibc's allocator to return its free
/// pages (`malloc_trim`) and reads it again: memory freed by reaped conversations but kept by
/// the allocator (per-thread arenas) is counted by the first figure only.
async fn reading(runtime: &Arc<Runtime>, provider: &ScriptedProvider) -> Reading {
    runtime
        .reap_idle_older_than(Duration::ZERO)
        .await
        .expect("a reap");
    provider.clear_requests();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss = vm_rss();
    trim_heap();
    Reading {
        rss,
        trimmed: vm_rss(),
    }
}

#[allow(unsafe_code)]
fn trim_heap() {
    // SAFETY: malloc_trim only returns free memory to the system; it takes no pointer.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn vm_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Posts one message to each conversation `from..to` on `CLIENTS` concurrent tasks.
async fn drive(from: usize, to: usize, runtime: &Arc<Runtime>) {
    let next = Arc::new(AtomicUsize::new(from));
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let (next, runtime) = (Arc::clone(&next), Arc::clone(runtime));
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= to {
                    break;
                }
                let posted = runtime
                    .post(
                        format!("touch:{i}").as_str(),
                        "what is the status of the run?",
                    )
                    .await
                    .expect("a post");
                assert!(
                    posted.replies.iter().all(|r| r.outcome.is_ok()),
                    "a turn failed"
                );
            }
        }));
    }
    for t in tasks {
        t.await.expect("a client task");
    }
}

fn write_config(dir: &std::path::Path) -> RuntimeConfig {
    std::fs::write(dir.join("lead.md"), "You answer briefly.").expect("writing a prompt file");
    let text = r#"
[store]
path = "db"
durability = "relaxed"
[runtime]
compaction = false
session_idle_timeout_minutes = 1000000.0
reap_interval_seconds = 1000000.0
[agents.lead]
role = "orchestrator"
description = "answers"
prompt = "lead.md"
provider = "local"
[providers.local]
kind = "scripted"
history = "stateless"
"#;
    let file = dir.join("legio.toml");
    std::fs::write(&file, text).expect("writing the configuration");
    let mut config = RuntimeConfig::parse(text, &file).expect("a valid configuration");
    config.store.path = dir.join("db");
    config.store.options.durability = Durability::RELAXED;
    config.store.options.cache_capacity_bytes = CACHE_BYTES;
    config
}
