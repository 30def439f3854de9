//! Reopen time of a `SledLog` holding 1M events (× scale): after a clean close, and after the
//! process writing to it was killed with SIGKILL under append load; with the time to the first
//! `visible_window` read, against opening a fresh empty log in the same run.
//! Run: `cargo bench --bench reopen` (`LEGIO_BENCH_SCALE=0.01` for a quick smoke run).
//!
//! For the SIGKILL case the bench re-executes itself as a child (marked by the environment
//! variable `LEGIO_BENCH_REOPEN_CHILD_DB`, holding the database folder) that opens the log and
//! appends from several threads; once it prints that it is appending, the parent waits a moment,
//! kills it (`Child::kill`, SIGKILL on Unix) and times the reopen. Each open is timed once per run
//! with `Instant`: the cases are stateful, so criterion's repeated sampling does not fit.
//! The OS page cache is warm (the database was just written); this is not a cold-disk figure.

use legio_tests::bench::*;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use legio_core::{AgentName, ConversationKey, Viewer};
use legio_store::{Durability, EventLog, SledLog, StoreError, StoreOptions};
use legio_tests::{agent, conv, TrafficGen};

/// Events in the log at scale 1.
const EVENTS: f64 = 1_000_000.0;
const SEED: u64 = 0x5eed_0003;
const AGENTS: usize = 20;
const CONVERSATIONS: usize = 10;
const BODY_BYTES: usize = 100;
/// Clean reopens measured.
const CLEAN_REOPENS: usize = 3;
/// Fresh empty logs opened for the baseline.
const EMPTY_OPENS: usize = 5;
/// Writer threads of the child that is killed.
const CHILD_WRITERS: u64 = 16;
/// How long the child appends after saying so, before it is killed.
const KILL_AFTER: Duration = Duration::from_millis(300);
/// The environment variable that marks the child, holding the database folder.
const CHILD_ENV: &str = "LEGIO_BENCH_REOPEN_CHILD_DB";
const GOAL_CLEAN_REOPEN: Duration = Duration::from_millis(500);

fn main() {
    // The child mode comes first: the harness arguments (`--bench`) do not matter to it.
    if let Ok(path) = std::env::var(CHILD_ENV) {
        child(Path::new(&path));
    }
    if !std::env::args().any(|a| a == "--bench") {
        println!("reopen: benchmark only; run it with `cargo bench --bench reopen`");
        return;
    }
    let scale = scale();
    let events = ((EVENTS * scale).round() as u64).max(1);
    println!(
        "reopen: a log of {} events ({AGENTS} agents, {CONVERSATIONS} conversations, \
         {BODY_BYTES}-byte bodies) (LEGIO_BENCH_SCALE={scale})",
        fmt_int(events)
    );
    let probe = generator();
    let conversation = conv(&probe.conversations()[0]);
    let viewer = agent(&probe.agents()[0]);
    let mut rows = Vec::new();

    // ---- baseline: open a fresh empty log ----
    let mut empty = Vec::new();
    for _ in 0..EMPTY_OPENS {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let started = Instant::now();
        let log = SledLog::open(dir.path().join("log"), &StoreOptions::default()).expect("open");
        empty.push(started.elapsed());
        drop(log);
    }
    empty.sort();
    let empty_median = empty[empty.len() / 2];
    rows.push(vec![
        format!("fresh empty log (baseline, median of {EMPTY_OPENS})"),
        "0".to_owned(),
        fmt_dur(empty_median),
        "-".to_owned(),
        "-".to_owned(),
        "1.0x".to_owned(),
        "-".to_owned(),
        "-".to_owned(),
    ]);

    // ---- build ----
    let dir = tempfile::tempdir().expect("a temporary folder");
    let path = dir.path().join("log");
    let started = Instant::now();
    let options = StoreOptions {
        durability: Durability::RELAXED,
        ..StoreOptions::default()
    };
    let log = SledLog::open(&path, &options).expect("opening the log");
    let load_batch = load_batch();
    load_log(&log, events, load_batch);
    let built = started.elapsed();
    let size = log.size_on_disk().expect("size");
    let started = Instant::now();
    drop(log);
    println!(
        "  built in {} (relaxed, {load_batch}-event appends), {:.0} MB on disk; clean close (drop) {}",
        fmt_dur(built),
        size as f64 / 1e6,
        fmt_dur(started.elapsed())
    );

    // ---- clean reopens ----
    let mut clean = Vec::new();
    for run in 1..=CLEAN_REOPENS {
        let (log, open, read) = timed_open(&path, &conversation, &viewer);
        assert_eq!(log.last_seq().get(), events, "every event is there");
        let size = log.size_on_disk().expect("size");
        let started = Instant::now();
        drop(log);
        let close = started.elapsed();
        rows.push(vec![
            format!("clean reopen #{run}"),
            fmt_int(events),
            fmt_dur(open),
            fmt_dur(read),
            fmt_dur(open + read),
            format!("{:.1}x", ratio(open, empty_median)),
            format!("{:.0} MB", size as f64 / 1e6),
            fmt_dur(close),
        ]);
        clean.push(open);
    }

    // ---- SIGKILL under load, then reopen ----
    let exe = std::env::current_exe().expect("the bench's own path");
    let mut child = Command::new(exe)
        .env(CHILD_ENV, &path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting the child");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped stdout"))
        .read_line(&mut line)
        .expect("reading the child's report");
    assert!(
        line.starts_with("APPENDING"),
        "the child did not start appending: {line:?}"
    );
    std::thread::sleep(KILL_AFTER);
    child.kill().expect("SIGKILL");
    let status = child.wait().expect("reaping the child");
    println!(
        "  child appended from {CHILD_WRITERS} threads (sync durability) for {} after its first \
         ack, then SIGKILL ({status})",
        fmt_dur(KILL_AFTER)
    );
    let (log, open, read) = timed_open(&path, &conversation, &viewer);
    let after_kill = log.last_seq().get();
    assert!(after_kill >= events, "nothing acknowledged before is lost");
    let size = log.size_on_disk().expect("size");
    let started = Instant::now();
    drop(log);
    rows.push(vec![
        "reopen after SIGKILL under load".to_owned(),
        fmt_int(after_kill),
        fmt_dur(open),
        fmt_dur(read),
        fmt_dur(open + read),
        format!("{:.1}x", ratio(open, empty_median)),
        format!("{:.0} MB", size as f64 / 1e6),
        fmt_dur(started.elapsed()),
    ]);

    println!();
    println!("SledLog::open (StoreOptions::default()), then visible_window(bench:0, a0, 50):");
    print_table(
        &[
            "case",
            "events",
            "open",
            "first visible_window",
            "open + read",
            "open vs empty",
            "size on disk",
            "then close",
        ],
        &rows,
    );
    println!();
    println!(
        "  ({} events were appended by the child before the kill. \"then close\" is the time to",
        fmt_int(after_kill - events)
    );
    println!("  drop the reopened log, not part of the open figures.)");

    let worst = clean.iter().max().copied().unwrap_or_default();
    println!();
    println!("Goals:");
    print_goals(&[(
        format!(
            "clean reopen < {} (slowest of {CLEAN_REOPENS})",
            fmt_dur(GOAL_CLEAN_REOPEN)
        ),
        fmt_dur(worst),
        worst < GOAL_CLEAN_REOPEN,
    )]);
}

