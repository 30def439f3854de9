//! Turns per second and turn latency (p50, p99) through `Runtime::post` with a zero-latency
//! scripted provider (stateful, resumable), on sled (sync) and on NATS JetStream replicas 1 (one
//! server) and 3 (three servers), in one run. On NATS the runtime is a cluster node: every turn's
//! conversation is owned by lease and every append is fenced. Needs nats-server (see
//! `tests/support/nats.rs`). Run: `cargo bench --bench cluster_turns` (`LEGIO_BENCH_SCALE=0.3`
//! for a shorter run).
//!
//! 16 conversations, one posting task each, post after post (each post waits for its reply), for
//! 3 s × scale per store after a warm-up post per conversation (which takes the leases).
//!
//! It also prints the CPU time per turn over the measured window (Linux, `/proc`): of this
//! process (legio, the provider, the NATS client) and of the store's nats-servers. On a busy
//! 2-core machine the turn rates follow these costs more than the commit latencies.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use legio_runtime::{Runtime, RuntimeConfig};
use legio_tests::bench::*;
use legio_tests::nats::NatsCluster;

const CONVERSATIONS: usize = 16;
/// Goal (issue 12): turns on JetStream at least half of sled's.
const GOAL_RATIO: f64 = 0.5;

fn config(dir: &Path, store: &str) -> RuntimeConfig {
    std::fs::write(dir.join("lead.md"), "You lead.").unwrap();
    let text = format!(
        r#"
[store]
path = "db"
{store}
[runtime]
compaction = false
[agents.lead]
role = "orchestrator"
description = "leads"
prompt = "lead.md"
provider = "local"
[providers.local]
kind = "scripted"
history = "session"
"#
    );
    let file = dir.join("legio.toml");
    std::fs::write(&file, text).unwrap();
    RuntimeConfig::load(&file).unwrap()
}

fn nats_store(cluster: &NatsCluster, replicas: usize) -> String {
    let servers: Vec<String> = cluster.urls().iter().map(|u| format!("\"{u}\"")).collect();
    format!(
        "backend = \"nats\"\n[store.nats]\nservers = [{}]\nstream = \"turns\"\nreplicas = {replicas}\nlease_ttl_seconds = 10\n",
        servers.join(", ")
    )
}

struct Measured {
    elapsed: Duration,
    latencies: Vec<u64>,
    /// CPU seconds over the window: this process, the nats-servers.
    cpu: (f64, f64),
    /// On NATS: where the stream's leader and the clients were ([`NatsCluster::placement`]).
    placement: Option<String>,
}

/// Turns through a runtime on `config` for `duration`; `cluster`: the store's nats-servers.
async fn run(config: RuntimeConfig, duration: Duration, cluster: Option<&NatsCluster>) -> Measured {
    let servers = cluster.map(NatsCluster::pids).unwrap_or_default();
    let servers = &servers[..];
    let runtime = Arc::new(
        Runtime::builder(config)
            .node("bench")
            .open()
            .await
            .expect("open"),
    );
    for c in 0..CONVERSATIONS {
        runtime
            .post(&format!("bench:{c}"), "warm up")
            .await
            .unwrap();
    }
    let placement = cluster.map(|c| c.placement("turns"));
    let stop = Arc::new(AtomicBool::new(false));
    let cpu_before = cpu_of(servers);
    let started = Instant::now();
    let tasks: Vec<_> = (0..CONVERSATIONS)
        .map(|c| {
            let (runtime, stop) = (Arc::clone(&runtime), Arc::clone(&stop));
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let t = Instant::now();
                    let posted = runtime
                        .post(&format!("bench:{c}"), &format!("turn {n}"))
                        .await
                        .expect("post");
                    assert!(posted.iter().all(|r| r.text().is_some()), "{posted:?}");
                    latencies.push(t.elapsed().as_nanos() as u64);
                }
                latencies
            })
        })
        .collect();
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap());
    }
    let elapsed = started.elapsed();
    let cpu_after = cpu_of(servers);
    let cpu = (cpu_after.0 - cpu_before.0, cpu_after.1 - cpu_before.1);
    if let Ok(runtime) = Arc::try_unwrap(runtime) {
        runtime.shutdown().await.unwrap();
    }
    latencies.sort_unstable();
    Measured {
        elapsed,
        latencies,
        cpu,
        placement,
    }
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("cluster_turns: benchmark only; run it with `cargo bench --bench cluster_turns`");
        return;
    }
    let duration = Duration::from_secs_f64((3.0 * scale()).max(0.5));
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "cluster_turns: {CONVERSATIONS} conversations posting, zero-latency scripted provider, {:.2} s per store",
        duration.as_secs_f64()
    );
    let mut rows: Vec<(String, Measured)> = Vec::new();
    let dir = tempfile::tempdir().unwrap();
    let sled = tokio.block_on(run(config(dir.path(), ""), duration, None));
    rows.push(("sled (sync)".into(), sled));
    for (servers, replicas) in [(1, 1), (3, 3)] {
        let Some(cluster) = NatsCluster::start(servers) else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let config = config(dir.path(), &nats_store(&cluster, replicas));
        rows.push((
            format!("JetStream R{replicas}"),
            tokio.block_on(run(config, duration, Some(&cluster))),
        ));
    }
    let rate = |m: &Measured| m.latencies.len() as f64 / m.elapsed.as_secs_f64();
    let per_turn = |cpu: f64, m: &Measured| {
        format!("{:.3} ms", cpu * 1000.0 / m.latencies.len().max(1) as f64)
    };
    let sled_rate = rate(&rows[0].1);
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|(store, m)| {
            vec![
                store.clone(),
                fmt_int(m.latencies.len() as u64),
                fmt_rate(rate(m)),
                fmt_dur(percentile(&m.latencies, 0.50)),
                fmt_dur(percentile(&m.latencies, 0.99)),
                format!("{:.2}x", rate(m) / sled_rate),
                per_turn(m.cpu.0, m),
                per_turn(m.cpu.1, m),
            ]
        })
        .collect();
    println!();
    print_table(
        &[
            "store",
            "turns",
            "turns/s",
            "p50",
            "p99",
            "vs sled",
            "CPU/turn legio",
            "CPU/turn servers",
        ],
        &table,
    );
    for (store, m) in &rows {
        if let Some(placement) = &m.placement {
            println!("  {store}: {placement}");
        }
    }
    println!();
    let goals: Vec<(String, String, bool)> = rows[1..]
        .iter()
        .map(|(store, m)| {
            let ratio = rate(m) / sled_rate;
            (
                format!("{store} turns >= {GOAL_RATIO}x sled's"),
                format!("{ratio:.2}x"),
                ratio >= GOAL_RATIO,
            )
        })
        .collect();
    print_goals(&goals);
}
