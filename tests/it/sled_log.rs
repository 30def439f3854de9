//! What only the durable log has: reopening, the process lock, corruption on disk, blobs.

use legio_core::{Event, Seq, Viewer};
use legio_store::testing::{damage, Damage};
use legio_store::{EventLog, SledLog, StoreError, StoreOptions};
use legio_tests::*;

fn open(path: &std::path::Path) -> SledLog {
    SledLog::open(path, &StoreOptions::default()).unwrap()
}

#[test]
fn everything_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut gen = TrafficGen::new(11, 10, 2, 5, 100);
    let events: Vec<Event> = (0..500).map(|_| gen.next_message()).collect();
    {
        let log = open(&path);
        log.append(events.clone()).unwrap();
        log.append(vec![session_opened(1, "bench:0", "a3", 1)])
            .unwrap();
    }
    let log = open(&path);
    assert_eq!(log.last_seq(), Seq(501));
    let back = log.read_range(Seq(1), Seq(500), 1000).unwrap();
    assert_eq!(
        back.into_iter().map(|r| r.event).collect::<Vec<_>>(),
        events
    );
    assert!(log
        .session_state(&conv("bench:0"), &agent("a3"))
        .unwrap()
        .is_some());
    let r = log
        .append(vec![text_message(9000, "bench:1", "user", "lead", "more")])
        .unwrap();
    assert_eq!(r.first, Seq(502));
    assert!(log.verify(&mut |_| {}).unwrap().is_clean());
}

/// A reading open (`sync_on_open: false`, as `legio replay` and `legio export` open) reads
/// everything, may still append (its first commit syncs as any writer's does), and leaves a log
/// that reopens whole and verifies clean; closing it twice is harmless.
#[test]
fn a_reading_open_without_the_open_sync_reads_appends_and_reopens_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut gen = TrafficGen::new(12, 10, 2, 5, 2_000);
    let events: Vec<Event> = (0..300).map(|_| gen.next_message()).collect();
    open(&path).append(events.clone()).unwrap();
    let reading = StoreOptions {
        create_if_missing: false,
        sync_on_open: false,
        ..StoreOptions::default()
    };
    {
        let log = SledLog::open(&path, &reading).unwrap();
        assert!(
            !log.synced_on_open(),
            "the writer closed cleanly: nothing to sync"
        );
        let back = log.read_range(Seq(1), Seq(300), 1000).unwrap();
        assert_eq!(
            back.into_iter().map(|r| r.event).collect::<Vec<_>>(),
            events
        );
        log.close().unwrap();
        log.close().unwrap();
    }
    {
        let log = SledLog::open(&path, &reading).unwrap();
        let r = log
            .append(vec![text_message(9000, "bench:1", "user", "lead", "more")])
            .unwrap();
        assert_eq!(r.first, Seq(301));
    }
    // The reading open that appended closed cleanly too: the next one need not sync.
    let again = SledLog::open(&path, &reading).unwrap();
    assert!(!again.synced_on_open());
    assert_eq!(again.last_seq(), Seq(301));
    drop(again);
    let log = open(&path);
    assert!(log.synced_on_open(), "a writer's open always syncs");
    assert_eq!(log.last_seq(), Seq(301));
    assert!(log.verify(&mut |_| {}).unwrap().is_clean());
}

#[test]
fn a_second_open_fails_fast_naming_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let _first = open(&path);
    // It fails (within the 0.5 s lock grace) instead of waiting for the lock: were it to wait,
    // this test would never end.
    let err = SledLog::open(&path, &StoreOptions::default()).unwrap_err();
    assert_eq!(err, StoreError::Locked { path: path.clone() });
    let text = err.to_string();
    assert!(
        text.contains("locked by another process") && text.contains("stop it"),
        "{text}"
    );
}

#[test]
fn a_missing_database_is_not_created_when_asked_not_to() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nope");
    let options = StoreOptions {
        create_if_missing: false,
        ..Default::default()
    };
    let err = SledLog::open(&path, &options).unwrap_err();
    assert_eq!(err, StoreError::NotFound { path: path.clone() });
    assert!(!path.exists(), "nothing may be created");
}

