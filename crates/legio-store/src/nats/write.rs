//! The write path of [`NatsLog`](super::NatsLog): the dispatcher that lets one append per
//! conversation leave at a time (grouping appends queued meanwhile, of any conversation, into one
//! atomic batch, as [`Grouping`] says), the append of a group with each conversation's
//! expectation, fencing when an expectation fails, and the move of the connection to the
//! stream's leader between appends (leader.rs).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use legio_core::{ConversationKey, Event, Record, Seq, SeqRange};
use tokio::sync::mpsc;
use tokio::time::{self, MissedTickBehavior};

use super::grouping::{Grouping, Linger};
use super::inner::{Inner, Submit};
use super::leader::{Move, LEADER_CHECK};
use super::publish::{Outcome, Outgoing};
use super::sync::lock;
use crate::error::{Result, StoreError};
use crate::metrics as m;

/// The most events one append (or one group of appends) may hold: JetStream's limit of an atomic
/// batch.
pub const MAX_BATCH_EVENTS: usize = 1000;

/// What the dispatcher sends on its way: appends that leave alone and groups (each taking one of
/// [`Grouping::slots`]).
#[derive(Default)]
struct Scheduled {
    alone: Vec<Submit>,
    groups: Vec<Vec<Submit>>,
}

/// A finished append or group: its conversations, and whether it held a slot.
type Done = (Vec<ConversationKey>, bool);

/// How long the dispatcher holds new appends for a move of its connection, waiting for the
/// appends in flight to end; past it (an append retrying through an election), the move waits
/// for the next check.
const HOLD_FOR: Duration = Duration::from_secs(1);

/// Appends of one conversation leave one at a time (the next one's expectation is the previous
/// one's last seq); the appends that queued meanwhile (of any conversations) leave as
/// [`Grouping`] says. Every [`LEADER_CHECK`] it asks which server leads the stream; when the
/// connection should move there, it holds new appends until none is in flight (for up to
/// [`HOLD_FOR`]), moves it, and goes on.
pub(super) async fn dispatch(inner: Arc<Inner>, mut submits: mpsc::UnboundedReceiver<Submit>) {
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Done>();
    let (found_tx, mut found_rx) = mpsc::unbounded_channel::<Option<Move>>();
    let mut checks = time::interval_at(time::Instant::now() + LEADER_CHECK, LEADER_CHECK);
    checks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut d = Dispatcher::new(inner, done_tx);
    loop {
        let hold = d.moving.as_ref().map(|(_, until)| *until);
        // While a move waits, `move_or_send` sends nothing: the wait's timer would fire at once,
        // again and again, until the move ends it.
        let linger = d.linger.until().filter(|_| d.moving.is_none());
        tokio::select! {
            submit = submits.recv() => match submit {
                Some(submit) => d.queue.push_back(submit),
                None => break,
            },
            Some(done) = done_rx.recv() => d.finished(done),
            _ = checks.tick(), if !d.checking && d.moving.is_none() => {
                d.checking = true;
                tokio::spawn(check_leader(d.inner.clone(), found_tx.clone()));
            }
            Some(found) = found_rx.recv() => d.found(found),
            _ = time::sleep_until(hold.unwrap_or_else(time::Instant::now)), if hold.is_some() => {
                d.moving = None;
                tracing::debug!("appends stayed in flight: the move waits for the next check");
            }
            // The waiting batch's linger is up: `move_or_send` sends it.
            _ = time::sleep_until(linger.unwrap_or_else(time::Instant::now)), if linger.is_some() => {}
        }
        while let Ok(submit) = submits.try_recv() {
            d.queue.push_back(submit);
        }
        d.move_or_send().await;
    }
}

/// The dispatcher's state between two events.
struct Dispatcher {
    inner: Arc<Inner>,
    queue: VecDeque<Submit>,
    busy: HashSet<ConversationKey>,
    /// Groups holding a slot (of [`Grouping::slots`]).
    in_flight: usize,
    /// Every append or group on its way.
    running: usize,
    done: mpsc::UnboundedSender<Done>,
    /// Whether a leader check is on its way.
    checking: bool,
    /// A move of the connection waiting for the appends in flight, until when.
    moving: Option<(Move, time::Instant)>,
    /// Replicas 1: the wait of a batch for as many appends as the last one carried.
    linger: Linger,
}

