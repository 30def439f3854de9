//! Property: over random sequences of bursts of concurrent posts (two conversations, several posts
//! in flight per agent, random mentions), process crashes (also in the middle of a burst, while
//! turns are at the provider), graceful restarts, idle reaps, manual resets, and injected panics
//! and errors, with a history window that binds (4):
//!
//! 1. no message outside an agent's visibility ever reaches any provider, and every item is the
//!    logged message;
//! 2. a full or bootstrap context holds exactly the last `history_window` visible messages before
//!    the new one;
//! 3. within one provider session, a message is sent again only if an earlier request of that
//!    session that did not complete (failed, or crashed before its checkpoint was recorded) carried
//!    it, and then it is marked redelivered; a message a completed request carried is never sent
//!    again, marked or not;
//! 4. a message is marked redelivered only if a turn of that agent for a message at or after it
//!    (and before the new one) failed or crashed: the runtime could not know what reached the
//!    provider. (A runtime that re-sent everything, all marked, fails 3; one that marked every
//!    delta item fails 4.)
//! 5. every provider session receives every message visible to its agent from its bootstrap's
//!    window on (its own replies aside), at least once.
//!
//! For stateless providers, with a window that does not bind (the window's slide is the one
//! place a start may move between compactions): 1 and 2, and every request's chat turns, less
//! its volatile tail (notice and status block), are the start of the agent's next request in
//! that conversation: a stateless transcript is append-only, whatever crashed or failed between.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use legio_core::{
    can_see, Audience, DeliveryMode, Event, History, Message, Participant, Seq, Viewer,
};
use legio_llm::{chat_turns, volatile_tail, ChatTurn, Fault, RecordedRequest};
use legio_runtime::Activity;
use proptest::prelude::*;

use super::Legion;

const AGENTS: [&str; 3] = ["lead", "ann", "bob"];
const CONVS: [&str; 2] = ["test:1", "test:2"];
const WINDOW: usize = 4;
/// A history window no test run fills: it never moves a context's start.
const UNBOUNDED: usize = 1_000;

#[derive(Clone, Debug)]
enum Op {
    /// Posts sent concurrently, each `(conversation, mentions)`; mentions: bit 0 ann, bit 1 bob;
    /// 4 = @all; 0 = none (the orchestrator).
    Burst(Vec<(usize, u8)>),
    /// A burst, and a process crash once `n` more requests have reached the provider (or the
    /// burst is over).
    CrashDuring(Vec<(usize, u8)>, usize),
    CrashRestart,
    GracefulRestart,
    Reap,
    /// Reset (conversation, agent).
    Reset(usize, usize),
    Panic(usize),
    Fail(usize),
}

fn posts() -> impl Strategy<Value = Vec<(usize, u8)>> {
    proptest::collection::vec((0..2usize, 0u8..5), 1..6)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => posts().prop_map(Op::Burst),
        2 => (posts(), 0..4usize).prop_map(|(p, n)| Op::CrashDuring(p, n)),
        1 => Just(Op::CrashRestart),
        1 => Just(Op::GracefulRestart),
        1 => Just(Op::Reap),
        1 => (0..2usize, 0..3usize).prop_map(|(c, a)| Op::Reset(c, a)),
        1 => (0..3usize).prop_map(Op::Panic),
        1 => (0..3usize).prop_map(Op::Fail),
    ]
}

fn text_for(mentions: u8, n: usize) -> String {
    match mentions {
        4 => format!("@all note {n}"),
        0 => format!("plain {n}"),
        bits => {
            let mut t = String::new();
            if bits & 1 != 0 {
                t.push_str("@ann ");
            }
            if bits & 2 != 0 {
                t.push_str("@bob ");
            }
            format!("{t}task {n}")
        }
    }
}

