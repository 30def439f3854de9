//! Supervisors. A conversation supervisor owns the agent actors of one conversation: it spawns
//! them on first need, routes turns to them, and restarts a failed one with exponential backoff and
//! jitter within an intensity limit; beyond it the agent is marked failed (an event) and answers
//! with an error until a manual reset. A startup failure of a child counts as a failure of that
//! child, never of the supervisor. The root supervisor (root.rs) owns the conversation
//! supervisors; one whose agents were all reaped asks it to retire (see [`ConversationMsg::Retire`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use legio_core::{AgentFailed, AgentName, BoundaryReason, ConversationKey, Event, TurnFailed};
use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent};
use rand::Rng;
use tokio::sync::oneshot;

use crate::agent::actor::AgentActor;
use crate::agent::restart::{RestartDecision, RestartTracker};
use crate::clock::now;
use crate::conversation::Use;
use crate::error::RuntimeError;
use crate::messages::{AgentMsg, ConversationMsg, Job, RootMsg};
use crate::metrics as m;
use crate::reply::{AgentReply, TurnErrorKind};
use crate::shared::Shared;
use crate::status::Activity;

type QueuedTurn = (Job, oneshot::Sender<AgentReply>);

enum Slot {
    Live(ActorRef<AgentMsg>),
    /// Asked to stop if idle (a reap is in flight): turns queue until it answers, so none is
    /// sent into the mailbox of an actor that is about to stop.
    Draining(ActorRef<AgentMsg>, Vec<QueuedTurn>),
    /// Waiting for its backoff; turns queue.
    Restarting(Vec<QueuedTurn>),
    Failed(String),
}

pub(crate) struct ConversationSupervisor {
    pub(crate) shared: Arc<Shared>,
    pub(crate) conversation: ConversationKey,
    /// The root supervisor, asked for retirement when no agent runs here any more.
    pub(crate) root: ActorRef<RootMsg>,
}

pub(crate) struct ConversationState {
    slots: HashMap<AgentName, Slot>,
    by_actor: HashMap<ActorId, AgentName>,
    restarts: HashMap<AgentName, RestartTracker>,
    shutting_down: bool,
    /// Its conversation's entry (conversation/), kept for the supervisor's life.
    _entry: Use,
}

