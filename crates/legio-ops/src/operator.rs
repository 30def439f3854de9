//! Operator views of a log, shared by the CLI (reading the log directly) and the server (for the
//! CLI's live mode, while a service holds the log): the inspect tables and the context report.
//! Reads only; blocks on log reads (call from a blocking thread).

use std::collections::BTreeMap;

use legio_core::{
    ConversationKey, Event, History, Record, Seq, SessionStart, Start, Timestamp, ToolsDeclared,
};
use legio_store::EventLog;
use serde::{Deserialize, Serialize};
use strum::{EnumString, IntoStaticStr};

use crate::error::OpsError;
use crate::prepare::TurnPreview;

/// How many events a view reads from the log at a time.
const CHUNK: usize = 10_000;

/// What `inspect` shows; its word is the variant's name in lowercase, both ways (strum).
#[derive(Clone, Copy, Debug, PartialEq, Eq, IntoStaticStr, EnumString)]
#[strum(serialize_all = "lowercase")]
pub enum InspectKind {
    /// Message counts and last activity per conversation.
    Conversations,
    /// Per agent: status, current session, provider session, tokens, checkpoint.
    Agents,
    /// Every session with why it opened and why it ended.
    Sessions,
}

impl InspectKind {
    /// Every kind, in order.
    pub const ALL: [Self; 3] = [Self::Conversations, Self::Agents, Self::Sessions];

    /// The kind as a word.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The kind named `word`.
    pub fn parse(word: &str) -> Option<Self> {
        word.parse().ok()
    }
}

/// A table: a header and rows of cells, every row as long as the header.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Table {
    /// Column names.
    pub header: Vec<String>,
    /// Rows.
    pub rows: Vec<Vec<String>>,
}

/// The conversation's last tool declaration after `after` (`ToolsDeclared`: the last one is the
/// host's tools, an empty list none), with its seq, and the last seq read (`after` when nothing
/// came since).
pub fn latest_declaration(
    log: &dyn EventLog,
    conversation: &ConversationKey,
    mut after: Seq,
) -> Result<(Option<(Seq, ToolsDeclared)>, Seq), OpsError> {
    let mut latest = None;
    loop {
        let page = log.conversation_events(conversation, after, CHUNK)?;
        let declared = page.iter().rev().find_map(|r| match &r.event {
            Event::ToolsDeclared(declared) => Some((r.seq, declared.clone())),
            _ => None,
        });
        latest = declared.or(latest);
        let Some(last) = page.last() else { break };
        after = last.seq;
        if page.len() < CHUNK {
            break;
        }
    }
    Ok((latest, after))
}

/// Errors unless `conversation` has at least one event.
pub fn require_conversation(
    log: &dyn EventLog,
    conversation: &ConversationKey,
) -> Result<(), OpsError> {
    if log
        .conversation_events(conversation, Seq::ZERO, 1)?
        .is_empty()
    {
        let known = log.conversations()?;
        return Err(OpsError::UnknownConversation {
            key: conversation.as_str().to_owned(),
            known: known.iter().take(20).map(|c| c.to_string()).collect(),
        });
    }
    Ok(())
}

/// Calls `visit` with every event (or every event of `only`), in log order.
fn for_each(
    log: &dyn EventLog,
    only: Option<&ConversationKey>,
    mut visit: impl FnMut(&Record),
) -> Result<(), OpsError> {
    let mut after = Seq::ZERO;
    loop {
        let chunk = match only {
            Some(key) => log.conversation_events(key, after, CHUNK)?,
            None if after >= log.last_seq() => Vec::new(),
            None => log.read_range(after.next(), log.last_seq(), CHUNK)?,
        };
        let Some(last) = chunk.last().map(|r| r.seq) else {
            return Ok(());
        };
        chunk.iter().for_each(&mut visit);
        after = last;
    }
}

/// The `what` table of the log, or of one conversation.
pub fn inspect(
    log: &dyn EventLog,
    what: InspectKind,
    only: Option<&ConversationKey>,
) -> Result<Table, OpsError> {
    if let Some(c) = only {
        require_conversation(log, c)?;
    }
    match what {
        InspectKind::Conversations => conversations_table(log, only),
        InspectKind::Agents => agents_table(log, only),
        InspectKind::Sessions => sessions_table(log, only),
    }
}

fn table(header: &[&str], rows: Vec<Vec<String>>) -> Table {
    Table {
        header: header.iter().map(|h| (*h).to_owned()).collect(),
        rows,
    }
}

/// Messages, events and last activity per conversation.
fn conversations_table(
    log: &dyn EventLog,
    only: Option<&ConversationKey>,
) -> Result<Table, OpsError> {
    let mut stats: BTreeMap<ConversationKey, (u64, u64, Timestamp)> = BTreeMap::new();
    for_each(log, only, |record| {
        let event = &record.event;
        let entry = stats
            .entry(event.conversation().clone())
            .or_insert((0, 0, Timestamp::EPOCH));
        entry.0 += 1;
        entry.1 += u64::from(event.as_message().is_some());
        entry.2 = entry.2.max(event.at());
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
    Ok(table(
        &["conversation", "messages", "events", "last activity"],
        rows,
    ))
}

/// Per agent of each conversation: its session state.
fn agents_table(log: &dyn EventLog, only: Option<&ConversationKey>) -> Result<Table, OpsError> {
    let conversations = match only {
        Some(c) => vec![c.clone()],
        None => log.conversations()?,
    };
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
                state.total_usage.context_tokens().to_string(),
                state.total_usage.output.to_string(),
                checkpoint,
            ]);
        }
    }
    Ok(table(
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
    ))
}

