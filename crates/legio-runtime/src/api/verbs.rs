//! The runtime's verbs on a conversation as its host calls them (besides posting, posting.rs):
//! each checks what it is given and runs its command (command/) where the conversation runs.
//! Heartbeats, resets and status here; host tools' declarations and results, and an MCP
//! client's tool calls, in host_tools.rs.

use legio_config::Role;
use legio_core::{AgentName, AgentSessionState, ConversationKey};

use crate::command::{Activities, Heartbeat, Reset};
use crate::error::RuntimeError;
use crate::names::IntoName;
use crate::reply::AgentReply;
use crate::runtime::Runtime;
use crate::status::Activity;

/// One agent's status in a conversation.
#[derive(Clone, Debug)]
pub struct AgentStatus {
    /// The agent.
    pub agent: AgentName,
    /// Its role.
    pub role: Role,
    /// What it is doing now.
    pub activity: Activity,
    /// Its session state from the log, if it ever had a session here.
    pub session: Option<AgentSessionState>,
}

impl Runtime {
    /// A heartbeat: `agent` answers `text` with no history. Its provider gets only the system
    /// prompt and the text (never its live provider session); the exchange is recorded as one
    /// `HeartbeatRan` event, not as messages, so no later context shows it, and the agent's
    /// session is untouched. Runs in the agent's actor between its turns. A failed call is an
    /// error reply (recorded too), as in [`Runtime::post`].
    pub async fn heartbeat(
        &self,
        conversation: impl IntoName<ConversationKey>,
        agent: impl IntoName<AgentName>,
        text: &str,
    ) -> Result<AgentReply, RuntimeError> {
        let heartbeat = Heartbeat {
            conversation: Self::host_conversation(conversation)?,
            agent: self.roster_agent(agent)?,
            text: text.to_owned(),
        };
        heartbeat.check(self)?;
        self.run(heartbeat, None).await
    }

    /// A manual reset: closes the agent's session (and clears a failed agent); its next turn opens
    /// a new session restored from the log.
    pub async fn reset(
        &self,
        conversation: impl IntoName<ConversationKey>,
        agent: impl IntoName<AgentName>,
    ) -> Result<(), RuntimeError> {
        let reset = Reset {
            conversation: Self::host_conversation(conversation)?,
            agent: self.roster_agent(agent)?,
        };
        self.check_running()?;
        self.run(reset, None).await
    }

    /// Every agent's status in a conversation, in roster order.
    pub async fn status(
        &self,
        conversation: impl IntoName<ConversationKey>,
    ) -> Result<Vec<AgentStatus>, RuntimeError> {
        let key = conversation.into_name()?;
        self.catch_up(&key).await?;
        let lookup = key.clone();
        let states = self
            .shared
            .read(move |log| log.session_states(&lookup))
            .await?;
        let board = self.board(&key).await;
        Ok(self
            .shared
            .config
            .agents
            .iter()
            .map(|spec| {
                let session = states.iter().find(|s| s.agent == spec.name).cloned();
                let failed = session.as_ref().is_some_and(|s| s.failed.is_some());
                let activity = match board.iter().find(|(agent, _)| *agent == spec.name) {
                    _ if failed => Activity::Failed,
                    Some((_, activity)) => *activity,
                    None => Activity::Idle,
                };
                AgentStatus {
                    agent: spec.name.clone(),
                    role: spec.role,
                    activity,
                    session,
                }
            })
            .collect())
    }

    /// What each agent of `conversation` is doing where its actors run: here, or on a cluster
    /// on the node holding the conversation (asked over the bus; this node's own board, where
    /// they all idle, if that node cannot answer). Nobody holding it, no lease is taken.
    async fn board(&self, conversation: &ConversationKey) -> Vec<(AgentName, Activity)> {
        let ask = Activities {
            conversation: conversation.clone(),
        };
        let answer = self.run(ask, None).await;
        answer.unwrap_or_else(|e| {
            tracing::debug!(conversation = %conversation, error = %e, "the owner did not say what its agents are doing");
            self.board_here(conversation)
        })
    }
}
