//! Plain words and a safe terminal (issues 14.6 and 16.7): replay, context, inspect, stats and
//! verify over a log with every event kind print no Rust `Debug` text and no raw control
//! characters; `inspect agents` lists every configured agent; a reader that stops early ends every
//! printing command quietly; a piped `chat` reads past a line that is not UTF-8; `serve` on a busy
//! port fails before creating the database folder.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use legio_core::{ConversationKey, EventKind, Seq};
use legio_runtime::{Runtime, RuntimeConfig};
use legio_store::{decode_event, EventLog};

use super::{code, fixture, stderr, stdout, write_config, Fixture, CONV};

/// Text that would retitle, clear, recolour and beep a terminal, and overwrite its line.
const HOSTILE: &str = "\u{1b}]0;owned\u{7}\u{1b}[2J\u{1b}[31mred\rX\u{9b}1m";

fn golden_events(file: &str) -> Vec<legio_core::Event> {
    let path = format!("{}/../../tests/golden/{file}", env!("CARGO_MANIFEST_DIR"));
    let mut bytes = &std::fs::read(path).unwrap()[..];
    let mut events = Vec::new();
    while bytes.len() >= 4 {
        let len = u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
        events.push(decode_event(Seq(1), &bytes[4..4 + len]).unwrap());
        bytes = &bytes[4 + len..];
    }
    events
}

/// The CLI fixture's log, plus a hostile message and heartbeat through the runtime, plus one
/// sample of every event kind (the golden files' samples).
fn log_with_every_kind() -> (Fixture, Seq) {
    let f = fixture();
    let config = RuntimeConfig::load(&f.config_path()).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let runtime = Runtime::open(config).await.unwrap();
        runtime
            .post(CONV, &format!("@ann {HOSTILE}"))
            .await
            .unwrap();
        runtime.heartbeat(CONV, "ann", HOSTILE).await.unwrap();
        runtime.shutdown().await.unwrap();
    });
    let log = f.log();
    let hostile = log
        .read_range(Seq::FIRST, log.last_seq(), 100_000)
        .unwrap()
        .into_iter()
        .find(|r| {
            r.event
                .as_message()
                .is_some_and(|m| m.text_content().contains("owned"))
        })
        .unwrap()
        .seq;
    let mut events = golden_events("events-v1.bin");
    events.extend(golden_events("events-v1-memory.bin"));
    events.extend(golden_events("events-v1-tools.bin"));
    events.extend(golden_events("events-v1-approvals.bin"));
    events.extend(golden_events("events-v1-instructions.bin"));
    log.append(events).unwrap();
    let mut kinds: Vec<EventKind> = Vec::new();
    for record in log.read_range(Seq::FIRST, log.last_seq(), 100_000).unwrap() {
        if !kinds.contains(&record.event.kind()) {
            kinds.push(record.event.kind());
        }
    }
    assert_eq!(
        kinds.len(),
        EventKind::ALL.len(),
        "kinds in the log: {kinds:?}"
    );
    drop(log);
    (f, hostile)
}

/// What looks like Rust `Debug` output of an internal type, or a raw control character.
fn debug_looking(text: &str) -> Option<String> {
    // An identifier like `FirstUse` (not `MiB` nor `PRs`): a capital, two or more lower-case
    // letters, another capital and a lower-case letter.
    let camel = |w: &str| {
        let c: Vec<char> = w.chars().collect();
        c.first().is_some_and(|c| c.is_ascii_uppercase())
            && c.iter().all(|c| c.is_ascii_alphanumeric())
            && (3..c.len().saturating_sub(1)).any(|i| {
                c[i].is_ascii_uppercase()
                    && c[i - 1].is_ascii_lowercase()
                    && c[i - 2].is_ascii_lowercase()
                    && c[i + 1].is_ascii_lowercase()
            })
    };
    for line in text.lines() {
        if let Some(c) = line.chars().find(|c| c.is_control() && *c != '\t') {
            return Some(format!("raw control U+{:04X} in: {line:?}", u32::from(c)));
        }
        for pattern in ["Some(", "None", "Ok(", "Err(", " { ", "After(", "\\\""] {
            if line.contains(pattern) {
                return Some(format!("{pattern:?} in: {line}"));
            }
        }
        let words = line.split(|c: char| !c.is_ascii_alphanumeric());
        if let Some(word) = words.into_iter().find(|w| camel(w)) {
            return Some(format!("CamelCase {word:?} in: {line}"));
        }
    }
    None
}

