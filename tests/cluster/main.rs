//! A legio cluster for real: three nats-servers (replicas 3) and three `legio serve --node`
//! processes with the scripted provider, whose provider sessions live in a folder the nodes
//! share (as a real provider's live on its servers). Posts go to every node; the owner of a
//! conversation is killed, paused and resumed; a nats-server is lost and restarted. The log, the
//! leases and the providers' session threads are checked after each. (Declared by
//! `crates/legio-cli/Cargo.toml`, so the test has the `legio` binary.)

mod legion;

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use legio_core::{ConversationKey, Event, Seq};
use legio_store::EventLog;
use legio_tests::proxy::Proxy;
use legion::*;
use serde_json::{json, Value};

/// The cluster tests run one at a time: each starts three nats-servers and three legio nodes,
/// and side by side they compete for the 2 cores CI has (and once raced for ports, before
/// tests/support/nats.rs drew them from below the ephemeral range).
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Round-robin posts to every node for several conversations land once each, in order, and
/// the ones sent to a non-owner are served by the owner; then one nats-server of three is lost
/// and restarted, and turns go on.
#[test]
fn posts_to_every_node_land_once_in_order_and_survive_a_lost_server() {
    let _one_at_a_time = one_at_a_time();
    let Some(mut legion) = Legion::start(0) else {
        return;
    };
    // 18 conversations posting at once; each one's first post (round 0) goes to node c % 3,
    // which takes its lease, so each node owns 6 (the dashboard check below names up to 8).
    let conversations: Vec<String> = (0..18).map(|c| format!("rr:{c}")).collect();
    const ROUNDS: usize = 6;
    std::thread::scope(|s| {
        for (c, conversation) in conversations.iter().enumerate() {
            let legion = &legion;
            s.spawn(move || {
                for round in 0..ROUNDS {
                    let node = &legion.nodes[(c + round) % 3];
                    let mention = ["", "@ann ", "@all "][round % 3];
                    let text = format!("{mention}message {round} of {conversation}");
                    if let Err(e) = post(&node.base, conversation, &text) {
                        panic!("{text} via {}: {e}", node.name);
                    }
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
    let forwarded_of = |kind: &str| {
        let kind = format!("kind=\"{kind}\"");
        total_with(
            &legion,
            "legio_cluster_forwarded_posts_total",
            &[&kind, "outcome=\"ok\""],
        )
    };
    let (forwarded, asked) = (forwarded_of("post"), forwarded_of("declared_tools"));
    let served: f64 = total(&legion, "legio_cluster_served_posts_total", "kind=\"post\"");
    // `legio inspect nodes` shows who owns what, as the lease bucket says.
    let out = legion.legio(&["inspect", "nodes", "--format", "json"]);
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    for conversation in &conversations {
        let row = rows
            .iter()
            .find(|r| r["conversation"] == conversation.as_str())
            .unwrap_or_else(|| panic!("{conversation} in {rows:?}"));
        assert_eq!(row["node"], legion.owner(conversation).unwrap().as_str());
    }
    // Each node's `/meta` (what the dashboard shows in its header) names the node and the
    // conversations it owns.
    for node in &legion.nodes {
        let (status, body) = get(node, "/meta");
        assert_eq!(status, 200, "{body}");
        let meta: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(meta["cluster"]["node"], node.name.as_str(), "{meta}");
        let mut held: Vec<&str> = meta["cluster"]["conversations"]
            .as_array()
            .unwrap_or_else(|| panic!("{meta}"))
            .iter()
            .filter_map(Value::as_str)
            .collect();
        held.sort_unstable();
        let mut owned: Vec<&str> = conversations
            .iter()
            .filter(|c| legion.owner(c).as_deref() == Some(node.name.as_str()))
            .map(String::as_str)
            .collect();
        owned.sort_unstable();
        assert_eq!(held, owned, "{}'s /meta: {meta}", node.name);
    }
    // And the dashboard, loaded in a browser, says so in its header.
    if let Some(chromium) = legio_tests::chromium::find() {
        let node = &legion.nodes[0];
        let owned: Vec<&str> = conversations
            .iter()
            .filter(|c| legion.owner(c).as_deref() == Some(node.name.as_str()))
            .map(String::as_str)
            .collect();
        let url = format!("{}/dashboard", node.base);
        let dom = legio_tests::chromium::dump_dom(chromium, &url, Duration::from_secs(3));
        let header = legio_tests::chromium::text_of(&dom, "node")
            .unwrap_or_else(|| panic!("no node header in the dashboard: {dom}"));
        // The header names up to 8 conversations (dashboard.js): n1 owns 6 here (above).
        assert!(owned.len() <= 8, "{owned:?}");
        let plural = if owned.len() == 1 { "" } else { "s" };
        let count = format!(
            "node {} · owns {} conversation{plural}",
            node.name,
            owned.len()
        );
        assert!(header.starts_with(&count), "{header:?}, not {count:?}");
        for conversation in &owned {
            assert!(
                header.contains(conversation),
                "{conversation} not in {header:?}"
            );
        }
    }
    assert_eq!(
        forwarded as usize, forwarded_expected,
        "posts to non-owners are forwarded"
    );
    assert_eq!(
        served as usize, forwarded_expected,
        "and served by the owners"
    );
    // Before each of them the server asked the owner for the conversation's declared tools,
    // but for a conversation's first posts, which may ask while nobody holds it yet (the node
    // then reads the log itself) and be forwarded after another node took it meanwhile.
    let asked = asked as usize;
    assert!(
        asked <= forwarded_expected && asked + conversations.len() >= forwarded_expected,
        "{asked} questions for declared tools asked of the owners, {forwarded_expected} posts forwarded"
    );
    // The lease and publish metrics: every conversation's lease taken (once, unless one moved),
    // renewals timed, and each owner's publishes timed.
    let acquired: f64 = total(&legion, "legio_cluster_leases_acquired_total", "");
    assert!(
        acquired as usize >= conversations.len(),
        "{acquired} leases taken\n{}",
        lease_metrics(&legion)
    );
    // Renewals come every TTL/3: on a fast machine the posts above can all be answered before
    // the first, so wait for one (for up to two TTLs).
    let deadline = Instant::now() + legion.ttl * 2;
    let mut renewals: f64 = total(&legion, "legio_cluster_lease_renew_seconds_count", "");
    while renewals == 0.0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        renewals = total(&legion, "legio_cluster_lease_renew_seconds_count", "");
    }
    assert!(
        renewals > 0.0,
        "no renewal timed\n{}",
        lease_metrics(&legion)
    );
    for conversation in &conversations {
        let owner = &legion.nodes[legion.node_index(&legion.owner(conversation).unwrap())];
        let publishes = metric(owner, "legio_store_append_latency_seconds_count", "");
        assert!(publishes > 0.0, "{} timed no publish", owner.name);
    }

    // Every node reads the same history, the owner's appends included.
    for conversation in &conversations {
        let histories: Vec<usize> = legion
            .nodes
            .iter()
            .map(|n| {
                let (status, body) = get(n, &format!("/sessions/{conversation}/history"));
                assert_eq!(status, 200, "{body}");
                serde_json::from_str::<Vec<Value>>(&body).unwrap().len()
            })
            .collect();
        assert!(
            histories
                .iter()
                .all(|h| *h == histories[0] && *h >= ROUNDS * 2),
            "{conversation}: {histories:?}"
        );
    }

    // The operator CLI reads the cluster's log through any node (`--server`) as with `--nats`.
    let last = legion.log().last_seq().get();
    for node in &legion.nodes {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_legio"))
            .current_dir(legion.dir.path())
            .env("LEGIO_CONFIG", legion.dir.path().join("legio.toml"))
            .args(["--server", &node.base, "replay", "--format", "jsonl"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}: {out:?}", node.name);
        let lines = String::from_utf8_lossy(&out.stdout).lines().count() as u64;
        assert_eq!(lines, last, "replay --server {} ({})", node.base, node.name);
    }

    // A streamed turn through a node that does not own the conversation: the owner's progress
    // comes back as the stream.
    let owner = legion.owner("rr:0").unwrap();
    let via = legion.nodes.iter().find(|n| n.name != owner).unwrap();
    let (status, stream) = post_streamed(&via.base, "rr:0", "@all streamed through a non-owner");
    assert_eq!(status, 200, "{stream}");
    for event in ["agent_started", "delta", "agent_done", "replies"] {
        assert!(
            stream.contains(&format!("event: {event}")),
            "{event} in {stream}"
        );
    }
    assert!(!stream.contains("\"error\":\""), "{stream}");

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
    // It caught up: its own copy of the stream reaches the log's last seq.
    let last = legion.log().last_seq().get();
    let deadline = Instant::now() + Duration::from_secs(30);
    while legion.nats.stream_last_seq(0, STREAM) != Some(last) {
        assert!(
            Instant::now() < deadline,
            "the restarted server's copy ends at {:?}, the log at {last}",
            legion.nats.stream_last_seq(0, STREAM)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    legion.verify();
    check_sessions(&legion);
}

/// A heartbeat and a reset sent to a node that does not own the conversation are carried to the
/// owner and take effect there (they once answered "moved"): the heartbeat's reply comes back
/// and is in the log, the reset closes the agent's session, and the conversation stays where it
/// was.
#[test]
fn a_heartbeat_and_a_reset_sent_to_a_non_owner_take_effect_on_the_owner() {
    let _one_at_a_time = one_at_a_time();
    let Some(legion) = Legion::start(0) else {
        return;
    };
    const CONV: &str = "hr:1";
    post_until_served(&legion, 0, CONV, "@ann hello", Duration::from_secs(30));
    let owner = legion.owner(CONV).expect("an owner");
    let i = legion.node_index(&owner);
    let via = &legion.nodes[(i + 1) % 3];
    let (status, body) = http(
        &via.base,
        &format!("/sessions/{CONV}/heartbeats"),
        Some(json!({ "agent": "ann", "text": "still there?" })),
    );
    assert_eq!(status, 200, "heartbeat via {}: {body}", via.name);
    let reply: Value = serde_json::from_str(&body).unwrap();
    assert!(reply["error"].is_null(), "{body}");
    assert!(
        !reply["content"].as_str().unwrap_or("").is_empty(),
        "{body}"
    );
    let (status, body) = http(
        &via.base,
        "/operator/reset",
        Some(json!({ "conversation": CONV, "agent": "ann" })),
    );
    assert_eq!(status, 200, "reset via {}: {body}", via.name);
    assert_eq!(
        legion.owner(CONV),
        Some(owner.clone()),
        "it stayed on {owner}"
    );
    let key = ConversationKey::new(CONV).unwrap();
    let events = legion
        .log()
        .conversation_events(&key, Seq::ZERO, usize::MAX)
        .unwrap();
    let heartbeats = events
        .iter()
        .filter(|r| matches!(&r.event, Event::HeartbeatRan(h) if h.agent.as_str() == "ann" && h.prompt == "still there?"))
        .count();
    assert_eq!(heartbeats, 1, "the heartbeat ran once: {events:?}");
    let closed = events.iter().any(|r| {
        matches!(&r.event, Event::SessionClosed(e)
            if e.agent.as_str() == "ann" && e.why == legio_core::BoundaryReason::ManualReset)
    });
    assert!(closed, "the reset closed ann's session: {events:?}");
    for kind in ["heartbeat", "reset"] {
        let label = format!("kind=\"{kind}\"");
        let forwarded = metric(via, "legio_cluster_forwarded_posts_total", &label);
        let served = metric(&legion.nodes[i], "legio_cluster_served_posts_total", &label);
        assert_eq!(
            (forwarded, served),
            (1.0, 1.0),
            "{kind} forwarded and served"
        );
    }
    // Ann's next turn opens a new session, restored from the log.
    post_until_served(&legion, i + 2, CONV, "@ann again", Duration::from_secs(30));
    // A second process started under the owner's node id sees the owner renew its presence
    // and refuses to start; the owner goes on, its conversation untouched.
    let twin = legion.serve_until_exit(&owner, Duration::from_secs(60));
    let said = String::from_utf8_lossy(&twin.stderr);
    println!("a twin of {owner}: {}, saying {said}", twin.status);
    assert!(!twin.status.success(), "a twin of {owner} started: {said}");
    assert!(
        said.contains(&format!("node id \"{owner}\" is in use")),
        "{said}"
    );
    assert_eq!(legion.owner(CONV), Some(owner.clone()), "{owner} kept it");
    post_until_served(
        &legion,
        i,
        CONV,
        "@ann after the twin",
        Duration::from_secs(30),
    );
    legion.verify();
    check_sessions(&legion);
}

/// Every node runs the `[heartbeats]` schedules, and each conversation's heartbeat runs on its
/// owner only: a listed conversation nobody owns is taken by one node and beats there (it once
/// never beat: every node ran it locally and its own gate refused it), and a conversation with an
/// open session beats on its owner without the other nodes trying (and failing) too.
#[test]
fn scheduled_heartbeats_run_once_per_tick_on_the_owner() {
    let _one_at_a_time = one_at_a_time();
    let schedules = "[heartbeats.ann]\nevery_seconds = 1\ntext = \"open tick\"\n\
                     [heartbeats.bob]\nevery_seconds = 1\ntext = \"listed tick\"\n\
                     conversations = [\"hb:listed\"]\n";
    let started = Instant::now();
    let Some(legion) = Legion::start_with_config(0, TTL, "", schedules) else {
        return;
    };
    post_until_served(&legion, 0, "hb:open", "@ann hello", Duration::from_secs(30));
    let watched = Instant::now();
    std::thread::sleep(Duration::from_millis(4500));
    let seconds = watched.elapsed().as_secs_f64();
    let events: Vec<Event> = legion
        .log()
        .read_range(Seq(1), Seq(u64::MAX), 100_000)
        .unwrap()
        .into_iter()
        .map(|r| r.event)
        .collect();
    for (conversation, agent) in [("hb:listed", "bob"), ("hb:open", "ann")] {
        let beats = events
            .iter()
            .filter(|e| matches!(e, Event::HeartbeatRan(h) if h.conversation.as_str() == conversation && h.agent.as_str() == agent))
            .count();
        let most = started.elapsed().as_secs_f64() + 1.0;
        println!("{conversation}: {beats} heartbeats of {agent} ({seconds:.1} s watched, at most {most:.0})");
        assert!(
            beats >= 3 && (beats as f64) <= most,
            "{conversation}: {beats} heartbeats of {agent}, one node's ticks expected"
        );
    }
    let owner = legion
        .owner("hb:listed")
        .expect("a node took the listed conversation");
    println!("hb:listed beats on {owner}");
    for node in &legion.nodes {
        let failed = metric(node, "legio_heartbeats_total", "outcome=\"failed\"");
        assert_eq!(failed, 0.0, "{}: failed heartbeats", node.name);
        let printed =
            std::fs::read_to_string(legion.dir.path().join(format!("{}.log", node.name))).unwrap();
        assert!(
            !printed.contains("scheduled heartbeat failed"),
            "{} ran a heartbeat of a conversation it does not own:\n{printed}",
            node.name
        );
    }
    legion.verify();
}

/// The owner of a busy conversation is SIGKILLed ten times at random moments (also while its
/// turns are at the provider): each time another node serves the conversation within the lease
/// TTL plus 2 s, every acknowledged message is in the log exactly once, `verify` is clean and
/// every provider session was sent each message once (a repeat only marked redelivered).
#[test]
fn killing_the_owner_of_a_busy_conversation_moves_it_within_the_lease_ttl() {
    let _one_at_a_time = one_at_a_time();
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
        let inflight = std::thread::spawn(move || post(&base, CONV, &text).ok().map(|_| text));
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
    let (sessions, sent) = check_sessions(&legion);
    assert!(sessions >= 3, "{sessions}");
    assert!(sent >= acknowledged.len(), "{sent} messages sent");
}

/// An owner paused past its lease (SIGSTOP while a turn is at the provider), then resumed: the
/// conversation was taken over meanwhile; the old owner's appends are refused, it stands down,
/// and nothing of its turn is in the log.
#[test]
fn a_paused_owner_finds_its_appends_refused_and_stands_down() {
    let _one_at_a_time = one_at_a_time();
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
    check_sessions(&legion);
}

/// An owner stopped gracefully (SIGTERM) releases its leases: another node serves the
/// conversation at once, far under the lease TTL (30 s here; an owner that died without a word
/// would hold the conversation that long), and nothing acknowledged is lost.
#[test]
fn a_gracefully_stopped_owner_hands_its_conversation_over_at_once() {
    let _one_at_a_time = one_at_a_time();
    let ttl = Duration::from_secs(30);
    let Some(mut legion) = Legion::start_with_ttl(0, ttl) else {
        return;
    };
    const CONV: &str = "graceful:1";
    let (_, first) = post_until_served(&legion, 0, CONV, "@all hello", Duration::from_secs(30));
    let owner = legion.owner(CONV).expect("an owner");
    // `inspect nodes` lists every running node: the owner with the conversation, the two
    // others with none.
    let all: Vec<String> = legion.nodes.iter().map(|n| n.name.clone()).collect();
    let rows = node_rows_until(&legion, |rows| rows.len() == all.len());
    assert_eq!(
        rows.iter().map(|r| r.0.clone()).collect::<Vec<_>>(),
        all,
        "{rows:?}"
    );
    for (node, conversation) in &rows {
        let want = if *node == owner { CONV } else { "" };
        assert_eq!(conversation, want, "{rows:?}");
    }
    let i = legion.node_index(&owner);
    legion.signal(i, "-TERM");
    let deadline = Instant::now() + Duration::from_secs(20);
    while legion.nodes[i].child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "{owner} did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    let stopped = Instant::now();
    assert_eq!(legion.owner(CONV), None, "{owner} released its lease");
    // Its presence too (it would stay listed for the 30 s TTL otherwise).
    let rows = node_rows_until(&legion, |rows| rows.len() == 2);
    assert!(rows.iter().all(|(node, _)| *node != owner), "{rows:?}");
    assert_eq!(rows.len(), 2, "{rows:?}");
    let (_, second) = post_until_served(
        &legion,
        i + 1,
        CONV,
        "@ann after the handover",
        Duration::from_secs(20),
    );
    let handover = stopped.elapsed();
    println!("{owner} stopped; the conversation was served elsewhere after {handover:?}");
    assert_eq!(second.len(), 1, "served at the first try: {second:?}");
    assert!(
        handover < ttl / 3,
        "served again only after {handover:?} (lease TTL {ttl:?})"
    );
    let new_owner = legion.owner(CONV).expect("an owner");
    assert_ne!(new_owner, owner);
    let texts = user_texts(&legion.log(), CONV);
    let acknowledged = [first.last().unwrap(), &second[0]];
    let stored: Vec<&String> = texts.iter().filter(|t| acknowledged.contains(t)).collect();
    assert_eq!(
        stored, acknowledged,
        "each acknowledged message once, in order"
    );
    assert!(texts
        .iter()
        .all(|t| first.contains(t) || second.contains(t)));
    legion.verify();
    check_sessions(&legion);
}

/// A conversation whose actors the reaper stopped (idle) is let go: its owner releases its
/// lease (the lease TTL here is 30 s, so no expiry is involved), its held-leases gauge drops,
/// and a post to another node is served there at once, the agents resuming their suspended
/// sessions. A third node that read the conversation drops its copy as idle too.
#[test]
fn an_idle_conversation_is_released_once_its_actors_are_reaped() {
    let _one_at_a_time = one_at_a_time();
    let ttl = Duration::from_secs(30);
    // Agents idle for 1.2 s are reaped; the reaper looks every 0.3 s.
    let runtime = "session_idle_timeout_minutes = 0.02\nreap_interval_seconds = 0.3";
    let Some(legion) = Legion::start_with(0, ttl, runtime) else {
        return;
    };
    const CONV: &str = "idle:1";
    let (_, first) = post_until_served(&legion, 0, CONV, "@all hello", Duration::from_secs(30));
    let owner = legion.owner(CONV).expect("an owner");
    let i = legion.node_index(&owner);
    let held = |node: &Node| metric(node, "legio_cluster_leases_held", "");
    assert_eq!(held(&legion.nodes[i]), 1.0, "{owner} holds the lease");
    // A node that reads the conversation without owning it keeps a copy of it, dropped once
    // unread for the idle timeout (it once kept every copy it ever read).
    let reader = &legion.nodes[(i + 2) % legion.nodes.len()];
    let (status, body) = get(reader, &format!("/sessions/{CONV}/history"));
    assert_eq!(status, 200, "{body}");
    let copies = |node: &Node| metric(node, "legio_cluster_read_copies", "");
    assert_eq!(copies(reader), 1.0, "{} keeps a copy", reader.name);
    let deadline = Instant::now() + Duration::from_secs(15);
    while legion.owner(CONV).is_some() || copies(reader) > 0.0 {
        assert!(
            Instant::now() < deadline,
            "{owner} kept the lease of an idle conversation, or {} its copy ({} copies)",
            reader.name,
            copies(reader)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let released = Instant::now();
    assert_eq!(held(&legion.nodes[i]), 0.0, "{owner}'s gauge dropped");
    assert_eq!(
        metric(&legion.nodes[i], "legio_cluster_leases_released_total", ""),
        1.0
    );
    let other = (i + 1) % legion.nodes.len();
    let second = "@ann after the release";
    post(&legion.nodes[other].base, CONV, second).expect("served at the first try");
    let served = released.elapsed();
    println!(
        "released by {owner}; served by {} {served:?} later",
        legion.nodes[other].name
    );
    assert!(served < ttl / 3, "served only after {served:?}");
    assert_eq!(legion.owner(CONV).as_ref(), Some(&legion.nodes[other].name));
    assert_eq!(held(&legion.nodes[other]), 1.0);
    let texts = user_texts(&legion.log(), CONV);
    let acknowledged = [first.last().unwrap().as_str(), second];
    let stored: Vec<&str> = texts
        .iter()
        .map(String::as_str)
        .filter(|t| acknowledged.contains(t))
        .collect();
    assert_eq!(
        stored, acknowledged,
        "each acknowledged message once, in order"
    );
    legion.verify();
    check_sessions(&legion);
}

/// A node cut off from the cluster (a network partition between it and the nats-servers, both
/// sides running) cannot renew its lease: it stands down before the lease expires at the servers
/// (a TTL after the write the bucket stored), another node takes the conversation
/// over after the TTL, and once the partition heals the cut-off node serves posts by carrying
/// them to the new owner. Every acknowledged post is in the log once; verify is clean.
#[test]
fn a_node_cut_off_from_the_cluster_stands_down_and_its_conversation_moves() {
    let _one_at_a_time = one_at_a_time();
    // A 4 s TTL: a node stands down at most 7/8 of the TTL after its last renewal was sent
    // (trusted for 3/4, watched every 1/8), so 0.5 s before the lease can expire, which leaves
    // room for this test's polling on a loaded machine.
    let Some(mut legion) = Legion::start_with_ttl(0, Duration::from_secs(4)) else {
        return;
    };
    const CONV: &str = "cut:1";
    let target = legion.nats.urls()[0]
        .trim_start_matches("nats://")
        .to_owned();
    let proxy = Proxy::start(target);
    let cut = legion.spawn_through("n4", &[proxy.url()]);
    let mut acked = vec!["hello from the node to be cut off".to_owned()];
    post(&legion.nodes[cut].base, CONV, &acked[0]).expect("the node serves its first post");
    assert_eq!(legion.owner(CONV).as_deref(), Some("n4"));

    proxy.cut();
    let cut_at = Instant::now();
    // The cut closed n4's connection: the lease's last write is final (a write in flight at the
    // cut that still landed would only make this bound earlier, so stricter).
    std::thread::sleep(Duration::from_millis(200));
    let (holder, written) = legion
        .lease_written(CONV)
        .expect("n4's lease is in the bucket right after the cut");
    assert_eq!(holder, "n4");
    let expires = written + legion.ttl;
    let stood_down_after = stands_down_in_time(&legion, cut, cut_at);
    let seen = SystemTime::now();
    println!("stood down {stood_down_after:?} after the cut");
    // Seen after the node stood down (the metric is polled), so this shows it stood down first.
    assert!(
        seen < expires,
        "n4 stood down {:?} after its lease expired at the servers",
        seen.duration_since(expires).unwrap_or_default()
    );
    println!(
        "stood down at least {:?} before its lease expired at the servers",
        expires.duration_since(seen).unwrap_or_default()
    );
    acked.push(served_by(&legion, &[0, 1, 2], CONV, "@ann after the cut"));
    let moved_after = cut_at.elapsed();
    let new_owner = legion.owner(CONV).expect("an owner");
    assert_ne!(new_owner, "n4", "another node took the conversation over");
    println!(
        "served elsewhere {moved_after:?} after the cut (TTL {:?})",
        legion.ttl
    );
    assert!(
        moved_after < legion.ttl + Duration::from_secs(10),
        "served elsewhere only after {moved_after:?}"
    );

    proxy.heal();
    acked.push(served_by(
        &legion,
        &[cut],
        CONV,
        "@bob through the healed node",
    ));
    assert_eq!(
        legion.owner(CONV).as_deref(),
        Some(new_owner.as_str()),
        "the healed node carried the post to the owner"
    );
    let texts = user_texts(&legion.log(), CONV);
    for text in &acked {
        let count = texts.iter().filter(|t| *t == text).count();
        assert_eq!(count, 1, "{text:?} is in the log {count} times: {texts:?}");
    }
    legion.verify();
    check_sessions(&legion);
}

/// Every nats-server lost at once (the whole cluster unreachable from every node): a post
/// fails as 503 `cluster_unavailable` within seconds, not at the append deadline, and once the servers are back on their data the
/// conversation goes on from its log: every acknowledged post is in it once, the failed one at
/// most once, verify is clean and every provider session was sent each message once.
#[test]
fn with_the_whole_cluster_down_posts_fail_and_the_conversation_goes_on_once_it_returns() {
    let _one_at_a_time = one_at_a_time();
    let Some(mut legion) = Legion::start(0) else {
        return;
    };
    const CONV: &str = "dark:1";
    let mut acked = Vec::new();
    for i in 0..3 {
        let text = format!("@ann before the dark {i}");
        post(&legion.nodes[i].base, CONV, &text).expect("served while the cluster is up");
        acked.push(text);
    }
    let owner = legion.node_index(&legion.owner(CONV).expect("an owner"));
    for i in 0..3 {
        legion.nats.kill(i);
    }
    let started = Instant::now();
    let failed = post(&legion.nodes[owner].base, CONV, "@ann in the dark");
    let took = started.elapsed();
    println!("a post with every server down: {failed:?} after {took:?}");
    let unavailable = |failed: &Result<Vec<Value>, String>| {
        let error = failed.as_ref().expect_err("acknowledged with no server up");
        assert!(
            error.starts_with("503") && error.contains("cluster_unavailable"),
            "{error}"
        );
    };
    unavailable(&failed);
    // The owner stands down once its lease is no longer trusted (3/4 of the TTL) and its
    // append stops retrying then, after the attempt in flight (`request_timeout`, 5 s): not at
    // the append deadline (30 s).
    assert!(
        took < legion.ttl + Duration::from_secs(10),
        "the post failed only after {took:?}"
    );
    let other = (owner + 1) % 3;
    let started = Instant::now();
    let failed = post(
        &legion.nodes[other].base,
        CONV,
        "@ann in the dark elsewhere",
    );
    let took = started.elapsed();
    println!("through a non-owner: {failed:?} after {took:?}");
    unavailable(&failed);
    // Taking the lease is tried again for up to a TTL, each try waiting `request_timeout`.
    assert!(
        took < legion.ttl + Duration::from_secs(10),
        "the post failed only after {took:?}"
    );

    legion.nats.restart_all();
    let back = Instant::now();
    acked.push(served_by(
        &legion,
        &[owner, other],
        CONV,
        "@bob after the dark",
    ));
    println!("served {:?} after the servers were back", back.elapsed());
    let texts = user_texts(&legion.log(), CONV);
    for text in &acked {
        let count = texts.iter().filter(|t| *t == text).count();
        assert_eq!(count, 1, "{text:?} is in the log {count} times: {texts:?}");
    }
    for text in ["@ann in the dark", "@ann in the dark elsewhere"] {
        let count = texts.iter().filter(|t| *t == text).count();
        assert!(count <= 1, "{text:?} is in the log {count} times");
    }
    legion.verify();
    check_sessions(&legion);
}

/// A partition between the nats-servers (the third cut off from the other two, every process
/// running). A node that reaches the cluster only through the cut-off server cannot renew: it
/// stands down before its lease can expire, and its conversation is served on the majority side
/// after the TTL; a conversation owned there goes on meanwhile; a post to the cut-off node
/// fails. Once healed, the cut-off server catches up and that node serves posts again. Every
/// acknowledged post is in the log once, verify is clean and every provider session was sent
/// each message once.
#[test]
fn a_partition_between_servers_moves_the_minority_sides_conversations_to_the_majority() {
    let _one_at_a_time = one_at_a_time();
    let Some(mut legion) = Legion::start_partitionable(0) else {
        return;
    };
    const MINE: &str = "minority:1";
    const THEIRS: &str = "majority:1";
    let minority = legion.nats.urls()[2].clone();
    let cut = legion.spawn_through("n4", &[minority]);
    let mut acked = vec![
        "hello from the minority side".to_owned(),
        "hello from the majority side".to_owned(),
    ];
    post(&legion.nodes[cut].base, MINE, &acked[0]).expect("served before the partition");
    post(&legion.nodes[0].base, THEIRS, &acked[1]).expect("served before the partition");
    assert_eq!(legion.owner(MINE).as_deref(), Some("n4"));
    assert_eq!(legion.owner(THEIRS).as_deref(), Some("n1"));

    legion.nats.cut_off();
    let cut_at = Instant::now();
    let stood_down_after = stands_down_in_time(&legion, cut, cut_at);
    println!("n4 stood down {stood_down_after:?} after the partition");
    acked.push(served_by(
        &legion,
        &[0],
        THEIRS,
        "@ann during the partition",
    ));
    println!(
        "the majority's conversation served {:?} after the partition",
        cut_at.elapsed()
    );
    acked.push(served_by(
        &legion,
        &[0, 1, 2],
        MINE,
        "@bob on the majority side",
    ));
    println!(
        "the minority's conversation served elsewhere {:?} after the partition",
        cut_at.elapsed()
    );
    let failed = post(
        &legion.nodes[cut].base,
        MINE,
        "@ann through the cut-off side",
    );
    println!("a post to the minority's node: {failed:?}");
    assert!(failed.is_err(), "acknowledged without a quorum: {failed:?}");

    legion.nats.heal();
    let healed = Instant::now();
    while !legion.nats.is_healthy(2) || legion.nats.route_peers(2) != ["n1", "n2"] {
        assert!(
            healed.elapsed() < Duration::from_secs(30),
            "n3 never caught up"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    acked.push(served_by(
        &legion,
        &[cut],
        MINE,
        "@ann through the healed side",
    ));
    // Served by the owner on the majority side, or by n4 itself: the heal can set off a leader
    // election of the lease bucket longer than a 2 s lease is trusted (the owner then stands
    // down and its lease expires).
    println!(
        "served after the heal; owner {:?}; leases:\n{}",
        legion.owner(MINE),
        lease_metrics(&legion)
    );
    let log = legion.log();
    for conversation in [MINE, THEIRS] {
        let texts = user_texts(&log, conversation);
        for text in &acked {
            let count = texts.iter().filter(|t| *t == text).count();
            assert!(count <= 1, "{text:?} is in {conversation} {count} times");
        }
    }
    let all: Vec<String> = [MINE, THEIRS]
        .iter()
        .flat_map(|c| user_texts(&log, c))
        .collect();
    for text in &acked {
        let count = all.iter().filter(|t| *t == text).count();
        assert_eq!(count, 1, "{text:?} is in the log {count} times");
    }
    legion.verify();
    check_sessions(&legion);
}

/// Waits until node `i`, cut off from the cluster at `cut_at`, stands down, and asserts that it
/// did once its lease was no longer trusted (3/4 of the TTL after its last renewal began), not
/// when its pending renewal timed out (`request_timeout`, 5 s): within the TTL of the cut, with
/// 1 s of slack for a loaded machine. That bounds the stand-down from above only: the lease
/// expires at the servers a TTL after its last renewal, which came before the cut; the cut-off
/// node's test also compares with the lease's stored time to show that it stood down first (the
/// paused-owner test shows that a late owner's appends are refused). Returns how long after the
/// cut.
fn stands_down_in_time(legion: &Legion, i: usize, cut_at: Instant) -> Duration {
    let deadline = cut_at + Duration::from_secs(20);
    while metric(&legion.nodes[i], "legio_cluster_leases_lost_total", "") < 1.0 {
        assert!(
            Instant::now() < deadline,
            "the cut-off node never stood down"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let after = cut_at.elapsed();
    assert!(
        after < legion.ttl + Duration::from_secs(1),
        "the cut-off node stood down only {after:?} after the cut"
    );
    after
}

/// [`node_rows`] once `done` holds for them, or after 10 s (a node takes its presence lease just
/// after it starts serving).
fn node_rows_until(
    legion: &Legion,
    done: impl Fn(&[(String, String)]) -> bool,
) -> Vec<(String, String)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let rows = node_rows(legion);
        if done(&rows) || Instant::now() > deadline {
            return rows;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `legio inspect nodes --format json` as (node, conversation) rows, in its order (by node).
fn node_rows(legion: &Legion) -> Vec<(String, String)> {
    let out = legion.legio(&["inspect", "nodes", "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    rows.iter()
        .map(|r| {
            let field = |name: &str| r[name].as_str().unwrap_or_else(|| panic!("{r}")).to_owned();
            (field("node"), field("conversation"))
        })
        .collect()
}

/// The text of `text` that one of the nodes `via` answered (see [`post_until_served_by`]).
fn served_by(legion: &Legion, via: &[usize], conversation: &str, text: &str) -> String {
    let (_, attempts) =
        post_until_served_by(legion, via, conversation, text, Duration::from_secs(40));
    attempts.last().expect("at least one attempt").clone()
}
