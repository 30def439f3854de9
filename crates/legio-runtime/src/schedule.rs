//! Scheduled heartbeats (`[heartbeats.AGENT]` in the configuration): every `every_seconds`, the
//! agent answers `text` as a heartbeat (heartbeat.rs: no history, one `HeartbeatRan` event) in
//! each conversation the schedule applies to: the listed `conversations`, or, without a list,
//! every conversation in which the agent's session is open at that tick (an agent reaped for
//! idleness, reset or never addressed gets none). One tokio task per schedule, started with the
//! runtime and stopped by its shutdown; the first run is one interval after the start.
//! On a cluster every node runs the schedules, and a conversation's heartbeat runs on its owner
//! only: a node looks only at the conversations it holds (without a list), and runs a listed
//! conversation if it holds it or takes it because nobody does; it skips one another node holds.
//! The `[heartbeats]` tables are parsed by legio-config (`HeartbeatSchedule`); this module runs them.

use std::sync::Arc;
use std::time::Duration;

use legio_core::{AgentName, ConversationKey, SessionStatus};
use ractor::ActorRef;
use tokio::task::JoinHandle;

use legio_config::HeartbeatSchedule;

use crate::agent::dispatch::{gather, RootRoute};
use crate::error::RuntimeError;
use crate::messages::{Job, RootMsg};
use crate::placement::{Cluster, Here};
use crate::shared::Shared;

/// Starts one task per schedule of the configuration; abort them to stop.
pub(crate) fn start(
    shared: &Arc<Shared>,
    root: &ActorRef<RootMsg>,
    cluster: Option<&Arc<Cluster>>,
) -> Vec<JoinHandle<()>> {
    shared
        .config
        .heartbeats
        .iter()
        .map(|schedule| {
            let (shared, root, schedule) = (Arc::clone(shared), root.clone(), schedule.clone());
            let cluster = cluster.cloned();
            tokio::spawn(async move {
                let mut ticker = tokio::time::interval(schedule.every);
                ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                ticker.tick().await;
                loop {
                    ticker.tick().await;
                    run_once(&shared, &root, cluster.as_deref(), &schedule).await;
                }
            })
        })
        .collect()
}

/// One tick of `schedule`: a heartbeat in each conversation it applies to now, one after the
/// other (each waits for the agent, between its turns).
async fn run_once(
    shared: &Arc<Shared>,
    root: &ActorRef<RootMsg>,
    cluster: Option<&Cluster>,
    schedule: &HeartbeatSchedule,
) {
    let conversations = match &schedule.conversations {
        Some(list) => list.clone(),
        None => match open_sessions(shared, cluster, &schedule.agent).await {
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
        let Some(_in_use) = runs_here(cluster, &key).await else {
            continue;
        };
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

/// Whether this node runs `conversation`'s heartbeat: always without a cluster; on a cluster if
/// it holds the conversation's lease or takes it now because nobody does. `Some` holds the
/// guard that keeps the conversation here (not released as idle) while the heartbeat runs.
async fn runs_here(cluster: Option<&Cluster>, conversation: &ConversationKey) -> Option<Here> {
    let Some(cluster) = cluster else {
        return Some(Here::alone());
    };
    match cluster.here(conversation).await {
        Ok(here) => Some(here),
        Err(RuntimeError::Moved { .. }) => {
            tracing::debug!(conversation = %conversation, "scheduled heartbeat: another node owns the conversation and runs it");
            None
        }
        Err(e) => {
            tracing::warn!(conversation = %conversation, error = %e, "scheduled heartbeat: cannot tell who owns the conversation");
            None
        }
    }
}

/// The conversations in which `agent`'s current session is open, from the log: among every
/// conversation, or on a cluster among those this node holds.
async fn open_sessions(
    shared: &Arc<Shared>,
    cluster: Option<&Cluster>,
    agent: &AgentName,
) -> Result<Vec<ConversationKey>, crate::error::RuntimeError> {
    let agent = agent.clone();
    let held: Option<Vec<ConversationKey>> = cluster.map(|c| {
        c.ownership
            .owned()
            .into_iter()
            .map(|(key, ..)| key)
            .collect()
    });
    shared
        .read(move |log| {
            let mut open = Vec::new();
            let candidates = match held {
                Some(held) => held,
                None => log.conversations()?,
            };
            for key in candidates {
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
