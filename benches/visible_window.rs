//! Latency (p50/p99) of `visible_window(conv, Viewer::Specialist(agent), 50)` over 1M messages
//! (× scale) in one conversation with 100 specialists, against two SQLite queries on the same
//! messages measured in the same run: the seed's over-fetch (`LIMIT 250` then filter) and a correct
//! query over a recipients side table.
//! Run: `cargo bench --bench visible_window` (`LEGIO_BENCH_SCALE=0.01` for a quick smoke run).
//!
//! The p50/p99 table comes from timed loops recording every query's latency (random specialists,
//! the same sequence for every system): first the 2,000 queries right after the load (cold caches),
//! then legio is left to settle (queries for 20 s × scale, whose mean latency per 2 s window is
//! printed: after a bulk load it stays in milliseconds for several seconds), then, warm, as many
//! queries as fit in 3 s × scale. Criterion also reports its mean estimate of each query (warm).

use legio_tests::bench::*;
use std::time::{Duration, Instant};

use criterion::Criterion;
use legio_core::{AgentName, Audience, ConversationKey, Event, Message, Viewer};
use legio_store::{Durability, EventLog, SledLog, StoreOptions};
use legio_tests::{agent, conv, TrafficGen};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rusqlite::{params, Connection};

/// Messages in the conversation at scale 1.
const MESSAGES: f64 = 1_000_000.0;
const AGENTS: usize = 100;
const BROADCAST_PERCENT: u32 = 5;
const BODY_BYTES: usize = 100;
const SEED: u64 = 0x5eed_0002;
/// The window asked for.
const LIMIT: usize = 50;
/// The seed fetched `limit * 5` rows and filtered them.
const OVERFETCH: usize = LIMIT * 5;
/// Queries timed one by one right after the load (cold caches), for legio and correct SQLite.
const COLD_QUERIES: usize = 2_000;
/// Queries compared id by id between legio and the correct SQLite query.
const VERIFY_QUERIES: usize = 50;
const GOAL_P99: Duration = Duration::from_micros(100);
const GOAL_SPEEDUP: f64 = 3.0;

const SQLITE_SCHEMA: &str = "
CREATE TABLE nuntii (id TEXT PRIMARY KEY, sender TEXT NOT NULL, text TEXT NOT NULL, audience TEXT NOT NULL, timestamp TEXT NOT NULL, reply_to TEXT, FOREIGN KEY (reply_to) REFERENCES nuntii(id));
CREATE INDEX idx_nuntii_timestamp ON nuntii(timestamp);
CREATE INDEX idx_nuntii_sender ON nuntii(sender);
";

/// The side table of the correct SQLite query: one row per name under which a message is visible
/// (each audience member, `all` for broadcasts, and the sending agent), clustered by
/// (recipient, msg_rowid).
const RECIPIENTS_SCHEMA: &str = "
CREATE TABLE recipients (recipient TEXT NOT NULL, msg_rowid INTEGER NOT NULL, PRIMARY KEY (recipient, msg_rowid)) WITHOUT ROWID;
";

/// The seed's query: the newest `limit * 5` messages, filtered afterwards.
const OVERFETCH_SQL: &str = "SELECT id, sender, text, audience, timestamp, reply_to \
     FROM nuntii ORDER BY timestamp DESC LIMIT ?1";

