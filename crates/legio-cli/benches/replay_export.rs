//! Replay and export of a whole log through the built `legio` binary: wall time of
//! `legio export -o FILE` (JSON lines), `legio replay --format jsonl` and `legio replay` (text
//! lines) over a `SledLog` of 1M events (× scale), against the log's own scan (`read_range` in
//! chunks of 10,000 in this process, every event decoded) and against `legio replay --from LAST`
//! (process start and opening the log, one event printed), all measured in the same run.
//! Run: `cargo bench --workspace --bench replay_export` (`LEGIO_BENCH_SCALE=0.01` for a quick
//! smoke run). `LEGIO_BENCH_KEEP=DIR` keeps the log in `DIR/log` and reuses it when it is
//! already there (for profiling the `legio` binary on it afterwards; its size is not checked).
//!
//! The log is built as `benches/scan.rs` builds its own (relaxed, large batches; 20 agents, 10
//! conversations, 200-byte bodies), then closed. Each command runs once right after the build
//! (sled's first open after writing: context) and then `RUNS` times warm (the OS page cache and
//! sled's snapshot warm); the goal is judged on the warm mean. Output goes to a file in the
//! temporary folder (export) or to /dev/null (replay). Whole runs timed with `Instant`: each
//! takes seconds, so criterion's repeated sampling does not fit.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use legio_core::Seq;
use legio_store::{Durability, EventLog, SledLog, StoreOptions};
use legio_tests::bench::*;
use legio_tests::TrafficGen;

/// Events in the log at scale 1.
const EVENTS: f64 = 1_000_000.0;
const SEED: u64 = 0x5eed_0005;
const AGENTS: usize = 20;
const CONVERSATIONS: usize = 10;
const BODY_BYTES: usize = 200;
/// Events per `read_range` call in the baseline scan (what the CLI reads per call too).
const CHUNK: usize = 10_000;
/// Warm runs of each command (their mean is reported).
const RUNS: usize = 2;
/// Goal: replay and export of 1M events, warm.
const GOAL: Duration = Duration::from_secs(2);

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("replay_export: benchmark only; run it with `cargo bench --workspace --bench replay_export`");
        return;
    }
    let scale = scale();
    let events = ((EVENTS * scale).round() as u64).max(1);
    println!(
        "replay_export: a log of {} events ({AGENTS} agents, {CONVERSATIONS} conversations, \
         {BODY_BYTES}-byte bodies) (LEGIO_BENCH_SCALE={scale})",
        fmt_int(events)
    );
    let dir = tempfile::tempdir().expect("a temporary folder");
    let kept = std::env::var_os("LEGIO_BENCH_KEEP").map(std::path::PathBuf::from);
    let db = kept.as_deref().unwrap_or(dir.path()).join("log");
    if db.exists() {
        println!("  reusing the log in {}", db.display());
    } else {
        let started = Instant::now();
        build(&db, events);
        println!("  built in {}", fmt_dur(started.elapsed()));
    }

    let out = dir.path().join("export.jsonl");
    let last = events.to_string();
    let commands: [(&str, Vec<&str>); 4] = [
        (
            "legio replay --from LAST (start + open, 1 event)",
            vec!["replay", "--from", &last],
        ),
        (
            "legio export -o FILE (JSON lines)",
            vec!["export", "-o", out.to_str().expect("a UTF-8 path")],
        ),
        (
            "legio replay --format jsonl > /dev/null",
            vec!["replay", "--format", "jsonl"],
        ),
        ("legio replay (text) > /dev/null", vec!["replay"]),
    ];
    let mut rows = time_commands(&db, &commands);
    let exported = std::fs::read_to_string(&out).expect("the export file");
    assert_eq!(
        exported.lines().count() as u64,
        events,
        "the export holds every event"
    );
    let (scan_first, scan_warm) = baseline(&db);
    rows.push((
        "baseline: read_range scan in-process (open excluded)".to_owned(),
        scan_first,
        scan_warm,
    ));
    print_rows(&rows, events, scan_warm);

    println!();
    println!("Goals (warm, {} events):", fmt_int(events));
    let goal = GOAL.mul_f64(scale);
    let goals: Vec<(String, String, bool)> = rows[1..commands.len()]
        .iter()
        .map(|(label, _, warm)| {
            (
                format!("{label} < {}", fmt_dur(goal)),
                fmt_dur(*warm),
                *warm < goal,
            )
        })
        .collect();
    print_goals(&goals);
}

