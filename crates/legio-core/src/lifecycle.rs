//! Session lifecycle decisions: given an agent's session state from the log, what boundary (if
//! any) to record and how the next turn's session gets its context. Pure: the runtime appends the
//! events this returns and acts on the plan.

use crate::event::{BoundaryReason, OpenReason, SessionStart};
use crate::seq::Seq;
use crate::session::{AgentSessionState, SessionStatus};

/// How a provider keeps conversation history.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum History {
    /// It keeps none: every request carries the (windowed) history.
    Stateless,
    /// It keeps its own thread per session; `resumable` if a session survives our process.
    Session {
        /// Whether a provider session can be resumed after the actor or the process stops.
        resumable: bool,
    },
}

impl History {
    /// Whether the provider keeps its own history.
    pub fn is_stateful(self) -> bool {
        matches!(self, Self::Session { .. })
    }

    /// Whether a session can be resumed after a stop.
    pub fn is_resumable(self) -> bool {
        matches!(self, Self::Session { resumable: true })
    }

    /// The capability as the configuration's word: `stateless`, `session` or
    /// `session-not-resumable`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stateless => "stateless",
            Self::Session { resumable: true } => "session",
            Self::Session { resumable: false } => "session-not-resumable",
        }
    }
}

/// Ending the current session before the turn.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct EndSession {
    /// Suspend (provider session kept) rather than close.
    pub suspend: bool,
    /// Why.
    pub why: BoundaryReason,
}

/// How the session for the turn gets its context.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Start {
    /// Keep the current open session.
    Continue,
    /// Open a new session without provider state: stateless providers.
    OpenStateless {
        /// Why it is opened.
        why: OpenReason,
    },
    /// Open a new provider session and bootstrap it from the log.
    OpenBootstrap {
        /// Why it is opened.
        why: OpenReason,
    },
    /// Open a legio session that resumes an existing provider session.
    OpenResume {
        /// Why it is opened.
        why: OpenReason,
        /// The provider's session id.
        provider_session: String,
        /// What it already holds.
        checkpoint: Seq,
    },
}

impl std::fmt::Display for Start {
    /// Plain words for operators: `continue the open session`, `open a session resuming provider
    /// session S at #N (after shutdown)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Continue => f.write_str("continue the open session"),
            Self::OpenStateless { why } => write!(f, "open a stateless session ({why})"),
            Self::OpenBootstrap { why } => {
                write!(f, "open a new provider session bootstrapped from the log ({why})")
            }
            Self::OpenResume {
                why,
                provider_session,
                checkpoint,
            } => write!(
                f,
                "open a session resuming provider session {provider_session} at #{checkpoint} ({why})"
            ),
        }
    }
}

/// What the context of the turn is.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Delivery {
    /// The windowed history (stateless providers).
    Full,
    /// The windowed history as a bootstrap block, with a notice if the session was restored.
    Bootstrap {
        /// The restored-from-the-log notice, if the session follows a boundary.
        notice: Option<String>,
    },
    /// Only what the session has not seen since `checkpoint`.
    Delta {
        /// The session's checkpoint.
        checkpoint: Seq,
    },
}

/// The decision for one turn.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SessionDecision {
    /// A boundary to record first, if any.
    pub end: Option<EndSession>,
    /// How the turn's session starts.
    pub start: Start,
    /// What context the turn sends.
    pub delivery: Delivery,
}

/// The facts a decision needs.
#[derive(Clone, Copy, Debug)]
pub struct SessionFacts<'a> {
    /// The agent's session state from the log (`None`: never had one).
    pub state: Option<&'a AgentSessionState>,
    /// Whether this actor opened the current session itself (false after an actor or process
    /// restart: an open session in the log is then a leftover of a crash).
    pub live: bool,
    /// The provider's history capability.
    pub history: History,
    /// The hash of the system prompt the turn would use.
    pub prompt_hash: &'a str,
    /// Rotate a stateful session once its cumulative input tokens exceed this.
    pub max_input_tokens: u64,
}

