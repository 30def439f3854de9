//! Who follows a turn with host tools: its progress goes to a [`Follower`], at first the turn's
//! caller. When a model calls host tools, the request that hands their results over may take
//! the turn over ([`crate::Runtime::follow_tool_results`]): from then on the turn's progress
//! goes to it, and it gets the turn's replies when the turn ends. So a host behind a load
//! balancer, whose results reach another process (on a cluster, another node) than the one it
//! posted the turn to, still follows its turn to its end.
//!
//! A turn with host tools sends its progress to a [`Relay`], a task that passes each step on to
//! the turn's follower of the moment; on its way it notes the calls a `ToolCallsRequired`
//! announces (in the conversation's entry: conversation/), so that the results of those calls can
//! name the turn to follow.

use std::sync::{Arc, Mutex, MutexGuard};

use legio_core::{ConversationKey, MessageId};
use tokio::sync::{mpsc, oneshot};

use crate::conversation::{lock as lock_part, Conversation, Conversations, FollowedTurn, Use};
pub(crate) use crate::conversation::{Ended, Follower};
use crate::progress::{Progress, ProgressSink};
use crate::reply::Posted;
use crate::tools::host_calls::HostToolCall;

type Target = Arc<Mutex<FollowedTurn>>;

/// Whether the turn that announced the call `id` in the conversation is still followed here.
pub(crate) fn knows(conversation: &Conversation, id: &str) -> bool {
    lock_part(&conversation.follows).contains_key(id)
}

/// Gives the turn that announced the call `id` to `follower`: the follower it had is told
/// (`Ended::TakenOver`), and the new one gets, first, the turn's announced calls that
/// `still_waiting` says wait for a result (announced to the old follower, which will not show
/// them now). `false` when no turn here announced that call, or it ended.
pub(crate) fn take_over(
    conversation: &Conversation,
    id: &str,
    follower: Follower,
    still_waiting: impl Fn(&str) -> bool,
) -> bool {
    let target = lock_part(&conversation.follows).get(id).cloned();
    match target {
        Some(target) => hand_over(&target, follower, still_waiting),
        None => false,
    }
}

/// Gives the conversation's turn that answers `message` and waits on calls it announced
/// (`still_waiting` says which still wait: a keyed post's first attempt, paused on them) to
/// `follower`, as [`take_over`] does. A turn whose calls were all answered runs on for the
/// request that answered them, and is not taken from it.
pub(crate) fn take_over_message(
    conversation: &Conversation,
    message: MessageId,
    follower: Follower,
    still_waiting: impl Fn(&str) -> bool,
) -> bool {
    // The map's lock is let go before a turn's is taken: a relay takes them the other way.
    let targets: Vec<Target> = lock_part(&conversation.follows)
        .values()
        .map(Arc::clone)
        .collect();
    let target = targets.into_iter().find(|t| {
        let turn = lock(t);
        let paused = turn.announced.iter().any(|c| still_waiting(&c.id));
        turn.message == message && !turn.ended && paused
    });
    match target {
        Some(target) => hand_over(&target, follower, still_waiting),
        None => false,
    }
}

/// Gives the turn to `follower` (see [`take_over`]); `false` when it ended.
fn hand_over(target: &Target, follower: Follower, still_waiting: impl Fn(&str) -> bool) -> bool {
    {
        let mut turn = lock(target);
        if turn.ended {
            return false;
        }
        let old = std::mem::replace(&mut turn.follower, follower);
        if let Some(end) = old.end {
            let _ = end.send(Ended::TakenOver);
        }
        let waiting = turn.announced.iter().filter(|c| still_waiting(&c.id));
        for step in calls_by_agent(waiting) {
            let _ = turn.follower.progress.send(step);
        }
    }
    true
}

/// `calls` as `ToolCallsRequired` steps, one per agent, in the order the agents first appear.
fn calls_by_agent<'a>(calls: impl Iterator<Item = &'a HostToolCall>) -> Vec<Progress> {
    let mut steps: Vec<(legio_core::AgentName, Vec<HostToolCall>)> = Vec::new();
    for call in calls {
        match steps.iter_mut().find(|(agent, _)| *agent == call.agent) {
            Some((_, calls)) => calls.push(call.clone()),
            None => steps.push((call.agent.clone(), vec![call.clone()])),
        }
    }
    steps
        .into_iter()
        .map(|(agent, calls)| Progress::ToolCallsRequired { agent, calls })
        .collect()
}

fn lock(target: &Target) -> MutexGuard<'_, FollowedTurn> {
    target.lock().unwrap_or_else(|p| p.into_inner())
}