impl Actor for ConversationSupervisor {
    type Msg = ConversationMsg;
    type State = ConversationState;
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        _args: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(ConversationState {
            slots: HashMap::new(),
            by_actor: HashMap::new(),
            restarts: HashMap::new(),
            shutting_down: false,
            _entry: self.shared.conversations.enter(&self.conversation),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ConversationMsg::Work { agent, job, reply } => {
                if state.shutting_down {
                    let _ = reply.send(shut_down(&agent));
                    return Ok(());
                }
                if !state.slots.contains_key(&agent) {
                    self.start(&myself, state, &agent).await;
                }
                deliver(state, &agent, job, reply);
            }
            ConversationMsg::Respawn { agent } => {
                if !matches!(state.slots.get(&agent), Some(Slot::Restarting(_)))
                    || state.shutting_down
                {
                    return Ok(());
                }
                let queued = match state.slots.remove(&agent) {
                    Some(Slot::Restarting(queue)) => queue,
                    _ => Vec::new(),
                };
                self.start(&myself, state, &agent).await;
                for (job, reply) in queued {
                    deliver(state, &agent, job, reply);
                }
            }
            ConversationMsg::Reap { idle, reply } => {
                self.reap(&myself, state, idle, reply);
            }
            ConversationMsg::ReapDone { results } => {
                reap_done(state, results);
            }
            ConversationMsg::Reset { agent, reply } => {
                self.reset(&myself, state, agent, reply).await;
            }
            ConversationMsg::Shutdown { reply } => {
                shutdown(state, reply);
            }
            ConversationMsg::Kill { reply } => {
                state.shutting_down = true;
                for child in myself.get_children() {
                    let _ = child.kill_and_wait(Some(Duration::from_secs(5))).await;
                }
                state.slots.clear();
                let _ = reply.send(());
                myself.stop(Some("killed".into()));
            }
            ConversationMsg::Retire => {
                // Everything the root routed here before this message was handled already: if
                // none of it started an agent, nothing is pending and nothing more comes.
                if idle(state) {
                    myself.stop(Some("retired".into()));
                } else {
                    let _ = self.root.send_message(RootMsg::Stay {
                        conversation: self.conversation.clone(),
                        supervisor: myself.get_id(),
                    });
                }
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorFailed(cell, error) => {
                let Some(agent) = state.by_actor.remove(&cell.get_id()) else {
                    return Ok(());
                };
                if state.shutting_down {
                    state.slots.remove(&agent);
                    return Ok(());
                }
                tracing::warn!(conversation = %self.conversation, agent = %agent, error = %error, "agent actor failed");
                metrics::counter!(m::TURNS, "agent" => agent.to_string(), "outcome" => "crashed")
                    .increment(1);
                // Record the crash so the audit shows it; the restarted actor closes or suspends
                // the session it left open.
                let _ = self
                    .shared
                    .append(vec![Event::TurnFailed(TurnFailed {
                        conversation: self.conversation.clone(),
                        agent: agent.clone(),
                        session: None,
                        at: now(),
                        error: format!("actor crashed: {error}"),
                    })])
                    .await;
                self.on_failure(&myself, state, &agent, error.to_string())
                    .await;
            }
            SupervisionEvent::ActorTerminated(cell, _, _) => {
                let Some(agent) = state.by_actor.remove(&cell.get_id()) else {
                    return Ok(());
                };
                match state.slots.get(&agent) {
                    Some(Slot::Live(a)) if a.get_id() == cell.get_id() => {
                        state.slots.remove(&agent);
                    }
                    Some(Slot::Draining(a, _)) if a.get_id() == cell.get_id() => {
                        // Reaped while turns were waiting: they go to a fresh actor.
                        let queued = match state.slots.remove(&agent) {
                            Some(Slot::Draining(_, queue)) => queue,
                            _ => Vec::new(),
                        };
                        if !queued.is_empty() && !state.shutting_down {
                            state.slots.insert(agent.clone(), Slot::Restarting(queued));
                            let _ = myself.send_message(ConversationMsg::Respawn { agent });
                        } else {
                            for (_, reply) in queued {
                                let _ = reply.send(shut_down(&agent));
                            }
                        }
                    }
                    _ => {}
                }
                self.retire_if_idle(&myself, state);
            }
            _ => {}
        }
        Ok(())
    }
}

/// Whether no agent runs or waits here: no actor, no queued turn (a failed agent's state is in
/// the log, read again by the next turn).
fn idle(state: &ConversationState) -> bool {
    state.by_actor.is_empty()
        && !state.shutting_down
        && state.slots.values().all(|s| matches!(s, Slot::Failed(_)))
}

/// Routes a job by the agent's slot: to its actor, into its queue, or answered with an error.
fn deliver(
    state: &mut ConversationState,
    agent: &AgentName,
    job: Job,
    reply: oneshot::Sender<AgentReply>,
) {
    match state.slots.get_mut(agent) {
        Some(Slot::Live(actor)) => {
            // The actor died and its failure is not processed yet: answer, do not queue.
            if let Err(ractor::MessagingErr::SendErr(message)) =
                actor.send_message(job.into_msg(reply))
            {
                if let Some((_, reply)) = message.into_job() {
                    let _ = reply.send(AgentReply::failed(
                        agent,
                        TurnErrorKind::Unavailable,
                        format!("{agent} is restarting; try again"),
                    ));
                }
            }
        }
        Some(Slot::Restarting(queue) | Slot::Draining(_, queue)) => queue.push((job, reply)),
        Some(Slot::Failed(reason)) => {
            let _ = reply.send(failed_reply(agent, reason));
        }
        None => {
            let _ = reply.send(AgentReply::failed(
                agent,
                TurnErrorKind::Unavailable,
                format!("{agent} could not be started"),
            ));
        }
    }
}

/// The reply of an agent that is stopped until a manual reset.
fn failed_reply(agent: &AgentName, reason: &str) -> AgentReply {
    AgentReply::failed(
        agent,
        TurnErrorKind::Failed,
        format!("{agent} has failed ({reason}) and is stopped until a manual reset of the agent"),
    )
}

/// The reply of a job that a shutdown cut.
fn shut_down(agent: &AgentName) -> AgentReply {
    AgentReply::failed(
        agent,
        TurnErrorKind::ShutDown,
        RuntimeError::ShutDown.to_string(),
    )
}

impl ConversationSupervisor {
    /// Asks the root to retire this supervisor if no agent runs or waits here (see root.rs).
    fn retire_if_idle(&self, myself: &ActorRef<ConversationMsg>, state: &ConversationState) {
        if idle(state) {
            let _ = self.root.send_message(RootMsg::Retire {
                conversation: self.conversation.clone(),
                supervisor: myself.get_id(),
            });
        }
    }

