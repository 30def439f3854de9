//! The cluster tests' and the failover bench's legion: three nats-servers (replicas 3) and
//! three `legio serve --node` processes on one configuration, whose scripted providers keep
//! their sessions in a folder they share; and the HTTP, log and metrics helpers that read it.
//! (Included by `tests/cluster/main.rs` and `crates/legio-cli/benches/failover.rs`; each uses a
//! part of it.)
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use legio_core::{can_see, AgentName, ConversationKey, Event, Participant, Seq, Viewer};
use legio_store::{EventLog, Leases, NatsLog, NatsOptions};
use legio_tests::nats::NatsCluster;
use serde_json::{json, Value};

pub const STREAM: &str = "ctest";
pub const TTL: Duration = Duration::from_secs(2);

/// One `legio serve --node` process.
pub struct Node {
    pub name: String,
    pub child: Child,
    pub base: String,
}

/// The cluster: its nats-servers, its nodes and their shared folder.
pub struct Legion {
    pub nats: NatsCluster,
    /// The servers the nodes (and the test's own clients) reach the cluster through.
    pub urls: Vec<String>,
    /// The nodes' lease TTL.
    pub ttl: Duration,
    pub dir: tempfile::TempDir,
    pub nodes: Vec<Node>,
}

/// The nodes' configuration; `runtime_extra`: more lines for its `[runtime]` table, `extra`:
/// more tables at its end.
pub fn write_config(
    dir: &Path,
    urls: &[String],
    latency_ms: u64,
    ttl: Duration,
    runtime_extra: &str,
    extra: &str,
) {
    for name in ["lead", "ann", "bob"] {
        std::fs::write(dir.join(format!("{name}.md")), format!("You are {name}.")).unwrap();
    }
    let servers: Vec<String> = urls.iter().map(|u| format!("\"{u}\"")).collect();
    let text = format!(
        r#"
[store]
path = "db"
backend = "nats"
[store.nats]
servers = [{servers}]
stream = "{STREAM}"
replicas = 3
lease_ttl_seconds = {ttl}
[runtime]
compaction = false
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
latency_ms = {latency_ms}
{extra}
"#,
        servers = servers.join(", "),
        ttl = ttl.as_secs()
    );
    std::fs::write(dir.join("legio.toml"), text).unwrap();
}

impl Legion {
    /// Three nats-servers and three nodes with the lease TTL [`TTL`], or `None` (skipped)
    /// without nats-server.
    pub fn start(latency_ms: u64) -> Option<Self> {
        Self::start_with_ttl(latency_ms, TTL)
    }

    /// [`Legion::start`] with another lease TTL (whole seconds).
    pub fn start_with_ttl(latency_ms: u64, ttl: Duration) -> Option<Self> {
        Self::start_with(latency_ms, ttl, "")
    }

    /// [`Legion::start_with_ttl`] with more lines for the nodes' `[runtime]` table.
    pub fn start_with(latency_ms: u64, ttl: Duration, runtime_extra: &str) -> Option<Self> {
        Self::start_with_config(latency_ms, ttl, runtime_extra, "")
    }

    /// [`Legion::start_with`] with more tables at the end of the nodes' configuration.
    pub fn start_with_config(
        latency_ms: u64,
        ttl: Duration,
        runtime_extra: &str,
        extra: &str,
    ) -> Option<Self> {
        let nats = NatsCluster::start(3)?;
        let urls = nats.urls();
        Some(Self::assemble(
            nats,
            &urls,
            latency_ms,
            ttl,
            runtime_extra,
            extra,
        ))
    }

    /// Three nats-servers of which the third can be cut off from the other two
    /// ([`NatsCluster::start_partitionable`]), and three nodes that reach the cluster through
    /// the first two only (the majority side of that partition).
    pub fn start_partitionable(latency_ms: u64) -> Option<Self> {
        let nats = NatsCluster::start_partitionable(3, 2)?;
        let urls = nats.urls()[..2].to_vec();
        Some(Self::assemble(nats, &urls, latency_ms, TTL, "", ""))
    }

