//! `legio demo`: a self-contained tour on a temporary log with scripted models (offline). Posts to
//! the orchestrator and to specialists, crashes an agent mid-conversation, restarts the whole
//! runtime as a new process would, shows that a resumed session got only the delta while a
//! session that cannot resume got a bootstrap with a notice, counts tokens against re-sending the
//! window every time, and replays the log.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use legio_core::{estimate_message_tokens, AgentName, History, Seq};
use legio_llm::{Fault, Provider, RecordedRequest, ScriptedConfig, ScriptedProvider};
use legio_runtime::{Runtime, RuntimeConfig};
use legio_store::EventLog;

use crate::post::print_replies;
use crate::{common, invocation::Context, render};

/// Arguments of `legio demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Keep the demo's log in this folder (it must not exist yet) instead of a temporary one.
    #[arg(long)]
    keep: Option<std::path::PathBuf>,
}

const CONVERSATION: &str = "demo:tour";

const CONFIG: &str = r#"
[store]
path = "log"
[runtime]
history_window = 50
restart_backoff_ms = 20
[agents.legatus]
role = "orchestrator"
description = "Coordinates the specialists and talks with the user"
prompt = "legatus.md"
provider = "stateful"
[agents.vorenus]
role = "specialist"
description = "Reviews code and scripts"
prompt = "vorenus.md"
provider = "stateful"
[agents.pullo]
role = "specialist"
description = "Plans rollouts"
prompt = "pullo.md"
provider = "ephemeral"
[providers.stateful]
kind = "scripted"
history = "session"
[providers.ephemeral]
kind = "scripted"
history = "session-not-resumable"
"#;

struct Tour {
    config: RuntimeConfig,
    providers: HashMap<String, ScriptedProvider>,
    colour: bool,
}

impl Tour {
    /// Steps 1 to 8, on the demo's folder.
    async fn steps(&self, root: &Path) -> Result<ExitCode> {
        let runtime = self.open().await?;
        self.addressing(&runtime).await?;
        self.crash(&runtime).await?;
        outln!("\n5. The whole process dies (every actor stops, nothing is recorded) and a new one opens");
        outln!("   the same log. The first turn of each agent shows how its session came back.");
        runtime.abort().await;
        let runtime = self.open().await?;
        self.say(
            &runtime,
            "@all we ship the canary at noon",
            &["legatus", "vorenus", "pullo"],
        )
        .await?;

        self.token_figures(&runtime)?;
        runtime.shutdown().await?;

        replay_and_verify(root, &self.config)
    }

    /// Steps 1 to 3: who answers what, and the orchestrator's delta.
    async fn addressing(&self, runtime: &Runtime) -> Result<()> {
        outln!("\n1. No mention: the orchestrator answers. Its first turn is a bootstrap from the log.");
        self.say(
            runtime,
            "Good morning. What is on today's agenda?",
            &["legatus"],
        )
        .await?;
        outln!("\n2. @mentions address specialists, in parallel; each sees only what concerns it.");
        self.say(runtime, "@vorenus review deploy.sh", &["vorenus"])
            .await?;
        self.say(
            runtime,
            "@vorenus @pullo compare a blue-green and a canary rollout",
            &["vorenus", "pullo"],
        )
        .await?;
        outln!(
            "\n3. The orchestrator sees everything, but its session already holds its own thread:"
        );
        outln!("   it is sent only the delta (the specialists' exchanges since its last turn).");
        self.say(
            runtime,
            "Summarize what the specialists said.",
            &["legatus"],
        )
        .await?;
        Ok(())
    }

    /// Step 4: one agent's actor panics mid-turn and comes back.
    async fn crash(&self, runtime: &Runtime) -> Result<()> {
        outln!(
            "\n4. vorenus crashes in the middle of a turn (an injected panic). Only vorenus fails;"
        );
        outln!(
            "   its supervisor restarts it with backoff, and the next turn resumes its session."
        );
        let vorenus = AgentName::new("vorenus")?;
        self.providers["stateful"].inject(Some(&vorenus), Fault::Panic);
        self.say(runtime, "@vorenus also check the rollback script", &[])
            .await?;
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        self.say(runtime, "@vorenus are you back?", &["vorenus"])
            .await?;
        Ok(())
    }

    /// Step 6: the context tokens sent to the models, against re-sending the last 50 visible
    /// messages on every turn.
    fn token_figures(&self, runtime: &Runtime) -> Result<()> {
        let log = runtime.log();
        let (mut ours, mut naive) = (0u64, 0u64);
        for r in &self.requests() {
            ours += r
                .plan
                .messages()
                .map(|i| estimate_message_tokens(&i.message))
                .sum::<u64>();
            let spec = self
                .config
                .agents
                .iter()
                .find(|a| a.name == r.agent)
                .context("agent")?;
            let window =
                log.visible_before(&r.conversation, spec.viewer(), r.plan.new_message.seq, 50)?;
            naive += window
                .iter()
                .filter_map(|w| w.event.as_message())
                .map(estimate_message_tokens)
                .sum::<u64>()
                + estimate_message_tokens(&r.plan.new_message.message);
        }
        outln!("\n6. Tokens of conversation context sent to the models in this demo (estimated):");
        outln!("   legio (bootstrap once, then deltas): {ours}");
        outln!("   re-sending the last 50 visible messages on every turn: {naive}");
        if naive > 0 {
            outln!(
                "   {:.0}% fewer, and no message was sent twice without a redelivered mark.",
                100.0 * (1.0 - ours as f64 / naive as f64)
            );
        }
        Ok(())
    }

