//! The root supervisor: owns the conversation supervisors, routes every message from outside a
//! conversation to its supervisor (starting it on first need), and retires a supervisor whose
//! agents were all reaped, so a conversation nobody talks to costs nothing in memory.
//!
//! Retirement is race-free because the root serializes it with the routing: a supervisor that
//! runs no agent asks ([`RootMsg::Retire`]); the root takes it out of its map, queues what comes
//! for the conversation from then on and sends it [`ConversationMsg::Retire`], behind everything
//! it routed to it before. The supervisor stops only if it still runs no agent when that message
//! is handled (else it answers [`RootMsg::Stay`] and the root hands it the queue); its
//! termination hands the queue to a fresh supervisor. So a post reaches either the old
//! supervisor before it retires or a new one after, never a supervisor that is stopping.
//! Once a conversation runs nothing here (retired with nothing queued), the root tells the
//! cluster's ownership layer, which may release its lease (placement/ownership.rs).

use std::collections::HashMap;
use std::sync::Arc;

use legio_core::ConversationKey;
use ractor::{Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent};

use crate::agent::supervisor::ConversationSupervisor;
use crate::messages::{ConversationMsg, RootMsg};
use crate::shared::Shared;

pub(crate) struct RootSupervisor {
    pub(crate) shared: Arc<Shared>,
}

/// A supervisor asked to retire, and what came for its conversation since.
struct Retiring {
    supervisor: ActorRef<ConversationMsg>,
    queue: Vec<ConversationMsg>,
}

pub(crate) struct RootState {
    conversations: HashMap<ConversationKey, ActorRef<ConversationMsg>>,
    by_actor: HashMap<ActorId, ConversationKey>,
    retiring: HashMap<ConversationKey, Retiring>,
}

impl Actor for RootSupervisor {
    type Msg = RootMsg;
    type State = RootState;
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        _args: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(RootState {
            conversations: HashMap::new(),
            by_actor: HashMap::new(),
            retiring: HashMap::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            RootMsg::Route {
                conversation,
                message,
            } => self.route(&myself, state, conversation, message).await,
            RootMsg::All { reply } => {
                let _ = reply.send(state.conversations.values().cloned().collect());
            }
            RootMsg::Retire {
                conversation,
                supervisor,
            } => ask_to_retire(state, conversation, supervisor),
            RootMsg::Stay {
                conversation,
                supervisor,
            } => {
                if state
                    .retiring
                    .get(&conversation)
                    .is_some_and(|r| r.supervisor.get_id() == supervisor)
                {
                    if let Some(retiring) = state.retiring.remove(&conversation) {
                        let Retiring { supervisor, queue } = retiring;
                        state.conversations.insert(conversation.clone(), supervisor);
                        for message in queue {
                            self.route(&myself, state, conversation.clone(), message)
                                .await;
                        }
                    }
                }
            }
            RootMsg::Release { conversation } => {
                if !state.conversations.contains_key(&conversation)
                    && !state.retiring.contains_key(&conversation)
                {
                    self.shared.retired(&conversation);
                }
            }
            RootMsg::StandDown {
                conversation,
                reply,
            } => match state.conversations.remove(&conversation) {
                Some(supervisor) => {
                    // Killed, not shut down: this node may append nothing more to it.
                    let _ = supervisor.send_message(ConversationMsg::Kill { reply });
                }
                // Retiring (it runs no agent) or not running: nothing to stop.
                None => {
                    let _ = reply.send(());
                }
            },
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let cell: Option<ActorCell> = match event {
            SupervisionEvent::ActorFailed(cell, error) => {
                tracing::error!(error = %error, "a conversation supervisor failed; its agents are stopped and restart on the next turn");
                // Its agents would be orphans: stop them; the next turn starts everything afresh
                // from the log (their open sessions are cleaned up as crashed).
                for child in cell.get_children() {
                    child.kill();
                }
                Some(cell)
            }
            SupervisionEvent::ActorTerminated(cell, _, _) => Some(cell),
            _ => None,
        };
        let Some(cell) = cell else { return Ok(()) };
        let id = cell.get_id();
        let Some(conversation) = state.by_actor.remove(&id) else {
            return Ok(());
        };
        if state
            .conversations
            .get(&conversation)
            .is_some_and(|s| s.get_id() == id)
        {
            state.conversations.remove(&conversation);
        }
        if state
            .retiring
            .get(&conversation)
            .is_some_and(|r| r.supervisor.get_id() == id)
        {
            // Retired: what came meanwhile goes to a fresh supervisor; if nothing did, the
            // conversation runs nothing here now (on a cluster its lease may go).
            if let Some(retiring) = state.retiring.remove(&conversation) {
                if retiring.queue.is_empty() {
                    self.shared.retired(&conversation);
                }
                for message in retiring.queue {
                    self.route(&myself, state, conversation.clone(), message)
                        .await;
                }
            }
        }
        Ok(())
    }
}

/// A supervisor's request to retire: granted if it is the conversation's current one.
fn ask_to_retire(state: &mut RootState, conversation: ConversationKey, supervisor: ActorId) {
    let current = state
        .conversations
        .get(&conversation)
        .is_some_and(|s| s.get_id() == supervisor);
    if !current || state.retiring.contains_key(&conversation) {
        return;
    }
    if let Some(supervisor) = state.conversations.remove(&conversation) {
        // If it is gone already, its termination ends the retirement.
        let _ = supervisor.send_message(ConversationMsg::Retire);
        state.retiring.insert(
            conversation,
            Retiring {
                supervisor,
                queue: Vec::new(),
            },
        );
    }
}

impl RootSupervisor {
    /// Sends `message` to the conversation's supervisor, starting it if there is none; queues it
    /// while the supervisor is retiring.
    async fn route(
        &self,
        myself: &ActorRef<RootMsg>,
        state: &mut RootState,
        conversation: ConversationKey,
        message: ConversationMsg,
    ) {
        if let Some(retiring) = state.retiring.get_mut(&conversation) {
            retiring.queue.push(message);
            return;
        }
        let mut message = message;
        // Twice at most: a supervisor that died before its termination reached the root is
        // replaced once.
        for _ in 0..2 {
            let supervisor = match state.conversations.get(&conversation) {
                Some(existing) => existing.clone(),
                None => match self.spawn(myself, state, &conversation).await {
                    Ok(supervisor) => supervisor,
                    Err(reason) => {
                        message.refuse(&reason);
                        return;
                    }
                },
            };
            match supervisor.send_message(message) {
                Ok(()) => return,
                Err(ractor::MessagingErr::SendErr(back)) => {
                    state.conversations.remove(&conversation);
                    message = back;
                }
                Err(_) => return,
            }
        }
        message.refuse("its supervisor stopped as the message arrived");
    }

    async fn spawn(
        &self,
        myself: &ActorRef<RootMsg>,
        state: &mut RootState,
        conversation: &ConversationKey,
    ) -> Result<ActorRef<ConversationMsg>, String> {
        let supervisor = ConversationSupervisor {
            shared: Arc::clone(&self.shared),
            conversation: conversation.clone(),
            root: myself.clone(),
        };
        match Actor::spawn_linked(None, supervisor, (), myself.get_cell()).await {
            Ok((actor, _handle)) => {
                state.by_actor.insert(actor.get_id(), conversation.clone());
                state
                    .conversations
                    .insert(conversation.clone(), actor.clone());
                Ok(actor)
            }
            Err(e) => Err(format!(
                "cannot start the supervisor of {conversation}: {e}"
            )),
        }
    }
}