/// Waits, with a generous deadline, until no agent of any conversation is working.
async fn settle_all(legion: &Legion) {
    let deadline = Instant::now() + Duration::from_secs(60);
    for conv in CONVS {
        loop {
            let status = legion.rt().status(conv).await.unwrap();
            if status
                .iter()
                .all(|s| matches!(s.activity, Activity::Idle | Activity::Failed))
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "agents never settled: {status:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

async fn burst(legion: &Legion, posts: &[(usize, u8)], n: usize) {
    let texts = texts(posts, n);
    let sends = posts
        .iter()
        .zip(&texts)
        .map(|((c, _), text)| legion.rt().post(CONVS[*c], text));
    for result in join_all(sends).await {
        result.unwrap();
    }
}

/// The posts' texts: step `n`, post `i`.
fn texts(posts: &[(usize, u8)], n: usize) -> Vec<String> {
    posts
        .iter()
        .enumerate()
        .map(|(i, (_, m))| text_for(*m, n * 10 + i))
        .collect()
}

/// A burst cut by a crash once `n` more requests reached the provider.
async fn crash_during(legion: &mut Legion, posts: &[(usize, u8)], n: usize, step: usize) {
    let want = legion.provider.requests().len() + n + 1;
    {
        let legion = &*legion;
        let texts = texts(posts, step);
        let sends = join_all(
            posts
                .iter()
                .zip(&texts)
                .map(|((c, _), text)| legion.rt().post(CONVS[*c], text)),
        );
        let reached = async {
            while legion.provider.requests().len() < want {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        };
        // Whichever comes first; the posts' futures are dropped (their turns go on until the crash).
        tokio::select! {
            _ = sends => {}
            _ = reached => {}
        }
    }
    legion.crash_and_restart().await;
}

async fn run(history: History, ops: Vec<Op>, window: usize) {
    let runtime = format!(
        "history_window = {window}\nrestart_max = 100\nrestart_backoff_ms = 1\nrestart_backoff_max_ms = 5"
    );
    let mut legion = Legion::with_provider(history, &runtime, "latency_ms = 2").await;
    for (n, op) in ops.into_iter().enumerate() {
        match op {
            Op::Burst(posts) => {
                burst(&legion, &posts, n).await;
                settle_all(&legion).await;
            }
            Op::CrashDuring(posts, k) => crash_during(&mut legion, &posts, k, n).await,
            Op::CrashRestart => legion.crash_and_restart().await,
            Op::GracefulRestart => legion.shutdown_and_restart().await,
            Op::Reap => {
                legion
                    .rt()
                    .reap_idle_older_than(Duration::ZERO)
                    .await
                    .unwrap();
            }
            Op::Reset(c, a) => legion.rt().reset(CONVS[c], AGENTS[a]).await.unwrap(),
            Op::Panic(a) => legion
                .provider
                .inject(Some(&Legion::agent(AGENTS[a])), Fault::Panic),
            Op::Fail(a) => legion.provider.inject(
                Some(&Legion::agent(AGENTS[a])),
                Fault::Error("injected".into()),
            ),
        }
    }
    check(&legion, history, window);
    legion.crash_and_restart().await; // leave nothing running
}

/// What the log says about the turns.
struct Facts {
    messages: BTreeMap<Seq, Message>,
    /// (conversation, agent, up_to) of every recorded checkpoint.
    delivered: BTreeSet<(String, String, Seq)>,
}

impl Facts {
    fn read(legion: &Legion) -> Self {
        let mut facts = Self {
            messages: BTreeMap::new(),
            delivered: BTreeSet::new(),
        };
        for r in legion.events() {
            match r.event {
                Event::MessagePosted(m) => {
                    facts.messages.insert(r.seq, m);
                }
                Event::ContextDelivered(e) => {
                    facts.delivered.insert((
                        e.conversation.to_string(),
                        e.agent.to_string(),
                        e.up_to,
                    ));
                }
                _ => {}
            }
        }
        facts
    }

    /// The request reached the provider and its checkpoint was recorded.
    fn completed(&self, r: &RecordedRequest) -> bool {
        r.succeeded
            && self.delivered.contains(&(
                r.conversation.to_string(),
                r.agent.to_string(),
                r.plan.up_to,
            ))
    }

    /// The messages of `conversation` visible to `agent`, in log order.
    fn visible<'a>(
        &'a self,
        conversation: &'a str,
        agent: &'a legio_core::AgentName,
    ) -> impl Iterator<Item = (&'a Seq, &'a Message)> + 'a {
        self.messages.iter().filter(move |(_, m)| {
            m.conversation.as_str() == conversation && can_see(viewer(agent), m)
        })
    }
}

fn viewer(agent: &legio_core::AgentName) -> Viewer<'_> {
    if agent.as_str() == "lead" {
        Viewer::Everything
    } else {
        Viewer::Specialist(agent)
    }
}

/// A message that starts a turn of `agent`: it names the agent or all, and another sent it.
fn starts_turn(agent: &legio_core::AgentName, m: &Message) -> bool {
    let me = Participant::Agent(agent.clone());
    m.sender != me
        && match &m.audience {
            Audience::All => true,
            Audience::Only(list) => list.contains(&me),
        }
}

fn check(legion: &Legion, history: History, window: usize) {
    let facts = Facts::read(legion);
    let requests = legion.provider.requests();
    for r in &requests {
        check_visibility_and_window(&facts, r, window);
    }
    if history == History::Stateless && window >= UNBOUNDED {
        check_append_only(&requests);
    }
    for r in requests.iter().filter(|r| facts.completed(r)) {
        check_marks_are_justified(&facts, r);
    }
    if history.is_stateful() {
        let mut threads: HashMap<&str, Vec<&RecordedRequest>> = HashMap::new();
        for r in &requests {
            if let Some(session) = &r.provider_session {
                threads.entry(session).or_default().push(r);
            }
        }
        for (session, turns) in threads {
            check_thread(&facts, session, &turns);
        }
    }
}

/// Stateless renders only grow: each request's chat turns less its volatile tail start the
/// next request of the same agent in the same conversation.
fn check_append_only(requests: &[RecordedRequest]) {
    let mut last: HashMap<(String, String), Vec<ChatTurn>> = HashMap::new();
    for r in requests {
        let mut turns = chat_turns(&r.agent, &r.plan, r.status.as_deref());
        let key = (r.conversation.to_string(), r.agent.to_string());
        if let Some(before) = last.get(&key) {
            assert!(
                turns.starts_with(before),
                "{} {}: the request for {} rewrites the previous one:\n{before:#?}\nthen\n{turns:#?}",
                r.agent,
                r.conversation,
                r.plan.up_to
            );
        }
        if let Some(tail) = volatile_tail(&r.plan, r.status.as_deref()) {
            let last = turns.pop().map(|t| t.text);
            assert_eq!(
                last,
                Some(tail),
                "the volatile tail is a turn of its own, last"
            );
        }
        last.insert(key, turns);
    }
}

/// Properties 1 and 2.
fn check_visibility_and_window(facts: &Facts, r: &RecordedRequest, window: usize) {
    for item in r.plan.messages() {
        assert!(
            can_see(viewer(&r.agent), &item.message),
            "{} was sent message {} it may not see",
            r.agent,
            item.seq
        );
        assert_eq!(
            facts.messages.get(&item.seq),
            Some(&item.message),
            "the item is the logged message"
        );
    }
    assert!(!r.plan.new_message.redelivered, "a new message is new");
    if matches!(r.plan.mode, DeliveryMode::Full | DeliveryMode::Bootstrap) {
        let before: Vec<Seq> = facts
            .visible(r.conversation.as_str(), &r.agent)
            .map(|(s, _)| *s)
            .filter(|s| *s < r.plan.up_to)
            .collect();
        let want = &before[before.len().saturating_sub(window)..];
        let got: Vec<Seq> = r.plan.history.iter().map(|i| i.seq).collect();
        assert_eq!(
            got,
            want,
            "{} {}: a {} context holds the last {window} visible messages",
            r.agent,
            r.conversation,
            r.plan.mode.as_str()
        );
    }
}

/// Property 4: a redelivered mark needs a failed or crashed turn of this agent at or after it.
fn check_marks_are_justified(facts: &Facts, r: &RecordedRequest) {
    let answered = |seq: Seq| {
        facts
            .delivered
            .contains(&(r.conversation.to_string(), r.agent.to_string(), seq))
    };
    for item in r.plan.history.iter().filter(|i| i.redelivered) {
        let justified = facts
            .messages
            .range(item.seq..r.plan.up_to)
            .any(|(seq, m)| {
                m.conversation == r.conversation && starts_turn(&r.agent, m) && !answered(*seq)
            });
        assert!(
            justified,
            "{} {}: message {} marked redelivered in the turn for {}, but no turn of the agent \
             for a message from it on failed or crashed",
            r.agent, r.conversation, item.seq, r.plan.up_to
        );
    }
}

/// Properties 3 and 5 for one provider session, its requests in order.
fn check_thread(facts: &Facts, session: &str, turns: &[&RecordedRequest]) {
    let first = turns[0];
    assert!(
        first.resumed.is_none(),
        "{session}: a thread starts with a bootstrap"
    );
    assert_eq!(first.plan.mode, DeliveryMode::Bootstrap, "{session}");
    let shapes: Vec<String> = turns
        .iter()
        .map(|t| {
            format!(
                "{} [{}]",
                super::shape(t),
                if facts.completed(t) {
                    "completed"
                } else {
                    "incomplete"
                }
            )
        })
        .collect();
    // Seqs an earlier request may have left in the thread, and those a completed one did.
    let mut maybe_held: BTreeSet<Seq> = BTreeSet::new();
    let mut held: BTreeSet<Seq> = BTreeSet::new();
    for turn in turns {
        for item in turn.plan.messages() {
            assert!(
                !held.contains(&item.seq),
                "{session}: message {} sent again after a completed request carried it; requests: {shapes:#?}",
                item.seq
            );
            if maybe_held.contains(&item.seq) {
                assert!(
                    item.redelivered,
                    "{session}: message {} sent again after a failed request carried it, \
                     without the redelivered mark; requests: {shapes:#?}",
                    item.seq
                );
            }
        }
        let seqs = turn.plan.messages().map(|i| i.seq);
        if facts.completed(turn) {
            held.extend(seqs);
        } else {
            maybe_held.extend(seqs);
        }
    }
    // Property 5: from the bootstrap's window to the last message answered, nothing is missing.
    let me = Participant::Agent(first.agent.clone());
    let start = first
        .plan
        .messages()
        .map(|i| i.seq)
        .min()
        .unwrap_or(first.plan.up_to);
    let end = turns.iter().map(|t| t.plan.up_to).max().unwrap();
    let sent: BTreeSet<Seq> = held.union(&maybe_held).copied().collect();
    for (seq, message) in facts.visible(first.conversation.as_str(), &first.agent) {
        let own_later = message.sender == me && *seq > first.plan.up_to;
        if *seq >= start && *seq <= end && !own_later {
            assert!(
                sent.contains(seq),
                "{session} ({}): visible message {seq} never delivered; got {sent:?}",
                first.agent
            );
        }
    }
}

fn block_on(history: History, ops: Vec<Op>) {
    block_on_with(history, ops, WINDOW);
}

fn block_on_with(history: History, ops: Vec<Op>, window: usize) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(history, ops, window));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn resumable_sessions_receive_every_visible_message_exactly_once(ops in proptest::collection::vec(op(), 1..20)) {
        block_on(History::Session { resumable: true }, ops);
    }

    #[test]
    fn non_resumable_sessions_receive_every_visible_message_exactly_once(ops in proptest::collection::vec(op(), 1..20)) {
        block_on(History::Session { resumable: false }, ops);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Stateless providers keep no thread; what they are sent must still respect visibility and
    /// the window.
    #[test]
    fn stateless_requests_respect_visibility(ops in proptest::collection::vec(op(), 1..16)) {
        block_on(History::Stateless, ops);
    }

    /// With a window that never binds, a stateless transcript only grows.
    #[test]
    fn stateless_requests_only_grow(ops in proptest::collection::vec(op(), 1..16)) {
        block_on_with(History::Stateless, ops, UNBOUNDED);
    }
}

/// Failures proptest once shrank to (saved before the ops became bursts, so their seeds no longer
/// produce them), kept as explicit cases; `Post(m)` then is a burst of one post now.
#[test]
fn recorded_regressions_still_hold() {
    let post = |m: u8| Op::Burst(vec![(0, m)]);
    let cases = [
        vec![post(2), Op::Fail(2), Op::CrashRestart, post(2), post(2)],
        vec![Op::CrashRestart],
        vec![
            post(0),
            post(4),
            post(0),
            post(3),
            post(4),
            post(0),
            post(3),
            Op::CrashRestart,
            post(0),
        ],
        vec![
            post(0),
            post(3),
            post(4),
            post(3),
            post(3),
            post(3),
            post(0),
            post(4),
        ],
    ];
    for ops in cases {
        for resumable in [true, false] {
            block_on(History::Session { resumable }, ops.clone());
        }
    }
}
