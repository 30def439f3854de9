//! `post`: a message appended durably, then its turns sent to the agents it addresses and their
//! replies gathered. No mention goes to the orchestrator, `@a @b` to each named agent in
//! parallel, `@all` to every agent; a host's turn may name the one agent it is for and offer
//! tools the host runs (tools/host_desk.rs), whose calls go out through the turn's progress. A keyed
//! post takes its id from its key, and a retry of one already stored (keyed.rs) sends the
//! stored message's turns again instead, marked `replayed`. Runs on the conversation's owner,
//! its progress streamed back to a caller on another node. Built by `api/posting.rs`.

use std::sync::Arc;

use legio_config::UnknownMentions;
use legio_core::{
    find_mentions, AgentName, Audience, ConversationKey, Event, IdempotencyKey, InstructionsGiven,
    Message, MessageId, Participant, Seq,
};
use serde::{Deserialize, Serialize};

use super::{Command, Place};
use crate::clock::{fresh_uuid, now};
use crate::error::RuntimeError;
use crate::messages::{Job, TurnRequest};
use crate::placement::Here;
use crate::progress::ProgressSink;
use crate::reply::{AgentReply, Posted};
use crate::runtime::Runtime;
use crate::shared::DispatchTicket;
use crate::tools::follow::Relay;
use crate::tools::host_desk::check_host_tools;
use crate::tools::memory::ToolSpec;

/// A message to post, checked where it was posted (and again where it runs).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Post {
    pub(crate) conversation: ConversationKey,
    pub(crate) sender: Participant,
    pub(crate) text: String,
    /// A host's turn: the one agent it is for (`None`: its mentions say).
    #[serde(default)]
    pub(crate) to: Option<AgentName>,
    /// A host's turn: the tools the host runs, the conversation's declared ones (as the node
    /// the turn reached read them) and the turn's own; their calls go out as progress and wait
    /// where the turn runs for the host's results (`SubmitResults`, `FollowResults`).
    #[serde(default)]
    pub(crate) tools: Vec<ToolSpec>,
    /// The host's idempotency key (keyed.rs).
    #[serde(default)]
    pub(crate) key: Option<IdempotencyKey>,
    /// A host's turn: its instructions for the agent it is for (agent/instructions.rs).
    #[serde(default)]
    pub(crate) instructions: Option<String>,
}

impl Command for Post {
    type Answer = Posted;
    const KIND: &'static str = "post";
    const PLACE: Place = Place::Owner;
    const STREAMS: bool = true;

    fn conversation(&self) -> &ConversationKey {
        &self.conversation
    }

    async fn run(
        self,
        runtime: &Runtime,
        _here: Here,
        progress: Option<ProgressSink>,
    ) -> Result<Posted, RuntimeError> {
        // Checked where it was posted; the tools again against this process's own.
        check_host_tools(&self.tools, &runtime.shared.tools)?;
        self.check(runtime)?;
        let (audience, targets, unknown_mentions) = match &self.to {
            Some(to) => only(&self.sender, to),
            None => address(runtime, &self.sender, &self.text)?,
        };
        let turns = Turns {
            seq: Seq::ZERO,
            id: MessageId(fresh_uuid()),
            replayed: false,
            targets,
            unknown_mentions,
        };
        let Self {
            conversation,
            sender,
            text,
            tools,
            key,
            instructions,
            to,
        } = self;
        let message = Message::text(turns.id, conversation, sender, audience, &text, now());
        let tools = (!tools.is_empty()).then(|| tools.into());
        let given = to.zip(instructions);
        let extra = Extra { tools, key, given };
        post_here(runtime, message, turns, progress, extra).await
    }
}

impl Post {
    /// What refuses the message before anything is stored (besides its tools, which the
    /// posting checks as it is given them): a stopped runtime, an empty message, a sender not
    /// in the roster.
    pub(crate) fn check(&self, runtime: &Runtime) -> Result<(), RuntimeError> {
        runtime.check_running()?;
        if self.text.trim().is_empty() {
            return Err(RuntimeError::EmptyMessage);
        }
        if let Participant::Agent(name) = &self.sender {
            runtime.roster_agent(name)?;
        }
        Ok(())
    }
}

/// A stored message's turns, as the post path sends them.
struct Turns {
    seq: Seq,
    id: MessageId,
    /// A keyed post's retry: the message was stored before.
    replayed: bool,
    targets: Vec<AgentName>,
    unknown_mentions: Vec<String>,
}

impl Turns {
    fn posted(self, replies: Vec<AgentReply>) -> Posted {
        Posted {
            replies,
            unknown_mentions: self.unknown_mentions,
            replayed: self.replayed,
        }
    }
}

/// What a host's post carries besides its message: the host's tools, its idempotency key, and
/// its instructions for the agent it is for.
struct Extra {
    tools: Option<Arc<[ToolSpec]>>,
    key: Option<IdempotencyKey>,
    given: Option<(AgentName, String)>,
}

/// The message's events: the host's instructions for it (agent/instructions.rs), then the
/// message, in one batch (so at consecutive seqs; the message's is the batch's last).
fn message_events(message: Message, given: Option<(AgentName, String)>) -> Vec<Event> {
    let instructions = given.map(|(agent, text)| {
        Event::InstructionsGiven(InstructionsGiven {
            conversation: message.conversation.clone(),
            agent,
            for_message: message.id,
            at: message.at,
            text,
        })
    });
    instructions
        .into_iter()
        .chain([Event::MessagePosted(message)])
        .collect()
}

