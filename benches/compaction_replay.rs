//! Compaction on real long sessions: `../shared/data/ai-scientist-aider` (10 aider coding
//! sessions) and `../shared/data/trap-claude-code` (70 Claude Code sessions) replayed through a
//! stateless scripted agent with a 32k-token context window, once with compaction (the default
//! policy: more than 20 messages or 75% of the window; keep the last 4) and once without (the plain
//! 50-message window), in the same run. Prints, per dataset: requests, the largest request in
//! estimated tokens (system prompt plus everything rendered), requests over the window, and the
//! summaries made.
//! Run: `cargo bench --bench compaction_replay` (`LEGIO_BENCH_SCALE=0.2` replays a fifth of each
//! dataset's sessions).
//!
//! Replay: one conversation per session (aider: per `file`; Claude Code: per `session_id`), one agent (`coder`, the orchestrator) on a stateless
//! scripted provider. A transcript's user records are posted as the user (each one a turn of
//! `coder`), its assistant records as `coder` itself (no turn), its tool and other records as the
//! user with a `[tool NAME]` or `[ROLE]` prefix (a turn each, as a tool result is in a real loop).
//! Text that would parse as a mention gets a full-width `＠`. The summarizer is the agent's own
//! scripted provider (its summary is short; the point here is the context's size, not the
//! summary's prose).

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;
use std::sync::Arc;

use legio_core::{estimate_tokens, Event, History, Seq, SUMMARIZER_PROMPT};
use legio_llm::{Provider, ScriptedConfig, ScriptedProvider};
use legio_runtime::{Runtime, RuntimeConfig};
use legio_tests::bench::*;

const WINDOW: u64 = 32_000;

struct Record {
    role: String,
    label: Option<String>,
    content: String,
}

fn read_sessions(path: &Path, key: &str) -> Option<Vec<Vec<Record>>> {
    let file = std::fs::File::open(path).ok()?;
    let reader = std::io::BufReader::new(flate2::read::GzDecoder::new(file));
    let mut sessions: BTreeMap<String, Vec<(u64, Record)>> = BTreeMap::new();
    for line in reader.lines() {
        let value: serde_json::Value = serde_json::from_str(&line.ok()?).ok()?;
        let session = value[key].to_string();
        let content = value["content"]
            .as_str()
            .unwrap_or_default()
            .trim()
            .to_owned();
        if content.is_empty() {
            continue;
        }
        let record = Record {
            role: value["role"].as_str().unwrap_or("other").to_owned(),
            label: value["tool_name"].as_str().map(str::to_owned),
            content: content.replace('@', "＠"),
        };
        let idx = value["idx"].as_u64().unwrap_or(0);
        sessions.entry(session).or_default().push((idx, record));
    }
    Some(
        sessions
            .into_values()
            .map(|mut s| {
                s.sort_by_key(|(i, _)| *i);
                s.into_iter().map(|(_, r)| r).collect()
            })
            .collect(),
    )
}

struct Outcome {
    requests: usize,
    largest: u64,
    over_window: usize,
    summaries: usize,
    summarizer_calls: usize,
    messages: usize,
}

