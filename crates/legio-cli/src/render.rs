//! One readable line per event, for the operator: seq, time, kind, who, to whom, a cut of the text.

use std::fmt::Write as _;

use legio_core::{Event, Message, Part, Record, SessionOpened, SessionStart};

/// How many characters of a message's text a line shows.
const TEXT_CUT: usize = 72;

/// `text` on one line, cut to `TEXT_CUT` characters, its control characters escaped visibly
/// (message text must not reach the operator's terminal as escape sequences). Used by the
/// runtime's commands only (`agents.rs`).
#[cfg_attr(not(feature = "runtime"), allow(dead_code))]
pub fn cut(text: &str) -> String {
    let mut out = String::new();
    push_cut(&mut out, &[text]);
    out
}

/// Appends what [`cut`] makes of the concatenation of `pieces`, in one pass that stops after
/// `TEXT_CUT` characters: newlines as spaces, controls escaped as `output::visible` does, and
/// past `TEXT_CUT` characters (counted after escaping) the first `TEXT_CUT - 1` and `…`.
fn push_cut(out: &mut String, pieces: &[&str]) {
    let mut shown = 0;
    // Where the text ends if it must be cut: after its first `TEXT_CUT - 1` characters.
    let mut cut_at = None;
    let mut push = |out: &mut String, c: char| -> bool {
        if shown == TEXT_CUT {
            out.truncate(cut_at.unwrap_or(out.len()));
            out.push('…');
            return false;
        }
        out.push(c);
        shown += 1;
        if shown == TEXT_CUT - 1 {
            cut_at = Some(out.len());
        }
        true
    };
    for c in pieces.iter().flat_map(|piece| piece.chars()) {
        let c = if c == '\n' { ' ' } else { c };
        let more = match c {
            '\r' => push(out, '\\') && push(out, 'r'),
            '\t' => push(out, '\\') && push(out, 't'),
            c if crate::output::needs_escape(c) => {
                let escaped = format!("\\u{{{:x}}}", u32::from(c));
                escaped.chars().all(|c| push(out, c))
            }
            c => push(out, c),
        };
        if !more {
            return;
        }
    }
}

/// The line for `record` (`chat` and `demo`; `replay` appends lines into one buffer instead).
#[cfg_attr(not(feature = "runtime"), allow(dead_code))]
pub fn line(record: &Record) -> String {
    let mut out = String::new();
    push_line(&mut out, record);
    out
}

/// Appends the line for `record` (no newline) to `out`.
pub fn push_line(out: &mut String, record: &Record) {
    let event = &record.event;
    let _ = write!(out, "#{:<5} ", record.seq.get());
    // HH:MM:SS
    event
        .at()
        .with_rfc3339(|time| out.push_str(time.get(11..19).unwrap_or(time)));
    let _ = write!(out, " {:<18} ", event.kind().as_str());
    detail(out, event);
}

