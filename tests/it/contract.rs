//! The `EventLog` contract, written once and run against every implementation.

use legio_core::{can_see, Event, Seq, Viewer};
use legio_store::{EventLog, StoreError};
use legio_tests::*;

pub fn appends_get_gap_free_seqs_from_one(log: &dyn EventLog) {
    assert_eq!(log.last_seq(), Seq::ZERO);
    let r1 = log
        .append(vec![text_message(1, "t:1", "user", "lead", "a")])
        .unwrap();
    assert_eq!((r1.first, r1.last), (Seq(1), Seq(1)));
    let r2 = log
        .append(
            (2..=4)
                .map(|n| text_message(n, "t:1", "user", "lead", "b"))
                .collect(),
        )
        .unwrap();
    assert_eq!((r2.first, r2.last, r2.len()), (Seq(2), Seq(4), 3));
    assert_eq!(log.last_seq(), Seq(4));
    let all = log.read_range(Seq(1), Seq(100), 100).unwrap();
    let seqs: Vec<u64> = all.iter().map(|r| r.seq.0).collect();
    assert_eq!(seqs, vec![1, 2, 3, 4]);
}

pub fn refused_batches_store_nothing(log: &dyn EventLog) {
    assert_eq!(log.append(vec![]).unwrap_err(), StoreError::EmptyBatch);
    let big = "x".repeat(1024 * 1024 + 1);
    let err = log
        .append(vec![
            text_message(1, "t:1", "user", "lead", "fine"),
            text_message(2, "t:1", "user", "lead", &big),
        ])
        .unwrap_err();
    assert_eq!(
        err,
        StoreError::MessageTooLarge {
            size: 1024 * 1024 + 1,
            limit: 1024 * 1024
        }
    );
    assert!(
        err.to_string().contains("1048577") && err.to_string().contains("1048576"),
        "{err}"
    );
    assert_eq!(
        log.last_seq(),
        Seq::ZERO,
        "nothing of a refused batch may be stored"
    );
    let r = log
        .append(vec![text_message(3, "t:1", "user", "lead", "next")])
        .unwrap();
    assert_eq!(r.first, Seq(1), "a refused batch must not consume seqs");
}

pub fn read_range_bounds_and_limits(log: &dyn EventLog) {
    log.append(
        (1..=10)
            .map(|n| text_message(n, "t:1", "user", "lead", "m"))
            .collect(),
    )
    .unwrap();
    let got = log.read_range(Seq(3), Seq(7), 100).unwrap();
    assert_eq!(got.first().unwrap().seq, Seq(3));
    assert_eq!(got.last().unwrap().seq, Seq(7));
    assert_eq!(log.read_range(Seq(3), Seq(7), 2).unwrap().len(), 2);
    assert_eq!(log.read_range(Seq(11), Seq(20), 10).unwrap().len(), 0);
    assert!(matches!(
        log.read_range(Seq(5), Seq(4), 10),
        Err(StoreError::BadRange { .. })
    ));
}

/// Ranges that start and end inside a chunk, at a chunk's edges, and across chunks (the sled
/// log's layout v2, shared by the memory log: three groups of ten small events, one chunk each,
/// then one group of six 20 KiB events, packed two to a chunk), with limits that stop inside a
/// chunk: every answer is exactly the stored events, in order.
pub fn read_range_starts_and_ends_inside_chunks(log: &dyn EventLog) {
    let mut appended = Vec::new();
    for group in 0..3u64 {
        let batch: Vec<Event> = (1..=10)
            .map(|i| text_message(group * 10 + i, "t:1", "user", "lead", "m"))
            .collect();
        appended.extend(batch.clone());
        log.append(batch).unwrap();
    }
    let big = "x".repeat(20 * 1024);
    let batch: Vec<Event> = (31..=36)
        .map(|n| text_message(n, "t:1", "user", "lead", &big))
        .collect();
    appended.extend(batch.clone());
    log.append(batch).unwrap();
    let last = appended.len() as u64;
    for from in 1..=last + 1 {
        for to in from..=last + 2 {
            for limit in [1, 3, 1000] {
                let got = log.read_range(Seq(from), Seq(to), limit).unwrap();
                let want: Vec<u64> = (from..=to.min(last)).take(limit).collect();
                let seqs: Vec<u64> = got.iter().map(|r| r.seq.0).collect();
                assert_eq!(seqs, want, "read_range({from}, {to}, {limit})");
                for record in &got {
                    assert_eq!(record.event, appended[record.seq.0 as usize - 1]);
                }
            }
        }
    }
}

