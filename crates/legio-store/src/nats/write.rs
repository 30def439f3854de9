//! The write path of [`NatsLog`](super::NatsLog): the dispatcher that lets one append per
//! conversation leave at a time (grouping the ones queued behind it, with replicas 3), the append
//! of a group with each conversation's expectation, and fencing when an expectation fails.

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

/// Appends of one conversation leave one at a time (the next one's expectation is the previous
/// one's last seq); appends queued behind one in flight leave together as one atomic batch.
pub(super) async fn dispatch(inner: Arc<Inner>, mut submits: mpsc::UnboundedReceiver<Submit>) {
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Vec<ConversationKey>>();
    let mut queue: VecDeque<Submit> = VecDeque::new();
    let mut busy: HashSet<ConversationKey> = HashSet::new();
    loop {
        tokio::select! {
            submit = submits.recv() => match submit {
                Some(submit) => queue.push_back(submit),
                None => break,
            },
            Some(done) = done_rx.recv() => {
                for conversation in done {
                    busy.remove(&conversation);
                }
            }
        }
        while let Ok(submit) = submits.try_recv() {
            queue.push_back(submit);
        }
        for group in schedule(&mut queue, &mut busy, inner.group_appends) {
            let inner = inner.clone();
            let done = done_tx.clone();
            tokio::spawn(async move {
                let conversations = append_group(&inner, group).await;
                let _ = done.send(conversations);
            });
        }
    }
}

/// Takes from `queue` every append whose conversations are idle, in order: with `group`, appends
/// of one idle conversation are grouped (up to [`MAX_BATCH_EVENTS`]); an append behind a busy
/// conversation waits, and so does every later append of its conversations.
fn schedule(
    queue: &mut VecDeque<Submit>,
    busy: &mut HashSet<ConversationKey>,
    group: bool,
) -> Vec<Vec<Submit>> {
    let mut groups: Vec<(Vec<Submit>, usize)> = Vec::new();
    let mut open: HashMap<ConversationKey, usize> = HashMap::new();
    let mut waiting: HashSet<ConversationKey> = HashSet::new();
    let mut rest = VecDeque::new();
    for submit in queue.drain(..) {
        if let [conversation] = submit.conversations.as_slice() {
            if let Some(&i) = open
                .get(conversation)
                .filter(|_| !waiting.contains(conversation))
            {
                if groups[i].1 + submit.events.len() <= MAX_BATCH_EVENTS {
                    groups[i].1 += submit.events.len();
                    groups[i].0.push(submit);
                    continue;
                }
            }
        }
        let blocked = submit
            .conversations
            .iter()
            .any(|c| busy.contains(c) || waiting.contains(c));
        if blocked {
            waiting.extend(submit.conversations.iter().cloned());
            rest.push_back(submit);
            continue;
        }
        busy.extend(submit.conversations.iter().cloned());
        if let ([conversation], true) = (submit.conversations.as_slice(), group) {
            open.insert(conversation.clone(), groups.len());
        }
        let size = submit.events.len();
        groups.push((vec![submit], size));
    }
    *queue = rest;
    groups.into_iter().map(|(group, _)| group).collect()
}

/// Appends one group and answers each of its appends; returns its conversations to free.
async fn append_group(inner: &Inner, group: Vec<Submit>) -> Vec<ConversationKey> {
    let mut conversations: Vec<ConversationKey> = Vec::new();
    for submit in &group {
        for conversation in &submit.conversations {
            if !conversations.contains(conversation) {
                conversations.push(conversation.clone());
            }
        }
    }
    let started = Instant::now();
    let (events, replies): (Vec<_>, Vec<_>) =
        group.into_iter().map(|s| (s.events, s.reply)).unzip();
    match append_events(inner, &conversations, events.concat()).await {
        Ok(first) => {
            m::ack_latency(started.elapsed());
            let mut next = first.0;
            for (batch, reply) in events.iter().zip(replies) {
                let range = SeqRange {
                    first: Seq(next),
                    last: Seq(next + batch.len() as u64 - 1),
                };
                next += batch.len() as u64;
                let _ = reply.send(Ok(range));
            }
        }
        Err(error) => {
            for reply in replies {
                let _ = reply.send(Err(error.clone()));
            }
        }
    }
    conversations
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
    for (offset, (event, _)) in events.into_iter().enumerate() {
        let seq = Seq(first + offset as u64);
        if let Some((_, projection)) = projections.iter().find(|(c, _)| c == event.conversation()) {
            lock(projection).apply(Record { seq, event });
        }
    }
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
