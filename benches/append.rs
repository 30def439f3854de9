//! Durable append throughput and p99 ack latency of `SledLog` (300-byte messages, 1/16/64 writer
//! threads), against SQLite (WAL, `synchronous=FULL`, one row per transaction) and against
//! `SledLog` in relaxed mode (no flush per append), all measured in the same run. A last row,
//! the **hand-off floor**, stores nothing: the same writer threads hand each message to one thread
//! that takes every waiting message as a group and acknowledges each through the same kind of
//! channel and oneshot `SledLog` uses. It is what the write path's threads alone cost on this
//! machine: a goal above it needs a cheaper hand-off, not a faster store.
//! Run: `cargo bench --bench append` (`LEGIO_BENCH_SCALE=0.01` for a quick smoke run).
//!
//! Each configuration gets a fresh database in a temporary folder and runs for a fixed time
//! (3 s × scale, at least 0.3 s). Every writer is an OS thread appending one message per call in a
//! loop; every ack latency is recorded, and the table reports p50/p99 over all of them. This is a
//! concurrent-throughput measurement, so it uses a timed loop rather than criterion.

use legio_tests::bench::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Barrier, Mutex};
use std::time::{Duration, Instant};

use legio_core::{Audience, Event, Message};
use legio_store::{Durability, EventLog, SledLog, StoreOptions};
use legio_tests::{message_id, TrafficGen};
use rusqlite::{params, Connection, TransactionBehavior};

/// Writer counts measured for every store.
const WRITERS: [usize; 3] = [1, 16, 64];
/// Message body size in bytes.
const BODY_BYTES: usize = 300;
/// The writer count the goals are judged at.
const GOAL_WRITERS: usize = 64;
/// Goal: durable events per second with 64 writers.
const GOAL_EVENTS_PER_SEC: f64 = 50_000.0;
/// Goal: legio durable / SQLite, with 64 writers.
const GOAL_VS_SQLITE: f64 = 40.0;
/// Goal: p99 ack latency with 64 writers.
const GOAL_P99: Duration = Duration::from_millis(2);
/// Goal: durable throughput as a fraction of no-flush throughput, with 64 writers.
const GOAL_DURABLE_FRACTION: f64 = 0.60;

