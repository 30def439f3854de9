//! What `legio import` checks before it writes anything: every event within the store's limits,
//! message ids unique, every `reply_to` naming an earlier message, no message posted to a reserved
//! conversation, senders and sessions of agents in the configured roster, session events that
//! follow the session they name (opened before, by the same agent in the same conversation), and
//! host tool declarations whose schemas are JSON, outside reserved conversations.

use std::collections::{HashMap, HashSet};

use legio_core::{AgentName, ConversationKey, Event, MessageId, Participant, SessionId};

/// The rules, and what has been seen so far.
pub struct Checker<'a> {
    max_message_bytes: usize,
    roster: Option<&'a HashSet<AgentName>>,
    ids: HashSet<MessageId>,
    sessions: HashMap<SessionId, (ConversationKey, AgentName)>,
}

impl<'a> Checker<'a> {
    /// A checker under the store's message limit and, when the configuration is known, its roster.
    pub fn new(max_message_bytes: usize, roster: Option<&'a HashSet<AgentName>>) -> Self {
        Self {
            max_message_bytes,
            roster,
            ids: HashSet::new(),
            sessions: HashMap::new(),
        }
    }

    /// Checks the next event of the file; the first rule it breaks.
    pub fn check(&mut self, event: &Event) -> Result<(), String> {
        legio_store::check_event(event, self.max_message_bytes).map_err(|e| e.to_string())?;
        if let Some(agent) = event.session_agent() {
            self.in_roster(agent)?;
        }
        match event {
            Event::MessagePosted(message) => self.message(message),
            Event::SessionOpened(e) => {
                self.sessions
                    .insert(e.session, (e.conversation.clone(), e.agent.clone()));
                Ok(())
            }
            Event::ContextDelivered(e) => self.follows(&e.session, &e.conversation, &e.agent),
            Event::TurnCompleted(e) => self.follows(&e.session, &e.conversation, &e.agent),
            Event::SessionSuspended(e) | Event::SessionClosed(e) => {
                self.follows(&e.session, &e.conversation, &e.agent)
            }
            Event::TurnFailed(e) => match &e.session {
                Some(session) => self.follows(session, &e.conversation, &e.agent),
                None => Ok(()),
            },
            Event::ToolsDeclared(e) => declaration(e),
            _ => Ok(()),
        }
    }

    fn message(&mut self, message: &legio_core::Message) -> Result<(), String> {
        if message.conversation.is_reserved() {
            return Err(format!(
                "a message posted to the reserved conversation {} (legio keeps it for itself)",
                message.conversation
            ));
        }
        if let Participant::Agent(agent) = &message.sender {
            self.in_roster(agent)?;
        }
        if let Some(reply_to) = &message.reply_to {
            if !self.ids.contains(reply_to) {
                return Err(format!(
                    "message {} replies to {reply_to}, which no earlier message is",
                    message.id
                ));
            }
        }
        if !self.ids.insert(message.id) {
            return Err(format!("message id {} is used twice", message.id));
        }
        Ok(())
    }

    fn in_roster(&self, agent: &AgentName) -> Result<(), String> {
        match self.roster {
            Some(roster) if !roster.contains(agent) => Err(format!(
                "agent {agent} is not in the configuration's roster (add [agents.{agent}] or \
                 import with the configuration the log was written under)"
            )),
            _ => Ok(()),
        }
    }

    fn follows(
        &self,
        session: &SessionId,
        conversation: &ConversationKey,
        agent: &AgentName,
    ) -> Result<(), String> {
        match self.sessions.get(session) {
            Some((c, a)) if c == conversation && a == agent => Ok(()),
            Some((c, a)) => Err(format!(
                "an event of {agent} in {conversation} names session {session}, which {a} opened \
                 in {c}"
            )),
            None => Err(format!(
                "an event of {agent} in {conversation} names session {session}, which no earlier \
                 event opened"
            )),
        }
    }
}

/// A host's tool declaration: not in a reserved conversation, each schema JSON (the runtime
/// reads it back as the tools it offers).
fn declaration(e: &legio_core::ToolsDeclared) -> Result<(), String> {
    if e.conversation.is_reserved() {
        return Err(format!(
            "tools declared in the reserved conversation {} (legio keeps it for itself)",
            e.conversation
        ));
    }
    for tool in &e.tools {
        if let Err(err) = serde_json::from_str::<serde_json::Value>(&tool.parameters) {
            return Err(format!(
                "the declared tool {}'s parameters are not a JSON schema in JSON text: {err}",
                tool.name
            ));
        }
    }
    Ok(())
}
