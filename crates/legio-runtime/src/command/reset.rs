//! `reset`: a manual reset of one agent in a conversation. Its session is closed (and a failed
//! agent cleared); its next turn opens a new session restored from the log. Runs on the
//! conversation's owner, in the agent's conversation supervisor.

use legio_core::{AgentName, ConversationKey};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use super::{Command, Place};
use crate::agent::dispatch::Route;
use crate::error::RuntimeError;
use crate::messages::ConversationMsg;
use crate::placement::Here;
use crate::progress::ProgressSink;
use crate::runtime::Runtime;

/// Reset `agent` in `conversation`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Reset {
    pub(crate) conversation: ConversationKey,
    pub(crate) agent: AgentName,
}

impl Command for Reset {
    type Answer = ();
    const KIND: &'static str = "reset";
    const PLACE: Place = Place::Owner;

    fn conversation(&self) -> &ConversationKey {
        &self.conversation
    }

    async fn run(
        self,
        runtime: &Runtime,
        _here: Here,
        _progress: Option<ProgressSink>,
    ) -> Result<(), RuntimeError> {
        runtime.check_running()?;
        let (tx, rx) = oneshot::channel();
        let reset = ConversationMsg::Reset {
            agent: self.agent,
            reply: tx,
        };
        if !runtime.route_to(&self.conversation).send(reset).await {
            return Err(RuntimeError::ShutDown);
        }
        rx.await.map_err(|_| RuntimeError::ShutDown)?
    }
}
