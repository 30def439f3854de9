//! Scheduled heartbeats (`[heartbeats.AGENT]` in the configuration): every `every_seconds`, the
//! agent answers `text` as a heartbeat (heartbeat.rs: no history, one `HeartbeatRan` event) in
//! each conversation the schedule applies to: the listed `conversations`, or, without a list,
//! every conversation in which the agent's session is open at that tick (an agent reaped for
//! idleness, reset or never addressed gets none). One tokio task per schedule, started with the
//! runtime and stopped by its shutdown; the first run is one interval after the start.
//! The `[heartbeats]` tables are parsed by legio-config (`HeartbeatSchedule`); this module runs them.

use std::sync::Arc;
use std::time::Duration;

use legio_core::{AgentName, ConversationKey, SessionStatus};
use ractor::ActorRef;
use tokio::task::JoinHandle;

use legio_config::HeartbeatSchedule;

use crate::dispatch::{gather, RootRoute};
use crate::messages::{Job, RootMsg};
use crate::shared::Shared;

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
        let route = RootRoute {
            root: root.clone(),
            conversation: key.clone(),
        };
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
