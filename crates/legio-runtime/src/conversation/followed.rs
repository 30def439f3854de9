//! A followed turn, as the conversation table keeps it: who follows it now, the host calls it
//! announced, whether it ended. tools/follow.rs passes the turn's progress on and hands the turn
//! over; this is only its state.

use legio_core::MessageId;
use tokio::sync::oneshot;

use crate::progress::ProgressSink;
use crate::reply::Posted;
use crate::tools::host_calls::HostToolCall;

/// How a followed turn ended for its follower.
#[derive(Debug)]
pub(crate) enum Ended {
    /// The turn's replies.
    Replies(Posted),
    /// Later results took the turn over: it goes on, followed by their request.
    TakenOver,
}

/// Where a turn's progress goes, and who gets its end (none: the turn's caller, who gets the
/// replies from its post). A follower whose `end` is dropped unsent lost the turn: its runtime
/// stopped, or its caller gave the post up.
pub(crate) struct Follower {
    pub(crate) progress: ProgressSink,
    pub(crate) end: Option<oneshot::Sender<Ended>>,
}

/// A turn as its relay and its calls share it: its follower of the moment, the host calls it
/// announced (to announce those still waiting again to a follower that takes it over), and
/// whether it ended (then nobody may take it over).
pub(crate) struct FollowedTurn {
    /// The message the turn answers: a keyed post's retry follows its first attempt's turn.
    pub(crate) message: MessageId,
    pub(crate) follower: Follower,
    pub(crate) announced: Vec<HostToolCall>,
    pub(crate) ended: bool,
}
