//! legio as an MCP client (issue 13), against servers nobody here wrote and bad ones: the
//! reference server `@modelcontextprotocol/server-everything` (npm) on stdio and on streamable
//! HTTP behind `[mcp.NAME]`, its tools offered as `mcp__NAME__T` to the listed agents only, the
//! calls recorded and linked like every tool call; and `tests/fixtures/mcp/bad_server.py`, whose
//! malformed JSON-RPC, hang, exit mid-call and names colliding with built-ins give error results
//! (or stay apart from the built-ins) while the turn goes on. `scripts/install-mcp-test-deps.sh`
//! installs the reference server; without it these skip (fail under `CI=true`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use legio_core::{History, Message, Part, Participant};
use legio_llm::Fault;

use super::tools::result;
use super::Legion;

const INSTALL: &str = "run scripts/install-mcp-test-deps.sh and export what it prints";

/// The reference server's entry script, or `None` (skipped, failing under CI) when missing.
fn everything() -> Option<PathBuf> {
    let path = std::env::var_os("LEGIO_MCP_EVERYTHING")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(
                "target/mcp-node/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
            )
        });
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if path.is_file() && node {
        Some(path)
    } else {
        legio_tests::component_missing(
            "node and @modelcontextprotocol/server-everything (LEGIO_MCP_EVERYTHING)",
            INSTALL,
        );
        None
    }
}

fn bad_server() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mcp/bad_server.py")
        .display()
        .to_string()
}

/// A legion whose config ends with `mcp` (the `[mcp.NAME]` tables).
async fn legion_with(mcp: &str) -> Legion {
    Legion::with_provider(History::Stateless, "", &format!("\n{mcp}")).await
}

fn call(id: &'static str, name: &'static str, args: &'static str) -> Fault {
    Fault::tool_calls([(id, name, args)])
}

