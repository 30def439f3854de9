//! `legio post` with a `claude-code` orchestrator on the real Claude Code CLI (npm
//! `@anthropic-ai/claude-code`, installed by `scripts/install-claude-code.sh`, read from
//! `LEGIO_CLAUDE_CODE`), against a stand-in for the Anthropic API on loopback
//! (crates/legio-llm/tests/fixtures/anthropic-stand-in.py, which records every request): each
//! message once on the wire across processes (a resume), a `legio post` killed with SIGKILL
//! mid-turn leaves no CLI running and the next turn's request holds each message once, and a
//! CLI session whose files are gone is rebuilt from the log with the notice. Without the CLI these
//! skip (fail under `CI=true`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const CONVERSATION: &str = "cc:real";

/// The real CLI, or `None` (skipped; failing under CI) when it is missing.
fn claude_cli() -> Option<PathBuf> {
    let path = std::env::var_os("LEGIO_CLAUDE_CODE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/claude-code/2.1.197/node_modules/.bin/claude")
        });
    let runs = Command::new(&path)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if runs {
        Some(path)
    } else {
        legio_tests::component_missing(
            "the Claude Code CLI (LEGIO_CLAUDE_CODE)",
            "run scripts/install-claude-code.sh and export what it prints",
        );
        None
    }
}

/// The stand-in Anthropic API, killed when dropped.
struct StandIn {
    child: Child,
    port: u16,
    record: PathBuf,
}

impl StandIn {
    fn start(dir: &Path) -> Self {
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../legio-llm/tests/fixtures/anthropic-stand-in.py");
        let record = dir.join("wire.jsonl");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(&record)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let port = line
            .trim()
            .strip_prefix("port ")
            .unwrap_or_else(|| panic!("the stand-in said {line:?}"))
            .parse()
            .unwrap();
        Self {
            child,
            port,
            record,
        }
    }

    /// The bodies of the `/v1/messages` requests so far, in order.
    fn messages_requests(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.record).unwrap_or_default();
        text.lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|r| {
                r["method"] == "POST"
                    && r["path"]
                        .as_str()
                        .is_some_and(|p| p.split('?').next() == Some("/v1/messages"))
            })
            .map(|r| r["body"].clone())
            .collect()
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How often `marker` occurs in a request's messages (its whole conversation as sent).
fn count(request: &Value, marker: &str) -> usize {
    request["messages"].to_string().matches(marker).count()
}

/// A legion whose orchestrator runs on the real CLI, talking to the stand-in.
struct Legion {
    dir: tempfile::TempDir,
    stand_in: StandIn,
}

impl Legion {
    fn new(cli: &Path) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("lead.md"), "You lead.").unwrap();
        std::fs::create_dir(dir.path().join("claude-config")).unwrap();
        let text = format!(
            "[store]\npath = \"db\"\n\
[agents.lead]\nrole = \"orchestrator\"\nprompt = \"lead.md\"\nprovider = \"cc\"\n\
[providers.cc]\nkind = \"claude-code\"\nexecutable = {:?}\nread_timeout_seconds = 180\n",
            cli.display().to_string()
        );
        std::fs::write(dir.path().join("legio.toml"), text).unwrap();
        let stand_in = StandIn::start(dir.path());
        Self { dir, stand_in }
    }

    /// `legio post TEXT`, not waited for; the CLI it runs talks to the stand-in only.
    fn post(&self, text: &str) -> Child {
        self.post_in(self.dir.path(), text)
    }

    /// `legio post TEXT` started in folder `cwd`, not waited for.
    fn post_in(&self, cwd: &Path, text: &str) -> Child {
        Command::new(env!("CARGO_BIN_EXE_legio"))
            .current_dir(cwd)
            .env("LEGIO_CONFIG", self.dir.path().join("legio.toml"))
            .env("NO_COLOR", "1")
            .env_remove("LEGIO_STORE_PATH")
            .env_remove("LEGIO_STORE_DURABILITY")
            .env(
                "ANTHROPIC_BASE_URL",
                format!("http://127.0.0.1:{}", self.stand_in.port),
            )
            .env("ANTHROPIC_API_KEY", "sk-ant-legio-test-dummy")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("CLAUDE_CONFIG_DIR", self.claude_config())
            .env_remove("ANTHROPIC_AUTH_TOKEN")
            .args(["post", "--conversation", CONVERSATION, text])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// `legio post TEXT` to its end; its reply (stdout), which must be the stand-in's.
    fn post_ok(&self, text: &str) -> String {
        self.post_ok_in(self.dir.path(), text)
    }

    /// `legio post TEXT` started in folder `cwd`, to its end; its reply.
    fn post_ok_in(&self, cwd: &Path, text: &str) -> String {
        let output = self.post_in(cwd, text).wait_with_output().unwrap();
        let (out, err) = (
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        );
        assert!(output.status.success(), "post {text:?}: {out}\n{err}");
        assert!(
            out.contains("stand-in reply #"),
            "post {text:?}: {out}\n{err}"
        );
        out
    }

    fn claude_config(&self) -> PathBuf {
        self.dir.path().join("claude-config")
    }

    /// The pids of running CLIs, from the provider's pid files (state_dir beside the database).
    fn running_clis(&self) -> Vec<i32> {
        let children = self.dir.path().join("db.claude-code/children");
        std::fs::read_dir(children)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .filter_map(|t| t.split_whitespace().next()?.parse().ok())
            .collect()
    }

    /// Whether one of the CLI's session files (its JSONL under `CLAUDE_CONFIG_DIR/projects`)
    /// holds `text`.
    fn session_files_hold(&self, text: &str) -> bool {
        let projects = self.claude_config().join("projects");
        std::fs::read_dir(projects)
            .into_iter()
            .flatten()
            .flatten()
            .flat_map(|project| std::fs::read_dir(project.path()).into_iter().flatten())
            .flatten()
            .filter(|f| f.path().extension().is_some_and(|e| e == "jsonl"))
            .any(|f| std::fs::read_to_string(f.path()).is_ok_and(|t| t.contains(text)))
    }

    /// The last `/v1/messages` request, which must hold each of `markers` exactly once.
    fn last_request_holds_each_once(&self, markers: &[&str]) -> Value {
        let requests = self.stand_in.messages_requests();
        let last = requests.last().expect("a request reached the stand-in");
        for marker in markers {
            assert_eq!(
                count(last, marker),
                1,
                "{marker} in the last of {} requests: {}",
                requests.len(),
                last["messages"]
            );
        }
        last.clone()
    }
}