    async fn open(&self) -> Result<Runtime> {
        let overrides = self
            .providers
            .iter()
            .map(|(name, p)| (name.clone(), Arc::new(p.clone()) as Arc<dyn Provider>))
            .collect();
        Ok(Runtime::builder(self.config.clone())
            .providers(overrides)
            .open()
            .await?)
    }

    fn requests(&self) -> Vec<RecordedRequest> {
        let mut all: Vec<RecordedRequest> =
            self.providers.values().flat_map(|p| p.requests()).collect();
        all.sort_by_key(|r| r.plan.new_message.seq);
        all
    }

    fn last_request(&self, agent: &str) -> Option<RecordedRequest> {
        self.providers
            .values()
            .flat_map(|p| p.requests())
            .filter(|r| r.agent.as_str() == agent)
            .last()
    }

    fn explain(&self, agent: &str) {
        if let Some(r) = self.last_request(agent) {
            let seqs: Vec<String> = r
                .plan
                .messages()
                .map(|i| format!("#{}{}", i.seq, if i.redelivered { "*" } else { "" }))
                .collect();
            outln!(
                "   → {agent}'s model was sent a {} of {} message(s): {}{}{}",
                r.plan.mode.as_str(),
                seqs.len(),
                seqs.join(" "),
                if r.resumed.is_some() {
                    " (into its existing provider session)"
                } else {
                    ""
                },
                if r.plan.history.iter().any(|i| i.redelivered) {
                    "; * = possibly seen before the crash, marked redelivered"
                } else {
                    ""
                }
            );
            if let Some(notice) = &r.plan.notice {
                outln!("     with the notice: \"{notice}\"");
            }
        }
    }

    async fn say(&self, runtime: &Runtime, text: &str, explain: &[&str]) -> Result<()> {
        outln!("\nuser> {text}");
        let replies = runtime.post(CONVERSATION, text).await?;
        print_replies(&replies, self.colour);
        for agent in explain {
            self.explain(agent);
        }
        Ok(())
    }
}

/// Runs the command.
pub fn run(_context: &Context, args: Args) -> Result<ExitCode> {
    let (_temp, root) = folder(&args)?;
    write_prompts(&root)?;
    let file = root.join("legio.toml");
    std::fs::write(&file, CONFIG)?;
    let config = RuntimeConfig::load(&file)?;
    let providers = HashMap::from([
        (
            "stateful".to_owned(),
            ScriptedProvider::new(ScriptedConfig::new(History::Session { resumable: true })),
        ),
        (
            "ephemeral".to_owned(),
            ScriptedProvider::new(ScriptedConfig::new(History::Session { resumable: false })),
        ),
    ]);
    let tour = Tour {
        config,
        providers,
        colour: common::colour(),
    };
    outln!("legio demo: an orchestrator (legatus) and two specialists (vorenus, pullo) on scripted models.");
    outln!(
        "legatus and vorenus use a provider that keeps its own history and can resume a session;"
    );
    outln!(
        "pullo's provider keeps history but cannot resume after a restart. Log: {}",
        root.join("log").display()
    );

    // The demo crashes an agent on purpose: say so in one line instead of a backtrace.
    std::panic::set_hook(Box::new(|info| {
        let what = info
            .payload()
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_else(|| "a panic".into());
        eprintln!("   (the agent's actor panicked: {what}; its supervisor catches it)");
    }));
    let tokio = common::tokio()?;
    tokio.block_on(tour.steps(&root))
}

/// The demo's folder: `--keep`'s (a new one), or a temporary one removed at the end.
fn folder(args: &Args) -> Result<(Option<tempfile::TempDir>, PathBuf)> {
    match &args.keep {
        Some(path) => {
            anyhow::ensure!(
                !path.exists(),
                "{} already exists; pass a new folder to --keep",
                path.display()
            );
            std::fs::create_dir_all(path)
                .with_context(|| format!("cannot create {}", path.display()))?;
            Ok((None, path.clone()))
        }
        None => {
            let temp = tempfile::tempdir().context("creating a temporary folder")?;
            let root = temp.path().to_owned();
            Ok((Some(temp), root))
        }
    }
}

/// The three agents' prompt files.
fn write_prompts(root: &Path) -> Result<()> {
    for (name, text) in [
        (
            "legatus",
            "You coordinate the specialists and talk with the user.",
        ),
        ("vorenus", "You review code and scripts."),
        ("pullo", "You plan rollouts."),
    ] {
        std::fs::write(root.join(format!("{name}.md")), text)?;
    }
    Ok(())
}

/// Step 7 and 8: the log replayed as `legio replay` prints it, and verified; exit 3 if
/// verify finds a problem.
fn replay_and_verify(root: &Path, config: &RuntimeConfig) -> Result<ExitCode> {
    outln!(
        "\n7. The log, replayed (`legio replay` does this for any log, without calling a model):"
    );
    let log = legio_store::SledLog::open(root.join("log"), &config.store.options)?;
    common::for_each_record(&log, None, Seq::FIRST, log.last_seq(), |record| {
        outln!("   {}", render::line(&record));
        Ok(())
    })?;
    let report = log.verify(&mut |_| {})?;
    outln!(
        "\n8. verify: {} events, {}.",
        report.events,
        if report.is_clean() {
            "clean"
        } else {
            "PROBLEMS FOUND"
        }
    );
    outln!("\nNext: `legio chat` talks to the legion in config/legio.toml; `legio --help` lists every command.");
    Ok(if report.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}
