//! `legio context`: time travel. Exactly what an agent's provider would receive for its next
//! turn had the log ended at a seq, from the runtime's own planner (or, with `--server`, from the
//! running server, which uses the same planner). Never calls a provider.

use std::process::ExitCode;

use anyhow::{bail, Context as _, Result};
use legio_config::{Role, RuntimeConfig};
use legio_core::{ConversationKey, Seq};
use legio_ops::{
    context_report, fit_preview, preview_calibration, preview_turn, provider_budget, status_block,
    ContextReport, Fixed, TurnInputs, TurnPreview,
};
use legio_store::EventLog;

use crate::common;
use crate::invocation::Context;
use crate::output::visible;

/// Arguments of `legio context`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The conversation.
    #[arg(long)]
    conversation: String,
    /// The agent.
    #[arg(long)]
    agent: String,
    /// As if the log ended at this seq (default: now). If the event at SEQ is a message asking
    /// this agent for a turn, the plan is that turn's.
    #[arg(long)]
    at: Option<u64>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = PlanFormat::Text)]
    format: PlanFormat,
}

/// Output format of a context plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PlanFormat {
    /// Readable.
    Text,
    /// One JSON object.
    Json,
}

/// Runs the command.
pub fn run(context: &Context, args: Args) -> Result<ExitCode> {
    let report = match context.remote()? {
        Some(remote) => {
            let mut query = vec![
                ("conversation", args.conversation.clone()),
                ("agent", args.agent.clone()),
            ];
            if let Some(at) = args.at {
                query.push(("at", at.to_string()));
            }
            match remote.get_json("/operator/context", &query) {
                Ok(value) => serde_json::from_value::<ContextReport>(value)?,
                Err(e) if crate::remote::is_code(&e, "bad_seq") => {
                    eprintln!("legio: bad seq: {e}");
                    return Ok(ExitCode::from(2));
                }
                Err(e) => return Err(e),
            }
        }
        None => match offline(context, &args)? {
            Some(report) => report,
            None => return Ok(ExitCode::from(2)),
        },
    };
    match args.format {
        PlanFormat::Json => outln!("{}", serde_json::to_string_pretty(&report)?),
        PlanFormat::Text => print_text(&report),
    }
    Ok(ExitCode::SUCCESS)
}

/// The report from the log itself (`None`: a usage error, already printed).
fn offline(context: &Context, args: &Args) -> Result<Option<ContextReport>> {
    let config = common::config(context)?;
    let conversation = ConversationKey::new(args.conversation.clone())?;
    let spec = config.agent_named(&args.agent)?.clone();
    let history = config
        .history_of(&spec)
        .context("the agent's provider is not configured")?;
    let base = std::fs::read_to_string(&spec.prompt)
        .with_context(|| format!("cannot read {}", spec.prompt.display()))?;
    let (system_prompt, prompt_hash) = config.compose_prompt(&spec, base);
    let log = common::open_log_for_reading(context)?;
    if log
        .conversation_events(&conversation, Seq::ZERO, 1)?
        .is_empty()
    {
        bail!("no conversation {:?} in the log", conversation.as_str());
    }
    let last = log.last_seq();
    let at = Seq(args.at.unwrap_or(last.get()));
    if at > last {
        eprintln!("legio: bad seq: --at {at} is past the end of the log ({last})");
        return Ok(None);
    }
    let inputs = TurnInputs {
        spec: &spec,
        conversation: &conversation,
        history,
        settings: &config.runtime,
        prompt_hash: &prompt_hash,
        live_session: None,
        new_message: at,
    };
    // Read here, a sled log is held by no running process (its lock says so): a session open at
    // its end was left by a crash. A cluster's nodes run while it is read.
    let live_since = common::nats_options(context)?.map(|_| Seq::ZERO);
    let mut preview = preview_turn(&*log, inputs, at, live_since)?;
    fit_offline(&*log, &config, &inputs, &system_prompt, &mut preview)?;
    Ok(Some(context_report(
        &preview,
        &conversation,
        spec.name.as_str(),
        at,
        history,
    )))
}

/// Applies the window check to `preview` as the agent's next turn would: its provider's window
/// and output limit, the calibration a runtime would start with (from the log), the system
/// prompt and, for the orchestrator, the status block with every specialist idle (as after a
/// restart). The tools' schemas are not counted (see `legio_ops::fit_preview`).
fn fit_offline(
    log: &dyn EventLog,
    config: &RuntimeConfig,
    inputs: &TurnInputs<'_>,
    system_prompt: &str,
    preview: &mut TurnPreview,
) -> Result<()> {
    let Some(settings) = config.providers.get(&inputs.spec.provider) else {
        return Ok(());
    };
    let status = (inputs.spec.role == Role::Orchestrator)
        .then(|| status_block(config.specialists().map(|a| (&a.name, "idle"))));
    let fixed = Fixed {
        system_prompt,
        status: status.as_deref(),
        tools: &[],
        tool_tokens: 0,
    };
    let calibration = preview_calibration(
        log,
        config,
        inputs.spec,
        inputs.conversation,
        fixed.estimated(),
    )?;
    let budget = provider_budget(Some(settings), settings.context_window(), calibration);
    fit_preview(preview, fixed, &budget);
    Ok(())
}

fn print_text(report: &ContextReport) {
    outln!(
        "context of {} in {} as of seq {}",
        report.agent,
        report.conversation,
        report.at
    );
    outln!("session: {}", report.session);
    outln!("decision: {}", report.decision);
    if report.resumes_provider_session {
        outln!("  (if the provider still holds that session; if not, the turn records it as provider_session_lost and bootstraps from the log)");
    }
    if let Some(first) = &report.first {
        outln!("first: {first}");
    }
    outln!(
        "mode: {} ({} messages, ~{} tokens)",
        report.mode,
        report.history.len() + usize::from(report.new_message.is_some()),
        report.estimated_tokens
    );
    if let Some(w) = &report.window {
        let left_out = match (w.left_out, w.summary_left_out) {
            (0, false) => String::new(),
            (n, false) => format!("; {n} older messages left out to fit"),
            (n, true) => format!("; {n} older messages and the summary left out to fit"),
        };
        println!(
            "request: ~{} of the {} tokens a request may hold (the tools' schemas not counted), counted {}{left_out}",
            w.request_tokens, w.limit, w.counted
        );
        if let Some(error) = &w.error {
            println!("the turn would fail: {error}");
        }
    }
    if let Some(summary) = &report.summary {
        outln!(
            "summary (stands for the messages up to #{}):",
            summary.covers_up_to
        );
        for line in summary.text.lines() {
            outln!("  | {}", visible(line));
        }
    }
    if let Some(notice) = &report.notice {
        outln!("notice: {}", visible(notice));
    }
    for item in &report.history {
        let mark = if item.redelivered == Some(true) {
            " (redelivered)"
        } else {
            ""
        };
        outln!(
            "  #{:<6} {:<10} {}{mark}",
            item.seq,
            item.sender,
            one_line(&item.text)
        );
    }
    match &report.new_message {
        Some(item) => {
            outln!("new message:");
            outln!(
                "  #{:<6} {:<10} {}",
                item.seq,
                item.sender,
                one_line(&item.text)
            );
        }
        None => outln!(
            "new message: (none yet; the above would precede the next message addressed to {})",
            report.agent
        ),
    }
}

/// `text` on one line of at most 100 characters, its control characters escaped visibly.
fn one_line(text: &str) -> String {
    let flat = visible(&text.replace('\n', " "));
    if flat.chars().count() > 100 {
        format!("{}…", flat.chars().take(99).collect::<String>())
    } else {
        flat
    }
}
