//! A legio cluster for real: three nats-servers (replicas 3) and three `legio serve --node`
//! processes with the scripted provider, whose provider sessions live in a folder the nodes
//! share (as a real provider's live on its servers). Posts go to every node; the owner of a
//! conversation is killed, paused and resumed; a nats-server is lost and restarted. The log, the
//! leases and the providers' session threads are checked after each. (Declared by
//! `crates/legio-cli/Cargo.toml`, so the test has the `legio` binary.)

use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use legio_core::{ConversationKey, Event, Participant, Seq};
use legio_store::{EventLog, Leases, NatsLog, NatsOptions};
use legio_tests::nats::NatsCluster;
use serde_json::{json, Value};

const STREAM: &str = "ctest";
const TTL: Duration = Duration::from_secs(2);

/// One `legio serve --node` process.
struct Node {
    name: String,
    child: Child,
    base: String,
}

/// The cluster: its nats-servers, its nodes and their shared folder.
struct Legion {
    nats: NatsCluster,
    dir: tempfile::TempDir,
    nodes: Vec<Node>,
}

fn write_config(dir: &Path, urls: &[String], latency_ms: u64) {
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
"#,
        servers = servers.join(", "),
        ttl = TTL.as_secs()
    );
    std::fs::write(dir.join("legio.toml"), text).unwrap();
}

impl Legion {
    /// Three nats-servers and three nodes, or `None` (skipped) without nats-server.
    fn start(latency_ms: u64) -> Option<Self> {
        let nats = NatsCluster::start(3)?;
        let dir = tempfile::tempdir().unwrap();
        println!("legion in {}", dir.path().display());
        std::fs::create_dir(dir.path().join("sessions")).unwrap();
        write_config(dir.path(), &nats.urls(), latency_ms);
        let mut legion = Self {
            nats,
            dir,
            nodes: Vec::new(),
        };
        for i in 1..=3 {
            let node = legion.spawn(&format!("n{i}"));
            legion.nodes.push(node);
        }
        Some(legion)
    }

    fn sessions_dir(&self) -> PathBuf {
        self.dir.path().join("sessions")
    }