    /// Spawns the agent's actor unless the log says it is failed. A spawn failure is a failure of
    /// the child (backoff or failed), never of this supervisor.
    async fn start(
        &self,
        myself: &ActorRef<ConversationMsg>,
        state: &mut ConversationState,
        agent: &AgentName,
    ) {
        if self.shared.spec(agent).is_none() {
            state
                .slots
                .insert(agent.clone(), Slot::Failed("not in the roster".into()));
            return;
        }
        let (conversation, name) = (self.conversation.clone(), agent.clone());
        match self
            .shared
            .read(move |log| log.session_state(&conversation, &name))
            .await
        {
            Ok(Some(s)) if s.failed.is_some() => {
                let reason = s.failed.map(|f| f.reason).unwrap_or_default();
                self.shared
                    .conversations
                    .set_activity(&self.conversation, agent, Activity::Failed);
                state.slots.insert(agent.clone(), Slot::Failed(reason));
                return;
            }
            Ok(_) => {}
            Err(e) => {
                state.slots.insert(
                    agent.clone(),
                    Slot::Failed(format!("cannot read its state: {e}")),
                );
                return;
            }
        }
        let actor = AgentActor {
            shared: Arc::clone(&self.shared),
            conversation: self.conversation.clone(),
            agent: agent.clone(),
            supervisor: myself.clone(),
        };
        match Actor::spawn_linked(None, actor, (), myself.get_cell()).await {
            Ok((actor_ref, _handle)) => {
                state.by_actor.insert(actor_ref.get_id(), agent.clone());
                state.slots.insert(agent.clone(), Slot::Live(actor_ref));
                self.shared
                    .conversations
                    .set_activity(&self.conversation, agent, Activity::Idle);
            }
            Err(e) => {
                tracing::warn!(conversation = %self.conversation, agent = %agent, error = %e, "agent actor failed to start");
                state
                    .slots
                    .insert(agent.clone(), Slot::Restarting(Vec::new()));
                Box::pin(self.on_failure(myself, state, agent, format!("startup failed: {e}")))
                    .await;
            }
        }
    }

    async fn on_failure(
        &self,
        myself: &ActorRef<ConversationMsg>,
        state: &mut ConversationState,
        agent: &AgentName,
        reason: String,
    ) {
        let settings = self.shared.config.runtime.restart;
        let jitter: f64 = rand::thread_rng().gen();
        let decision = state.restarts.entry(agent.clone()).or_default().on_failure(
            &settings,
            Instant::now(),
            jitter,
        );
        let queued = match state.slots.remove(agent) {
            Some(Slot::Restarting(queue) | Slot::Draining(_, queue)) => queue,
            _ => Vec::new(),
        };
        match decision {
            RestartDecision::Restart(delay) => {
                metrics::counter!(m::RESTARTS).increment(1);
                self.shared.conversations.set_activity(
                    &self.conversation,
                    agent,
                    Activity::Restarting,
                );
                state.slots.insert(agent.clone(), Slot::Restarting(queued));
                let name = agent.clone();
                ractor::time::send_after(delay, myself.get_cell(), move || {
                    ConversationMsg::Respawn { agent: name }
                });
            }
            RestartDecision::GiveUp { restarts } => {
                tracing::error!(conversation = %self.conversation, agent = %agent, restarts, "agent failed past its restart intensity");
                metrics::counter!(m::FAILED_AGENTS).increment(1);
                self.shared
                    .conversations
                    .set_activity(&self.conversation, agent, Activity::Failed);
                let _ = self
                    .shared
                    .append(vec![Event::AgentFailed(AgentFailed {
                        conversation: self.conversation.clone(),
                        agent: agent.clone(),
                        at: now(),
                        reason: reason.clone(),
                        restarts,
                    })])
                    .await;
                for (_, reply) in queued {
                    let _ = reply.send(failed_reply(agent, &reason));
                }
                state.slots.insert(agent.clone(), Slot::Failed(reason));
            }
        }
    }
}

impl ConversationSupervisor {
    /// Asks every live agent to stop if idle for `idle`; answers how many stopped (collected off
    /// this actor, so a busy agent never blocks it). With nothing live, retires if idle.
    fn reap(
        &self,
        myself: &ActorRef<ConversationMsg>,
        state: &mut ConversationState,
        idle: Duration,
        reply: oneshot::Sender<usize>,
    ) {
        let mut waits = Vec::new();
        for (agent, slot) in state.slots.iter_mut() {
            let Slot::Live(actor) = slot else { continue };
            let actor = actor.clone();
            let (tx, rx) = oneshot::channel();
            if actor
                .send_message(AgentMsg::ReapIfIdle { idle, reply: tx })
                .is_ok()
            {
                waits.push((agent.clone(), actor.get_id(), rx));
                *slot = Slot::Draining(actor, Vec::new());
            }
        }
        if waits.is_empty() {
            self.retire_if_idle(myself, state);
            let _ = reply.send(0);
            return;
        }
        // Collect the answers without blocking this supervisor on a busy agent.
        let supervisor = myself.clone();
        tokio::spawn(async move {
            let mut results = Vec::with_capacity(waits.len());
            for (agent, id, rx) in waits {
                results.push((agent, id, rx.await.unwrap_or(false)));
            }
            let reaped = results.iter().filter(|(_, _, stopped)| *stopped).count();
            let _ = supervisor.send_message(ConversationMsg::ReapDone { results });
            let _ = reply.send(reaped);
        });
    }

