//! The one home of "post to these agents and gather their replies", used by `Runtime::post` (and
//! `heartbeat`) and by the orchestrator's `dispatch` tool: each target gets the job through its
//! conversation's supervisor, in parallel; the replies come back in the targets' order, a lost
//! or late one turned into an error reply for that agent only, worded the same for both callers.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use legio_core::{AgentName, ConversationKey};
use ractor::ActorRef;
use tokio::sync::oneshot;

use crate::messages::{ConversationMsg, Job, RootMsg};
use crate::progress::{Progress, ProgressSink};
use crate::reply::{AgentReply, TurnErrorKind};
use crate::shared::DispatchTicket;

/// A future that says whether a message was delivered.
pub(crate) type Sent<'a> = Pin<Box<dyn Future<Output = bool> + Send + 'a>>;

/// Where jobs go: a conversation's supervisor, directly (the `dispatch` tool, from inside the
/// conversation) or looked up by the runtime (`Runtime::post`).
pub(crate) trait Route: Send + Sync {
    /// Sends `message` to the conversation's supervisor; `false` when it cannot be delivered.
    fn send(&self, message: ConversationMsg) -> Sent<'_>;
}

impl Route for ActorRef<ConversationMsg> {
    fn send(&self, message: ConversationMsg) -> Sent<'_> {
        let sent = self.send_message(message).is_ok();
        Box::pin(std::future::ready(sent))
    }
}

/// A conversation's supervisor through the root, which starts it on first need and serializes
/// the routing with its retirement (root.rs): every sender from outside the conversation.
pub(crate) struct RootRoute {
    pub(crate) root: ActorRef<RootMsg>,
    pub(crate) conversation: ConversationKey,
}

impl Route for RootRoute {
    fn send(&self, message: ConversationMsg) -> Sent<'_> {
        let routed = RootMsg::Route {
            conversation: self.conversation.clone(),
            message,
        };
        Box::pin(std::future::ready(self.root.send_message(routed).is_ok()))
    }
}

/// Sends `job` to each of `targets` and waits up to `wait` for each reply, in order. With a
/// `progress` listener, each agent's `AgentDone` goes out as soon as its reply is in. The
/// `ticket` of the message the job answers (see `Shared::append_for_dispatch`) is dropped once
/// every job is sent, so the conversation's next message may send its own.
pub(crate) async fn gather(
    route: &dyn Route,
    job: Job,
    targets: &[AgentName],
    wait: Duration,
    progress: Option<&ProgressSink>,
    ticket: Option<DispatchTicket>,
) -> Vec<AgentReply> {
    let mut pending = Vec::with_capacity(targets.len());
    for agent in targets {
        let (tx, rx) = oneshot::channel();
        let message = ConversationMsg::Work {
            agent: agent.clone(),
            job: job.clone(),
            reply: tx,
        };
        let sent = route.send(message).await;
        let reply = wait_reply(agent.clone(), sent, rx, wait);
        pending.push(match progress {
            Some(progress) => {
                let progress = progress.clone();
                Pending::Spawned(tokio::spawn(async move {
                    let reply = reply.await;
                    let _ = progress.send(Progress::AgentDone {
                        reply: reply.clone(),
                    });
                    reply
                }))
            }
            None => Pending::Inline(Box::pin(reply)),
        });
    }
    drop(ticket);
    let mut replies = Vec::with_capacity(pending.len());
    for (pending, agent) in pending.into_iter().zip(targets) {
        replies.push(match pending {
            Pending::Inline(reply) => reply.await,
            Pending::Spawned(task) => task.await.unwrap_or_else(|e| {
                AgentReply::failed(
                    agent,
                    TurnErrorKind::Runtime,
                    format!("waiting for {agent} failed: {e}"),
                )
            }),
        });
    }
    replies
}

/// A reply being waited for: in place, or on its own task (to report progress as it comes).
enum Pending {
    Inline(Pin<Box<dyn Future<Output = AgentReply> + Send>>),
    Spawned(tokio::task::JoinHandle<AgentReply>),
}

/// Waits for one agent's reply, turning a lost or late one into an error reply.
async fn wait_reply(
    agent: AgentName,
    sent: bool,
    rx: oneshot::Receiver<AgentReply>,
    wait: Duration,
) -> AgentReply {
    if !sent {
        return AgentReply::failed(&agent, TurnErrorKind::ShutDown, "the runtime is shut down");
    }
    match tokio::time::timeout(wait, rx).await {
        Ok(Ok(reply)) => reply,
        Ok(Err(_)) => AgentReply::failed(
            &agent,
            TurnErrorKind::Crashed,
            format!("{agent} crashed during the turn and is being restarted"),
        ),
        Err(_) => AgentReply::failed(
            &agent,
            TurnErrorKind::Timeout,
            format!("{agent} did not answer within {} s", wait.as_secs()),
        ),
    }
}