/// Whether process `pid` is gone (or a zombie) within `wait`.
fn gone_within(pid: i32, wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    loop {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            Ok(stat) if stat.rsplit(") ").next().is_some_and(|s| s.starts_with('Z')) => {
                return true
            }
            Ok(_) if Instant::now() >= deadline => return false,
            Ok(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Polls `done` until it holds, within `wait`.
fn eventually(wait: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + wait;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn each_message_reaches_the_real_cli_once_across_processes_and_a_lost_session_is_rebuilt() {
    let Some(cli) = claude_cli() else { return };
    let legion = Legion::new(&cli);

    legion.post_ok("first M1-alpha");
    let first = legion.last_request_holds_each_once(&["M1-alpha"]);
    // A second process, started in another folder, resumes the CLI's session (the CLI keys
    // sessions by working directory, which legio fixes) and sends only the new message: the
    // CLI's history holds the first, once.
    let elsewhere = legion.dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    legion.post_ok_in(&elsewhere, "second M2-beta");
    let second = legion.last_request_holds_each_once(&["M1-alpha", "M2-beta", "stand-in reply #"]);
    assert!(
        second["messages"].as_array().unwrap().len() > first["messages"].as_array().unwrap().len(),
        "the resumed request carries the CLI's history"
    );
    assert_eq!(count(&second, "restored from the log"), 0);

    // The CLI's session files are lost: the CLI cannot resume, legio rebuilds the context from
    // the log with its notice, each message once.
    std::fs::remove_dir_all(legion.claude_config().join("projects")).unwrap();
    legion.post_ok("third M3-gamma");
    let third = legion.last_request_holds_each_once(&["M1-alpha", "M2-beta", "M3-gamma"]);
    assert_eq!(
        count(&third, "restored from the log"),
        1,
        "{}",
        third["messages"]
    );
}

#[test]
fn a_killed_legio_post_leaves_no_cli_and_the_next_turn_sends_each_message_once() {
    let Some(cli) = claude_cli() else { return };
    let legion = Legion::new(&cli);
    legion.post_ok("first K1-one");

    // A post whose model call hangs (the stand-in holds it): kill -9 legio mid-turn.
    let mut cut = legion.post("second K2-two HOLD");
    eventually(Duration::from_secs(60), "the held request", || {
        legion
            .stand_in
            .messages_requests()
            .iter()
            .any(|r| count(r, "K2-two") > 0)
    });
    // The CLI writes the prompt into its session file before the model answers (the case this
    // test is about; the write is not synchronous with the request, so wait for it).
    eventually(
        Duration::from_secs(30),
        "the cut prompt in the CLI's session",
        || legion.session_files_hold("K2-two"),
    );
    let clis = legion.running_clis();
    assert_eq!(clis.len(), 1, "one CLI runs the held turn: {clis:?}");
    cut.kill().unwrap();
    cut.wait().unwrap();
    assert!(
        gone_within(clis[0], Duration::from_secs(10)),
        "the CLI {} outlived the legio process killed mid-turn",
        clis[0]
    );

    // The next turn resumes the CLI's session at the last recorded turn: the cut message comes
    // once (legio's redelivery), not also from the CLI's own history.
    legion.post_ok("third K3-three");
    let last = legion.last_request_holds_each_once(&["K1-one", "K2-two", "K3-three"]);
    assert_eq!(
        count(&last, "restored from the log"),
        0,
        "resumed, not rebuilt"
    );
    assert!(legion.running_clis().is_empty());
}