/// The correct query: the newest `limit` rowids listed under the agent or under `all` (a merge of
/// two backward index scans), then those rows in log order.
const CORRECT_SQL: &str = "SELECT n.id, n.sender, n.text, n.audience, n.timestamp, n.reply_to \
     FROM nuntii n JOIN ( \
         SELECT msg_rowid FROM recipients WHERE recipient = ?1 \
         UNION \
         SELECT msg_rowid FROM recipients WHERE recipient = 'all' \
         ORDER BY msg_rowid DESC LIMIT ?2 \
     ) w ON n.rowid = w.msg_rowid \
     ORDER BY n.rowid";

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!(
            "visible_window: benchmark only; run it with `cargo bench --bench visible_window`"
        );
        return;
    }
    let scale = scale();
    let messages = ((MESSAGES * scale).round() as usize).max(1);
    let budget = Duration::from_secs_f64((3.0 * scale).max(0.5));
    println!(
        "visible_window: {} messages in one conversation, {AGENTS} specialists, {BROADCAST_PERCENT}% \
         broadcasts, {BODY_BYTES}-byte bodies (LEGIO_BENCH_SCALE={scale})",
        fmt_int(messages as u64)
    );

    let dir = tempfile::tempdir().expect("a temporary folder");
    let generator = || TrafficGen::new(SEED, AGENTS, 1, BROADCAST_PERCENT, BODY_BYTES);
    let probe = generator();
    let conversation = conv(&probe.conversations()[0]);
    let agents: Vec<AgentName> = probe.agents().iter().map(|a| agent(a)).collect();

    // ---- load legio ----
    let started = Instant::now();
    let options = StoreOptions {
        durability: Durability::RELAXED,
        ..StoreOptions::default()
    };
    let log = SledLog::open(dir.path().join("log"), &options).expect("opening the log");
    let load_batch = load_batch();
    let mut gen = generator();
    load(
        &log,
        messages as u64,
        load_batch,
        || gen.next_message(),
        |_| {},
    );
    let legio_load = started.elapsed();
    assert_eq!(log.last_seq().get(), messages as u64);

    // ---- load SQLite (same messages: the generator is deterministic) ----
    let started = Instant::now();
    let db_path = dir.path().join("seed.db");
    {
        let mut conn = Connection::open(&db_path).expect("opening SQLite");
        let _: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .expect("WAL");
        conn.execute_batch(SQLITE_SCHEMA).expect("schema");
        conn.execute_batch(RECIPIENTS_SCHEMA).expect("schema");
        let tx = conn.transaction().expect("transaction");
        {
            let mut insert = tx
                .prepare(
                    "INSERT INTO nuntii (id, sender, text, audience, timestamp, reply_to) \
                     VALUES (?1, ?2, ?3, ?4, ?5, NULL)",
                )
                .expect("prepare");
            let mut recipient = tx
                .prepare("INSERT OR IGNORE INTO recipients (recipient, msg_rowid) VALUES (?1, ?2)")
                .expect("prepare");
            let mut gen = generator();
            for _ in 0..messages {
                let m = as_message(gen.next_message());
                let rowid = insert
                    .insert(params![
                        m.id.to_string(),
                        m.sender.as_str(),
                        m.text_content(),
                        audience_json(&m.audience),
                        m.at.to_rfc3339(),
                    ])
                    .expect("insert");
                for name in recipients(&m) {
                    recipient.execute(params![name, rowid]).expect("insert");
                }
            }
        }
        tx.commit().expect("commit");
        conn.execute_batch("ANALYZE").expect("analyze");
    }
    let sqlite_load = started.elapsed();
    let db = Connection::open(&db_path).expect("opening SQLite");
    let plan = {
        let mut stmt = db
            .prepare(&format!("EXPLAIN QUERY PLAN {CORRECT_SQL}"))
            .expect("prepare");
        let details = stmt
            .query_map(params!["a0", LIMIT as i64], |r| r.get::<_, String>(3))
            .expect("query plan");
        details
            .collect::<rusqlite::Result<Vec<_>>>()
            .expect("query plan")
            .join("; ")
    };
    println!(
        "  loaded: legio (relaxed, {load_batch}-event appends, then flush) {}, {:.0} MB on disk; \
         SQLite (one transaction, plus ANALYZE) {}",
        fmt_dur(legio_load),
        log.size_on_disk().expect("size") as f64 / 1e6,
        fmt_dur(sqlite_load)
    );

    // ---- cold: the first queries after the load, timed one by one ----
    let cold_order: Vec<usize> = {
        let mut rng = StdRng::seed_from_u64(SEED ^ 3);
        (0..COLD_QUERIES)
            .map(|_| rng.gen_range(0..agents.len()))
            .collect()
    };
    let (legio_cold, legio_cold_complete) = time_each(&cold_order, |a| {
        legio_query(&log, &conversation, &agents[a]).len() == LIMIT
    });
    let (correct_cold, correct_cold_complete) = time_each(&cold_order, |a| {
        correct_query(&db, &agents[a]).len() == LIMIT
    });
    println!(
        "  first {} queries after the load (cold caches): legio {}, SQLite correct {}",
        fmt_int(COLD_QUERIES as u64),
        fmt_dur(Duration::from_nanos(legio_cold.iter().sum())),
        fmt_dur(Duration::from_nanos(correct_cold.iter().sum())),
    );

    // ---- verify: legio's window equals the correct SQLite answer, id by id ----
    let mut rng = StdRng::seed_from_u64(SEED ^ 1);
    let mut verified = 0;
    let mut mismatches = Vec::new();
    for _ in 0..VERIFY_QUERIES {
        let a = &agents[rng.gen_range(0..agents.len())];
        let legio_ids: Vec<String> = legio_query(&log, &conversation, a)
            .iter()
            .map(|m| m.id.to_string())
            .collect();
        let sqlite_ids: Vec<String> = correct_query(&db, a).into_iter().map(|r| r.id).collect();
        if legio_ids.len() == LIMIT && legio_ids == sqlite_ids {
            verified += 1;
        } else {
            mismatches.push(format!(
                "{a}: legio {} ids, SQLite {} ids, equal: {}",
                legio_ids.len(),
                sqlite_ids.len(),
                legio_ids == sqlite_ids
            ));
        }
    }
    println!(
        "  verified {verified}/{VERIFY_QUERIES} random agents: legio returned exactly {LIMIT} and the \
         same ids, in the same order, as the correct SQLite query"
    );
    for m in &mismatches {
        println!("  MISMATCH {m}");
    }

    // ---- settle: legio's latency keeps falling for a while after a bulk load ----
    let settle = Duration::from_secs_f64((20.0 * scale).max(1.0));
    let window = settle / 10;
    let mut settle_means = Vec::new();
    let mut settle_queries = 0u64;
    let mut rng = StdRng::seed_from_u64(SEED ^ 4);
    let started = Instant::now();
    while started.elapsed() < settle {
        let w = Instant::now();
        let mut n = 0u32;
        while w.elapsed() < window {
            let a = &agents[rng.gen_range(0..agents.len())];
            std::hint::black_box(legio_query(&log, &conversation, a));
            n += 1;
        }
        settle_queries += u64::from(n);
        settle_means.push(fmt_dur(w.elapsed() / n.max(1)));
    }
    println!(
        "  settling: then {} more legio queries over {}; mean latency per {} window: {}",
        fmt_int(settle_queries),
        fmt_dur(settle),
        fmt_dur(window),
        settle_means.join(", ")
    );

    // ---- criterion: mean latency estimates ----
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs_f64((scale).clamp(0.2, 1.0)))
        .measurement_time(Duration::from_secs_f64((3.0 * scale).max(0.5)))
        .configure_from_args();
    {
        let mut group = criterion.benchmark_group("visible_window");
        let mut i = 0;
        group.bench_function("legio", |b| {
            b.iter(|| {
                i = (i + 1) % agents.len();
                legio_query(&log, &conversation, &agents[i])
            })
        });
        group.bench_function("sqlite_correct_recipients", |b| {
            b.iter(|| {
                i = (i + 1) % agents.len();
                correct_query(&db, &agents[i])
            })
        });
        group.bench_function("sqlite_seed_overfetch", |b| {
            b.iter(|| {
                i = (i + 1) % agents.len();
                overfetch_query(&db, &agents[i])
            })
        });
        group.finish();
    }

    // ---- timed loops: p50/p99 over many queries for random agents ----
    let order: Vec<usize> = {
        let mut rng = StdRng::seed_from_u64(SEED ^ 2);
        (0..1_000_000)
            .map(|_| rng.gen_range(0..agents.len()))
            .collect()
    };
    let (legio, legio_complete) = time_queries(&order, budget, |a| {
        legio_query(&log, &conversation, &agents[a]).len() == LIMIT
    });
    let (correct, correct_complete) = time_queries(&order, budget, |a| {
        correct_query(&db, &agents[a]).len() == LIMIT
    });
    let (overfetch, outcomes) = time_queries(&order, budget, |a| {
        let result = overfetch_query(&db, &agents[a]);
        (
            result.seed_rule.len() < LIMIT,
            result.legio_rule_count < LIMIT,
        )
    });
    let seed_short = outcomes.iter().filter(|(seed, _)| *seed).count();
    let legio_rule_short = outcomes.iter().filter(|(_, legio)| *legio).count();
    let count = |oks: &[bool]| oks.iter().filter(|ok| **ok).count();
    let legio_p99 = percentile(&legio, 0.99);

    println!();
    println!(
        "visible_window(conv, Viewer::Specialist(random agent), {LIMIT}) over {} messages:",
        fmt_int(messages as u64)
    );
    let pct = |k: usize, n: usize| format!("{:.1}%", 100.0 * k as f64 / n as f64);
    let row = |name: String, latencies: &[u64], complete: usize| {
        vec![
            name,
            fmt_int(latencies.len() as u64),
            fmt_dur(percentile(latencies, 0.50)),
            fmt_dur(percentile(latencies, 0.99)),
            fmt_dur(percentile(latencies, 1.0)),
            fmt_dur(mean(latencies)),
            pct(complete, latencies.len()),
            format!("{:.1}x", ratio(percentile(latencies, 0.99), legio_p99)),
        ]
    };
    let rows = vec![
        row(
            "legio visible_window (warm)".to_owned(),
            &legio,
            count(&legio_complete),
        ),
        row(
            "legio, first queries after the load".to_owned(),
            &legio_cold,
            count(&legio_cold_complete),
        ),
        row(
            "SQLite correct, recipients table (warm)".to_owned(),
            &correct,
            count(&correct_complete),
        ),
        row(
            "SQLite correct, first queries after the load".to_owned(),
            &correct_cold,
            count(&correct_cold_complete),
        ),
        row(
            format!("SQLite seed over-fetch, LIMIT {OVERFETCH} (warm)"),
            &overfetch,
            overfetch.len() - seed_short,
        ),
    ];
    print_table(
        &[
            "query",
            "queries",
            "p50",
            "p99",
            "max",
            "mean",
            "returned 50",
            "p99 / legio p99",
        ],
        &rows,
    );
    println!();
    println!("  legio: the conversation's visibility index (the agent's list and the `all` list),");
    println!("         read backwards and merged, then the 50 events read and decoded.");
    println!(
        "  SQLite correct: side table recipients(recipient, msg_rowid) WITHOUT ROWID, primary"
    );
    println!("         key (recipient, msg_rowid), one row per audience member, `all` for");
    println!("         broadcasts and the sending agent (legio's rule); the newest 50 rowids of");
    println!("         `recipient = ?agent UNION recipient = 'all'` (two backward index scans,");
    println!("         merged, LIMIT 50), joined back to nuntii by rowid.");
    println!("         SQLite's plan: {plan}");
    println!(
        "  SQLite seed over-fetch: the newest {OVERFETCH} rows by timestamp, kept if the audience"
    );
    println!("         JSON array holds the agent or \"all\" (the seed's rule), at most 50.");
    println!(
        "         It returned fewer than {LIMIT} in {} of its queries ({} with legio's rule, which",
        pct(seed_short, overfetch.len()),
        pct(legio_rule_short, overfetch.len())
    );
    println!("         also counts the agent's own messages).");
    println!("  SQLite: file database in WAL mode, default page cache, same process and disk.");

    let speedup_p50 = ratio(percentile(&correct, 0.50), percentile(&legio, 0.50));
    let speedup_p99 = ratio(percentile(&correct, 0.99), legio_p99);
    println!();
    println!("Goals:");
    let goals = [
        (
            format!("legio p99 < {} (warm)", fmt_dur(GOAL_P99)),
            fmt_dur(legio_p99),
            legio_p99 < GOAL_P99,
        ),
        (
            format!("legio always returns {LIMIT} (and verified equal to SQLite)"),
            format!(
                "{}, verified {verified}/{VERIFY_QUERIES}",
                pct(
                    count(&legio_complete) + count(&legio_cold_complete),
                    legio.len() + legio_cold.len()
                )
            ),
            count(&legio_complete) == legio.len()
                && count(&legio_cold_complete) == legio_cold.len()
                && verified == VERIFY_QUERIES,
        ),
        (
            format!("legio >= {GOAL_SPEEDUP:.0}x faster than correct SQLite (warm p50 and p99)"),
            format!("p50 {speedup_p50:.1}x, p99 {speedup_p99:.1}x"),
            speedup_p50 >= GOAL_SPEEDUP && speedup_p99 >= GOAL_SPEEDUP,
        ),
    ];
    print_goals(&goals);
    criterion.final_summary();
}