/// The post path on the node that runs the conversation: the message appended, then its turns
/// sent (see the module docs for a keyed post).
async fn post_here(
    runtime: &Runtime,
    mut message: Message,
    mut turns: Turns,
    progress: Option<ProgressSink>,
    extra: Extra,
) -> Result<Posted, RuntimeError> {
    let Extra { tools, key, given } = extra;
    let shared = &runtime.shared;
    let conversation = message.conversation.clone();
    let mut gate = None;
    if let Some(k) = &key {
        let entered = crate::keyed::enter(shared, &conversation).await?;
        let id = MessageId::keyed(&conversation, k);
        (message.id, turns.id) = (id, id);
        if let Some(seq) = entered.find(message.id) {
            drop(entered);
            crate::keyed::check_same(shared, k, seq, &message).await?;
            let paused = match (&progress, &tools) {
                (Some(progress), Some(_)) => {
                    runtime.follow_paused(&conversation, id, progress).await
                }
                _ => None,
            };
            if let Some(posted) = paused {
                return posted;
            }
            (turns.seq, turns.replayed) = (seq, true);
            if turns.targets.is_empty() {
                return Ok(turns.posted(Vec::new()));
            }
            let ticket = shared.queue_for_dispatch(&conversation).await;
            let posted = send_turns(runtime, &conversation, turns, progress, tools, ticket);
            return Ok(posted.await);
        }
        gate = Some(entered);
    }
    let events = message_events(message, given);
    if turns.targets.is_empty() {
        let range = shared.append(events).await?;
        if let Some(gate) = &mut gate {
            gate.stored(turns.id, range.last);
        }
        return Ok(turns.posted(Vec::new()));
    }
    let (range, ticket) = shared.append_for_dispatch(&conversation, events).await?;
    if let Some(gate) = &mut gate {
        gate.stored(turns.id, range.last);
    }
    drop(gate);
    turns.seq = range.last;
    Ok(send_turns(runtime, &conversation, turns, progress, tools, ticket).await)
}

/// A host's message for one agent: its audience, and its turn (none when the agent sent it).
fn only(sender: &Participant, to: &AgentName) -> (Audience, Vec<AgentName>, Vec<String>) {
    let targets = (sender.agent() != Some(to)).then(|| to.clone());
    (
        Audience::agent(to.clone()),
        targets.into_iter().collect(),
        Vec::new(),
    )
}

/// Sends the message's turns to its agents and gathers their replies; a host's calls of its
/// tools go out through `progress` (relayed to whoever follows the turn, follow.rs).
async fn send_turns(
    runtime: &Runtime,
    key: &ConversationKey,
    turns: Turns,
    progress: Option<ProgressSink>,
    host_tools: Option<Arc<[ToolSpec]>>,
    ticket: DispatchTicket,
) -> Posted {
    let host_tools = host_tools.filter(|_| progress.is_some());
    let follows = &runtime.shared.conversations;
    let turn = (key, turns.id);
    let relay = Relay::for_turn(follows, turn, host_tools.is_some(), progress);
    let request = TurnRequest {
        seq: turns.seq,
        id: turns.id,
        progress: relay.as_ref().map(|r| r.sink.clone()),
        host_tools,
        replayed: turns.replayed,
    };
    let replies = runtime
        .dispatch(key, Job::Turn(request), &turns.targets, Some(ticket))
        .await;
    runtime.watch_approvals(key, &replies);
    let posted = match runtime.cluster() {
        // Turns cut by a stand-down during the post are answered as moved.
        Some(cluster) => cluster.settle(key, turns.posted(replies)),
        None => turns.posted(replies),
    };
    if let Some(relay) = relay {
        relay.finish(&posted).await;
    }
    posted
}

/// Whom a message of `sender` addresses: its audience, the agents that get a turn (never the
/// sender) and the handles that named no agent. With `runtime.unknown_mentions = "error"`,
/// such a handle refuses the message.
fn address(
    runtime: &Runtime,
    sender: &Participant,
    text: &str,
) -> Result<(Audience, Vec<AgentName>, Vec<String>), RuntimeError> {
    let config = &runtime.shared.config;
    let known: Vec<AgentName> = config.agents.iter().map(|a| a.name.clone()).collect();
    if config.runtime.unknown_mentions == UnknownMentions::Error {
        legio_core::parse_mentions(text, &known)?;
    }
    let mentions = find_mentions(text, &known);
    let orchestrator = config.orchestrator().name.clone();
    let (audience, targets) = match mentions.audience {
        None if *sender == Participant::Agent(orchestrator.clone()) => {
            (Audience::user(), Vec::new())
        }
        None => (Audience::agent(orchestrator.clone()), vec![orchestrator]),
        Some(Audience::All) => (Audience::All, known),
        Some(Audience::Only(list)) => {
            let named: Vec<AgentName> = known
                .into_iter()
                .filter(|k| list.contains(&Participant::Agent(k.clone())))
                .collect();
            (Audience::Only(list), named)
        }
    };
    let targets = targets
        .into_iter()
        .filter(|t| sender.agent() != Some(t))
        .collect();
    Ok((audience, targets, mentions.unknown))
}
