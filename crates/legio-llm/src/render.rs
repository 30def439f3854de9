//! Rendering a context plan for a model: as chat turns (stateless providers: the agent's own
//! messages as assistant turns, everyone else's as user turns attributed to their sender) or as
//! one structured bootstrap block (a new stateful session: every message with its id and sender).

use legio_core::{AgentName, ContextItem, ContextPlan, Part, Participant};

/// Who speaks in a chat turn.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ChatRole {
    /// The model itself.
    Assistant,
    /// Anyone else (the user, other agents), attributed by `name`.
    User,
}

/// One chat turn.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ChatTurn {
    /// Assistant or user.
    pub role: ChatRole,
    /// The sender's name for user turns (`user`, or another agent's name).
    pub name: Option<String>,
    /// The text, with tool parts described inline.
    pub text: String,
}

fn item_text(item: &ContextItem) -> String {
    item.message.plain_text()
}

fn turn(agent: &AgentName, item: &ContextItem) -> ChatTurn {
    let own = item.message.sender == Participant::Agent(agent.clone());
    ChatTurn {
        role: if own {
            ChatRole::Assistant
        } else {
            ChatRole::User
        },
        name: (!own).then(|| item.message.sender.as_str().to_owned()),
        text: item_text(item),
    }
}

/// A compacted context's summary as the first turn's text.
fn summary_text(plan: &ContextPlan) -> Option<String> {
    plan.summary.as_ref().map(|s| {
        format!(
            "<conversation_summary covers_up_to=\"{}\">\n{}\n</conversation_summary>",
            s.covers_up_to, s.text
        )
    })
}

/// The request's volatile tail: the notice, then the status block, as one text after the new
/// message. It changes from one request to the next, so it goes last, where it moves no prefix:
/// the next request drops it and is this one's messages plus what is new (a prompt cache keeps
/// reading them). `None` when there is neither.
pub fn volatile_tail(plan: &ContextPlan, status: Option<&str>) -> Option<String> {
    let mut tail = String::new();
    if let Some(notice) = &plan.notice {
        tail.push_str(&format!("<context_notice>{notice}</context_notice>\n"));
    }
    if let Some(status) = status {
        tail.push_str(status);
        tail.push('\n');
    }
    let tail = tail.trim_end();
    (!tail.is_empty()).then(|| tail.to_owned())
}

/// The plan as chat turns: history, then the new message, then the [`volatile_tail`] (the
/// notice and the status block) in a user turn of its own, so every turn before it is sent again,
/// unchanged, in the next request.
pub fn chat_turns(agent: &AgentName, plan: &ContextPlan, status: Option<&str>) -> Vec<ChatTurn> {
    summary_text(plan)
        .map(|text| ChatTurn {
            role: ChatRole::User,
            name: None,
            text,
        })
        .into_iter()
        .chain(plan.messages().map(|i| turn(agent, i)))
        .chain(volatile_tail(plan, status).map(|text| ChatTurn {
            role: ChatRole::User,
            name: None,
            text,
        }))
        .collect()
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The plan as one text block for a stateful session: the history as structured messages (every
/// one with its id, seq and sender; possible redeliveries marked), the notice, the status, then
/// the new message.
pub fn bootstrap_block(plan: &ContextPlan, status: Option<&str>) -> String {
    let mut out = String::new();
    if let Some(summary) = &plan.summary {
        out.push_str(&format!(
            "<conversation_summary covers_up_to=\"{}\">\n{}\n</conversation_summary>\n",
            summary.covers_up_to,
            escape(&summary.text)
        ));
    }
    if !plan.history.is_empty() {
        out.push_str(&format!("<history mode=\"{}\">\n", plan.mode.as_str()));
        for item in &plan.history {
            let redelivered = if item.redelivered {
                " redelivered=\"true\""
            } else {
                ""
            };
            out.push_str(&format!(
                "<message id=\"{}\" seq=\"{}\" sender=\"{}\" at=\"{}\"{redelivered}>\n{}\n</message>\n",
                item.message.id,
                item.seq,
                item.message.sender,
                item.message.at,
                escape(&item_text(item))
            ));
        }
        out.push_str("</history>\n");
    }
    if let Some(notice) = &plan.notice {
        out.push_str(&format!("<context_notice>{notice}</context_notice>\n"));
    }
    if let Some(status) = status {
        out.push_str(status);
        out.push('\n');
    }
    out.push_str(&item_text(&plan.new_message));
    out
}

/// A tool call in a structured turn.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ToolCallPart {
    /// The provider's call id.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// Its arguments, as JSON text.
    pub arguments: String,
}

/// A tool result in a structured turn.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ToolResultPart {
    /// The id of the call it answers.
    pub call_id: String,
    /// The result.
    pub content: String,
    /// Whether the tool failed.
    pub is_error: bool,
}

/// One message of a plan for providers with roles, names and tool calls of their own
/// (Chat Completions, Messages): text parts joined, tool calls and results kept apart.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct StructuredTurn {
    /// Assistant (the agent's own message) or user (anyone else's).
    pub role: ChatRole,
    /// The sender's name for user turns.
    pub name: Option<String>,
    /// The text parts, joined by newlines.
    pub text: String,
    /// Tool calls the message makes.
    pub tool_calls: Vec<ToolCallPart>,
    /// Tool results the message carries.
    pub tool_results: Vec<ToolResultPart>,
}

fn structured(agent: &AgentName, item: &ContextItem) -> StructuredTurn {
    let own = item.message.sender == Participant::Agent(agent.clone());
    let mut turn = StructuredTurn {
        role: if own {
            ChatRole::Assistant
        } else {
            ChatRole::User
        },
        name: (!own).then(|| item.message.sender.as_str().to_owned()),
        text: String::new(),
        tool_calls: Vec::new(),
        tool_results: Vec::new(),
    };
    for part in &item.message.parts {
        match part {
            Part::Text { text } => {
                if !turn.text.is_empty() {
                    turn.text.push('\n');
                }
                turn.text.push_str(text);
            }
            Part::ToolCall {
                id,
                name,
                arguments,
            } => turn.tool_calls.push(ToolCallPart {
                id: id.clone(),
                name: name.clone(),
                arguments: arguments.clone(),
            }),
            Part::ToolResult {
                call_id,
                content,
                is_error,
            } => turn.tool_results.push(ToolResultPart {
                call_id: call_id.clone(),
                content: content.clone(),
                is_error: *is_error,
            }),
        }
    }
    turn
}

/// The plan as structured turns: history, then the new message, then the [`volatile_tail`] in a
/// user turn of its own (as in [`chat_turns`]).
pub fn structured_turns(
    agent: &AgentName,
    plan: &ContextPlan,
    status: Option<&str>,
) -> Vec<StructuredTurn> {
    let user = |text| StructuredTurn {
        role: ChatRole::User,
        name: None,
        text,
        tool_calls: Vec::new(),
        tool_results: Vec::new(),
    };
    summary_text(plan)
        .map(user)
        .into_iter()
        .chain(plan.messages().map(|i| structured(agent, i)))
        .chain(volatile_tail(plan, status).map(user))
        .collect()
}