fn as_message(event: Event) -> Message {
    match event {
        Event::MessagePosted(m) => m,
        other => panic!("TrafficGen produced a non-message event: {other:?}"),
    }
}

/// The names a message is visible under in the side table: the audience (or `all`) and the
/// sending agent.
fn recipients(m: &Message) -> Vec<&str> {
    let mut names: Vec<&str> = match &m.audience {
        Audience::All => vec!["all"],
        Audience::Only(list) => list.iter().map(|p| p.as_str()).collect(),
    };
    if let Some(sender) = m.sender.agent() {
        names.push(sender.as_str());
    }
    names
}

/// The seed's audience column: a JSON array of names, `["all"]` for everyone.
fn audience_json(audience: &Audience) -> String {
    let names: Vec<&str> = match audience {
        Audience::All => vec!["all"],
        Audience::Only(list) => list.iter().map(|p| p.as_str()).collect(),
    };
    serde_json::to_string(&names).expect("names serialise")
}

fn legio_query(log: &SledLog, conversation: &ConversationKey, a: &AgentName) -> Vec<Message> {
    log.visible_window(conversation, Viewer::Specialist(a), LIMIT)
        .expect("visible_window")
        .into_iter()
        .map(|r| as_message(r.event))
        .collect()
}

/// A row of the seed's table.
#[allow(dead_code)] // Every column is read, as the seed did; not every one is looked at.
#[derive(Debug)]
struct Row {
    id: String,
    sender: String,
    text: String,
    audience: String,
    timestamp: String,
    reply_to: Option<String>,
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok(Row {
        id: r.get(0)?,
        sender: r.get(1)?,
        text: r.get(2)?,
        audience: r.get(3)?,
        timestamp: r.get(4)?,
        reply_to: r.get(5)?,
    })
}

