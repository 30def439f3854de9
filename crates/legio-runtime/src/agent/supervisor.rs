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
                    if let Err(not_started) = self.start(&myself, state, &agent).await {
                        let _ = reply.send(not_started.reply(&agent));
                        self.retire_if_idle(&myself, state);
                        return Ok(());
                    }
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
                match self.start(&myself, state, &agent).await {
                    Ok(()) => {
                        for (job, reply) in queued {
                            deliver(state, &agent, job, reply);
                        }
                    }
                    Err(not_started) => {
                        for (_, reply) in queued {
                            let _ = reply.send(not_started.reply(&agent));
                        }
                        self.retire_if_idle(&myself, state);
                    }
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
                // Turns queued meanwhile are answered by it; nothing else waits.
                let failed = self.on_failure(&myself, state, &agent, error.to_string());
                if failed.await.is_err() {
                    self.retire_if_idle(&myself, state);
                }
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

/// Why an agent was not started, for the turns that wanted it. Nothing of it is kept: the next
/// turn tries again, from the log.
struct NotStarted {
    kind: TurnErrorKind,
    why: String,
}

impl NotStarted {
    fn reply(&self, agent: &AgentName) -> AgentReply {
        AgentReply::failed(agent, self.kind, self.why.clone())
    }

    /// The conversation is not this node's (any more): its agents run only under its lease.
    fn moved(error: &RuntimeError) -> Self {
        Self {
            kind: TurnErrorKind::Moved,
            why: error.to_string(),
        }
    }
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
    /// the child (backoff or failed), never of this supervisor. On a cluster, only under the
    /// conversation's lease: without it (stood down, or never taken) nothing starts, nothing
    /// is counted against the agent and no slot is left (`NotStarted`, moved); nor when its
    /// state cannot be read (unavailable). Either is tried again from the log at the next turn.
    async fn start(
        &self,
        myself: &ActorRef<ConversationMsg>,
        state: &mut ConversationState,
        agent: &AgentName,
    ) -> Result<(), NotStarted> {
        if self.shared.spec(agent).is_none() {
            state
                .slots
                .insert(agent.clone(), Slot::Failed("not in the roster".into()));
            return Ok(());
        }
        if let Err(e) = self.shared.may_run(&self.conversation) {
            state.restarts.remove(agent);
            return Err(NotStarted::moved(&e));
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
                return Ok(());
            }
            Ok(_) => {}
            Err(e) => {
                return Err(NotStarted {
                    kind: TurnErrorKind::Unavailable,
                    why: format!(
                        "{agent} could not be started: cannot read its state ({e}); try again"
                    ),
                });
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
                Ok(())
            }
            Err(e) => {
                tracing::warn!(conversation = %self.conversation, agent = %agent, error = %e, "agent actor failed to start");
                state
                    .slots
                    .insert(agent.clone(), Slot::Restarting(Vec::new()));
                Box::pin(self.on_failure(myself, state, agent, format!("startup failed: {e}")))
                    .await
            }
        }
    }

    /// A failure of the agent's actor: restarted after a backoff, or, past the restart
    /// intensity, failed, which the log records (`AgentFailed`). A failure while this node does
    /// not hold the conversation's lease (the actor failed because it lost it) counts for
    /// nothing: no restart, no slot, the turns queued answered as moved. A failure the log does
    /// not take is kept nowhere either: the agent is started again from the log at the next
    /// turn. `Err` when no slot is left (the reason, for the caller's turn).
    async fn on_failure(
        &self,
        myself: &ActorRef<ConversationMsg>,
        state: &mut ConversationState,
        agent: &AgentName,
        reason: String,
    ) -> Result<(), NotStarted> {
        if let Err(e) = self.shared.may_run(&self.conversation) {
            state.restarts.remove(agent);
            let not_started = NotStarted::moved(&e);
            if let Some(Slot::Restarting(queue) | Slot::Draining(_, queue)) =
                state.slots.remove(agent)
            {
                for (_, reply) in queue {
                    let _ = reply.send(not_started.reply(agent));
                }
            }
            return Err(not_started);
        }
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
                Ok(())
            }
            RestartDecision::GiveUp { restarts } => {
                self.give_up(state, agent, reason, restarts, queued).await
            }
        }
    }

    /// `agent` failed past its restart intensity: recorded as failed in the log (answering what
    /// queued with the failure), or, should the record fail, kept nowhere (what queued is told
    /// to try again, and the next turn starts the agent from the log).
    async fn give_up(
        &self,
        state: &mut ConversationState,
        agent: &AgentName,
        reason: String,
        restarts: u32,
        queued: Vec<QueuedTurn>,
    ) -> Result<(), NotStarted> {
        tracing::error!(conversation = %self.conversation, agent = %agent, restarts, "agent failed past its restart intensity");
        metrics::counter!(m::FAILED_AGENTS).increment(1);
        self.shared
            .conversations
            .set_activity(&self.conversation, agent, Activity::Failed);
        let recorded = self
            .shared
            .append(vec![Event::AgentFailed(AgentFailed {
                conversation: self.conversation.clone(),
                agent: agent.clone(),
                at: now(),
                reason: reason.clone(),
                restarts,
            })])
            .await;
        if let Err(e) = recorded {
            tracing::warn!(conversation = %self.conversation, agent = %agent, error = %e, "the agent's failure could not be recorded; it starts again from the log at the next turn");
            state.restarts.remove(agent);
            self.shared
                .conversations
                .set_activity(&self.conversation, agent, Activity::Idle);
            let not_started = NotStarted {
                kind: TurnErrorKind::Unavailable,
                why: format!(
                    "{agent} failed ({reason}) and its failure could not be recorded ({e}); try again"
                ),
            };
            for (_, reply) in queued {
                let _ = reply.send(not_started.reply(agent));
            }
            return Err(not_started);
        }
        for (_, reply) in queued {
            let _ = reply.send(failed_reply(agent, &reason));
        }
        state.slots.insert(agent.clone(), Slot::Failed(reason));
        Ok(())
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

#[cfg(test)]
mod tests {
    //! A conversation's supervisor behind a gate a test opens and closes: the lease as the
    //! supervisor sees it (`Shared::may_run`), over an in-memory log.

    use std::sync::atomic::{AtomicBool, Ordering};

    use legio_core::{
        Audience, Message, MessageId, OpenReason, Participant, SessionId, SessionOpened,
        SessionStart,
    };
    use legio_llm::{ScriptedConfig, ScriptedProvider};
    use legio_store::{EventLog, MemoryLog};

    use super::*;
    use crate::clock::fresh_uuid;
    use crate::messages::TurnRequest;
    use crate::placement::AppendGate;

    /// The lease, held or not, switched by the test.
    struct Lease(AtomicBool);

    impl AppendGate for Lease {
        fn check(&self, conversation: &ConversationKey) -> Result<(), RuntimeError> {
            if self.0.load(Ordering::SeqCst) {
                return Ok(());
            }
            Err(RuntimeError::Moved {
                conversation: conversation.to_string(),
                reason: "this node does not hold its lease".into(),
            })
        }
        fn fenced(&self, _conversation: &str) {}
        fn retired(&self, _conversation: &ConversationKey) {}
    }

    /// A root that takes every message and does nothing.
    struct NoRoot;

    impl Actor for NoRoot {
        type Msg = RootMsg;
        type State = ();
        type Arguments = ();
        async fn pre_start(
            &self,
            _myself: ActorRef<RootMsg>,
            _args: (),
        ) -> Result<(), ActorProcessingErr> {
            Ok(())
        }
    }

    fn shared(dir: &std::path::Path, log: Arc<dyn EventLog>, gate: Arc<Lease>) -> Arc<Shared> {
        std::fs::write(dir.join("lead.md"), "You lead.").unwrap();
        let file = dir.join("legio.toml");
        std::fs::write(
            &file,
            "[runtime]\ncompaction = false\nrestart_max = 1\nrestart_backoff_ms = 1\nrestart_backoff_max_ms = 1\n[agents.lead]\nrole = \"orchestrator\"\nprompt = \"lead.md\"\nprovider = \"local\"\n[providers.local]\nkind = \"scripted\"\nhistory = \"session\"\n",
        )
        .unwrap();
        let config = crate::RuntimeConfig::load(&file).unwrap();
        let provider = ScriptedProvider::new(ScriptedConfig::new(legio_core::History::Session {
            resumable: false,
        }));
        let provider: Arc<dyn legio_llm::Provider> = Arc::new(provider);
        let providers = [("local".to_owned(), provider)].into();
        let tools = Default::default();
        Shared::new(
            log,
            config,
            providers,
            tools,
            Default::default(),
            Some(gate),
        )
    }

    /// Posts `text` to lead straight into the log (as the owner did) and sends its turn.
    async fn turn(
        log: &Arc<dyn EventLog>,
        supervisor: &ActorRef<ConversationMsg>,
        conversation: &ConversationKey,
        text: &str,
    ) -> AgentReply {
        let lead = AgentName::new("lead").unwrap();
        let id = MessageId(fresh_uuid());
        let message = Message::text(
            id,
            conversation.clone(),
            Participant::User,
            Audience::agent(lead.clone()),
            text,
            now(),
        );
        let seq = log
            .append(vec![Event::MessagePosted(message)])
            .unwrap()
            .first;
        let request = TurnRequest {
            seq,
            id,
            progress: None,
            host_tools: None,
            replayed: false,
        };
        let (reply, answer) = oneshot::channel();
        supervisor
            .send_message(ConversationMsg::Work {
                agent: lead,
                job: Job::Turn(request),
                reply,
            })
            .unwrap();
        tokio::time::timeout(Duration::from_secs(10), answer)
            .await
            .expect("a reply within 10 s")
            .unwrap()
    }

    /// Without the conversation's lease, a turn starts no agent and leaves nothing behind: it
    /// answers moved (retryable), the agent is not marked failed in memory or in the log, and
    /// once the lease is back the agent starts from the log (closing the session a crash left
    /// open) and answers. Before, the start failed for want of the lease (its crash cleanup
    /// was refused), the restarts ran out, the refused `AgentFailed` was kept in memory only,
    /// and the agent answered "has failed ... until a manual reset" with the lease back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn without_its_lease_an_agent_is_not_started_and_starts_from_the_log_once_it_is_back() {
        let dir = tempfile::tempdir().unwrap();
        let log: Arc<dyn EventLog> = Arc::new(MemoryLog::new());
        let lease = Arc::new(Lease(AtomicBool::new(false)));
        let shared = shared(dir.path(), Arc::clone(&log), Arc::clone(&lease));
        let conversation = ConversationKey::new("c:1").unwrap();
        let lead = AgentName::new("lead").unwrap();
        // A session left open by a node that died mid-turn: a start must close it first.
        log.append(vec![Event::SessionOpened(SessionOpened {
            conversation: conversation.clone(),
            agent: lead.clone(),
            session: SessionId(fresh_uuid()),
            at: now(),
            why: OpenReason::FirstUse,
            how: SessionStart::Stateless,
            prompt_hash: String::new(),
        })])
        .unwrap();
        let (root, _root) = Actor::spawn(None, NoRoot, ()).await.unwrap();
        let (supervisor, _handle) = Actor::spawn(
            None,
            ConversationSupervisor {
                shared,
                conversation: conversation.clone(),
                root,
            },
            (),
        )
        .await
        .unwrap();

        for text in ["first", "second"] {
            let refused = turn(&log, &supervisor, &conversation, text).await;
            let error = refused.outcome.expect_err("no turn without the lease");
            assert_eq!(error.kind, TurnErrorKind::Moved, "{}", error.message);
        }
        let state = log.session_state(&conversation, &lead).unwrap();
        assert!(
            state.and_then(|s| s.failed).is_none(),
            "no failure recorded"
        );

        lease.0.store(true, Ordering::SeqCst);
        let answered = turn(&log, &supervisor, &conversation, "third").await;
        let reply = answered
            .outcome
            .expect("the agent answers with its lease back");
        assert!(!reply.text.is_empty());
        let closed = log
            .conversation_events(&conversation, legio_core::Seq(0), usize::MAX)
            .unwrap()
            .into_iter()
            .filter(|r| {
                matches!(
                    r.event,
                    Event::SessionSuspended(_) | Event::SessionClosed(_)
                )
            })
            .count();
        assert_eq!(closed, 1, "the session the crash left open was ended, once");
    }
}
