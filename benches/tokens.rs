//! Tokens sent to the model with delta delivery against the seed's approach (the last 50 visible
//! messages plus the new one, and the system prompt, on every dispatch), replaying real
//! multi-agent transcripts (`../shared/data/who-and-when` and `../shared/data/chatdev-warehouse`)
//! through a runtime with a stateful scripted provider; with duplicates and omissions counted from
//! the provider's own record.
//! Run: `cargo bench --bench tokens` (`LEGIO_BENCH_SCALE=0.02` replays 2% of the conversations;
//! `LEGIO_BENCH_TOKENS_CONVERSATIONS=N` caps the conversations per dataset).
//!
//! Replay: one legio conversation per transcript, with its own roster (a runtime started per
//! transcript on one shared relaxed `SledLog` and one shared `ScriptedProvider`, history
//! "session", resumable; `history_window = 50`). Speakers become agents (lowercase, spaces and
//! other characters → `_`, cut to 32 bytes, made unique); the human (`human`, ChatDev's `User`)
//! is legio's user. Orchestrator: who-and-when's `Orchestrator` (Magentic-One), else the first
//! speaker (AG2 group chats); ChatDev's `Chief Executive Officer`, else a dedicated `lead`.
//! Each transcript message is posted as its speaker (`post_as`, `post` for the human) as
//! `@addressee <content>`, so the addressee gets a turn. The addressee is:
//! - who-and-when with `to` fields (Magentic-One): `to`; without `to`, no mention (legio's
//!   default: a specialist's message goes to the orchestrator, the orchestrator's to the user);
//! - who-and-when without any `to` (AG2 group chats): the next different speaker;
//! - ChatDev: the record's `counterpart`, else the other role of the current phase's pair (from
//!   the `phase` record), else the nearest other speaker in the same phase; messages logged twice
//!   (`same_content_as_seq`) are posted once.
//!
//! Content whose `@` would parse as a mention (e-mail-like text is not) gets a full-width `＠` so
//! it cannot address anyone; empty messages are skipped.
//!
//! Counting, per dispatch (every provider request): ours = `estimate_tokens(rendered)` +
//! `estimate_tokens(system_prompt)` from the provider's record; seed = `estimate_message_tokens`
//! of `visible_before(conversation, viewer, new, 50)` and of the new message, plus the system
//! prompt. Duplicates: per provider session, a message seq sent again without `redelivered`.
//! Omissions: per provider session, a message visible to the agent with seq between the
//! session's first delivered message and its last new message that never reached it (the
//! agent's own messages after its bootstrap excluded: legio assumes they are in the session's
//! thread).

use legio_tests::bench::*;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use legio_core::{
    estimate_message_tokens, estimate_tokens, parse_mentions, AgentName, ConversationKey,
    DeliveryMode, History, Participant, Seq, Viewer,
};
use legio_llm::{Provider, RecordedRequest, ScriptedConfig, ScriptedProvider};
use legio_runtime::{Runtime, RuntimeConfig};
use legio_store::{Durability, EventLog, SledLog, StoreOptions};
use serde_json::Value;

/// The seed's window, and legio's `history_window`.
const WINDOW: usize = 50;
/// Goal: at least this much fewer tokens than the seed.
const GOAL_REDUCTION: f64 = 0.80;
const CONVERSATIONS_VAR: &str = "LEGIO_BENCH_TOKENS_CONVERSATIONS";

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("tokens: benchmark only; run it with `cargo bench --bench tokens`");
        return;
    }
    let scale = scale();
    let cap: Option<usize> = std::env::var(CONVERSATIONS_VAR).ok().map(|v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{CONVERSATIONS_VAR} must be a whole number, got {v:?}"))
    });
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data");
    let datasets: [(&str, &str, Loader); 2] = [
        ("who-and-when", "ww", load_who_and_when),
        ("chatdev-warehouse", "cd", load_chatdev),
    ];
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut results = Vec::new();
    for (name, prefix, load) in datasets {
        let file = data.join(name).join("messages.jsonl.gz");
        if !file.is_file() {
            println!("tokens: skipped: {} not found", file.display());
            continue;
        }
        let all = load(&file);
        let total = all.len();
        let wanted = cap
            .unwrap_or_else(|| ((total as f64 * scale).ceil() as usize).max(1))
            .clamp(1, total.max(1));
        // Evenly spaced, so both halves of a dataset (e.g. Magentic-One and AG2) are represented.
        let chosen: Vec<Transcript> = (0..wanted)
            .map(|i| all[i * total / wanted].clone())
            .collect();
        println!(
            "tokens: {name}: replaying {wanted} of {total} conversations ({} messages)",
            chosen.iter().map(|t| t.posts.len()).sum::<usize>()
        );
        let result = rt.block_on(replay(name, prefix, &chosen));
        results.push(result);
    }
    if results.is_empty() {
        println!("tokens: skipped: no dataset found under {}", data.display());
        return;
    }
    report(&results);
}

