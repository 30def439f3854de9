//! One message in a context ([`ContextItem`]): the vocabulary the planner (context.rs), the
//! tool-call rules and compaction share, in a module that depends on none of them.

use serde::{Deserialize, Serialize};

use crate::message::Message;
use crate::seq::Seq;

/// One message in a context.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct ContextItem {
    /// Its seq in the log.
    pub seq: Seq,
    /// The message.
    pub message: Message,
    /// The provider may have received it already (see the context module's docs).
    pub redelivered: bool,
}
