//! Real tool calls with ids (`../shared/data/tau-bench-airline`, 200 gpt-4o conversations):
//! written to a sled log as messages with tool-call and tool-result parts, every result stays
//! linked to its call by id after a reopen (a process restart), and compaction's boundary never
//! separates a call from its result, for every prefix of every conversation and every
//! `keep_recent` from 1 to 8. Without the data folder (beside the clone, as in CI) it fails under
//! `CI=true` and skips with a message elsewhere.

use std::collections::HashSet;
use std::path::Path;

use legio_core::{
    summary_boundary, AgentName, Audience, ContextItem, ConversationKey, Event, Message, MessageId,
    Part, Participant, Seq, Timestamp,
};
use legio_store::{EventLog, SledLog, StoreOptions};

/// Every message of the real transcripts, as events, with at least 4,000 of them (`None`: the
/// data is not there).
pub(crate) fn transcript_messages() -> Option<Vec<legio_core::Event>> {
    let messages: Vec<legio_core::Event> = conversations()?
        .into_iter()
        .flatten()
        .map(legio_core::Event::MessagePosted)
        .collect();
    assert!(
        messages.len() > 4000,
        "the set has over 4,000 messages: {}",
        messages.len()
    );
    Some(messages)
}

pub(crate) fn conversations() -> Option<Vec<Vec<Message>>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data/tau-bench-airline/gpt-4o-airline.json");
    let Ok(text) = std::fs::read_to_string(&path) else {
        legio_tests::component_missing(
            &path.display().to_string(),
            "put the shared data folder (with tau-bench-airline/) beside the clone, as ../shared/data",
        );
        return None;
    };
    let runs: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    let agent = Participant::Agent(AgentName::new("agent").unwrap());
    let mut out = Vec::new();
    for (n, run) in runs.iter().enumerate() {
        let key = ConversationKey::new(format!("tau:{n}")).unwrap();
        let mut messages = Vec::new();
        for (i, m) in run["traj"].as_array().unwrap().iter().enumerate() {
            let at = Timestamp::from_unix_micros(1_700_000_000_000_000 + (n * 1000 + i) as i64);
            let id = MessageId::from_parts(
                at,
                [(n % 251) as u8, (i % 251) as u8, 0, 0, 0, 0, 0, 0, 0, 1],
            );
            let content = m["content"].as_str().unwrap_or_default().to_owned();
            let (sender, mut parts) = match m["role"].as_str().unwrap() {
                "system" => continue,
                "user" => (Participant::User, vec![]),
                "assistant" => (agent.clone(), vec![]),
                "tool" => {
                    let call_id = m["tool_call_id"].as_str().unwrap().to_owned();
                    let result = Part::ToolResult {
                        call_id,
                        content: content.clone(),
                        is_error: false,
                    };
                    (agent.clone(), vec![result])
                }
                other => panic!("unexpected role {other}"),
            };
            if m["role"] != "tool" && !content.is_empty() {
                parts.push(Part::text(content));
            }
            for call in m["tool_calls"].as_array().into_iter().flatten() {
                parts.push(Part::ToolCall {
                    id: call["id"].as_str().unwrap().to_owned(),
                    name: call["function"]["name"].as_str().unwrap().to_owned(),
                    arguments: call["function"]["arguments"].as_str().unwrap().to_owned(),
                });
            }
            if parts.is_empty() {
                continue;
            }
            let mut message = Message::text(id, key.clone(), sender, Audience::All, "", at);
            message.parts = parts;
            messages.push(message);
        }
        out.push(messages);
    }
    Some(out)
}

fn calls_and_results(messages: &[Message]) -> (Vec<String>, Vec<String>) {
    let (mut calls, mut results) = (Vec::new(), Vec::new());
    for part in messages.iter().flat_map(|m| &m.parts) {
        match part {
            Part::ToolCall { id, .. } => calls.push(id.clone()),
            Part::ToolResult { call_id, .. } => results.push(call_id.clone()),
            Part::Text { .. } => {}
        }
    }
    (calls, results)
}

#[test]
fn every_tool_result_stays_linked_to_its_call_across_a_restart_and_compaction() {
    let Some(conversations) = conversations() else {
        return;
    };
    let total_calls: usize = conversations
        .iter()
        .map(|c| calls_and_results(c).0.len())
        .sum();
    assert!(
        total_calls > 1000,
        "the set has 1,164 tool calls: {total_calls}"
    );

    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions::default();
    {
        let log = SledLog::open(dir.path(), &options).unwrap();
        for messages in &conversations {
            log.append(messages.iter().cloned().map(Event::MessagePosted).collect())
                .unwrap();
        }
        log.flush().unwrap();
    }
    // A new process reads them back.
    let log = SledLog::open(dir.path(), &options).unwrap();
    for (n, messages) in conversations.iter().enumerate() {
        let key = ConversationKey::new(format!("tau:{n}")).unwrap();
        let records = log
            .conversation_events(&key, Seq::ZERO, usize::MAX)
            .unwrap();
        let stored: Vec<Message> = records
            .iter()
            .map(|r| r.event.as_message().unwrap().clone())
            .collect();
        assert_eq!(&stored, messages, "conversation {n} reads back exactly");
        let (calls, results) = calls_and_results(&stored);
        let calls: HashSet<&String> = calls.iter().collect();
        for result in &results {
            assert!(
                calls.contains(result),
                "conversation {n}: result {result} has its call"
            );
        }

        // Every prefix a turn could see, every keep_recent: the kept part holds the call of
        // every result it holds.
        let items: Vec<ContextItem> = records
            .iter()
            .map(|r| ContextItem {
                seq: r.seq,
                message: r.event.as_message().unwrap().clone(),
                redelivered: false,
            })
            .collect();
        for end in 1..=items.len() {
            let history = &items[..end];
            for keep in 1..=8 {
                let boundary = summary_boundary(history, keep);
                let (kept_calls, kept_results) = calls_and_results(
                    &history[boundary..]
                        .iter()
                        .map(|i| i.message.clone())
                        .collect::<Vec<_>>(),
                );
                let kept_calls: HashSet<&String> = kept_calls.iter().collect();
                for result in &kept_results {
                    assert!(
                        kept_calls.contains(result),
                        "conversation {n}, prefix {end}, keep {keep}: result {result} kept without its call"
                    );
                }
            }
        }
    }
}
