//! The `claude-code` provider against a fake CLI (tests/fixtures/fake-claude) that speaks the same
//! stream-json lines: arguments, prompt on stdin, session ids and resume, usage, deltas, and
//! every fault mapped to the right error; the child's process group killed with the turn, with
//! a killed legio process (this test binary run again as a helper and killed with SIGKILL), and
//! what such a process left behind reaped by the next one; the MCP token in a private file, not
//! argv; and a fixed working directory, so a session resumes from a process started elsewhere.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use legio_core::{
    estimate_message_tokens, AgentName, Audience, ContextItem, ContextPlan, ConversationKey,
    DeliveryMode, History, Message, MessageId, Participant, Seq, Timestamp, TokenUsage,
};
use legio_llm::claude_code::{arguments, ClaudeCode};
use legio_llm::{
    bootstrap_block, build_provider, ClaudeCodeSettings, Provider, ProviderError, ProviderReply,
    ProviderRequest, ProviderSettings, StreamDelta,
};
use tempfile::TempDir;

const SYSTEM: &str = "You are vorenus, a careful reviewer.";

fn fake_cli() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-claude")
}

fn agent() -> AgentName {
    AgentName::new("vorenus").unwrap()
}

fn conversation() -> ConversationKey {
    ConversationKey::new("t:1").unwrap()
}

fn item(seq: u64, sender: Participant, text: &str) -> ContextItem {
    let at = Timestamp::from_unix_micros(1_700_000_000_000_000 + seq as i64 * 1000);
    ContextItem {
        seq: Seq(seq),
        message: Message::text(
            MessageId::from_parts(at, [seq as u8; 10]),
            conversation(),
            sender,
            Audience::All,
            text,
            at,
        ),
        redelivered: false,
    }
}

fn plan(mode: DeliveryMode, history: Vec<ContextItem>, new_message: ContextItem) -> ContextPlan {
    let estimated_tokens = history
        .iter()
        .chain(std::iter::once(&new_message))
        .map(|i| estimate_message_tokens(&i.message))
        .sum();
    ContextPlan {
        mode,
        notice: None,
        up_to: new_message.seq,
        history,
        new_message,
        estimated_tokens,
        summary: None,
    }
}

/// A bootstrap plan: two earlier messages, then the new one.
fn bootstrap_plan() -> ContextPlan {
    plan(
        DeliveryMode::Bootstrap,
        vec![
            item(1, Participant::User, "alpha-one from the user"),
            item(
                2,
                Participant::Agent(agent()),
                "beta-two, my own earlier reply",
            ),
        ],
        item(3, Participant::User, "gamma-three: @vorenus review this"),
    )
}

/// A delta plan: what the session has not seen since the bootstrap.
fn delta_plan() -> ContextPlan {
    plan(
        DeliveryMode::Delta,
        vec![item(
            5,
            Participant::Agent(AgentName::new("pullo").unwrap()),
            "delta-four from pullo",
        )],
        item(6, Participant::User, "delta-five: @vorenus and now?"),
    )
}

fn request(plan: ContextPlan, resume: Option<&str>) -> ProviderRequest {
    ProviderRequest {
        conversation: conversation(),
        agent: agent(),
        system_prompt: SYSTEM.into(),
        resume: resume.map(str::to_owned),
        plan,
        status: None,
        deltas: None,
        tools: Default::default(),
        mcp: None,
    }
}

/// A fake CLI with its own state directory, in `mode`.
struct Fake {
    dir: TempDir,
}

impl Fake {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn settings(&self, mode: &str) -> ClaudeCodeSettings {
        ClaudeCodeSettings {
            executable: fake_cli(),
            model: None,
            extra_args: vec![
                "--fake-dir".into(),
                self.dir.path().display().to_string(),
                "--fake-mode".into(),
                mode.into(),
            ],
            context_window: 200_000,
            read_timeout: Duration::from_secs(20),
            state_dir: self.state_dir(),
        }
    }