    /// Records a reset of `agent`'s session, through its actor if it runs.
    async fn reset(
        &self,
        myself: &ActorRef<ConversationMsg>,
        state: &mut ConversationState,
        agent: AgentName,
        reply: oneshot::Sender<Result<(), RuntimeError>>,
    ) {
        state.restarts.entry(agent.clone()).or_default().clear();
        match state.slots.get(&agent) {
            Some(Slot::Draining(..)) => {
                // The actor may be stopping: record the reset here; if it carries on,
                // its next turn sees the closed session and opens a new one.
                let result = self.shared.record_reset(&self.conversation, &agent).await;
                let _ = reply.send(result);
            }
            Some(Slot::Live(actor)) => {
                if let Err(ractor::MessagingErr::SendErr(AgentMsg::Reset { reply })) =
                    actor.send_message(AgentMsg::Reset { reply })
                {
                    let _ = reply.send(Err(RuntimeError::AgentRestarting {
                        agent: agent.to_string(),
                    }));
                }
            }
            _ => {
                // Not running (failed, restarting or never started): record the reset
                // directly; the next turn starts a fresh actor.
                let queued = match state.slots.remove(&agent) {
                    Some(Slot::Restarting(queue)) => queue,
                    _ => Vec::new(),
                };
                self.shared
                    .conversations
                    .set_activity(&self.conversation, &agent, Activity::Idle);
                let result = self.shared.record_reset(&self.conversation, &agent).await;
                let _ = reply.send(result);
                for (job, reply) in queued {
                    let _ = myself.send_message(ConversationMsg::Work {
                        agent: agent.clone(),
                        job,
                        reply,
                    });
                }
            }
        }
    }
}

/// The agents that did not stop after a reap go live again, with what queued meanwhile.
fn reap_done(state: &mut ConversationState, results: Vec<(AgentName, ActorId, bool)>) {
    for (agent, id, stopped) in results {
        if stopped {
            continue; // its termination hands the queue to a new actor
        }
        if let Some(Slot::Draining(actor, _)) = state.slots.get(&agent) {
            if actor.get_id() == id {
                if let Some(Slot::Draining(actor, queue)) = state.slots.remove(&agent) {
                    for (job, reply) in queue {
                        let _ = actor.send_message(job.into_msg(reply));
                    }
                    state.slots.insert(agent, Slot::Live(actor));
                }
            }
        }
    }
}

/// Stops every agent (suspending its session); queued turns are refused; `reply` once all stopped.
fn shutdown(state: &mut ConversationState, reply: oneshot::Sender<()>) {
    state.shutting_down = true;
    let mut waits = Vec::new();
    for (agent, slot) in state.slots.drain() {
        let (actor, queue) = match slot {
            Slot::Live(actor) => (Some(actor), Vec::new()),
            Slot::Draining(actor, queue) => (Some(actor), queue),
            Slot::Restarting(queue) => (None, queue),
            Slot::Failed(_) => (None, Vec::new()),
        };
        if let Some(actor) = actor {
            let (tx, rx) = oneshot::channel();
            let stop = AgentMsg::Stop {
                why: BoundaryReason::Shutdown,
                reply: tx,
            };
            if actor.send_message(stop).is_ok() {
                waits.push(rx);
            }
        }
        for (_, r) in queue {
            let _ = r.send(shut_down(&agent));
        }
    }
    tokio::spawn(async move {
        for rx in waits {
            let _ = rx.await;
        }
        let _ = reply.send(());
    });
}
