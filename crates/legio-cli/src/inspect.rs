//! `legio inspect`: tables of conversations, agents and sessions, from the log.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::Result;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use legio_core::{ConversationKey, Event, OpenReason, Seq, SessionStart, Timestamp};
use legio_store::EventLog;
use serde_json::json;

use crate::common::{self, for_each_record};
use crate::Context;

/// What to inspect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum What {
    /// Message counts and last activity per conversation.
    Conversations,
    /// Per agent: status, current session, provider session, tokens, checkpoint.
    Agents,
    /// Every session with why it opened and why it ended.
    Sessions,
}

/// Table or JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TableFormat {
    /// A table.
    Table,
    /// JSON.
    Json,
}

/// Arguments of `legio inspect`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to show.
    #[arg(value_enum)]
    what: What,
    /// Only this conversation.
    #[arg(long)]
    conversation: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = TableFormat::Table)]
    format: TableFormat,
}

fn print(format: TableFormat, header: &[&str], rows: Vec<Vec<String>>) -> Result<()> {
    match format {
        TableFormat::Json => {
            let objects: Vec<serde_json::Value> = rows
                .iter()
                .map(|row| {
                    serde_json::Value::Object(
                        header
                            .iter()
                            .zip(row)
                            .map(|(h, v)| ((*h).to_owned(), json!(v)))
                            .collect(),
                    )
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&objects)?);
        }
        TableFormat::Table => {
            let mut table = Table::new();
            table
                .load_preset(UTF8_FULL_CONDENSED)
                .set_header(header.to_vec());
            for row in rows {
                table.add_row(row);
            }
            println!("{table}");
        }
    }
    Ok(())
}

/// Runs the command.
pub fn run(context: &Context, args: Args) -> Result<ExitCode> {
    let log = common::open_log(context)?;
    let only = args.conversation.map(ConversationKey::new).transpose()?;
    let conversations: Vec<ConversationKey> = match &only {
        Some(c) => {
            if log.conversation_events(c, Seq::ZERO, 1)?.is_empty() {
                anyhow::bail!("no conversation {:?} in the log", c.as_str());
            }
            vec![c.clone()]
        }
        None => log.conversations()?,
    };
    match args.what {
        What::Conversations => {
            let mut stats: BTreeMap<ConversationKey, (u64, u64, Timestamp)> = BTreeMap::new();
            for_each_record(&log, only.as_ref(), Seq::FIRST, log.last_seq(), |record| {
                let event = &record.event;
                if only.as_ref().is_none_or(|c| c == event.conversation()) {
                    let entry = stats.entry(event.conversation().clone()).or_insert((
                        0,
                        0,
                        Timestamp::EPOCH,
                    ));
                    entry.0 += 1;
                    entry.1 += u64::from(event.as_message().is_some());
                    entry.2 = entry.2.max(event.at());
                }
                Ok(())
            })?;
            let rows = stats
                .into_iter()
                .map(|(c, (events, messages, last))| {
                    vec![
                        c.to_string(),
                        messages.to_string(),
                        events.to_string(),
                        last.to_rfc3339(),
                    ]
                })
                .collect();
            print(
                args.format,
                &["conversation", "messages", "events", "last activity"],
                rows,
            )?;
        }
        What::Agents => {
            let mut rows = Vec::new();
            for conversation in &conversations {
                for state in log.session_states(conversation)? {
                    let (status, session, provider, checkpoint) = match &state.current {
                        Some(c) => (
                            c.status.as_str().to_owned(),
                            c.session.to_string(),
                            c.provider_session.clone().unwrap_or_else(|| "-".into()),
                            c.checkpoint.to_string(),
                        ),
                        None => ("-".into(), "-".into(), "-".into(), "-".into()),
                    };
                    let status = if state.failed.is_some() {
                        format!("failed ({status})")
                    } else {
                        status
                    };
                    rows.push(vec![
                        conversation.to_string(),
                        state.agent.to_string(),
                        status,
                        session,
                        provider,
                        state.total_usage.input.to_string(),
                        state.total_usage.output.to_string(),
                        checkpoint,
                    ]);
                }
            }
            print(
                args.format,
                &[
                    "conversation",
                    "agent",
                    "status",
                    "session",
                    "provider session",
                    "input tokens",
                    "output tokens",
                    "checkpoint",
                ],
                rows,
            )?;
        }
        What::Sessions => {
            let mut rows: Vec<Vec<String>> = Vec::new();
            let mut index: BTreeMap<String, usize> = BTreeMap::new();
            for_each_record(&log, only.as_ref(), Seq::FIRST, log.last_seq(), |record| {
                if only
                    .as_ref()
                    .is_some_and(|c| c != record.event.conversation())
                {
                    return Ok(());
                }
                match &record.event {
                    Event::SessionOpened(e) => {
                        let why = match e.why {
                            OpenReason::FirstUse => "first use".to_owned(),
                            OpenReason::After(r) => format!("after {r}"),
                        };
                        let how = match &e.how {
                            SessionStart::Stateless => "stateless".to_owned(),
                            SessionStart::Bootstrapped { up_to } => {
                                format!("bootstrapped up to #{up_to}")
                            }
                            SessionStart::Resumed {
                                provider_session,
                                checkpoint,
                            } => format!("resumed {provider_session} at #{checkpoint}"),
                        };
                        index.insert(e.session.to_string(), rows.len());
                        rows.push(vec![
                            e.conversation.to_string(),
                            e.agent.to_string(),
                            e.session.to_string(),
                            record.seq.to_string(),
                            why,
                            how,
                            "open".into(),
                            "-".into(),
                        ]);
                    }
                    Event::SessionSuspended(e) | Event::SessionClosed(e) => {
                        if let Some(&i) = index.get(&e.session.to_string()) {
                            let state = if matches!(record.event, Event::SessionSuspended(_)) {
                                "suspended"
                            } else {
                                "closed"
                            };
                            rows[i][6] = format!("{state} ({})", e.why);
                            rows[i][7] = record.seq.to_string();
                        }
                    }
                    _ => {}
                }
                Ok(())
            })?;
            print(
                args.format,
                &[
                    "conversation",
                    "agent",
                    "session",
                    "opened at",
                    "why",
                    "how",
                    "state",
                    "ended at",
                ],
                rows,
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
