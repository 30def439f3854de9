//! The MCP commands of the binary: `legio inspect tools` (every agent's tools and where each
//! comes from, an [mcp.NAME] server started to list its own), `legio mcp token`, and
//! `legio mcp serve` spoken to by the official Python SDK over stdio (skipped without it;
//! failing under `CI=true`), its calls recorded in the log.

use std::path::PathBuf;

use serde_json::Value;

use super::{code, legio_in, stderr, stdout, write_config};

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/mcp")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn inspect_tools_lists_every_agents_tools_and_where_each_comes_from() {
    let dir = tempfile::tempdir().unwrap();
    let mcp = format!(
        "[mcp.bad]\ncommand = \"python3\"\nargs = [{:?}, \"collide\"]\nagents = [\"ann\"]\n",
        fixture("bad_server.py")
    );
    write_config(dir.path(), &mcp, "");
    let config = dir.path().join("legio.toml");
    let out = legio_in(
        dir.path(),
        &config,
        &["inspect", "tools", "--format", "json"],
        None,
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let rows: Vec<Value> = serde_json::from_str(&stdout(&out)).unwrap();
    let tools_of = |agent: &str| -> Vec<(String, String)> {
        rows.iter()
            .filter(|r| r["agent"] == agent)
            .map(|r| {
                (
                    r["tool"].as_str().unwrap().to_owned(),
                    r["source"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let ann = tools_of("ann");
    assert!(
        ann.contains(&("get_history".to_owned(), "built-in".to_owned())),
        "{ann:?}"
    );
    assert!(
        ann.contains(&("append_notebook".to_owned(), "memory".to_owned())),
        "{ann:?}"
    );
    let served: Vec<&(String, String)> = ann
        .iter()
        .filter(|(t, _)| t.starts_with("mcp__bad__"))
        .collect();
    assert_eq!(
        served.len(),
        4,
        "ok, misbehave, get_history, dispatch: {ann:?}"
    );
    assert!(
        served
            .iter()
            .all(|(_, s)| s.starts_with("mcp bad (stdio: python3 ")),
        "{served:?}"
    );
    assert!(tools_of("bob").iter().all(|(t, _)| !t.starts_with("mcp__")));
    assert!(tools_of("lead").contains(&("dispatch".to_owned(), "built-in".to_owned())));

    let table = legio_in(dir.path(), &config, &["inspect", "tools"], None);
    assert!(
        stdout(&table).contains("mcp__bad__ok"),
        "{}",
        stdout(&table)
    );
    let bad = legio_in(
        dir.path(),
        &config,
        &["inspect", "tools", "--conversation", "x:1"],
        None,
    );
    assert_eq!(code(&bad), 1);
    assert!(stderr(&bad).contains("no database"), "{}", stderr(&bad));
    // With a conversation, the tools its host declared (the last declaration) come too.
    {
        use legio_core::{ConversationKey, DeclaredTool, Event, Timestamp, ToolsDeclared};
        use legio_store::EventLog;
        let log = legio_store::SledLog::open(dir.path().join("db"), &Default::default()).unwrap();
        let declared = |names: &[&str]| {
            Event::ToolsDeclared(ToolsDeclared {
                conversation: ConversationKey::new("x:1").unwrap(),
                at: Timestamp::EPOCH,
                tools: names
                    .iter()
                    .map(|name| DeclaredTool {
                        name: (*name).to_owned(),
                        description: format!("the host's {name}\nmore"),
                        parameters: "{}".to_owned(),
                    })
                    .collect(),
            })
        };
        log.append(vec![declared(&["old"])]).unwrap();
        log.append(vec![declared(&["lookup", "note"])]).unwrap();
    }
    let unknown = legio_in(
        dir.path(),
        &config,
        &["inspect", "tools", "--conversation", "x:9"],
        None,
    );
    assert_eq!(code(&unknown), 1);
    let text = stderr(&unknown);
    assert!(text.contains("no conversation \"x:9\""), "{text}");
    let out = legio_in(
        dir.path(),
        &config,
        &[
            "inspect",
            "tools",
            "--conversation",
            "x:1",
            "--format",
            "json",
        ],
        None,
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let rows: Vec<Value> = serde_json::from_str(&stdout(&out)).unwrap();
    let host: Vec<(&str, &str, &str)> = rows
        .iter()
        .filter(|r| r["agent"] == "(host turns)")
        .map(|r| {
            let cell = |k: &str| r[k].as_str().unwrap();
            (cell("tool"), cell("source"), cell("description"))
        })
        .collect();
    let source = "declared by the host in x:1 (seq 2)";
    assert_eq!(
        host,
        [
            ("lookup", source, "the host's lookup"),
            ("note", source, "the host's note")
        ]
    );
    assert!(
        rows.iter().any(|r| r["tool"] == "mcp__bad__ok"),
        "the configured tools are still listed"
    );
}

/// A `[mcp.NAME]` command that is no MCP server (`cat` echoes the initialize request back) fails
/// in legio's words alone: none of the MCP SDK's client traces (`WARN rmcp::service::client:
/// Received unexpected message Request(JsonRpcRequest { ... })`), unless `LEGIO_LOG` asks.
#[test]
fn a_command_that_is_no_mcp_server_fails_without_the_sdks_traces() {
    let dir = tempfile::tempdir().unwrap();
    let mcp = "[mcp.cat]\ncommand = \"cat\"\nagents = [\"ann\"]\ntimeout_seconds = 2\n";
    write_config(dir.path(), mcp, "");
    let inspect = |log: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_legio"));
        command
            .current_dir(dir.path())
            .env("LEGIO_CONFIG", dir.path().join("legio.toml"))
            .env("NO_COLOR", "1")
            .env_remove("LEGIO_LOG")
            .args(["inspect", "tools"])
            .stdin(std::process::Stdio::null());
        if let Some(log) = log {
            command.env("LEGIO_LOG", log);
        }
        command.output().unwrap()
    };
    let out = inspect(None);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    let text = stderr(&out);
    assert!(
        text.contains("cannot start the MCP server [mcp.cat]"),
        "{text}"
    );
    assert!(
        !text.contains("rmcp::") && !text.contains("JsonRpc"),
        "{text}"
    );
    assert_eq!(text.lines().count(), 1, "one line, legio's: {text}");
    // Asked for, the SDK's traces show.
    let out = inspect(Some("warn"));
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    assert!(
        stderr(&out).contains("rmcp::service::client"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn mcp_token_prints_a_scoped_token_and_refuses_unknown_agents() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "", "");
    let config = dir.path().join("legio.toml");
    let args = [
        "mcp",
        "token",
        "--conversation",
        "c:1",
        "--agent",
        "ann",
        "--ttl",
        "2h",
    ];
    let out = legio_in(dir.path(), &config, &args, None);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).starts_with("lgm1."), "{}", stdout(&out));
    assert!(
        dir.path().join("db.mcp-key").is_file(),
        "the key is made beside the database"
    );
    let again = legio_in(dir.path(), &config, &args, None);
    assert_ne!(stdout(&again), "", "a second token with the same key");

    let unknown = legio_in(
        dir.path(),
        &config,
        &["mcp", "token", "--conversation", "c:1", "--agent", "zed"],
        None,
    );
    assert_eq!(code(&unknown), 1);
    assert!(
        stderr(&unknown).contains("no agent zed"),
        "{}",
        stderr(&unknown)
    );
    let ttl = legio_in(
        dir.path(),
        &config,
        &[
            "mcp",
            "token",
            "--conversation",
            "c:1",
            "--agent",
            "ann",
            "--ttl",
            "5y",
        ],
        None,
    );
    assert_eq!(code(&ttl), 2, "{}", stderr(&ttl));
    // Past a year (or past what u64 seconds hold) is refused, not wrapped.
    for long in ["366d", "99999999999999999999d", "18446744073709551615d"] {
        let args = [
            "mcp",
            "token",
            "--conversation",
            "c:1",
            "--agent",
            "ann",
            "--ttl",
            long,
        ];
        let out = legio_in(dir.path(), &config, &args, None);
        assert_eq!(code(&out), 2, "{long}: {}", stderr(&out));
    }
    let args = [
        "mcp",
        "token",
        "--conversation",
        "c:1",
        "--agent",
        "ann",
        "--ttl",
        "365d",
    ];
    let year = legio_in(dir.path(), &config, &args, None);
    assert_eq!(code(&year), 0, "{}", stderr(&year));
    // `mcp serve` while another process holds the database says what to do instead.
    let held = legio_store::SledLog::open(dir.path().join("db"), &Default::default()).unwrap();
    let args = ["mcp", "serve", "--conversation", "c:1", "--agent", "ann"];
    let locked = legio_in(dir.path(), &config, &args, Some(""));
    assert_eq!(code(&locked), 1, "{}", stderr(&locked));
    let text = stderr(&locked);
    assert!(
        text.contains("locked") && text.contains("/mcp endpoint"),
        "{text}"
    );
    drop(held);
}

#[test]
fn mcp_serve_speaks_stdio_to_the_python_sdk_and_records_the_calls() {
    let python = std::env::var_os("LEGIO_MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/mcp-venv/bin/python")
        });
    if !std::process::Command::new(&python)
        .args(["-c", "import mcp"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        legio_tests::component_missing(
            "a Python with the mcp SDK (LEGIO_MCP_PYTHON)",
            "run scripts/install-mcp-test-deps.sh and export what it prints",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "", "");
    let config = dir.path().join("legio.toml");
    let calls = r#"[["append_notebook", {"text": "over stdio"}], ["list_notebook", {}]]"#;
    let out = std::process::Command::new(&python)
        .arg(fixture("client.py"))
        .args(["stdio", "-", calls, env!("CARGO_BIN_EXE_legio"), "--config"])
        .arg(&config)
        .args(["mcp", "serve", "--conversation", "c:1", "--agent", "ann"])
        .output()
        .unwrap();
    let got: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let tools = got["tools"].as_array().unwrap_or_else(|| panic!("{got}"));
    assert!(
        tools.contains(&Value::from("append_notebook"))
            && !tools.contains(&Value::from("dispatch")),
        "{got}"
    );
    assert_eq!(got["calls"][0]["error"], false, "{got}");
    assert!(
        got["calls"][1]["text"]
            .as_str()
            .unwrap()
            .contains("over stdio"),
        "{got}"
    );

    // The calls are in the log, as ann's tool calls and results.
    let replay = legio_in(
        dir.path(),
        &config,
        &["replay", "--conversation", "c:1", "--format", "jsonl"],
        None,
    );
    assert_eq!(code(&replay), 0, "{}", stderr(&replay));
    let text = stdout(&replay);
    assert_eq!(text.matches("\"tool_call\"").count(), 2, "{text}");
    assert_eq!(text.matches("\"tool_result\"").count(), 2, "{text}");
}