/// The notice a restored session gets, naming why it was restored.
pub fn restored_notice(why: BoundaryReason) -> String {
    let cause = match why {
        BoundaryReason::Idle => "an idle pause",
        BoundaryReason::TokenCeiling => "the previous session grew too long",
        BoundaryReason::PromptChanged => "a change of your instructions",
        BoundaryReason::ManualReset => "a manual reset",
        BoundaryReason::Crashed | BoundaryReason::Shutdown => "a restart",
        BoundaryReason::ProviderSessionLost => "the provider lost the previous session",
        BoundaryReason::AgentFailed => "a failure",
    };
    format!(
        "This conversation was restored from the log after {cause}; the messages below are the most recent ones you may see. Ask the user if something is unclear."
    )
}

/// Whether a stopped session can be resumed by a new actor: the provider resumes sessions, and
/// this one holds a provider thread (a completed turn, or resumed from one).
fn resumable(state: &crate::session::SessionInfo, history: History) -> bool {
    let holds_thread = state.turns > 0 || matches!(state.how, SessionStart::Resumed { .. });
    history.is_resumable() && state.provider_session.is_some() && holds_thread
}

/// How to end `current` for `why` when its actor stops: suspended if the provider can resume it
/// (resumable, with a provider session and a completed turn or a resumed thread), closed if not.
pub fn stop_session(
    current: &crate::session::SessionInfo,
    history: History,
    why: BoundaryReason,
) -> EndSession {
    EndSession {
        suspend: resumable(current, history),
        why,
    }
}

/// The crash-cleanup boundary for an actor that starts: an open session left in the log by a dead
/// actor or process is suspended (if it can be resumed) or closed, as crashed. `None` when the
/// latest session is not open.
pub fn crash_cleanup(state: Option<&AgentSessionState>, history: History) -> Option<EndSession> {
    let current = state?.current.as_ref()?;
    (current.status == SessionStatus::Open)
        .then(|| stop_session(current, history, BoundaryReason::Crashed))
}

/// Whether a manual reset has anything to do: a latest session not closed, or a failure to
/// clear. Not when there is no session and no failure, or a latest session already closed and
/// no failure (a second reset, or one of an agent never used), so that a reset never writes a
/// conversation the log did not have, nor closes a session twice.
pub fn resettable(state: Option<&AgentSessionState>) -> bool {
    state.is_some_and(|state| {
        let open = state
            .current
            .as_ref()
            .is_some_and(|c| c.status != SessionStatus::Closed);
        open || state.failed.is_some()
    })
}

/// The event of a manual reset: the agent's latest session closed as `manual_reset` (the nil
/// session id when a failed agent never had one); folding it also clears a failed agent. `None`
/// when there is nothing to reset ([`resettable`]).
pub fn manual_reset(
    state: Option<&AgentSessionState>,
    conversation: &crate::name::ConversationKey,
    agent: &crate::name::AgentName,
    at: crate::timestamp::Timestamp,
) -> Option<crate::event::Event> {
    if !resettable(state) {
        return None;
    }
    let current = state.and_then(|s| s.current.as_ref());
    let session = current.map_or(crate::event::SessionId(uuid::Uuid::nil()), |c| c.session);
    Some(crate::event::Event::SessionClosed(
        crate::event::SessionEnded {
            conversation: conversation.clone(),
            agent: agent.clone(),
            session,
            at,
            why: BoundaryReason::ManualReset,
        },
    ))
}