#[test]
fn corrupt_records_are_reported_not_panicked_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let log = open(&path);
    log.append(
        (1..=5)
            .map(|n| text_message(n, "t:1", "user", "lead", "m"))
            .collect(),
    )
    .unwrap();
    for (seq, bytes) in [(3, vec![1, 0xde, 0xad]), (4, vec![9, 0, 0])] {
        damage(
            &log,
            Damage::OverwriteRecord {
                seq: Seq(seq),
                bytes,
            },
        )
        .unwrap();
    }
    let err = log.read_range(Seq(1), Seq(5), 10).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
    let err = log.read_range(Seq(4), Seq(4), 10).unwrap_err();
    assert!(
        matches!(err, StoreError::UnknownFormatVersion { version: 9, .. }),
        "{err}"
    );
    let report = log.verify(&mut |_| {}).unwrap();
    assert_eq!(
        report.counts.get("undecodable"),
        Some(&2),
        "{:?}",
        report.findings
    );
    drop(log);
    // Reopening a log with corrupt records works; the corruption is still reported.
    let log = open(&path);
    assert_eq!(
        log.verify(&mut |_| {}).unwrap().counts.get("undecodable"),
        Some(&2)
    );
}

#[test]
fn index_disagreement_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(&dir.path().join("db"));
    log.append(
        (1..=5)
            .map(|n| text_message(n, "t:1", "user", "lead", "m"))
            .collect(),
    )
    .unwrap();
    damage(&log, Damage::RemoveConversationIndexEntry(Seq(2))).unwrap();
    let report = log.verify(&mut |_| {}).unwrap();
    assert_eq!(
        report.counts.get("missing_index_entry"),
        Some(&1),
        "{:?}",
        report.findings
    );
    assert!(!report.is_clean());
}

#[test]
fn large_messages_round_trip_through_blobs_and_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let big = "y".repeat(1024 * 1024); // exactly the limit: accepted, stored by sled as a blob
    {
        let log = open(&path);
        log.append(vec![text_message(1, "t:1", "user", "lead", &big)])
            .unwrap();
        log.append(vec![text_message(2, "t:1", "user", "lead", "small")])
            .unwrap();
    }
    let log = open(&path);
    let back = log.read_range(Seq(1), Seq(1), 1).unwrap();
    assert_eq!(
        back[0].event.as_message().unwrap().text_content().len(),
        big.len()
    );
    let window = log
        .visible_window(&conv("t:1"), Viewer::Everything, 5)
        .unwrap();
    assert_eq!(window.len(), 2);
}

#[test]
fn appends_can_be_awaited_and_subscribers_see_a_closed_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(&dir.path().join("db"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut sub = log.subscribe(Seq::ZERO);
    rt.block_on(async {
        let handles: Vec<_> = (0..32)
            .map(|i| {
                log.submit(vec![text_message(i, "t:1", "user", "lead", "async")])
                    .unwrap()
            })
            .collect();
        for h in handles {
            h.await.unwrap();
        }
        for want in 1..=32 {
            assert_eq!(sub.next().await.unwrap().seq, Seq(want));
        }
    });
    drop(log);
    rt.block_on(async {
        assert_eq!(sub.next().await.unwrap_err(), StoreError::Closed);
    });
}

const HOLDER_ENV: &str = "LEGIO_LOCK_HOLDER_DB";

/// Another process holds the database: opening fails fast with `Locked`, and works once it exits.
#[test]
fn a_database_held_by_another_process_is_reported_as_locked() {
    use std::io::{BufRead, BufReader, Read};
    if let Ok(path) = std::env::var(HOLDER_ENV) {
        let _log = open(std::path::Path::new(&path));
        println!("\nHOLDING");
        // Hold the lock until the parent closes our stdin.
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    drop(open(&path)); // create it
    let mut holder = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "sled_log::a_database_held_by_another_process_is_reported_as_locked",
            "--nocapture",
        ])
        .env(HOLDER_ENV, &path)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(holder.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|l| l.unwrap().contains("HOLDING")),
        "the holder never opened the database"
    );
    let err = SledLog::open(&path, &StoreOptions::default()).unwrap_err();
    assert_eq!(err, StoreError::Locked { path: path.clone() });
    drop(holder.stdin.take()); // let the holder exit
    assert!(holder.wait().unwrap().success());
    let log = open(&path);
    assert_eq!(log.last_seq(), Seq::ZERO);
}

const FSIZE_ENV: &str = "LEGIO_FSIZE_CHILD_DB";