pub fn conversations_are_separate(log: &dyn EventLog) {
    log.append(vec![
        text_message(1, "t:a", "user", "lead", "1"),
        text_message(2, "t:b", "user", "lead", "2"),
        text_message(3, "t:a", "user", "lead", "3"),
        session_opened(4, "t:b", "lead", 1),
    ])
    .unwrap();
    let a: Vec<u64> = log
        .conversation_events(&conv("t:a"), Seq::ZERO, 10)
        .unwrap()
        .iter()
        .map(|r| r.seq.0)
        .collect();
    let b: Vec<u64> = log
        .conversation_events(&conv("t:b"), Seq::ZERO, 10)
        .unwrap()
        .iter()
        .map(|r| r.seq.0)
        .collect();
    assert_eq!(a, vec![1, 3]);
    assert_eq!(b, vec![2, 4]);
    let after: Vec<u64> = log
        .conversation_events(&conv("t:a"), Seq(1), 10)
        .unwrap()
        .iter()
        .map(|r| r.seq.0)
        .collect();
    assert_eq!(after, vec![3]);
    let keys: Vec<String> = log
        .conversations()
        .unwrap()
        .iter()
        .map(|c| c.to_string())
        .collect();
    assert_eq!(keys, vec!["t:a", "t:b"]);
    assert!(log
        .conversation_events(&conv("t:none"), Seq::ZERO, 10)
        .unwrap()
        .is_empty());
}

/// The seed's `limit * 5` over-fetch returns fewer than asked at realistic fan-out; ours must not.
pub fn visible_window_is_exact_under_fan_out(log: &dyn EventLog) {
    let mut gen = TrafficGen::new(7, 100, 1, 5, 20);
    let events: Vec<Event> = (0..3000).map(|_| gen.next_message()).collect();
    for chunk in events.chunks(500) {
        log.append(chunk.to_vec()).unwrap();
    }
    let key = conv(&gen.conversations()[0]);
    for name in ["a0", "a17", "a99"] {
        let who = agent(name);
        let viewer = Viewer::Specialist(&who);
        let expected: Vec<u64> = events
            .iter()
            .enumerate()
            .filter(|(_, e)| can_see(viewer, e.as_message().unwrap()))
            .map(|(i, _)| i as u64 + 1)
            .collect();
        assert!(
            expected.len() > 50,
            "the scenario must have more than 50 visible messages"
        );
        let window = log.visible_window(&key, viewer, 50).unwrap();
        let got: Vec<u64> = window.iter().map(|r| r.seq.0).collect();
        assert_eq!(
            got,
            expected[expected.len() - 50..].to_vec(),
            "window of {name}"
        );
        let after = log
            .visible_after(&key, viewer, Seq(expected[10]), 5)
            .unwrap();
        let got: Vec<u64> = after.iter().map(|r| r.seq.0).collect();
        assert_eq!(got, expected[11..16].to_vec(), "visible_after of {name}");
    }
    let everything = log.visible_window(&key, Viewer::Everything, 50).unwrap();
    assert_eq!(everything.first().unwrap().seq, Seq(2951));
    assert_eq!(everything.len(), 50);
}

pub fn own_replies_and_broadcasts_are_visible(log: &dyn EventLog) {
    log.append(vec![
        text_message(1, "t:1", "user", "vorenus", "review"),
        text_message(2, "t:1", "vorenus", "user", "done"),
        text_message(3, "t:1", "user", "pullo", "other"),
        text_message(4, "t:1", "user", "all", "everyone"),
        session_opened(5, "t:1", "vorenus", 1),
    ])
    .unwrap();
    let v = agent("vorenus");
    let seqs: Vec<u64> = log
        .visible_window(&conv("t:1"), Viewer::Specialist(&v), 10)
        .unwrap()
        .iter()
        .map(|r| r.seq.0)
        .collect();
    assert_eq!(seqs, vec![1, 2, 4]);
    let seqs: Vec<u64> = log
        .visible_window(&conv("t:1"), Viewer::Everything, 10)
        .unwrap()
        .iter()
        .map(|r| r.seq.0)
        .collect();
    assert_eq!(seqs, vec![1, 2, 3, 4], "session events are not messages");
}

