//! One readable line per event, for the operator: seq, time, kind, who, to whom, a cut of the text.

use legio_core::{Event, Message, Part, Record, SessionOpened, SessionStart};

/// How many characters of a message's text a line shows.
const TEXT_CUT: usize = 72;

/// `text` on one line, cut to `TEXT_CUT` characters, its control characters escaped visibly
/// (message text must not reach the operator's terminal as escape sequences).
pub fn cut(text: &str) -> String {
    let flat = crate::output::visible(&text.replace('\n', " "));
    if flat.chars().count() <= TEXT_CUT {
        flat
    } else {
        let head: String = flat.chars().take(TEXT_CUT - 1).collect();
        format!("{head}…")
    }
}

/// The line for `record`.
pub fn line(record: &Record) -> String {
    let event = &record.event;
    let time = event.at().to_rfc3339();
    let time = &time[11..19]; // HH:MM:SS
    format!(
        "#{:<5} {time} {:<18} {}",
        record.seq.get(),
        event.kind().as_str(),
        detail(event)
    )
}

/// What `event` says, on one line.
fn detail(event: &Event) -> String {
    match event {
        Event::MessagePosted(m) => message(m),
        Event::SessionOpened(e) => session_opened(e),
        Event::ContextDelivered(e) => format!(
            "{} {} context up to #{} ({} messages, ~{} tokens)",
            e.agent,
            e.mode.as_str(),
            e.up_to,
            e.messages,
            e.estimated_tokens
        ),
        Event::TurnCompleted(e) => format!(
            "{} turn done: {} in / {} out tokens",
            e.agent,
            e.usage.context_tokens(),
            e.usage.output
        ),
        Event::TurnFailed(e) => format!("{} turn failed: {}", e.agent, cut(&e.error)),
        Event::SessionSuspended(e) => format!(
            "{} session {} suspended ({})",
            e.agent,
            short(&e.session.to_string()),
            e.why
        ),
        Event::SessionClosed(e) => format!(
            "{} session {} closed ({})",
            e.agent,
            short(&e.session.to_string()),
            e.why
        ),
        Event::SummaryRecorded(e) => format!(
            "{} summary up to #{}: {}",
            e.agent,
            e.covers_up_to,
            cut(&e.text)
        ),
        Event::AgentFailed(e) => format!(
            "{} FAILED after {} restarts: {}",
            e.agent,
            e.restarts,
            cut(&e.reason)
        ),
        Event::DirectivePublished(e) => {
            format!("{} published directive {}: {}", e.by, e.id, cut(&e.text))
        }
        Event::DirectiveRevoked(e) => format!(
            "{} revoked directive {}{}",
            e.by,
            e.id,
            e.reason
                .as_deref()
                .map(|r| format!(": {}", cut(r)))
                .unwrap_or_default()
        ),
        Event::NoteWritten(e) => format!("{} wrote note {}: {}", e.author, e.key, cut(&e.text)),
        Event::NotebookEntryAppended(e) => {
            format!("{} notebook entry: {}", e.owner, cut(&e.text))
        }
        Event::HeartbeatRan(e) => match (&e.reply, &e.error) {
            (Some(reply), _) => format!(
                "{} heartbeat \"{}\" -> {}",
                e.agent,
                cut(&e.prompt),
                cut(reply)
            ),
            (None, error) => format!(
                "{} heartbeat \"{}\" failed: {}",
                e.agent,
                cut(&e.prompt),
                cut(error.as_deref().unwrap_or("unknown error"))
            ),
        },
    }
}

/// A message: sender, audience and text, with its tool calls and results named.
fn message(m: &Message) -> String {
    let mut text = m.text_content();
    for part in &m.parts {
        match part {
            Part::ToolCall { id, name, .. } => text.push_str(&format!(" [tool call {name} {id}]")),
            Part::ToolResult { call_id, .. } => text.push_str(&format!(" [tool result {call_id}]")),
            Part::Text { .. } => {}
        }
    }
    format!("{} -> {}: {}", m.sender, m.audience, cut(&text))
}

/// A session opened: the agent, the session, why and how it started.
fn session_opened(e: &SessionOpened) -> String {
    let how = match &e.how {
        SessionStart::Stateless => "stateless".to_owned(),
        SessionStart::Bootstrapped { up_to } => format!("bootstrapped up to #{up_to}"),
        SessionStart::Resumed {
            provider_session,
            checkpoint,
        } => format!("resumed {} at #{checkpoint}", cut(provider_session)),
    };
    format!(
        "{} session {} ({}; {how})",
        e.agent,
        short(&e.session.to_string()),
        e.why
    )
}

fn short(id: &str) -> &str {
    id.get(id.len().saturating_sub(8)..).unwrap_or(id)
}