// ---- transcripts ----

/// Reads a dataset file into transcripts.
type Loader = fn(&Path) -> Vec<Transcript>;

/// One transcript, mapped onto legio.
#[derive(Clone, Debug)]
struct Transcript {
    /// Agent names, the orchestrator first, each with its system prompt and description.
    agents: Vec<(String, String, String)>,
    posts: Vec<Post>,
    /// Messages skipped (empty, or logged twice).
    skipped: usize,
    /// Prompt tokens the original system was billed for this run, if the data has them.
    billed_prompt_tokens: Option<u64>,
}

#[derive(Clone, Debug)]
struct Post {
    /// `None`: the user.
    sender: Option<String>,
    /// The agent addressed with a mention, if any.
    to: Option<String>,
    content: String,
}

/// Maps raw speaker names to valid, unique agent names.
#[derive(Default)]
struct Names {
    by_raw: HashMap<String, String>,
    taken: HashSet<String>,
}

impl Names {
    fn get(&mut self, raw: &str) -> String {
        if let Some(n) = self.by_raw.get(raw) {
            return n.clone();
        }
        let mut base: String = raw
            .trim()
            .chars()
            .map(|c| {
                let c = c.to_ascii_lowercase();
                if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if !base.starts_with(|c: char| c.is_ascii_lowercase()) {
            base.insert(0, 'x');
        }
        if legio_core::RESERVED_NAMES.contains(&base.as_str()) {
            base.push_str("_agent");
        }
        base.truncate(legio_core::MAX_AGENT_NAME_LEN);
        let mut name = base.clone();
        let mut k = 2;
        while self.taken.contains(&name) {
            let suffix = format!("-{k}");
            let mut b = base.clone();
            b.truncate(legio_core::MAX_AGENT_NAME_LEN - suffix.len());
            name = format!("{b}{suffix}");
            k += 1;
        }
        AgentName::new(name.as_str()).unwrap_or_else(|e| panic!("{raw:?} -> {name:?}: {e}"));
        self.taken.insert(name.clone());
        self.by_raw.insert(raw.to_owned(), name.clone());
        name
    }
}

fn read_jsonl(file: &Path) -> Vec<Value> {
    let f = std::fs::File::open(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    BufReader::new(flate2::read::GzDecoder::new(f))
        .lines()
        .map(|l| l.expect("a line of the dataset"))
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(&l).expect("a JSON record"))
        .collect()
}

fn text(v: &Value, key: &str) -> Option<String> {
    match v.get(key)? {
        Value::String(s) if s != "None" && !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn generic_prompt(raw: &str) -> String {
    format!(
        "You are {raw}, one of the agents of a multi-agent team working on the user's task. \
         Answer the message addressed to you."
    )
}

/// Groups records by a key, keeping the order of first appearance.
fn group_by(records: Vec<Value>, key: &str) -> Vec<Vec<Value>> {
    let mut order: Vec<String> = Vec::new();
    let mut groups: HashMap<String, Vec<Value>> = HashMap::new();
    for r in records {
        let k = text(&r, key).unwrap_or_default();
        if !groups.contains_key(&k) {
            order.push(k.clone());
        }
        groups.entry(k).or_default().push(r);
    }
    order
        .into_iter()
        .map(|k| groups.remove(&k).unwrap_or_default())
        .collect()
}

/// who-and-when: `{conv_id, idx, speaker, role, to?, content}`.
fn load_who_and_when(file: &Path) -> Vec<Transcript> {
    let mut out = Vec::new();
    for mut records in group_by(read_jsonl(file), "conv_id") {
        records.sort_by_key(|r| r.get("idx").and_then(Value::as_u64).unwrap_or(0));
        let speaker = |r: &Value| text(r, "speaker").unwrap_or_else(|| "unknown".into());
        let human = |s: &str| s == "human";
        let has_to = records.iter().any(|r| text(r, "to").is_some());
        let orchestrator_raw = if records.iter().any(|r| speaker(r) == "Orchestrator") {
            "Orchestrator".to_owned()
        } else {
            records
                .iter()
                .map(speaker)
                .find(|s| !human(s))
                .unwrap_or_else(|| "lead".into())
        };
        let mut names = Names::default();
        let orchestrator = names.get(&orchestrator_raw);
        let mut agents = vec![(
            orchestrator.clone(),
            generic_prompt(&orchestrator_raw),
            orchestrator_raw.clone(),
        )];
        let add = |raw: &str, names: &mut Names, agents: &mut Vec<(String, String, String)>| {
            let name = names.get(raw);
            if !agents.iter().any(|(n, _, _)| *n == name) {
                agents.push((name.clone(), generic_prompt(raw), raw.to_owned()));
            }
            name
        };
        let (mut posts, mut skipped) = (Vec::new(), 0);
        for (i, r) in records.iter().enumerate() {
            let content = text(r, "content").unwrap_or_default();
            let who = speaker(r);
            if content.trim().is_empty() {
                skipped += 1;
                continue;
            }
            let sender = (!human(&who)).then(|| add(&who, &mut names, &mut agents));
            let to_raw = if has_to {
                text(r, "to")
            } else {
                records[i + 1..]
                    .iter()
                    .map(speaker)
                    .find(|s| *s != who)
                    .filter(|s| !human(s))
            };
            let to = to_raw
                .filter(|t| !human(t))
                .map(|t| add(&t, &mut names, &mut agents))
                .filter(|t| Some(t) != sender.as_ref());
            posts.push(Post {
                sender,
                to,
                content,
            });
        }
        out.push(Transcript {
            agents,
            posts,
            skipped,
            billed_prompt_tokens: None,
        });
    }
    out
}

/// chatdev-warehouse: records of kind `phase`, `system_prompt`, `message`, `usage`, `event`.
fn load_chatdev(file: &Path) -> Vec<Transcript> {
    let mut out = Vec::new();
    for records in group_by(read_jsonl(file), "run_id") {
        let kind = |r: &Value| text(r, "kind").unwrap_or_default();
        let human = |s: &str| s == "User";
        // The first system prompt of each role in the run.
        let mut prompts: HashMap<String, String> = HashMap::new();
        let mut billed = 0u64;
        // Messages with their phase block (a new block at every phase record) and its pair.
        struct Raw {
            speaker: String,
            counterpart: Option<String>,
            block: usize,
            pair: Option<(String, String)>,
            content: String,
            duplicate: bool,
        }
        let mut raws: Vec<Raw> = Vec::new();
        let (mut block, mut pair) = (0usize, None::<(String, String)>);
        for r in &records {
            match kind(r).as_str() {
                "phase" => {
                    block += 1;
                    pair = text(r, "assistant_role").zip(text(r, "user_role"));
                }
                "system_prompt" => {
                    if let (Some(s), Some(c)) = (text(r, "speaker"), text(r, "content")) {
                        prompts.entry(s).or_insert(c);
                    }
                }
                "usage" => {
                    billed += text(r, "prompt_tokens")
                        .and_then(|t| t.parse::<u64>().ok())
                        .unwrap_or(0);
                }
                "message" => raws.push(Raw {
                    speaker: text(r, "speaker").unwrap_or_else(|| "unknown".into()),
                    counterpart: text(r, "counterpart"),
                    block,
                    pair: pair.clone(),
                    content: text(r, "content").unwrap_or_default(),
                    duplicate: r.get("same_content_as_seq").is_some(),
                }),
                _ => {}
            }
        }
        let speakers: Vec<&str> = raws
            .iter()
            .map(|r| r.speaker.as_str())
            .filter(|s| !human(s))
            .collect();
        let mut names = Names::default();
        let orchestrator_raw = if speakers.contains(&"Chief Executive Officer") {
            "Chief Executive Officer".to_owned()
        } else {
            "lead".to_owned()
        };
        let prompt_of = |raw: &str| {
            prompts
                .get(raw)
                .cloned()
                .unwrap_or_else(|| generic_prompt(raw))
        };
        let orchestrator = names.get(&orchestrator_raw);
        let mut agents = vec![(
            orchestrator,
            prompt_of(&orchestrator_raw),
            orchestrator_raw.clone(),
        )];
        let add = |raw: &str, names: &mut Names, agents: &mut Vec<(String, String, String)>| {
            let name = names.get(raw);
            if !agents.iter().any(|(n, _, _)| *n == name) {
                agents.push((name.clone(), prompt_of(raw), raw.to_owned()));
            }
            name
        };
        let (mut posts, mut skipped) = (Vec::new(), 0);
        for (i, r) in raws.iter().enumerate() {
            if r.duplicate || r.content.trim().is_empty() {
                skipped += 1;
                continue;
            }
            let counterpart = r
                .counterpart
                .clone()
                .filter(|c| *c != r.speaker)
                .or_else(|| {
                    let (a, u) = r.pair.as_ref()?;
                    if *a == r.speaker {
                        Some(u.clone())
                    } else if *u == r.speaker {
                        Some(a.clone())
                    } else {
                        None
                    }
                })
                .or_else(|| {
                    let same_block = |o: &&Raw| {
                        o.block == r.block && o.speaker != r.speaker && !human(&o.speaker)
                    };
                    raws[i + 1..]
                        .iter()
                        .find(same_block)
                        .or_else(|| raws[..i].iter().rev().find(same_block))
                        .map(|o| o.speaker.clone())
                })
                .filter(|c| *c != r.speaker && !human(c));
            let sender = (!human(&r.speaker)).then(|| add(&r.speaker, &mut names, &mut agents));
            let to = counterpart.map(|c| add(&c, &mut names, &mut agents));
            posts.push(Post {
                sender,
                to,
                content: r.content.clone(),
            });
        }
        out.push(Transcript {
            agents,
            posts,
            skipped,
            billed_prompt_tokens: Some(billed),
        });
    }
    out
}

// ---- replay ----

/// Writes the transcript's prompt files and configuration into `dir` and loads it.
fn transcript_config(dir: &Path, t: &Transcript) -> RuntimeConfig {
    std::fs::create_dir_all(dir).expect("a folder for the transcript");
    let mut toml = format!(
        "[store]\npath = \"db\"\ndurability = \"relaxed\"\n[runtime]\nhistory_window = {WINDOW}\n\
         session_idle_timeout_minutes = 1000000.0\n[providers.local]\nkind = \"scripted\"\n\
         history = \"session\"\n"
    );
    for (i, (name, prompt, raw)) in t.agents.iter().enumerate() {
        std::fs::write(dir.join(format!("{name}.md")), prompt).expect("writing a prompt");
        let description: String = raw.chars().filter(|c| !matches!(c, '"' | '\\')).collect();
        toml.push_str(&format!(
            "[agents.{name}]\nrole = \"{}\"\ndescription = \"{description}\"\nprompt = \"{name}.md\"\nprovider = \"local\"\n",
            if i == 0 { "orchestrator" } else { "specialist" }
        ));
    }
    let file = dir.join("legio.toml");
    std::fs::write(&file, &toml).expect("writing the configuration");
    let mut config = RuntimeConfig::parse(&toml, &file).expect("a valid configuration");
    config.store.path = dir.join("db");
    config.store.options.durability = Durability::RELAXED;
    config
}

/// What one dataset's replay measured.
struct DatasetResult {
    name: &'static str,
    conversations: usize,
    posted: usize,
    skipped: usize,
    neutralised: usize,
    failed_posts: usize,
    failed_turns: usize,
    dispatches: usize,
    bootstraps: usize,
    deltas: usize,
    sessions: usize,
    ours: u64,
    seed: u64,
    ours_no_system: u64,
    seed_no_system: u64,
    duplicates: usize,
    omissions: usize,
    /// (session, message) pairs the omission check looked at.
    checked: usize,
    billed: Option<u64>,
    elapsed: Duration,
}

async fn replay(name: &'static str, prefix: &str, transcripts: &[Transcript]) -> DatasetResult {
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("a temporary folder");
    let options = StoreOptions {
        durability: Durability::RELAXED,
        ..StoreOptions::default()
    };
    let log_path = dir.path().join("log");
    let log: Arc<dyn EventLog> = Arc::new(
        tokio::task::spawn_blocking(move || SledLog::open(log_path, &options))
            .await
            .expect("the open task")
            .expect("opening the log"),
    );
    let provider = ScriptedProvider::new(ScriptedConfig::new(History::Session { resumable: true }));
    // conversation -> its orchestrator (for the viewer of each dispatch).
    let mut orchestrators: HashMap<ConversationKey, AgentName> = HashMap::new();
    let (mut posted, mut skipped, mut neutralised, mut failed_posts, mut failed_turns) =
        (0, 0, 0, 0, 0);
    for (k, t) in transcripts.iter().enumerate() {
        let key = format!("{prefix}:{k}");
        let config = transcript_config(&dir.path().join(format!("t{k}")), t);
        let shared: Arc<dyn Provider> = Arc::new(provider.clone());
        let runtime = Runtime::builder(config)
            .log(Arc::clone(&log))
            .provider("local", shared)
            .open()
            .await
            .expect("starting a runtime");
        orchestrators.insert(
            ConversationKey::new(key.as_str()).expect("a valid key"),
            runtime.config().orchestrator().name.clone(),
        );
        skipped += t.skipped;
        for p in &t.posts {
            let mut content = p.content.clone();
            if !matches!(parse_mentions(&content, &[]), Ok(None)) {
                content = content.replace('@', "＠");
                neutralised += 1;
            }
            let text = match &p.to {
                Some(to) => format!("@{to} {content}"),
                None => content,
            };
            let result = match &p.sender {
                None => runtime.post(&key, &text).await,
                Some(s) => runtime.post_as(&key, s, &text).await,
            };
            match result {
                Ok(replies) => {
                    posted += 1;
                    failed_turns += replies.iter().filter(|r| r.error().is_some()).count();
                }
                Err(e) => {
                    failed_posts += 1;
                    eprintln!("    {key}: a post failed: {e}");
                }
            }
        }
        runtime.shutdown().await.expect("a clean shutdown");
    }

    let requests = provider.requests();
    let analysis = {
        let log = Arc::clone(&log);
        tokio::task::spawn_blocking(move || analyse(log.as_ref(), &requests, &orchestrators))
            .await
            .expect("the analysis task")
    };
    DatasetResult {
        name,
        conversations: transcripts.len(),
        posted,
        skipped,
        neutralised,
        failed_posts,
        failed_turns,
        billed: transcripts
            .iter()
            .map(|t| t.billed_prompt_tokens)
            .sum::<Option<u64>>(),
        elapsed: started.elapsed(),
        ..analysis
    }
}

fn viewer<'a>(agent: &'a AgentName, orchestrator: &AgentName) -> Viewer<'a> {
    if agent == orchestrator {
        Viewer::Everything
    } else {
        Viewer::Specialist(agent)
    }
}

/// Counts tokens both ways, and duplicates and omissions, from the provider's record and the log.
fn analyse(
    log: &dyn EventLog,
    requests: &[RecordedRequest],
    orchestrators: &HashMap<ConversationKey, AgentName>,
) -> DatasetResult {
    let mut r = DatasetResult {
        name: "",
        conversations: 0,
        posted: 0,
        skipped: 0,
        neutralised: 0,
        failed_posts: 0,
        failed_turns: 0,
        dispatches: requests.len(),
        bootstraps: 0,
        deltas: 0,
        sessions: 0,
        ours: 0,
        seed: 0,
        ours_no_system: 0,
        seed_no_system: 0,
        duplicates: 0,
        omissions: 0,
        checked: 0,
        billed: None,
        elapsed: Duration::ZERO,
    };
    for q in requests {
        let system = estimate_tokens(&q.system_prompt);
        let ours = estimate_tokens(&q.rendered);
        r.ours += ours + system;
        r.ours_no_system += ours;
        match q.plan.mode {
            DeliveryMode::Bootstrap => r.bootstraps += 1,
            DeliveryMode::Delta => r.deltas += 1,
            DeliveryMode::Full => {}
        }
        let orchestrator = &orchestrators[&q.conversation];
        let new = q.plan.new_message.seq;
        let window = log
            .visible_before(&q.conversation, viewer(&q.agent, orchestrator), new, WINDOW)
            .expect("the seed's window");
        let seed: u64 = window
            .iter()
            .filter_map(|rec| rec.event.as_message())
            .chain(std::iter::once(&q.plan.new_message.message))
            .map(estimate_message_tokens)
            .sum();
        r.seed += seed + system;
        r.seed_no_system += seed;
    }

    // Per provider session: what it was sent, in order.
    let mut sessions: BTreeMap<&str, Vec<&RecordedRequest>> = BTreeMap::new();
    for q in requests.iter().filter(|q| q.succeeded) {
        if let Some(s) = q.provider_session.as_deref() {
            sessions.entry(s).or_default().push(q);
        }
    }
    r.sessions = sessions.len();
    for thread in sessions.values() {
        let first = thread[0];
        let me = Participant::Agent(first.agent.clone());
        let mut seen: HashSet<Seq> = HashSet::new();
        for q in thread {
            for item in q.plan.messages() {
                if !seen.insert(item.seq) && !item.redelivered {
                    r.duplicates += 1;
                }
            }
        }
        let (Some(lo), Some(hi)) = (
            seen.iter().min().copied(),
            thread.iter().map(|q| q.plan.new_message.seq).max(),
        ) else {
            continue;
        };
        let bootstrap_new = first.plan.new_message.seq;
        let orchestrator = &orchestrators[&first.conversation];
        let visible = log
            .visible_after(
                &first.conversation,
                viewer(&first.agent, orchestrator),
                Seq(lo.0 - 1),
                usize::MAX,
            )
            .expect("the agent's visible messages");
        for rec in visible.iter().filter(|rec| rec.seq <= hi) {
            let own = rec
                .event
                .as_message()
                .is_some_and(|m| m.sender == me && rec.seq > bootstrap_new);
            if own {
                continue;
            }
            r.checked += 1;
            if !seen.contains(&rec.seq) {
                r.omissions += 1;
            }
        }
    }
    r
}

fn report(results: &[DatasetResult]) {
    println!();
    println!(
        "Tokens sent, delta delivery (ours) vs the seed's last-{WINDOW}-messages window, per dataset:"
    );
    let pct = |ours: u64, seed: u64| 100.0 * (1.0 - ours as f64 / seed.max(1) as f64);
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            vec![
                r.name.to_owned(),
                r.conversations.to_string(),
                fmt_int(r.posted as u64),
                format!(
                    "{} ({}b/{}d)",
                    fmt_int(r.dispatches as u64),
                    r.bootstraps,
                    r.deltas
                ),
                fmt_int(r.ours),
                fmt_int(r.seed),
                format!("{:.1}%", pct(r.ours, r.seed)),
                format!("{:.1}%", pct(r.ours_no_system, r.seed_no_system)),
                r.duplicates.to_string(),
                r.omissions.to_string(),
            ]
        })
        .collect();
    print_table(
        &[
            "dataset",
            "convs",
            "posts",
            "dispatches",
            "tokens ours",
            "tokens seed",
            "reduction",
            "excl. system",
            "duplicates",
            "omissions",
        ],
        &rows,
    );
    println!("  tokens = estimate_tokens (chars/4, /3 for CJK) of what each dispatch sends,");
    println!(
        "  system prompt included on both sides on every dispatch; \"excl. system\" leaves it"
    );
    println!("  out of both. b/d = bootstrap/delta requests.");
    for r in results {
        println!(
            "  {}: {} provider sessions, {} (session, visible message) pairs checked for omissions; \
             {} messages skipped (empty or logged twice); {} with \
             `@` neutralised; {} failed posts, {} failed turns; {:.1} s",
            r.name,
            r.sessions,
            fmt_int(r.checked as u64),
            r.skipped,
            r.neutralised,
            r.failed_posts,
            r.failed_turns,
            r.elapsed.as_secs_f64()
        );
        if let Some(billed) = r.billed {
            println!(
                "  {}: for context, the original system was billed {} prompt tokens for these \
                 runs (its own tokenizer and context policy, its own calls)",
                r.name,
                fmt_int(billed)
            );
        }
    }
    println!();
    println!("Goals:");
    let mut goals = Vec::new();
    for r in results {
        let reduction = pct(r.ours, r.seed) / 100.0;
        goals.push((
            format!(
                "{}: >= {:.0}% fewer tokens than the seed",
                r.name,
                GOAL_REDUCTION * 100.0
            ),
            format!("{:.1}%", reduction * 100.0),
            reduction >= GOAL_REDUCTION,
        ));
        goals.push((
            format!("{}: zero duplicates", r.name),
            r.duplicates.to_string(),
            r.duplicates == 0,
        ));
        goals.push((
            format!("{}: zero omissions", r.name),
            r.omissions.to_string(),
            r.omissions == 0,
        ));
        goals.push((
            format!("{}: every post and turn succeeded", r.name),
            (r.failed_posts + r.failed_turns).to_string(),
            r.failed_posts + r.failed_turns == 0,
        ));
    }
    print_goals(&goals);
}
