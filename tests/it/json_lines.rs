//! JSON lines written straight into a buffer (`RecordJson`: `legio export`, `legio replay
//! --format jsonl`) are byte for byte the lines of the `Value` way (`record_to_json`, then
//! written), which the export/import golden outputs and the schema pin: on every golden sample
//! (every event kind and message part), on the real messages of `../shared/data/tau-bench-airline`
//! (tool calls with JSON arguments, unicode, long texts; skipped without the folder), and on texts
//! and names full of characters JSON escapes.

use legio_core::{
    record_to_json, AgentName, Audience, ConversationKey, Event, Message, MessageId, Part,
    Participant, Record, RecordJson, Seq, Timestamp,
};

use crate::golden::all_samples;

/// Checks every record with one reused writer (stale state from one record must not leak into
/// the next); returns how many were checked.
fn check(records: impl IntoIterator<Item = Record>) -> usize {
    let mut writer = RecordJson::default();
    let mut line = Vec::new();
    let mut checked = 0;
    for record in records {
        line.clear();
        writer.write(&record, &mut line);
        let expected = serde_json::to_vec(&record_to_json(&record)).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&line),
            String::from_utf8_lossy(&expected),
            "seq {}",
            record.seq
        );
        checked += 1;
    }
    checked
}

fn numbered(events: impl IntoIterator<Item = Event>) -> impl Iterator<Item = Record> {
    events.into_iter().enumerate().map(|(i, event)| Record {
        seq: Seq(i as u64 * 7919 + 1),
        event,
    })
}

#[test]
fn every_golden_sample_is_written_as_its_json_value() {
    let all: Vec<Event> = all_samples();
    assert_eq!(check(numbered(all.clone())), all.len());
}

#[test]
fn escaped_texts_and_every_part_are_written_as_their_json_value() {
    let texts = [
        "",
        "plain",
        "quote \" backslash \\ slash / nul \u{0} bell \u{7} esc \u{1b}[2J del \u{7f}",
        "line\nbreak\r\ttab \u{2028} \u{2029} \u{202e}rtl é ✓ 𝄞",
        "{\"looks\": [\"like\", \"json\"]}",
    ];
    let conv = ConversationKey::new("json:escapes").unwrap();
    let agent = Participant::Agent(AgentName::new("vorenus").unwrap());
    let events = texts.iter().enumerate().map(|(i, text)| {
        let at = Timestamp::from_unix_micros(1_700_000_000_000_000 + i as i64 * 1_234_567);
        let id = MessageId::from_parts(at, [i as u8; 10]);
        let mut message = Message::text(id, conv.clone(), agent.clone(), Audience::All, *text, at);
        message.parts.push(Part::ToolCall {
            id: format!("call_{text}"),
            name: "lookup".into(),
            arguments: format!("{{\"q\": {:?}}}", text),
        });
        message.parts.push(Part::ToolResult {
            call_id: format!("call_{text}"),
            content: text.repeat(3),
            is_error: i.is_multiple_of(2),
        });
        if !i.is_multiple_of(2) {
            message.audience = Audience::only([Participant::User, agent.clone()]);
            message.reply_to = Some(MessageId::from_parts(at, [9; 10]));
        }
        Event::MessagePosted(message)
    });
    assert_eq!(check(numbered(events)), texts.len());
}

#[test]
fn real_transcript_messages_are_written_as_their_json_value() {
    let Some(messages) = crate::tool_links::transcript_messages() else {
        return;
    };
    let count = messages.len();
    assert_eq!(check(numbered(messages)), count);
}
