//! Golden files: the stored v1 encoding must keep decoding. If this test fails, a change broke the
//! format of existing logs: add a new format version and an upcast instead (docs/storage.md).
//! `events-v1.bin` holds the first variants; `events-v1-memory.bin` the variants appended later
//! (memory stores, heartbeats); `events-v1-tools.bin` the host's tool declarations; `events-v1-approvals.bin` the approvals of tool calls; `events-v1-instructions.bin` the
//! host's instructions for a turn. To write a file after adding events to its samples (new variants
//! only), run with `LEGIO_BLESS=1` and commit the file.
//!
//! Session states (the `sessions` index) have their own versions: `session-state-v1.bin` holds
//! states as the builds before compaction wrote them (never rewritten: no build writes v1 now) and
//! `session-state-v2.bin` the current version. Every sample event is also checked against
//! `proto/events.schema.json` as its JSON line.

use legio_core::AgentSessionState;
use legio_core::{
    AgentFailed, BoundaryReason, DeclaredTool, DeliveryMode, DirectivePublished, DirectiveRevoked,
    Event, EventKind, HeartbeatRan, InstructionsGiven, NoteWritten, NotebookEntryAppended,
    OpenReason, Seq, SessionStart, SummaryRecorded, TokenUsage, ToolsDeclared, TurnFailed,
};
use legio_store::testing::{decode_session_state, encode_session_state, STATE_FORMAT_VERSION};
use legio_store::{decode_event, encode_event, FORMAT_VERSION};
use legio_tests::*;

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/events-v1.bin");
const GOLDEN_MEMORY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/golden/events-v1-memory.bin"
);
const GOLDEN_TOOLS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/golden/events-v1-tools.bin"
);
const GOLDEN_APPROVALS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/golden/events-v1-approvals.bin"
);
const GOLDEN_INSTRUCTIONS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/golden/events-v1-instructions.bin"
);
const GOLDEN_STATE_V1: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/golden/session-state-v1.bin"
);
const GOLDEN_STATE_V2: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/golden/session-state-v2.bin"
);
const EVENTS_SCHEMA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/proto/events.schema.json");

/// One sample of every event variant and every message part, with fixed values.
pub(crate) fn samples() -> Vec<Event> {
    let mut gen = TrafficGen::new(1, 3, 1, 0, 8);
    let Event::SessionOpened(mut resumed) = session_opened(5, "golden:1", "vorenus", 2) else {
        unreachable!()
    };
    resumed.why = OpenReason::After(BoundaryReason::Crashed);
    resumed.how = SessionStart::Resumed {
        provider_session: "resp_abc".into(),
        checkpoint: Seq(4),
    };
    let Event::ContextDelivered(mut full) = context_delivered(7, "golden:1", "vorenus", 2, 6)
    else {
        unreachable!()
    };
    full.mode = DeliveryMode::Full;
    let Event::SessionClosed(suspended) =
        session_closed(9, "golden:1", "vorenus", 2, BoundaryReason::Idle)
    else {
        unreachable!()
    };
    vec![
        text_message(
            1,
            "golden:1",
            "user",
            "vorenus,pullo",
            "@vorenus @pullo compare",
        ),
        text_message(2, "golden:1", "vorenus", "user", "my position"),
        text_message(3, "golden:1", "user", "all", "@all status"),
        gen.tool_exchange("golden:1", "pullo"),
        session_opened(4, "golden:1", "vorenus", 1),
        Event::SessionOpened(resumed),
        context_delivered(6, "golden:1", "vorenus", 2, 5),
        Event::ContextDelivered(full),
        turn_completed(8, "golden:1", "vorenus", 2, 1234),
        Event::TurnFailed(TurnFailed {
            conversation: conv("golden:1"),
            agent: agent("pullo"),
            session: None,
            at: ts(9),
            error: "timeout after 300 s".into(),
        }),
        Event::SessionSuspended(suspended),
        session_closed(10, "golden:1", "vorenus", 2, BoundaryReason::ManualReset),
        Event::SummaryRecorded(SummaryRecorded {
            conversation: conv("golden:1"),
            agent: agent("vorenus"),
            at: ts(11),
            covers_up_to: Seq(8),
            text: "decisions: ship it".into(),
            tokens_before: 9000,
            tokens_after: 300,
        }),
        Event::AgentFailed(AgentFailed {
            conversation: conv("golden:1"),
            agent: agent("pullo"),
            at: ts(12),
            reason: "panicked".into(),
            restarts: 5,
        }),
    ]
}