/// A turn's relay: the sink the turn sends its progress to, and the end to tell it (none for a
/// turn without host tools, whose progress goes straight to its caller).
pub(crate) struct Relay {
    /// The sink to give the turn.
    pub(crate) sink: ProgressSink,
    finish: Option<oneshot::Sender<(Posted, oneshot::Sender<()>)>>,
}

impl Relay {
    /// Starts the relay of a turn in `conversation`, answering `message`, whose caller follows it
    /// through `progress`.
    fn start(conversation: Use, message: MessageId, progress: ProgressSink) -> Self {
        let (sink, steps) = mpsc::unbounded_channel();
        let (finish, finished) = oneshot::channel();
        let target = Arc::new(Mutex::new(FollowedTurn {
            message,
            follower: Follower {
                progress,
                end: None,
            },
            announced: Vec::new(),
            ended: false,
        }));
        let pass = Pass {
            conversation,
            target,
            noted: Vec::new(),
        };
        tokio::spawn(pass.run(steps, finished));
        Self {
            sink,
            finish: Some(finish),
        }
    }

    /// The relay of a turn in `conversation` whose caller follows it through `progress` (none
    /// without): a turn with host tools may be taken over by the request that hands their
    /// results, so its progress goes through a relay task; any other turn's goes straight to
    /// its caller.
    pub(crate) fn for_turn(
        table: &Conversations,
        (conversation, message): (&ConversationKey, MessageId),
        host_tools: bool,
        progress: Option<ProgressSink>,
    ) -> Option<Self> {
        match progress {
            Some(sink) if host_tools => Some(Self::start(table.enter(conversation), message, sink)),
            progress => progress.map(Self::direct),
        }
    }

    /// No relay: the turn sends its progress to its caller's `progress` itself.
    fn direct(progress: ProgressSink) -> Self {
        Self {
            sink: progress,
            finish: None,
        }
    }

    /// The turn ended with `posted` (every step it sent came before): passes on what is left,
    /// gives its follower (if one took the turn over) the replies, and returns once done.
    pub(crate) async fn finish(self, posted: &Posted) {
        let Some(finish) = self.finish else {
            return;
        };
        let (done, finished) = oneshot::channel();
        if finish.send((posted.clone(), done)).is_ok() {
            let _ = finished.await;
        }
    }
}

/// A relay's task: its turn, and the calls it noted (its use keeps the conversation's entry,
/// where they are noted, while it runs).
struct Pass {
    conversation: Use,
    target: Target,
    noted: Vec<String>,
}

impl Pass {
    /// Passes steps on until the turn's end (then what is left, and the end). Should the post
    /// be given up (its future dropped: no end comes), the turn goes on in its actors: steps
    /// are passed on until they stop sending, and the follower's end is dropped.
    async fn run(
        mut self,
        mut steps: mpsc::UnboundedReceiver<Progress>,
        mut finished: oneshot::Receiver<(Posted, oneshot::Sender<()>)>,
    ) {
        let end = loop {
            tokio::select! {
                biased;
                Some(step) = steps.recv() => self.pass(step),
                end = &mut finished => break end.ok(),
            }
        };
        if end.is_some() {
            while let Ok(step) = steps.try_recv() {
                self.pass(step);
            }
        } else {
            while let Some(step) = steps.recv().await {
                self.pass(step);
            }
        }
        let follower_end = {
            let mut turn = lock(&self.target);
            turn.ended = true;
            turn.follower.end.take()
        };
        self.forget();
        if let Some((posted, done)) = end {
            if let Some(follower_end) = follower_end {
                let _ = follower_end.send(Ended::Replies(posted));
            }
            let _ = done.send(());
        }
    }

    /// Passes a step on to the follower, noting the calls it announces first.
    fn pass(&mut self, step: Progress) {
        let mut turn = lock(&self.target);
        if let Progress::ToolCallsRequired { calls, .. } = &step {
            let mut follows = lock_part(&self.conversation.follows);
            for call in calls {
                follows.insert(call.id.clone(), Arc::clone(&self.target));
                self.noted.push(call.id.clone());
            }
            turn.announced.extend(calls.iter().cloned());
        }
        let _ = turn.follower.progress.send(step);
    }

