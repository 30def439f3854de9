//! `legio context`: time travel. Exactly what an agent's provider would receive for its next
//! turn had the log ended at a seq, from the runtime's own planner. Never calls a provider.

use std::process::ExitCode;

use anyhow::{bail, Context as _, Result};
use legio_core::{ConversationKey, Seq};
use legio_runtime::{preview_turn, TurnInputs};
use legio_store::EventLog;
use serde_json::json;

use crate::common;
use crate::Context;

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
    let config = common::config(context)?;
    let conversation = ConversationKey::new(args.conversation)?;
    let spec = config.agent_named(&args.agent)?.clone();
    let history = config
        .history_of(&spec)
        .context("the agent's provider is not configured")?;
    let base = std::fs::read_to_string(&spec.prompt)
        .with_context(|| format!("cannot read {}", spec.prompt.display()))?;
    let (_, prompt_hash) = config.compose_prompt(&spec, base);
    let log = common::open_log(context)?;
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
        return Ok(ExitCode::from(2));
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
    let preview = preview_turn(&log, inputs, at)?;
    let plan = &preview.turn.plan;
    match args.format {
        PlanFormat::Json => {
            let items: Vec<_> = plan
                .history
                .iter()
                .map(|i| json!({"seq": i.seq.get(), "sender": i.message.sender.as_str(), "redelivered": i.redelivered, "text": i.message.text_content()}))
                .collect();
            let out = json!({
                "conversation": conversation.as_str(),
                "agent": spec.name.as_str(),
                "at": at.get(),
                "mode": plan.mode.as_str(),
                "notice": plan.notice,
                "history": items,
                "new_message": preview.answers_message.then(|| json!({"seq": plan.new_message.seq.get(), "sender": plan.new_message.message.sender.as_str(), "text": plan.new_message.message.text_content()})),
                "estimated_tokens": plan.estimated_tokens,
                "resume": matches!(preview.turn.decision.start, legio_core::Start::OpenResume { .. } | legio_core::Start::Continue) && history.is_stateful(),
            });
            println!("{}", serde_json::to_string_pretty(&out)?);
        }
        PlanFormat::Text => {
            println!(
                "context of {} in {} as of seq {at}",
                spec.name, conversation
            );
            let session = preview
                .turn
                .current
                .as_ref()
                .map_or("none".to_owned(), |c| {
                    format!(
                        "{} ({}, checkpoint #{})",
                        c.session,
                        c.status.as_str(),
                        c.checkpoint
                    )
                });
            println!("session: {session}");
            println!("decision: {:?}", preview.turn.decision.start);
            if let Some(end) = preview.turn.decision.end {
                println!(
                    "first: {} the current session ({})",
                    if end.suspend { "suspend" } else { "close" },
                    end.why
                );
            }
            println!(
                "mode: {} ({} messages, ~{} tokens)",
                plan.mode.as_str(),
                plan.history.len() + usize::from(preview.answers_message),
                plan.estimated_tokens
            );
            if let Some(notice) = &plan.notice {
                println!("notice: {notice}");
            }
            for item in &plan.history {
                let mark = if item.redelivered {
                    " (redelivered)"
                } else {
                    ""
                };
                println!(
                    "  #{:<6} {:<10} {}{mark}",
                    item.seq.get(),
                    item.message.sender.as_str(),
                    one_line(&item.message.text_content())
                );
            }
            if preview.answers_message {
                println!("new message:");
                println!(
                    "  #{:<6} {:<10} {}",
                    plan.new_message.seq.get(),
                    plan.new_message.message.sender.as_str(),
                    one_line(&plan.new_message.message.text_content())
                );
            } else {
                println!("new message: (none yet; the above would precede the next message addressed to {})", spec.name);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn one_line(text: &str) -> String {
    let flat = text.replace('\n', " ");
    if flat.chars().count() > 100 {
        format!("{}…", flat.chars().take(99).collect::<String>())
    } else {
        flat
    }
}