pub fn session_state_follows_the_events(log: &dyn EventLog) {
    log.append(vec![
        text_message(1, "t:1", "user", "vorenus", "hi"),
        session_opened(2, "t:1", "vorenus", 1),
        context_delivered(3, "t:1", "vorenus", 1, 1),
        turn_completed(4, "t:1", "vorenus", 1, 500),
    ])
    .unwrap();
    log.append(vec![session_closed(
        5,
        "t:1",
        "vorenus",
        1,
        legio_core::BoundaryReason::TokenCeiling,
    )])
    .unwrap();
    let state = log
        .session_state(&conv("t:1"), &agent("vorenus"))
        .unwrap()
        .unwrap();
    let current = state.current.unwrap();
    assert_eq!(current.status, legio_core::SessionStatus::Closed);
    assert_eq!(current.checkpoint, Seq(1));
    assert_eq!(current.usage.input, 500);
    assert_eq!(current.provider_session.as_deref(), Some("provider-1"));
    assert_eq!(state.last_seq, Seq(5));
    assert!(log
        .session_state(&conv("t:1"), &agent("pullo"))
        .unwrap()
        .is_none());
    assert_eq!(log.session_states(&conv("t:1")).unwrap().len(), 1);
}

pub fn concurrent_writers_get_unique_gap_free_seqs(log: &dyn EventLog) {
    std::thread::scope(|s| {
        for w in 0..8u64 {
            s.spawn(move || {
                let mut last = Seq::ZERO;
                for i in 0..50u64 {
                    let r = log
                        .append(vec![text_message(w * 1000 + i, "t:1", "user", "lead", "c")])
                        .unwrap();
                    assert!(r.first > last, "one writer's appends are ordered");
                    last = r.first;
                }
            });
        }
    });
    assert_eq!(log.last_seq(), Seq(400));
    let all = log.read_range(Seq(1), Seq(400), 1000).unwrap();
    assert!(all.iter().enumerate().all(|(i, r)| r.seq.0 == i as u64 + 1));
    assert!(log.verify(&mut |_| {}).unwrap().is_clean());
}

pub fn subscription_follows_without_blocking_writers(log: &dyn EventLog) {
    log.append(vec![text_message(1, "t:1", "user", "lead", "before")])
        .unwrap();
    let mut sub = log.subscribe(Seq(1));
    // The subscriber reads nothing while 5,000 events are appended: writers must not wait for it.
    for chunk in 0..50u64 {
        log.append(
            (0..100)
                .map(|i| text_message(10 + chunk * 100 + i, "t:1", "user", "lead", "x"))
                .collect(),
        )
        .unwrap();
    }
    let mut seen = Vec::new();
    while let Some(r) = sub.try_next().unwrap() {
        seen.push(r.seq.0);
    }
    assert_eq!(seen, (1..=5001).collect::<Vec<_>>());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let waiting = async { sub.next().await.unwrap().seq };
        let (seq, ()) = tokio::join!(waiting, async {
            tokio::task::yield_now().await;
            log.submit(vec![text_message(9999, "t:1", "user", "lead", "after")])
                .unwrap()
                .await
                .unwrap();
        });
        assert_eq!(seq, Seq(5002));
    });
}

pub fn verify_is_clean_on_a_healthy_log(log: &dyn EventLog) {
    let mut gen = TrafficGen::new(3, 5, 3, 10, 50);
    log.append((0..200).map(|_| gen.next_message()).collect())
        .unwrap();
    log.append(vec![gen.tool_exchange("bench:0", "a1")])
        .unwrap();
    log.append(vec![
        session_opened(1, "bench:0", "a1", 1),
        turn_completed(2, "bench:0", "a1", 1, 9),
    ])
    .unwrap();
    let mut calls = 0;
    let report = log.verify(&mut |_| calls += 1).unwrap();
    assert!(report.is_clean(), "{:?}", report.findings);
    assert_eq!(report.events, 203);
    assert!(calls >= 1, "verify reports progress");
}

