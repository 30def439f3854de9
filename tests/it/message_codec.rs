//! The hand decoder of stored messages (legio-store `message_codec.rs`, taken by `decode_event`)
//! against the serde decoder it replaces for messages (`testing::decode_event_with_serde`): the
//! same event for every golden sample and golden file record, the real messages of
//! `../shared/data/tau-bench-airline` (skipped without the folder), generated traffic of every
//! event kind and part, long texts (wider length prefixes) and odd timestamps; and for damaged
//! records (every byte changed to a set of values, truncations, a trailing byte), the same
//! outcome: the same event, or an error with the same text.

use legio_core::{
    AgentName, Audience, ConversationKey, Event, Message, MessageId, Part, Participant, Seq,
    Timestamp,
};
use legio_store::testing::decode_event_with_serde;
use legio_store::{decode_event, encode_event};
use legio_tests::TrafficGen;

use crate::golden::{all_samples, samples};

/// Both decoders give the same answer for `bytes`; returns whether it was an event.
fn same_outcome(bytes: &[u8]) -> bool {
    let seq = Seq(42);
    match (
        decode_event(seq, bytes),
        decode_event_with_serde(seq, bytes),
    ) {
        (Ok(fast), Ok(serde)) => {
            assert_eq!(fast, serde, "{bytes:?}");
            true
        }
        (Err(fast), Err(serde)) => {
            assert_eq!(fast.to_string(), serde.to_string(), "{bytes:?}");
            false
        }
        (fast, serde) => panic!("the decoders disagree on {bytes:?}: {fast:?} against {serde:?}"),
    }
}

/// Every event encodes and decodes back to itself through both decoders.
fn check_events(events: impl IntoIterator<Item = Event>) -> usize {
    let mut checked = 0;
    for event in events {
        let bytes = encode_event(&event).unwrap();
        assert!(same_outcome(&bytes), "{event:?}");
        assert_eq!(decode_event(Seq(1), &bytes).unwrap(), event);
        checked += 1;
    }
    checked
}

fn golden_records(path: &str) -> Vec<Vec<u8>> {
    crate::golden::unframe(&std::fs::read(path).unwrap())
}

/// Messages the generator and samples do not make: texts long enough for 2- and 4-byte length
/// prefixes, unicode, a reply, negative and extreme timestamps, empty parts, mixed audiences,
/// and a sender one byte away from a reserved name (`alm`, damaged below into `all`).
fn odd_messages() -> Vec<Event> {
    let conversation = ConversationKey::new("odd:1").unwrap();
    let alm = Participant::Agent(AgentName::new("alm").unwrap());
    let texts = [
        String::new(),
        "é ✓ 𝄞 \u{0} \u{2028}".to_owned(),
        "y".repeat(250),
        "y".repeat(251),
        "z".repeat(65_536),
    ];
    let times = [i64::MIN, -1, 0, 1, i64::MAX, 1_771_156_800_000_000];
    let mut out = Vec::new();
    for (i, text) in texts.iter().enumerate() {
        for (j, &micros) in times.iter().enumerate() {
            let at = Timestamp::from_unix_micros(micros);
            let id = MessageId::from_parts(at, [(i * 7 + j) as u8; 10]);
            let mut message = Message::text(
                id,
                conversation.clone(),
                alm.clone(),
                Audience::only([Participant::User, alm.clone()]),
                text.clone(),
                at,
            );
            if j % 2 == 0 {
                message.reply_to = Some(MessageId::from_parts(at, [3; 10]));
                message.sender = Participant::User;
                message.audience = Audience::All;
            }
            if j == 1 {
                message.parts.clear();
            }
            out.push(Event::MessagePosted(message));
        }
    }
    out.push(Event::MessagePosted(Message {
        parts: vec![
            Part::ToolResult {
                call_id: "c".into(),
                content: "failed".into(),
                is_error: true,
            },
            Part::text("after"),
        ],
        audience: Audience::Only(Vec::new()),
        ..Message::text(
            MessageId::from_parts(Timestamp::from_unix_micros(5), [1; 10]),
            conversation,
            Participant::User,
            Audience::All,
            "",
            Timestamp::from_unix_micros(5),
        )
    }));
    out
}