/// Appends what `event` says, on one line. (Writing into a `String` cannot fail.)
fn detail(out: &mut String, event: &Event) {
    let _ = match event {
        Event::MessagePosted(m) => {
            message(out, m);
            Ok(())
        }
        Event::SessionOpened(e) => {
            session_opened(out, e);
            Ok(())
        }
        Event::ContextDelivered(e) => write!(
            out,
            "{} {} context up to #{} ({} messages, ~{} tokens)",
            e.agent,
            e.mode.as_str(),
            e.up_to,
            e.messages,
            e.estimated_tokens
        ),
        Event::TurnCompleted(e) => write!(
            out,
            "{} turn done: {} in / {} out tokens",
            e.agent,
            e.usage.context_tokens(),
            e.usage.output
        ),
        Event::TurnFailed(e) => {
            write!(out, "{} turn failed: ", e.agent).map(|()| push_cut(out, &[&e.error]))
        }
        Event::SessionSuspended(e) => write!(
            out,
            "{} session {} suspended ({})",
            e.agent,
            short(&e.session.to_string()),
            e.why
        ),
        Event::SessionClosed(e) => write!(
            out,
            "{} session {} closed ({})",
            e.agent,
            short(&e.session.to_string()),
            e.why
        ),
        Event::SummaryRecorded(e) => write!(out, "{} summary up to #{}: ", e.agent, e.covers_up_to)
            .map(|()| push_cut(out, &[&e.text])),
        Event::AgentFailed(e) => write!(out, "{} FAILED after {} restarts: ", e.agent, e.restarts)
            .map(|()| push_cut(out, &[&e.reason])),
        Event::DirectivePublished(e) => write!(out, "{} published directive {}: ", e.by, e.id)
            .map(|()| push_cut(out, &[&e.text])),
        Event::DirectiveRevoked(e) => {
            write!(out, "{} revoked directive {}", e.by, e.id).map(|()| {
                if let Some(reason) = &e.reason {
                    out.push_str(": ");
                    push_cut(out, &[reason]);
                }
            })
        }
        Event::NoteWritten(e) => {
            write!(out, "{} wrote note {}: ", e.author, e.key).map(|()| push_cut(out, &[&e.text]))
        }
        Event::NotebookEntryAppended(e) => {
            write!(out, "{} notebook entry: ", e.owner).map(|()| push_cut(out, &[&e.text]))
        }
        Event::HeartbeatRan(e) => {
            heartbeat(out, e);
            Ok(())
        }
        Event::ToolsDeclared(e) => {
            tools_declared(out, e);
            Ok(())
        }
        Event::ApprovalRequested(e) => write!(
            out,
            "{} asks approval for {} (call {}, by {}): ",
            e.agent, e.tool, e.call_id, e.deadline
        )
        .map(|()| push_cut(out, &[&e.arguments])),
        Event::ApprovalAnswered(e) => write!(
            out,
            "{} call {} {} by {}",
            e.agent, e.call_id, e.decision, e.by
        )
        .map(|()| {
            if let Some(reason) = &e.reason {
                out.push_str(": ");
                push_cut(out, &[reason]);
            }
        }),
        Event::InstructionsGiven(e) => write!(out, "host instructions for {}'s turn: ", e.agent)
            .map(|()| push_cut(out, &[&e.text])),
    };
}

/// A heartbeat: its agent, the host's text, and the reply or why it failed.
fn heartbeat(out: &mut String, e: &legio_core::HeartbeatRan) {
    let _ = write!(out, "{} heartbeat \"", e.agent);
    push_cut(out, &[&e.prompt]);
    match (&e.reply, &e.error) {
        (Some(reply), _) => {
            out.push_str("\" -> ");
            push_cut(out, &[reply]);
        }
        (None, error) => {
            out.push_str("\" failed: ");
            push_cut(out, &[error.as_deref().unwrap_or("unknown error")]);
        }
    }
}

/// A host's tool declaration: the tools' names, or that it cleared them.
fn tools_declared(out: &mut String, e: &legio_core::ToolsDeclared) {
    if e.tools.is_empty() {
        out.push_str("host cleared its declared tools");
        return;
    }
    out.push_str("host declared tools: ");
    let names: Vec<&str> = e.tools.iter().map(|t| t.name.as_str()).collect();
    push_cut(out, &[&names.join(", ")]);
}

/// A message: sender, audience and text (its text parts, a blank line between them), with its
/// tool calls and results named.
fn message(out: &mut String, m: &Message) {
    let _ = write!(out, "{} -> {}: ", m.sender, m.audience);
    if let [Part::Text { text }] = &m.parts[..] {
        return push_cut(out, &[text]);
    }
    let mut pieces: Vec<&str> = Vec::new();
    let mut marks = String::new();
    for part in &m.parts {
        match part {
            Part::Text { text } => {
                if !pieces.is_empty() {
                    pieces.push("\n\n");
                }
                pieces.push(text);
            }
            Part::ToolCall { id, name, .. } => {
                let _ = write!(marks, " [tool call {name} {id}]");
            }
            Part::ToolResult { call_id, .. } => {
                let _ = write!(marks, " [tool result {call_id}]");
            }
        }
    }
    pieces.push(&marks);
    push_cut(out, &pieces);
}

