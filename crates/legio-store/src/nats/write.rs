//! The write path of [`NatsLog`](super::NatsLog): the dispatcher that lets one append per
//! conversation leave at a time (with replicas 3, grouping every append queued meanwhile, of any
//! conversation, into one atomic batch), the append of a group with each conversation's
//! expectation, and fencing when an expectation fails.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use legio_core::{ConversationKey, Event, Record, Seq, SeqRange};
use tokio::sync::mpsc;

use super::inner::{lock, Inner, Submit};
use super::publish::{Outcome, Outgoing};
use crate::error::{Result, StoreError};
use crate::metrics as m;

/// The most events one append (or one group of appends) may hold: JetStream's limit of an atomic
/// batch.
pub const MAX_BATCH_EVENTS: usize = 1000;

/// With grouping, at most this many batches are in flight at once; the appends that come
/// meanwhile queue and leave together as the next batch.
const GROUPS_IN_FLIGHT: usize = 4;

/// Appends of one conversation leave one at a time (the next one's expectation is the previous
/// one's last seq); with grouping, the appends that queued meanwhile (of any conversations)
/// leave together as one atomic batch, at most [`GROUPS_IN_FLIGHT`] batches at a time.
pub(super) async fn dispatch(inner: Arc<Inner>, mut submits: mpsc::UnboundedReceiver<Submit>) {
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Vec<ConversationKey>>();
    let mut queue: VecDeque<Submit> = VecDeque::new();
    let mut busy: HashSet<ConversationKey> = HashSet::new();
    let slots = if inner.group_appends {
        GROUPS_IN_FLIGHT
    } else {
        usize::MAX
    };
    let mut in_flight = 0usize;
    loop {
        tokio::select! {
            submit = submits.recv() => match submit {
                Some(submit) => queue.push_back(submit),
                None => break,
            },
            Some(done) = done_rx.recv() => {
                in_flight -= 1;
                for conversation in done {
                    busy.remove(&conversation);
                }
            }
        }
        while let Ok(submit) = submits.try_recv() {
            queue.push_back(submit);
        }
        if in_flight >= slots {
            continue;
        }
        let groups = schedule(
            &mut queue,
            &mut busy,
            inner.group_appends,
            slots - in_flight,
        );
        for group in groups {
            in_flight += 1;
            let inner = inner.clone();
            let done = done_tx.clone();
            tokio::spawn(async move {
                let conversations = append_group(&inner, group).await;
                let _ = done.send(conversations);
            });
        }
    }
}

/// Takes from `queue` every append whose conversations are idle, in order, in at most `slots`
/// groups. With `group`, the idle appends leave together as one batch (up to
/// [`MAX_BATCH_EVENTS`]), whatever their conversations: one commit of the cluster for all of
/// them; without, each leaves alone. An append behind a busy conversation (or one left for
/// want of a slot) waits, and so does every later append of its conversations.
fn schedule(
    queue: &mut VecDeque<Submit>,
    busy: &mut HashSet<ConversationKey>,
    group: bool,
    slots: usize,
) -> Vec<Vec<Submit>> {
    let mut groups: Vec<(Vec<Submit>, usize)> = Vec::new();
    // The conversations of the group still open to more appends (the last one).
    let mut open: HashSet<ConversationKey> = HashSet::new();
    let mut waiting: HashSet<ConversationKey> = HashSet::new();
    let mut rest = VecDeque::new();
    for submit in queue.drain(..) {
        let size = submit.events.len();
        let joins = group
            && groups
                .last()
                .is_some_and(|(_, events)| events + size <= MAX_BATCH_EVENTS)
            && submit
                .conversations
                .iter()
                .all(|c| !waiting.contains(c) && (open.contains(c) || !busy.contains(c)));
        if joins {
            busy.extend(submit.conversations.iter().cloned());
            open.extend(submit.conversations.iter().cloned());
            if let Some(last) = groups.last_mut() {
                last.1 += size;
                last.0.push(submit);
            }
            continue;
        }
        let blocked = groups.len() >= slots
            || submit
                .conversations
                .iter()
                .any(|c| busy.contains(c) || waiting.contains(c));
        if blocked {
            waiting.extend(submit.conversations.iter().cloned());
            rest.push_back(submit);
            continue;
        }
        busy.extend(submit.conversations.iter().cloned());
        if group {
            open = submit.conversations.iter().cloned().collect();
        }
        groups.push((vec![submit], size));
    }
    *queue = rest;
    groups.into_iter().map(|(group, _)| group).collect()
}

