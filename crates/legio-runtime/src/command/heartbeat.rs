//! `heartbeat`: an agent answers a text with no history. Its provider gets only the system
//! prompt and the text (never its live provider session); the exchange is recorded as one
//! `HeartbeatRan` event, not as messages, so no later context shows it. Runs on the
//! conversation's owner, in the agent's actor between its turns.

use legio_core::{AgentName, ConversationKey};
use serde::{Deserialize, Serialize};

use super::{Command, Place};
use crate::error::RuntimeError;
use crate::messages::Job;
use crate::placement::Here;
use crate::progress::ProgressSink;
use crate::reply::{AgentReply, TurnErrorKind};
use crate::runtime::Runtime;

/// `agent`'s heartbeat in `conversation`: it answers `text`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Heartbeat {
    pub(crate) conversation: ConversationKey,
    pub(crate) agent: AgentName,
    pub(crate) text: String,
}

impl Heartbeat {
    /// What refuses it before it runs: a stopped runtime, an empty text.
    pub(crate) fn check(&self, runtime: &Runtime) -> Result<(), RuntimeError> {
        runtime.check_running()?;
        if self.text.trim().is_empty() {
            return Err(RuntimeError::EmptyMessage);
        }
        Ok(())
    }
}

impl Command for Heartbeat {
    type Answer = AgentReply;
    const KIND: &'static str = "heartbeat";
    const PLACE: Place = Place::Owner;

    fn conversation(&self) -> &ConversationKey {
        &self.conversation
    }

    async fn run(
        self,
        runtime: &Runtime,
        _here: Here,
        _progress: Option<ProgressSink>,
    ) -> Result<AgentReply, RuntimeError> {
        self.check(runtime)?;
        let job = Job::Heartbeat { text: self.text };
        let agent = std::slice::from_ref(&self.agent);
        let mut replies = runtime.dispatch(&self.conversation, job, agent, None).await;
        Ok(replies.pop().unwrap_or_else(|| {
            AgentReply::failed(
                &self.agent,
                TurnErrorKind::Runtime,
                "no reply to the heartbeat",
            )
        }))
    }
}
