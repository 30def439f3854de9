//! The runtime's API, what a host (the server, the CLI, an embedding program) calls: open a
//! runtime (open.rs), post a message (posting.rs), the other verbs on a conversation (verbs.rs,
//! host_tools.rs, approvals.rs), and what it reads (reads.rs). Each verb runs a command (command/) through
//! the one path that runs it here or on the node that owns its conversation; shutdown and the
//! reaper are the runtime's own (runtime.rs).

mod approvals;
mod host_tools;
mod open;
mod posting;
mod reads;
mod verbs;

pub use open::RuntimeBuilder;
pub use posting::Posting;
pub use verbs::AgentStatus;
