//! Storage failures under a real `legio serve` are states, not dead ends (issue 16): out of file
//! descriptors (`ulimit -n`) or on a full disk (a small tmpfs; mounting needs root, the test says
//! it is skipped without it), a write is refused with 503 naming the cause, `/readyz` answers 503
//! with the cause, the process exits on its own (code 75) once
//! `server.storage_failure_exit_seconds` have passed, and a restart serves every acknowledged
//! turn, with `legio verify` clean.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{code, small_disk, stderr, write_config};

const TOKEN: &str = "storage-token";
/// `legio serve`'s exit code after a storage failure (EX_TEMPFAIL).
const STORAGE_FAILED: i32 = 75;

/// A legion whose server exits 2 s after a storage failure and keeps idle connections open.
fn legion() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "", "");
    let mut config = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join("legio.toml"))
        .unwrap();
    writeln!(
        config,
        "[server]\nshutdown_grace_seconds = 2\nstorage_failure_exit_seconds = 2\n\
         [server.limits]\nheader_read_timeout_seconds = 300\nmax_connections = 4096"
    )
    .unwrap();
    dir
}

/// `legio serve` on a free port, under `ulimit -n nofile` when given, on the database `db`.
struct Serve {
    child: Child,
    addr: String,
}

impl Serve {
    fn start(dir: &Path, db: &Path, nofile: Option<u32>) -> Self {
        let legio = env!("CARGO_BIN_EXE_legio");
        let limit = nofile
            .map(|n| format!("ulimit -n {n} && "))
            .unwrap_or_default();
        let mut child = Command::new("bash")
            .args([
                "-c",
                &format!("{limit}exec {legio} serve --bind 127.0.0.1:0"),
            ])
            .current_dir(dir)
            .env("LEGIO_CONFIG", dir.join("legio.toml"))
            .env("LEGIO_STORE_PATH", db)
            .env("LEGIO_API_TOKEN", TOKEN)
            .env_remove("LEGIO_OPERATOR_TOKEN")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let addr = first
            .split_whitespace()
            .find_map(|w| w.strip_prefix("http://"))
            .unwrap_or_else(|| panic!("serve printed no address: {first:?}"))
            .to_owned();
        Self { child, addr }
    }

    fn connect(&self) -> Connection {
        let stream = TcpStream::connect(&self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        Connection {
            reader: BufReader::new(stream.try_clone().unwrap()),
            stream,
        }
    }

    /// Waits (up to `limit`) for the process to end on its own: its exit code and stderr.
    fn exit_within(mut self, limit: Duration) -> (Option<i32>, String) {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let mut err = String::new();
                self.child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut err)
                    .unwrap();
                return (status.code(), err);
            }
            if started.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("serve did not exit on its own within {limit:?} after the storage failure");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn terminate(mut self) -> i32 {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        self.child.wait().unwrap().code().unwrap_or(-1)
    }
}

/// One kept-alive HTTP/1.1 connection (raw, so that it is open before descriptors run out).
struct Connection {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Connection {
    /// One request; the status and the body.
    fn request(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> (u16, String) {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        write!(
            self.stream,
            "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {TOKEN}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status line: {line:?}"));
        let mut length = 0;
        loop {
            line.clear();
            self.reader.read_line(&mut line).unwrap();
            if line.trim().is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap();
                }
            }
        }
        let mut answer = vec![0; length];
        self.reader.read_exact(&mut answer).unwrap();
        (status, String::from_utf8(answer).unwrap())
    }

    fn post(&mut self, conversation: &str, content: &str) -> (u16, String) {
        let body = serde_json::json!({ "content": content });
        self.request(
            "POST",
            &format!("/sessions/{conversation}/turns"),
            Some(&body),
        )
    }
}