async fn replay(sessions: &[Vec<Record>], compaction: bool) -> Outcome {
    let dir = tempfile::tempdir().expect("a temp dir");
    std::fs::write(dir.path().join("coder.md"), "You write and fix code.").expect("a prompt");
    let text = format!(
        "[store]\npath = \"db\"\ndurability = \"relaxed\"\n[runtime]\ncompaction = {compaction}\n\
         [agents.coder]\nrole = \"orchestrator\"\nprompt = \"coder.md\"\nprovider = \"local\"\n\
         [providers.local]\nkind = \"scripted\"\nhistory = \"stateless\"\ncontext_window = {WINDOW}\n"
    );
    let file = dir.path().join("legio.toml");
    std::fs::write(&file, text).expect("a config");
    let config = RuntimeConfig::load(&file).expect("a valid config");
    let provider = ScriptedProvider::new(ScriptedConfig {
        context_window: WINDOW,
        ..ScriptedConfig::new(History::Stateless)
    });
    let shared: Arc<dyn Provider> = Arc::new(provider.clone());
    let rt = Runtime::builder(config)
        .provider("local", shared)
        .open()
        .await
        .expect("a runtime");
    let mut messages = 0;
    for (n, session) in sessions.iter().enumerate() {
        let conversation = format!("replay:{n}");
        for record in session {
            let (sender, text) = match record.role.as_str() {
                "user" => ("user", record.content.clone()),
                "assistant" if record.label.is_none() => ("coder", record.content.clone()),
                "tool" | "assistant" => (
                    "user",
                    format!(
                        "[tool {}] {}",
                        record.label.as_deref().unwrap_or("result"),
                        record.content
                    ),
                ),
                other => ("user", format!("[{other}] {}", record.content)),
            };
            rt.post_as(&conversation, sender, &text)
                .await
                .expect("a post");
            messages += 1;
        }
    }
    let log = rt.log().clone();
    let summaries = log
        .read_range(Seq(1), log.last_seq(), usize::MAX)
        .expect("the log")
        .iter()
        .filter(|r| matches!(r.event, Event::SummaryRecorded(_)))
        .count();
    rt.shutdown().await.expect("a shutdown");
    let requests = provider.requests();
    let (summarizer, turns): (Vec<_>, Vec<_>) = requests
        .iter()
        .partition(|r| r.system_prompt == SUMMARIZER_PROMPT);
    let sizes: Vec<u64> = turns
        .iter()
        .map(|r| estimate_tokens(&r.system_prompt) + estimate_tokens(&r.rendered))
        .collect();
    Outcome {
        requests: turns.len(),
        largest: sizes.iter().copied().max().unwrap_or(0),
        over_window: sizes.iter().filter(|s| **s > WINDOW).count(),
        summaries,
        summarizer_calls: summarizer.len(),
        messages,
    }
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("compaction_replay: benchmark only; run it with `cargo bench --bench compaction_replay`");
        return;
    }
    let scale = scale();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut rows = Vec::new();
    let mut goals = Vec::new();
    for (name, file, key) in [
        (
            "ai-scientist-aider",
            "ai-scientist-aider/messages.jsonl.gz",
            "file",
        ),
        (
            "trap-claude-code",
            "trap-claude-code/messages.jsonl.gz",
            "session_id",
        ),
    ] {
        let Some(mut sessions) = read_sessions(&data.join(file), key) else {
            println!(
                "compaction_replay: skipped {name}: {} is absent",
                data.join(file).display()
            );
            continue;
        };
        let keep = ((sessions.len() as f64 * scale).ceil() as usize).clamp(1, sessions.len());
        sessions.truncate(keep);
        for compaction in [false, true] {
            let started = std::time::Instant::now();
            let o = runtime.block_on(replay(&sessions, compaction));
            rows.push(vec![
                name.to_owned(),
                if compaction {
                    "compaction"
                } else {
                    "window only"
                }
                .to_owned(),
                fmt_int(sessions.len() as u64),
                fmt_int(o.messages as u64),
                fmt_int(o.requests as u64),
                fmt_int(o.largest),
                fmt_int(o.over_window as u64),
                fmt_int(o.summaries as u64),
                fmt_int(o.summarizer_calls as u64),
                fmt_dur(started.elapsed()),
            ]);
            if compaction {
                goals.push((
                    format!("{name}: no request over the {WINDOW}-token window with compaction"),
                    format!(
                        "largest {} tokens, {} over",
                        fmt_int(o.largest),
                        o.over_window
                    ),
                    o.over_window == 0,
                ));
            }
        }
    }
    print_table(
        &[
            "dataset",
            "context",
            "sessions",
            "messages",
            "requests",
            "largest request (tokens)",
            "over 32k",
            "summaries",
            "summarizer calls",
            "time",
        ],
        &rows,
    );
    print_goals(&goals);
}
