//! How fast `legio demo` tours (it was a "< 10 s" assertion in the CLI test; speed goals belong in
//! benches). Runs the built binary's `demo` in a fresh temp dir `LEGIO_BENCH_DEMO_RUNS` times
//! (default 5), and as a baseline in the same run `legio --version` (process start, no log), then
//! prints the median and slowest wall time of each and the ratio of the demo's median to the
//! baseline's. The goal the test used to assert: the demo's median under 10 s.
//!
//! Run: `cargo bench -p legio-cli --bench demo` (release profile).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The demo's goal (median).
const GOAL: Duration = Duration::from_secs(10);

fn time_runs(runs: usize, args: &[&str]) -> Vec<Duration> {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let dir = tempfile::tempdir().expect("a temp dir");
            let started = Instant::now();
            let status = Command::new(env!("CARGO_BIN_EXE_legio"))
                .current_dir(dir.path())
                .env("LEGIO_CONFIG", dir.path().join("none.toml"))
                .env_remove("LEGIO_STORE_PATH")
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("the legio binary runs");
            let elapsed = started.elapsed();
            assert!(status.success(), "legio {args:?} failed: {status}");
            elapsed
        })
        .collect();
    times.sort();
    times
}

fn main() {
    let runs: usize = std::env::var("LEGIO_BENCH_DEMO_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
        .max(1);
    let baseline = time_runs(runs, &["--version"]);
    let demo = time_runs(runs, &["demo"]);
    let median = |t: &[Duration]| t[t.len() / 2];
    let slowest = |t: &[Duration]| t[t.len() - 1];
    println!(
        "legio --version (baseline): median {:?}, slowest {:?} ({runs} runs)",
        median(&baseline),
        slowest(&baseline)
    );
    println!(
        "legio demo:                 median {:?}, slowest {:?} ({runs} runs)",
        median(&demo),
        slowest(&demo)
    );
    println!(
        "ratio demo / baseline (medians): {:.1}x; goal: demo median under {GOAL:?}: {}",
        median(&demo).as_secs_f64() / median(&baseline).as_secs_f64().max(1e-9),
        if median(&demo) < GOAL {
            "met"
        } else {
            "NOT met"
        }
    );
}