/// A session opened: the agent, the session, why and how it started.
fn session_opened(out: &mut String, e: &SessionOpened) {
    let session = e.session.to_string();
    let _ = write!(out, "{} session {} ({}; ", e.agent, short(&session), e.why);
    let _ = match &e.how {
        SessionStart::Stateless => write!(out, "stateless"),
        SessionStart::Bootstrapped { up_to } => write!(out, "bootstrapped up to #{up_to}"),
        SessionStart::Resumed {
            provider_session,
            checkpoint,
        } => {
            out.push_str("resumed ");
            push_cut(out, &[provider_session]);
            write!(out, " at #{checkpoint}")
        }
    };
    out.push(')');
}

fn short(id: &str) -> &str {
    id.get(id.len().saturating_sub(8)..).unwrap_or(id)
}

#[cfg(test)]
mod tests {
    use legio_core::{
        AgentName, Audience, ConversationKey, Event, Message, MessageId, Part, Participant, Record,
        Seq, Timestamp,
    };

    use super::{cut, line, TEXT_CUT};
    use crate::output::visible;

    /// The cut as it was first written (several passes and copies): the reference.
    fn reference_cut(text: &str) -> String {
        let flat = visible(&text.replace('\n', " "));
        if flat.chars().count() <= TEXT_CUT {
            flat
        } else {
            let head: String = flat.chars().take(TEXT_CUT - 1).collect();
            format!("{head}…")
        }
    }

    /// Texts around the cut: every length from 60 to 80 characters of a few alphabets, with a
    /// character that escapes (to several characters) at every position.
    fn texts() -> Vec<String> {
        let mut out = vec![
            String::new(),
            "a\nb".into(),
            "\r\t\u{1b}\u{9b}\u{202e}\u{7f}".into(),
        ];
        for unit in ["a", "é", "✓", "𝄞"] {
            for len in 60..80 {
                let plain = unit.repeat(len);
                out.push(plain.clone());
                for special in ["\n", "\r", "\t", "\u{1b}", "\u{10ffff}", "\u{2066}"] {
                    for at in [0, 1, len / 2, 69, 70, 71, 72, len - 1] {
                        let mut chars: Vec<String> = plain.chars().map(String::from).collect();
                        chars.insert(at.min(chars.len()), special.into());
                        out.push(chars.concat());
                    }
                }
            }
        }
        out
    }

    #[test]
    fn the_one_pass_cut_matches_the_reference_on_every_text_around_the_cut() {
        for text in texts() {
            assert_eq!(cut(&text), reference_cut(&text), "{text:?}");
        }
    }

    #[test]
    fn a_message_line_matches_the_reference_with_every_kind_of_part() {
        let conv = ConversationKey::new("render:1").unwrap();
        let agent = Participant::Agent(AgentName::new("vorenus").unwrap());
        for (i, text) in texts().into_iter().enumerate().step_by(7) {
            let at = Timestamp::from_unix_micros(1_700_000_000_000_000 + i as i64 * 987_654_321);
            let id = MessageId::from_parts(at, [1; 10]);
            let mut m = Message::text(id, conv.clone(), agent.clone(), Audience::All, &text, at);
            if i.is_multiple_of(2) {
                m.parts.insert(0, Part::text("first\npart"));
                m.parts.push(Part::ToolCall {
                    id: "call_\u{1b}1".into(),
                    name: "lookup".into(),
                    arguments: "{}".into(),
                });
                m.parts.push(Part::ToolResult {
                    call_id: "call_1".into(),
                    content: "result".into(),
                    is_error: false,
                });
                let half: String = text.chars().take(text.chars().count() / 2).collect();
                m.parts.push(Part::text(half));
                m.audience = Audience::only([Participant::User, agent.clone()]);
            }
            let mut full = m.text_content();
            for part in &m.parts {
                match part {
                    Part::ToolCall { id, name, .. } => {
                        full.push_str(&format!(" [tool call {name} {id}]"))
                    }
                    Part::ToolResult { call_id, .. } => {
                        full.push_str(&format!(" [tool result {call_id}]"))
                    }
                    Part::Text { .. } => {}
                }
            }
            let time = at.to_rfc3339();
            let expected = format!(
                "#{:<5} {} {:<18} {} -> {}: {}",
                i + 1,
                &time[11..19],
                "message_posted",
                m.sender,
                m.audience,
                reference_cut(&full)
            );
            let record = Record {
                seq: Seq(i as u64 + 1),
                event: Event::MessagePosted(m),
            };
            assert_eq!(line(&record), expected);
        }
    }
}
