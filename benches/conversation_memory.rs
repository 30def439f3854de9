//! Memory after many conversations were touched and reaped: VmRSS of one `Runtime` after 1,000,
//! 10,000 and 100,000 (× scale) distinct conversations had a turn and were reaped, in the same
//! process, with the ratio of the last reading to the middle one (flat: close to 1; the goal is
//! at most 1.5) and the growth per conversation. Reaping stops the agents, the
//! conversation supervisors left with no agent retire, and the runtime forgets their dispatch
//! tails; each reading also says how many supervisors were still running.
//! Run: `cargo bench --bench conversation_memory` (`LEGIO_BENCH_SCALE=0.1` for a quick run:
//! 100, 1,000 and 10,000 conversations).
//!
//! The process allocates with mimalloc, as the `legio` binary does (crates/legio-cli/src/main.rs),
//! so the figures are a server's. (With glibc's allocator, freed memory stays resident: at
//! scale 0.3 raw VmRSS grew 5.9 KB per conversation and 1.5 KB after `malloc_trim`.)
//!
//! Shape: one orchestrator on a zero-latency stateless scripted provider whose record of requests
//! is cleared with every reap, relaxed durability, sled's cache capped at 8 MiB, 64
//! concurrent clients each posting one message to a new conversation; every 5,000
//! conversations everything idle is reaped (`reap_idle_older_than(0)`), and again before each
//! reading, after which the runtime is given up to 10 s for the supervisors to retire and the
//! blocking pool winds down for 3 s.

use legio_tests::bench::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use legio_core::History;
use legio_llm::{Provider, ScriptedConfig, ScriptedProvider};
use legio_runtime::{Runtime, RuntimeConfig};
use legio_store::Durability;

/// The readings at scale 1: after this many conversations.
const READINGS: [f64; 3] = [1_000.0, 10_000.0, 100_000.0];
/// Conversations touched before the baseline (warm-up), at scale 1.
const WARM_UP: f64 = 200.0;
/// Conversations between two reaps.
const REAP_EVERY: usize = 5_000;
const CLIENTS: usize = 64;
const CACHE_BYTES: u64 = 8 * 1024 * 1024;

/// The `legio` binary's allocator, so that the readings are what a server would show.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("conversation_memory: benchmark only; run it with `cargo bench --bench conversation_memory`");
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_keep_alive(Duration::from_secs(1))
        .build()
        .expect("a tokio runtime");
    rt.block_on(run());
    // Exit without tearing the runtime down: nothing else is measured.
    std::process::exit(0);
}

/// The conversation counts of the warm-up and the readings at this scale.
fn counts() -> (usize, [usize; 3]) {
    let warm = ((WARM_UP * scale()) as usize).max(10);
    let mut points = READINGS.map(|n| (n * scale()) as usize);
    points[0] = points[0].max(warm * 2);
    points[1] = points[1].max(points[0] * 2);
    points[2] = points[2].max(points[1] * 2);
    (warm, points)
}

async fn run() {
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
    let (warm, points) = counts();
    println!(
        "conversation_memory: {} / {} / {} distinct conversations, one turn each, reaped every {} \
         (LEGIO_BENCH_SCALE={})",
        fmt_int(points[0] as u64),
        fmt_int(points[1] as u64),
        fmt_int(points[2] as u64),
        fmt_int(REAP_EVERY as u64),
        scale()
    );
    // Warm every code path (pools, lazy statics, the log's first pages) before the baseline.
    touch(&runtime, &provider, 0, warm).await;
    let base = reading(&runtime, &provider).await;
    let t0 = Instant::now();
    let mut readings = Vec::new();
    let mut done = warm;
    for n in points {
        touch(&runtime, &provider, done, n).await;
        readings.push((n, reading(&runtime, &provider).await));
        done = n;
    }
    let secs = t0.elapsed().as_secs_f64();
    println!("  {:<34} {:>12} {:>12}", "after", "VmRSS", "supervisors");
    let rows = std::iter::once((
        format!("warm-up ({} conversations)", fmt_int(warm as u64)),
        base,
    ))
    .chain(
        readings
            .iter()
            .map(|(n, r)| (format!("{} conversations reaped", fmt_int(*n as u64)), *r)),
    );
    for (what, r) in rows {
        println!(
            "  {what:<34} {:>12} {:>12}",
            mib(r.rss),
            fmt_int(r.supervisors as u64)
        );
    }
    let (first, mid, last) = (readings[0], readings[1], readings[2]);
    println!(
        "  VmRSS: ratio {} / {} conversations = {:.2} (goal: at most 1.5); growth per \
         conversation {:.0} B ({} -> {}) and {:.0} B ({} -> {})",
        fmt_int(last.0 as u64),
        fmt_int(mid.0 as u64),
        last.1.rss as f64 / mid.1.rss as f64,
        per_conversation(first.1.rss, mid.1.rss, mid.0 - first.0),
        fmt_int(first.0 as u64),
        fmt_int(mid.0 as u64),
        per_conversation(mid.1.rss, last.1.rss, last.0 - mid.0),
        fmt_int(mid.0 as u64),
        fmt_int(last.0 as u64),
    );
    println!("  {:.0} conversations/s", (points[2] - warm) as f64 / secs);
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn per_conversation(before: u64, after: u64, n: usize) -> f64 {
    (after as f64 - before as f64) / n as f64
}

/// One turn in each conversation `from..to`, reaping every `REAP_EVERY` and clearing the
/// provider's record of requests with each reap (the record is the benchmark's, not the
/// runtime's: left to grow, it would hold every request since the last reading).
async fn touch(runtime: &Arc<Runtime>, provider: &ScriptedProvider, from: usize, to: usize) {
    let mut start = from;
    while start < to {
        let end = (start + REAP_EVERY).min(to);
        drive(start, end, runtime).await;
        runtime
            .reap_idle_older_than(Duration::ZERO)
            .await
            .expect("a reap");
        provider.clear_requests();
        start = end;
    }
}

/// VmRSS and the conversation supervisors still running.
#[derive(Clone, Copy)]
struct Reading {
    rss: u64,
    supervisors: usize,
}

/// Reaps every idle agent, clears the provider's record, gives the supervisors up to 10 s to
/// retire, lets the blocking pool wind down and reads VmRSS.
async fn reading(runtime: &Arc<Runtime>, provider: &ScriptedProvider) -> Reading {
    runtime
        .reap_idle_older_than(Duration::ZERO)
        .await
        .expect("a reap");
    provider.clear_requests();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut supervisors = runtime.live_conversations().await;
    while supervisors > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        supervisors = runtime.live_conversations().await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    Reading {
        rss: vm_rss(),
        supervisors,
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