    /// The provider's state directory (inside the fake's folder).
    fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// The pid the fake recorded in file `name` (`pid`, `grandchild`), once it is there.
    async fn pid(&self, name: &str) -> i32 {
        let path = self.dir.path().join(name);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(text) = std::fs::read_to_string(&path) {
                if let Ok(pid) = text.trim().parse() {
                    return pid;
                }
            }
            assert!(Instant::now() < deadline, "the fake wrote no {name}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn provider(&self, mode: &str) -> ClaudeCode {
        ClaudeCode::new("claude", self.settings(mode)).unwrap()
    }

    /// The arguments the fake got on call `n` (from 1).
    fn argv(&self, n: usize) -> Vec<String> {
        let bytes = std::fs::read(self.dir.path().join(format!("call-{n}.argv"))).unwrap();
        String::from_utf8(bytes)
            .unwrap()
            .split_terminator('\0')
            .map(str::to_owned)
            .collect()
    }

    /// What the fake read on stdin on call `n`.
    fn stdin(&self, n: usize) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("call-{n}.stdin"))).unwrap()
    }

    /// How many times the fake ran.
    fn calls(&self) -> usize {
        (1..)
            .take_while(|n| self.dir.path().join(format!("call-{n}.argv")).exists())
            .count()
    }
}

fn failed(result: Result<ProviderReply, ProviderError>) -> String {
    match result {
        Err(ProviderError::Failed { message }) => message,
        other => panic!("expected Failed, got {other:?}"),
    }
}

/// Whether `flag` is directly followed by `value` in `argv`.
fn has_pair(argv: &[String], flag: &str, value: &str) -> bool {
    argv.windows(2).any(|w| w[0] == flag && w[1] == value)
}

#[tokio::test]
async fn a_new_session_then_a_resumed_one_that_gets_only_the_delta() {
    let fake = Fake::new();
    let mut settings = fake.settings("ok");
    settings.model = Some("sonnet".into());
    let provider = ClaudeCode::new("claude", settings).unwrap();

    let (sink, mut deltas) = tokio::sync::mpsc::unbounded_channel();
    let mut first = request(bootstrap_plan(), None);
    first.status = Some("<status>pullo: idle</status>".into());
    first.deltas = Some(sink);
    let expected_prompt = bootstrap_block(&first.plan, first.status.as_deref());
    let reply = provider.call(first).await.unwrap();
    assert_eq!(reply.text, "Hello from call 1.");
    // The session and where it ends: the turn's last assistant message.
    assert_eq!(
        reply.provider_session.as_deref(),
        Some("fake-session-1@fake-uuid-1")
    );
    assert_eq!(
        reply.usage,
        Some(TokenUsage {
            input: 11,
            output: 44,
            cache_read: 33,
            cache_write: 22,
        })
    );
    let mut fragments = Vec::new();
    while let Ok(StreamDelta::Text(fragment)) = deltas.try_recv() {
        fragments.push(fragment);
    }
    assert_eq!(fragments, ["Hello ", "from call 1."]);

    let argv = fake.argv(1);
    let dir = fake.dir.path().display().to_string();
    assert_eq!(
        argv,
        [
            "--fake-dir",
            dir.as_str(),
            "--fake-mode",
            "ok",
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--model",
            "sonnet",
            "--append-system-prompt",
            SYSTEM,
        ]
    );
    assert!(!argv.iter().any(|a| a == "--resume"), "{argv:?}");
    let stdin = fake.stdin(1);
    assert_eq!(stdin, expected_prompt);
    for text in [
        "alpha-one",
        "beta-two",
        "gamma-three",
        "<status>pullo: idle</status>",
    ] {
        assert!(stdin.contains(text), "{text} missing from {stdin}");
    }

    let session = reply.provider_session.unwrap();
    let second = request(delta_plan(), Some(&session));
    let expected_delta = bootstrap_block(&second.plan, None);
    let reply = provider.call(second).await.unwrap();
    assert_eq!(reply.text, "Hello from call 2.");
    assert_eq!(
        reply.provider_session.as_deref(),
        Some("fake-session-1@fake-uuid-2")
    );
    let argv = fake.argv(2);
    assert!(has_pair(&argv, "--resume", "fake-session-1"), "{argv:?}");
    assert!(
        has_pair(&argv, "--resume-session-at", "fake-uuid-1"),
        "{argv:?}"
    );
    assert!(
        has_pair(&argv, "--append-system-prompt", SYSTEM),
        "{argv:?}"
    );
    let stdin = fake.stdin(2);
    assert_eq!(stdin, expected_delta);
    assert!(stdin.contains("delta-four") && stdin.contains("delta-five"));
    for seen in ["alpha-one", "beta-two", "gamma-three"] {
        assert!(!stdin.contains(seen), "{seen} was sent again: {stdin}");
    }
    assert_eq!(fake.calls(), 2);
}

