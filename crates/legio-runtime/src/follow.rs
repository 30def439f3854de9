//! Who follows a turn with host tools: its progress goes to a [`Follower`], at first the turn's
//! caller. When a model calls host tools, the request that hands their results over may take
//! the turn over ([`crate::Runtime::follow_tool_results`]): from then on the turn's progress
//! goes to it, and it gets the turn's replies when the turn ends. So a host behind a load
//! balancer, whose results reach another process (on a cluster, another node) than the one it
//! posted the turn to, still follows its turn to its end.
//!
//! A turn with host tools sends its progress to a [`Relay`], a task that passes each step on to
//! the turn's follower of the moment; on its way it notes the calls a `ToolCallsRequired`
//! announces (in [`Follows`]), so that the results of those calls can name the turn to follow.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use legio_core::ConversationKey;
use tokio::sync::{mpsc, oneshot};

use crate::progress::{Progress, ProgressSink};
use crate::reply::Posted;

/// Where a turn's progress goes, and who gets its replies when it ends (none: the turn's
/// caller, who gets them from its post).
pub(crate) struct Follower {
    pub(crate) progress: ProgressSink,
    pub(crate) end: Option<oneshot::Sender<Posted>>,
}

/// A turn's follower of the moment, shared by its relay and the calls it announced.
type Target = Arc<Mutex<Follower>>;

/// A waiting call: its conversation and its id.
type CallKey = (ConversationKey, String);

/// The followers of the turns whose host calls were announced, by call (a relay notes its
/// turn's calls as it passes their `ToolCallsRequired` on, and forgets them when its turn ends).
#[derive(Clone, Default)]
pub(crate) struct Follows(Arc<Mutex<HashMap<CallKey, Target>>>);

impl Follows {
    fn lock(&self) -> MutexGuard<'_, HashMap<CallKey, Target>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the turn that announced the call `id` in `conversation` is still followed here.
    pub(crate) fn knows(&self, conversation: &ConversationKey, id: &str) -> bool {
        self.lock()
            .contains_key(&(conversation.clone(), id.to_owned()))
    }

    /// Gives the turn that announced the call `id` to `follower`; the follower it had is
    /// dropped (a caller waiting for its end is told the turn is followed elsewhere). `false`
    /// when no turn here announced that call.
    pub(crate) fn take_over(
        &self,
        conversation: &ConversationKey,
        id: &str,
        follower: Follower,
    ) -> bool {
        let target = self
            .lock()
            .get(&(conversation.clone(), id.to_owned()))
            .cloned();
        let Some(target) = target else {
            return false;
        };
        let old = std::mem::replace(&mut *lock(&target), follower);
        drop(old);
        true
    }
}

fn lock(target: &Target) -> MutexGuard<'_, Follower> {
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
    /// Starts the relay of a turn in `conversation` whose caller follows it through `progress`.
    pub(crate) fn start(
        follows: &Follows,
        conversation: &ConversationKey,
        progress: ProgressSink,
    ) -> Self {
        let (sink, steps) = mpsc::unbounded_channel();
        let (finish, finished) = oneshot::channel();
        let target = Arc::new(Mutex::new(Follower {
            progress,
            end: None,
        }));
        let pass = Pass {
            follows: follows.clone(),
            conversation: conversation.clone(),
            target,
            noted: Vec::new(),
        };
        tokio::spawn(pass.run(steps, finished));
        Self {
            sink,
            finish: Some(finish),
        }
    }

    /// No relay: the turn sends its progress to its caller's `progress` itself.
    pub(crate) fn direct(progress: ProgressSink) -> Self {
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

/// A relay's task: its turn, its follower, and the calls it noted.
struct Pass {
    follows: Follows,
    conversation: ConversationKey,
    target: Target,
    noted: Vec<CallKey>,
}

impl Pass {
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
        while let Ok(step) = steps.try_recv() {
            self.pass(step);
        }
        self.forget();
        if let Some((posted, done)) = end {
            if let Some(end) = lock(&self.target).end.take() {
                let _ = end.send(posted);
            }
            let _ = done.send(());
        }
    }

    /// Passes a step on to the follower, noting the calls it announces first.
    fn pass(&mut self, step: Progress) {
        if let Progress::ToolCallsRequired { calls, .. } = &step {
            let mut follows = self.follows.lock();
            for call in calls {
                let key = (self.conversation.clone(), call.id.clone());
                follows.insert(key.clone(), Arc::clone(&self.target));
                self.noted.push(key);
            }
        }
        let _ = lock(&self.target).progress.send(step);
    }

    /// Forgets the calls this turn announced (unless a later turn reused an id).
    fn forget(&mut self) {
        let mut follows = self.follows.lock();
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
    use crate::HostToolCall;
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
    /// follower gets every later step, then the replies; the calls are forgotten at the end.
    #[tokio::test]
    async fn a_follower_takes_a_turn_over_by_its_call_and_gets_its_end() {
        let follows = Follows::default();
        let c = ConversationKey::new("f:1").unwrap();
        let (caller, mut caller_rx) = mpsc::unbounded_channel();
        let relay = Relay::start(&follows, &c, caller);
        assert!(
            !follows.take_over(&c, "call-1", follower().0),
            "not announced yet"
        );
        relay.sink.send(delta("before")).unwrap();
        relay.sink.send(required("call-1")).unwrap();
        tokio::task::yield_now().await;
        while !follows.knows(&c, "call-1") {
            tokio::task::yield_now().await;
        }
        let (new, mut new_rx, end) = follower();
        assert!(follows.take_over(&c, "call-1", new));
        relay.sink.send(delta("after")).unwrap();
        let posted = Posted {
            replies: Vec::new(),
            unknown_mentions: vec!["@x".into()],
        };
        relay.finish(&posted).await;
        assert_eq!(drain(&mut caller_rx), [delta("before"), required("call-1")]);
        assert_eq!(drain(&mut new_rx), [delta("after")]);
        assert_eq!(end.await.unwrap(), posted);
        assert!(
            !follows.knows(&c, "call-1"),
            "forgotten when the turn ended"
        );
    }

    fn follower() -> (
        Follower,
        mpsc::UnboundedReceiver<Progress>,
        oneshot::Receiver<Posted>,
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