pub fn replies_to_unknown_messages_are_reported(log: &dyn EventLog) {
    let Event::MessagePosted(reply) = text_message(2, "t:1", "lead", "user", "re") else {
        unreachable!()
    };
    let reply = reply.replying_to(message_id(999));
    log.append(vec![
        text_message(1, "t:1", "user", "lead", "q"),
        Event::MessagePosted(reply),
    ])
    .unwrap();
    let report = log.verify(&mut |_| {}).unwrap();
    assert_eq!(
        report.counts.get("reply_to_unknown"),
        Some(&1),
        "{:?}",
        report.findings
    );
}

/// Instantiates every contract test for one implementation. `$make` builds a fresh log; the temp
/// dir it may use lives as long as the test.
macro_rules! contract_suite {
    ($module:ident, $make:expr) => {
        mod $module {
            use super::*;
            fn with_log(test: fn(&dyn EventLog)) {
                let (log, guard) = $make;
                test(&*log);
                // Close the log before its temp dir goes.
                drop(log);
                drop(guard);
            }
            #[test]
            fn appends_get_gap_free_seqs_from_one() {
                with_log(super::appends_get_gap_free_seqs_from_one)
            }
            #[test]
            fn refused_batches_store_nothing() {
                with_log(super::refused_batches_store_nothing)
            }
            #[test]
            fn read_range_bounds_and_limits() {
                with_log(super::read_range_bounds_and_limits)
            }
            #[test]
            fn conversations_are_separate() {
                with_log(super::conversations_are_separate)
            }
            #[test]
            fn visible_window_is_exact_under_fan_out() {
                with_log(super::visible_window_is_exact_under_fan_out)
            }
            #[test]
            fn own_replies_and_broadcasts_are_visible() {
                with_log(super::own_replies_and_broadcasts_are_visible)
            }
            #[test]
            fn session_state_follows_the_events() {
                with_log(super::session_state_follows_the_events)
            }
            #[test]
            fn concurrent_writers_get_unique_gap_free_seqs() {
                with_log(super::concurrent_writers_get_unique_gap_free_seqs)
            }
            #[test]
            fn subscription_follows_without_blocking_writers() {
                with_log(super::subscription_follows_without_blocking_writers)
            }
            #[test]
            fn verify_is_clean_on_a_healthy_log() {
                with_log(super::verify_is_clean_on_a_healthy_log)
            }
            #[test]
            fn replies_to_unknown_messages_are_reported() {
                with_log(super::replies_to_unknown_messages_are_reported)
            }
        }
    };
}

contract_suite!(
    memory,
    (
        Box::new(legio_store::MemoryLog::new()) as Box<dyn EventLog>,
        None::<tempfile::TempDir>
    )
);
contract_suite!(sled_sync, {
    let dir = tempfile::tempdir().unwrap();
    let log =
        legio_store::SledLog::open(dir.path().join("db"), &legio_store::StoreOptions::default())
            .unwrap();
    (Box::new(log) as Box<dyn EventLog>, dir)
});
contract_suite!(sled_relaxed, {
    let dir = tempfile::tempdir().unwrap();
    let options = legio_store::StoreOptions {
        durability: legio_store::Durability::RELAXED,
        ..Default::default()
    };
    let log = legio_store::SledLog::open(dir.path().join("db"), &options).unwrap();
    (Box::new(log) as Box<dyn EventLog>, dir)
});
contract_suite!(nats_one_server, {
    // Skipped (returns) when no nats-server is installed outside CI; fails under CI=true.
    let Some(cluster) = legio_tests::nats::NatsCluster::start(1) else {
        return;
    };
    let log = legio_store::NatsLog::open(&cluster.options(1)).unwrap();
    (Box::new(log) as Box<dyn EventLog>, cluster)
});

/// The chunk-layout ranges on the logs that store chunks (sled, and memory, which shares the
/// layout). Not in the suite above: it makes about 2,300 reads, and the NATS log creates a
/// JetStream consumer per read, which reaches the server's consumer limit.
mod chunk_ranges {
    #[test]
    fn memory() {
        super::read_range_starts_and_ends_inside_chunks(&legio_store::MemoryLog::new());
    }

    #[test]
    fn sled() {
        let dir = tempfile::tempdir().unwrap();
        let log = legio_store::SledLog::open(
            dir.path().join("db"),
            &legio_store::StoreOptions::default(),
        )
        .unwrap();
        super::read_range_starts_and_ends_inside_chunks(&log);
    }
}