#[tokio::test]
async fn a_resume_that_reports_a_new_session_id_returns_the_new_one() {
    let fake = Fake::new();
    let provider = fake.provider("fork");
    let first = provider
        .call(request(bootstrap_plan(), None))
        .await
        .unwrap();
    assert_eq!(
        first.provider_session.as_deref(),
        Some("fake-session-1@fake-uuid-1")
    );
    // A session recorded before legio kept where it ends: resumed at its end.
    let second = provider
        .call(request(delta_plan(), Some("fake-session-1")))
        .await
        .unwrap();
    assert!(has_pair(&fake.argv(2), "--resume", "fake-session-1"));
    assert!(!fake.argv(2).iter().any(|a| a == "--resume-session-at"));
    assert_eq!(
        second.provider_session.as_deref(),
        Some("fake-session-2@fake-uuid-2")
    );
}

#[tokio::test]
async fn a_turn_after_a_cut_one_resumes_where_the_last_recorded_turn_ended() {
    // A turn the log never recorded (legio was killed during it) may have left the CLI's
    // session longer; the next turn resumes at the recorded point, not at the file's end.
    let fake = Fake::new();
    let provider = fake.provider("ok");
    let recorded = provider
        .call(request(bootstrap_plan(), None))
        .await
        .unwrap()
        .provider_session
        .unwrap();
    let _cut = provider
        .call(request(delta_plan(), Some(&recorded)))
        .await
        .unwrap();
    let reply = provider
        .call(request(delta_plan(), Some(&recorded)))
        .await
        .unwrap();
    let argv = fake.argv(3);
    assert!(has_pair(&argv, "--resume", "fake-session-1"), "{argv:?}");
    assert!(
        has_pair(&argv, "--resume-session-at", "fake-uuid-1"),
        "{argv:?}"
    );
    assert_eq!(
        reply.provider_session.as_deref(),
        Some("fake-session-1@fake-uuid-3")
    );
}

#[tokio::test]
async fn a_resume_point_the_session_does_not_hold_is_a_lost_session() {
    let fake = Fake::new();
    let provider = fake.provider("ok");
    let recorded = provider
        .call(request(bootstrap_plan(), None))
        .await
        .unwrap()
        .provider_session
        .unwrap();
    let (session, _) = recorded.split_once('@').unwrap();
    let gone = format!("{session}@no-such-uuid");
    let result = provider.call(request(delta_plan(), Some(&gone))).await;
    assert_eq!(result, Err(ProviderError::SessionLost { session: gone }));
}

#[test]
fn a_resume_point_reads_back_what_it_writes() {
    use legio_llm::claude_code::ResumePoint;
    for text in ["abc@u-1", "abc"] {
        assert_eq!(ResumePoint::parse(text).to_string(), text);
    }
    assert_eq!(
        ResumePoint::parse("abc@u-1"),
        ResumePoint {
            session: "abc".into(),
            at: Some("u-1".into())
        }
    );
    assert_eq!(ResumePoint::parse("abc@").at, None);
}

#[tokio::test]
async fn an_unknown_session_is_lost_whether_said_on_stderr_or_in_the_result() {
    let fake = Fake::new();
    let result = fake
        .provider("ok")
        .call(request(delta_plan(), Some("unknown-id")))
        .await;
    assert_eq!(
        result,
        Err(ProviderError::SessionLost {
            session: "unknown-id".into()
        })
    );
    assert!(has_pair(&fake.argv(1), "--resume", "unknown-id"));

    let result = fake
        .provider("lost-result")
        .call(request(delta_plan(), Some("gone-id")))
        .await;
    assert_eq!(
        result,
        Err(ProviderError::SessionLost {
            session: "gone-id".into()
        })
    );
}

#[tokio::test]
async fn a_failure_of_a_known_session_is_not_a_lost_session() {
    let fake = Fake::new();
    let session = fake
        .provider("ok")
        .call(request(bootstrap_plan(), None))
        .await
        .unwrap()
        .provider_session
        .unwrap();
    let message = failed(
        fake.provider("crash")
            .call(request(delta_plan(), Some(&session)))
            .await,
    );
    assert!(message.contains("exit status: 1"), "{message}");
}