#[test]
fn the_debug_detector_catches_what_it_must() {
    for bad in [
        "decision: OpenResume { why: After(Shutdown), checkpoint: 4 }",
        "why: FirstUse",
        "summary: Some(\"x\")",
        "text \u{1b}[2J",
    ] {
        assert!(debug_looking(bad).is_some(), "{bad}");
    }
    assert_eq!(
        debug_looking("session opened (after shutdown; stateless)"),
        None
    );
}

#[test]
fn operator_output_is_plain_words_with_controls_escaped() {
    let (f, hostile) = log_with_every_kind();
    let mut commands: Vec<Vec<&str>> = vec![
        vec!["replay"],
        vec!["stats"],
        vec!["verify"],
        vec!["inspect", "conversations"],
        vec!["inspect", "agents"],
        vec!["inspect", "sessions"],
        vec!["inspect", "memory"],
    ];
    for agent in ["lead", "ann", "bob"] {
        commands.push(vec!["context", "--conversation", CONV, "--agent", agent]);
        for at in ["3", "12", "30"] {
            commands.push(vec![
                "context",
                "--conversation",
                CONV,
                "--agent",
                agent,
                "--at",
                at,
            ]);
        }
    }
    for args in &commands {
        let out = f.legio(args);
        assert!(
            code(&out) == 0 || code(&out) == 3,
            "{args:?}: {}",
            stderr(&out)
        );
        let text = stdout(&out);
        if let Some(found) = debug_looking(&text) {
            panic!("{args:?} printed Debug-looking output: {found}\n{text}");
        }
    }
    // The hostile text is shown, escaped, where the operator reads messages.
    let replay = stdout(&f.legio(&["replay", "--conversation", CONV]));
    assert!(replay.contains("\\u{1b}]0;owned\\u{7}"), "{replay}");
    assert!(replay.contains("heartbeat \""), "{replay}");
    let at = hostile.get().to_string();
    let context = stdout(&f.legio(&[
        "context",
        "--conversation",
        CONV,
        "--agent",
        "ann",
        "--at",
        &at,
    ]));
    assert!(context.contains("\\u{1b}[31mred\\rX"), "{context}");
    assert!(context.contains("decision: "), "{context}");
}

#[test]
fn inspect_agents_lists_every_configured_agent_before_its_first_session() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "", "");
    let config_path = dir.path().join("legio.toml");
    let config = RuntimeConfig::load(&config_path).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let runtime = Runtime::open(config).await.unwrap();
        runtime.post(CONV, "@ann only you").await.unwrap();
        runtime.shutdown().await.unwrap();
    });
    let out = super::legio_in(
        dir.path(),
        &config_path,
        &["inspect", "agents", "--format", "json"],
        None,
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let rows: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let rows = rows.as_array().unwrap();
    let row = |agent: &str| {
        rows.iter()
            .find(|r| r["agent"] == agent)
            .unwrap_or_else(|| panic!("{agent} missing: {rows:?}"))
    };
    assert_eq!(row("ann")["conversation"], CONV);
    assert_eq!(row("ann")["role"], "specialist");
    assert_eq!(row("ann")["history"], "session");
    assert_ne!(row("ann")["status"], legio_runtime::NO_SESSION);
    for agent in ["lead", "bob"] {
        assert_eq!(row(agent)["status"], legio_runtime::NO_SESSION, "{agent}");
        assert_eq!(row(agent)["provider"], "local");
    }
    assert_eq!(row("lead")["role"], "orchestrator");
    assert_eq!(rows.len(), 3, "{rows:?}");
}