/// A command's label, its first run and the mean of its warm runs.
type Row = (String, Duration, Duration);

/// Runs each command once, then `RUNS` times warm.
fn time_commands(db: &Path, commands: &[(&str, Vec<&str>)]) -> Vec<Row> {
    commands
        .iter()
        .map(|(label, args)| {
            let first = run_legio(db, args);
            let warm = (0..RUNS).map(|_| run_legio(db, args)).sum::<Duration>() / RUNS as u32;
            (label.to_string(), first, warm)
        })
        .collect()
}

/// The log's own scan, in this process: the first after opening, and the mean of `RUNS` warm.
fn baseline(db: &Path) -> (Duration, Duration) {
    let log = SledLog::open(db, &StoreOptions::default()).expect("opening the log");
    let first = scan(&log);
    let warm = (0..RUNS).map(|_| scan(&log)).sum::<Duration>() / RUNS as u32;
    (first, warm)
}

/// The table of wall times, with each row's rate and its ratio to the warm scan.
fn print_rows(rows: &[Row], events: u64, scan_warm: Duration) {
    let rate = |d: Duration| events as f64 / d.as_secs_f64();
    println!();
    println!("Replay and export of the whole log (wall time of the command):");
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|(label, first, warm)| {
            vec![
                label.clone(),
                fmt_dur(*first),
                fmt_dur(*warm),
                fmt_int(rate(*warm).round() as u64),
                format!("{:.2}x", warm.as_secs_f64() / scan_warm.as_secs_f64()),
            ]
        })
        .collect();
    print_table(
        &[
            "what",
            "first run",
            &format!("warm (mean of {RUNS})"),
            "events/s (warm)",
            "vs scan",
        ],
        &table,
    );
    println!();
    println!("  first run = right after the log was built and closed (sled's first open after");
    println!("  writing); warm = the runs after it. The OS page cache is warm in both.");
}

/// Builds the log in `db`: relaxed, large batches, then closed.
fn build(db: &Path, events: u64) {
    let options = StoreOptions {
        durability: Durability::RELAXED,
        ..StoreOptions::default()
    };
    let log = SledLog::open(db, &options).expect("opening the log");
    let mut gen = TrafficGen::new(SEED, AGENTS, CONVERSATIONS, 5, BODY_BYTES);
    load(&log, events, load_batch(), || gen.next_message(), |_| {});
    log.close().expect("closing the log");
}

/// Runs `legio --db DB ARGS` with its output to /dev/null; returns the wall time.
fn run_legio(db: &Path, args: &[&str]) -> Duration {
    let started = Instant::now();
    let status = Command::new(env!("CARGO_BIN_EXE_legio"))
        .arg("--db")
        .arg(db)
        .args(args)
        // No configuration file: run in the temporary folder, which has none.
        .current_dir(db.parent().expect("the database folder has a parent"))
        .env_remove("LEGIO_CONFIG")
        .env_remove("LEGIO_STORE_PATH")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("the legio binary runs");
    let elapsed = started.elapsed();
    assert!(status.success(), "legio {args:?} failed: {status}");
    elapsed
}

/// Reads the whole log with `read_range`; returns the time taken.
fn scan(log: &SledLog) -> Duration {
    let started = Instant::now();
    let last = log.last_seq();
    let mut from = Seq(1);
    let mut count = 0u64;
    while from <= last {
        let records = log.read_range(from, last, CHUNK).expect("read_range");
        let Some(tail) = records.last() else { break };
        from = tail.seq.next();
        count += records.len() as u64;
        std::hint::black_box(records);
    }
    assert_eq!(count, last.get(), "the scan read every event");
    started.elapsed()
}
