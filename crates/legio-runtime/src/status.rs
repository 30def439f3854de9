//! What an agent is doing right now (idle, working, restarting, failed). Live, in-memory and
//! derived: kept in the conversation's entry (conversation/), a restarted process starts with
//! every agent idle, and failed agents are read back from the log.

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
