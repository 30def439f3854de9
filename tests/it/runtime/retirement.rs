//! Retirement of conversation supervisors: a conversation whose agents were all reaped keeps no
//! supervisor, and posts racing with reaps and retirements each get their reply exactly once,
//! with each message in the log once (real runtime, scripted provider).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use legio_core::{Event, History, IdempotencyKey, Participant};
use legio_runtime::Runtime;

use super::Legion;

const RESUMABLE: History = History::Session { resumable: true };

/// Polls until no conversation has a supervisor, with a deadline.
async fn until_all_retired(rt: &Runtime) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let live = rt.live_conversations().await;
        if live == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{live} supervisors never retired"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Polls until `done` holds, with a deadline.
async fn until(done: impl Fn() -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reaped_conversations_keep_no_supervisor_and_come_back_on_the_next_post() {
    let legion = Legion::new(RESUMABLE, "").await;
    let rt = legion.rt();
    for i in 0..20 {
        // Half of them keyed: their keyed ids are conversation state too.
        let key = (i % 2 == 0).then(|| IdempotencyKey::new(&format!("k-{i}")).unwrap());
        let posting = rt.posting(format!("retire:{i}").as_str(), "@ann hello");
        let posted = posting.key(key).send().await;
        assert!(posted.unwrap().replies[0].error().is_none());
    }
    assert_eq!(rt.live_conversations().await, 20);
    assert_eq!(
        rt.conversations_in_memory(),
        20,
        "one entry per conversation"
    );
    assert_eq!(rt.reap_idle_older_than(Duration::ZERO).await.unwrap(), 20);
    until_all_retired(rt).await;
    until(
        || rt.conversations_in_memory() == 0,
        "entries gone with their supervisors",
    )
    .await;
    // A conversation with no agent (a reset of an agent never started) retires at the next reap.
    rt.reset("retire:never", "bob").await.unwrap();
    assert_eq!(rt.live_conversations().await, 1);
    assert_eq!(rt.reap_idle_older_than(Duration::ZERO).await.unwrap(), 0);
    until_all_retired(rt).await;
    // A retired conversation starts again from the log: ann resumes her suspended session.
    let posted = rt.post("retire:3", "@ann again").await.unwrap();
    assert!(posted.replies[0].error().is_none());
    assert_eq!(rt.live_conversations().await, 1);
    let boundaries = legion.boundaries("ann");
    assert_eq!(
        boundaries
            .iter()
            .filter(|b| b.as_str() == "suspended:idle")
            .count(),
        20,
        "{boundaries:?}"
    );
}

/// Posts, reaps and retirements interleaved many times on the same few conversations: a reaper
/// loops without pause while each conversation gets posts one after another (some in pairs, so
/// two posts can meet a retirement), and the test also waits now and then until every
/// supervisor retired, so the next posts find none. Every post gets one reply without error,
/// the log has each posted text once, and each user message exactly one reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posts_racing_with_reaps_and_retirements_are_each_answered_exactly_once() {
    const CONVERSATIONS: usize = 6;
    const ROUNDS: usize = 60;
    let legion = Legion::new(RESUMABLE, "").await;
    let rt = legion.rt();
    let stop = AtomicBool::new(false);
    let reaped = AtomicUsize::new(0);
    let reaper = async {
        while !stop.load(Ordering::SeqCst) {
            reaped.fetch_add(
                rt.reap_idle_older_than(Duration::ZERO).await.unwrap(),
                Ordering::SeqCst,
            );
            tokio::task::yield_now().await;
        }
    };
    let emptied = AtomicUsize::new(0);
    let posts = async {
        for round in 0..ROUNDS {
            let posts = (0..CONVERSATIONS).map(|c| {
                let key = format!("race:{c}");
                async move {
                    let text = format!("@ann c{c} r{round}");
                    let pair = format!("@ann c{c} r{round} pair");
                    let (one, two) = if (round + c) % 3 == 0 {
                        let (one, two) = tokio::join!(rt.post(key.as_str(), &text), async {
                            tokio::time::sleep(Duration::from_micros(50 * c as u64)).await;
                            rt.post(key.as_str(), &pair).await
                        });
                        (one, Some(two))
                    } else {
                        (rt.post(key.as_str(), &text).await, None)
                    };
                    for (posted, text) in [(Some(one), text), (two, pair)] {
                        let Some(posted) = posted else { continue };
                        let replies = posted.unwrap().replies;
                        assert_eq!(replies.len(), 1, "{text}");
                        assert!(
                            replies[0].error().is_none(),
                            "{text}: {:?}",
                            replies[0].error()
                        );
                    }
                }
            });
            futures_util::future::join_all(posts).await;
            if round % 10 == 9 {
                until_all_retired(rt).await;
                emptied.fetch_add(1, Ordering::SeqCst);
            }
        }
        stop.store(true, Ordering::SeqCst);
    };
    tokio::join!(reaper, posts);
    assert_eq!(emptied.load(Ordering::SeqCst), ROUNDS / 10);
    assert!(
        reaped.load(Ordering::SeqCst) >= ROUNDS,
        "reaps happened between the posts ({})",
        reaped.load(Ordering::SeqCst)
    );
    check_exactly_once(&legion, CONVERSATIONS, ROUNDS);
}

/// Each posted text once in the log, and each user message answered by exactly one of ann's.
fn check_exactly_once(legion: &Legion, conversations: usize, rounds: usize) {
    let mut texts: HashMap<String, usize> = HashMap::new();
    let mut answers: HashMap<legio_core::MessageId, usize> = HashMap::new();
    let mut users = Vec::new();
    for record in legion.events() {
        let Event::MessagePosted(message) = record.event else {
            continue;
        };
        match &message.sender {
            Participant::User => {
                *texts.entry(message.text_content()).or_default() += 1;
                users.push(message.id);
            }
            Participant::Agent(a) if a.as_str() == "ann" => {
                if let Some(to) = message.reply_to {
                    *answers.entry(to).or_default() += 1;
                }
            }
            _ => {}
        }
    }
    let pairs = (0..rounds)
        .flat_map(|r| (0..conversations).map(move |c| (r, c)))
        .filter(|(r, c)| (r + c) % 3 == 0)
        .count();
    assert_eq!(users.len(), rounds * conversations + pairs);
    assert!(texts.values().all(|n| *n == 1), "a text twice in the log");
    assert_eq!(texts.len(), users.len());
    for id in users {
        assert_eq!(answers.get(&id), Some(&1), "user message {id:?}");
    }
}