/// Appends one group and answers each of its appends; returns its conversations to free. A
/// group refused as fenced is stored in no part: its appends to conversations the log refuses
/// get the refusal, and the others are appended again without them.
async fn append_group(inner: &Inner, group: Vec<Submit>) -> Vec<ConversationKey> {
    let conversations = conversations_of(&group);
    // The conversations of `pending`: all of them until a fenced conversation is dropped.
    let mut involved = conversations.clone();
    let mut pending = group;
    while !pending.is_empty() {
        let started = Instant::now();
        let events: Vec<(Event, Vec<u8>)> = pending
            .iter()
            .flat_map(|s| s.events.iter().cloned())
            .collect();
        match append_events(inner, &involved, events).await {
            Ok(first) => {
                m::ack_latency(started.elapsed());
                let mut next = first.0;
                for submit in pending {
                    let count = submit.events.len() as u64;
                    let range = SeqRange {
                        first: Seq(next),
                        last: Seq(next + count - 1),
                    };
                    next += count;
                    let _ = submit.reply.send(Ok(range));
                }
                break;
            }
            Err(error @ StoreError::Fenced { .. }) if pending.len() > 1 => {
                let fenced = lock(&inner.fenced).clone();
                let before = pending.len();
                let (refused, others): (Vec<Submit>, Vec<Submit>) = pending
                    .into_iter()
                    .partition(|s| s.conversations.iter().any(|c| fenced.contains_key(c)));
                let stuck = refused.is_empty() || others.len() == before;
                for submit in refused {
                    let _ = submit.reply.send(Err(error.clone()));
                }
                pending = others;
                involved = conversations_of(&pending);
                if stuck {
                    for submit in pending.drain(..) {
                        let _ = submit.reply.send(Err(error.clone()));
                    }
                }
            }
            Err(error) => {
                for submit in pending {
                    let _ = submit.reply.send(Err(error.clone()));
                }
                break;
            }
        }
    }
    conversations
}

/// The conversations of `submits`, each once, in order.
fn conversations_of(submits: &[Submit]) -> Vec<ConversationKey> {
    let mut seen: HashSet<&ConversationKey> = HashSet::new();
    submits
        .iter()
        .flat_map(|s| &s.conversations)
        .filter(|c| seen.insert(c))
        .cloned()
        .collect()
}

/// Publishes `events` (of `conversations`, all idle) and folds them into the projections;
/// returns the first seq.
async fn append_events(
    inner: &Inner,
    conversations: &[ConversationKey],
    events: Vec<(Event, Vec<u8>)>,
) -> Result<Seq> {
    let mut expected: HashMap<ConversationKey, u64> = HashMap::new();
    let mut projections = Vec::new();
    for conversation in conversations {
        if let Some(&last) = lock(&inner.fenced).get(conversation) {
            return Err(StoreError::Fenced {
                conversation: conversation.to_string(),
                expected: last,
            });
        }
        let projection = inner.projection(conversation).await?;
        expected.insert(conversation.clone(), lock(&projection).last().0);
        projections.push((conversation.clone(), projection));
    }
    let mut stated = HashSet::new();
    let outgoing: Vec<Outgoing> = events
        .iter()
        .map(|(event, bytes)| {
            let conversation = event.conversation();
            let first = stated.insert(conversation.clone());
            Outgoing {
                subject: inner.subjects.of(conversation),
                payload: bytes::Bytes::from(bytes.clone()),
                expect: first.then(|| expected[conversation]),
            }
        })
        .collect();
    let id = inner.next_append_id();
    let outcome = inner.publisher.publish(&id, &outgoing).await;
    let last = match outcome {
        Ok(Outcome::Stored { last }) => last,
        Ok(Outcome::WrongLast) => return Err(fence(inner, conversations, &expected).await),
        Err(error) => {
            // The append may or may not be stored: read the conversations again next time.
            inner.forget(conversations);
            return Err(error);
        }
    };
    let first = last + 1 - outgoing.len() as u64;
    let bytes: usize = outgoing.iter().map(|o| o.payload.len()).sum();
    let mut recent = lock(&inner.recent);
    for (offset, (event, _)) in events.into_iter().enumerate() {
        let seq = Seq(first + offset as u64);
        if let Some((_, projection)) = projections.iter().find(|(c, _)| c == event.conversation()) {
            lock(projection).apply(Record { seq, event });
            recent.insert(seq, projection);
        }
    }
    drop(recent);
    inner.acknowledge(Seq(last));
    m::committed(outgoing.len() as u64, bytes as u64, last);
    Ok(Seq(first))
}

