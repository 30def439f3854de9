//! The agents: each a ractor actor that owns its provider session (actor.rs), under a
//! conversation supervisor (supervisor.rs) under the root (root.rs), restarted by its policy
//! (restart.rs); a turn (turn.rs) with what it took in meanwhile (taken_in.rs), its context fit
//! to the window (fit.rs, calibrations.rs) and compacted (compact.rs); heartbeats between turns
//! (heartbeat.rs); and dispatch, a job sent to agents and their replies gathered (dispatch.rs).

pub(crate) mod actor;
pub(crate) mod calibrations;
pub(crate) mod compact;
pub(crate) mod dispatch;
pub(crate) mod fit;
pub(crate) mod heartbeat;
pub(crate) mod instructions;
pub(crate) mod restart;
pub(crate) mod root;
pub(crate) mod supervisor;
pub(crate) mod taken_in;
pub(crate) mod turn;