const SQLITE_SCHEMA: &str = "
CREATE TABLE nuntii (id TEXT PRIMARY KEY, sender TEXT NOT NULL, text TEXT NOT NULL, audience TEXT NOT NULL, timestamp TEXT NOT NULL, reply_to TEXT, FOREIGN KEY (reply_to) REFERENCES nuntii(id));
CREATE INDEX idx_nuntii_timestamp ON nuntii(timestamp);
CREATE INDEX idx_nuntii_sender ON nuntii(sender);
";

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("append: benchmark only; run it with `cargo bench --bench append`");
        return;
    }
    let scale = scale();
    let duration = Duration::from_secs_f64((3.0 * scale).max(0.3));
    println!(
        "append: {BODY_BYTES}-byte messages, {:.2} s per configuration (LEGIO_BENCH_SCALE={scale})",
        duration.as_secs_f64()
    );

    let mut results: Vec<(Store, usize, RunResult)> = Vec::new();
    for store in [
        Store::LegioSync,
        Store::LegioRelaxed,
        Store::Sqlite,
        Store::SqliteShared,
        Store::HandOff,
    ] {
        for writers in WRITERS {
            let result = run_store(store, writers, duration);
            println!(
                "  measured {:<34} writers={writers:<3} {:>12} events/s",
                store.label(),
                fmt_rate(result.events_per_sec())
            );
            results.push((store, writers, result));
        }
    }
    let find = |store: Store, writers: usize| {
        results
            .iter()
            .find(|(s, w, _)| *s == store && *w == writers)
            .map(|(_, _, r)| r)
            .expect("every configuration was measured")
    };

    println!();
    println!("Durable append, {BODY_BYTES}-byte messages, one message per append call:");
    let mut rows = Vec::new();
    for (store, writers, r) in &results {
        let sqlite = find(Store::Sqlite, *writers).events_per_sec();
        let shared = find(Store::SqliteShared, *writers).events_per_sec();
        let relaxed = find(Store::LegioRelaxed, *writers).events_per_sec();
        rows.push(vec![
            store.label().to_owned(),
            writers.to_string(),
            fmt_int(r.latencies.len() as u64),
            fmt_rate(r.events_per_sec()),
            fmt_dur(r.percentile(0.50)),
            fmt_dur(r.percentile(0.99)),
            fmt_dur(r.max()),
            format!("{:.1}x", r.events_per_sec() / sqlite),
            format!("{:.1}x", r.events_per_sec() / shared),
            format!("{:.0}%", 100.0 * r.events_per_sec() / relaxed),
        ]);
    }
    print_table(
        &[
            "store",
            "writers",
            "events",
            "events/s",
            "p50 ack",
            "p99 ack",
            "max ack",
            "vs SQLite",
            "vs SQLite 1 conn",
            "vs no-flush",
        ],
        &rows,
    );
    println!();
    println!("  legio sync    = SledLog, StoreOptions::default() (Durability::Sync: group commit,");
    println!("                  sled flush + fdatasync before every ack)");
    println!(
        "  legio relaxed = the no-flush baseline: SledLog with Durability::RELAXED (acked once"
    );
    println!(
        "                  applied, sled flushes every 500 ms). A raw sled::Db is not measured:"
    );
    println!("                  only legio-store may depend on sled.");
    println!(
        "  SQLite        = rusqlite (bundled), WAL, synchronous=FULL, the seed's nuntii schema,"
    );
    println!("                  one connection per writer, busy_timeout 60 s, one INSERT per");
    println!("                  BEGIN IMMEDIATE transaction (the goal's baseline)");
    println!(
        "  SQLite, one shared connection = same, but all writers share one connection behind a"
    );
    println!("                  Mutex (no busy-wait backoff; an extra, stronger baseline)");
    println!(
        "  hand-off floor = nothing stored: each writer sends its message to one thread over a"
    );
    println!(
        "                  std channel and waits on a tokio oneshot, as SledLog's writers do; that"
    );
    println!(
        "                  thread takes every waiting message as one group and acknowledges each"
    );

    let sync = find(Store::LegioSync, GOAL_WRITERS);
    let relaxed = find(Store::LegioRelaxed, GOAL_WRITERS);
    let sqlite = find(Store::Sqlite, GOAL_WRITERS);
    let rate = sync.events_per_sec();
    let vs_sqlite = rate / sqlite.events_per_sec();
    let p99 = sync.percentile(0.99);
    let fraction = rate / relaxed.events_per_sec();
    println!();
    println!("Goals, at {GOAL_WRITERS} writers:");
    let goals = [
        (
            format!("durable events/s >= {}", fmt_rate(GOAL_EVENTS_PER_SEC)),
            fmt_rate(rate),
            rate >= GOAL_EVENTS_PER_SEC,
        ),
        (
            format!("durable >= {GOAL_VS_SQLITE:.0}x SQLite"),
            format!("{vs_sqlite:.1}x"),
            vs_sqlite >= GOAL_VS_SQLITE,
        ),
        (
            format!("p99 ack < {}", fmt_dur(GOAL_P99)),
            fmt_dur(p99),
            p99 < GOAL_P99,
        ),
        (
            format!(
                "durable >= {:.0}% of no-flush (durability costs < {:.0}%)",
                GOAL_DURABLE_FRACTION * 100.0,
                (1.0 - GOAL_DURABLE_FRACTION) * 100.0
            ),
            format!("{:.0}%", fraction * 100.0),
            fraction >= GOAL_DURABLE_FRACTION,
        ),
    ];
    print_goals(&goals);
    let shared = find(Store::SqliteShared, GOAL_WRITERS).events_per_sec();
    println!(
        "  (for reference, not a goal: durable vs SQLite with one shared connection: {:.1}x)",
        rate / shared
    );
    let floor = find(Store::HandOff, GOAL_WRITERS);
    println!(
        "  the hand-off floor at {GOAL_WRITERS} writers (nothing stored): {} events/s, {:.1}x SQLite, \
         p99 ack {}; a goal above it needs a cheaper hand-off than the write path's, not a \
         faster store",
        fmt_rate(floor.events_per_sec()),
        floor.events_per_sec() / sqlite.events_per_sec(),
        fmt_dur(floor.percentile(0.99))
    );
    print_disk_floor(duration);
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Store {
    LegioSync,
    LegioRelaxed,
    Sqlite,
    SqliteShared,
    HandOff,
}