fn generator() -> TrafficGen {
    TrafficGen::new(SEED, AGENTS, CONVERSATIONS, 5, BODY_BYTES)
}

/// Appends `events` generated events in large batches.
fn load_log(log: &SledLog, events: u64, load_batch: usize) {
    let mut gen = generator();
    load(log, events, load_batch, || gen.next_message(), |_| {});
}

/// Opens the log (default options) and reads one window: (log, open time, first read time).
fn timed_open(
    path: &Path,
    conversation: &ConversationKey,
    viewer: &AgentName,
) -> (SledLog, Duration, Duration) {
    let started = Instant::now();
    let log = open_retrying(path);
    let open = started.elapsed();
    let started = Instant::now();
    let window = log
        .visible_window(conversation, Viewer::Specialist(viewer), 50)
        .expect("visible_window");
    let read = started.elapsed();
    assert!(!window.is_empty(), "the window has messages");
    (log, open, read)
}

/// Opens with default options; a lock still held for a moment (sled's threads releasing the file,
/// or the killed child being reaped) is retried, as `SledLog::open` does for 500 ms itself.
fn open_retrying(path: &Path) -> SledLog {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match SledLog::open(path, &StoreOptions::default()) {
            Ok(log) => return log,
            Err(StoreError::Locked { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => panic!("opening {}: {e}", path.display()),
        }
    }
}

/// The child: appends single messages durably from several threads until killed (or, if the
/// parent is gone, for at most a minute); prints `APPENDING` after its first acknowledged append.
fn child(path: &Path) -> ! {
    let log = open_retrying(path);
    let announced = AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_secs(60);
    std::thread::scope(|s| {
        for w in 0..CHILD_WRITERS {
            let (log, announced) = (&log, &announced);
            s.spawn(move || {
                let mut gen = TrafficGen::new(SEED ^ (w + 1), AGENTS, CONVERSATIONS, 5, BODY_BYTES);
                while Instant::now() < deadline {
                    log.append(vec![gen.next_message()]).expect("append");
                    if !announced.swap(true, Ordering::SeqCst) {
                        let mut out = std::io::stdout().lock();
                        // The parent may be gone: then the deadline ends the child.
                        let _ = writeln!(out, "APPENDING {}", log.last_seq());
                        let _ = out.flush();
                    }
                }
            });
        }
    });
    std::process::exit(0)
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-12)
}
