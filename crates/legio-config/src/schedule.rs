//! The `[heartbeats.AGENT]` tables of the configuration: every `every_seconds`, the agent answers
//! `text` as a heartbeat in the listed `conversations`, or without a list in every conversation
//! where its session is open at the tick. Parsed and validated here; legio-runtime's schedule.rs
//! runs them.

use std::collections::BTreeMap;
use std::time::Duration;

use legio_core::{AgentName, ConversationKey};
use serde::Deserialize;

/// One `[heartbeats.AGENT]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HeartbeatSection {
    every_seconds: f64,
    text: String,
    #[serde(default)]
    conversations: Option<Vec<String>>,
}

/// A validated heartbeat schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatSchedule {
    /// The agent that answers.
    pub agent: AgentName,
    /// How often (at least one second).
    pub every: Duration,
    /// What it answers.
    pub text: String,
    /// The conversations it runs in; `None`: every conversation where the agent's session is
    /// open at the tick.
    pub conversations: Option<Vec<ConversationKey>>,
}

/// Validates the `[heartbeats]` tables against the roster `agents`; errors name the key.
pub(crate) fn parse_schedules(
    sections: &BTreeMap<String, HeartbeatSection>,
    agents: &[AgentName],
) -> Result<Vec<HeartbeatSchedule>, String> {
    sections
        .iter()
        .map(|(name, section)| {
            let key = format!("heartbeats.{name}");
            let agent = agents
                .iter()
                .find(|a| a.as_str() == name)
                .cloned()
                .ok_or_else(|| format!("[{key}] names no agent of the roster ([agents.{name}])"))?;
            let every = Duration::try_from_secs_f64(section.every_seconds)
                .ok()
                .filter(|d| *d >= Duration::from_secs(1))
                .ok_or_else(|| {
                    format!(
                        "{key}.every_seconds = {} must be at least 1",
                        section.every_seconds
                    )
                })?;
            if section.text.trim().is_empty() {
                return Err(format!(
                    "{key}.text is empty: say what the agent should check"
                ));
            }
            let conversations = section
                .conversations
                .as_ref()
                .map(|keys| conversation_keys(keys, &key))
                .transpose()?;
            Ok(HeartbeatSchedule {
                agent,
                every,
                text: section.text.clone(),
                conversations,
            })
        })
        .collect()
}

fn conversation_keys(keys: &[String], key: &str) -> Result<Vec<ConversationKey>, String> {
    keys.iter()
        .map(|k| {
            let parsed =
                ConversationKey::new(k.as_str()).map_err(|e| format!("{key}.conversations: {e}"))?;
            if parsed.is_reserved() {
                return Err(format!(
                    "{key}.conversations: {k:?} is reserved by legio (keys starting with \"legio:\")"
                ));
            }
            Ok(parsed)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<HeartbeatSchedule>, String> {
        let sections: BTreeMap<String, HeartbeatSection> =
            toml::from_str(text).map_err(|e| e.message().to_owned())?;
        let agents = [
            AgentName::new("lead").unwrap(),
            AgentName::new("ann").unwrap(),
        ];
        parse_schedules(&sections, &agents)
    }

    #[test]
    fn schedules_parse_and_every_error_names_its_key() {
        let parsed = parse(
            "[lead]\nevery_seconds = 90\ntext = \"due?\"\n[ann]\nevery_seconds = 1.5\ntext = \"t\"\nconversations = [\"ops:1\"]\n",
        )
        .unwrap();
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[1].agent.as_str(), "lead");
        assert_eq!(parsed[1].every, Duration::from_secs(90));
        assert_eq!(parsed[1].conversations, None);
        assert_eq!(
            parsed[0].conversations,
            Some(vec![ConversationKey::new("ops:1").unwrap()])
        );
        for (text, needle) in [
            ("[bob]\nevery_seconds = 5\ntext = \"x\"", "heartbeats.bob"),
            (
                "[lead]\nevery_seconds = 0.5\ntext = \"x\"",
                "heartbeats.lead.every_seconds",
            ),
            (
                "[lead]\nevery_seconds = 5\ntext = \"  \"",
                "heartbeats.lead.text",
            ),
            (
                "[lead]\nevery_seconds = 5\ntext = \"x\"\nconversations = [\"legio:memory\"]",
                "reserved",
            ),
            (
                "[lead]\nevery_seconds = 5\ntext = \"x\"\nconversations = [\"no spaces\"]",
                "heartbeats.lead.conversations",
            ),
            ("[lead]\nevery = 5\ntext = \"x\"", "unknown field"),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(needle), "{text}: {error}");
        }
    }
}