/// One sample of every variant appended after `events-v1.bin` was written.
pub(crate) fn memory_samples() -> Vec<Event> {
    vec![
        Event::DirectivePublished(DirectivePublished {
            id: "d1".into(),
            by: agent("lead"),
            at: ts(20),
            text: "ship at noon".into(),
        }),
        Event::DirectiveRevoked(DirectiveRevoked {
            id: "d1".into(),
            by: agent("lead"),
            at: ts(21),
            reason: Some("shipped".into()),
        }),
        Event::DirectiveRevoked(DirectiveRevoked {
            id: "d2".into(),
            by: agent("lead"),
            at: ts(22),
            reason: None,
        }),
        Event::NoteWritten(NoteWritten {
            key: "api-version".into(),
            author: agent("pullo"),
            at: ts(23),
            text: "v2 since Tuesday".into(),
        }),
        Event::NotebookEntryAppended(NotebookEntryAppended {
            owner: agent("vorenus"),
            at: ts(24),
            text: "the lead prefers small PRs".into(),
        }),
        Event::HeartbeatRan(HeartbeatRan {
            conversation: conv("golden:1"),
            agent: agent("vorenus"),
            at: ts(25),
            prompt_hash: "abc123".into(),
            prompt: "anything due?".into(),
            reply: Some("nothing".into()),
            error: None,
            usage: TokenUsage {
                input: 40,
                output: 2,
                cache_read: 1,
                cache_write: 0,
            },
        }),
        Event::HeartbeatRan(HeartbeatRan {
            conversation: conv("golden:1"),
            agent: agent("pullo"),
            at: ts(26),
            prompt_hash: "abc123".into(),
            prompt: "anything due?".into(),
            reply: None,
            error: Some("timeout".into()),
            usage: TokenUsage::default(),
        }),
    ]
}

/// One sample of every variant appended after `events-v1-memory.bin` was written.
pub(crate) fn tools_samples() -> Vec<Event> {
    vec![
        Event::ToolsDeclared(ToolsDeclared {
            conversation: conv("golden:1"),
            at: ts(27),
            tools: vec![
                DeclaredTool {
                    name: "lookup_order".into(),
                    description: "Finds an order by its number".into(),
                    parameters: r#"{"type":"object","properties":{"number":{"type":"string"}},"required":["number"]}"#.into(),
                },
                DeclaredTool {
                    name: "now".into(),
                    description: String::new(),
                    parameters: r#"{"type":"object"}"#.into(),
                },
            ],
        }),
        Event::ToolsDeclared(ToolsDeclared {
            conversation: conv("golden:1"),
            at: ts(28),
            tools: Vec::new(),
        }),
    ]
}

/// One sample of every variant appended after `events-v1-tools.bin` was written: a request and
/// each decision.
pub(crate) fn approvals_samples() -> Vec<Event> {
    use legio_core::{ApprovalAnswered, ApprovalDecision, ApprovalRequested, MessageId};
    let call_message = MessageId::from_parts(ts(29), [7; 10]);
    let answered = |at, call_id: &str, decision, by: &str, reason: Option<&str>| {
        Event::ApprovalAnswered(ApprovalAnswered {
            conversation: conv("golden:1"),
            agent: agent("vorenus"),
            at: ts(at),
            call_id: call_id.into(),
            decision,
            by: by.into(),
            reason: reason.map(str::to_owned),
        })
    };
    vec![
        Event::ApprovalRequested(ApprovalRequested {
            conversation: conv("golden:1"),
            agent: agent("vorenus"),
            at: ts(29),
            call_message,
            call_id: "call_pay_1".into(),
            tool: "pay".into(),
            arguments: r#"{"amount":12}"#.into(),
            pattern: "pay".into(),
            deadline: ts(90),
        }),
        answered(30, "call_pay_1", ApprovalDecision::Approved, "cli", None),
        answered(
            31,
            "call_rm_2",
            ApprovalDecision::Denied,
            "http:ops",
            Some("not today"),
        ),
        answered(32, "call_x_3", ApprovalDecision::TimedOut, "deadline", None),
    ]
}

/// One sample of every variant appended after `events-v1-approvals.bin` was written.
pub(crate) fn instructions_samples() -> Vec<Event> {
    vec![Event::InstructionsGiven(InstructionsGiven {
        conversation: conv("golden:1"),
        agent: agent("ann"),
        for_message: legio_core::MessageId::from_parts(ts(29), [7; 10]),
        at: ts(29),
        text: "Answer in one short line.".into(),
    })]
}