/// The message holding the call `id`, and the one holding its result.
fn call_and_result(legion: &Legion, id: &str) -> (Message, Message) {
    let messages: Vec<Message> = legion
        .events()
        .into_iter()
        .filter_map(|r| r.event.as_message().cloned())
        .collect();
    let holding = |want: &dyn Fn(&Part) -> bool| {
        messages
            .iter()
            .find(|m| m.parts.iter().any(want))
            .cloned()
            .unwrap_or_else(|| panic!("no message for {id}"))
    };
    let call = holding(&|p| matches!(p, Part::ToolCall { id: i, .. } if i == id));
    let result = holding(&|p| matches!(p, Part::ToolResult { call_id, .. } if call_id == id));
    (call, result)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_server_on_stdio_serves_the_listed_agents_only() {
    let Some(entry) = everything() else { return };
    let legion = legion_with(&format!(
        "[mcp.everything]\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\nagents = [\"ann\"]\ntimeout_seconds = 20\n",
        entry.display().to_string()
    ))
    .await;
    let ann = Legion::agent("ann");
    legion.provider.inject(
        Some(&ann),
        Fault::tool_calls([
            (
                "e1",
                "mcp__everything__echo",
                r#"{"message":"hello over MCP"}"#,
            ),
            ("s1", "mcp__everything__get-sum", r#"{"a":2,"b":40}"#),
        ]),
    );
    let replies = legion.post("@ann @bob use your tools").await;
    assert!(replies.iter().all(|r| r.error().is_none()), "{replies:?}");

    let anns = legion.requests("ann");
    let offered = anns[0].tool_names();
    assert!(offered.contains(&"mcp__everything__echo"), "{offered:?}");
    assert!(offered.contains(&"mcp__everything__get-sum"), "{offered:?}");
    assert!(
        offered.contains(&"get_history"),
        "the built-ins stay: {offered:?}"
    );
    let bob_requests = legion.requests("bob");
    let bobs = bob_requests[0].tool_names();
    assert!(
        !bobs.iter().any(|t| t.starts_with("mcp__")),
        "bob is not in agents: {bobs:?}"
    );

    assert_eq!(
        result(&legion, "e1"),
        ("Echo: hello over MCP".to_owned(), false)
    );
    let (sum, is_error) = result(&legion, "s1");
    assert!(!is_error && sum.contains("42"), "{sum}");
    let (call, outcome) = call_and_result(&legion, "e1");
    assert_eq!(call.sender, Participant::Agent(ann.clone()));
    assert_eq!(
        outcome.reply_to,
        Some(call.id),
        "the result answers its call"
    );
}

/// A free loopback port (bound then released; the server binds it right after).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The reference server on streamable HTTP, killed when dropped.
struct HttpServer(std::process::Child);

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_http(entry: &std::path::Path) -> (HttpServer, u16) {
    let port = free_port();
    let child = std::process::Command::new("node")
        .arg(entry)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let server = HttpServer(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the HTTP server never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    (server, port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_server_over_streamable_http_serves_its_tools() {
    let Some(entry) = everything() else { return };
    let (_server, port) = start_http(&entry);
    let legion = legion_with(&format!(
        "[mcp.web]\nurl = \"http://127.0.0.1:{port}/mcp\"\nheaders = {{ X-Test = \"legio\" }}\nagents = [\"lead\"]\ntimeout_seconds = 20\n"
    ))
    .await;
    let lead = Legion::agent("lead");
    legion.provider.inject(
        Some(&lead),
        call("h1", "mcp__web__echo", r#"{"message":"over http"}"#),
    );
    let replies = legion.post("echo something").await;
    assert!(replies[0].error().is_none(), "{replies:?}");
    assert_eq!(result(&legion, "h1"), ("Echo: over http".to_owned(), false));
    let (call, outcome) = call_and_result(&legion, "h1");
    assert_eq!(outcome.reply_to, Some(call.id));
}

/// One `[mcp.bad]` table running the bad server in `mode`, for ann, with a short timeout.
fn bad(mode: &str) -> String {
    format!(
        "[mcp.bad]\ncommand = \"python3\"\nargs = [{:?}, {mode:?}]\nagents = [\"ann\"]\ntimeout_seconds = 2\n",
        bad_server()
    )
}

/// Calls `misbehave` in `mode`; the result is an error whose text contains `expect`, the turn
/// ends with ann's text answer, and the server answers `ok` afterwards.
async fn misbehaving(mode: &str, expect: &str) -> Legion {
    let legion = legion_with(&bad(mode)).await;
    let ann = Legion::agent("ann");
    legion
        .provider
        .inject(Some(&ann), call("m1", "mcp__bad__misbehave", "{}"));
    let replies = legion.post("@ann try it").await;
    assert!(
        replies[0].error().is_none(),
        "the turn goes on: {replies:?}"
    );
    assert!(replies[0].text().unwrap().starts_with("ann read"));
    let (text, is_error) = result(&legion, "m1");
    assert!(is_error, "{mode}: an error result: {text}");
    assert!(text.contains(expect), "{mode}: {text:?} names {expect:?}");

    legion
        .provider
        .inject(Some(&ann), call("k1", "mcp__bad__ok", "{}"));
    let replies = legion.post("@ann again").await;
    assert!(replies[0].error().is_none(), "{replies:?}");
    legion
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_hangs_gives_a_timeout_error_result() {
    let legion = misbehaving("hang", "did not answer misbehave within").await;
    // The server is alive: its next call answers (its second call in this process).
    assert_eq!(result(&legion, "k1"), ("ok: 2".to_owned(), false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_exits_mid_call_is_restarted_on_the_next_call() {
    let legion = misbehaving("exit", "the MCP server bad").await;
    // A new process answers: its first call.
    assert_eq!(result(&legion, "k1"), ("ok: 1".to_owned(), false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_json_rpc_gives_an_error_result() {
    let legion = misbehaving("malformed", "the MCP server bad").await;
    let (text, is_error) = result(&legion, "k1");
    assert!(!is_error && text.starts_with("ok: "), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_named_like_built_ins_stay_apart_from_them() {
    let legion = legion_with(&bad("collide")).await;
    let ann = Legion::agent("ann");
    legion.provider.inject(
        Some(&ann),
        Fault::tool_calls([
            ("g1", "get_history", "{}"),
            ("g2", "mcp__bad__get_history", "{}"),
        ]),
    );
    let replies = legion.post("@ann history?").await;
    assert!(replies[0].error().is_none(), "{replies:?}");
    let anns = legion.requests("ann");
    let offered = anns[0].tool_names();
    assert_eq!(
        offered.iter().filter(|t| **t == "get_history").count(),
        1,
        "{offered:?}"
    );
    assert!(offered.contains(&"mcp__bad__get_history"), "{offered:?}");
    let (builtin, _) = result(&legion, "g1");
    assert!(builtin.contains("history?"), "the built-in ran: {builtin}");
    let (served, _) = result(&legion, "g2");
    assert_eq!(served, "get_history answered by the server (1)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_start_fails_the_open_naming_its_table() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.md"), "You lead.").unwrap();
    let file = dir.path().join("legio.toml");
    std::fs::write(
        &file,
        "[store]\npath = \"db\"\n[agents.lead]\nrole = \"orchestrator\"\nprompt = \"p.md\"\nprovider = \"local\"\n\
[providers.local]\nkind = \"scripted\"\n[mcp.gone]\ncommand = \"./no-such-server\"\nagents = [\"lead\"]\n",
    )
    .unwrap();
    let config = legio_runtime::RuntimeConfig::load(&file).unwrap();
    let error = legio_runtime::Runtime::open(config).await.unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("[mcp.gone]") && text.contains("no-such-server"),
        "{text}"
    );
    // A server that starts, says why it cannot go on, and exits: its words are in the error.
    let said = "[mcp.gone]\ncommand = \"sh\"\nargs = [\"-c\", \"echo cannot find module x.js >&2; exit 1\"]\nagents = [\"lead\"]\n";
    let text = std::fs::read_to_string(&file).unwrap().replace(
        "[mcp.gone]\ncommand = \"./no-such-server\"\nagents = [\"lead\"]\n",
        said,
    );
    std::fs::write(&file, text).unwrap();
    let config = legio_runtime::RuntimeConfig::load(&file).unwrap();
    let error = legio_runtime::Runtime::open(config).await.unwrap_err();
    let text = error.to_string();
    assert!(text.contains("cannot find module x.js"), "{text}");
    assert!(!text.contains("rmcp::"), "{text}");
}
