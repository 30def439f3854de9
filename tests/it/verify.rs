//! `verify` finds every kind of damage it names, and only that: each test damages a healthy log in
//! one way through `legio_store::testing::damage` (the one helper a new storage layout ports) and
//! checks the exact findings. Also: recovery on open re-derives the indexes past the watermark,
//! exactly those.

use std::collections::HashMap;

use legio_core::{AgentSessionState, Event, Seq, Viewer};
use legio_store::testing::{damage, Damage};
use legio_store::{encode_event, EventLog, Finding, SledLog, StoreOptions, VerifyReport};
use legio_tests::*;

fn open(path: &std::path::Path) -> SledLog {
    SledLog::open(path, &StoreOptions::default()).unwrap()
}

/// Message 7 replies to message 2.
fn reply(n: u64, to: u64) -> Event {
    let mut event = text_message(n, "t:1", "ann", "user", "done");
    if let Event::MessagePosted(m) = &mut event {
        m.reply_to = Some(message_id(to));
    }
    event
}

/// A healthy log: messages in two conversations, a reply, and one agent's session events.
fn healthy() -> (tempfile::TempDir, SledLog) {
    let dir = tempfile::tempdir().unwrap();
    let log = open(&dir.path().join("db"));
    log.append(vec![
        text_message(1, "t:1", "user", "lead", "m1"),
        text_message(2, "t:1", "user", "ann", "@ann look"),
        session_opened(3, "t:1", "ann", 1),
        context_delivered(4, "t:1", "ann", 1, 2),
        turn_completed(5, "t:1", "ann", 1, 100),
        text_message(6, "t:2", "user", "all", "@all hello"),
        reply(7, 2),
        text_message(8, "t:1", "user", "lead", "m8"),
    ])
    .unwrap();
    assert!(log.verify(&mut |_| {}).unwrap().is_clean());
    (dir, log)
}

/// Damages a healthy log once and returns what verify reports.
fn verify_after(what: Damage) -> VerifyReport {
    let (_dir, log) = healthy();
    damage(&log, what).unwrap();
    log.verify(&mut |_| {}).unwrap()
}

fn counts(report: &VerifyReport) -> HashMap<&'static str, u64> {
    report.counts.clone()
}