/// Runs `legio args` with standard output a pipe whose reader is already gone.
fn with_stdout_closed(f: &Fixture, args: &[&str]) -> std::process::Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    Command::new(env!("CARGO_BIN_EXE_legio"))
        .current_dir(f.dir.path())
        .env("LEGIO_CONFIG", f.config_path())
        .env("NO_COLOR", "1")
        .args(args)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn a_reader_that_stops_early_ends_every_printing_command_quietly() {
    let f = fixture();
    for args in [
        &["verify"][..],
        &["stats"],
        &["inspect", "agents"],
        &["inspect", "sessions"],
        &["completions", "bash"],
        &["replay"],
        &["replay", "--format", "jsonl"],
        &["export"],
        &["context", "--conversation", CONV, "--agent", "ann"],
        &["--help"],
    ] {
        let out = with_stdout_closed(&f, args);
        let err = stderr(&out);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        if args != ["--help"] {
            assert_eq!(code(&out), 141, "{args:?}: {err}");
            assert_eq!(err, "", "{args:?}");
        }
    }
}

#[test]
fn a_piped_chat_reads_past_a_line_that_is_not_utf8() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "", "");
    let config_path = dir.path().join("legio.toml");
    let mut child = Command::new(env!("CARGO_BIN_EXE_legio"))
        .current_dir(dir.path())
        .env("LEGIO_CONFIG", &config_path)
        .env("NO_COLOR", "1")
        .args(["chat", "--conversation", CONV])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input
        .write_all(b"first line\n@ann caf\xe9 latin-1\nthird line\n")
        .unwrap();
    drop(input);
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{err}");
    assert!(err.contains("line 2 of the input is not UTF-8"), "{err}");
    let log = legio_store::SledLog::open(dir.path().join("db"), &Default::default()).unwrap();
    let key = ConversationKey::new(CONV).unwrap();
    let texts: Vec<String> = log
        .conversation_events(&key, Seq::ZERO, 1000)
        .unwrap()
        .iter()
        .filter_map(|r| r.event.as_message())
        .filter(|m| m.sender.as_str() == "user")
        .map(|m| m.text_content())
        .collect();
    assert_eq!(
        texts,
        ["first line", "@ann caf\u{fffd} latin-1", "third line"],
        "{err}"
    );
}

#[test]
fn serve_on_a_busy_port_fails_before_creating_the_database() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "", "");
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let db = dir.path().join("fresh-db");
    let out = super::legio_in(
        dir.path(),
        &dir.path().join("legio.toml"),
        &[
            "--db",
            db.to_str().unwrap(),
            "serve",
            "--bind",
            &format!("127.0.0.1:{port}"),
        ],
        None,
    );
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains(&port.to_string()), "{}", stderr(&out));
    assert!(!Path::new(&db).exists(), "serve created {}", db.display());
}

#[test]
fn a_local_heartbeat_is_recorded_and_replayed_in_plain_words() {
    let f = fixture();
    let out = f.legio(&[
        "heartbeat",
        "--conversation",
        CONV,
        "--agent",
        "bob",
        "--json",
        "anything due?",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let reply: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(reply["agent"], "bob");
    assert!(
        reply["error"].is_null() && reply["content"].is_string(),
        "{reply}"
    );
    let seq = Seq(reply["seq"].as_u64().unwrap());
    let log = f.log();
    let record = log.read_range(seq, seq, 1).unwrap().remove(0);
    assert_eq!(record.event.kind(), EventKind::HeartbeatRan);
    drop(log);
    let out = f.legio(&["replay", "--from", &seq.get().to_string()]);
    assert!(
        stdout(&out).contains("bob heartbeat \"anything due?\" -> "),
        "{}",
        stdout(&out)
    );
    let out = f.legio(&["heartbeat", "--agent", "zed", "hello"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("unknown agent"), "{}", stderr(&out));
}