/// Every sample, of every golden file, in file order.
pub(crate) fn all_samples() -> Vec<Event> {
    let mut all = samples();
    all.extend(memory_samples());
    all.extend(tools_samples());
    all.extend(approvals_samples());
    all.extend(instructions_samples());
    all
}

fn frame(records: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in records {
        out.extend_from_slice(&(r.len() as u32).to_le_bytes());
        out.extend_from_slice(r);
    }
    out
}

/// The records of a golden file: each one a u32 LE length, then its bytes.
pub(crate) fn unframe(mut bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while bytes.len() >= 4 {
        let len = u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
        out.push(bytes[4..4 + len].to_vec());
        bytes = &bytes[4 + len..];
    }
    out
}

/// The records of the golden file at `path` decode to `samples` and encode to the same bytes.
fn check_golden(path: &str, samples: Vec<Event>) {
    assert_eq!(
        FORMAT_VERSION, 1,
        "a new format version needs its own golden file and this test extended"
    );
    let encoded: Vec<Vec<u8>> = samples.iter().map(|e| encode_event(e).unwrap()).collect();
    if std::env::var_os("LEGIO_BLESS").is_some() {
        std::fs::create_dir_all(std::path::Path::new(path).parent().unwrap()).unwrap();
        std::fs::write(path, frame(&encoded)).unwrap();
    }
    let golden = std::fs::read(path)
        .expect("golden file missing: run once with LEGIO_BLESS=1 and commit it");
    let stored = unframe(&golden);
    assert!(
        stored.len() <= samples.len(),
        "the golden file has records this test no longer builds"
    );
    for (i, bytes) in stored.iter().enumerate() {
        assert_eq!(bytes[0], 1, "record {i} is not v1");
        let decoded = decode_event(Seq(i as u64 + 1), bytes)
            .unwrap_or_else(|e| panic!("golden record {i}: {e}"));
        assert_eq!(
            decoded, samples[i],
            "golden record {i} decodes to something else"
        );
        assert_eq!(
            &encoded[i], bytes,
            "record {i} now encodes differently: that breaks old logs"
        );
    }
    assert_eq!(
        stored.len(),
        samples.len(),
        "new samples: re-bless with LEGIO_BLESS=1 (appending is compatible)"
    );
}

#[test]
fn v1_records_still_decode_and_encode_identically() {
    check_golden(GOLDEN, samples());
}

#[test]
fn v1_memory_and_heartbeat_records_still_decode_and_encode_identically() {
    check_golden(GOLDEN_MEMORY, memory_samples());
}

#[test]
fn v1_tool_declaration_records_still_decode_and_encode_identically() {
    check_golden(GOLDEN_TOOLS, tools_samples());
}

#[test]
fn v1_approval_records_still_decode_and_encode_identically() {
    check_golden(GOLDEN_APPROVALS, approvals_samples());
}

#[test]
fn v1_instructions_records_still_decode_and_encode_identically() {
    check_golden(GOLDEN_INSTRUCTIONS, instructions_samples());
}

#[test]
fn the_golden_samples_cover_every_event_kind() {
    let covered: std::collections::BTreeSet<EventKind> =
        all_samples().iter().map(Event::kind).collect();
    let missing: Vec<&str> = EventKind::ALL
        .into_iter()
        .filter(|k| !covered.contains(k))
        .map(EventKind::as_str)
        .collect();
    assert!(
        missing.is_empty(),
        "no golden sample of {missing:?}: add one (in a new golden file if the old ones are full)"
    );
}

#[test]
fn every_event_round_trips_through_its_json_line() {
    for (i, event) in all_samples().into_iter().enumerate() {
        let record = legio_core::Record {
            seq: Seq(i as u64 + 1),
            event,
        };
        let json = legio_core::record_to_json(&record);
        assert_eq!(json["kind"], record.event.kind().as_str());
        let line = serde_json::to_string(&json).unwrap();
        let back = legio_core::record_from_json(serde_json::from_str(&line).unwrap()).unwrap();
        assert_eq!(back, record, "{line}");
    }
    let first = legio_core::record_to_json(&legio_core::Record {
        seq: Seq(1),
        event: samples().remove(0),
    });
    assert_eq!(first["sender"], "user");
    assert_eq!(first["audience"], serde_json::json!(["pullo", "vorenus"]));
    assert_eq!(
        first["parts"][0],
        serde_json::json!({"type": "text", "text": "@vorenus @pullo compare"})
    );
    let bad = serde_json::json!({"seq": 1, "kind": "message_posted", "id": "nope"});
    assert!(legio_core::record_from_json(bad).is_err());
}