fn correct_query(db: &Connection, a: &AgentName) -> Vec<Row> {
    let mut stmt = db.prepare_cached(CORRECT_SQL).expect("prepare");
    let rows = stmt
        .query_map(params![a.as_str(), LIMIT as i64], row)
        .expect("query");
    rows.collect::<rusqlite::Result<_>>().expect("rows")
}

struct Overfetch {
    /// What the seed returned: the kept rows, in log order.
    seed_rule: Vec<Row>,
    /// How many of the fetched rows legio's rule (which adds the agent's own messages) keeps.
    legio_rule_count: usize,
}

fn overfetch_query(db: &Connection, a: &AgentName) -> Overfetch {
    let mut stmt = db.prepare_cached(OVERFETCH_SQL).expect("prepare");
    let rows = stmt
        .query_map(params![OVERFETCH as i64], row)
        .expect("query");
    let mut kept = Vec::new();
    let mut legio_rule_count = 0;
    for r in rows {
        let r = r.expect("row");
        let audience: Vec<String> = serde_json::from_str(&r.audience).expect("audience JSON");
        let seed = audience.iter().any(|n| n == a.as_str() || n == "all");
        if seed || r.sender == a.as_str() {
            legio_rule_count += 1;
        }
        if seed && kept.len() < LIMIT {
            kept.push(r);
        }
    }
    kept.reverse();
    Overfetch {
        seed_rule: kept,
        legio_rule_count: legio_rule_count.min(LIMIT),
    }
}

