//! The actors' messages: what the runtime, the supervisors and the agent actors send each other.
//! A leaf module (it names no actor), so the actors, the dispatch and the API do not import each
//! other in circles.

use std::sync::Arc;
use std::time::Duration;

use legio_core::{AgentName, BoundaryReason, ConversationKey, MessageId, Seq};
use ractor::{ActorId, ActorRef};
use tokio::sync::oneshot;

use crate::error::RuntimeError;
use crate::progress::ProgressSink;
use crate::reply::AgentReply;
use crate::tools::memory::ToolSpec;

/// The message a turn answers, and where to report the turn's progress (if anyone listens).
#[derive(Clone, Debug)]
pub(crate) struct TurnRequest {
    pub(crate) seq: Seq,
    pub(crate) id: MessageId,
    pub(crate) progress: Option<ProgressSink>,
    /// Tools the host runs, offered on this turn (tools/host_desk.rs); only with a `progress` sink,
    /// through which their calls reach the host.
    pub(crate) host_tools: Option<Arc<[ToolSpec]>>,
    /// A keyed post's retry (keyed.rs): the agent may have answered the message already, before
    /// a restart too; the log says, and its reply is given instead of a new one.
    pub(crate) replayed: bool,
}

/// Work for an agent, queued in its order by the supervisor: a turn, or a heartbeat (a host's
/// text answered with no history, recorded as `HeartbeatRan`; see heartbeat.rs).
#[derive(Clone, Debug)]
pub(crate) enum Job {
    Turn(TurnRequest),
    Heartbeat {
        text: String,
    },
    /// Continue the turn paused on the step whose calls are in `call_message`, once every
    /// approval it waits for is answered (tools/approval.rs).
    Resume {
        call_message: MessageId,
    },
}

impl Job {
    /// The agent actor's message for this job.
    pub(crate) fn into_msg(self, reply: oneshot::Sender<AgentReply>) -> AgentMsg {
        match self {
            Job::Turn(request) => AgentMsg::Turn { request, reply },
            Job::Heartbeat { text } => AgentMsg::Heartbeat { text, reply },
            Job::Resume { call_message } => AgentMsg::Resume {
                call_message,
                reply,
            },
        }
    }
}

pub(crate) enum AgentMsg {
    Turn {
        request: TurnRequest,
        reply: oneshot::Sender<AgentReply>,
    },
    /// Between turns, outside the session: no boundary, no checkpoint, no idle reset.
    Heartbeat {
        text: String,
        reply: oneshot::Sender<AgentReply>,
    },
    /// Continue a paused turn (a tool loop, in the session like a turn).
    Resume {
        call_message: MessageId,
        reply: oneshot::Sender<AgentReply>,
    },
    /// Stop if idle longer than `idle`; answers whether it stopped.
    ReapIfIdle {
        idle: Duration,
        reply: oneshot::Sender<bool>,
    },
    /// Graceful stop: suspend (or close) the session as `why`, then stop.
    Stop {
        why: BoundaryReason,
        reply: oneshot::Sender<()>,
    },
    /// Manual reset: close the session; the next turn opens a new one.
    Reset {
        reply: oneshot::Sender<Result<(), RuntimeError>>,
    },
}

impl AgentMsg {
    /// The job and reply channel of a turn or heartbeat message (that could not be delivered).
    pub(crate) fn into_job(self) -> Option<(Job, oneshot::Sender<AgentReply>)> {
        match self {
            AgentMsg::Turn { request, reply } => Some((Job::Turn(request), reply)),
            AgentMsg::Heartbeat { text, reply } => Some((Job::Heartbeat { text }, reply)),
            AgentMsg::Resume {
                call_message,
                reply,
            } => Some((Job::Resume { call_message }, reply)),
            _ => None,
        }
    }
}

pub(crate) enum ConversationMsg {
    Work {
        agent: AgentName,
        job: Job,
        reply: oneshot::Sender<AgentReply>,
    },
    Respawn {
        agent: AgentName,
    },
    Reap {
        idle: Duration,
        reply: oneshot::Sender<usize>,
    },
    /// The answers of a reap: (agent, actor, whether it stopped).
    ReapDone {
        results: Vec<(AgentName, ActorId, bool)>,
    },
    Reset {
        agent: AgentName,
        reply: oneshot::Sender<Result<(), RuntimeError>>,
    },
    Shutdown {
        reply: oneshot::Sender<()>,
    },
    Kill {
        reply: oneshot::Sender<()>,
    },
    /// From the root, which asked nothing more of this supervisor since it asked to retire: stop
    /// if it still runs no agent, else answer [`RootMsg::Stay`].
    Retire,
}

impl ConversationMsg {
    /// Answers the caller of a message that cannot reach a supervisor (its start failed) with
    /// `reason`; a message without a caller is dropped.
    pub(crate) fn refuse(self, reason: &str) {
        match self {
            ConversationMsg::Work { agent, reply, .. } => {
                let _ = reply.send(AgentReply::failed(
                    &agent,
                    crate::reply::TurnErrorKind::Unavailable,
                    reason,
                ));
            }
            ConversationMsg::Reset { reply, .. } => {
                let _ = reply.send(Err(RuntimeError::SupervisorStart {
                    what: "a conversation supervisor".to_owned(),
                    source: legio_store::ErrorSource::new(reason.to_owned()),
                }));
            }
            _ => {}
        }
    }
}

pub(crate) enum RootMsg {
    /// A message for a conversation's supervisor, which the root starts on first need. Every
    /// message from outside a conversation goes this way, so the root knows what it sent each
    /// supervisor before it lets one retire.
    Route {
        conversation: ConversationKey,
        message: ConversationMsg,
    },
    /// From a supervisor that runs no agent: it asks to retire. The root stops routing to it,
    /// queues what comes for the conversation and sends it [`ConversationMsg::Retire`].
    Retire {
        conversation: ConversationKey,
        supervisor: ActorId,
    },
    /// From a supervisor that got work before the root's [`ConversationMsg::Retire`]: it stays,
    /// and the root sends it what it queued meanwhile.
    Stay {
        conversation: ConversationKey,
        supervisor: ActorId,
    },
    All {
        reply: oneshot::Sender<Vec<ActorRef<ConversationMsg>>>,
    },
    /// On a cluster, from the reaper: if the conversation runs no supervisor here, tell the
    /// ownership layer it is idle (it may release its lease).
    Release { conversation: ConversationKey },
    /// Stops a conversation's actors at once, recording nothing (this node no longer owns it:
    /// see placement/ownership.rs); answers when they are stopped.
    StandDown {
        conversation: ConversationKey,
        reply: oneshot::Sender<()>,
    },
}