impl Dispatcher {
    fn new(inner: Arc<Inner>, done: mpsc::UnboundedSender<Done>) -> Self {
        Self {
            inner,
            queue: VecDeque::new(),
            busy: HashSet::new(),
            in_flight: 0,
            running: 0,
            done,
            checking: false,
            moving: None,
            linger: Linger::default(),
        }
    }

    fn finished(&mut self, (conversations, slot): Done) {
        self.in_flight -= usize::from(slot);
        self.running -= 1;
        for conversation in conversations {
            self.busy.remove(&conversation);
        }
    }

    fn found(&mut self, found: Option<Move>) {
        self.checking = false;
        self.moving = found.map(|to| (to, time::Instant::now() + HOLD_FOR));
    }

    /// Moves the connection if a move waits and nothing is in flight; then sends what can leave,
    /// unless a move still waits.
    async fn move_or_send(&mut self) {
        if self.moving.is_some() && self.running > 0 {
            return;
        }
        if let Some((to, _)) = self.moving.take() {
            let (inner, timeout) = (&self.inner, self.inner.options.request_timeout);
            inner
                .steering
                .apply(&inner.publisher.client, to, timeout)
                .await;
        }
        let slots = self.inner.grouping.slots();
        let mut free = slots.saturating_sub(self.in_flight);
        if free > 0 && self.lingers() {
            free = 0;
        }
        let scheduled = schedule(&mut self.queue, &mut self.busy, self.inner.grouping, free);
        if let Some(last) = scheduled.groups.last() {
            self.linger.sent(last.len());
        }
        let alone = scheduled.alone.into_iter().map(|s| (vec![s], false));
        let groups = scheduled.groups.into_iter().map(|g| (g, true));
        for (group, slot) in alone.chain(groups) {
            self.in_flight += usize::from(slot);
            self.running += 1;
            let inner = self.inner.clone();
            let finished = Finished {
                done: self.done.clone(),
                conversations: conversations_of(&group),
                slot,
            };
            tokio::spawn(async move {
                let _finished = finished;
                append_group(&inner, group).await;
            });
        }
    }
}

impl Dispatcher {
    /// Whether the batch that could leave now waits for more appends ([`Linger`]; replicas 1):
    /// counts the queued appends that would join it.
    fn lingers(&mut self) -> bool {
        let grouping = self.inner.grouping;
        let Some(linger) = grouping.linger() else {
            return false;
        };
        let idle = |s: &Submit| s.conversations.iter().all(|c| !self.busy.contains(c));
        let ready = self
            .queue
            .iter()
            .filter(|s| !grouping.alone(s.events.len()) && idle(s))
            .count();
        self.linger.holds(ready, time::Instant::now(), linger)
    }
}

/// Tells the dispatcher that an append or group ended when it is dropped: also when its task
/// panicked, so that its conversations and its slot are freed and a move is not held forever.
struct Finished {
    done: mpsc::UnboundedSender<Done>,
    conversations: Vec<ConversationKey>,
    slot: bool,
}

impl Drop for Finished {
    fn drop(&mut self) {
        let conversations = std::mem::take(&mut self.conversations);
        let _ = self.done.send((conversations, self.slot));
    }
}

/// Sends the move that puts the writer's connection on the stream's leader (none if it is
/// there, or no move is possible now).
async fn check_leader(inner: Arc<Inner>, found: mpsc::UnboundedSender<Option<Move>>) {
    let publisher = &inner.publisher;
    let to = inner
        .steering
        .wanted(&inner.options, &publisher.client, &publisher.stream, true)
        .await;
    let _ = found.send(to);
}