fn only(kind: &'static str, n: u64) -> HashMap<&'static str, u64> {
    HashMap::from([(kind, n)])
}

#[test]
fn a_removed_event_is_a_gap_and_nothing_else() {
    let report = verify_after(Damage::RemoveEvent(Seq(6)));
    assert_eq!(counts(&report), only("gap", 1), "{:?}", report.findings);
    assert_eq!(
        report.findings,
        vec![Finding::Gap {
            from: Seq(6),
            to: Seq(6)
        }]
    );
}

#[test]
fn undecodable_records_and_unknown_versions_are_reported_and_nothing_else() {
    let (_dir, log) = healthy();
    damage(
        &log,
        Damage::OverwriteRecord {
            seq: Seq(8),
            bytes: vec![1, 0xde, 0xad],
        },
    )
    .unwrap();
    damage(
        &log,
        Damage::OverwriteRecord {
            seq: Seq(1),
            bytes: vec![9, 0, 0],
        },
    )
    .unwrap();
    let report = log.verify(&mut |_| {}).unwrap();
    assert_eq!(
        counts(&report),
        only("undecodable", 2),
        "{:?}",
        report.findings
    );
    let seqs: Vec<Seq> = report
        .findings
        .iter()
        .map(|f| match f {
            Finding::Undecodable { seq, .. } => *seq,
            other => panic!("{other}"),
        })
        .collect();
    assert_eq!(seqs, vec![Seq(1), Seq(8)]);
}

#[test]
fn a_missing_conversation_index_entry_is_reported_and_nothing_else() {
    let report = verify_after(Damage::RemoveConversationIndexEntry(Seq(2)));
    assert_eq!(
        counts(&report),
        only("missing_index_entry", 1),
        "{:?}",
        report.findings
    );
    assert_eq!(
        report.findings,
        vec![Finding::MissingIndexEntry {
            index: "by_conv",
            seq: Seq(2)
        }]
    );
}

#[test]
fn missing_visibility_index_entries_are_reported_and_nothing_else() {
    // Message 2 is listed under `*` (everything) and under `ann`.
    let report = verify_after(Damage::RemoveVisibleIndexEntries(Seq(2)));
    assert_eq!(
        counts(&report),
        only("missing_index_entry", 2),
        "{:?}",
        report.findings
    );
    assert!(report.findings.iter().all(|f| *f
        == Finding::MissingIndexEntry {
            index: "visible",
            seq: Seq(2)
        }));
}

#[test]
fn a_stray_index_entry_is_reported_and_nothing_else() {
    let report = verify_after(Damage::StrayConversationIndexEntry {
        conversation: conv("t:2"),
        seq: Seq(1),
    });
    assert_eq!(
        counts(&report),
        only("stray_index_entry", 1),
        "{:?}",
        report.findings
    );
    assert_eq!(
        report.findings,
        vec![Finding::StrayIndexEntry {
            index: "by_conv",
            seq: Seq(1)
        }]
    );
}

#[test]
fn a_session_state_that_differs_from_the_events_is_reported_and_nothing_else() {
    let (_dir, log) = healthy();
    let mut state = log
        .session_state(&conv("t:1"), &agent("ann"))
        .unwrap()
        .unwrap();
    state.sessions_opened += 1;
    damage(
        &log,
        Damage::ReplaceSessionState {
            conversation: conv("t:1"),
            agent: agent("ann"),
            state: Box::new(state),
        },
    )
    .unwrap();
    let report = log.verify(&mut |_| {}).unwrap();
    assert_eq!(
        counts(&report),
        only("session_state_mismatch", 1),
        "{:?}",
        report.findings
    );
    assert_eq!(
        report.findings,
        vec![Finding::SessionStateMismatch {
            who: "t:1/ann".into()
        }]
    );
}

#[test]
fn a_session_state_no_event_calls_for_is_reported_and_nothing_else() {
    let report = verify_after(Damage::ReplaceSessionState {
        conversation: conv("t:2"),
        agent: agent("bob"),
        state: Box::new(AgentSessionState::new(conv("t:2"), agent("bob"))),
    });
    assert_eq!(
        counts(&report),
        only("session_state_mismatch", 1),
        "{:?}",
        report.findings
    );
    assert!(
        report.findings[0].to_string().contains("stray entry"),
        "{}",
        report.findings[0]
    );
}

#[test]
fn a_reply_to_an_unknown_message_is_reported_and_nothing_else() {
    // The reply at seq 7 now answers a message that was never posted (same conversation and
    // audience, so its index entries stay right).
    let report = verify_after(Damage::OverwriteRecord {
        seq: Seq(7),
        bytes: encode_event(&reply(7, 99)).unwrap(),
    });
    assert_eq!(
        counts(&report),
        only("reply_to_unknown", 1),
        "{:?}",
        report.findings
    );
    assert_eq!(
        report.findings,
        vec![Finding::ReplyToUnknown {
            seq: Seq(7),
            reply_to: message_id(99)
        }]
    );
}

/// A delivery up to a seq after its own (an edited export, imported): reported, with the
/// session state its checkpoint then feeds.
#[test]
fn an_event_naming_a_later_seq_is_reported() {
    let report = verify_after(Damage::OverwriteRecord {
        seq: Seq(4),
        bytes: encode_event(&context_delivered(4, "t:1", "ann", 1, 500)).unwrap(),
    });
    let mut expected = only("seq_named_ahead", 1);
    expected.insert("session_state_mismatch", 1);
    assert_eq!(counts(&report), expected, "{:?}", report.findings);
    assert!(report.findings.contains(&Finding::SeqNamedAhead {
        seq: Seq(4),
        named: Seq(500)
    }));
}

#[test]
fn a_reused_message_id_is_reported_and_nothing_else() {
    // Message 8 now carries message 1's id (same conversation and audience).
    let mut copy = text_message(8, "t:1", "user", "lead", "m8");
    if let Event::MessagePosted(m) = &mut copy {
        m.id = message_id(1);
    }
    let report = verify_after(Damage::OverwriteRecord {
        seq: Seq(8),
        bytes: encode_event(&copy).unwrap(),
    });
    assert_eq!(
        counts(&report),
        only("duplicate_message_id", 1),
        "{:?}",
        report.findings
    );
    assert_eq!(
        report.findings,
        vec![Finding::DuplicateMessageId {
            seq: Seq(8),
            id: message_id(1)
        }]
    );
}

#[test]
fn a_watermark_behind_the_log_is_reported_and_nothing_else() {
    let report = verify_after(Damage::RewindWatermark(Seq(3)));
    assert_eq!(
        counts(&report),
        only("watermark", 1),
        "{:?}",
        report.findings
    );
    assert_eq!(
        report.findings,
        vec![Finding::Watermark {
            indexed_through: Seq(3),
            last: Seq(8)
        }]
    );
}

/// Recovery on open re-derives exactly the list entries past the watermark (the list entries
/// are written before their watermark): a crash's lost entries are repaired by
/// a reopen; damage below the watermark is not (and verify still names it).
#[test]
fn reopening_rebuilds_the_indexes_past_the_watermark() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let log = open(&path);
    let total = 1_100u64;
    for range in [1..=60, 61..=total] {
        log.append(
            range
                .map(|n| text_message(n, "t:1", "user", "ann", &format!("m{n}")))
                .collect(),
        )
        .unwrap();
    }
    damage(&log, Damage::RemoveConversationIndexEntry(Seq(10))).unwrap();
    damage(&log, Damage::RemoveVisibleIndexEntries(Seq(10))).unwrap();
    // As if the process died after the events past 1,085 were written but before their list
    // entries were (mid-group: recovery re-derives seqs, not whole groups).
    damage(&log, Damage::DropIndexesAfter(Seq(1_085))).unwrap();
    let before = log.verify(&mut |_| {}).unwrap();
    // Per message: its seq in the conversation list (with the message flag that serves `*`)
    // and in `ann`'s list; 1,086 to 1,100 and 10.
    assert_eq!(before.counts.get("missing_index_entry"), Some(&(2 * 16)));
    assert_eq!(before.counts.get("watermark"), Some(&1));
    drop(log);

    let log = open(&path);
    let report = log.verify(&mut |_| {}).unwrap();
    assert_eq!(
        counts(&report),
        only("missing_index_entry", 2),
        "{:?}",
        report.findings
    );
    assert!(report.findings.iter().all(|f| match f {
        Finding::MissingIndexEntry { seq, .. } => *seq == Seq(10),
        _ => false,
    }));
    let window = log
        .visible_window(&conv("t:1"), Viewer::Specialist(&agent("ann")), 20)
        .unwrap();
    let seqs: Vec<u64> = window.iter().map(|r| r.seq.0).collect();
    assert_eq!(seqs, ((total - 19)..=total).collect::<Vec<_>>());
}

