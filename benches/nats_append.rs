//! Durable append rate and p99 ack latency on NATS JetStream (`NatsLog`, replicas 1 on one
//! server and replicas 3 on three), against `SledLog` (sync) on the same machine, in one run.
//! Run: `cargo bench --bench nats_append` (`LEGIO_BENCH_SCALE=0.3` for a shorter run). Needs
//! nats-server (scripts/install-nats-server.sh or LEGIO_NATS_SERVER); the servers are started by
//! the bench on loopback ports, as in the tests.
//!
//! Every writer is an OS thread appending one 300-byte message per call in a loop, for a fixed
//! time (3 s × scale, at least 0.5 s). Two traffic shapes at 64 writers:
//! - "own conversation": each writer appends to a conversation of its own, so every append is a
//!   single-message publish and nothing can be grouped;
//! - "shared (8 conv.)": the 64 writers share 8 conversations, so appends that queue behind one in
//!   flight leave together as one atomic batch (the log's grouping).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use legio_core::{Audience, Event, Message};
use legio_store::{EventLog, NatsLog, SledLog, StoreOptions};
use legio_tests::bench::*;
use legio_tests::nats::NatsCluster;
use legio_tests::{agent, conv, message_id, ts};

const WRITERS: usize = 64;
const BODY_BYTES: usize = 300;
/// Goal: JetStream replicas 3, 64 writers, events per second (issue 12).
const GOAL_R3_EVENTS_PER_SEC: f64 = 20_000.0;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Shape {
    OwnConversation,
    Shared,
}

impl Shape {
    fn label(self) -> &'static str {
        match self {
            Shape::OwnConversation => "own conversation",
            Shape::Shared => "shared (8 conv.)",
        }
    }

    fn conversation(self, writer: usize) -> String {
        match self {
            Shape::OwnConversation => format!("bench:{writer}"),
            Shape::Shared => format!("bench:{}", writer % 8),
        }
    }
}

struct RunResult {
    elapsed: Duration,
    latencies: Vec<u64>,
}

impl RunResult {
    fn events_per_sec(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64()
    }
}

fn event(writer: usize, n: u64, conversation: &str) -> Event {
    let body = "x".repeat(BODY_BYTES);
    Event::MessagePosted(Message::text(
        message_id(writer as u64 * 10_000_000 + n),
        conv(conversation),
        legio_core::Participant::Agent(agent("lead")),
        Audience::All,
        body,
        ts(n),
    ))
}

fn run(log: &dyn EventLog, shape: Shape, duration: Duration) -> RunResult {
    let barrier = Barrier::new(WRITERS + 1);
    let stop = AtomicBool::new(false);
    let all = Mutex::new(Vec::new());
    let started = std::thread::scope(|s| {
        for writer in 0..WRITERS {
            let (barrier, stop, all) = (&barrier, &stop, &all);
            s.spawn(move || {
                let conversation = shape.conversation(writer);
                let mut latencies = Vec::new();
                barrier.wait();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let e = event(writer, n, &conversation);
                    let t = Instant::now();
                    log.append(vec![e]).expect("append");
                    latencies.push(t.elapsed().as_nanos() as u64);
                }
                all.lock().unwrap().extend(latencies);
            });
        }
        barrier.wait();
        let started = Instant::now();
        std::thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
        started
    });
    let elapsed = started.elapsed();
    let mut latencies = all.into_inner().unwrap();
    latencies.sort_unstable();
    RunResult { elapsed, latencies }
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("nats_append: benchmark only; run it with `cargo bench --bench nats_append`");
        return;
    }
    let scale = scale();
    let duration = Duration::from_secs_f64((3.0 * scale).max(0.5));
    println!(
        "nats_append: {BODY_BYTES}-byte messages, {WRITERS} writers, {:.2} s per configuration",
        duration.as_secs_f64()
    );
    let mut rows = Vec::new();
    let mut measured = Vec::new();
    let mut record = |store: &str, shape: Shape, r: RunResult| {
        println!(
            "  measured {store:<24} {:<18} {:>10} events/s",
            shape.label(),
            fmt_rate(r.events_per_sec())
        );
        measured.push((store.to_owned(), shape, r.events_per_sec()));
        rows.push((store.to_owned(), shape, r));
    };
    for shape in [Shape::OwnConversation, Shape::Shared] {
        let dir = tempfile::tempdir().unwrap();
        let log = SledLog::open(dir.path().join("db"), &StoreOptions::default()).unwrap();
        record("sled (sync)", shape, run(&log, shape, duration));
    }
    for (servers, replicas) in [(1, 1), (3, 3)] {
        let Some(cluster) = NatsCluster::start(servers) else {
            return;
        };
        for (i, shape) in [Shape::OwnConversation, Shape::Shared]
            .into_iter()
            .enumerate()
        {
            let options = legio_store::NatsOptions {
                stream: format!("bench{i}"),
                ..cluster.options(replicas)
            };
            let log = NatsLog::open(&options).unwrap();
            let label = format!("JetStream R{replicas}");
            record(&label, shape, run(&log, shape, duration));
        }
    }
    let sled = |shape: Shape| {
        measured
            .iter()
            .find(|(s, sh, _)| s == "sled (sync)" && *sh == shape)
            .map_or(f64::NAN, |(_, _, rate)| *rate)
    };
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|(store, shape, r)| {
            vec![
                store.clone(),
                shape.label().to_owned(),
                fmt_int(r.latencies.len() as u64),
                fmt_rate(r.events_per_sec()),
                fmt_dur(percentile(&r.latencies, 0.50)),
                fmt_dur(percentile(&r.latencies, 0.99)),
                format!("{:.2}x", r.events_per_sec() / sled(*shape)),
            ]
        })
        .collect();
    println!();
    print_table(
        &[
            "store", "traffic", "events", "events/s", "p50 ack", "p99 ack", "vs sled",
        ],
        &table,
    );
    let best_r3 = measured
        .iter()
        .filter(|(s, _, _)| s == "JetStream R3")
        .map(|(_, _, rate)| *rate)
        .fold(0.0, f64::max);
    println!();
    print_goals(&[(
        format!(
            "JetStream R3, {WRITERS} writers, >= {} events/s (best shape)",
            fmt_rate(GOAL_R3_EVENTS_PER_SEC)
        ),
        fmt_rate(best_r3),
        best_r3 >= GOAL_R3_EVENTS_PER_SEC,
    )]);
}