impl Store {
    fn label(self) -> &'static str {
        match self {
            Store::LegioSync => "legio sync (durable)",
            Store::LegioRelaxed => "legio relaxed (no-flush baseline)",
            Store::Sqlite => "SQLite WAL synchronous=FULL",
            Store::SqliteShared => "SQLite, one shared connection",
            Store::HandOff => "hand-off floor (nothing stored)",
        }
    }
}

/// What one configuration measured.
struct RunResult {
    elapsed: Duration,
    /// Every ack latency in nanoseconds, sorted.
    latencies: Vec<u64>,
}

impl RunResult {
    fn events_per_sec(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64()
    }

    fn percentile(&self, p: f64) -> Duration {
        percentile(&self.latencies, p)
    }

    fn max(&self) -> Duration {
        Duration::from_nanos(self.latencies.last().copied().unwrap_or(0))
    }
}

/// A unique message number for writer `w`'s `i`-th message.
fn message_number(w: usize, i: u64) -> u64 {
    ((w as u64 + 1) << 32) | i
}

/// Writer `w`'s generator: realistic traffic (16 agents, 4 conversations, 5% broadcasts).
fn traffic(w: usize) -> TrafficGen {
    TrafficGen::new(1000 + w as u64, 16, 4, 5, BODY_BYTES)
}

/// The next message of writer `w`, with a message id unique across writers.
fn next_message(gen: &mut TrafficGen, w: usize, i: u64) -> Message {
    match gen.next_message() {
        Event::MessagePosted(mut m) => {
            m.id = message_id(message_number(w, i));
            m
        }
        other => panic!("TrafficGen produced a non-message event: {other:?}"),
    }
}

fn run_store(store: Store, writers: usize, duration: Duration) -> RunResult {
    let dir = tempfile::tempdir().expect("a temporary folder");
    match store {
        Store::LegioSync | Store::LegioRelaxed => {
            let options = StoreOptions {
                durability: if store == Store::LegioSync {
                    Durability::Sync
                } else {
                    Durability::RELAXED
                },
                ..StoreOptions::default()
            };
            let log = SledLog::open(dir.path().join("log"), &options).expect("opening the log");
            let result = run_writers(writers, duration, |w| {
                let log = &log;
                let mut gen = traffic(w);
                let mut i = 0;
                move || {
                    i += 1;
                    let event = Event::MessagePosted(next_message(&mut gen, w, i));
                    let start = Instant::now();
                    log.append(vec![event]).expect("append");
                    start.elapsed()
                }
            });
            let expected = result.latencies.len() as u64;
            assert_eq!(log.last_seq().get(), expected, "every ack is in the log");
            result
        }
        Store::HandOff => run_hand_off(writers, duration),
        Store::Sqlite | Store::SqliteShared => {
            let path = dir.path().join("seed.db");
            {
                let conn = Connection::open(&path).expect("opening SQLite");
                let mode: String = conn
                    .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
                    .expect("WAL mode");
                assert_eq!(mode, "wal");
                conn.execute_batch(SQLITE_SCHEMA)
                    .expect("the seed's schema");
            }
            let shared = Mutex::new(sqlite_writer(&path));
            let result = run_writers(writers, duration, |w| {
                let mut own = (store == Store::Sqlite).then(|| sqlite_writer(&path));
                let shared = &shared;
                let mut gen = traffic(w);
                let mut i = 0;
                move || {
                    i += 1;
                    let m = next_message(&mut gen, w, i);
                    let row = (
                        m.id.to_string(),
                        m.sender.as_str().to_owned(),
                        m.text_content(),
                        audience_json(&m.audience),
                        m.at.to_rfc3339(),
                    );
                    let start = Instant::now();
                    match own.as_mut() {
                        Some(conn) => sqlite_insert(conn, &row),
                        None => sqlite_insert(&mut shared.lock().expect("not poisoned"), &row),
                    }
                    start.elapsed()
                }
            });
            let conn = Connection::open(&path).expect("opening SQLite");
            let rows: i64 = conn
                .query_row("SELECT count(*) FROM nuntii", [], |r| r.get(0))
                .expect("count");
            assert_eq!(rows as usize, result.latencies.len(), "every ack is a row");
            result
        }
    }
}