/// An expectation failed: finds the conversations another writer appended to, refuses them from
/// now on, and says which.
async fn fence(
    inner: &Inner,
    conversations: &[ConversationKey],
    expected: &HashMap<ConversationKey, u64>,
) -> StoreError {
    let mut refused = Vec::new();
    for conversation in conversations {
        let actual = inner
            .subject_last(&inner.subjects.of(conversation))
            .await
            .unwrap_or(u64::MAX);
        if actual != expected[conversation] {
            refused.push(conversation.clone());
        }
    }
    if refused.is_empty() {
        refused = conversations.to_vec();
    }
    inner.forget(&refused);
    let mut fenced = lock(&inner.fenced);
    for conversation in &refused {
        fenced.insert(conversation.clone(), expected[conversation]);
    }
    tracing::warn!(conversations = ?refused, "append refused: another writer appended first");
    StoreError::Fenced {
        conversation: refused[0].to_string(),
        expected: expected[&refused[0]],
    }
}

/// Validates and encodes a batch; nothing is stored if any event is refused.
pub(super) fn encode_batch(
    events: Vec<Event>,
    max_message_bytes: usize,
) -> Result<Vec<(Event, Vec<u8>)>> {
    if events.len() > MAX_BATCH_EVENTS {
        return Err(StoreError::BatchTooLarge {
            events: events.len(),
            limit: MAX_BATCH_EVENTS,
        });
    }
    Ok(crate::engine::encode_batch(events, max_message_bytes)?
        .into_iter()
        .map(|e| (e.event, e.bytes))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;

    fn submit(conversations: &[&str]) -> Submit {
        Submit {
            events: Vec::new(),
            conversations: conversations
                .iter()
                .map(|c| ConversationKey::new(*c).unwrap())
                .collect(),
            reply: oneshot::channel().0,
        }
    }

    fn keys(groups: &[Vec<Submit>]) -> Vec<Vec<Vec<String>>> {
        groups
            .iter()
            .map(|g| {
                g.iter()
                    .map(|s| s.conversations.iter().map(|c| c.to_string()).collect())
                    .collect()
            })
            .collect()
    }

    fn queue(of: &[&[&str]]) -> VecDeque<Submit> {
        of.iter().map(|c| submit(c)).collect()
    }

    #[test]
    fn grouped_appends_of_idle_conversations_leave_as_one_batch_in_order() {
        let mut q = queue(&[&["t:x"], &["t:y"], &["t:x"], &["t:y", "t:z"]]);
        let mut busy = HashSet::new();
        let groups = schedule(&mut q, &mut busy, true, 4);
        assert_eq!(
            keys(&groups),
            vec![vec![
                vec!["t:x".to_owned()],
                vec!["t:y".to_owned()],
                vec!["t:x".to_owned()],
                vec!["t:y".to_owned(), "t:z".to_owned()],
            ]]
        );
        assert!(q.is_empty());
        assert_eq!(busy.len(), 3);
    }

    #[test]
    fn an_append_behind_a_busy_conversation_waits_and_so_do_later_ones_of_it() {
        let mut q = queue(&[&["t:x"], &["t:y"], &["t:x"], &["t:x", "t:z"], &["t:z"]]);
        let mut busy: HashSet<ConversationKey> = [ConversationKey::new("t:x").unwrap()].into();
        let groups = schedule(&mut q, &mut busy, true, 4);
        assert_eq!(keys(&groups), vec![vec![vec!["t:y".to_owned()]]]);
        let left: Vec<Vec<String>> = q
            .iter()
            .map(|s| s.conversations.iter().map(|c| c.to_string()).collect())
            .collect();
        assert_eq!(left.len(), 4, "t:z waits behind the append of t:x and t:z");
    }

    #[test]
    fn without_grouping_each_append_leaves_alone_within_the_free_slots() {
        let mut q = queue(&[&["t:x"], &["t:y"], &["t:x"], &["t:w"]]);
        let mut busy = HashSet::new();
        let groups = schedule(&mut q, &mut busy, false, usize::MAX);
        assert_eq!(
            keys(&groups),
            vec![
                vec![vec!["t:x".to_owned()]],
                vec![vec!["t:y".to_owned()]],
                vec![vec!["t:w".to_owned()]],
            ]
        );
        assert_eq!(q.len(), 1);
        let mut q = queue(&[&["t:a"], &["t:b"], &["t:a"]]);
        let groups = schedule(&mut q, &mut HashSet::new(), false, 1);
        assert_eq!(keys(&groups), vec![vec![vec!["t:a".to_owned()]]]);
        assert_eq!(
            q.len(),
            2,
            "no slot for t:b; the second t:a waits behind the first"
        );
    }
}
