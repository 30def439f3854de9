//! Property: over random sequences of posts (random mentions), process crashes and restarts,
//! graceful restarts, idle reaps, manual resets, and injected panics and errors, for every
//! stateful provider session the concatenation of what it received contains each message visible
//! to its agent since its bootstrap exactly once and in log order (a repeat only where marked
//! redelivered), and no message outside an agent's visibility ever reaches any provider.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use legio_core::{can_see, Event, History, Message, Participant, Seq, Viewer};
use legio_llm::Fault;
use legio_runtime::Activity;
use proptest::prelude::*;

use super::{Legion, CONV};

const AGENTS: [&str; 3] = ["lead", "ann", "bob"];

#[derive(Clone, Debug)]
enum Op {
    /// Mentions: bit 0 ann, bit 1 bob; 4 = @all; 0 = none (the orchestrator).
    Post(u8),
    CrashRestart,
    GracefulRestart,
    Reap,
    Reset(usize),
    Panic(usize),
    Fail(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (0u8..5).prop_map(Op::Post),
        2 => Just(Op::CrashRestart),
        1 => Just(Op::GracefulRestart),
        1 => Just(Op::Reap),
        1 => (0..3usize).prop_map(Op::Reset),
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

async fn settle_all(legion: &Legion) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = legion.rt().status(CONV).await.unwrap();
        if status
            .iter()
            .all(|s| matches!(s.activity, Activity::Idle | Activity::Failed))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "agents never settled: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn run(history: History, ops: Vec<Op>) {
    let mut legion = Legion::new(history, "history_window = 1000\nrestart_max = 100\nrestart_backoff_ms = 1\nrestart_backoff_max_ms = 5").await;
    for (n, op) in ops.into_iter().enumerate() {
        match op {
            Op::Post(m) => {
                legion.post(&text_for(m, n)).await;
                settle_all(&legion).await;
            }
            Op::CrashRestart => legion.crash_and_restart().await,
            Op::GracefulRestart => legion.shutdown_and_restart().await,
            Op::Reap => {
                legion
                    .rt()
                    .reap_idle_older_than(Duration::ZERO)
                    .await
                    .unwrap();
            }
            Op::Reset(a) => legion.rt().reset(CONV, AGENTS[a]).await.unwrap(),
            Op::Panic(a) => legion
                .provider
                .inject(Some(&Legion::agent(AGENTS[a])), Fault::Panic),
            Op::Fail(a) => legion.provider.inject(
                Some(&Legion::agent(AGENTS[a])),
                Fault::Error("injected".into()),
            ),
        }
    }
    check(&legion);
    legion.crash_and_restart().await; // leave nothing running
}

fn check(legion: &Legion) {
    let messages: BTreeMap<Seq, Message> = legion
        .events()
        .into_iter()
        .filter_map(|r| match r.event {
            Event::MessagePosted(m) => Some((r.seq, m)),
            _ => None,
        })
        .collect();
    let requests = legion.provider.requests();
    // 1. Visibility: nothing outside an agent's rule ever reached a provider.
    for request in &requests {
        let agent = request.agent.clone();
        let viewer = if agent.as_str() == "lead" {
            Viewer::Everything
        } else {
            Viewer::Specialist(&agent)
        };
        for item in request.plan.messages() {
            assert!(
                can_see(viewer, &item.message),
                "{} was sent message {} it may not see",
                agent,
                item.seq
            );
            assert_eq!(
                messages.get(&item.seq),
                Some(&item.message),
                "the item is the logged message"
            );
        }
    }
    // 2. Exactly once, in log order, per provider session.
    let mut threads: HashMap<String, Vec<&legio_llm::RecordedRequest>> = HashMap::new();
    for request in requests.iter().filter(|r| r.succeeded) {
        if let Some(session) = &request.provider_session {
            threads.entry(session.clone()).or_default().push(request);
        }
    }
    for (session, turns) in threads {
        let agent = turns[0].agent.clone();
        let me = Participant::Agent(agent.clone());
        let viewer = if agent.as_str() == "lead" {
            Viewer::Everything
        } else {
            Viewer::Specialist(&agent)
        };
        assert!(
            turns[0].resumed.is_none(),
            "{session}: a thread starts with a bootstrap"
        );
        assert_eq!(turns[0].plan.mode.as_str(), "bootstrap");
        let first_new = turns[0].plan.new_message.seq;
        let last_new = turns.last().unwrap().plan.new_message.seq;
        let mut seen: Vec<Seq> = Vec::new();
        for turn in &turns {
            for item in turn.plan.messages() {
                if seen.contains(&item.seq) {
                    assert!(
                        item.redelivered,
                        "{session}: message {} sent twice without the redelivered mark",
                        item.seq
                    );
                    continue;
                }
                if let Some(last) = seen.last() {
                    assert!(
                        item.seq > *last || item.redelivered,
                        "{session}: message {} out of log order",
                        item.seq
                    );
                }
                seen.push(item.seq);
            }
        }
        for (seq, message) in messages.range(..=last_new) {
            let own_after_bootstrap = message.sender == me && *seq > first_new;
            if can_see(viewer, message) && !own_after_bootstrap {
                assert!(
                    seen.contains(seq),
                    "{session} ({agent}): visible message {seq} never delivered; got {seen:?}"
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn resumable_sessions_receive_every_visible_message_exactly_once(ops in proptest::collection::vec(op(), 1..25)) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(run(History::Session { resumable: true }, ops));
    }

    #[test]
    fn non_resumable_sessions_receive_every_visible_message_exactly_once(ops in proptest::collection::vec(op(), 1..25)) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(run(History::Session { resumable: false }, ops));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Stateless providers keep no thread; what they are sent must still respect visibility.
    #[test]
    fn stateless_requests_respect_visibility(ops in proptest::collection::vec(op(), 1..20)) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(run(History::Stateless, ops));
    }
}