/// Decides how the next turn's session starts and what it is sent.
pub fn decide_session(facts: SessionFacts<'_>) -> SessionDecision {
    let Some(current) = facts.state.and_then(|s| s.current.as_ref()) else {
        return open_new(facts.history, OpenReason::FirstUse, None);
    };
    let prompt_changed = current.prompt_hash != facts.prompt_hash;
    let over_ceiling =
        facts.history.is_stateful() && current.usage.context_tokens() > facts.max_input_tokens;
    match current.status {
        SessionStatus::Open if facts.live => {
            if prompt_changed {
                return rotate(facts.history, BoundaryReason::PromptChanged);
            }
            if over_ceiling {
                return rotate(facts.history, BoundaryReason::TokenCeiling);
            }
            let delivery = match facts.history {
                History::Stateless => Delivery::Full,
                // A bootstrapped session none of whose turns completed: the provider may hold
                // nothing yet, so bootstrap again. A resumed session's provider thread already
                // holds everything up to its checkpoint: it always continues with the delta.
                History::Session { .. }
                    if current.turns == 0
                        && !matches!(current.how, SessionStart::Resumed { .. }) =>
                {
                    Delivery::Bootstrap {
                        notice: match current.why {
                            OpenReason::FirstUse => None,
                            OpenReason::After(why) => Some(restored_notice(why)),
                        },
                    }
                }
                History::Session { .. } => Delivery::Delta {
                    checkpoint: current.checkpoint,
                },
            };
            SessionDecision {
                end: None,
                start: Start::Continue,
                delivery,
            }
        }
        // Left open by a dead actor or process (normally cleaned up when the actor starts).
        SessionStatus::Open => after_stop(
            facts,
            current,
            BoundaryReason::Crashed,
            true,
            prompt_changed,
            over_ceiling,
        ),
        SessionStatus::Suspended => {
            let why = current.ended.unwrap_or(BoundaryReason::Crashed);
            after_stop(facts, current, why, false, prompt_changed, over_ceiling)
        }
        SessionStatus::Closed => {
            let why = current.ended.unwrap_or(BoundaryReason::Crashed);
            open_new(facts.history, OpenReason::After(why), Some(why))
        }
    }
}

/// The session stopped (suspended, or still open after a crash): resume it when the provider can,
/// otherwise end it for good and open a new one. Either way the old session ends exactly once.
fn after_stop(
    facts: SessionFacts<'_>,
    current: &crate::session::SessionInfo,
    why: BoundaryReason,
    crashed_open: bool,
    prompt_changed: bool,
    over_ceiling: bool,
) -> SessionDecision {
    if resumable(current, facts.history) && !prompt_changed && !over_ceiling {
        if let Some(provider_session) = &current.provider_session {
            return SessionDecision {
                end: crashed_open.then_some(EndSession {
                    suspend: true,
                    why: BoundaryReason::Crashed,
                }),
                start: Start::OpenResume {
                    why: OpenReason::After(why),
                    provider_session: provider_session.clone(),
                    checkpoint: current.checkpoint,
                },
                delivery: Delivery::Delta {
                    checkpoint: current.checkpoint,
                },
            };
        }
    }
    let reason = if prompt_changed {
        BoundaryReason::PromptChanged
    } else if over_ceiling {
        BoundaryReason::TokenCeiling
    } else {
        why
    };
    let mut decision = open_new(facts.history, OpenReason::After(reason), Some(reason));
    decision.end = Some(EndSession {
        suspend: false,
        why: if crashed_open {
            BoundaryReason::Crashed
        } else {
            reason
        },
    });
    decision
}

fn rotate(history: History, why: BoundaryReason) -> SessionDecision {
    let mut decision = open_new(history, OpenReason::After(why), Some(why));
    decision.end = Some(EndSession {
        suspend: false,
        why,
    });
    decision
}

fn open_new(
    history: History,
    why: OpenReason,
    restored_after: Option<BoundaryReason>,
) -> SessionDecision {
    match history {
        History::Stateless => SessionDecision {
            end: None,
            start: Start::OpenStateless { why },
            delivery: Delivery::Full,
        },
        History::Session { .. } => SessionDecision {
            end: None,
            start: Start::OpenBootstrap { why },
            delivery: Delivery::Bootstrap {
                notice: restored_after.map(restored_notice),
            },
        },
    }
}
