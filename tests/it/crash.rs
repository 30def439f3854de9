//! Kill-and-recover: the test re-executes itself as a child that appends under concurrent load and
//! reports each acknowledged append; the parent kills it with SIGKILL at a random moment, reopens
//! the log and checks that every acknowledged event is there with its content, that there are no
//! gaps, and that `verify` (indexes against events) is clean. `LEGIO_CRASH_KILLS` sets the number
//! of kills (default 20).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use legio_core::Seq;
use legio_store::{EventLog, SledLog, StoreError, StoreOptions};
use legio_tests::*;
use rand::{Rng, SeedableRng};

const CHILD_ENV: &str = "LEGIO_CRASH_CHILD_DB";
const TEST_NAME: &str = "crash::acknowledged_appends_survive_sigkill";
const WRITERS: u64 = 8;

fn open_retrying(path: &std::path::Path) -> SledLog {
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

/// The child: append from several threads until killed, printing `ACK seq writer i` per event.
fn child(path: &str, round: u64) -> ! {
    let log = open_retrying(std::path::Path::new(path));
    let out = std::sync::Mutex::new(std::io::stdout());
    // libtest has printed "test NAME ... " without a newline: start on a fresh line.
    writeln!(out.lock().unwrap(), "\nREADY {}", log.last_seq()).unwrap();
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let (log, out) = (&log, &out);
            s.spawn(move || {
                for i in 0u64.. {
                    // Some batches of several events, mostly single ones; some on other conversations.
                    let size = if i % 7 == 0 { 3 } else { 1 };
                    let batch = (0..size)
                        .map(|k| {
                            let n = (round << 40) | (w << 32) | (i * 4 + k);
                            let key = format!("crash:{}", (w + k) % 3);
                            text_message(
                                n,
                                &key,
                                "user",
                                if k == 1 { "all" } else { "lead" },
                                &format!("r{round} w{w} i{i} k{k}"),
                            )
                        })
                        .collect();
                    let range = log.append(batch).expect("append");
                    // The parent may be gone (it failed): then just stop reporting.
                    let Ok(mut out) = out.lock() else { return };
                    for (k, seq) in range.iter().enumerate() {
                        if writeln!(out, "ACK {seq} r{round} w{w} i{i} k{k}").is_err() {
                            return;
                        }
                    }
                    if out.flush().is_err() {
                        return;
                    }
                }
            });
        }
    });
    unreachable!("writers never stop")
}

#[test]
fn acknowledged_appends_survive_sigkill() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        let round = std::env::var("LEGIO_CRASH_ROUND").unwrap().parse().unwrap();
        child(&path, round);
    }
    let kills: u64 = std::env::var("LEGIO_CRASH_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut rng = rand::rngs::StdRng::seed_from_u64(std::process::id().into());
    let mut acked: BTreeMap<u64, String> = BTreeMap::new();
    let exe = std::env::current_exe().unwrap();
    for round in 0..kills {
        let mut child = Command::new(&exe)
            .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &path)
            .env("LEGIO_CRASH_ROUND", round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Wait until the child has the log open, then let it run a random while.
        let ready_deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let line = rx
                .recv_timeout(ready_deadline.saturating_duration_since(Instant::now()))
                .expect("child never got ready");
            if line.starts_with("READY") {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(rng.gen_range(20..300)));
        child.kill().unwrap(); // SIGKILL on Unix
        child.wait().unwrap();
        reader.join().unwrap();
        let mut this_round = 0;
        for line in rx.try_iter() {
            if let Some(rest) = line.strip_prefix("ACK ") {
                let (seq, text) = rest.split_once(' ').unwrap();
                acked.insert(seq.parse().unwrap(), text.to_owned());
                this_round += 1;
            }
        }
        assert!(
            this_round > 0,
            "round {round}: the child acknowledged nothing before the kill"
        );

        let log = open_retrying(&path);
        let last = log.last_seq();
        let max_acked = *acked.keys().next_back().unwrap();
        assert!(
            last.0 >= max_acked,
            "round {round}: last seq {last} < acknowledged {max_acked}"
        );
        let mut count = 0u64;
        let mut from = Seq(1);
        while from <= last {
            let chunk = log.read_range(from, last, 10_000).unwrap();
            for r in &chunk {
                assert_eq!(r.seq.0, from.0 + count % 10_000, "gap before seq {}", r.seq);
                count += 1;
                if let Some(text) = acked.get(&r.seq.0) {
                    let got = r.event.as_message().unwrap().text_content();
                    let want = text.rsplit_once(" k").map(|(head, _)| head).unwrap();
                    assert!(
                        got.starts_with(want),
                        "seq {}: stored {got:?}, acknowledged {text:?}",
                        r.seq
                    );
                }
            }
            from = Seq(chunk.last().unwrap().seq.0 + 1);
            if chunk.len() < 10_000 {
                break;
            }
        }
        assert_eq!(
            count, last.0,
            "round {round}: events missing below the last seq"
        );
        let report = log.verify(&mut |_| {}).unwrap();
        assert!(
            report.is_clean(),
            "round {round}: verify found {:?}",
            report.findings
        );
        eprintln!("crash round {round}: {this_round} acks this round, log at {last}, verify clean");
    }
}
