//! Property tests: the log against a plain `Vec` model over random appends, reads, visibility
//! windows and reopenings; and no viewer ever reads a message outside its visibility rule.

use legio_core::{can_see, AgentName, Event, Seq, Viewer};
use legio_store::{EventLog, MemoryLog, NatsLog, NatsOptions, SledLog, StoreOptions};
use legio_tests::*;
use proptest::prelude::*;

const CONVS: [&str; 3] = ["p:0", "p:1", "p:2"];
const AGENTS: [&str; 4] = ["lead", "ann", "bob", "cyd"];

#[derive(Clone, Debug)]
enum Op {
    /// (conversation, sender index or user, audience bits or all)
    Append(Vec<(usize, Option<usize>, Option<u8>)>),
    Read {
        from: u64,
        len: u64,
        limit: usize,
    },
    Window {
        conv: usize,
        viewer: Option<usize>,
        before: u64,
        limit: usize,
    },
    After {
        conv: usize,
        viewer: Option<usize>,
        after: u64,
        limit: usize,
    },
    Reopen,
    /// `flush`: on a log that keeps index items in memory between writes (sled, memory), writes
    /// them, so reads cross from stored entries to pending ones.
    Flush,
}

fn op() -> impl Strategy<Value = Op> {
    let message = (
        0..3usize,
        proptest::option::of(0..4usize),
        proptest::option::of(1..16u8),
    );
    prop_oneof![
        4 => proptest::collection::vec(message, 1..6).prop_map(Op::Append),
        1 => (0..40u64, 0..40u64, 1..20usize).prop_map(|(from, len, limit)| Op::Read { from, len, limit }),
        2 => (0..3usize, proptest::option::of(1..4usize), 0..60u64, 1..12usize)
            .prop_map(|(conv, viewer, before, limit)| Op::Window { conv, viewer, before, limit }),
        1 => (0..3usize, proptest::option::of(1..4usize), 0..40u64, 1..12usize)
            .prop_map(|(conv, viewer, after, limit)| Op::After { conv, viewer, after, limit }),
        1 => Just(Op::Reopen),
        1 => Just(Op::Flush),
    ]
}

fn build(n: u64, conv: usize, sender: Option<usize>, audience: Option<u8>) -> Event {
    let sender = sender.map_or("user", |i| AGENTS[i]);
    let audience = match audience {
        None => "all".to_owned(),
        Some(bits) => {
            let names: Vec<&str> = (0..4)
                .filter(|i| bits & (1 << i) != 0)
                .map(|i| AGENTS[i])
                .collect();
            names.join(",")
        }
    };
    text_message(n, CONVS[conv], sender, &audience, &format!("m{n}"))
}

fn viewer_of(index: Option<usize>, names: &[AgentName]) -> Viewer<'_> {
    match index {
        None => Viewer::Everything,
        Some(i) => Viewer::Specialist(&names[i]),
    }
}

fn seqs(records: &[legio_core::Record]) -> Vec<u64> {
    records.iter().map(|r| r.seq.0).collect()
}

/// Runs `ops` against the log `open()` returns, checking each answer against the model.
fn run(ops: Vec<Op>, mut open: impl FnMut(Option<Box<dyn EventLog>>) -> Box<dyn EventLog>) {
    let names: Vec<AgentName> = AGENTS.iter().map(|n| agent(n)).collect();
    let mut model: Vec<Event> = Vec::new();
    let mut log = open(None);
    let mut n = 0u64;
    for op in ops {
        match op {
            Op::Append(batch) => {
                let events: Vec<Event> = batch
                    .into_iter()
                    .map(|(c, s, a)| {
                        n += 1;
                        build(n, c, s, a)
                    })
                    .collect();
                let range = log.append(events.clone()).unwrap();
                assert_eq!(range.first.0, model.len() as u64 + 1);
                model.extend(events);
                assert_eq!(range.last.0, model.len() as u64);
            }
            Op::Read { from, len, limit } => {
                let to = from + len;
                let got = log.read_range(Seq(from), Seq(to), limit).unwrap();
                let want: Vec<u64> = (from.max(1)..=to.min(model.len() as u64))
                    .take(limit)
                    .collect();
                assert_eq!(seqs(&got), want);
                for r in &got {
                    assert_eq!(r.event, model[r.seq.0 as usize - 1]);
                }
            }
            Op::Window {
                conv: c,
                viewer,
                before,
                limit,
            } => {
                let viewer = viewer_of(viewer, &names);
                // `before` 0 stands for "no bound": the plain window.
                let got = if before == 0 {
                    log.visible_window(&conv(CONVS[c]), viewer, limit).unwrap()
                } else {
                    log.visible_before(&conv(CONVS[c]), viewer, Seq(before), limit)
                        .unwrap()
                };
                let visible: Vec<u64> = model
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| {
                        e.conversation().as_str() == CONVS[c]
                            && can_see(viewer, e.as_message().unwrap())
                    })
                    .map(|(i, _)| i as u64 + 1)
                    .filter(|s| before == 0 || *s < before)
                    .collect();
                assert_eq!(
                    seqs(&got),
                    visible[visible.len().saturating_sub(limit)..].to_vec()
                );
                assert!(got
                    .iter()
                    .all(|r| can_see(viewer, r.event.as_message().unwrap())));
            }
            Op::After {
                conv: c,
                viewer,
                after,
                limit,
            } => {
                let viewer = viewer_of(viewer, &names);
                let got = log
                    .visible_after(&conv(CONVS[c]), viewer, Seq(after), limit)
                    .unwrap();
                let want: Vec<u64> = model
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (i as u64 + 1, e))
                    .filter(|(s, e)| {
                        *s > after
                            && e.conversation().as_str() == CONVS[c]
                            && can_see(viewer, e.as_message().unwrap())
                    })
                    .map(|(s, _)| s)
                    .take(limit)
                    .collect();
                assert_eq!(seqs(&got), want);
            }
            Op::Reopen => {
                log = open(Some(log));
                assert_eq!(log.last_seq().0, model.len() as u64);
            }
            Op::Flush => log.flush().unwrap(),
        }
    }
    assert!(log.verify(&mut |_| {}).unwrap().is_clean());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn memory_log_matches_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        let shared = MemoryLog::new();
        // Reopening a memory log is keeping it: the model must still hold.
        run(ops, |_| Box::new(shared.clone()));
    }

    #[test]
    fn sled_log_matches_the_model_across_reopens(ops in proptest::collection::vec(op(), 1..30)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        run(ops, |previous| {
            drop(previous); // close before reopening: one open per database
            Box::new(SledLog::open(&path, &StoreOptions::default()).unwrap())
        });
    }
}