/// Runs `query` once for each agent in `order`, timing each; returns every latency in nanoseconds,
/// sorted, and the outcomes.
fn time_each<O>(order: &[usize], mut query: impl FnMut(usize) -> O) -> (Vec<u64>, Vec<O>) {
    let mut latencies = Vec::with_capacity(order.len());
    let mut outcomes = Vec::with_capacity(order.len());
    for &a in order {
        let t = Instant::now();
        let outcome = query(a);
        latencies.push(t.elapsed().as_nanos() as u64);
        outcomes.push(outcome);
    }
    latencies.sort_unstable();
    (latencies, outcomes)
}

/// Runs `query` for the agents in `order` until `budget` is spent (at least 200 queries, after 100
/// warm-up queries); returns every latency in nanoseconds, sorted, and the timed queries' outcomes.
fn time_queries<O>(
    order: &[usize],
    budget: Duration,
    mut query: impl FnMut(usize) -> O,
) -> (Vec<u64>, Vec<O>) {
    for &a in order.iter().rev().take(100) {
        std::hint::black_box(query(a));
    }
    let started = Instant::now();
    let mut latencies = Vec::new();
    let mut outcomes = Vec::new();
    for &a in order {
        let t = Instant::now();
        let outcome = query(a);
        latencies.push(t.elapsed().as_nanos() as u64);
        outcomes.push(outcome);
        if latencies.len() >= 200 && started.elapsed() >= budget {
            break;
        }
    }
    latencies.sort_unstable();
    (latencies, outcomes)
}

fn mean(sorted: &[u64]) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    Duration::from_nanos(sorted.iter().sum::<u64>() / sorted.len() as u64)
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-12)
}