/// The hand-off floor: the writers, the channel, the grouping thread and the oneshot acks of
/// `SledLog`'s write path, with nothing encoded, stored or synced.
fn run_hand_off(writers: usize, duration: Duration) -> RunResult {
    type Ack = tokio::sync::oneshot::Sender<u64>;
    let (sender, receiver) = mpsc::channel::<(Message, Ack)>();
    let grouper = std::thread::spawn(move || {
        let mut acked = 0u64;
        while let Ok(first) = receiver.recv() {
            let mut group = vec![first];
            group.extend(receiver.try_iter());
            for (message, ack) in group {
                acked += 1;
                drop(message);
                let _ = ack.send(acked);
            }
        }
        acked
    });
    let result = run_writers(writers, duration, |w| {
        let sender = sender.clone();
        let mut gen = traffic(w);
        let mut i = 0;
        move || {
            i += 1;
            let message = next_message(&mut gen, w, i);
            let start = Instant::now();
            let (ack, acked) = tokio::sync::oneshot::channel();
            sender
                .send((message, ack))
                .expect("the grouping thread runs");
            acked.blocking_recv().expect("acknowledged");
            start.elapsed()
        }
    });
    drop(sender);
    let acked = grouper.join().expect("the grouping thread");
    assert_eq!(
        acked as usize,
        result.latencies.len(),
        "every send was acked"
    );
    result
}

fn sqlite_writer(path: &std::path::Path) -> Connection {
    let conn = Connection::open(path).expect("opening SQLite");
    conn.busy_timeout(Duration::from_secs(60))
        .expect("busy_timeout");
    conn.execute_batch("PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;")
        .expect("pragmas");
    let sync: i64 = conn
        .query_row("PRAGMA synchronous", [], |r| r.get(0))
        .expect("reading synchronous");
    assert_eq!(sync, 2, "synchronous=FULL");
    conn
}

type SqliteRow = (String, String, String, String, String);

/// One row, one transaction: `BEGIN IMMEDIATE` waits (busy_timeout) for the write lock.
fn sqlite_insert(conn: &mut Connection, row: &SqliteRow) {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .expect("BEGIN IMMEDIATE");
    tx.prepare_cached(
        "INSERT INTO nuntii (id, sender, text, audience, timestamp, reply_to) \
         VALUES (?1, ?2, ?3, ?4, ?5, NULL)",
    )
    .expect("prepare")
    .execute(params![row.0, row.1, row.2, row.3, row.4])
    .expect("insert");
    tx.commit().expect("commit");
}

/// The seed's audience column: a JSON array of names, `["all"]` for everyone.
fn audience_json(audience: &Audience) -> String {
    let names: Vec<&str> = match audience {
        Audience::All => vec!["all"],
        Audience::Only(list) => list.iter().map(|p| p.as_str()).collect(),
    };
    serde_json::to_string(&names).expect("names serialise")
}

/// Runs `writers` threads for `duration`; `make(w)` builds writer `w`'s step, which appends one
/// event and returns its ack latency.
fn run_writers<M, S>(writers: usize, duration: Duration, make: M) -> RunResult
where
    M: Fn(usize) -> S + Sync,
    S: FnMut() -> Duration,
{
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(writers + 1);
    let (elapsed, mut latencies) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                let (stop, barrier, make) = (&stop, &barrier, &make);
                s.spawn(move || {
                    let mut step = make(w);
                    let mut latencies = Vec::with_capacity(1 << 16);
                    barrier.wait();
                    while !stop.load(Ordering::Relaxed) {
                        latencies.push(step().as_nanos() as u64);
                    }
                    latencies
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        std::thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
        let mut all = Vec::new();
        for h in handles {
            all.extend(h.join().expect("writer thread"));
        }
        (start.elapsed(), all)
    });
    latencies.sort_unstable();
    RunResult { elapsed, latencies }
}