#[test]
fn every_golden_sample_and_golden_record_decodes_the_same() {
    let all: Vec<Event> = all_samples();
    assert_eq!(check_events(all.clone()), all.len());
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden");
    let mut records = golden_records(&format!("{dir}/events-v1.bin"));
    records.extend(golden_records(&format!("{dir}/events-v1-memory.bin")));
    records.extend(golden_records(&format!("{dir}/events-v1-tools.bin")));
    records.extend(golden_records(&format!("{dir}/events-v1-approvals.bin")));
    records.extend(golden_records(&format!("{dir}/events-v1-instructions.bin")));
    assert_eq!(records.len(), all.len());
    for bytes in &records {
        assert!(same_outcome(bytes));
    }
}

#[test]
fn generated_traffic_and_odd_messages_decode_the_same() {
    let mut gen = TrafficGen::new(7, 12, 3, 10, 40);
    let mut events: Vec<Event> = (0..2_000).map(|_| gen.next_message()).collect();
    events.extend(
        (0..50).map(|i| gen.tool_exchange("gen:1", if i % 2 == 0 { "user" } else { "a1" })),
    );
    events.extend(odd_messages());
    let kinds: std::collections::BTreeSet<_> = all_samples()
        .into_iter()
        .chain(events.iter().cloned())
        .map(|e| e.kind())
        .collect();
    assert_eq!(
        kinds.len(),
        legio_core::EventKind::ALL.len(),
        "every event kind is covered"
    );
    assert_eq!(check_events(events.clone()), events.len());
}

#[test]
fn real_transcript_messages_decode_the_same() {
    let Some(messages) = crate::tool_links::transcript_messages() else {
        return;
    };
    let count = messages.len();
    assert_eq!(check_events(messages), count);
}

/// Damaged records: each byte of each message record (short ones: every sample message and the
/// odd ones under 300 bytes) set to values that hit every decision of the decoder (varint markers,
/// bool and option bytes, name and UTF-8 rules), each truncation, a trailing byte, and a length
/// prefix written in a wider varint form (which bincode accepts).
#[test]
fn damaged_message_records_fail_or_decode_the_same() {
    let messages: Vec<Vec<u8>> = samples()
        .into_iter()
        .chain(odd_messages())
        .filter(|e| matches!(e, Event::MessagePosted(_)))
        .map(|e| encode_event(&e).unwrap())
        .filter(|bytes| bytes.len() < 300)
        .collect();
    assert!(messages.len() > 10);
    let mut decoded = 0;
    let mut refused = 0;
    let mut tally = |ok: bool| if ok { decoded += 1 } else { refused += 1 };
    for record in &messages {
        for at in 0..record.len() {
            let b = record[at];
            let values = [
                0,
                1,
                2,
                3,
                16,
                17,
                b'A',
                b'a',
                b'l',
                b':',
                0x80,
                0xc3,
                250,
                251,
                252,
                253,
                254,
                255,
                b ^ 1,
                b ^ 0x80,
                b.wrapping_add(1),
                b.wrapping_sub(1),
            ];
            for value in values {
                let mut damaged = record.clone();
                damaged[at] = value;
                tally(same_outcome(&damaged));
            }
            tally(same_outcome(&record[..at]));
        }
        let mut longer = record.clone();
        longer.push(0);
        tally(same_outcome(&longer));
    }
    // A wide length prefix: the text's one-byte length as [251, len, 0].
    let text = "wide prefix";
    let Event::MessagePosted(mut message) = samples().remove(0) else {
        unreachable!()
    };
    message.parts = vec![Part::text(text)];
    let bytes = encode_event(&Event::MessagePosted(message.clone())).unwrap();
    let at = bytes
        .windows(text.len())
        .position(|w| w == text.as_bytes())
        .unwrap();
    let mut wide = bytes[..at - 1].to_vec();
    wide.extend_from_slice(&[251, text.len() as u8, 0]);
    wide.extend_from_slice(&bytes[at..]);
    assert!(same_outcome(&wide));
    assert_eq!(
        decode_event(Seq(1), &wide).unwrap(),
        Event::MessagePosted(message)
    );
    assert!(
        decoded > 100 && refused > 1000,
        "{decoded} decoded, {refused} refused"
    );
}
