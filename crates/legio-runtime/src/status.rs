//! The status board: what each agent is doing right now (idle, working, restarting, failed).
//! Live, in-memory and derived: a restarted process starts with every agent idle, and failed
//! agents are read back from the log.

use std::collections::HashMap;
use std::sync::Mutex;

use legio_core::{AgentName, ConversationKey};

/// What an agent is doing. (Serializable: on a cluster a node asks the owner of a conversation
/// what its agents are doing.)
#[derive(Clone, Copy, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
pub enum Activity {
    /// No turn in progress.
    Idle,
    /// A turn is in progress.
    Working,
    /// Its actor failed and is being restarted.
    Restarting,
    /// Failed past its restart intensity; answers with an error until a manual reset.
    Failed,
}

impl Activity {
    /// The activity as a word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Working => "working",
            Self::Restarting => "restarting",
            Self::Failed => "failed",
        }
    }
}

/// Activities by conversation and agent.
#[derive(Debug, Default)]
pub(crate) struct StatusBoard {
    map: Mutex<HashMap<(ConversationKey, AgentName), Activity>>,
}

impl StatusBoard {
    pub(crate) fn set(
        &self,
        conversation: &ConversationKey,
        agent: &AgentName,
        activity: Activity,
    ) {
        if let Ok(mut map) = self.map.lock() {
            // Idle is what `get` answers for an agent it does not know: keep no entry for it, so
            // the board holds only agents at work (a reaped conversation costs nothing here).
            if activity == Activity::Idle {
                map.remove(&(conversation.clone(), agent.clone()));
            } else {
                map.insert((conversation.clone(), agent.clone()), activity);
            }
        }
    }

    pub(crate) fn get(&self, conversation: &ConversationKey, agent: &AgentName) -> Activity {
        self.map
            .lock()
            .ok()
            .and_then(|m| m.get(&(conversation.clone(), agent.clone())).copied())
            .unwrap_or(Activity::Idle)
    }
}
