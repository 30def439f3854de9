//! A message an agent's tool loop took in: one that arrived while the loop's calls ran is part of
//! the loop's next step (core's tool_calls.rs, rule 4), and the loop's reply answers it. Its own
//! turn, queued behind the loop, must then not run: it would answer the message a second time,
//! from a context cut at the message (without the loop's results and reply, so the model would
//! read its calls as interrupted). Such a turn gives the loop's reply instead ([`taken_in`]).
//!
//! Only a loop that ended with a reply counts: when it failed (or a crash cut it), the message
//! has no answer yet and its turn runs as usual.
//!
//! A keyed post's retry (keyed.rs) asks the same question of the log, whatever the actor
//! remembers: the message's own turn is such a loop. There the answer must be this message's or
//! an earlier one's, never a later turn's that carried the message as history; and when the agent
//! went on to later messages without answering it ([`Taken::MovedOn`]), running its turn now would
//! show the model a message its session already holds, as new.

use std::collections::{HashMap, HashSet};
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

/// What the log says of the message at `seq` for `agent`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Taken {
    /// The loop that first delivered it (its own turn, or an earlier loop) ended with this reply.
    Answered(Reply),
    /// No answer, and the agent has since replied to a later message (or the look-ahead ran out).
    MovedOn,
    /// No answer yet: its turn may run.
    Open,
}

/// The reply of `agent`'s earlier loop that took in the message at `seq`, if one did and ended
/// with a reply. Asked only when the agent's actor delivered context up to `seq` or beyond, or
/// for a keyed post's retry (keyed.rs), whose message the agent's own turn may have answered.
pub(crate) async fn taken_in(
    shared: &Arc<Shared>,
    conversation: &ConversationKey,
    agent: &AgentName,
    seq: Seq,
) -> Result<Taken, RuntimeError> {
    let (conversation, agent) = (conversation.clone(), agent.clone());
    shared
        .read(move |log| {
            let after = log.conversation_events(&conversation, seq, LOOK_AHEAD)?;
            let taken = loop_reply(&agent, seq, &after);
            let cut = after.len() == LOOK_AHEAD;
            Ok(match taken {
                Taken::Open if cut => Taken::MovedOn,
                taken => taken,
            })
        })
        .await
}

/// In `after` (the conversation's events after the message at `seq`, in order): the text reply
/// that ended the loop of `agent` whose step first delivered context up to `seq` or beyond; `None`
/// if that loop failed or has not ended. The loop is told by its steps' replies' `reply_to`
/// (every step of a turn replies to the turn's message): a step's reply to anything else means
/// another turn ran first (the loop's failure was never written), and the message has no answer.
fn loop_reply(agent: &AgentName, seq: Seq, after: &[Record]) -> Taken {
    let me = Participant::Agent(agent.clone());
    let later: HashSet<MessageId> = after
        .iter()
        .filter_map(|r| r.event.as_message())
        .map(|m| m.id)
        .collect();
    let moved_on = || {
        let answers_later = |m: &Message| m.reply_to.is_some_and(|to| later.contains(&to));
        let mine = after.iter().filter_map(|r| r.event.as_message());
        if mine.filter(|m| m.sender == me).any(answers_later) {
            Taken::MovedOn
        } else {
            Taken::Open
        }
    };
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
            // message: the first after the delivery tells the loop, which must answer this
            // message or an earlier one (a later turn only carried it as history).
            Event::TurnCompleted(t) if delivered && t.agent == *agent => {
                let Some((seq, message)) = t.reply.and_then(|id| mine.get(&id)) else {
                    continue;
                };
                match turn {
                    None if message.reply_to.is_some_and(|to| later.contains(&to)) => {
                        return moved_on()
                    }
                    None => turn = Some(message.reply_to),
                    Some(of) if of != message.reply_to => return moved_on(),
                    Some(_) => {}
                }
                if tool_call_ids(message).is_empty() {
                    return Taken::Answered(Reply {
                        text: message.text_content(),
                        message_id: Some(message.id),
                        seq: *seq,
                    });
                }
            }
            Event::TurnFailed(f) if delivered && f.agent == *agent => return moved_on(),
            _ => {}
        }
    }
    moved_on()
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

    fn records(events: Vec<Event>) -> Vec<Record> {
        events
            .into_iter()
            .enumerate()
            .map(|(n, event)| Record {
                seq: Seq(7 + n as u64),
                event,
            })
            .collect()
    }

    /// A keyed retry's question: a later turn that carried the message as history is no answer,
    /// and tells that the agent went on; a failed own turn with nothing after leaves it open.
    #[test]
    fn a_later_turn_is_no_answer_and_means_the_agent_went_on() {
        let later = Event::MessagePosted(Message {
            id: MessageId(uuid::Uuid::from_u128(50)),
            conversation: conv(),
            sender: Participant::User,
            audience: Audience::All,
            parts: vec![Part::text("later")],
            reply_to: None,
            at: at(),
        });
        let answered_later = [
            vec![later.clone(), delivered("lead", 7)],
            vec![
                posted_for("lead", 1, "about later", 50),
                completed("lead", 1),
            ],
        ]
        .concat();
        let cases = [
            (answered_later, Taken::MovedOn),
            (vec![failed("lead")], Taken::Open),
            (vec![delivered("lead", 7), failed("lead")], Taken::Open),
            (
                [vec![delivered("lead", 7), failed("lead"), later], {
                    let mut rest = vec![delivered("lead", 9)];
                    rest.push(posted_for("lead", 2, "about later", 50));
                    rest
                }]
                .concat(),
                Taken::MovedOn,
            ),
        ];
        for (i, (events, expected)) in cases.into_iter().enumerate() {
            assert_eq!(
                loop_reply(&lead(), Seq(6), &records(events)),
                expected,
                "case {i}"
            );
        }
    }

    #[test]
    fn the_reply_of_the_loop_that_took_the_message_in_answers_it() {
        for (i, (events, expected)) in cases().into_iter().enumerate() {
            let got = match loop_reply(&lead(), Seq(6), &records(events)) {
                Taken::Answered(reply) => Some(reply.seq.0),
                _ => None,
            };
            assert_eq!(got, expected, "case {i}");
        }
    }
}
