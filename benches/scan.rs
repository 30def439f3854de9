//! Full-log decode scan: events/s of reading a whole `SledLog` of 1M events (× scale) in log order
//! with `read_range` in chunks of 10,000, against decoding the same events' bytes from memory with
//! `decode_event` (the pure codec cost), measured in the same run.
//! Run: `cargo bench --bench scan` (`LEGIO_BENCH_SCALE=0.01` for a quick smoke run).
//!
//! The table comes from whole passes timed with `Instant`: the first pass right after reopening the
//! log, then two warm passes (their mean). A pass over the whole log takes seconds, so criterion's
//! repeated sampling does not fit (and would not fit in the time budget).

use legio_tests::bench::*;
use std::hint::black_box;
use std::time::{Duration, Instant};

use legio_core::Seq;
use legio_store::{decode_event, encode_event, Durability, EventLog, SledLog, StoreOptions};
use legio_tests::TrafficGen;

/// Events in the log at scale 1.
const EVENTS: f64 = 1_000_000.0;
const SEED: u64 = 0x5eed_0004;
const AGENTS: usize = 20;
const CONVERSATIONS: usize = 10;
const BODY_BYTES: usize = 200;
/// Events per `read_range` call.
const CHUNK: usize = 10_000;
/// Warm passes of each kind (their mean rate is reported).
const PASSES: usize = 2;
const GOAL_EVENTS_PER_SEC: f64 = 1_000_000.0;

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("scan: benchmark only; run it with `cargo bench --bench scan`");
        return;
    }
    let scale = scale();
    let events = ((EVENTS * scale).round() as u64).max(1);
    println!(
        "scan: a log of {} events ({AGENTS} agents, {CONVERSATIONS} conversations, {BODY_BYTES}-byte \
         bodies), read_range chunks of {} (LEGIO_BENCH_SCALE={scale})",
        fmt_int(events),
        fmt_int(CHUNK as u64)
    );

    // ---- build the log, keeping every event's encoded bytes in memory ----
    let dir = tempfile::tempdir().expect("a temporary folder");
    let path = dir.path().join("log");
    let started = Instant::now();
    let options = StoreOptions {
        durability: Durability::RELAXED,
        ..StoreOptions::default()
    };
    let log = SledLog::open(&path, &options).expect("opening the log");
    let load_batch = load_batch();
    let mut gen = TrafficGen::new(SEED, AGENTS, CONVERSATIONS, 5, BODY_BYTES);
    let mut encoded: Vec<Vec<u8>> = Vec::with_capacity(events as usize);
    load(
        &log,
        events,
        load_batch,
        || gen.next_message(),
        |event| {
            encoded.push(encode_event(event).expect("encode"));
        },
    );
    let built = started.elapsed();
    let bytes: usize = encoded.iter().map(Vec::len).sum();
    println!(
        "  built in {} (relaxed, {load_batch}-event appends), {:.0} MB on disk, {:.0} MB of records \
         (mean {:.0} bytes)",
        fmt_dur(built),
        log.size_on_disk().expect("size") as f64 / 1e6,
        bytes as f64 / 1e6,
        bytes as f64 / events as f64
    );
    drop(log);

    // ---- legio: the first pass after reopening, then warm passes ----
    let log = SledLog::open(&path, &StoreOptions::default()).expect("reopening the log");
    let last = log.last_seq();
    assert_eq!(last.get(), events);
    let first = scan_log(&log, last);
    let legio_warm = (0..PASSES).map(|_| scan_log(&log, last)).sum::<Duration>() / PASSES as u32;

    // ---- baseline: decode the same bytes from memory ----
    let codec_mean = (0..PASSES).map(|_| decode_all(&encoded)).sum::<Duration>() / PASSES as u32;

    let rate = |d: Duration| events as f64 / d.as_secs_f64();
    let codec_rate = rate(codec_mean);
    let row = |name: String, d: Duration| {
        vec![
            name,
            fmt_int(events),
            fmt_dur(d),
            fmt_int(rate(d).round() as u64),
            format!("{:.0}", bytes as f64 / 1e6 / d.as_secs_f64()),
            format!("{:.0}%", 100.0 * rate(d) / codec_rate),
        ]
    };
    println!();
    println!("Full-log scan in log order:");
    print_table(
        &[
            "scan",
            "events",
            "time",
            "events/s",
            "record MB/s",
            "vs codec",
        ],
        &[
            row(
                "legio read_range, first pass after reopen".to_owned(),
                first,
            ),
            row(
                format!("legio read_range, warm (mean of {PASSES})"),
                legio_warm,
            ),
            row(
                format!("decode_event from memory (mean of {PASSES})"),
                codec_mean,
            ),
        ],
    );
    println!();
    println!(
        "  legio: read_range(from, last, {}) repeatedly, from seq 1 to the end; every",
        fmt_int(CHUNK as u64)
    );
    println!("         event decoded into a Record (sled range scan + decode_event).");
    println!(
        "  baseline: decode_event over a Vec<Vec<u8>> of the same events' encode_event bytes;"
    );
    println!("         the pure codec cost, no storage.");
    println!("  The OS page cache is warm (the log was just written).");

    println!();
    println!("Goals:");
    let warm_rate = rate(legio_warm);
    print_goals(&[(
        format!(
            "legio scan >= {} events/s (warm passes)",
            fmt_int(GOAL_EVENTS_PER_SEC as u64)
        ),
        fmt_int(warm_rate.round() as u64),
        warm_rate >= GOAL_EVENTS_PER_SEC,
    )]);
    let first_rate = rate(first);
    println!(
        "  (first pass after reopen: {} events/s, {})",
        fmt_int(first_rate.round() as u64),
        if first_rate >= GOAL_EVENTS_PER_SEC {
            "also >= the goal"
        } else {
            "below the goal"
        }
    );
}

/// Reads the whole log in chunks; returns the time taken.
fn scan_log(log: &SledLog, last: Seq) -> Duration {
    let started = Instant::now();
    let mut from = Seq(1);
    let mut count = 0u64;
    while from <= last {
        let records = log.read_range(from, last, CHUNK).expect("read_range");
        let Some(tail) = records.last() else { break };
        from = tail.seq.next();
        count += records.len() as u64;
        black_box(records);
    }
    let elapsed = started.elapsed();
    assert_eq!(count, last.get(), "the scan read every event");
    elapsed
}

/// Decodes every record from memory; returns the time taken.
fn decode_all(encoded: &[Vec<u8>]) -> Duration {
    let started = Instant::now();
    for (i, bytes) in encoded.iter().enumerate() {
        black_box(decode_event(Seq(i as u64 + 1), bytes).expect("decode"));
    }
    started.elapsed()
}
