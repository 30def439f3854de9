//! The `legio` binary, run for real on temp databases: every command's happy path and its main
//! errors. (The file lives in the top-level `tests/`; `crates/legio-cli/Cargo.toml` declares it as
//! that package's test so that cargo builds the binary for it and names it in `CARGO_BIN_EXE_legio`.)

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use legio_core::{can_see, ConversationKey, Seq, Viewer};
use legio_llm::{Provider, RecordedRequest, ScriptedConfig, ScriptedProvider};
use legio_runtime::{Runtime, RuntimeConfig};
use legio_store::{EventLog, SledLog, StoreOptions};

const CONV: &str = "cli:test";

/// A configured legion in a temp dir, with a log written by an in-process runtime whose scripted
/// provider's record the tests compare against.
struct Fixture {
    dir: tempfile::TempDir,
    requests: Vec<RecordedRequest>,
}

impl Fixture {
    fn config_path(&self) -> PathBuf {
        self.dir.path().join("legio.toml")
    }

    fn db(&self) -> PathBuf {
        self.dir.path().join("db")
    }

    fn legio(&self, args: &[&str]) -> Output {
        legio_in(self.dir.path(), &self.config_path(), args, None)
    }

    fn log(&self) -> SledLog {
        SledLog::open(self.db(), &StoreOptions::default()).unwrap()
    }
}

fn legio_in(dir: &Path, config: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_legio"));
    command
        .current_dir(dir)
        .env("LEGIO_CONFIG", config)
        .env("NO_COLOR", "1")
        .env_remove("LEGIO_STORE_PATH")
        .env_remove("LEGIO_STORE_DURABILITY")
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    if let Some(input) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    child.wait_with_output().unwrap()
}

fn legio_with_env(dir: &Path, config: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_legio"))
        .current_dir(dir)
        .env("LEGIO_CONFIG", config)
        .env("NO_COLOR", "1")
        .envs(env.iter().copied())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn write_config(dir: &Path, provider_extra: &str, runtime_extra: &str) {
    for (name, text) in [
        ("lead", "You lead."),
        ("ann", "You review."),
        ("bob", "You plan."),
    ] {
        std::fs::write(dir.join(format!("{name}.md")), text).unwrap();
    }
    let text = format!(
        r#"
[store]
path = "db"
[runtime]
{runtime_extra}
[agents.lead]
role = "orchestrator"
description = "leads"
prompt = "lead.md"
provider = "local"
[agents.ann]
role = "specialist"
description = "reviews"
prompt = "ann.md"
provider = "local"
[agents.bob]
role = "specialist"
description = "plans"
prompt = "bob.md"
provider = "local"
[providers.local]
kind = "scripted"
history = "session"
{provider_extra}
"#
    );
    std::fs::write(dir.join("legio.toml"), text).unwrap();
}

/// A runtime of `config` whose provider `local` is `provider` (the test reads its record).
async fn runtime_with(config: RuntimeConfig, provider: &ScriptedProvider) -> Runtime {
    let overrides = HashMap::from([(
        "local".to_owned(),
        Arc::new(provider.clone()) as Arc<dyn Provider>,
    )]);
    Runtime::builder(config)
        .providers(overrides)
        .open()
        .await
        .unwrap()
}

/// Writes a conversation through the real runtime: posts, mentions, a reap, a reset.
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "", "");
    let config = RuntimeConfig::load(&dir.path().join("legio.toml")).unwrap();
    let provider = ScriptedProvider::new(ScriptedConfig::new(legio_core::History::Session {
        resumable: true,
    }));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let runtime = runtime_with(config, &provider).await;
        for text in [
            "hello",
            "@ann review this",
            "@ann @bob compare",
            "status?",
            "@all ship it",
        ] {
            runtime.post(CONV, text).await.unwrap();
        }
        runtime
            .post("cli:other", "a second conversation")
            .await
            .unwrap();
        runtime.reap_idle_older_than(Duration::ZERO).await.unwrap();
        runtime.post(CONV, "@ann after the pause").await.unwrap();
        runtime.reset(CONV, "bob").await.unwrap();
        runtime.post(CONV, "@bob after the reset").await.unwrap();
        runtime.shutdown().await.unwrap();
    });
    Fixture {
        requests: provider.requests(),
        dir,
    }
}

/// After a crash (the process killed with sessions open), `legio context` says what the next
/// turn will do: find the session left open and suspend it as crashed (an operator's walkthrough
/// got "continue the open session"); and `--at` a message answered after the crash says what
/// that turn did, as its recorded boundary shows.
#[test]
fn context_after_a_crash_says_the_session_is_ended_as_crashed() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "", "");
    let config_file = dir.path().join("legio.toml");
    let config = RuntimeConfig::load(&config_file).unwrap();
    let provider = ScriptedProvider::new(ScriptedConfig::new(legio_core::History::Session {
        resumable: true,
    }));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let open = || runtime_with(config.clone(), &provider);
    rt.block_on(async {
        let runtime = open().await;
        runtime.post(CONV, "@ann hello").await.unwrap();
        runtime.abort().await;
    });
    let context = |extra: &[&str]| {
        let mut args = vec!["context", "--conversation", CONV, "--agent", "ann"];
        args.extend_from_slice(extra);
        let out = legio_in(dir.path(), &config_file, &args, None);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        stdout(&out)
    };
    let next = context(&[]);
    assert!(
        next.contains("first: suspend the current session (crashed)"),
        "{next}"
    );
    // A resume is the log's decision; whether the provider still holds the session is its own.
    assert!(
        next.contains("resuming provider session")
            && next.contains("if the provider still holds that session"),
        "{next}"
    );
    let json: serde_json::Value = serde_json::from_str(&context(&["--format", "json"])).unwrap();
    assert_eq!(json["resumes_provider_session"], true, "{json}");
    let again = rt.block_on(async {
        let runtime = open().await;
        // The restarted process's own preview (the server's): the open session is from before
        // it started, so a dead process left it.
        let preview = runtime.next_context(CONV, "ann", None).await.unwrap();
        let end = preview.turn.decision.end.expect("the crash boundary first");
        assert_eq!(end.why, legio_core::BoundaryReason::Crashed);
        let posted = runtime.post(CONV, "@ann again").await.unwrap();
        runtime.shutdown().await.unwrap();
        posted
    });
    let asked = again[0].seq().unwrap().get() - 1;
    let log = SledLog::open(dir.path().join("db"), &StoreOptions::default()).unwrap();
    let question = log.read_range(Seq(1), Seq(asked), usize::MAX).unwrap();
    let at = question
        .iter()
        .rev()
        .find(|r| {
            r.event
                .as_message()
                .is_some_and(|m| m.text_content() == "@ann again")
        })
        .map(|r| r.seq)
        .unwrap();
    drop(log);
    let then = context(&["--at", &at.get().to_string()]);
    assert!(
        then.contains("first: suspend the current session (crashed)"),
        "{then}"
    );
}

/// A message whose turn a crash cut off (here: stored, then the process died before its turn)
/// is never answered by a turn of its own: the next message's turn carries it, marked
/// redelivered. So the offline preview at the log's end shows that next turn, not one for the
/// cut-off message (it did: "new message: #N" with it as new), and the real next turn agrees.
#[test]
fn context_at_the_end_after_a_crash_previews_the_turn_that_will_run() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "", "");
    let config_file = dir.path().join("legio.toml");
    let config = RuntimeConfig::load(&config_file).unwrap();
    let provider = ScriptedProvider::new(ScriptedConfig::new(legio_core::History::Session {
        resumable: true,
    }));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let runtime = runtime_with(config.clone(), &provider).await;
        runtime.post(CONV, "@ann hello").await.unwrap();
        runtime.abort().await;
    });
    let log = SledLog::open(dir.path().join("db"), &StoreOptions::default()).unwrap();
    let cut = log.last_seq().next();
    let message = legio_tests::text_message(900, CONV, "user", "ann", "@ann cut off");
    log.append(vec![message]).unwrap();
    drop(log);
    let out = legio_in(
        dir.path(),
        &config_file,
        &[
            "context",
            "--conversation",
            CONV,
            "--agent",
            "ann",
            "--format",
            "json",
        ],
        None,
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let plan: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(plan["new_message"].is_null(), "{plan}");
    let history = plan["history"].as_array().unwrap();
    let last = history.last().unwrap();
    assert_eq!(last["seq"], cut.get(), "{plan}");
    assert_eq!(last["redelivered"], true, "{plan}");
    // The turn that does run, the next message's, got it so.
    rt.block_on(async {
        let runtime = runtime_with(config, &provider).await;
        runtime.post(CONV, "@ann next").await.unwrap();
        runtime.shutdown().await.unwrap();
    });
    let request = provider.requests().pop().unwrap();
    let carried = request.plan.history.iter().find(|i| i.seq == cut).unwrap();
    assert!(carried.redelivered, "{:?}", request.plan.history);
}

#[test]
fn help_teaches_and_usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = legio_in(dir.path(), &dir.path().join("none.toml"), &["--help"], None);
    assert_eq!(code(&out), 0);
    let help = stdout(&out);
    for example in [
        "legio demo",
        "legio chat",
        "legio replay",
        "legio context",
        "legio export",
    ] {
        assert!(help.contains(example), "--help lacks {example:?}");
    }
    let out = legio_in(
        dir.path(),
        &dir.path().join("none.toml"),
        &["frobnicate"],
        None,
    );
    assert_eq!(code(&out), 2);
    let out = legio_in(
        dir.path(),
        &dir.path().join("none.toml"),
        &["completions", "bash"],
        None,
    );
    assert_eq!(code(&out), 0);
    assert!(stdout(&out).contains("legio"));
}

#[test]
/// The demo runs offline and shows what it promises. (How fast it runs is measured by the bench
/// `crates/legio-cli/benches/demo.rs`, not asserted here.)
fn the_demo_tours_offline() {
    let dir = tempfile::tempdir().unwrap();
    let out = legio_in(dir.path(), &dir.path().join("none.toml"), &["demo"], None);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("with the notice"),
        "a restored bootstrap is shown"
    );
    assert!(
        text.contains("marked redelivered"),
        "the crash's redelivery is shown"
    );
    assert!(text.contains("fewer"), "tokens are compared");
    assert!(
        text.contains("verify: ") && text.contains("clean"),
        "{text}"
    );
}

