//! HTTP turn throughput: turns/s and p99 through `legio serve`'s `POST /sessions/{id}/turns` on
//! loopback (an in-process hyper client via reqwest, 64 concurrent clients, keep-alive), against
//! the same load through the embedding API (`Runtime::post`) in the same run, as a ratio (goal:
//! the HTTP layer costs under 20%). Zero-latency stateful scripted provider, durable (`sync`) log,
//! 200 conversations × 3 agents (× scale), one warm-up turn per (conversation, agent) first.
//! Run: `cargo bench --bench http_turns` (`LEGIO_BENCH_SCALE=0.05` for a quick run).
//!
//! Client and server share the machine's two cores, so the HTTP figure also pays for the client's
//! JSON and socket work; that is the honest cost of a host on the same box.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use legio_runtime::{Runtime, RuntimeConfig};
use legio_server::{install_metrics, Server};
use legio_store::Durability;
use legio_tests::bench::*;

const CONVERSATIONS: f64 = 200.0;
const CLIENTS: usize = 64;
const MEASURE_SECS: f64 = 10.0;
/// Goal: the HTTP path keeps at least this share of the embedding API's throughput.
const GOAL_RATIO: f64 = 0.8;

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("http_turns: benchmark only; run it with `cargo bench --bench http_turns`");
        return;
    }
    let scale = scale();
    let conversations = ((CONVERSATIONS * scale).round() as usize).max(3);
    let duration = Duration::from_secs_f64((MEASURE_SECS * scale).max(1.0));
    println!(
        "http_turns: {conversations} conversations × 3 agents, {CLIENTS} clients, {:.1} s per window (LEGIO_BENCH_SCALE={scale})",
        duration.as_secs_f64()
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    rt.block_on(async move {
        let api = measure(conversations, duration, false).await;
        let http = measure(conversations, duration, true).await;
        let ratio = http.0 / api.0;
        print_table(
            &["path", "turns/s", "p50", "p99", "errors"],
            &[
                vec![
                    "embedding API (Runtime::post)".into(),
                    fmt_rate(api.0),
                    fmt_dur(api.1),
                    fmt_dur(api.2),
                    fmt_int(api.3),
                ],
                vec![
                    "HTTP (POST /sessions/{id}/turns)".into(),
                    fmt_rate(http.0),
                    fmt_dur(http.1),
                    fmt_dur(http.2),
                    fmt_int(http.3),
                ],
            ],
        );
        println!(
            "HTTP / embedding throughput: {:.2} (the HTTP layer costs {:.0}%; goal: under {:.0}%) {}",
            ratio,
            (1.0 - ratio) * 100.0,
            (1.0 - GOAL_RATIO) * 100.0,
            if ratio >= GOAL_RATIO { "ok" } else { "MISSED" }
        );
    });
}

fn legion(dir: &Path) -> RuntimeConfig {
    for name in ["lead", "a", "b"] {
        std::fs::write(dir.join(format!("{name}.md")), format!("You are {name}.")).unwrap();
    }
    let text = r#"
[store]
path = "db"
[runtime]
session_idle_timeout_minutes = 1000000.0
[agents.lead]
role = "orchestrator"
prompt = "lead.md"
provider = "local"
[agents.a]
role = "specialist"
prompt = "a.md"
provider = "local"
[agents.b]
role = "specialist"
prompt = "b.md"
provider = "local"
[providers.local]
kind = "scripted"
history = "session"
"#;
    let file = dir.join("legio.toml");
    std::fs::write(&file, text).unwrap();
    let mut config = RuntimeConfig::parse(text, &file).unwrap();
    config.store.path = dir.join("db");
    config.store.options.durability = Durability::Sync;
    config
}

fn text(kind: u64, n: u64) -> String {
    let body = "please look at the latest numbers from the staging run and tell me whether the error budget still holds";
    match kind % 3 {
        0 => format!("{body} ({n})"),
        1 => format!("@a {body} ({n})"),
        _ => format!("@b {body} ({n})"),
    }
}

/// One window: (turns/s, p50, p99, errors).
async fn measure(
    conversations: usize,
    duration: Duration,
    http: bool,
) -> (f64, Duration, Duration, u64) {
    let dir = tempfile::tempdir().unwrap();
    let config = legion(dir.path());
    let runtime = Runtime::open(config.clone()).await.unwrap();
    enum Target {
        Api(Arc<Runtime>),
        Http(reqwest::Client, String),
    }
    let mut stop = None;
    let mut served = None;
    let target = if http {
        let server = Server::bind(
            runtime,
            legio_server::ServerSettings::from_config(&config).unwrap(),
            Some("127.0.0.1:0".parse().unwrap()),
            install_metrics().unwrap(),
        )
        .await
        .unwrap();
        let base = format!("http://{}", server.local_addr().unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        stop = Some(tx);
        served = Some(tokio::spawn(server.serve(async move {
            let _ = rx.await;
        })));
        Arc::new(Target::Http(
            reqwest::Client::builder()
                .pool_max_idle_per_host(CLIENTS)
                .build()
                .unwrap(),
            base,
        ))
    } else {
        Arc::new(Target::Api(Arc::new(runtime)))
    };
    let post = |target: Arc<Target>, conversation: String, text: String| async move {
        match &*target {
            Target::Api(rt) => rt
                .post(&conversation, &text)
                .await
                .map(|r| r.iter().all(|r| r.error().is_none()))
                .unwrap_or(false),
            Target::Http(client, base) => client
                .post(format!("{base}/sessions/{conversation}/turns"))
                .json(&serde_json::json!({"content": text}))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success()),
        }
    };
    // Warm-up: every actor exists, every session is open.
    for c in 0..conversations {
        for kind in 0..3 {
            post(Arc::clone(&target), format!("bench:{c}"), text(kind, 0)).await;
        }
    }
    let running = Arc::new(AtomicBool::new(true));
    let turns = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        let (target, running, turns, errors) = (
            Arc::clone(&target),
            Arc::clone(&running),
            Arc::clone(&turns),
            Arc::clone(&errors),
        );
        clients.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut n = client as u64 * 7919;
            while running.load(Ordering::Relaxed) {
                n += 1;
                let conversation =
                    format!("bench:{}", (n * 2_654_435_761) as usize % conversations);
                let t = Instant::now();
                let ok = post(Arc::clone(&target), conversation, text(n, n)).await;
                latencies.push(t.elapsed().as_nanos() as u64);
                if ok {
                    turns.fetch_add(1, Ordering::Relaxed);
                } else {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            latencies
        }));
    }
    tokio::time::sleep(duration).await;
    running.store(false, Ordering::Relaxed);
    let mut latencies = Vec::new();
    for client in clients {
        latencies.extend(client.await.unwrap());
    }
    let elapsed = started.elapsed();
    latencies.sort_unstable();
    let result = (
        turns.load(Ordering::Relaxed) as f64 / elapsed.as_secs_f64(),
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        errors.load(Ordering::Relaxed),
    );
    match Arc::try_unwrap(target) {
        Ok(Target::Api(rt)) => {
            if let Ok(rt) = Arc::try_unwrap(rt) {
                rt.shutdown().await.unwrap();
            }
        }
        _ => {
            if let Some(stop) = stop {
                let _ = stop.send(());
            }
            if let Some(served) = served {
                let _ = served.await;
            }
        }
    }
    result
}