#[tokio::test]
async fn a_run_without_a_result_fails() {
    let fake = Fake::new();
    let (sink, _deltas) = tokio::sync::mpsc::unbounded_channel();
    let mut req = request(bootstrap_plan(), None);
    req.deltas = Some(sink);
    let message = failed(fake.provider("no-result").call(req).await);
    assert!(message.starts_with("claude: "), "{message}");
    assert!(message.contains("without a result"), "{message}");
}

#[tokio::test]
async fn an_invalid_json_line_fails_and_names_the_line() {
    let fake = Fake::new();
    let message = failed(
        fake.provider("invalid")
            .call(request(bootstrap_plan(), None))
            .await,
    );
    assert!(message.contains("not a JSON object"), "{message}");
    assert!(message.contains("this is not json"), "{message}");
}

#[tokio::test]
async fn a_silent_run_fails_after_read_timeout_and_is_stopped() {
    let fake = Fake::new();
    let mut settings = fake.settings("hang");
    settings.read_timeout = Duration::from_millis(400);
    let provider = ClaudeCode::new("claude", settings).unwrap();
    let message = failed(provider.call(request(bootstrap_plan(), None)).await);
    assert!(message.contains("read_timeout"), "{message}");
    for name in ["pid", "grandchild"] {
        let pid = fake.pid(name).await;
        assert!(gone_soon(pid).await, "the fake's {name} {pid} still runs");
    }
}

#[tokio::test]
async fn a_run_that_closes_its_output_but_does_not_exit_fails() {
    let fake = Fake::new();
    let mut settings = fake.settings("no-exit");
    settings.read_timeout = Duration::from_millis(400);
    let provider = ClaudeCode::new("claude", settings).unwrap();
    let message = failed(provider.call(request(bootstrap_plan(), None)).await);
    assert!(message.contains("did not exit"), "{message}");
}

#[tokio::test]
async fn error_results_fail_with_what_the_cli_said() {
    let fake = Fake::new();
    let message = failed(
        fake.provider("is-error")
            .call(request(bootstrap_plan(), None))
            .await,
    );
    assert!(message.contains("API Error: 529 overloaded"), "{message}");

    let message = failed(
        fake.provider("max-turns")
            .call(request(bootstrap_plan(), None))
            .await,
    );
    assert!(message.contains("error_max_turns"), "{message}");
}

#[tokio::test]
async fn a_non_zero_exit_fails_even_after_a_result_and_shows_stderr() {
    let fake = Fake::new();
    let message = failed(
        fake.provider("exit-2")
            .call(request(bootstrap_plan(), None))
            .await,
    );
    assert!(message.contains("exit status: 2"), "{message}");
    assert!(
        message.contains("the fake was told to fail after its result"),
        "{message}"
    );

    let message = failed(
        fake.provider("crash")
            .call(request(bootstrap_plan(), None))
            .await,
    );
    assert!(message.contains("without a result"), "{message}");
    assert!(
        message.contains("first stderr line | Error: the fake crashed on purpose"),
        "{message}"
    );
}

#[tokio::test]
async fn a_missing_executable_names_the_path_and_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-claude");
    let settings = ClaudeCodeSettings {
        executable: path.clone(),
        ..ClaudeCodeSettings::default()
    };
    let provider = ClaudeCode::new("cc", settings.clone()).unwrap();
    let message = failed(provider.call(request(bootstrap_plan(), None)).await);
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("providers.cc.executable"), "{message}");
    assert!(message.contains("not found"), "{message}");

    std::fs::write(&path, "#!/bin/sh\n").unwrap();
    let provider = ClaudeCode::new("cc", settings).unwrap();
    let message = failed(provider.call(request(bootstrap_plan(), None)).await);
    assert!(message.contains("not executable"), "{message}");
}

#[tokio::test]
async fn usage_is_estimated_when_the_result_has_none() {
    let fake = Fake::new();
    let reply = fake
        .provider("no-usage")
        .call(request(bootstrap_plan(), None))
        .await
        .unwrap();
    assert_eq!(reply.text, "No usage here.");
    let usage = reply.usage.unwrap();
    assert!(usage.input > 0 && usage.output > 0, "{usage:?}");
    assert_eq!((usage.cache_read, usage.cache_write), (0, 0));
}