/// The `code` of an error body.
fn error_code(body: &str) -> String {
    let value: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    value["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A message of the largest size accepted (1 MiB: over a quarter of sled's 4 MiB segment, so
/// sled writes it to a blob file of its own) starting with `marker`.
fn big(marker: &str) -> String {
    format!("{marker} {}", "x".repeat(1024 * 1024 - marker.len() - 1))
}

/// Restarts serve on `db`: every acknowledged turn is in its conversation's history and a new
/// turn is acknowledged; then it stops and `legio verify` is clean.
fn restart_serves_every_acknowledged_turn(
    dir: &Path,
    db: &Path,
    acknowledged: &[(String, String)],
) {
    let serve = Serve::start(dir, db, None);
    let mut c = serve.connect();
    for (conversation, marker) in acknowledged {
        let (status, body) = c.request("GET", &format!("/sessions/{conversation}/history"), None);
        assert_eq!(status, 200, "{body}");
        assert!(
            body.contains(marker.as_str()),
            "acknowledged turn {marker} is not in {conversation}'s history after the restart"
        );
    }
    let (status, body) = c.post("after:restart", "writes work again");
    assert_eq!(status, 200, "{body}");
    drop(c);
    assert_eq!(serve.terminate(), 0);
    let out = super::legio_in(
        dir,
        &dir.join("legio.toml"),
        &["--db", db.to_str().unwrap(), "verify"],
        None,
    );
    assert_eq!(code(&out), 0, "verify: {}", stderr(&out));
}

/// Checks a refused write, then `/readyz`, after the log failed with `cause` (`code` in the
/// bodies; `words`: the system's own message in them).
fn refused_and_not_ready(c: &mut Connection, refused: (u16, String), code: &str, words: &str) {
    let (status, body) = refused;
    eprintln!("refused with {status}: {body}");
    assert_eq!((status, error_code(&body).as_str()), (503, code), "{body}");
    assert!(
        body.contains(words),
        "the system's message is in the error: {body}"
    );
    let (status, body) = c.request("GET", "/readyz", None);
    assert_eq!(
        (status, error_code(&body).as_str()),
        (503, code),
        "/readyz: {body}"
    );
    assert!(body.contains(words), "/readyz names the failure: {body}");
    assert!(body.contains("storage_failure_exit_seconds"), "{body}");
    let (status, _) = c.request("GET", "/healthz", None);
    assert_eq!(status, 200, "/healthz stays as documented: alive");
}

/// Out of file descriptors (`ulimit -n` on the server, every descriptor held by idle
/// connections), writing a blob file fails with `EMFILE`: the turn is refused with 503
/// `too_many_open_files` (not 500), `/readyz` says so; once the connections are gone the process
/// exits on its own with code 75 and a line naming the cause; a restart serves every acknowledged
/// turn.
#[test]
fn out_of_descriptors_a_write_is_503_naming_the_cause_and_serve_exits_to_be_restarted() {
    let dir = legion();
    let db = dir.path().join("db");
    let serve = Serve::start(dir.path(), &db, Some(128));
    let mut c = serve.connect();
    let mut acknowledged = Vec::new();
    for (n, content) in [big("fds-0"), "fds-1 a small one".to_owned(), big("fds-2")]
        .into_iter()
        .enumerate()
    {
        let conversation = format!("fds:{n}");
        let (status, body) = c.post(&conversation, &content);
        assert_eq!(status, 200, "{body}");
        acknowledged.push((conversation, content[..5].to_owned()));
    }
    // Idle connections take every descriptor the server has left (it accepts until EMFILE; then
    // they wait in the listen backlog, and once that is full a connect times out).
    let addr: std::net::SocketAddr = serve.addr.parse().unwrap();
    let hogs: Vec<TcpStream> = (0..400)
        .map_while(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok())
        .collect();
    assert!(hogs.len() > 100, "only {} connections", hogs.len());
    std::thread::sleep(Duration::from_millis(1500));
    let refused = c.post("fds:3", &big("fds-3"));
    refused_and_not_ready(
        &mut c,
        refused,
        "too_many_open_files",
        "Too many open files",
    );
    drop(hogs);
    drop(c);
    let (exit, err) = serve.exit_within(Duration::from_secs(60));
    assert_eq!(exit, Some(STORAGE_FAILED), "{err}");
    assert!(err.contains("too many open files"), "{err}");
    restart_serves_every_acknowledged_turn(dir.path(), &db, &acknowledged);
}

/// The disk fills under a running serve: the turn is refused with 503 `storage_full`, `/readyz`
/// says so; the disk is freed; the process exits on its own with code 75 and a line naming the
/// cause; a restart on the freed disk serves every acknowledged turn and takes new ones.
#[test]
fn a_full_disk_makes_serve_not_ready_then_exit_and_a_restart_serves_every_acknowledged_turn() {
    let Some(disk) = small_disk::SmallDisk::mount(24) else {
        return;
    };
    let dir = legion();
    let db = disk.path().join("db");
    let serve = Serve::start(dir.path(), &db, None);
    let mut c = serve.connect();
    let filler = disk.fill_leaving(2 * 1024 * 1024);
    let mut acknowledged = Vec::new();
    let mut refused = None;
    for n in 0..60 {
        let (conversation, marker) = (format!("full:{n}"), format!("full-{n}"));
        let answer = c.post(&conversation, &big(&marker));
        if answer.0 != 200 {
            refused = Some(answer);
            break;
        }
        acknowledged.push((conversation, marker));
    }
    let refused = refused.expect("the disk never filled");
    refused_and_not_ready(&mut c, refused, "storage_full", "No space left on device");
    std::fs::remove_file(filler).unwrap();
    drop(c);
    let (exit, err) = serve.exit_within(Duration::from_secs(60));
    assert_eq!(exit, Some(STORAGE_FAILED), "{err}");
    assert!(err.contains("the disk is full"), "{err}");
    eprintln!(
        "{} turns acknowledged before the disk filled; serve's last line: {}",
        acknowledged.len(),
        err.lines().last().unwrap_or_default()
    );
    restart_serves_every_acknowledged_turn(dir.path(), &db, &acknowledged);
}