/// How a session started, in words.
fn session_start(how: &SessionStart) -> String {
    match how {
        SessionStart::Stateless => "stateless".to_owned(),
        SessionStart::Bootstrapped { up_to } => format!("bootstrapped up to #{up_to}"),
        SessionStart::Resumed {
            provider_session,
            checkpoint,
        } => format!("resumed {provider_session} at #{checkpoint}"),
    }
}

/// Every session: why it opened, how, and how it ended.
fn sessions_table(log: &dyn EventLog, only: Option<&ConversationKey>) -> Result<Table, OpsError> {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    for_each(log, only, |record| match &record.event {
        Event::SessionOpened(e) => {
            index.insert(e.session.to_string(), rows.len());
            rows.push(vec![
                e.conversation.to_string(),
                e.agent.to_string(),
                e.session.to_string(),
                record.seq.to_string(),
                e.why.to_string(),
                session_start(&e.how),
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
    })?;
    Ok(table(
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
    ))
}

/// One message of a context report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportItem {
    /// Its seq.
    pub seq: u64,
    /// Who sent it.
    pub sender: String,
    /// Marked as possibly seen already (history items only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redelivered: Option<bool>,
    /// Its text, and its tool calls and results as `[tool call NAME id=ID] ARGUMENTS` and
    /// `[tool result id=ID] CONTENT` lines (`Message::plain_text`).
    pub text: String,
}

/// What an agent's provider would receive for its next turn at a point of the log, as the
/// operator reads it (`legio context`, `GET /operator/context`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextReport {
    /// The conversation.
    pub conversation: String,
    /// The agent.
    pub agent: String,
    /// As of this seq.
    pub at: u64,
    /// full, bootstrap or delta.
    pub mode: String,
    /// The restored-from-the-log notice, if any.
    pub notice: Option<String>,
    /// The summary that stands for the messages before `history` (a compacted context).
    #[serde(default)]
    pub summary: Option<legio_core::ContextSummary>,
    /// The messages before the new one.
    pub history: Vec<ReportItem>,
    /// The message the turn answers, when the event at `at` is one.
    pub new_message: Option<ReportItem>,
    /// Estimated tokens of the plan.
    pub estimated_tokens: u64,
    /// Whether the turn resumes or continues a provider session.
    pub resume: bool,
    /// The current session: id, status and checkpoint; `none` without one.
    pub session: String,
    /// The session decision (continue, resume, open).
    pub decision: String,
    /// Whether the decision opens a session that resumes the provider's session of the last
    /// one (which holds only if the provider still has it).
    #[serde(default)]
    pub resumes_provider_session: bool,
    /// A boundary recorded first (`suspend` or `close` the current session, and why).
    pub first: Option<String>,
    /// The window check: the request's size against the model's window, and what it left out
    /// (`history` and `notice` are already what would be sent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<crate::window_report::WindowReport>,
}

/// The report of `preview` for `agent` in `conversation` at `at`.
pub fn context_report(
    preview: &TurnPreview,
    conversation: &ConversationKey,
    agent: &str,
    at: Seq,
    history: History,
) -> ContextReport {
    let plan = &preview.turn.plan;
    ContextReport {
        conversation: conversation.as_str().to_owned(),
        agent: agent.to_owned(),
        at: at.get(),
        mode: plan.mode.as_str().to_owned(),
        notice: plan.notice.clone(),
        summary: plan.summary.clone(),
        history: plan
            .history
            .iter()
            .map(|i| ReportItem {
                seq: i.seq.get(),
                sender: i.message.sender.as_str().to_owned(),
                redelivered: Some(i.redelivered),
                text: i.message.plain_text(),
            })
            .collect(),
        new_message: preview.answers_message.then(|| ReportItem {
            seq: plan.new_message.seq.get(),
            sender: plan.new_message.message.sender.as_str().to_owned(),
            redelivered: None,
            text: plan.new_message.message.plain_text(),
        }),
        estimated_tokens: plan.estimated_tokens,
        resume: matches!(
            preview.turn.decision.start,
            Start::OpenResume { .. } | Start::Continue
        ) && history.is_stateful(),
        session: preview
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
            }),
        decision: preview.turn.decision.start.to_string(),
        resumes_provider_session: matches!(preview.turn.decision.start, Start::OpenResume { .. }),
        first: preview.turn.decision.end.map(|end| {
            format!(
                "{} the current session ({})",
                if end.suspend { "suspend" } else { "close" },
                end.why
            )
        }),
        window: preview.window.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `inspect`'s words (the CLI's argument, the server's path) read as their kinds and back.
    #[test]
    fn every_inspect_kind_reads_as_its_word_and_back() {
        let words = [
            (InspectKind::Conversations, "conversations"),
            (InspectKind::Agents, "agents"),
            (InspectKind::Sessions, "sessions"),
        ];
        assert_eq!(words.map(|(kind, _)| kind), InspectKind::ALL);
        for (kind, word) in words {
            assert_eq!(kind.as_str(), word);
            assert_eq!(InspectKind::parse(word), Some(kind), "{word}");
        }
        for word in ["", "Agents", "agent", "tools"] {
            assert_eq!(InspectKind::parse(word), None, "{word:?}");
        }
    }
}
