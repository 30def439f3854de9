//! A message an agent's tool loop took in: one that arrived while the loop's calls ran is part of
//! the loop's next step (core's tool_calls.rs, rule 4), and the loop's reply answers it. Its own
//! turn, queued behind the loop, must then not run: it would answer the message a second time,
//! from a context cut at the message (without the loop's results and reply, so the model would
//! read its calls as interrupted). Such a turn gives the loop's reply instead ([`taken_in`]).
//!
//! Only a loop that ended with a reply counts: when it failed (or a crash cut it), the message
//! has no answer yet and its turn runs as usual.

use std::collections::HashMap;
use std::sync::Arc;

use legio_core::{
    tool_call_ids, AgentName, ConversationKey, Event, Message, MessageId, Participant, Record, Seq,
};

use crate::error::RuntimeError;
use crate::reply::Reply;
use crate::shared::Shared;

/// How many of the conversation's events after the message are looked through for the loop's
/// reply (a loop's steps are a few events each).
const LOOK_AHEAD: usize = 10_000;

/// The reply of `agent`'s earlier loop that took in the message at `seq`, if one did and ended
/// with a reply. Asked only when the agent's actor delivered context up to `seq` or beyond, or
/// for a keyed post's retry (keyed.rs), whose message the agent's own turn may have answered.
pub(crate) async fn taken_in(
    shared: &Arc<Shared>,
    conversation: &ConversationKey,
    agent: &AgentName,
    seq: Seq,
) -> Result<Option<Reply>, RuntimeError> {
    let (conversation, agent) = (conversation.clone(), agent.clone());
    shared
        .read(move |log| {
            let after = log.conversation_events(&conversation, seq, LOOK_AHEAD)?;
            Ok(loop_reply(&agent, seq, &after))
        })
        .await
}