    /// Forgets the calls this turn announced (unless a later turn reused an id).
    fn forget(&mut self) {
        let mut follows = lock_part(&self.conversation.follows);
        for key in self.noted.drain(..) {
            if follows
                .get(&key)
                .is_some_and(|t| Arc::ptr_eq(t, &self.target))
            {
                follows.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::host_calls::HostToolCall;
    use legio_core::AgentName;

    fn required(id: &str) -> Progress {
        Progress::ToolCallsRequired {
            agent: AgentName::new("a").unwrap(),
            calls: vec![HostToolCall {
                agent: AgentName::new("a").unwrap(),
                id: id.into(),
                name: "lookup".into(),
                arguments: "{}".into(),
            }],
        }
    }

    fn delta(text: &str) -> Progress {
        Progress::Delta {
            agent: AgentName::new("a").unwrap(),
            text: text.into(),
        }
    }

    fn drain(rx: &mut mpsc::UnboundedReceiver<Progress>) -> Vec<Progress> {
        std::iter::from_fn(|| rx.try_recv().ok()).collect()
    }

    /// The caller gets the steps until a follower takes the turn over by one of its calls; the
    /// follower is told first the calls still waiting (announced to the caller), then gets
    /// every later step; a second follower takes it over from the first, which is told so, and
    /// gets the replies; the calls are forgotten at the end, and the turn cannot be taken over
    /// once ended.
    #[tokio::test]
    async fn followers_take_a_turn_over_by_its_calls_and_the_last_gets_its_end() {
        let table = Conversations::default();
        let c = table.enter(&ConversationKey::new("f:1").unwrap());
        let (caller, mut caller_rx) = mpsc::unbounded_channel();
        let relay = Relay::start(c.clone(), MessageId(uuid::Uuid::nil()), caller);
        let none = |_: &str| false;
        assert!(
            !take_over(&c, "call-1", follower().0, none),
            "not announced yet"
        );
        relay.sink.send(delta("before")).unwrap();
        relay.sink.send(required("call-1")).unwrap();
        relay.sink.send(required("call-2")).unwrap();
        until(|| knows(&c, "call-2")).await;
        let (first, mut first_rx, first_end) = follower();
        assert!(take_over(&c, "call-1", first, |id| id == "call-2"));
        relay.sink.send(delta("after")).unwrap();
        until(|| first_rx.len() >= 2).await;
        let (second, mut second_rx, second_end) = follower();
        assert!(take_over(&c, "call-2", second, none));
        assert!(matches!(first_end.await, Ok(Ended::TakenOver)));
        relay.sink.send(delta("last")).unwrap();
        let posted = Posted {
            replies: Vec::new(),
            unknown_mentions: vec!["@x".into()],
            replayed: false,
        };
        relay.finish(&posted).await;
        assert_eq!(
            drain(&mut caller_rx),
            [delta("before"), required("call-1"), required("call-2")]
        );
        assert_eq!(drain(&mut first_rx), [required("call-2"), delta("after")]);
        assert_eq!(drain(&mut second_rx), [delta("last")]);
        match second_end.await {
            Ok(Ended::Replies(replies)) => assert_eq!(replies, posted),
            other => panic!("the last follower got {other:?}"),
        }
        assert!(
            !take_over(&c, "call-2", follower().0, none),
            "an ended turn is taken over by nobody"
        );
        for call in ["call-1", "call-2"] {
            assert!(!knows(&c, call), "{call} forgotten when the turn ended");
        }
    }

    /// A keyed retry takes over the turn answering its message only while some of the turn's
    /// calls still wait: answered, the turn runs on for the request that answered them.
    #[tokio::test]
    async fn a_retry_takes_over_only_a_turn_still_paused() {
        let table = Conversations::default();
        let c = table.enter(&ConversationKey::new("f:2").unwrap());
        let (message, other) = (
            MessageId(uuid::Uuid::from_u128(1)),
            MessageId(uuid::Uuid::nil()),
        );
        let (caller, _caller_rx) = mpsc::unbounded_channel();
        let relay = Relay::start(c.clone(), message, caller);
        relay.sink.send(required("call-1")).unwrap();
        until(|| knows(&c, "call-1")).await;
        let waiting = |id: &str| id == "call-1";
        let answered = |_: &str| false;
        assert!(
            !take_over_message(&c, message, follower().0, answered),
            "answered"
        );
        assert!(
            !take_over_message(&c, other, follower().0, waiting),
            "another message"
        );
        let (retry, mut retry_rx, _end) = follower();
        assert!(take_over_message(&c, message, retry, waiting));
        assert_eq!(drain(&mut retry_rx), [required("call-1")], "shown the call");
    }

    /// Yields until `done` holds; fails after 10 s.
    async fn until(done: impl Fn() -> bool) {
        let wait = async {
            while !done() {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), wait)
            .await
            .expect("within 10 s");
    }

    fn follower() -> (
        Follower,
        mpsc::UnboundedReceiver<Progress>,
        oneshot::Receiver<Ended>,
    ) {
        let (progress, rx) = mpsc::unbounded_channel();
        let (end, end_rx) = oneshot::channel();
        let follower = Follower {
            progress,
            end: Some(end),
        };
        (follower, rx, end_rx)
    }
}