/// Session states folded from fixed events: fresh, with a live session and usage, closed and
/// failed; and (version 2 only) with a summary.
fn state_samples(with_summary: bool) -> Vec<AgentSessionState> {
    let fold = |events: &[Event]| {
        let mut state = AgentSessionState::new(conv("golden:1"), agent("vorenus"));
        for (i, event) in events.iter().enumerate() {
            state.apply(Seq(i as u64 + 1), event);
        }
        state
    };
    let live = [
        session_opened(1, "golden:1", "vorenus", 1),
        context_delivered(2, "golden:1", "vorenus", 1, 1),
        turn_completed(3, "golden:1", "vorenus", 1, 1234),
    ];
    let mut failed = live.to_vec();
    failed.push(session_closed(
        4,
        "golden:1",
        "vorenus",
        1,
        BoundaryReason::Crashed,
    ));
    failed.push(Event::AgentFailed(AgentFailed {
        conversation: conv("golden:1"),
        agent: agent("vorenus"),
        at: ts(5),
        reason: "panicked".into(),
        restarts: 3,
    }));
    let mut out = vec![fold(&[]), fold(&live), fold(&failed)];
    if with_summary {
        let mut summarized = live.to_vec();
        summarized.push(Event::SummaryRecorded(SummaryRecorded {
            conversation: conv("golden:1"),
            agent: agent("vorenus"),
            at: ts(4),
            covers_up_to: Seq(2),
            text: "decisions: ship it".into(),
            tokens_before: 900,
            tokens_after: 30,
        }));
        out.push(fold(&summarized));
    }
    out
}

/// Version-1 session states (before `latest_summary`) decode, upcast with no summary.
#[test]
fn v1_session_states_still_decode() {
    let golden = std::fs::read(GOLDEN_STATE_V1).expect("session-state-v1.bin is committed");
    let stored = unframe(&golden);
    let samples = state_samples(false);
    assert_eq!(stored.len(), samples.len());
    for (i, (bytes, want)) in stored.iter().zip(samples).enumerate() {
        assert_eq!(bytes[0], 1, "state {i} is not v1");
        let state = decode_session_state(bytes, "golden:1", "vorenus")
            .unwrap_or_else(|e| panic!("golden v1 state {i}: {e}"));
        assert_eq!(state, want, "golden v1 state {i} decodes to something else");
    }
}

/// Version-2 session states decode and encode to the same bytes.
#[test]
fn v2_session_states_still_decode_and_encode_identically() {
    assert_eq!(
        STATE_FORMAT_VERSION, 2,
        "a new session-state version needs its own golden file and this test extended"
    );
    let samples = state_samples(true);
    let encoded: Vec<Vec<u8>> = samples
        .iter()
        .map(|s| encode_session_state(s).unwrap())
        .collect();
    if std::env::var_os("LEGIO_BLESS").is_some() {
        std::fs::write(GOLDEN_STATE_V2, frame(&encoded)).unwrap();
    }
    let golden = std::fs::read(GOLDEN_STATE_V2)
        .expect("golden file missing: run once with LEGIO_BLESS=1 and commit it");
    let stored = unframe(&golden);
    assert_eq!(stored.len(), samples.len(), "re-bless with LEGIO_BLESS=1");
    for (i, bytes) in stored.iter().enumerate() {
        assert_eq!(bytes[0], 2, "state {i} is not v2");
        let state = decode_session_state(bytes, "golden:1", "vorenus")
            .unwrap_or_else(|e| panic!("golden v2 state {i}: {e}"));
        assert_eq!(
            state, samples[i],
            "golden v2 state {i} decodes to something else"
        );
        assert_eq!(
            &encoded[i], bytes,
            "state {i} now encodes differently: that breaks stored session states"
        );
    }
}

/// Every event kind (and every message part) validates against `proto/events.schema.json` as
/// its JSON line; the schema also refuses a line with an unknown field.
#[test]
fn every_event_kind_validates_against_the_schema() {
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(EVENTS_SCHEMA).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let mut kinds = std::collections::BTreeSet::new();
    for (i, event) in all_samples().into_iter().enumerate() {
        kinds.insert(event.kind());
        let json = legio_core::record_to_json(&legio_core::Record {
            seq: Seq(i as u64 + 1),
            event,
        });
        let errors: Vec<String> = validator
            .iter_errors(&json)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{json}: {errors:?}");
        let mut extra = json.clone();
        extra["unexpected"] = serde_json::json!(1);
        assert!(
            !validator.is_valid(&extra),
            "the schema accepts an unknown field: {extra}"
        );
    }
    assert_eq!(kinds.len(), EventKind::ALL.len(), "every kind is validated");
}