    /// Starts `legio serve --node name`, reads its address and waits for `/healthz`.
    fn spawn(&self, name: &str) -> Node {
        let log = std::fs::File::create(self.dir.path().join(format!("{name}.log"))).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_legio"))
            .current_dir(self.dir.path())
            .env("LEGIO_CONFIG", self.dir.path().join("legio.toml"))
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
            .unwrap_or_else(|| panic!("node {name} printed no address: {first:?}"))
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

    fn options(&self) -> NatsOptions {
        NatsOptions {
            stream: STREAM.into(),
            lease_ttl: TTL,
            ..self.nats.options(3)
        }
    }

    /// Who holds the lease of `conversation` now.
    fn owner(&self, conversation: &str) -> Option<String> {
        let leases = Leases::open(&self.options()).unwrap();
        leases
            .list()
            .unwrap()
            .into_iter()
            .find(|l| l.name == conversation)
            .map(|l| l.holder)
    }

    fn node_index(&self, name: &str) -> usize {
        self.nodes.iter().position(|n| n.name == name).unwrap()
    }

    fn signal(&self, i: usize, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.nodes[i].child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// SIGKILLs node `i` and starts it again under the same name.
    fn kill(&mut self, i: usize) {
        let _ = self.nodes[i].child.kill();
        let _ = self.nodes[i].child.wait();
    }

    fn restart(&mut self, i: usize) {
        let name = self.nodes[i].name.clone();
        self.nodes[i] = self.spawn(&name);
    }

    fn log(&self) -> NatsLog {
        NatsLog::open_read_only(&self.options()).unwrap()
    }

    /// `legio --nats URL verify` exits 0.
    fn verify(&self) {
        let out = Command::new(env!("CARGO_BIN_EXE_legio"))
            .current_dir(self.dir.path())
            .env("LEGIO_CONFIG", self.dir.path().join("legio.toml"))
            .args(["--nats", &self.nats.urls()[0], "verify"])
            .output()
            .unwrap();
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
                .status();
            let _ = node.child.kill();
            let _ = node.child.wait();
        }
    }
}

/// One HTTP request to a node: its status (0 when unreachable) and its body.
fn http(base: &str, path: &str, body: Option<Value>) -> (u16, String) {
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

fn get(node: &Node, path: &str) -> (u16, String) {
    http(&node.base, path, None)
}

/// Posts `text` to `conversation` through `base`: the replies when every addressed agent
/// answered, else `None` (an HTTP error, an unreachable node or an error reply).
fn post(base: &str, conversation: &str, text: &str) -> Option<Vec<Value>> {
    let (status, body) = http(
        base,
        &format!("/sessions/{conversation}/turns"),
        Some(json!({ "content": text })),
    );
    if status != 200 {
        return None;
    }
    let body: Value = serde_json::from_str(&body).ok()?;
    let replies = body["replies"].as_array()?.clone();
    replies
        .iter()
        .all(|r| r["error"].is_null())
        .then_some(replies)
}

/// A counter's value in a node's `/metrics` (summed over its labels; 0 when absent).
fn metric(node: &Node, name: &str, label: &str) -> f64 {
    let (_, text) = get(node, "/metrics");
    text.lines()
        .filter(|l| l.starts_with(name) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The user messages of `conversation` in log order, as their texts.
fn user_texts(log: &NatsLog, conversation: &str) -> Vec<String> {
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

/// Every provider session's thread: a message sent again in one session is marked redelivered
/// (the runtime could not know that the first request completed). Returns how many sessions
/// there are and how many messages they were sent in all.
fn check_sessions(dir: &Path) -> (usize, usize) {
    let sessions = legio_llm::read_shared_sessions(dir).unwrap();
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
    }
    let sent = sessions.values().map(Vec::len).sum();
    println!("{} provider sessions, {sent} messages sent", sessions.len());
    (sessions.len(), sent)
}

/// Posts `text` until one node answers it, trying the nodes in turn from `first`; how long it
/// took, and whether it needed more than one attempt.
fn post_until_served(
    legion: &Legion,
    first: usize,
    conversation: &str,
    text: &str,
    deadline: Duration,
) -> (Duration, Vec<String>) {
    let started = Instant::now();
    let mut attempts = Vec::new();
    for attempt in 0.. {
        assert!(
            started.elapsed() < deadline,
            "{text:?} was not served within {deadline:?}"
        );
        let node = &legion.nodes[(first + attempt) % legion.nodes.len()];
        let sent = format!("{text} (try {attempt})");
        attempts.push(sent.clone());
        if post(&node.base, conversation, &sent).is_some() {
            return (started.elapsed(), attempts);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    unreachable!()
}

/// Round-robin posts to every node for several conversations land once each, in order, and
/// the ones sent to a non-owner are served by the owner; then one nats-server of three is lost
/// and restarted, and turns go on.
#[test]
fn posts_to_every_node_land_once_in_order_and_survive_a_lost_server() {
    let Some(mut legion) = Legion::start(0) else {
        return;
    };
    let conversations: Vec<String> = (0..6).map(|c| format!("rr:{c}")).collect();
    const ROUNDS: usize = 6;
    std::thread::scope(|s| {
        for (c, conversation) in conversations.iter().enumerate() {
            let legion = &legion;
            s.spawn(move || {
                for round in 0..ROUNDS {
                    let node = &legion.nodes[(c + round) % 3];
                    let mention = ["", "@ann ", "@all "][round % 3];
                    let text = format!("{mention}message {round} of {conversation}");
                    assert!(
                        post(&node.base, conversation, &text).is_some(),
                        "{text} via {}",
                        node.name
                    );
                }
            });
        }
    });
    let log = legion.log();
    let mut forwarded_expected = 0;
    for (c, conversation) in conversations.iter().enumerate() {
        let want: Vec<String> = (0..ROUNDS)
            .map(|round| {
                let mention = ["", "@ann ", "@all "][round % 3];
                format!("{mention}message {round} of {conversation}")
            })
            .collect();
        assert_eq!(user_texts(&log, conversation), want, "{conversation}");
        let owner = legion.owner(conversation).expect("an owner");
        forwarded_expected += (0..ROUNDS)
            .filter(|round| legion.nodes[(c + round) % 3].name != owner)
            .count();
    }
    let forwarded: f64 = legion
        .nodes
        .iter()
        .map(|n| metric(n, "legio_cluster_forwarded_posts_total", "outcome=\"ok\""))
        .sum();
    let served: f64 = legion
        .nodes
        .iter()
        .map(|n| metric(n, "legio_cluster_served_posts_total", ""))
        .sum();
    assert_eq!(
        forwarded as usize, forwarded_expected,
        "posts to non-owners are forwarded"
    );
    assert_eq!(
        served as usize, forwarded_expected,
        "and served by the owners"
    );

    // One nats-server of three lost: turns go on; restarted: it catches up.
    legion.nats.kill(0);
    for round in 0..4 {
        let (_, _) = post_until_served(
            &legion,
            round,
            "rr:0",
            &format!("@ann after the loss {round}"),
            Duration::from_secs(30),
        );
    }
    legion.nats.restart(0);
    assert!(legion.nats.is_healthy(0));
    for round in 0..2 {
        post_until_served(
            &legion,
            round,
            "rr:1",
            &format!("@bob after the return {round}"),
            Duration::from_secs(30),
        );
    }
    legion.verify();
    check_sessions(&legion.sessions_dir());
}

/// The owner of a busy conversation is SIGKILLed ten times at random moments (also while its
/// turns are at the provider): each time another node serves the conversation within the lease
/// TTL plus 2 s, every acknowledged message is in the log exactly once, `verify` is clean and
/// every provider session was sent each message once (a repeat only marked redelivered).
#[test]
fn killing_the_owner_of_a_busy_conversation_moves_it_within_the_lease_ttl() {
    let Some(mut legion) = Legion::start(150) else {
        return;
    };
    const CONV: &str = "busy:1";
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    println!("seed {seed}");
    let mut random = seed;
    let mut next = move |below: u64| {
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        random % below
    };
    let mut acknowledged = Vec::new();
    let mut tried = Vec::new();
    let (_, first) = post_until_served(&legion, 0, CONV, "@all start", Duration::from_secs(30));
    acknowledged.push(first.last().unwrap().clone());
    tried.extend(first);
    let mut failovers = Vec::new();
    for kill in 0..10 {
        let owner = legion.owner(CONV).expect("an owner");
        let i = legion.node_index(&owner);
        // A post in flight when the kill lands: to the owner, or through another node.
        let via = (i + next(3) as usize) % 3;
        let text = format!("@all busy {kill}");
        let base = legion.nodes[via].base.clone();
        let inflight = std::thread::spawn(move || post(&base, CONV, &text).map(|_| text));
        std::thread::sleep(Duration::from_millis(next(400)));
        legion.kill(i);
        let killed = Instant::now();
        let (_, attempts) = post_until_served(
            &legion,
            i + 1,
            CONV,
            &format!("@ann after kill {kill}"),
            Duration::from_secs(30),
        );
        let failover = killed.elapsed();
        acknowledged.push(attempts.last().unwrap().clone());
        tried.extend(attempts);
        tried.push(format!("@all busy {kill}"));
        if let Some(text) = inflight.join().unwrap() {
            acknowledged.push(text);
        }
        println!("kill {kill} of {owner}: served elsewhere after {failover:?}");
        assert!(
            failover < TTL + Duration::from_secs(2),
            "kill {kill}: the conversation was served again only after {failover:?}"
        );
        failovers.push(failover);
        legion.restart(i);
    }
    let texts = user_texts(&legion.log(), CONV);
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for text in &texts {
        *counts.entry(text.as_str()).or_default() += 1;
        assert!(tried.contains(text), "{text:?} was never posted");
    }
    for text in &acknowledged {
        assert_eq!(
            counts.get(text.as_str()),
            Some(&1),
            "{text:?} acknowledged, in the log once"
        );
    }
    legion.verify();
    // Resumed across nodes with the delta: one session per agent unless one was lost.
    let (sessions, sent) = check_sessions(&legion.sessions_dir());
    assert!(sessions >= 3, "{sessions}");
    assert!(sent >= acknowledged.len(), "{sent} messages sent");
}

/// An owner paused past its lease (SIGSTOP while a turn is at the provider), then resumed: the
/// conversation was taken over meanwhile; the old owner's appends are refused, it stands down,
/// and nothing of its turn is in the log.
#[test]
fn a_paused_owner_finds_its_appends_refused_and_stands_down() {
    let Some(legion) = Legion::start(1500) else {
        return;
    };
    const CONV: &str = "pause:1";
    post_until_served(&legion, 0, CONV, "hello", Duration::from_secs(30));
    let owner = legion.owner(CONV).expect("an owner");
    let i = legion.node_index(&owner);
    let base = legion.nodes[i].base.clone();
    let question = "@ann a slow question";
    let inflight = std::thread::spawn(move || {
        http(
            &base,
            &format!("/sessions/{CONV}/turns"),
            Some(json!({ "content": question })),
        )
    });
    let log = legion.log();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !user_texts(&log, CONV).iter().any(|t| t == question) {
        assert!(
            Instant::now() < deadline,
            "the question never reached the log"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    legion.signal(i, "-STOP");
    let (_, attempts) = post_until_served(
        &legion,
        i + 1,
        CONV,
        "@bob while the owner sleeps",
        Duration::from_secs(30),
    );
    let new_owner = legion.owner(CONV).expect("an owner");
    assert_ne!(new_owner, owner, "another node took the conversation over");
    legion.signal(i, "-CONT");
    let (status, body) = inflight.join().unwrap();
    println!("the paused owner answered {status}: {body}");
    assert!(
        body.contains("moved"),
        "the old owner's turn fails as moved: {status} {body}"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(&legion.nodes[i], "legio_cluster_leases_lost_total", "") < 1.0 {
        assert!(Instant::now() < deadline, "the old owner never stood down");
        std::thread::sleep(Duration::from_millis(50));
    }
    let key = ConversationKey::new(CONV).unwrap();
    let events = log
        .conversation_events(&key, Seq::ZERO, usize::MAX)
        .unwrap();
    let question_id = events
        .iter()
        .find_map(|r| match &r.event {
            Event::MessagePosted(m) if m.plain_text() == question => Some(m.id),
            _ => None,
        })
        .unwrap();
    assert!(
        !events.iter().any(|r| matches!(&r.event,
            Event::MessagePosted(m) if m.reply_to == Some(question_id))),
        "no reply to the question the paused owner was answering is in the log"
    );
    assert!(user_texts(&log, CONV).contains(attempts.last().unwrap()));
    legion.verify();
    check_sessions(&legion.sessions_dir());
}
