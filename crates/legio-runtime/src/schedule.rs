//! Scheduled heartbeats (`[heartbeats.AGENT]` in the configuration): every `every_seconds`, the
//! agent answers `text` as a heartbeat (heartbeat.rs: no history, one `HeartbeatRan` event) in
//! each conversation the schedule applies to: the listed `conversations`, or, without a list,
//! every conversation in which the agent's session is open at that tick (an agent reaped for
//! idleness, reset or never addressed gets none). One tokio task per schedule, started with the
//! runtime and stopped by its shutdown; the first run is one interval after the start.
//! Kept apart from config.rs (the `[heartbeats]` table is parsed here) and runtime.rs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use legio_core::{AgentName, ConversationKey, SessionStatus};
use ractor::ActorRef;
use serde::Deserialize;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::dispatch::{gather, Route, Sent};
use crate::messages::{ConversationMsg, Job, RootMsg};
use crate::shared::Shared;

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

/// Starts one task per schedule of the configuration; abort them to stop.
pub(crate) fn start(shared: &Arc<Shared>, root: &ActorRef<RootMsg>) -> Vec<JoinHandle<()>> {
    shared
        .config
        .heartbeats
        .iter()
        .map(|schedule| {
            let (shared, root, schedule) = (Arc::clone(shared), root.clone(), schedule.clone());
            tokio::spawn(async move {
                let mut ticker = tokio::time::interval(schedule.every);
                ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                ticker.tick().await;
                loop {
                    ticker.tick().await;
                    run_once(&shared, &root, &schedule).await;
                }
            })
        })
        .collect()
}

/// One tick of `schedule`: a heartbeat in each conversation it applies to now, one after the
/// other (each waits for the agent, between its turns).
async fn run_once(shared: &Arc<Shared>, root: &ActorRef<RootMsg>, schedule: &HeartbeatSchedule) {
    let conversations = match &schedule.conversations {
        Some(list) => list.clone(),
        None => match open_sessions(shared, &schedule.agent).await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(agent = %schedule.agent, error = %e, "scheduled heartbeat: cannot read sessions");
                return;
            }
        },
    };
    let runtime = &shared.config.runtime;
    let wait = runtime.turn_timeout + runtime.restart.max_backoff + Duration::from_secs(5);
    for key in conversations {
        let route = RootRoute { root, key: &key };
        let job = Job::Heartbeat {
            text: schedule.text.clone(),
        };
        let replies = gather(
            &route,
            job,
            std::slice::from_ref(&schedule.agent),
            wait,
            None,
            None,
        )
        .await;
        for error in replies.iter().filter_map(|r| r.error()) {
            tracing::warn!(agent = %schedule.agent, conversation = %key, error, "scheduled heartbeat failed");
        }
    }
}

/// The conversations in which `agent`'s current session is open, from the log.
async fn open_sessions(
    shared: &Arc<Shared>,
    agent: &AgentName,
) -> Result<Vec<ConversationKey>, crate::error::RuntimeError> {
    let agent = agent.clone();
    shared
        .read(move |log| {
            let mut open = Vec::new();
            for key in log.conversations()? {
                if key.is_reserved() {
                    continue;
                }
                let states = log.session_states(&key)?;
                let is_open = states.iter().any(|s| {
                    s.agent == agent
                        && s.current
                            .as_ref()
                            .is_some_and(|c| c.status == SessionStatus::Open)
                });
                if is_open {
                    open.push(key);
                }
            }
            Ok(open)
        })
        .await
}

/// A conversation's supervisor looked up through the root (which starts it if needed).
struct RootRoute<'a> {
    root: &'a ActorRef<RootMsg>,
    key: &'a ConversationKey,
}

impl Route for RootRoute<'_> {
    fn send(&self, message: ConversationMsg) -> Sent<'_> {
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            let asked = self.root.send_message(RootMsg::Get {
                conversation: self.key.clone(),
                reply: tx,
            });
            match (asked, rx.await) {
                (Ok(()), Ok(Ok(supervisor))) => supervisor.send_message(message).is_ok(),
                _ => false,
            }
        })
    }
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
