//! Fuzzing of what parses untrusted bytes (issue 16), as property tests with arbitrary inputs and
//! with mutations of real inputs: stored event records (`decode_event`), session states of both
//! format versions, JSON-lines import records (`record_from_json`), mentions (`find_mentions`,
//! `parse_mentions`) and the configuration's TOML (`RuntimeConfig::parse`). Each must answer a
//! value or an error, never panic. A few hundred cases in CI; `LEGIO_FUZZ_CASES=100000` runs long.
//! The store's chunk and list decoders are fuzzed inside legio-store (layout.rs), HTTP bodies
//! against the real router in tests/server/fuzz.rs.

use std::path::Path;

use legio_core::{
    find_mentions, parse_mentions, record_from_json, record_to_json, AgentName, Record, Seq,
};
use legio_runtime::RuntimeConfig;
use legio_store::testing::{decode_session_state, STATE_FORMAT_VERSION};
use legio_store::{decode_event, encode_event};
use proptest::prelude::*;

use crate::golden::samples;

/// Cases per property: `LEGIO_FUZZ_CASES`, or a small default for CI.
pub(crate) fn cases() -> u32 {
    std::env::var("LEGIO_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Every sample event, encoded as the store writes it.
fn encoded_samples() -> Vec<Vec<u8>> {
    samples().iter().map(|e| encode_event(e).unwrap()).collect()
}

/// A sample, with bytes overwritten, removed or inserted at random places.
fn mutated(sources: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    let n = sources.len();
    (
        0..n,
        prop::collection::vec((any::<usize>(), any::<u8>(), 0..3u8), 1..8),
    )
        .prop_map(move |(i, edits)| {
            let mut bytes = sources[i].clone();
            for (at, byte, how) in edits {
                let at = at % (bytes.len() + 1);
                match how {
                    0 if at < bytes.len() => bytes[at] = byte,
                    1 if at < bytes.len() => {
                        bytes.remove(at);
                    }
                    _ => bytes.insert(at, byte),
                }
            }
            bytes
        })
}

fn agents() -> Vec<AgentName> {
    ["lead", "a", "b-2", "scribe_x"]
        .into_iter()
        .map(|n| AgentName::new(n).unwrap())
        .collect()
}

/// Text rich in what the mention parser looks at.
fn mention_text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            Just("@".to_owned()),
            Just("@all".to_owned()),
            Just("@lead".to_owned()),
            Just("@a".to_owned()),
            Just("`".to_owned()),
            Just("```".to_owned()),
            Just("\n".to_owned()),
            Just("e@mail.com".to_owned()),
            "\\PC{0,6}",
            any::<char>().prop_map(String::from),
        ],
        0..24,
    )
    .prop_map(|parts| parts.concat())
}

/// Arbitrary JSON, nested a few levels.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<u64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_map(serde_json::Value::from),
        "\\PC{0,12}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
            prop::collection::btree_map("[a-z_]{1,10}", inner, 0..6)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Every sample as an export line's JSON.
fn sample_lines() -> Vec<Vec<u8>> {
    samples()
        .into_iter()
        .enumerate()
        .map(|(i, event)| {
            let record = Record {
                seq: Seq(i as u64 + 1),
                event,
            };
            serde_json::to_vec(&record_to_json(&record)).unwrap()
        })
        .collect()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn event_records_decode_or_fail_cleanly(bytes in prop::collection::vec(any::<u8>(), 0..512), seq in any::<u64>()) {
        let _ = decode_event(Seq(seq), &bytes);
        // The same bytes behind the current format version byte reach the payload decoder.
        let mut versioned = vec![legio_store::FORMAT_VERSION];
        versioned.extend_from_slice(&bytes);
        let _ = decode_event(Seq(seq), &versioned);
    }

    #[test]
    fn mutated_event_records_decode_or_fail_cleanly(bytes in mutated(encoded_samples())) {
        let _ = decode_event(Seq(1), &bytes);
    }

    #[test]
    fn session_states_of_both_versions_decode_or_fail_cleanly(
        version in prop_oneof![Just(1u8), Just(STATE_FORMAT_VERSION), any::<u8>()],
        payload in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let mut bytes = vec![version];
        bytes.extend_from_slice(&payload);
        let _ = decode_session_state(&bytes, "c", "a");
    }

    #[test]
    fn import_records_parse_or_fail_cleanly(value in json_value()) {
        let _ = record_from_json(value);
    }

    #[test]
    fn mutated_import_lines_parse_or_fail_cleanly(line in mutated(sample_lines())) {
        if let Ok(value) = serde_json::from_slice::<serde_json::Value>(&line) {
            let _ = record_from_json(value);
        }
    }

    #[test]
    fn mentions_parse_any_text(text in mention_text()) {
        let known = agents();
        let found = find_mentions(&text, &known);
        // A handle reported unknown is never one of the roster's names.
        prop_assert!(found.unknown.iter().all(|u| !known.iter().any(|k| k.as_str() == u)));
        let _ = parse_mentions(&text, &known);
    }

    #[test]
    fn configurations_parse_or_fail_cleanly(text in mutated(vec![
        include_bytes!("../../config/legio.toml").to_vec(),
        b"[store]\npath = \"db\"\n[server]\n[server.limits]\nmax_connections = 3\n[[server.tokens]]\ntoken = \"t\"\nscopes = [\"host\"]\nconversations = \"a:\"\n".to_vec(),
    ])) {
        let text = String::from_utf8_lossy(&text);
        let _ = RuntimeConfig::parse(&text, Path::new("/nonexistent/legio.toml"));
    }

    #[test]
    fn arbitrary_configuration_text_fails_cleanly(text in "\\PC{0,200}") {
        let _ = RuntimeConfig::parse(&text, Path::new("/nonexistent/legio.toml"));
    }
}