/// Takes from `queue` every append whose conversations are idle, in order: those that leave
/// alone ([`Grouping::alone`]), and the others together as one batch (up to
/// [`MAX_BATCH_EVENTS`]), whatever their conversations, in at most `slots` groups. An append
/// behind a busy conversation (or one left for want of a slot) waits, and so does every later
/// append of its conversations.
fn schedule(
    queue: &mut VecDeque<Submit>,
    busy: &mut HashSet<ConversationKey>,
    grouping: Grouping,
    slots: usize,
) -> Scheduled {
    let mut scheduled = Scheduled::default();
    let mut events_in_last = 0;
    // The conversations of the last group, still open to more appends.
    let mut open: HashSet<ConversationKey> = HashSet::new();
    let mut waiting: HashSet<ConversationKey> = HashSet::new();
    let mut rest = VecDeque::new();
    for submit in queue.drain(..) {
        let size = submit.events.len();
        let idle = |c: &ConversationKey| !busy.contains(c) && !waiting.contains(c);
        if grouping.alone(size) {
            if submit.conversations.iter().all(idle) {
                busy.extend(submit.conversations.iter().cloned());
                scheduled.alone.push(submit);
            } else {
                waiting.extend(submit.conversations.iter().cloned());
                rest.push_back(submit);
            }
            continue;
        }
        let joins = !scheduled.groups.is_empty()
            && events_in_last + size <= MAX_BATCH_EVENTS
            && submit
                .conversations
                .iter()
                .all(|c| !waiting.contains(c) && (open.contains(c) || !busy.contains(c)));
        if joins {
            busy.extend(submit.conversations.iter().cloned());
            open.extend(submit.conversations.iter().cloned());
            events_in_last += size;
            if let Some(last) = scheduled.groups.last_mut() {
                last.push(submit);
            }
            continue;
        }
        if scheduled.groups.len() >= slots || !submit.conversations.iter().all(idle) {
            waiting.extend(submit.conversations.iter().cloned());
            rest.push_back(submit);
            continue;
        }
        busy.extend(submit.conversations.iter().cloned());
        open = submit.conversations.iter().cloned().collect();
        events_in_last = size;
        scheduled.groups.push(vec![submit]);
    }
    *queue = rest;
    scheduled
}