    /// Three nodes on `nats`, reaching it through `urls`.
    fn assemble(
        nats: NatsCluster,
        urls: &[String],
        latency_ms: u64,
        ttl: Duration,
        runtime_extra: &str,
        extra: &str,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        println!("legion in {}", dir.path().display());
        std::fs::create_dir(dir.path().join("sessions")).unwrap();
        write_config(dir.path(), urls, latency_ms, ttl, runtime_extra, extra);
        let mut legion = Self {
            nats,
            urls: urls.to_vec(),
            ttl,
            dir,
            nodes: Vec::new(),
        };
        for i in 1..=3 {
            let node = legion.spawn(&format!("n{i}"));
            legion.nodes.push(node);
        }
        legion
    }

    pub fn sessions_dir(&self) -> PathBuf {
        self.dir.path().join("sessions")
    }

    /// Starts `legio serve --node name`, reads its address and waits for `/healthz`.
    pub fn spawn(&self, name: &str) -> Node {
        self.spawn_with_config(name, &self.dir.path().join("legio.toml"))
    }

    /// Starts one more node that reaches the cluster only through `urls` (a proxy the test can
    /// cut); its configuration is the others' but for `[store.nats] servers`. Returns its index.
    pub fn spawn_through(&mut self, name: &str, urls: &[String]) -> usize {
        let shared = std::fs::read_to_string(self.dir.path().join("legio.toml")).unwrap();
        let servers: Vec<String> = urls.iter().map(|u| format!("\"{u}\"")).collect();
        let own: String = shared
            .lines()
            .map(|line| match line.starts_with("servers = ") {
                true => format!("servers = [{}]\n", servers.join(", ")),
                false => format!("{line}\n"),
            })
            .collect();
        let path = self.dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, own).unwrap();
        let node = self.spawn_with_config(name, &path);
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    fn spawn_with_config(&self, name: &str, config: &Path) -> Node {
        let log = std::fs::File::create(self.dir.path().join(format!("{name}.log"))).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_legio"))
            .current_dir(self.dir.path())
            .env("LEGIO_CONFIG", config)
            .env("LEGIO_SCRIPTED_SESSIONS_DIR", self.sessions_dir())
            .env("LEGIO_LOG", "info")
            .env_remove("LEGIO_API_TOKEN")
            .env_remove("LEGIO_STORE_BACKEND")
            .args(["serve", "--node", name, "--bind", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut first = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let base = first
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| {
                let log = self.dir.path().join(format!("{name}.log"));
                let said = std::fs::read_to_string(&log).unwrap_or_default();
                panic!("node {name} printed no address: {first:?}; its log:\n{said}")
            })
            .to_owned();
        let node = Node {
            name: name.to_owned(),
            child,
            base,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while get(&node, "/healthz").0 != 200 {
            assert!(
                Instant::now() < deadline,
                "node {name} never became healthy"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        node
    }

    pub fn options(&self) -> NatsOptions {
        NatsOptions {
            stream: STREAM.into(),
            lease_ttl: self.ttl,
            servers: self.urls.clone(),
            ..self.nats.options(3)
        }
    }

    /// Who holds the lease of `conversation` now (asking again for up to 30 s while the lease
    /// bucket cannot answer: a leader election after a server returned, say).
    pub fn owner(&self, conversation: &str) -> Option<String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let leases = loop {
            match Leases::open(&self.options()).and_then(|leases| leases.list()) {
                Ok(leases) => break leases,
                Err(e) if Instant::now() < deadline => {
                    println!("listing the leases failed, trying again: {e}");
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => panic!("the leases cannot be listed: {e}"),
            }
        };
        leases
            .into_iter()
            .find(|l| l.name == conversation)
            .map(|l| l.holder)
    }

    /// The holder of `conversation`'s lease and a time no later than when the servers stored
    /// its last write (taken or renewed), read from the stream's leader: the bucket's max age
    /// (the TTL) removes the lease that long after, and only then can another node take it.
    /// `None` when nobody holds it.
    pub fn lease_written(&self, conversation: &str) -> Option<(String, SystemTime)> {
        let before = SystemTime::now();
        let leases = Leases::open(&self.options()).expect("the lease bucket");
        let (lease, age) = leases.get(conversation).expect("reading a lease")?;
        // The age is counted from a clock read after `before`: this is the earlier bound.
        Some((lease.holder, before - age))
    }

    pub fn node_index(&self, name: &str) -> usize {
        self.nodes.iter().position(|n| n.name == name).unwrap()
    }

    pub fn signal(&self, i: usize, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.nodes[i].child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// SIGKILLs node `i`.
    pub fn kill(&mut self, i: usize) {
        let _ = self.nodes[i].child.kill();
        let _ = self.nodes[i].child.wait();
    }

    /// Runs `legio serve --node name` (its stdout and stderr captured) until it exits by itself,
    /// which a node that starts never does; panics if it still runs after `patience`.
    pub fn serve_until_exit(&self, name: &str, patience: Duration) -> std::process::Output {
        let child = Command::new(env!("CARGO_BIN_EXE_legio"))
            .current_dir(self.dir.path())
            .env("LEGIO_CONFIG", self.dir.path().join("legio.toml"))
            .env("LEGIO_SCRIPTED_SESSIONS_DIR", self.sessions_dir())
            .env_remove("LEGIO_API_TOKEN")
            .env_remove("LEGIO_STORE_BACKEND")
            .args(["serve", "--node", name, "--bind", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Waited for on a thread of its own, which reads both pipes meanwhile.
        let pid = child.id().to_string();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(child.wait_with_output().unwrap()));
        match rx.recv_timeout(patience) {
            Ok(out) => out,
            Err(_) => {
                let _ = Command::new("kill").args(["-KILL", &pid]).status();
                let out = rx.recv().unwrap();
                panic!(
                    "legio serve --node {name} still ran after {patience:?}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }

    /// Starts node `i` again under its name (after a kill).
    pub fn restart(&mut self, i: usize) {
        let name = self.nodes[i].name.clone();
        self.nodes[i] = self.spawn(&name);
    }

    pub fn log(&self) -> NatsLog {
        NatsLog::open_read_only(&self.options()).unwrap()
    }

    /// Runs `legio --nats URL <args>` (no node involved).
    pub fn legio(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_legio"))
            .current_dir(self.dir.path())
            .env("LEGIO_CONFIG", self.dir.path().join("legio.toml"))
            .args(["--nats", &self.urls[0]])
            .args(args)
            .output()
            .unwrap()
    }

    /// `legio --nats URL verify` exits 0.
    pub fn verify(&self) {
        let out = self.legio(&["verify"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "verify: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Legion {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            let _ = Command::new("kill")
                .args(["-CONT", &node.child.id().to_string()])
                .stderr(Stdio::null())
                .status();
            let _ = node.child.kill();
            let _ = node.child.wait();
        }
    }
}

/// One HTTP request to a node: its status (0 when unreachable) and its body.
pub fn http(base: &str, path: &str, body: Option<Value>) -> (u16, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let url = format!("{base}{path}");
        let request = match body {
            Some(body) => client
                .post(url)
                .header("content-type", "application/json")
                .body(body.to_string()),
            None => client.get(url),
        };
        match request.send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                (status, response.text().await.unwrap_or_default())
            }
            Err(_) => (0, String::new()),
        }
    })
}

/// Posts `text` to `conversation` through `base` with `Accept: text/event-stream`: the status
/// and the whole stream as text.
pub fn post_streamed(base: &str, conversation: &str, text: &str) -> (u16, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let response = reqwest::Client::new()
            .post(format!("{base}/sessions/{conversation}/turns"))
            .header("content-type", "application/json")
            .header("accept", "text/event-stream")
            .body(json!({ "content": text }).to_string())
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
    })
}

pub fn get(node: &Node, path: &str) -> (u16, String) {
    http(&node.base, path, None)
}

/// Posts `text` to `conversation` through `base`: the replies when every addressed agent
/// answered, else what went wrong (an HTTP error, an unreachable node or an error reply).
pub fn post(base: &str, conversation: &str, text: &str) -> Result<Vec<Value>, String> {
    let (status, body) = http(
        base,
        &format!("/sessions/{conversation}/turns"),
        Some(json!({ "content": text })),
    );
    let failed = || format!("{status} {body}");
    if status != 200 {
        return Err(failed());
    }
    let parsed: Value = serde_json::from_str(&body).map_err(|_| failed())?;
    let replies = parsed["replies"].as_array().ok_or_else(failed)?.clone();
    if replies.iter().all(|r| r["error"].is_null()) {
        Ok(replies)
    } else {
        Err(failed())
    }
}

/// A counter's value in a node's `/metrics` (summed over its labels; 0 when absent).
pub fn metric(node: &Node, name: &str, label: &str) -> f64 {
    metric_with(node, name, &[label])
}

/// Like [`metric`], over the lines that contain every one of `labels`.
pub fn metric_with(node: &Node, name: &str, labels: &[&str]) -> f64 {
    let (_, text) = get(node, "/metrics");
    text.lines()
        .filter(|l| l.starts_with(name) && labels.iter().all(|label| l.contains(label)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A metric summed over every node of the legion (see [`metric`]).
pub fn total(legion: &Legion, name: &str, label: &str) -> f64 {
    total_with(legion, name, &[label])
}

/// A metric summed over every node of the legion (see [`metric_with`]).
pub fn total_with(legion: &Legion, name: &str, labels: &[&str]) -> f64 {
    legion
        .nodes
        .iter()
        .map(|n| metric_with(n, name, labels))
        .sum()
}

/// Every node's lease counters (`legio_cluster_lease*` lines of its `/metrics`), to say in a
/// failure's message who took and lost what.
pub fn lease_metrics(legion: &Legion) -> String {
    let mut out = String::new();
    for node in &legion.nodes {
        let (_, text) = get(node, "/metrics");
        for line in text
            .lines()
            .filter(|l| l.starts_with("legio_cluster_lease"))
        {
            if !line.contains("_bucket") {
                out.push_str(&format!("{}: {line}\n", node.name));
            }
        }
    }
    out
}

/// The user messages of `conversation` in log order, as their texts.
pub fn user_texts(log: &NatsLog, conversation: &str) -> Vec<String> {
    let key = ConversationKey::new(conversation).unwrap();
    log.conversation_events(&key, Seq::ZERO, usize::MAX)
        .unwrap()
        .into_iter()
        .filter_map(|r| match r.event {
            Event::MessagePosted(m) if m.sender == Participant::User => Some(m.plain_text()),
            _ => None,
        })
        .collect()
}

/// Every provider session's thread, against the log: a message sent again in one session is
/// marked redelivered (the runtime could not know that the first request completed), and none
/// was left out: every message of the conversation that the session's agent may see, up to the
/// newest one the session was sent, was sent to it (but the agent's own replies, which a
/// resumed session holds already). Returns how many sessions there are and how many messages
/// they were sent in all.
pub fn check_sessions(legion: &Legion) -> (usize, usize) {
    let sessions = legio_llm::read_shared_sessions(&legion.sessions_dir()).unwrap();
    let log = legion.log();
    for (id, thread) in &sessions {
        let mut seen = BTreeMap::new();
        for (seq, redelivered) in thread {
            let count = seen.entry(*seq).or_insert(0);
            *count += 1;
            assert!(
                *count == 1 || *redelivered,
                "session {id} was sent message {seq} again without the redelivery mark: {thread:?}"
            );
        }
        let missing = left_out(&log, id, thread);
        assert!(
            missing.is_empty(),
            "session {id} was never sent messages {missing:?} its agent may see (it was sent \
             {thread:?})"
        );
    }
    let sent = sessions.values().map(Vec::len).sum();
    println!("{} provider sessions, {sent} messages sent", sessions.len());
    (sessions.len(), sent)
}

/// The seqs of the messages that provider session `id` (named `scripted-<agent>-<pid>-<n>` by
/// the scripted provider) should have been sent and was not: those its agent may see, in the
/// conversation of the first message it was sent, up to the newest one it was sent, that it did
/// not write. (A heartbeat's prompt is sent as seq 0: it is not in the log.) The legion's nodes
/// compact nothing and its conversations fit the model's window, so no restored context may
/// leave a message out; with compaction a summary would stand for the oldest ones.
fn left_out(log: &NatsLog, id: &str, thread: &[(Seq, bool)]) -> Vec<Seq> {
    let stored: Vec<Seq> = thread
        .iter()
        .map(|(seq, _)| *seq)
        .filter(|seq| *seq > Seq::ZERO)
        .collect();
    let (Some(first), Some(newest)) = (stored.first(), stored.iter().max()) else {
        return Vec::new();
    };
    let agent = id
        .strip_prefix("scripted-")
        .and_then(|rest| rest.rsplitn(3, '-').nth(2))
        .unwrap_or_else(|| panic!("a scripted provider's session id: {id}"));
    let agent = AgentName::new(agent).unwrap();
    // The orchestrator (`lead` in write_config) sees every message.
    let viewer = if agent.as_str() == "lead" {
        Viewer::Everything
    } else {
        Viewer::Specialist(&agent)
    };
    let first = log.read_range(*first, *first, 1).unwrap();
    let conversation = first[0].event.conversation().clone();
    let sent: std::collections::BTreeSet<&Seq> = stored.iter().collect();
    log.conversation_events(&conversation, Seq::ZERO, usize::MAX)
        .unwrap()
        .into_iter()
        .filter(|r| r.seq <= *newest && !sent.contains(&r.seq))
        .filter(|r| match &r.event {
            Event::MessagePosted(m) => m.sender.agent() != Some(&agent) && can_see(viewer, m),
            _ => false,
        })
        .map(|r| r.seq)
        .collect()
}

/// Posts `text` until one node answers it, trying the nodes in turn from `first`; how long it
/// took, and whether it needed more than one attempt.
pub fn post_until_served(
    legion: &Legion,
    first: usize,
    conversation: &str,
    text: &str,
    deadline: Duration,
) -> (Duration, Vec<String>) {
    let n = legion.nodes.len();
    let order: Vec<usize> = (0..n).map(|k| (first + k) % n).collect();
    post_until_served_by(legion, &order, conversation, text, deadline)
}

/// Posts `text` (numbered by attempt) until one of the nodes `via` answers it, trying them in
/// turn; how long it took, and every text sent (the last one was answered).
pub fn post_until_served_by(
    legion: &Legion,
    via: &[usize],
    conversation: &str,
    text: &str,
    deadline: Duration,
) -> (Duration, Vec<String>) {
    let started = Instant::now();
    let mut attempts = Vec::new();
    let mut errors = Vec::new();
    for attempt in 0.. {
        assert!(
            started.elapsed() < deadline,
            "{text:?} was not served within {deadline:?}; the last errors: {:?}",
            &errors[errors.len().saturating_sub(3)..]
        );
        let node = &legion.nodes[via[attempt % via.len()]];
        let sent = format!("{text} (try {attempt})");
        attempts.push(sent.clone());
        match post(&node.base, conversation, &sent) {
            Ok(_) => return (started.elapsed(), attempts),
            Err(e) => errors.push(format!("{}: {e}", node.name)),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    unreachable!()
}