/// A failure proptest once shrank to (saved in `tests/proptest-regressions/model.txt` before the
/// `Window` op gained `before`, after which its seed no longer produced it), kept as an explicit
/// case: appends across three conversations, windows and reads between two reopenings.
fn recorded_regression() -> Vec<Op> {
    vec![
        Op::Append(vec![
            (2, None, None),
            (1, None, None),
            (1, Some(2), Some(1)),
        ]),
        Op::Window {
            conv: 0,
            viewer: None,
            before: 0,
            limit: 1,
        },
        Op::Window {
            conv: 1,
            viewer: Some(2),
            before: 0,
            limit: 2,
        },
        Op::Window {
            conv: 2,
            viewer: None,
            before: 0,
            limit: 6,
        },
        Op::Append(vec![(2, None, Some(5))]),
        Op::Append(vec![(2, Some(2), None), (1, None, Some(15))]),
        Op::After {
            conv: 2,
            viewer: None,
            after: 28,
            limit: 6,
        },
        Op::Window {
            conv: 1,
            viewer: Some(2),
            before: 0,
            limit: 11,
        },
        Op::Read {
            from: 18,
            len: 18,
            limit: 10,
        },
        Op::Append(vec![
            (0, None, Some(15)),
            (1, None, None),
            (0, None, Some(12)),
            (0, Some(0), None),
        ]),
        Op::Append(vec![
            (0, Some(3), Some(7)),
            (1, None, None),
            (1, None, None),
        ]),
        Op::Append(vec![
            (0, None, None),
            (0, Some(2), Some(13)),
            (0, Some(0), Some(1)),
        ]),
        Op::Reopen,
        Op::Append(vec![
            (0, Some(2), None),
            (1, Some(0), Some(6)),
            (0, Some(2), Some(10)),
        ]),
        Op::Append(vec![(1, None, Some(6))]),
        Op::Append(vec![
            (1, Some(2), Some(4)),
            (0, Some(0), Some(9)),
            (2, None, None),
            (2, Some(3), Some(2)),
        ]),
        Op::After {
            conv: 2,
            viewer: Some(1),
            after: 30,
            limit: 8,
        },
        Op::Append(vec![(0, Some(3), Some(12))]),
        Op::Reopen,
        Op::Read {
            from: 7,
            len: 21,
            limit: 2,
        },
        Op::Append(vec![
            (1, Some(0), Some(14)),
            (2, Some(0), None),
            (2, None, None),
        ]),
        Op::Window {
            conv: 2,
            viewer: None,
            before: 0,
            limit: 8,
        },
        Op::Append(vec![
            (0, Some(1), Some(12)),
            (0, Some(1), None),
            (2, None, None),
            (1, Some(1), Some(2)),
        ]),
        Op::Read {
            from: 26,
            len: 0,
            limit: 19,
        },
        Op::After {
            conv: 0,
            viewer: Some(1),
            after: 0,
            limit: 3,
        },
        Op::Read {
            from: 10,
            len: 23,
            limit: 19,
        },
        Op::Append(vec![
            (1, Some(3), None),
            (2, None, None),
            (1, None, None),
            (0, None, Some(2)),
        ]),
        Op::Reopen,
    ]
}

#[test]
fn recorded_regression_matches_the_model_in_memory_and_on_sled() {
    let shared = MemoryLog::new();
    run(recorded_regression(), |_| Box::new(shared.clone()));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    run(recorded_regression(), |previous| {
        drop(previous);
        Box::new(SledLog::open(&path, &StoreOptions::default()).unwrap())
    });
}

/// The same model test on JetStream: one real nats-server for the whole run, a fresh stream per
/// case, a new `NatsLog` (new connection, projections rebuilt from the stream) at every reopen.
#[test]
fn nats_log_matches_the_model_across_reopens() {
    let Some(cluster) = legio_tests::nats::NatsCluster::start(1) else {
        return;
    };
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 16,
        ..ProptestConfig::default()
    });
    let cases = std::sync::atomic::AtomicUsize::new(0);
    runner
        .run(&proptest::collection::vec(op(), 1..30), |ops| {
            let case = cases.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let options = NatsOptions {
                stream: format!("model{case}"),
                ..cluster.options(1)
            };
            run(ops, |previous| {
                drop(previous);
                Box::new(NatsLog::open(&options).unwrap())
            });
            Ok(())
        })
        .unwrap();
}