/// Appends one group and answers each of its appends. A group refused as fenced is stored in
/// no part: its appends to conversations the log refuses get the refusal, and the others are
/// appended again without them.
async fn append_group(inner: &Inner, group: Vec<Submit>) {
    // The conversations of `pending`: all of them until a fenced conversation is dropped.
    let mut involved = conversations_of(&group);
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
    let stood_down = || {
        let fenced = lock(&inner.fenced);
        conversations.iter().all(|c| fenced.contains_key(c))
    };
    let outcome = inner.publisher.publish(&id, &outgoing, stood_down).await;
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
/// now on, and says which. A conversation whose last message is this log's own (an earlier
/// append whose outcome was unknown, stored late: it expected the same last seq, so nothing else
/// came between) is not refused, only read again; when no other writer was found, the append
/// fails as one to retry.
async fn fence(
    inner: &Inner,
    conversations: &[ConversationKey],
    expected: &HashMap<ConversationKey, u64>,
) -> StoreError {
    let mut refused = Vec::new();
    let mut own = Vec::new();
    for conversation in conversations {
        let subject = inner.subjects.of(conversation);
        let actual = inner.subject_last(&subject).await.unwrap_or(u64::MAX);
        if actual == expected[conversation] {
            continue;
        }
        if inner.last_is_own_append(&subject).await.unwrap_or(false) {
            own.push(conversation.clone());
        } else {
            refused.push(conversation.clone());
        }
    }
    inner.forget(&own);
    if refused.is_empty() && !own.is_empty() {
        tracing::warn!(conversations = ?own, "append refused: an earlier append of this log was stored late");
        return StoreError::cluster(
            "appending",
            format!(
                "an earlier append to {} whose outcome was unknown was stored after all; \
                 nothing of this append was stored: append again",
                own[0]
            ),
        );
    }
    if refused.is_empty() {
        refused = conversations.to_vec();
    }
    inner.forget(&refused);
    let mut fenced = lock(&inner.fenced);
    // A reserved conversation (`legio:memory`) has no owner: every node writes it, so a refusal
    // only says another node wrote first. Its copy is dropped (above); the next append reads
    // it again and expects its true last seq, so it is never refused for good.
    for conversation in refused.iter().filter(|c| !c.is_reserved()) {
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

    /// An append of `events` events to `conversations`.
    fn submit(conversations: &[&str], events: usize) -> Submit {
        use legio_core::{Audience, Message, MessageId, Participant, Timestamp};
        let at = Timestamp::from_unix_micros(0);
        let event = Event::MessagePosted(Message::text(
            MessageId::from_parts(at, [0; 10]),
            ConversationKey::new(conversations[0]).unwrap(),
            Participant::parse("pullo").unwrap(),
            Audience::All,
            "hi",
            at,
        ));
        Submit {
            events: vec![(event, Vec::new()); events],
            conversations: conversations
                .iter()
                .map(|c| ConversationKey::new(*c).unwrap())
                .collect(),
            reply: oneshot::channel().0,
        }
    }

    fn names(submits: &[Submit]) -> Vec<Vec<String>> {
        submits
            .iter()
            .map(|s| s.conversations.iter().map(|c| c.to_string()).collect())
            .collect()
    }

    fn groups(scheduled: &Scheduled) -> Vec<Vec<Vec<String>>> {
        scheduled.groups.iter().map(|g| names(g)).collect()
    }

    fn queue(of: &[(&[&str], usize)]) -> VecDeque<Submit> {
        of.iter().map(|(c, n)| submit(c, *n)).collect()
    }

    fn owned(of: &[&[&str]]) -> Vec<Vec<String>> {
        of.iter()
            .map(|c| c.iter().map(|s| s.to_string()).collect())
            .collect()
    }

    #[test]
    fn grouped_appends_of_idle_conversations_leave_as_one_batch_in_order() {
        let mut q = queue(&[
            (&["t:x"], 1),
            (&["t:y"], 1),
            (&["t:x"], 2),
            (&["t:y", "t:z"], 1),
        ]);
        let mut busy = HashSet::new();
        let scheduled = schedule(&mut q, &mut busy, Grouping::All, 4);
        assert_eq!(
            groups(&scheduled),
            vec![owned(&[&["t:x"], &["t:y"], &["t:x"], &["t:y", "t:z"]])]
        );
        assert!(scheduled.alone.is_empty());
        assert!(q.is_empty());
        assert_eq!(busy.len(), 3);
    }

    #[test]
    fn an_append_behind_a_busy_conversation_waits_and_so_do_later_ones_of_it() {
        let of: &[(&[&str], usize)] = &[
            (&["t:x"], 1),
            (&["t:y"], 1),
            (&["t:x"], 1),
            (&["t:x", "t:z"], 1),
            (&["t:z"], 1),
        ];
        for grouping in [Grouping::All, Grouping::Batches] {
            let mut q = queue(of);
            let mut busy: HashSet<ConversationKey> = [ConversationKey::new("t:x").unwrap()].into();
            let scheduled = schedule(&mut q, &mut busy, grouping, 4);
            let left: Vec<_> = scheduled
                .alone
                .iter()
                .chain(scheduled.groups.iter().flatten())
                .collect();
            assert_eq!(left.len(), 1, "{grouping:?}: only t:y leaves");
            assert_eq!(left[0].conversations[0].to_string(), "t:y");
            assert_eq!(
                q.len(),
                4,
                "{grouping:?}: t:z waits behind the append of t:x and t:z"
            );
        }
    }

    #[test]
    fn batches_group_appends_of_several_events_and_let_single_events_leave_alone() {
        let mut q = queue(&[
            (&["t:a"], 3),
            (&["t:b"], 1),
            (&["t:c"], 3),
            (&["t:a"], 1),
            (&["t:d"], 2),
        ]);
        let mut busy = HashSet::new();
        let scheduled = schedule(&mut q, &mut busy, Grouping::Batches, 1);
        assert_eq!(
            groups(&scheduled),
            vec![owned(&[&["t:a"], &["t:c"], &["t:d"]])]
        );
        assert_eq!(names(&scheduled.alone), owned(&[&["t:b"]]));
        assert_eq!(
            names(q.make_contiguous()),
            owned(&[&["t:a"]]),
            "t:a's single event waits behind its batch"
        );
    }

    #[test]
    fn batches_wait_for_a_free_slot_while_single_events_still_leave() {
        let mut q = queue(&[(&["t:a"], 3), (&["t:b"], 1), (&["t:c"], 1)]);
        let scheduled = schedule(&mut q, &mut HashSet::new(), Grouping::Batches, 0);
        assert!(scheduled.groups.is_empty());
        assert_eq!(names(&scheduled.alone), owned(&[&["t:b"], &["t:c"]]));
        assert_eq!(names(q.make_contiguous()), owned(&[&["t:a"]]));
        let mut q = queue(&[(&["t:a"], 2), (&["t:b"], 2), (&["t:a"], 2)]);
        let scheduled = schedule(&mut q, &mut HashSet::new(), Grouping::All, 1);
        assert_eq!(
            groups(&scheduled),
            vec![owned(&[&["t:a"], &["t:b"], &["t:a"]])]
        );
    }

    #[test]
    fn a_group_holds_at_most_an_atomic_batch_of_events() {
        let mut q = queue(&[(&["t:a"], 600), (&["t:b"], 600), (&["t:c"], 400)]);
        let scheduled = schedule(&mut q, &mut HashSet::new(), Grouping::All, 4);
        assert_eq!(
            groups(&scheduled),
            vec![owned(&[&["t:a"]]), owned(&[&["t:b"], &["t:c"]])],
            "only the last group takes more appends"
        );
    }
}