/// In `after` (the conversation's events after the message at `seq`, in order): the text reply
/// that ended the loop of `agent` whose step first delivered context up to `seq` or beyond; `None`
/// if that loop failed or has not ended. The loop is told by its steps' replies' `reply_to`
/// (every step of a turn replies to the turn's message): a step's reply to anything else means
/// another turn ran first (the loop's failure was never written), and the message has no answer.
fn loop_reply(agent: &AgentName, seq: Seq, after: &[Record]) -> Option<Reply> {
    let me = Participant::Agent(agent.clone());
    let mut delivered = false;
    let mut turn: Option<Option<MessageId>> = None;
    let mut mine: HashMap<MessageId, (Seq, &Message)> = HashMap::new();
    for record in after {
        match &record.event {
            Event::ContextDelivered(d) if d.agent == *agent && d.up_to >= seq => delivered = true,
            Event::MessagePosted(m) if m.sender == me => {
                mine.insert(m.id, (record.seq, m));
            }
            // A step's reply (the message its `TurnCompleted` names) replies to its turn's
            // message: the first after the delivery tells the loop.
            Event::TurnCompleted(t) if delivered && t.agent == *agent => {
                let Some((seq, message)) = t.reply.and_then(|id| mine.get(&id)) else {
                    continue;
                };
                match turn {
                    None => turn = Some(message.reply_to),
                    Some(of) if of != message.reply_to => return None,
                    Some(_) => {}
                }
                if tool_call_ids(message).is_empty() {
                    return Some(Reply {
                        text: message.text_content(),
                        message_id: Some(message.id),
                        seq: *seq,
                    });
                }
            }
            Event::TurnFailed(f) if delivered && f.agent == *agent => return None,
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use legio_core::{
        Audience, ContextDelivered, DeliveryMode, Part, SessionId, Timestamp, TokenUsage,
        TurnCompleted, TurnFailed,
    };

    fn conv() -> ConversationKey {
        ConversationKey::new("t:1").unwrap()
    }

    fn lead() -> AgentName {
        AgentName::new("lead").unwrap()
    }

    fn at() -> Timestamp {
        Timestamp::EPOCH
    }

    fn delivered(agent: &str, up_to: u64) -> Event {
        Event::ContextDelivered(ContextDelivered {
            conversation: conv(),
            agent: AgentName::new(agent).unwrap(),
            session: SessionId(uuid::Uuid::nil()),
            at: at(),
            up_to: Seq(up_to),
            mode: DeliveryMode::Full,
            messages: 1,
            estimated_tokens: 1,
        })
    }

    /// The message of the loop that took the message in.
    const LOOP: u128 = 100;

    /// A step's message of `sender` in the loop, with id `id`: text, or a tool call when `text`
    /// starts with "call".
    fn posted(sender: &str, id: u128, text: &str) -> Event {
        posted_for(sender, id, text, LOOP)
    }

    /// As [`posted`], replying to the message `to`.
    fn posted_for(sender: &str, id: u128, text: &str, to: u128) -> Event {
        let part = match text.strip_prefix("call ") {
            Some(call) => Part::ToolCall {
                id: call.into(),
                name: "lookup".into(),
                arguments: "{}".into(),
            },
            None => Part::text(text),
        };
        Event::MessagePosted(Message {
            id: MessageId(uuid::Uuid::from_u128(id)),
            conversation: conv(),
            sender: Participant::Agent(AgentName::new(sender).unwrap()),
            audience: Audience::All,
            parts: vec![part],
            reply_to: Some(MessageId(uuid::Uuid::from_u128(to))),
            at: at(),
        })
    }

    fn completed(agent: &str, reply: u128) -> Event {
        Event::TurnCompleted(TurnCompleted {
            conversation: conv(),
            agent: AgentName::new(agent).unwrap(),
            session: SessionId(uuid::Uuid::nil()),
            at: at(),
            usage: TokenUsage::default(),
            provider_session: None,
            reply: Some(MessageId(uuid::Uuid::from_u128(reply))),
        })
    }

    fn failed(agent: &str) -> Event {
        Event::TurnFailed(TurnFailed {
            conversation: conv(),
            agent: AgentName::new(agent).unwrap(),
            session: None,
            at: at(),
            error: "it failed".into(),
        })
    }

    /// One step of `agent`: context delivered up to `up_to`, its message `id` (`text`, or a
    /// tool call when it starts with "call"), its `TurnCompleted`.
    fn step(agent: &str, up_to: u64, id: u128, text: &str) -> Vec<Event> {
        vec![
            delivered(agent, up_to),
            posted(agent, id, text),
            completed(agent, id),
        ]
    }

    /// (events after the message at seq 6, from seq 7 on; the seq of the reply expected)
    fn cases() -> Vec<(Vec<Event>, Option<u64>)> {
        vec![
            // The loop's next step reached #6 and ended with a text reply.
            (step("lead", 7, 1, "hi"), Some(8)),
            // A step that called tools again, then the reply.
            (
                [step("lead", 7, 1, "call c2"), step("lead", 10, 2, "done")].concat(),
                Some(11),
            ),
            // Delivered short of the message: not taken in.
            (step("lead", 5, 1, "hi"), None),
            // Another agent's loop.
            (step("ann", 7, 1, "hi"), None),
            // The loop failed, or has not ended: the message's own turn runs.
            (vec![delivered("lead", 7), failed("lead")], None),
            (step("lead", 7, 1, "call c2"), None),
            // A message the agent posts along (a dispatch, replying to the calls) is not a
            // step's reply.
            (
                vec![
                    delivered("lead", 7),
                    posted_for("lead", 3, "ann, please look", 1),
                    posted("lead", 1, "hi"),
                    completed("lead", 1),
                ],
                Some(9),
            ),
            // The loop's end was never written (its results and its failure lost with the
            // cluster) and another turn replied first: not this message's answer.
            (
                [
                    step("lead", 7, 1, "call c2"),
                    vec![delivered("lead", 5)],
                    vec![posted_for("lead", 2, "the answer to #5", 5)],
                    vec![completed("lead", 2)],
                ]
                .concat(),
                None,
            ),
        ]
    }

    #[test]
    fn the_reply_of_the_loop_that_took_the_message_in_answers_it() {
        for (i, (events, expected)) in cases().into_iter().enumerate() {
            let records: Vec<Record> = events
                .into_iter()
                .enumerate()
                .map(|(n, event)| Record {
                    seq: Seq(7 + n as u64),
                    event,
                })
                .collect();
            let got = loop_reply(&lead(), Seq(6), &records).map(|r| r.seq.0);
            assert_eq!(got, expected, "case {i}");
        }
    }
}