#[tokio::test]
async fn partial_deltas_are_forwarded_once() {
    let fake = Fake::new();
    let (sink, mut deltas) = tokio::sync::mpsc::unbounded_channel();
    let mut req = request(bootstrap_plan(), None);
    req.deltas = Some(sink);
    let reply = fake.provider("partial").call(req).await.unwrap();
    assert_eq!(reply.text, "Hello from call 1.");
    let mut fragments = Vec::new();
    while let Ok(StreamDelta::Text(fragment)) = deltas.try_recv() {
        fragments.push(fragment);
    }
    assert_eq!(fragments, ["Hel", "lo"]);
}

#[tokio::test]
async fn dropping_the_call_kills_the_childs_whole_group() {
    let fake = Fake::new();
    let provider = fake.provider("hang");
    let call = provider.call(request(bootstrap_plan(), None));
    let cut = async {
        fake.pid("pid").await;
    };
    tokio::select! {
        _ = call => panic!("the fake answered"),
        () = cut => {}
    }
    // The call's future is dropped here, as the runtime's turn timeout drops it.
    for name in ["pid", "grandchild"] {
        let pid = fake.pid(name).await;
        assert!(gone_soon(pid).await, "the fake's {name} {pid} still runs");
    }
    assert_eq!(pid_files(&fake), 0, "the pid file is removed with the turn");
}

/// The environment variable that makes [`helper_runs_one_turn`] run (the fake's folder).
const HELPER: &str = "LEGIO_CLAUDE_CODE_TEST_HELPER";

/// Not a test on its own: the legio-side process of the tests below, which run this binary
/// again with only this test and [`HELPER`] set. It runs one turn with the fake in the mode of
/// `LEGIO_CLAUDE_CODE_TEST_MODE`, resuming `LEGIO_CLAUDE_CODE_TEST_RESUME` if set, and prints
/// the reply's session as `helper-session: ID`.
#[tokio::test]
async fn helper_runs_one_turn() {
    let Some(dir) = std::env::var_os(HELPER) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let mode = std::env::var("LEGIO_CLAUDE_CODE_TEST_MODE").unwrap();
    let resume = std::env::var("LEGIO_CLAUDE_CODE_TEST_RESUME").ok();
    let settings = ClaudeCodeSettings {
        executable: fake_cli(),
        extra_args: vec![
            "--fake-dir".into(),
            dir.display().to_string(),
            "--fake-mode".into(),
            mode,
        ],
        read_timeout: Duration::from_secs(600),
        state_dir: dir.join("state"),
        ..ClaudeCodeSettings::default()
    };
    let provider = ClaudeCode::new("claude", settings).unwrap();
    let plan = if resume.is_some() {
        delta_plan()
    } else {
        bootstrap_plan()
    };
    let reply = provider
        .call(request(plan, resume.as_deref()))
        .await
        .unwrap();
    println!("helper-session: {}", reply.provider_session.unwrap());
}

/// Runs [`helper_runs_one_turn`] in a new process for `fake` in `mode`.
fn helper(fake: &Fake, mode: &str) -> std::process::Command {
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", "helper_runs_one_turn", "--nocapture"])
        .env(HELPER, fake.dir.path())
        .env("LEGIO_CLAUDE_CODE_TEST_MODE", mode)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    command
}