/// List entries are written before their watermark, as plain writes: a crash between the two
/// leaves entries past the stored watermark. A reopen writes them again under the same keys:
/// no seq is listed twice or missed, and verify finds nothing.
#[test]
fn list_entries_stored_past_the_watermark_are_replaced_on_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let log = open(&path);
    let messages = |range: std::ops::RangeInclusive<u64>| {
        range
            .map(|n| text_message(n, "t:1", "user", "ann", &format!("m{n}")))
            .collect::<Vec<_>>()
    };
    log.append(messages(1..=40)).unwrap();
    log.flush().unwrap();
    log.append(messages(41..=70)).unwrap();
    log.flush().unwrap();
    // As if the process died after the second write's entries but before its watermark.
    damage(&log, Damage::RewindWatermark(Seq(40))).unwrap();
    drop(log);

    let log = open(&path);
    let report = log.verify(&mut |_| {}).unwrap();
    assert!(report.findings.is_empty(), "{:?}", report.findings);
    let all: Vec<u64> = log
        .conversation_events(&conv("t:1"), Seq::ZERO, 1_000)
        .unwrap()
        .iter()
        .map(|r| r.seq.0)
        .collect();
    assert_eq!(all, (1..=70).collect::<Vec<_>>());
    let window: Vec<u64> = log
        .visible_window(&conv("t:1"), Viewer::Specialist(&agent("ann")), 50)
        .unwrap()
        .iter()
        .map(|r| r.seq.0)
        .collect();
    assert_eq!(window, (21..=70).collect::<Vec<_>>());
}

/// Appended one event at a time (a commit group each), a log's list entries hold the seqs of
/// several groups (merged entries, written every few groups): damage to one group's seqs inside
/// them is found exactly, and so is a stray entry among them.
#[test]
fn damage_inside_list_entries_of_several_groups_is_found_exactly() {
    let cases = [
        (
            Damage::RemoveConversationIndexEntry(Seq(5)),
            "missing_index_entry",
            1,
        ),
        (
            Damage::RemoveVisibleIndexEntries(Seq(5)),
            "missing_index_entry",
            2,
        ),
        (
            Damage::StrayConversationIndexEntry {
                conversation: conv("t:2"),
                seq: Seq(5),
            },
            "stray_index_entry",
            1,
        ),
    ];
    for (what, kind, n) in cases {
        let dir = tempfile::tempdir().unwrap();
        let log = open(&dir.path().join("db"));
        for n in 1..=10u64 {
            let conversation = if n % 2 == 1 { "t:1" } else { "t:2" };
            log.append(vec![text_message(n, conversation, "user", "ann", "hi")])
                .unwrap();
        }
        // Verify writes a live log's pending list items first: none shows as missing.
        assert!(log.verify(&mut |_| {}).unwrap().is_clean());
        damage(&log, what.clone()).unwrap();
        let report = log.verify(&mut |_| {}).unwrap();
        assert_eq!(
            counts(&report),
            only(kind, n),
            "{what:?}: {:?}",
            report.findings
        );
        assert!(report.findings.iter().all(|f| match f {
            Finding::MissingIndexEntry { seq, .. } | Finding::StrayIndexEntry { seq, .. } =>
                *seq == Seq(5),
            _ => false,
        }));
    }
}