/// The child of the test below: appends 16 KiB messages under a file size limit until one fails,
/// then tries one more small append, and reports both.
fn fsize_child(path: &str) -> ! {
    let log = open(std::path::Path::new(path));
    let big = "x".repeat(16 * 1024);
    let mut acked = 0u64;
    let first_error = loop {
        match log.append(vec![text_message(acked + 2, "t:1", "user", "lead", &big)]) {
            Ok(_) => acked += 1,
            Err(e) => break e,
        }
        assert!(acked < 100_000, "the file size limit never bit");
    };
    println!("\nACKED {acked}");
    println!("FAILED {first_error}");
    match log.append(vec![text_message(999_999, "t:1", "user", "lead", "small")]) {
        Ok(range) => println!("THEN accepted {range:?}"),
        Err(e) => println!("THEN refused {e}"),
    }
    // Exit without closing: closing would flush again; a process after a failed fsync stops.
    std::process::exit(0)
}

/// A commit whose write fails (the file size limit stands in for a full disk: a real write error
/// from the kernel) fails its writers, and the log then refuses every later append, even one
/// that would fit (after a failed write the state on disk is unknown). Reopened without the
/// limit, every acknowledged append is there and verify is clean.
#[test]
fn a_failed_commit_refuses_every_later_append() {
    if let Ok(path) = std::env::var(FSIZE_ENV) {
        fsize_child(&path);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    drop(open(&path).append(vec![text_message(1, "t:1", "user", "lead", "first")]));
    let size_kib = std::fs::metadata(path.join("db")).unwrap().len() / 1024;
    // bash: ignore SIGXFSZ (so a write past the limit fails with EFBIG instead of killing the
    // process; an ignored signal stays ignored across exec), limit file sizes, run the child.
    // The limit leaves room for two of sled's 4 MiB segments: an open may start a new one.
    let script = format!(
        "trap '' XFSZ; ulimit -f {}; exec \"$0\" --exact sled_log::a_failed_commit_refuses_every_later_append --nocapture --test-threads=1",
        size_kib + 9 * 1024
    );
    let out = std::process::Command::new("bash")
        .args(["-c", &script])
        .arg(std::env::current_exe().unwrap())
        .env(FSIZE_ENV, &path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = |prefix: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line in {stdout}"))
            .to_owned()
    };
    let acked: u64 = line("ACKED ").parse().unwrap();
    let failed = line("FAILED ");
    let then = line("THEN ");
    assert!(acked > 0, "some appends fit under the limit");
    assert!(then.starts_with("refused"), "{then}");
    assert!(
        then.ends_with(&failed),
        "the later append gets the commit's error: {then} / {failed}"
    );
    let log = open(&path);
    assert!(log.last_seq().0 > acked, "{} <= {acked}", log.last_seq());
    let report = log.verify(&mut |_| {}).unwrap();
    assert!(report.is_clean(), "{:?}", report.findings);
}

/// The log keeps a few groups' list items in memory and writes them every 32 groups (and on
/// flush): reads racing those writes, from another thread, see every seq of a list exactly
/// once, in order, never above the acknowledged seq, whether it comes from a stored entry or
/// from memory.
#[test]
fn reads_racing_list_writes_see_every_seq_once() {
    let dir = tempfile::tempdir().unwrap();
    let log = std::sync::Arc::new(open(&dir.path().join("db")));
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let mut reads = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let last = log.last_seq();
                let events = log
                    .conversation_events(&conv("t:1"), Seq::ZERO, 10_000)
                    .unwrap();
                let seqs: Vec<u64> = events.iter().map(|r| r.seq.0).collect();
                // Appends alternate between t:1 (odd seqs) and t:2 (even seqs).
                let want: Vec<u64> = (1..=log.last_seq().0).filter(|s| s % 2 == 1).collect();
                assert!(seqs.len() >= want.iter().filter(|s| **s <= last.0).count());
                assert_eq!(seqs, want[..seqs.len()].to_vec(), "after {reads} reads");
                let window = log
                    .visible_window(&conv("t:1"), Viewer::Specialist(&agent("ann")), 20)
                    .unwrap();
                let seqs: Vec<u64> = window.iter().map(|r| r.seq.0).collect();
                assert!(seqs.windows(2).all(|w| w[1] == w[0] + 2), "{seqs:?}");
                reads += 1;
            }
            reads
        });
        for n in 1..=400u64 {
            let conversation = if n % 2 == 1 { "t:1" } else { "t:2" };
            log.append(vec![text_message(n, conversation, "user", "ann", "hi")])
                .unwrap();
            if n % 97 == 0 {
                log.flush().unwrap();
            }
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
    });
    assert!(log.verify(&mut |_| {}).unwrap().is_clean());
}