/// The pid files of running CLIs in the fake's state directory.
fn pid_files(fake: &Fake) -> usize {
    std::fs::read_dir(fake.state_dir().join("children"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_killed_legio_process_leaves_no_cli_running() {
    let fake = Fake::new();
    let mut legio = helper(&fake, "hang").spawn().unwrap();
    let cli = fake.pid("pid").await;
    let grandchild = fake.pid("grandchild").await;
    assert_eq!(pid_files(&fake), 1, "the running CLI has a pid file");
    legio.kill().unwrap(); // SIGKILL: no destructor runs.
    legio.wait().unwrap();
    assert!(
        gone_soon(cli).await,
        "the CLI {cli} outlived the legio process that started it"
    );

    // The CLI's own child has no parent-death signal; the next legio process's first turn
    // kills it, by its pid file.
    assert!(
        !gone_soon_within(grandchild, Duration::from_millis(200)).await,
        "the CLI's child {grandchild} is expected to run until it is reaped"
    );
    let reply = fake
        .provider("ok")
        .call(request(bootstrap_plan(), None))
        .await
        .unwrap();
    assert_eq!(reply.text, "Hello from call 2.");
    assert!(
        gone_soon(grandchild).await,
        "the CLI's child {grandchild} was not reaped by the next process"
    );
    assert_eq!(pid_files(&fake), 0);
}

/// The session id a finished [`helper_runs_one_turn`] printed.
fn helper_session(output: std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the helper failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("helper-session: "))
        .unwrap_or_else(|| panic!("no session in {stdout}"))
        .to_owned()
}

#[tokio::test]
async fn a_session_resumes_in_a_process_started_in_another_directory() {
    // Like the real CLI, the fake keeps its sessions per working directory: two legio
    // processes started in different directories must still run it in the same one.
    let fake = Fake::new();
    let (here, there) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let session = helper_session(
        helper(&fake, "ok")
            .current_dir(here.path())
            .output()
            .unwrap(),
    );
    let resumed = helper_session(
        helper(&fake, "ok")
            .current_dir(there.path())
            .env("LEGIO_CLAUDE_CODE_TEST_RESUME", &session)
            .output()
            .unwrap(),
    );
    let (id, at) = session.split_once('@').unwrap();
    assert_eq!(resumed, format!("{id}@fake-uuid-2"));
    assert!(has_pair(&fake.argv(2), "--resume", id));
    assert!(has_pair(&fake.argv(2), "--resume-session-at", at));
    let cwd = |n: usize| {
        let text = std::fs::read_to_string(fake.dir.path().join(format!("call-{n}.cwd"))).unwrap();
        PathBuf::from(text.trim_end())
    };
    let work = fake.state_dir().join("work");
    let expected = work.join("t%3A1").join("vorenus");
    assert_eq!(cwd(1), expected.canonicalize().unwrap());
    assert_eq!(cwd(2), cwd(1));

    // Another agent, or the same agent in another conversation, has a directory of its own.
    let provider = fake.provider("ok");
    let mut other_agent = request(bootstrap_plan(), None);
    other_agent.agent = AgentName::new("pullo").unwrap();
    provider.call(other_agent).await.unwrap();
    let mut other_conversation = request(bootstrap_plan(), None);
    other_conversation.conversation = ConversationKey::new("..").unwrap();
    provider.call(other_conversation).await.unwrap();
    assert_eq!(
        cwd(3),
        work.join("t%3A1").join("pullo").canonicalize().unwrap()
    );
    assert_eq!(
        cwd(4),
        work.join("%2E%2E").join("vorenus").canonicalize().unwrap()
    );
}

#[tokio::test]
async fn a_pid_file_of_a_live_owner_or_a_reused_pid_is_left_alone() {
    // A process that merely has the recorded pid (a different start time) is not killed, nor
    // is a child of an owner that still runs.
    use std::os::unix::process::CommandExt;
    let fake = Fake::new();
    let mut bystander = std::process::Command::new("sleep")
        .arg("300")
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = bystander.id() as i32;
    let start = start_time(pid);
    let children = fake.state_dir().join("children");
    std::fs::create_dir_all(&children).unwrap();
    let dead_owner = {
        let mut done = std::process::Command::new("true").spawn().unwrap();
        done.wait().unwrap();
        done.id()
    };
    std::fs::write(
        children.join(pid.to_string()),
        format!("{pid} {} {dead_owner} 1\n", start + 1),
    )
    .unwrap();
    std::fs::write(
        children.join("other"),
        format!(
            "{pid} {start} {} {}\n",
            std::process::id(),
            start_time(std::process::id() as i32)
        ),
    )
    .unwrap();
    fake.provider("ok")
        .call(request(bootstrap_plan(), None))
        .await
        .unwrap();
    assert!(
        !gone_soon_within(pid, Duration::from_millis(300)).await,
        "a process that only shares the recorded pid was killed"
    );
    assert!(
        !children.join(pid.to_string()).exists(),
        "the dead owner's pid file is removed"
    );
    assert!(children.join("other").exists(), "a live owner's is kept");
    bystander.kill().unwrap();
    bystander.wait().unwrap();
}

/// Process `pid`'s start time (`/proc/PID/stat`'s field 22).
fn start_time(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = stat.rsplit_once(") ").unwrap().1;
    rest.split_whitespace().nth(19).unwrap().parse().unwrap()
}

/// Whether process `pid` is gone (or a zombie) within a generous deadline.
async fn gone_soon(pid: i32) -> bool {
    gone_soon_within(pid, Duration::from_secs(10)).await
}

/// Whether process `pid` is gone (or a zombie) within `wait`.
async fn gone_soon_within(pid: i32, wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    loop {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            // The state follows the parenthesised command name.
            Ok(stat) if stat.rsplit(") ").next().is_some_and(|s| s.starts_with('Z')) => {
                return true
            }
            Ok(_) if Instant::now() >= deadline => return false,
            Ok(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

#[test]
fn capabilities_settings_and_building() {
    let settings = ClaudeCodeSettings {
        context_window: 123_456,
        ..ClaudeCodeSettings::default()
    };
    let provider = build_provider("cc", &ProviderSettings::ClaudeCode(settings.clone())).unwrap();
    let capabilities = provider.capabilities();
    assert_eq!(capabilities.history, History::Session { resumable: true });
    assert_eq!(capabilities.context_window, 123_456);

    for bad in [
        ClaudeCodeSettings {
            executable: PathBuf::new(),
            ..settings.clone()
        },
        ClaudeCodeSettings {
            model: Some(" ".into()),
            ..settings.clone()
        },
        ClaudeCodeSettings {
            read_timeout: Duration::ZERO,
            ..settings.clone()
        },
        ClaudeCodeSettings {
            context_window: 0,
            ..settings.clone()
        },
    ] {
        let error = ClaudeCode::new("cc", bad).unwrap_err().to_string();
        assert!(error.starts_with("providers.cc: "), "{error}");
    }
}

#[test]
fn arguments_put_extra_args_first_and_skip_an_empty_system_prompt() {
    let settings = ClaudeCodeSettings {
        extra_args: vec!["--permission-mode".into(), "plan".into()],
        ..ClaudeCodeSettings::default()
    };
    let mut req = request(delta_plan(), Some("abc"));
    req.system_prompt = String::new();
    assert_eq!(
        arguments(&settings, &req, None),
        [
            "--permission-mode",
            "plan",
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--resume",
            "abc",
        ]
    );
}

#[tokio::test]
async fn an_mcp_endpoint_becomes_a_private_mcp_config_file_and_allowed_tools() {
    let fake = Fake::new();
    let mut req = request(delta_plan(), None);
    req.plan.mode = DeliveryMode::Bootstrap;
    req.mcp = Some(legio_llm::McpAccess {
        url: "http://127.0.0.1:7878/mcp".into(),
        bearer: "lgm1.tok".into(),
        tools: vec!["get_history".into(), "dispatch".into()],
    });
    assert!(
        !format!("{:?}", req.mcp).contains("lgm1.tok"),
        "the token stays out of Debug"
    );
    fake.provider("ok").call(req).await.unwrap();

    // The token is nowhere on the command line (any local user reads /proc/PID/cmdline).
    let args = fake.argv(1);
    assert!(!args.iter().any(|a| a.contains("lgm1.tok")), "{args:?}");
    let at = args.iter().position(|a| a == "--mcp-config").unwrap();
    let file = PathBuf::from(&args[at + 1]);
    assert!(file.starts_with(fake.state_dir().join("mcp")), "{file:?}");
    assert_eq!(args[at + 2], "--allowedTools");
    assert_eq!(args[at + 3], "mcp__legio__get_history,mcp__legio__dispatch");
    // The file the CLI read: the endpoint with the token, readable by this user alone.
    let seen = std::fs::read_to_string(fake.dir.path().join("call-1.mcp-config")).unwrap();
    let config: serde_json::Value = serde_json::from_str(&seen).unwrap();
    assert_eq!(
        config,
        serde_json::json!({"mcpServers": {"legio": {"type": "http",
            "url": "http://127.0.0.1:7878/mcp",
            "headers": {"Authorization": "Bearer lgm1.tok"}}}})
    );
    let mode = std::fs::read_to_string(fake.dir.path().join("call-1.mcp-mode")).unwrap();
    assert_eq!(mode.trim(), "600");
    assert!(!file.exists(), "the file is removed after the turn");
}

#[test]
fn without_a_file_there_is_no_mcp_config() {
    let mut req = request(delta_plan(), None);
    req.mcp = Some(legio_llm::McpAccess {
        url: "http://127.0.0.1:7878/mcp".into(),
        bearer: "lgm1.tok".into(),
        tools: vec!["dispatch".into()],
    });
    let args = arguments(&ClaudeCodeSettings::default(), &req, None);
    assert!(!args.iter().any(|a| a.contains("mcp")), "{args:?}");
    let config = legio_llm::claude_code::mcp_config(req.mcp.as_ref().unwrap());
    assert!(config.contains("Bearer lgm1.tok"), "{config}");
}
