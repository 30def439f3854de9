//! The agent actor: one per (conversation, agent), owning that agent's provider session. It is
//! the mailbox, the lifecycle and the supervision hooks; the turn itself is turn.rs.
//!
//! Its state is rebuilt from the log in `pre_start` (an open session left by a dead actor or
//! process is closed or suspended as crashed first). It runs the turns and heartbeats of its
//! mailbox one at a time, ends its session when reaped or stopped, and records manual resets.

use std::sync::Arc;
use std::time::{Duration, Instant};

use legio_core::{crash_cleanup, stop_session, AgentName, BoundaryReason, ConversationKey};
use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::agent::turn::{self, end_event, record_end, TurnState};
use crate::error::RuntimeError;
use crate::messages::{AgentMsg, ConversationMsg};
use crate::metrics as m;
use crate::shared::Shared;
use crate::status::Activity;

pub(crate) struct AgentActor {
    pub(crate) shared: Arc<Shared>,
    pub(crate) conversation: ConversationKey,
    pub(crate) agent: AgentName,
    /// Its conversation's supervisor, through which `dispatch` sends turns to specialists.
    pub(crate) supervisor: ActorRef<ConversationMsg>,
}

pub(crate) struct AgentState {
    /// The agent as the turn functions see it (built once).
    agent: turn::Agent,
    turn: TurnState,
    last_active: Instant,
}

impl Actor for AgentActor {
    type Msg = AgentMsg;
    type State = AgentState;
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        _args: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        let spec = self.shared.roster_spec(&self.agent)?;
        let history = self.shared.provider(spec)?.capabilities().history;
        let turn_agent = self.turn_agent();
        let (conversation, agent) = (self.conversation.clone(), self.agent.clone());
        let state = self
            .shared
            .read(move |log| log.session_state(&conversation, &agent))
            .await?;
        if let (Some(end), Some(current)) = (
            crash_cleanup(state.as_ref(), history),
            state.as_ref().and_then(|s| s.current.as_ref()),
        ) {
            tracing::info!(conversation = %self.conversation, agent = %self.agent, suspend = end.suspend, "closing a session left open by a crash");
            let event = end_event(&turn_agent, current.session, end);
            self.shared.append(vec![event]).await?;
            record_end(end);
        }
        metrics::gauge!(m::LIVE_ACTORS).increment(1.0);
        Ok(AgentState {
            agent: turn_agent,
            turn: TurnState::default(),
            last_active: Instant::now(),
        })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        _state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        metrics::gauge!(m::LIVE_ACTORS).decrement(1.0);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            AgentMsg::Turn { request, reply } => {
                let answer = turn::run(&state.agent, &mut state.turn, request).await;
                state.last_active = Instant::now();
                let _ = reply.send(answer);
            }
            AgentMsg::Resume {
                call_message,
                reply,
            } => {
                let answer = turn::resume(&state.agent, &mut state.turn, call_message).await;
                state.last_active = Instant::now();
                let _ = reply.send(answer);
            }
            AgentMsg::Heartbeat { text, reply } => {
                // Between turns, outside the session: no boundary, no checkpoint, no idle reset.
                let board = &self.shared.conversations;
                board.set_activity(&self.conversation, &self.agent, Activity::Working);
                let answer = crate::agent::heartbeat::run(
                    &self.shared,
                    &self.conversation,
                    &self.agent,
                    text,
                )
                .await;
                board.set_activity(&self.conversation, &self.agent, Activity::Idle);
                let _ = reply.send(answer);
            }
            AgentMsg::ReapIfIdle { idle, reply } => {
                let reaped = self.reap_if_idle(&myself, state, idle).await?;
                let _ = reply.send(reaped);
            }
            AgentMsg::Stop { why, reply } => {
                self.end_live_session(state, why).await?;
                myself.stop(Some(why.as_str().into()));
                let _ = reply.send(());
            }
            AgentMsg::Reset { reply } => {
                state.turn.live_session = None;
                // A message taken in before the reset is answered afresh after it.
                state.turn.delivered = legio_core::Seq::ZERO;
                let result = self
                    .shared
                    .record_reset(&self.conversation, &self.agent)
                    .await;
                let _ = reply.send(result);
            }
        }
        Ok(())
    }
}

impl AgentActor {
    /// The agent as the turn functions see it, routing `dispatch` through its supervisor.
    fn turn_agent(&self) -> turn::Agent {
        turn::Agent {
            shared: Arc::clone(&self.shared),
            conversation: self.conversation.clone(),
            name: self.agent.clone(),
            route: Arc::new(self.supervisor.clone()),
        }
    }

    async fn reap_if_idle(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        idle: Duration,
    ) -> Result<bool, RuntimeError> {
        let reaped = state.last_active.elapsed() >= idle;
        if reaped {
            self.end_live_session(state, BoundaryReason::Idle).await?;
            metrics::counter!(m::REAPED).increment(1);
            myself.stop(Some("reaped".into()));
        }
        Ok(reaped)
    }

    /// Ends this actor's live session, if it still is the open one: suspended when the provider
    /// can resume it, closed when not.
    async fn end_live_session(
        &self,
        state: &mut AgentState,
        why: BoundaryReason,
    ) -> Result<(), RuntimeError> {
        let Some(live) = state.turn.live_session.take() else {
            return Ok(());
        };
        let (conversation, agent) = (self.conversation.clone(), self.agent.clone());
        let current = self
            .shared
            .read(move |log| log.session_state(&conversation, &agent))
            .await?
            .and_then(|s| s.current);
        let Some(current) =
            current.filter(|c| c.session == live && c.status == legio_core::SessionStatus::Open)
        else {
            return Ok(());
        };
        let spec = self.shared.roster_spec(&self.agent)?;
        let history = self.shared.provider(spec)?.capabilities().history;
        let end = stop_session(&current, history, why);
        let event = end_event(&state.agent, live, end);
        self.shared.append(vec![event]).await?;
        record_end(end);
        Ok(())
    }
}