#[test]
fn replay_prints_every_event_and_filters_agree_with_the_store() {
    let f = fixture();
    let log = f.log();
    let last = log.last_seq().get();
    let all = log.read_range(Seq(1), log.last_seq(), usize::MAX).unwrap();
    let conversation_seqs: Vec<u64> = log
        .conversation_events(&ConversationKey::new(CONV).unwrap(), Seq::ZERO, usize::MAX)
        .unwrap()
        .iter()
        .map(|r| r.seq.get())
        .collect();
    let ann = legio_core::AgentName::new("ann").unwrap();
    let ann_seqs: Vec<u64> = all
        .iter()
        .filter(|r| match r.event.as_message() {
            Some(m) => can_see(Viewer::Specialist(&ann), m),
            None => r.event.agent() == Some(&ann),
        })
        .map(|r| r.seq.get())
        .collect();
    drop(log);

    let seqs_of = |out: &Output| -> Vec<u64> {
        stdout(out)
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["seq"]
                    .as_u64()
                    .unwrap()
            })
            .collect()
    };
    let out = f.legio(&["replay"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().count() as u64, last);
    let out = f.legio(&["replay", "--format", "jsonl", "--conversation", CONV]);
    assert_eq!(seqs_of(&out), conversation_seqs);
    let out = f.legio(&[
        "replay",
        "--format",
        "jsonl",
        "--conversation",
        CONV,
        "--agent",
        "ann",
    ]);
    let want: Vec<u64> = ann_seqs
        .iter()
        .copied()
        .filter(|s| conversation_seqs.contains(s))
        .collect();
    assert_eq!(seqs_of(&out), want, "--agent means what ann could see");
    let out = f.legio(&[
        "replay",
        "--format",
        "jsonl",
        "--kind",
        "session_opened",
        "--kind",
        "session_closed",
    ]);
    let kinds: Vec<String> = stdout(&out)
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["kind"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert!(
        !kinds.is_empty()
            && kinds
                .iter()
                .all(|k| k == "session_opened" || k == "session_closed")
    );
    let out = f.legio(&["replay", "--format", "jsonl", "--from", "3", "--to", "5"]);
    assert_eq!(seqs_of(&out), vec![3, 4, 5]);
    // A conversation is read through its index; the seq bounds still hold.
    let (lo, hi) = (
        conversation_seqs[1],
        conversation_seqs[conversation_seqs.len() - 2],
    );
    let out = f.legio(&[
        "replay",
        "--format",
        "jsonl",
        "--conversation",
        CONV,
        "--from",
        &lo.to_string(),
        "--to",
        &hi.to_string(),
    ]);
    let want: Vec<u64> = conversation_seqs
        .iter()
        .copied()
        .filter(|s| (lo..=hi).contains(s))
        .collect();
    assert_eq!(seqs_of(&out), want);
    let out = f.legio(&["replay", "--since", "2000-01-01T00:00:00Z"]);
    assert_eq!(stdout(&out).lines().count() as u64, last);
    let out = f.legio(&["replay", "--since", "2999-01-01T00:00:00Z"]);
    assert_eq!(stdout(&out).lines().count(), 0);

    // A session by its id as a text line shows it (`session 1a2b3c4d`, the id's end): the same
    // events as by its whole id.
    let out = f.legio(&["replay", "--format", "jsonl", "--kind", "session_opened"]);
    let opened: Vec<(String, String)> = stdout(&out)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let field = |k: &str| v[k].as_str().unwrap().to_owned();
            (field("session"), field("conversation"))
        })
        .collect();
    let sessions: Vec<String> = opened.iter().map(|(s, _)| s.clone()).collect();
    let out = f.legio(&["replay", "--kind", "session_opened"]);
    let line = stdout(&out).lines().last().unwrap().to_owned();
    let short = line
        .split(" session ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no session in {line:?}"));
    assert_eq!(short.len(), 8, "{line}");
    let full: Vec<&String> = sessions.iter().filter(|s| s.ends_with(short)).collect();
    assert_eq!(full.len(), 1, "{short} {sessions:?}");
    let by_full = f.legio(&["replay", "--format", "jsonl", "--session", full[0]]);
    assert_eq!(code(&by_full), 0, "{}", stderr(&by_full));
    assert!(!seqs_of(&by_full).is_empty());
    let by_short = f.legio(&["replay", "--format", "jsonl", "--session", short]);
    assert_eq!(code(&by_short), 0, "{}", stderr(&by_short));
    assert_eq!(seqs_of(&by_short), seqs_of(&by_full));
    // An abbreviation that names several sessions (v7 ids opened within a minute share their
    // first 8 characters) is an error listing them; one that names none says where ids are.
    let prefix = sessions
        .iter()
        .map(|s| &s[..8])
        .find(|p| sessions.iter().filter(|s| s.starts_with(p)).count() >= 2)
        .expect("sessions opened within a minute share their first 8 characters");
    let out = f.legio(&["replay", "--session", prefix]);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    let text = stderr(&out);
    assert!(
        text.contains("names") && text.contains("give more of the id"),
        "{text}"
    );
    for id in sessions.iter().filter(|s| s.starts_with(prefix)) {
        assert!(text.contains(id.as_str()), "{id} is listed: {text}");
    }
    let nothing = "0000abcd";
    assert!(!sessions
        .iter()
        .any(|s| s.starts_with(nothing) || s.ends_with(nothing)));
    let out = f.legio(&["replay", "--session", nothing]);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    assert!(
        stderr(&out).contains("no session") && stderr(&out).contains("legio inspect sessions"),
        "{}",
        stderr(&out)
    );
    // With --conversation, the abbreviation names a session of that conversation.
    let (_, home) = opened.iter().find(|(s, _)| s == full[0]).unwrap();
    let out = f.legio(&[
        "replay",
        "--format",
        "jsonl",
        "--conversation",
        home,
        "--session",
        short,
    ]);
    assert_eq!(seqs_of(&out), seqs_of(&by_full));
    let elsewhere = if home == CONV { "cli:other" } else { CONV };
    let out = f.legio(&["replay", "--conversation", elsewhere, "--session", short]);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    assert!(
        stderr(&out).contains(&format!("no session of conversation \"{elsewhere}\"")),
        "{}",
        stderr(&out)
    );

    // Errors.
    let out = f.legio(&["replay", "--from", "9", "--to", "3"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("bad seq range"), "{}", stderr(&out));
    let out = f.legio(&["replay", "--conversation", "cli:nope"]);
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains("no conversation") && stderr(&out).contains(CONV),
        "{}",
        stderr(&out)
    );
    // Followed offline on sled, it is an error too: this process holds the log, so nothing
    // could append the conversation's first event (live mode waits for it, below).
    let out = f.legio(&["replay", "--conversation", "cli:later", "--follow"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no conversation \"cli:later\"") && stderr(&out).contains("--server"),
        "{}",
        stderr(&out)
    );
    let out = f.legio(&["replay", "--agent", "zed"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("\"zed\""), "{}", stderr(&out));
    // A bad value is a usage error (exit 2), as the README says of every bad argument.
    let out = f.legio(&["replay", "--kind", "nonsense"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("message_posted") && stderr(&out).contains("tools_declared"),
        "the error lists the kinds"
    );
    for (flag, value) in [("--since", "yesterday"), ("--session", "abc")] {
        let out = f.legio(&["replay", flag, value]);
        assert_eq!(code(&out), 2, "{flag} {value}: {}", stderr(&out));
    }
    let out = f.legio(&[
        "replay",
        "--kind",
        "tools_declared",
        "--since",
        "2026-01-01T00:00:00Z",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[test]
fn jsonl_output_validates_against_the_schema() {
    let f = fixture();
    let schema_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto/events.schema.json");
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(schema_path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let out = f.legio(&["replay", "--format", "jsonl"]);
    let mut kinds = std::collections::BTreeSet::new();
    for line in stdout(&out).lines() {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{line}\n{errors:?}");
        kinds.insert(value["kind"].as_str().unwrap().to_owned());
    }
    assert!(
        kinds.len() >= 5,
        "the fixture covers several kinds: {kinds:?}"
    );
    let bad = serde_json::json!({"seq": 1, "kind": "message_posted", "sender": "Not A Name"});
    assert!(
        !validator.is_valid(&bad),
        "the schema rejects a malformed event"
    );
}

/// `legio context --at` for what `request` was sent (run by `legio`, which adds the log's
/// options), as JSON.
fn context_plan_at(
    legio: &dyn Fn(&[&str]) -> Output,
    request: &RecordedRequest,
) -> serde_json::Value {
    let at = request.plan.new_message.seq.get().to_string();
    let out = legio(&[
        "context",
        "--conversation",
        request.conversation.as_str(),
        "--agent",
        request.agent.as_str(),
        "--at",
        &at,
        "--format",
        "json",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

#[test]
fn context_shows_exactly_what_the_provider_received() {
    let f = fixture();
    assert!(f.requests.len() >= 8);
    let mut modes = std::collections::BTreeSet::new();
    for request in &f.requests {
        let at = request.plan.new_message.seq.get();
        let plan = context_plan_at(&|args| f.legio(args), request);
        let history: Vec<(u64, bool)> = plan["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                (
                    i["seq"].as_u64().unwrap(),
                    i["redelivered"].as_bool().unwrap(),
                )
            })
            .collect();
        let want: Vec<(u64, bool)> = request
            .plan
            .history
            .iter()
            .map(|i| (i.seq.get(), i.redelivered))
            .collect();
        let what = format!("{} at {at}", request.agent);
        assert_eq!(plan["mode"], request.plan.mode.as_str(), "{what}");
        assert_eq!(history, want, "{what}");
        assert_eq!(
            plan["new_message"]["seq"].as_u64(),
            Some(request.plan.new_message.seq.get()),
            "{what}"
        );
        assert_eq!(
            plan["notice"].as_str(),
            request.plan.notice.as_deref(),
            "{what}"
        );
        modes.insert(request.plan.mode.as_str());
    }
    assert!(
        modes.contains("bootstrap") && modes.contains("delta"),
        "{modes:?}"
    );
    let out = f.legio(&["context", "--conversation", CONV, "--agent", "ann"]);
    assert_eq!(code(&out), 0);
    assert!(stdout(&out).contains("mode: delta"), "{}", stdout(&out));
    let out = f.legio(&["context", "--conversation", CONV, "--agent", "zed"]);
    assert_eq!(code(&out), 1);
    let out = f.legio(&[
        "context",
        "--conversation",
        CONV,
        "--agent",
        "ann",
        "--at",
        "999999",
    ]);
    assert_eq!(code(&out), 2);
}

/// A tool loop's calls and results are in the context as what they are (they were blank lines:
/// only text parts were shown), in text and JSON alike.
#[test]
fn context_shows_tool_calls_and_results() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "", "");
    let config = RuntimeConfig::load(&dir.path().join("legio.toml")).unwrap();
    let provider = ScriptedProvider::new(ScriptedConfig::new(legio_core::History::Session {
        resumable: true,
    }));
    let ann = legio_core::AgentName::new("ann").unwrap();
    provider.inject(
        Some(&ann),
        legio_llm::Fault::tool_calls([("call-7", "list_notes", "{}")]),
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let runtime = runtime_with(config, &provider).await;
        runtime.post(CONV, "@ann look it up").await.unwrap();
        // Ann's next turn then bootstraps: its history holds the loop's traffic.
        runtime.reset(CONV, "ann").await.unwrap();
        runtime.shutdown().await.unwrap();
    });
    let legio = |args: &[&str]| legio_in(dir.path(), &dir.path().join("legio.toml"), args, None);
    let args = ["context", "--conversation", CONV, "--agent", "ann"];
    let out = legio(&[&args[..], &["--format", "json"]].concat());
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let plan: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let texts: Vec<&str> = plan["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["text"].as_str().unwrap())
        .collect();
    for want in [
        "[tool call list_notes id=call-7] {}",
        "[tool result id=call-7] ",
    ] {
        assert!(
            texts.iter().any(|t| t.starts_with(want)),
            "{want}: {texts:?}"
        );
    }
    assert!(texts.iter().all(|t| !t.is_empty()), "{texts:?}");
    let text = stdout(&legio(&args));
    assert!(text.contains("[tool call list_notes id=call-7]"), "{text}");
}

#[test]
fn inspect_stats_and_verify() {
    let f = fixture();
    for what in ["conversations", "agents", "sessions"] {
        let out = f.legio(&["inspect", what]);
        assert_eq!(code(&out), 0, "{what}: {}", stderr(&out));
        let out = f.legio(&["inspect", what, "--format", "json", "--conversation", CONV]);
        let rows: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert!(!rows.as_array().unwrap().is_empty(), "{what}");
    }
    let out = f.legio(&[
        "inspect",
        "sessions",
        "--format",
        "json",
        "--conversation",
        CONV,
    ]);
    let text = stdout(&out);
    assert!(
        text.contains("manual_reset") && text.contains("after idle"),
        "{text}"
    );
    let out = f.legio(&["inspect", "agents", "--conversation", "cli:nope"]);
    assert_eq!(code(&out), 1);
    let out = f.legio(&["stats"]);
    assert_eq!(code(&out), 0);
    assert!(stdout(&out).contains("message_posted") && stdout(&out).contains("cli:other"));
    let out = f.legio(&["verify"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    // A deliberately corrupted record: exit 3, and the report names it.
    legio_store::testing::damage(
        &f.log(),
        legio_store::testing::Damage::OverwriteRecord {
            seq: Seq(2),
            bytes: vec![1, 0xde, 0xad],
        },
    )
    .unwrap();
    let out = f.legio(&["verify"]);
    assert_eq!(code(&out), 3, "{}", stdout(&out));
    assert!(stdout(&out).contains("seq 2"), "{}", stdout(&out));
}

mod plain;
/// Every file under `path` with its bytes.
fn folder_contents(path: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(path).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            out.extend(folder_contents(&p));
        } else {
            out.insert(p.clone(), std::fs::read(&p).unwrap());
        }
    }
    out
}

/// `verify` never writes; a damaged snapshot is a note, a missing blob folder a problem (exit 3);
/// `export --salvage` writes what reads, names what does not, and its file imports.
#[test]
fn verify_is_read_only_and_salvage_rebuilds_a_damaged_log() {
    let f = fixture();
    // The in-process runtime's writes: the next open writes sled's snapshot (unless read-only).
    let before = folder_contents(&f.db());
    let out = f.legio(&["verify"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert!(
        before == folder_contents(&f.db()),
        "verify wrote to the database"
    );
    let total = {
        let log = f.log();
        log.last_seq().0
    };
    let snapshot = std::fs::read_dir(f.db())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("snap.")
        })
        .expect("sled wrote a snapshot");
    let mut bytes = std::fs::read(&snapshot).unwrap();
    bytes[10] ^= 0x5a;
    std::fs::write(&snapshot, bytes).unwrap();
    let out = f.legio(&["stats"]);
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains(&snapshot.display().to_string()),
        "{}",
        stderr(&out)
    );
    let out = f.legio(&["verify"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert!(
        stdout(&out).contains("note: sled's snapshot file"),
        "{}",
        stdout(&out)
    );
    let salvaged = f.dir.path().join("salvaged.jsonl");
    let out = f.legio(&["export", "--salvage", "-o", salvaged.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("salvaged {total} events")),
        "{}",
        stderr(&out)
    );
    let rebuilt = f.dir.path().join("rebuilt");
    let out = f.legio(&[
        "--db",
        rebuilt.to_str().unwrap(),
        "import",
        salvaged.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = f.legio(&["--db", rebuilt.to_str().unwrap(), "verify"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
}

#[path = "../support/archive.rs"]
mod archive;
mod claude_code;
mod mcp;

#[test]
fn migrate_rewrites_a_v1_log_once_and_every_command_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let golden = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/golden/log-v1.sled.gz"
    );
    archive::unpack(&std::fs::read(golden).unwrap(), &dir.path().join("db"));
    write_config(dir.path(), "", "");
    let config = dir.path().join("legio.toml");
    let run = |args: &[&str]| legio_in(dir.path(), &config, args, None);
    let out = run(&["migrate"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("migrated 221 events")
            && stdout(&out).contains("from layout v1 to v2"),
        "{}",
        stdout(&out)
    );
    let out = run(&["migrate"]);
    assert!(
        stdout(&out).contains("already in layout v2"),
        "{}",
        stdout(&out)
    );
    let out = run(&["replay", "--conversation", "golden:2"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().count(), 100, "{}", stdout(&out));
}

#[test]
fn export_import_export_is_identical_and_bad_input_keeps_nothing() {
    let f = fixture();
    let first = f.dir.path().join("first.jsonl");
    let second = f.dir.path().join("second.jsonl");
    assert_eq!(
        code(&f.legio(&["export", "--output", first.to_str().unwrap()])),
        0
    );
    let copy = f.dir.path().join("copy");
    let out = f.legio(&[
        "--db",
        copy.to_str().unwrap(),
        "import",
        first.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = f.legio(&[
        "--db",
        copy.to_str().unwrap(),
        "export",
        "--output",
        second.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0);
    assert_eq!(
        std::fs::read(&first).unwrap(),
        std::fs::read(&second).unwrap()
    );
    // Importing into a log that has events is refused.
    let out = f.legio(&[
        "--db",
        copy.to_str().unwrap(),
        "import",
        first.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("empty database"), "{}", stderr(&out));
    // A malformed line: reported with its number, nothing kept.
    let text = std::fs::read_to_string(&first).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[2] = "{\"seq\": 3, \"kind\": \"message_posted\", \"oops\": true}";
    let broken = f.dir.path().join("broken.jsonl");
    std::fs::write(&broken, lines.join("\n")).unwrap();
    let fresh = f.dir.path().join("fresh");
    let out = f.legio(&[
        "--db",
        fresh.to_str().unwrap(),
        "import",
        broken.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains("line 3") && stderr(&out).contains("nothing was imported"),
        "{}",
        stderr(&out)
    );
    assert!(
        !fresh.exists(),
        "no database may be created from a broken import"
    );
    // Export of one conversation only.
    let out = f.legio(&["export", "--conversation", "cli:other"]);
    assert!(stdout(&out).lines().all(|l| l.contains("\"cli:other\"")));
}

/// One conversation's export has gaps (the other conversation's events): the import renumbers
/// its events 1, 2, 3, ... and the seqs events name with them (a delivery's `up_to`, a
/// bootstrap's or a resume's, a summary's), so each still names the same message (an operator's
/// walkthrough found "bootstrapped up to #195" in a 20-event log). An event naming a seq after
/// its own is refused.
#[test]
fn an_import_renumbers_the_seqs_events_name_with_the_events() {
    let f = fixture();
    let file = f.dir.path().join("one.jsonl");
    let out = f.legio(&[
        "export",
        "--conversation",
        CONV,
        "-o",
        file.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let copy = f.dir.path().join("copy");
    let out = f.legio(&[
        "--db",
        copy.to_str().unwrap(),
        "import",
        file.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("renumbered"),
        "the file had gaps: {}",
        stdout(&out)
    );
    let key = ConversationKey::new(CONV).unwrap();
    let old: Vec<_> = f
        .log()
        .conversation_events(&key, Seq::ZERO, usize::MAX)
        .unwrap();
    let new: Vec<_> = SledLog::open(&copy, &StoreOptions::default())
        .unwrap()
        .conversation_events(&key, Seq::ZERO, usize::MAX)
        .unwrap();
    assert_eq!(old.len(), new.len());
    // What a named old seq means: the conversation's last event at or before it.
    let meaning =
        |events: &[legio_core::Record], named: Seq| events.iter().rposition(|r| r.seq <= named);
    let mut named = 0;
    for (o, n) in old.iter().zip(&new) {
        let (mut o_event, mut n_event) = (o.event.clone(), n.event.clone());
        for (o_seq, n_seq) in o_event
            .seq_references_mut()
            .into_iter()
            .zip(n_event.seq_references_mut())
        {
            assert!(*n_seq <= n.seq, "{n_seq} named at #{}", n.seq);
            assert_eq!(
                meaning(&old, *o_seq),
                meaning(&new, *n_seq),
                "#{} names #{o_seq}, now #{n_seq}",
                o.seq
            );
            named += 1;
        }
    }
    assert!(named > 5, "deliveries and sessions name seqs: {named}");
    assert!(
        old.iter().zip(&new).any(|(o, n)| o.seq != n.seq),
        "the gap shifted seqs"
    );
    // An event naming a seq after its own is refused; so are seqs out of order.
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains("context_delivered"))
        .unwrap();
    let mut value: serde_json::Value = serde_json::from_str(lines[at]).unwrap();
    value["up_to"] = serde_json::json!(100_000);
    let mut edited: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    edited[at] = value.to_string();
    let future = f.dir.path().join("future.jsonl");
    std::fs::write(&future, edited.join("\n")).unwrap();
    let fresh = f.dir.path().join("fresh");
    let out = f.legio(&[
        "--db",
        fresh.to_str().unwrap(),
        "import",
        future.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains("after its own seq"),
        "{}",
        stderr(&out)
    );
    assert!(!fresh.exists());
}

/// Import checks the whole file before it writes: each broken rule is refused with its line,
/// and nothing is created.
#[test]
fn import_refuses_what_the_api_forbids_and_writes_nothing() {
    let f = fixture();
    let exported = f.dir.path().join("all.jsonl");
    assert_eq!(
        code(&f.legio(&["export", "-o", exported.to_str().unwrap()])),
        0
    );
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&exported)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let find = |kind: &str, nth: usize| {
        lines
            .iter()
            .enumerate()
            .filter(|(_, v)| v["kind"] == kind)
            .nth(nth)
            .map(|(i, _)| i)
            .unwrap()
    };
    let (first, second) = (find("message_posted", 0), find("message_posted", 1));
    let later = find("message_posted", 3);
    let opened = find("session_opened", 0);
    type Edit = Box<dyn Fn(&mut Vec<serde_json::Value>)>;
    let cases: Vec<(&str, usize, Edit)> = vec![
        ("is used twice", second, {
            let id = lines[first]["id"].clone();
            Box::new(move |l| l[second]["id"] = id.clone())
        }),
        ("which no earlier message is", second, {
            let id = lines[later]["id"].clone();
            Box::new(move |l| l[second]["reply_to"] = id.clone())
        }),
        (
            "reserved conversation",
            first,
            Box::new(move |l| l[first]["conversation"] = "legio:memory".into()),
        ),
        (
            "parameters are not a JSON schema",
            first,
            Box::new(move |l| {
                l[first] = serde_json::json!({"seq": l[first]["seq"].clone(),
                    "kind": "tools_declared", "conversation": CONV,
                    "at": l[first]["at"].clone(),
                    "tools": [{"name": "lookup", "description": "", "parameters": "{not json"}]});
            }),
        ),
        (
            "not in the configuration's roster",
            opened,
            Box::new(move |l| l[opened]["agent"] = "zed".into()),
        ),
        (
            "which no earlier event opened",
            opened + 1,
            Box::new(move |l| {
                l[opened]["kind"] = "message_posted".into();
                l[opened] = l[first].clone();
                l[opened]["id"] = l[later]["id"].clone();
                l[later]["id"] = serde_json::Value::Null;
            }),
        ),
    ];
    for (n, (expected, line, edit)) in cases.into_iter().enumerate() {
        let mut edited = lines.clone();
        edit(&mut edited);
        edited.retain(|v| !(v["kind"] == "message_posted" && v["id"].is_null()));
        let text: Vec<String> = edited.iter().map(|v| v.to_string()).collect();
        let file = f.dir.path().join(format!("bad{n}.jsonl"));
        std::fs::write(&file, text.join("\n")).unwrap();
        let fresh = f.dir.path().join(format!("fresh{n}"));
        let out = f.legio(&[
            "--db",
            fresh.to_str().unwrap(),
            "import",
            file.to_str().unwrap(),
        ]);
        let err = stderr(&out);
        assert_eq!(code(&out), 1, "{expected}: {err}");
        assert!(err.contains(expected), "{expected}: {err}");
        assert!(
            err.contains(&format!("line {}", line + 1)),
            "{expected} at line {}: {err}",
            line + 1
        );
        assert!(err.contains("nothing was imported"), "{err}");
        assert!(!fresh.exists(), "{expected}: a database was created");
    }
}

#[path = "../support/small_disk.rs"]
mod small_disk;
mod storage;

/// An import that fails half way (the disk fills) leaves no database and no staging folder, and
/// the same import works once space is back.
#[test]
fn a_failed_import_keeps_nothing_and_a_retry_works() {
    let Some(disk) = small_disk::SmallDisk::mount(24) else {
        return;
    };
    let f = fixture();
    let exported = f.dir.path().join("all.jsonl");
    assert_eq!(
        code(&f.legio(&["export", "-o", exported.to_str().unwrap()])),
        0
    );
    // Many copies of the conversation under other keys: a file larger than the space left.
    let text = std::fs::read_to_string(&exported).unwrap();
    let mut big = String::new();
    for copy in 0..400 {
        big.push_str(
            &text
                .replace(CONV, &format!("copy:{copy}"))
                .replace("cli:other", &format!("other:{copy}")),
        );
    }
    let ids_unique = big.lines().count();
    assert!(ids_unique > 1000);
    let file = f.dir.path().join("big.jsonl");
    // Message ids must stay unique: renumber them per copy by dropping the duplicates' ids.
    let mut seen = std::collections::HashSet::new();
    let mut lines = Vec::new();
    for (n, line) in big.lines().enumerate() {
        let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v["kind"] == "message_posted" {
            let id = format!("019c612c-{:04x}-7000-8000-{:012x}", n % 0xffff, n);
            assert!(seen.insert(id.clone()));
            v["id"] = id.into();
            v["reply_to"] = serde_json::Value::Null;
        }
        lines.push(v.to_string());
    }
    std::fs::write(&file, lines.join("\n")).unwrap();
    let filler = disk.fill_leaving(3 * 1024 * 1024);
    let target = disk.path().join("imported");
    // sled's writes wait forever on a full disk: the import gives up after its stall limit.
    let out = legio_with_env(
        f.dir.path(),
        &f.config_path(),
        &[
            "--db",
            target.to_str().unwrap(),
            "import",
            file.to_str().unwrap(),
        ],
        &[("LEGIO_IMPORT_STALL_SECONDS", "5")],
    );
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("nothing was imported"),
        "{}",
        stderr(&out)
    );
    assert!(!target.exists(), "a failed import left a database behind");
    let left: Vec<_> = std::fs::read_dir(disk.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(
        left,
        vec![std::ffi::OsString::from("filler")],
        "a staging folder was left"
    );
    std::fs::remove_file(filler).unwrap();
    let out = f.legio(&[
        "--db",
        target.to_str().unwrap(),
        "import",
        file.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = f.legio(&["--db", target.to_str().unwrap(), "verify"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert!(
        stdout(&out).contains(&format!("verified {} events", lines.len())),
        "{}",
        stdout(&out)
    );
}

/// `-o -` is standard output, as in every Unix tool: the same bytes as a file, and no file `-`.
#[test]
fn export_to_dash_writes_standard_output() {
    let f = fixture();
    let file = f.dir.path().join("all.jsonl");
    assert_eq!(
        code(&f.legio(&["export", "--output", file.to_str().unwrap()])),
        0
    );
    for flag in ["-o", "--output"] {
        let out = f.legio(&["export", flag, "-"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(!out.stdout.is_empty());
        assert_eq!(out.stdout, std::fs::read(&file).unwrap(), "{flag} -");
        assert!(
            !f.dir.path().join("-").exists(),
            "{flag} - created a file named -"
        );
    }
}

/// `export -o FILE` writes beside FILE and renames over it at the end (`output_file.rs`): an
/// export that fails midway leaves the previous FILE byte for byte and nothing beside it; a
/// replaced file keeps its mode, a symbolic link is written through and stays a link, and
/// `/dev/null` is written in place (never replaced by a file).
#[test]
fn an_export_replaces_its_file_whole_or_not_at_all() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let f = fixture();
    let folder = f.dir.path().join("exports");
    std::fs::create_dir(&folder).unwrap();
    let file = folder.join("all.jsonl");
    let export = |path: &Path, extra: &[&str]| {
        let mut args = vec!["export", "-o", path.to_str().unwrap()];
        args.extend_from_slice(extra);
        f.legio(&args)
    };
    let out = export(&file, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let good = std::fs::read(&file).unwrap();
    assert!(good.len() > 1_000, "the fixture's log exported");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;

    std::fs::write(&file, b"an older export\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let out = export(&file, &["--no-sync"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let same = |p: &Path| std::fs::read(p).unwrap() == good;
    assert!(same(&file), "replaced whole");
    assert_eq!(mode(&file), 0o640, "the replaced file's mode is kept");

    let link = folder.join("link.jsonl");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    std::fs::write(&file, b"an older export\n").unwrap();
    let out = export(&link, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
    assert!(same(&file), "written through the link");

    let out = export(Path::new("/dev/null"), &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(std::fs::metadata("/dev/null")
        .unwrap()
        .file_type()
        .is_char_device());

    // A record that no longer decodes, halfway through the log: the export fails there.
    let last = f.log().last_seq();
    legio_store::testing::damage(
        &f.log(),
        legio_store::testing::Damage::OverwriteRecord {
            seq: Seq(last.get() / 2),
            bytes: vec![1, 0xde, 0xad],
        },
    )
    .unwrap();
    let out = export(&file, &[]);
    assert_ne!(code(&out), 0, "an export of a damaged log must fail");
    let said = stderr(&out);
    assert!(
        said.contains(&format!("seq {}", last.get() / 2)) && !said.contains("OtherString"),
        "the failure names the damaged record in words: {said}"
    );
    assert!(
        same(&file),
        "a failed export left the previous file as it was: {} bytes now, {} before",
        std::fs::metadata(&file).unwrap().len(),
        good.len()
    );
    let mut names: Vec<String> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["all.jsonl", "link.jsonl"], "nothing left beside it");
}

#[test]
fn missing_and_locked_databases_are_clear_errors() {
    let f = fixture();
    let out = f.legio(&["--db", "/nonexistent/legio-db", "replay"]);
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains("no database at /nonexistent/legio-db"),
        "{}",
        stderr(&out)
    );
    assert_eq!(stderr(&out).lines().count(), 1, "one line");
    let held = f.log();
    let out = f.legio(&["replay"]);
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains("locked by another process"),
        "{}",
        stderr(&out)
    );
    drop(held);
}

/// `legio post --idempotency-key`: run twice (a script retrying after a crash), the message is
/// stored once and the second run prints the replies it had; a malformed key is refused before
/// anything is opened, and a key reused for another text is refused.
#[test]
fn post_with_an_idempotency_key_stores_the_message_once() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "", "");
    let config = dir.path().join("legio.toml");
    let post = |text: &str, key: &str| {
        let args = [
            "post",
            "--json",
            "--conversation",
            "cli:k",
            "--idempotency-key",
            key,
            text,
        ];
        legio_in(dir.path(), &config, &args, None)
    };
    let first = post("@ann hello", "run-1");
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    let again = post("@ann hello", "run-1");
    assert_eq!(code(&again), 0, "{}", stderr(&again));
    assert_eq!(stdout(&again), stdout(&first), "the same replies");
    assert!(
        stderr(&again).contains("stored before"),
        "{}",
        stderr(&again)
    );
    assert!(
        !stderr(&first).contains("stored before"),
        "{}",
        stderr(&first)
    );
    let reused = post("@ann other", "run-1");
    assert_eq!(code(&reused), 1, "{}", stderr(&reused));
    assert!(
        stderr(&reused).contains("idempotency key \"run-1\""),
        "{}",
        stderr(&reused)
    );
    let bad = post("@ann hello", "two words");
    assert_eq!(code(&bad), 2, "{}", stderr(&bad));
    assert!(
        stderr(&bad).contains("invalid idempotency key"),
        "{}",
        stderr(&bad)
    );
    let out = legio_in(dir.path(), &config, &["replay", "--format", "jsonl"], None);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let users = stdout(&out)
        .lines()
        .filter(|l| l.contains("@ann hello") && l.contains("message_posted"))
        .count();
    assert_eq!(users, 1, "{}", stdout(&out));
}

/// A command that needs the roster says so when the configuration is missing; when it is
/// invalid, the error says what is wrong and where, with no such prefix before it (an operator's
/// walkthrough found `serve` blaming the roster for a mistyped value).
#[test]
fn an_invalid_configuration_is_named_first() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent.toml");
    let out = legio_in(dir.path(), &missing, &["post", "hi"], None);
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains("needs the roster"),
        "{}",
        stderr(&out)
    );
    write_config(dir.path(), "", "turn_timeout_seconds = \"10s\"");
    let config = dir.path().join("legio.toml");
    for args in [&["post", "hi"][..], &["serve"]] {
        let command = args[0];
        let out = legio_in(dir.path(), &config, args, None);
        assert_eq!(code(&out), 1, "{command}: {}", stderr(&out));
        let text = stderr(&out);
        assert!(
            text.starts_with("legio: invalid configuration"),
            "{command}: {text}"
        );
        assert!(text.contains("turn_timeout_seconds"), "{command}: {text}");
    }
}

#[test]
fn post_chat_and_reset_talk_to_the_configured_legion() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "", "");
    let config = dir.path().join("legio.toml");
    let out = legio_in(
        dir.path(),
        &config,
        &["post", "--json", "--conversation", "cli:p", "@ann hello"],
        None,
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let replies: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(replies[0]["agent"], "ann");
    assert!(replies[0]["seq"].as_u64().is_some() && replies[0]["error"].is_null());
    let out = legio_in(
        dir.path(),
        &config,
        &["post", "--conversation", "cli:p", "@zed hello"],
        None,
    );
    // Issue 11, defect 4: an unknown handle is plain text (the orchestrator answers) and the
    // sender is warned which handle matched nobody.
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("warning: @zed named no agent"),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).contains("── lead ──"), "{}", stdout(&out));
    // Piped chat: one message per line, no prompts, exit at the end of input.
    let out = legio_in(
        dir.path(),
        &config,
        &["chat", "--conversation", "cli:p"],
        Some("hello there\n@bob plan it\n/status\n/reset ann\n/history\nask @media\n"),
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("warning: @media named no agent"), "{text}");
    assert!(
        text.contains("── lead ──") && text.contains("── bob ──"),
        "{text}"
    );
    assert!(
        text.contains("reset ann") && !text.contains("you>"),
        "{text}"
    );
    let out = legio_in(
        dir.path(),
        &config,
        &["reset", "--conversation", "cli:p", "--agent", "bob"],
        None,
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = legio_in(
        dir.path(),
        &config,
        &["reset", "--conversation", "cli:p", "--agent", "zed"],
        None,
    );
    assert_eq!(code(&out), 1);
    // A mistyped conversation is an error, as for replay and inspect, not "nothing to reset".
    let out = legio_in(
        dir.path(),
        &config,
        &["reset", "--conversation", "cli:nope", "--agent", "bob"],
        None,
    );
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    assert!(
        stderr(&out).contains("no conversation \"cli:nope\""),
        "{}",
        stderr(&out)
    );
    // An agent that times out makes `post` exit 1, with its error in the reply.
    let slow = tempfile::tempdir().unwrap();
    write_config(
        slow.path(),
        "latency_ms = 2000",
        "turn_timeout_seconds = 0.2",
    );
    let out = legio_in(
        slow.path(),
        &slow.path().join("legio.toml"),
        &["post", "--json", "hello"],
        None,
    );
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    assert!(
        stdout(&out).contains("did not answer within"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn inspect_memory_and_heartbeats_in_replay() {
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
        let tools = runtime.memory_tools().clone();
        let (lead, ann) = (
            legio_core::AgentName::new("lead").unwrap(),
            legio_core::AgentName::new("ann").unwrap(),
        );
        let call = |who: &legio_core::AgentName, tool: &str, args: serde_json::Value| {
            let (tools, who, tool) = (tools.clone(), who.clone(), tool.to_owned());
            async move { tools.call(&who, &tool, args).await.unwrap() }
        };
        call(
            &lead,
            "publish_directive",
            serde_json::json!({"text": "ship at noon"}),
        )
        .await;
        call(
            &lead,
            "publish_directive",
            serde_json::json!({"text": "old rule"}),
        )
        .await;
        call(
            &lead,
            "revoke_directive",
            serde_json::json!({"id": "d2", "reason": "stale"}),
        )
        .await;
        call(
            &ann,
            "write_note",
            serde_json::json!({"key": "api", "text": "v2 since Tuesday"}),
        )
        .await;
        call(
            &ann,
            "append_notebook",
            serde_json::json!({"text": "lead likes small PRs"}),
        )
        .await;
        drop(tools);
        let reply = runtime
            .heartbeat(CONV, "lead", "anything due?")
            .await
            .unwrap();
        assert!(reply.error().is_none(), "{reply:?}");
        runtime.shutdown().await.unwrap();
    });
    let legio = |args: &[&str]| legio_in(dir.path(), &config_path, args, None);

    let out = legio(&["inspect", "memory"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for text in [
        "ship at noon",
        "revoked by lead: stale",
        "v2 since Tuesday",
        "ann#1",
    ] {
        assert!(
            stdout(&out).contains(text),
            "{text} missing:\n{}",
            stdout(&out)
        );
    }
    let out = legio(&["inspect", "memory", "--format", "json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let memory: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(memory["directives"][0]["text"], "ship at noon");
    assert_eq!(memory["notes"]["api"]["author"], "ann");
    assert_eq!(
        memory["notebooks"]["ann"][0]["text"],
        "lead likes small PRs"
    );

    // Every new kind is valid JSON per the schema; memory is in its own conversation.
    let schema_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto/events.schema.json");
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(schema_path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let out = legio(&["replay", "--format", "jsonl"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let mut kinds = std::collections::BTreeSet::new();
    for line in stdout(&out).lines() {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{line}\n{errors:?}");
        kinds.insert(value["kind"].as_str().unwrap().to_owned());
    }
    for kind in [
        "directive_published",
        "directive_revoked",
        "note_written",
        "notebook_entry_appended",
        "heartbeat_ran",
    ] {
        assert!(kinds.contains(kind), "{kind} missing from {kinds:?}");
    }
    let out = legio(&["replay", "--conversation", "legio:memory"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().count(), 5, "{}", stdout(&out));
    let out = legio(&["replay", "--agent", "lead"]);
    assert!(
        stdout(&out).contains("heartbeat_ran") && stdout(&out).contains("anything due?"),
        "the heartbeat is in the lead's replay:\n{}",
        stdout(&out)
    );
    let out = legio(&["verify"]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
}

/// A `legio serve` child process on a free loopback port.
struct Served {
    child: std::process::Child,
    base: String,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl Served {
    /// Starts `legio serve --bind 127.0.0.1:0` on `f`'s configuration with the API token `token`,
    /// reads the address it prints first, and waits until `/healthz` answers.
    fn start(f: &Fixture, token: &str) -> Self {
        Self::start_with(f, token, &[])
    }

    /// [`Served::start`] with extra environment variables.
    fn start_with(f: &Fixture, token: &str, env: &[(&str, &str)]) -> Self {
        use std::io::BufRead;
        let mut child = Command::new(env!("CARGO_BIN_EXE_legio"))
            .current_dir(f.dir.path())
            .env("LEGIO_CONFIG", f.config_path())
            .env("LEGIO_API_TOKEN", token)
            .env_remove("LEGIO_OPERATOR_TOKEN")
            .env_remove("LEGIO_STORE_PATH")
            .env_remove("LEGIO_NODE")
            .envs(env.iter().copied())
            .env("NO_COLOR", "1")
            .args(["serve", "--bind", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        stdout.read_line(&mut first).unwrap();
        // "legio: serving http://127.0.0.1:PORT (dashboard: ...)"
        let base = first
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("serve printed no address: {first:?}"))
            .to_owned();
        let served = Self {
            child,
            base,
            stdout,
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let (status, _) = served.http("GET", "/healthz", None, None);
            if status == 200 {
                return served;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "/healthz never answered"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// One HTTP request (`body` as JSON), its status (0 when unreachable) and its body.
    fn http(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<serde_json::Value>,
    ) -> (u16, String) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let client = reqwest::Client::new();
            let url = format!("{}{path}", self.base);
            let mut request = match method {
                "GET" => client.get(url),
                _ => client.post(url),
            };
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            if let Some(body) = body {
                request = request
                    .header("content-type", "application/json")
                    .body(body.to_string());
            }
            match request.send().await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    (status, response.text().await.unwrap_or_default())
                }
                Err(_) => (0, String::new()),
            }
        })
    }

    /// Sends SIGTERM and waits: the exit status and what it printed on stderr.
    fn terminate(mut self) -> (std::process::ExitStatus, String) {
        use std::io::Read;
        let killed = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let mut rest = String::new();
        self.stdout.read_to_string(&mut rest).unwrap();
        let status = self.child.wait().unwrap();
        let mut err = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        (status, err)
    }
}

/// The last seq `legio verify` reports ("verified N events up to seq S ...").
fn verified_seq(out: &Output) -> u64 {
    let text = stdout(out);
    let words: Vec<&str> = text.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| *w == "seq")
        .unwrap_or_else(|| panic!("no seq in {text}"));
    words[at + 1].parse().unwrap()
}

#[test]
fn live_mode_agrees_with_offline_while_the_server_holds_the_log() {
    let f = fixture();
    const TOKEN: &str = "live-token-42";
    // What the offline commands print on this log, before the server opens it.
    let offline_commands: [&[&str]; 6] = [
        &["replay"],
        &["replay", "--format", "jsonl"],
        &["inspect", "sessions", "--format", "json"],
        &["inspect", "agents", "--format", "json"],
        &["inspect", "memory", "--format", "json"],
        &["context", "--conversation", CONV, "--agent", "ann"],
    ];
    let offline: Vec<String> = offline_commands
        .iter()
        .map(|args| {
            let out = f.legio(args);
            assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
            stdout(&out)
        })
        .collect();
    let out = f.legio(&["verify"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let last = verified_seq(&out);

    let served = Served::start(&f, TOKEN);
    let url = served.base.clone();
    let live = |args: &[&str]| {
        let mut all = vec!["--server", url.as_str(), "--token", TOKEN];
        all.extend_from_slice(args);
        f.legio(&all)
    };
    // The offline command is refused with the way out named.
    let out = f.legio(&["replay"]);
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains("locked by another process") && stderr(&out).contains("--server"),
        "{}",
        stderr(&out)
    );
    // Without the token the server refuses, and the CLI says so.
    let out = f.legio(&["--server", &url, "verify"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("unauthorized"), "{}", stderr(&out));

    // Live, every command prints what it printed offline (the server wrote nothing yet).
    let out = live(&["verify"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(verified_seq(&out), last);
    assert!(stdout(&out).contains("on the running server") && stdout(&out).contains("clean"));
    for (args, want) in offline_commands.iter().zip(&offline) {
        let out = live(args);
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
        assert_eq!(&stdout(&out), want, "live {args:?} differs from offline");
    }
    let out = live(&["replay", "--conversation", "cli:other", "--format", "jsonl"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let other: Vec<&str> = offline[1]
        .lines()
        .filter(|l| l.contains("\"cli:other\""))
        .collect();
    assert!(!other.is_empty());
    assert_eq!(stdout(&out).lines().collect::<Vec<_>>(), other);

    // A live reset goes through the server's runtime.
    let out = live(&["reset", "--conversation", CONV, "--agent", "bob"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let reset_seq = last + 1;
    assert!(
        stdout(&out).starts_with(&format!("reset bob in {CONV} at seq {reset_seq}")),
        "{}",
        stdout(&out)
    );
    let out = live(&["reset", "--conversation", CONV, "--agent", "zed"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("the server says"), "{}", stderr(&out));
    let out = live(&["reset", "--conversation", "cli:nope", "--agent", "bob"]);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    assert!(
        stderr(&out).contains("no conversation \"cli:nope\""),
        "{}",
        stderr(&out)
    );
    // So is a live replay's (it printed nothing and exited 0), naming the conversations.
    let out = live(&["replay", "--conversation", "cli:nope"]);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    assert!(
        stderr(&out).contains("no conversation \"cli:nope\"") && stderr(&out).contains(CONV),
        "{}",
        stderr(&out)
    );
    // A session by the end of its id, as the text lines show it: what offline printed.
    let session = offline[1]
        .lines()
        .find_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["session"].as_str().map(str::to_owned)
        })
        .unwrap();
    let by_session: Vec<&str> = offline[1]
        .lines()
        .filter(|l| l.contains(&format!("\"session\":\"{session}\"")))
        .collect();
    assert!(!by_session.is_empty(), "{session}");
    let short = &session[session.len() - 8..];
    let out = live(&["replay", "--format", "jsonl", "--session", short]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().collect::<Vec<_>>(), by_session);
    let out = live(&["replay", "--session", "0000abcd"]);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    assert!(
        stderr(&out).contains("legio inspect sessions"),
        "{}",
        stderr(&out)
    );

    // Follow: a live `replay --follow` prints a turn posted over HTTP while it runs.
    let mut command = Command::new(env!("CARGO_BIN_EXE_legio"));
    command
        .current_dir(f.dir.path())
        .env("LEGIO_CONFIG", f.config_path())
        .env("NO_COLOR", "1")
        .args([
            "--server", &url, "--token", TOKEN, "replay", "--format", "jsonl",
        ])
        .args(["--follow", "--from", &reset_seq.to_string()]);
    let (mut follow, lines_rx, reader) = follow_lines(command);
    let (status, body) = served.http(
        "POST",
        &format!("/sessions/{CONV}/turns"),
        Some(TOKEN),
        Some(serde_json::json!({"content": "@ann while following"})),
    );
    assert_eq!(status, 200, "{body}");
    let mut followed: Vec<serde_json::Value> = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    // The reset, the message, ann's session events and reply: until ann's reply arrives.
    while !followed
        .iter()
        .any(|v| v["kind"] == "message_posted" && v["sender"] == "ann")
    {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = lines_rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("follow stalled after {followed:?}"));
        followed.push(serde_json::from_str(&line).unwrap());
    }
    follow.kill().unwrap();
    follow.wait().unwrap();
    reader.join().unwrap();
    assert_eq!(followed[0]["seq"], reset_seq);
    assert_eq!(followed[0]["kind"], "session_closed", "{}", followed[0]);
    // Following a conversation the log does not have yet: a note, then its first events.
    let mut command = Command::new(env!("CARGO_BIN_EXE_legio"));
    command
        .current_dir(f.dir.path())
        .env("LEGIO_CONFIG", f.config_path())
        .env("NO_COLOR", "1")
        .args(["--server", &url, "--token", TOKEN, "replay", "--format"])
        .args(["jsonl", "--conversation", "cli:later", "--follow"]);
    let (note, mut follow, lines_rx, reader) = follow_lines_after_note(command);
    assert!(
        note.starts_with("note: no conversation \"cli:later\"") && note.contains(CONV),
        "{note}"
    );
    let (status, body) = served.http(
        "POST",
        "/sessions/cli:later/turns",
        Some(TOKEN),
        Some(serde_json::json!({"content": "the first message"})),
    );
    assert_eq!(status, 200, "{body}");
    let line = lines_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the conversation's first event");
    let first: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(first["conversation"], "cli:later", "{first}");
    assert_eq!(first["kind"], "message_posted", "{first}");
    follow.kill().unwrap();
    follow.wait().unwrap();
    reader.join().unwrap();
    // A live heartbeat goes through the server's runtime (POST /sessions/{id}/heartbeats).
    let out = live(&[
        "heartbeat",
        "--conversation",
        CONV,
        "--agent",
        "ann",
        "anything due?",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("── ann (heartbeat) ──\n"),
        "{}",
        stdout(&out)
    );
    let out = live(&["replay", "--kind", "heartbeat_ran"]);
    assert!(
        stdout(&out).contains("ann heartbeat \"anything due?\" -> "),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    // Live `inspect tools` is the server's: with a conversation, the tools its host declared
    // there (it tried to open the locked log); without, the server's configuration, not that of
    // the caller (it read the caller's).
    let (status, body) = served.http(
        "POST",
        &format!("/sessions/{CONV}/tools"),
        Some(TOKEN),
        Some(serde_json::json!({"tools": [{
            "name": "lookup",
            "description": "the host's lookup\nsecond line",
            "parameters": {"type": "object", "properties": {}},
        }]})),
    );
    assert_eq!(status, 200, "{body}");
    let tools_args = [
        "inspect",
        "tools",
        "--conversation",
        CONV,
        "--format",
        "json",
    ];
    let out = live(&tools_args);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let live_tools = stdout(&out);
    let rows: Vec<serde_json::Value> = serde_json::from_str(&live_tools).unwrap();
    let host: Vec<&serde_json::Value> = rows
        .iter()
        .filter(|r| r["agent"] == "(host turns)")
        .collect();
    assert_eq!(host.len(), 1, "{live_tools}");
    assert_eq!(host[0]["tool"], "lookup");
    assert_eq!(host[0]["description"], "the host's lookup");
    let source = host[0]["source"].as_str().unwrap();
    assert!(
        source.starts_with(&format!("declared by the host in {CONV} (seq ")),
        "{source}"
    );
    assert!(rows
        .iter()
        .any(|r| r["agent"] == "ann" && r["tool"] == "get_history"));
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::write(elsewhere.path().join("zed.md"), "You are elsewhere.").unwrap();
    std::fs::write(
        elsewhere.path().join("legio.toml"),
        "[store]\npath = \"db\"\n[agents.zed]\nrole = \"orchestrator\"\ndescription = \"elsewhere\"\n\
         prompt = \"zed.md\"\nprovider = \"local\"\n[providers.local]\nkind = \"scripted\"\n",
    )
    .unwrap();
    let tools_of_server = |dir: &Path| {
        let args = [
            "--server", &url, "--token", TOKEN, "inspect", "tools", "--format", "json",
        ];
        let out = legio_in(dir, &dir.join("legio.toml"), &args, None);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        stdout(&out)
    };
    let served_tools = tools_of_server(f.dir.path());
    assert_eq!(tools_of_server(elsewhere.path()), served_tools);
    assert!(!served_tools.contains("zed"), "{served_tools}");
    let out = live(&["verify"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let before_stop = verified_seq(&out);

    // A follow running when the server stops ends with exit 1 and says where to go on from
    // (it ended with 0, as if all was well).
    let mut command = Command::new(env!("CARGO_BIN_EXE_legio"));
    command
        .current_dir(f.dir.path())
        .env("LEGIO_CONFIG", f.config_path())
        .env("NO_COLOR", "1")
        .args(["--server", &url, "--token", TOKEN, "replay", "--follow"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // The server counts the streams that follow (the earlier follows' may still count: they
    // are only dropped when the server next writes to them).
    let followers = || {
        let (_, metrics) = served.http("GET", "/metrics", Some(TOKEN), None);
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("legio_event_followers "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let before = followers();
    let mut following = command.spawn().unwrap();
    let (_lines, reader) = stdout_lines(&mut following);
    // The events so far come first, then the follow's own request.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while followers() <= before {
        assert!(
            std::time::Instant::now() < deadline,
            "the follow never followed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // SIGTERM: a clean exit that suspends the sessions and leaves the log verifiable.
    let (status, err) = served.terminate();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(err.contains("legio: stopped"), "{err}");
    let ended = following.wait_with_output().unwrap();
    reader.join().unwrap();
    let said = stderr(&ended);
    assert_eq!(code(&ended), 1, "{said}");
    assert!(
        said.contains("the server ended the event stream") && said.contains("--from"),
        "{said}"
    );
    let out = f.legio(&["verify"]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert!(
        verified_seq(&out) > before_stop,
        "shutdown records the boundaries"
    );
    // Offline, the tools table is the one the server printed; where no server listens, live
    // `inspect tools` fails as every live command does (it printed the local table).
    let out = f.legio(&tools_args);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out), live_tools);
    assert_eq!(
        stdout(&f.legio(&["inspect", "tools", "--format", "json"])),
        served_tools
    );
    for args in [&tools_args[..], &tools_args[..2]] {
        let out = live(args);
        assert_eq!(code(&out), 1, "{args:?}: {}", stdout(&out));
        assert!(
            stderr(&out).contains("cannot reach the server"),
            "{}",
            stderr(&out)
        );
    }
    // Offline now prints what live printed, up to where live looked, and what was followed.
    let out = f.legio(&["replay", "--to", &last.to_string()]);
    assert_eq!(stdout(&out), offline[0]);
    let out = f.legio(&["replay", "--format", "jsonl"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let all: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let from_reset: Vec<&serde_json::Value> = all
        .iter()
        .filter(|v| v["seq"].as_u64().unwrap() >= reset_seq)
        .take(followed.len())
        .collect();
    assert_eq!(from_reset, followed.iter().collect::<Vec<_>>());
    assert!(
        all.iter().any(|v| v["kind"] == "session_suspended"
            && v["seq"].as_u64().unwrap() > before_stop
            && v["agent"] == "ann"
            && v["why"] == "Shutdown"),
        "the server suspended the sessions on SIGTERM: {:?}",
        all.iter()
            .filter(|v| v["seq"].as_u64().unwrap() > before_stop)
            .collect::<Vec<_>>()
    );
}

/// `legio context` shows the compacted view a turn used: the summary, then the messages after it.
#[test]
fn context_shows_the_summary_of_a_compacted_context() {
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        "",
        "compact_after_messages = 6\nkeep_recent = 2",
    );
    let file = dir.path().join("legio.toml");
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replace("history = \"session\"", "history = \"stateless\"");
    std::fs::write(&file, text).unwrap();
    let config = RuntimeConfig::load(&file).unwrap();
    let provider = ScriptedProvider::new(ScriptedConfig::new(legio_core::History::Stateless));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let runtime = runtime_with(config, &provider).await;
        for i in 0..5 {
            runtime
                .post(CONV, &format!("@ann question {i}"))
                .await
                .unwrap();
        }
        runtime.shutdown().await.unwrap();
    });
    let last = provider
        .requests()
        .into_iter()
        .rfind(|r| r.agent.as_str() == "ann" && r.system_prompt != legio_core::SUMMARIZER_PROMPT)
        .unwrap();
    let summary = last
        .plan
        .summary
        .clone()
        .expect("the last turn was compacted");
    let at = last.plan.new_message.seq.get().to_string();
    let args = [
        "context",
        "--conversation",
        CONV,
        "--agent",
        "ann",
        "--at",
        &at,
    ];
    let out = legio_in(dir.path(), &file, &args, None);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!(
            "summary (stands for the messages up to #{})",
            summary.covers_up_to
        )),
        "{}",
        stdout(&out)
    );
    let mut json_args = args.to_vec();
    json_args.extend(["--format", "json"]);
    let out = legio_in(dir.path(), &file, &json_args, None);
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        report["summary"]["covers_up_to"],
        summary.covers_up_to.get()
    );
    assert_eq!(report["summary"]["text"], summary.text.as_str());
    let seqs: Vec<u64> = report["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["seq"].as_u64().unwrap())
        .collect();
    let want: Vec<u64> = last.plan.history.iter().map(|i| i.seq.get()).collect();
    assert_eq!(seqs, want);
}

/// Issue 17: `legio context` shows what would really be sent: the window check applied (older
/// messages left out, with the notice), the request's size against the window.
#[test]
fn context_applies_the_window_check() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "context_window = 2000", "compaction = false");
    let file = dir.path().join("legio.toml");
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replace("history = \"session\"", "history = \"stateless\"");
    std::fs::write(&file, text).unwrap();
    let config = RuntimeConfig::load(&file).unwrap();
    let provider = ScriptedProvider::new(ScriptedConfig {
        context_window: 2000,
        ..ScriptedConfig::new(legio_core::History::Stateless)
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let runtime = runtime_with(config, &provider).await;
        for i in 0..30 {
            let text = format!("@ann question {i}: {}", "word ".repeat(60));
            let replies = runtime.post(CONV, &text).await.unwrap();
            assert!(replies.replies[0].outcome.is_ok(), "{replies:?}");
        }
        runtime.shutdown().await.unwrap();
    });
    let requests = provider.requests();
    let last = requests
        .iter()
        .rfind(|r| r.agent.as_str() == "ann")
        .unwrap();
    let left_out = "left out of this context to fit the model's window";
    assert!(
        last.plan.notice.as_deref().unwrap_or("").contains(left_out),
        "the runtime cut the last request: {:?}",
        last.plan.notice
    );
    let at = last.plan.new_message.seq.get().to_string();
    let args = [
        "context",
        "--conversation",
        CONV,
        "--agent",
        "ann",
        "--at",
        &at,
    ];
    let mut json_args = args.to_vec();
    json_args.extend(["--format", "json"]);
    let out = legio_in(dir.path(), &file, &json_args, None);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let window = &report["window"];
    assert_eq!(window["limit"], 2000);
    assert!(window["left_out"].as_u64().unwrap() > 0, "{window}");
    assert!(
        window["request_tokens"].as_u64().unwrap() <= 2000,
        "{window}"
    );
    assert!(
        report["notice"].as_str().unwrap().contains(left_out),
        "{report}"
    );
    // The preview does not count the tools: it keeps at least what the runtime sent, and its
    // history ends with the same messages.
    let seqs: Vec<u64> = report["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["seq"].as_u64().unwrap())
        .collect();
    let sent: Vec<u64> = last.plan.history.iter().map(|i| i.seq.get()).collect();
    assert!(
        seqs.len() >= sent.len() && seqs.ends_with(&sent),
        "{seqs:?} vs {sent:?}"
    );
    assert!(seqs.len() < 59, "older messages are left out: {seqs:?}");
    let out = legio_in(dir.path(), &file, &args, None);
    let text = stdout(&out);
    assert!(
        text.contains("of the 2000 tokens a request may hold"),
        "{text}"
    );
    assert!(text.contains("older messages left out to fit"), "{text}");
}

/// `backend = "nats"`: the runtime writes a conversation to a real nats-server, and the CLI reads
/// the cluster's log with `--nats` (no node running), agreeing with what is stored.
#[test]
fn a_legion_on_nats_is_read_back_by_the_cli_with_dash_dash_nats() {
    let Some((_cluster, url, dir, config_path)) = on_one_nats_server("clitest") else {
        return;
    };
    let config = RuntimeConfig::load(&config_path).unwrap();
    let provider = ScriptedProvider::new(ScriptedConfig::new(legio_core::History::Session {
        resumable: true,
    }));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let runtime = runtime_with(config, &provider).await;
        for text in ["hello", "@ann review this", "@all ship it"] {
            let replies = runtime.post(CONV, text).await.unwrap();
            assert!(!replies.is_empty());
        }
        runtime.shutdown().await.unwrap();
    });
    assert!(!dir.path().join("db").exists(), "no sled database");
    let options = legio_store::NatsOptions {
        stream: "clitest".into(),
        ..legio_store::NatsOptions::for_servers([url.clone()])
    };
    let stored = legio_store::NatsLog::open_read_only(&options).unwrap();
    let last = stored.last_seq();
    assert!(
        last.get() > 6,
        "the posts, replies and boundaries are stored: {last}"
    );

    let legio = |args: &[&str]| {
        let mut all = vec!["--nats", url.as_str()];
        all.extend_from_slice(args);
        legio_in(dir.path(), &config_path, &all, None)
    };
    let out = legio(&["replay", "--format", "jsonl"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().count() as u64, last.get());
    let out = legio(&["verify"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert!(stdout(&out).contains("stream clitest"), "{}", stdout(&out));
    let out = legio(&["inspect", "conversations"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains(CONV), "{}", stdout(&out));
    let out = legio(&["export"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().count() as u64, last.get());
    let out = legio(&["post", "--conversation", CONV, "no"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("--nats"), "{}", stderr(&out));

    // `context --at` read from the cluster shows what each request carried to the provider.
    let requests = provider.requests();
    assert!(requests.len() >= 4, "{}", requests.len());
    for request in &requests {
        let at = request.plan.new_message.seq.get();
        let plan = context_plan_at(&legio, request);
        let history: Vec<u64> = plan["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["seq"].as_u64().unwrap())
            .collect();
        let want: Vec<u64> = request.plan.history.iter().map(|i| i.seq.get()).collect();
        let what = format!("{} at {at}", request.agent);
        assert_eq!(plan["mode"], request.plan.mode.as_str(), "{what}");
        assert_eq!(history, want, "{what}");
    }

    // `replay --follow` on the cluster prints the stored events, then one appended meanwhile.
    let mut command = Command::new(env!("CARGO_BIN_EXE_legio"));
    command
        .current_dir(dir.path())
        .env("LEGIO_CONFIG", &config_path)
        .args([
            "--nats",
            url.as_str(),
            "replay",
            "--format",
            "jsonl",
            "--follow",
        ]);
    let (mut follow, lines_rx, reader) = follow_lines(command);
    let next_line = || {
        let line = lines_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("replay --follow printed nothing for 20 s");
        serde_json::from_str::<serde_json::Value>(&line).unwrap()
    };
    for seq in 1..=last.get() {
        assert_eq!(next_line()["seq"], seq);
    }
    let writer = legio_store::NatsLog::open(&options).unwrap();
    let at = legio_core::Timestamp::from_unix_micros(1_800_000_000_000_000);
    let message = legio_core::Message::text(
        legio_core::MessageId::from_parts(at, [7; 10]),
        ConversationKey::new(CONV).unwrap(),
        legio_core::Participant::User,
        legio_core::Audience::All,
        "appended while following",
        at,
    );
    let appended = writer
        .append(vec![legio_core::Event::MessagePosted(message)])
        .unwrap();
    let line = next_line();
    assert_eq!(line["seq"], appended.first.get(), "{line}");
    assert!(
        line.to_string().contains("appended while following"),
        "{line}"
    );
    follow.kill().unwrap();
    follow.wait().unwrap();
    reader.join().unwrap();
}

/// Spawns `command` (a `replay --follow`) and reads its output on a thread: the child, its lines
/// as they come, and the reading thread (it ends when the child's output closes).
fn follow_lines(
    mut command: Command,
) -> (
    std::process::Child,
    std::sync::mpsc::Receiver<String>,
    std::thread::JoinHandle<()>,
) {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (lines_rx, reader) = stdout_lines(&mut child);
    (child, lines_rx, reader)
}

/// `child`'s stdout lines, as they come, read by a thread.
fn stdout_lines(
    child: &mut std::process::Child,
) -> (
    std::sync::mpsc::Receiver<String>,
    std::thread::JoinHandle<()>,
) {
    let (lines_tx, lines_rx) = std::sync::mpsc::channel::<String>();
    let out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    (lines_rx, reader)
}

/// As [`follow_lines`], after the first line the command writes on stderr (its note), which
/// comes first (waited for up to 20 s).
fn follow_lines_after_note(
    mut command: Command,
) -> (
    String,
    std::process::Child,
    std::sync::mpsc::Receiver<String>,
    std::thread::JoinHandle<()>,
) {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let (note_tx, note_rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        use std::io::{BufRead, Read};
        let mut err = std::io::BufReader::new(err);
        let mut note = String::new();
        let _ = err.read_line(&mut note);
        let _ = note_tx.send(note);
        let _ = err.read_to_end(&mut Vec::new());
    });
    let note = note_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("a note on stderr");
    let (lines_rx, reader) = stdout_lines(&mut child);
    (note, child, lines_rx, reader)
}

/// One real nats-server and a new folder holding the fixture's configuration on it (stream
/// `stream`): the server (stopped when dropped), its URL, the folder and the configuration's
/// path; `None` when the test is skipped (no nats-server found; never under CI).
fn on_one_nats_server(
    stream: &str,
) -> Option<(
    legio_tests::nats::NatsCluster,
    String,
    tempfile::TempDir,
    PathBuf,
)> {
    let cluster = legio_tests::nats::NatsCluster::start(1)?;
    let url = cluster.urls()[0].clone();
    let dir = tempfile::tempdir().unwrap();
    let config_path = write_nats_config(dir.path(), &url, stream);
    Some((cluster, url, dir, config_path))
}

/// The fixture's configuration in `dir` on the NATS backend (`url`, stream `stream`): its path.
fn write_nats_config(dir: &Path, url: &str, stream: &str) -> PathBuf {
    write_config(dir, "", "");
    let config_path = dir.join("legio.toml");
    let text = std::fs::read_to_string(&config_path).unwrap().replace(
        "path = \"db\"",
        &format!("path = \"db\"\nbackend = \"nats\"\n\n[store.nats]\nservers = [\"{url}\"]\nstream = \"{stream}\""),
    );
    std::fs::write(&config_path, text).unwrap();
    config_path
}

/// `scripts/nats-cluster.sh`, whose interface issue 12 fixes for operators' scripts: `start DIR`
/// prints three client URLs of one JetStream cluster (a replicas-3 stream is created on it, an
/// append is acknowledged, and `legio --nats` reads it back from another server); a second
/// `start` on the same DIR is refused while it runs; `stop DIR` ends every server it started.
#[test]
fn the_cluster_script_starts_a_cluster_legio_stores_on_and_stops_it() {
    let Some(server) = legio_tests::nats::nats_server_binary() else {
        let what =
            "no nats-server found: run scripts/install-nats-server.sh or set LEGIO_NATS_SERVER";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{what}");
        println!("skipped: {what}");
        return;
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/nats-cluster.sh");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("cluster");
    let run = |args: &[&str]| {
        Command::new("bash")
            .arg(&script)
            .args(args)
            .env("LEGIO_NATS_SERVER", &server)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    /// Stops the servers however the test ends.
    struct Stop<'a>(&'a dyn Fn(&[&str]) -> Output, &'a str);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            (self.0)(&["stop", self.1]);
        }
    }
    let data_arg = data.to_str().unwrap();
    let _stop = Stop(&run, data_arg);
    let started = run(&["start", data_arg]);
    assert_eq!(code(&started), 0, "{}", stderr(&started));
    let urls: Vec<String> = stdout(&started).lines().map(str::to_owned).collect();
    assert_eq!(urls.len(), 3, "one client URL per server: {urls:?}");
    assert!(
        urls.iter().all(|u| u.starts_with("nats://127.0.0.1:")),
        "{urls:?}"
    );
    let pids: Vec<u32> = (1..=3)
        .map(|i| {
            let pid = std::fs::read_to_string(data.join(format!("n{i}.pid"))).unwrap();
            pid.trim().parse().unwrap()
        })
        .collect();
    // Running: a process that exists and is not a zombie waiting for its parent to reap it.
    let running = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|s| !s.starts_with(" Z"))
        })
    };
    assert!(pids.iter().all(|pid| running(*pid)), "{pids:?}");

    let again = run(&["start", data_arg]);
    assert_eq!(code(&again), 1, "{}", stdout(&again));
    assert!(stderr(&again).contains("already run"), "{}", stderr(&again));

    let options = legio_store::NatsOptions {
        replicas: 3,
        ..legio_store::NatsOptions::for_servers([urls[0].clone()])
    };
    let log = legio_store::NatsLog::open(&options).unwrap();
    log.append(vec![legio_tests::text_message(
        1,
        "t:script",
        "user",
        "lead",
        "on three servers",
    )])
    .unwrap();
    drop(log);
    write_config(dir.path(), "", "");
    let config = dir.path().join("legio.toml");
    let read = |args: &[&str]| {
        let mut all = vec!["--nats", urls[2].as_str()];
        all.extend_from_slice(args);
        legio_in(dir.path(), &config, &all, None)
    };
    let out = read(&["replay", "--format", "jsonl"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("on three servers"),
        "{}",
        stdout(&out)
    );

    let stopped = run(&["stop", data_arg]);
    assert_eq!(code(&stopped), 0, "{}", stderr(&stopped));
    for pid in pids {
        assert!(!running(pid), "server {pid} still runs after stop");
    }
}

/// A node's id when `legio serve` is given no `--node` (every cluster test gives one):
/// `LEGIO_NODE`, else the host name. `legio inspect nodes` lists the running node under it (its
/// presence lease), and a graceful stop takes it off the list.
#[test]
fn a_node_without_dash_dash_node_is_named_by_legio_node_then_the_host_name() {
    let Some((_cluster, _, dir, _)) = on_one_nats_server("nodeid") else {
        return;
    };
    let f = Fixture {
        dir,
        requests: Vec::new(),
    };
    let nodes = || {
        let out = f.legio(&["inspect", "nodes", "--format", "json"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout(&out)).unwrap();
        rows.iter()
            .map(|r| r["node"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned();
    for (env, want) in [
        (vec![("LEGIO_NODE", "from-env")], "from-env"),
        (vec![], host.as_str()),
    ] {
        let served = Served::start_with(&f, "node-token", &env);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while nodes() != [want] {
            assert!(
                std::time::Instant::now() < deadline,
                "inspect nodes lists {:?}, not {want:?}",
                nodes()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let (status, said) = served.terminate();
        assert!(status.success(), "{said}");
        assert!(nodes().is_empty(), "{want} released its presence on stop");
    }
}

/// `[store.nats]`'s timing keys reach the binary: an append deadline shorter than one request is
/// refused when the configuration loads, naming both keys, before any server is asked; valid
/// ones are accepted and the CLI reads a real server's log with them.
#[test]
fn the_nats_timing_keys_reach_the_binary_and_are_checked() {
    let Some((_cluster, url, dir, config_path)) = on_one_nats_server("timing") else {
        return;
    };
    let base = std::fs::read_to_string(&config_path).unwrap();
    let with = |keys: &str| {
        let text = base.replace(
            "stream = \"timing\"",
            &format!("stream = \"timing\"\n{keys}"),
        );
        std::fs::write(&config_path, text).unwrap();
    };
    with("request_timeout_seconds = 10\nappend_deadline_seconds = 5");
    let refused = legio_in(dir.path(), &config_path, &["verify"], None);
    let err = stderr(&refused);
    assert_ne!(code(&refused), 0, "{err}");
    assert!(
        err.contains("append_deadline_seconds (5.0 s) is shorter than one request")
            && err.contains("request_timeout_seconds, 10.0 s"),
        "{err}"
    );
    // A writer's open creates the stream the CLI then reads.
    let options = legio_store::NatsOptions {
        stream: "timing".into(),
        ..legio_store::NatsOptions::for_servers([url.clone()])
    };
    drop(legio_store::NatsLog::open(&options).unwrap());
    with("request_timeout_seconds = 2\nappend_deadline_seconds = 4");
    let read = legio_in(dir.path(), &config_path, &["verify"], None);
    assert_eq!(code(&read), 0, "{}", stderr(&read));
}

mod embedded;

/// After a storage failure (the disk fills under a running server), SIGTERM still ends `legio
/// serve` within its shutdown deadline, and every turn it acknowledged is in the log.
#[test]
fn sigterm_ends_serve_after_a_storage_failure() {
    const FILL_TOKEN: &str = "fill-token";
    let Some(disk) = small_disk::SmallDisk::mount(24) else {
        return;
    };
    let f = fixture();
    let db = disk.path().join("db");
    let served = Served::start_with(
        &f,
        FILL_TOKEN,
        &[("LEGIO_STORE_PATH", db.to_str().unwrap())],
    );
    let filler = disk.fill_leaving(2 * 1024 * 1024);
    let big = "x".repeat(200 * 1024);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let base = served.base.clone();
    let (acknowledged, refused) = rt.block_on(async move {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(20))
            .build()
            .unwrap();
        let mut acknowledged = Vec::new();
        for n in 0..60 {
            let key = format!("fill:{n}");
            let sent = client
                .post(format!("{base}/sessions/{key}/turns"))
                .bearer_auth(FILL_TOKEN)
                .header("content-type", "application/json")
                .body(serde_json::json!({ "content": big }).to_string())
                .send()
                .await;
            match sent {
                Ok(r) if r.status().as_u16() == 200 => acknowledged.push(key),
                Ok(r) => return (acknowledged, Some(r.status().as_u16())),
                Err(e) => return (acknowledged, Some(if e.is_timeout() { 0 } else { 1 })),
            }
        }
        (acknowledged, None)
    });
    assert!(refused.is_some(), "the disk never filled");
    let started = std::time::Instant::now();
    let (status, err) = served.terminate();
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(45),
        "SIGTERM took {took:?} ({status}): {err}"
    );
    std::fs::remove_file(filler).unwrap();
    let log = SledLog::open(&db, &StoreOptions::default()).unwrap();
    for key in &acknowledged {
        let events = log
            .conversation_events(&ConversationKey::new(key.as_str()).unwrap(), Seq::ZERO, 100)
            .unwrap();
        assert!(
            events.iter().any(|r| r.event.as_message().is_some()),
            "acknowledged turn in {key} is not in the log"
        );
    }
    eprintln!(
        "{} turns acknowledged before the disk filled (then {refused:?}); SIGTERM ended serve in \
         {took:?} with {status}; its last line: {}",
        acknowledged.len(),
        err.lines().last().unwrap_or_default()
    );
}

/// Found by an operator's walkthrough of a cluster: on a configuration whose backend is NATS,
/// `--db DIR` read the cluster, not DIR; an exported `LEGIO_NATS_URL` made `post` (and `serve`)
/// exit 2 as if --nats were given; `inspect nodes` on a misnamed stream printed an empty table;
/// `stats` named a folder that does not exist; and a server without JetStream failed every
/// command after about 30 s with a message that did not say why.
#[test]
fn the_cli_reads_the_log_it_is_pointed_at_and_says_what_is_missing() {
    let Some((cluster, url, dir, config_path)) = on_one_nats_server("walk") else {
        return;
    };
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_legio"));
        command
            .current_dir(dir.path())
            .env("LEGIO_CONFIG", &config_path)
            .env("NO_COLOR", "1")
            .env_remove("LEGIO_NATS_URL")
            .args(args)
            .stdin(Stdio::null());
        for (key, value) in env {
            command.env(key, value);
        }
        command.output().unwrap()
    };
    let exported = [("LEGIO_NATS_URL", url.as_str())];
    // A post to a sled copy, with the cluster's URL exported: the copy, not the cluster.
    let posted = run(&["--db", "copy", "post", "hello copy"], &exported);
    assert_eq!(code(&posted), 0, "{}", stderr(&posted));
    let verified = run(&["--db", "copy", "verify"], &exported);
    assert_eq!(code(&verified), 0, "{}", stderr(&verified));
    let said = format!("{}{}", stdout(&verified), stderr(&verified));
    assert!(
        said.contains("copy") && !said.contains("stream walk"),
        "{said}"
    );
    let stats = run(&["--db", "copy", "stats"], &[]);
    assert!(stdout(&stats).contains("copy"), "{}", stdout(&stats));
    // The cluster's stream holds nothing from the post (no node ever created it).
    let missing = run(&["--nats", &url, "stats"], &[]);
    assert!(
        stderr(&missing).contains("no JetStream stream walk"),
        "{}",
        stderr(&missing)
    );
    let both = run(&["--db", "copy", "--nats", &url, "verify"], &[]);
    assert_eq!(code(&both), 2, "{}", stderr(&both));
    // `inspect nodes` on a stream no node made: the missing stream, not an empty table.
    let nodes = run(&["--nats", &url, "inspect", "nodes"], &[]);
    assert_eq!(code(&nodes), 1, "{}", stdout(&nodes));
    assert!(
        stderr(&nodes).contains("no JetStream stream walk"),
        "{}",
        stderr(&nodes)
    );
    drop(cluster);
}

/// A server without JetStream fails a command at once, saying so (it took about 30 s of retries
/// and ended in "requested JetStream resource does not exist").
#[test]
fn a_server_without_jetstream_is_said_at_once() {
    let Some(server) = legio_tests::nats::nats_server_binary() else {
        let what =
            "no nats-server found: run scripts/install-nats-server.sh or set LEGIO_NATS_SERVER";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{what}");
        println!("skipped: {what}");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_legio"))
            .current_dir(dir.path())
            .env_remove("LEGIO_NATS_URL")
            .env_remove("LEGIO_CONFIG")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut plain = Command::new(server)
        .args(["-a", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let plain_url = format!("nats://127.0.0.1:{port}");
    let started = std::time::Instant::now();
    let refused = loop {
        let out = run(&["--nats", &plain_url, "verify"]);
        if !stderr(&out).contains("cannot reach") || started.elapsed() > Duration::from_secs(10) {
            break out;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = plain.kill();
    let _ = plain.wait();
    assert_eq!(code(&refused), 1);
    assert!(
        stderr(&refused).contains("runs without JetStream"),
        "{}",
        stderr(&refused)
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}
