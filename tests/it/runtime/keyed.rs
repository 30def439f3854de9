//! Posts with an idempotency key (`Runtime::post_once`): a retry stores nothing new and gets the
//! reply the message had, after a restart too; an agent that had not answered answers now; a key
//! reused for another message is refused.

use legio_core::{Event, History, IdempotencyKey, Participant};
use legio_llm::Fault;
use legio_runtime::{Posted, RuntimeError};

use super::{Legion, CONV};

const RESUMABLE: History = History::Session { resumable: true };

fn key(text: &str) -> IdempotencyKey {
    IdempotencyKey::new(text).unwrap()
}

async fn post_once(legion: &Legion, text: &str, k: &str) -> Result<Posted, RuntimeError> {
    legion
        .rt()
        .post_once(CONV, Participant::User, text, key(k), None)
        .await
}

/// The user's messages in the log, as texts.
fn user_messages(legion: &Legion) -> Vec<String> {
    legion
        .events()
        .into_iter()
        .filter_map(|r| match r.event {
            Event::MessagePosted(m) if m.sender == Participant::User => Some(m.text_content()),
            _ => None,
        })
        .collect()
}

fn reply_of(posted: &Posted) -> legio_runtime::Reply {
    posted.replies[0].outcome.clone().expect("a reply")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_keyed_post_is_stored_once_and_answered_with_the_first_reply() {
    let mut legion = Legion::new(RESUMABLE, "").await;
    let first = post_once(&legion, "hello @ann", "k-1").await.unwrap();
    assert!(!first.replayed);
    let again = post_once(&legion, "hello @ann", "k-1").await.unwrap();
    assert!(again.replayed, "the retry is told it was stored before");
    assert_eq!(reply_of(&again), reply_of(&first));
    assert_eq!(
        legion.requests("ann").len(),
        1,
        "the model is not asked twice"
    );
    // After a crash, the new actor knows nothing of the turn: the log says it was answered.
    legion.crash_and_restart().await;
    let after = post_once(&legion, "hello @ann", "k-1").await.unwrap();
    assert!(after.replayed);
    assert_eq!(reply_of(&after), reply_of(&first));
    assert_eq!(legion.requests("ann").len(), 1, "nor after a restart");
    assert_eq!(user_messages(&legion), ["hello @ann"]);
    // Another key is another message; so is the same key in another conversation.
    let other = post_once(&legion, "hello @ann", "k-2").await.unwrap();
    assert!(!other.replayed);
    let elsewhere = legion
        .rt()
        .post_once("test:2", Participant::User, "hi", key("k-1"), None)
        .await
        .unwrap();
    assert!(!elsewhere.replayed);
    assert_eq!(user_messages(&legion), ["hello @ann", "hello @ann", "hi"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_reused_for_another_message_is_refused_and_stores_nothing() {
    let legion = Legion::new(RESUMABLE, "").await;
    post_once(&legion, "hello @ann", "k-1").await.unwrap();
    let before = legion.events().len();
    let refused = post_once(&legion, "hello @bob", "k-1").await.unwrap_err();
    assert!(
        matches!(refused, RuntimeError::IdempotencyKeyReused { ref key, .. } if key == "k-1"),
        "{refused}"
    );
    assert_eq!(
        refused.code(),
        legio_runtime::ErrorCode::IdempotencyKeyReused
    );
    let as_ann = legion
        .rt()
        .post_once(CONV, "ann", "hello @ann", key("k-1"), None)
        .await
        .unwrap_err();
    assert!(matches!(as_ann, RuntimeError::IdempotencyKeyReused { .. }));
    assert_eq!(legion.events().len(), before, "nothing stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_arriving_together_store_one_message_and_run_one_turn() {
    let legion = Legion::with_provider(RESUMABLE, "", "latency_ms = 50").await;
    let attempts = (0..4).map(|_| post_once(&legion, "hello @ann", "together"));
    let answers: Vec<Posted> = futures_util::future::join_all(attempts)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(user_messages(&legion), ["hello @ann"]);
    assert_eq!(answers.iter().filter(|p| !p.replayed).count(), 1);
    for posted in &answers {
        assert_eq!(reply_of(posted), reply_of(&answers[0]));
    }
    assert_eq!(legion.requests("ann").len(), 1, "one turn");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_whose_turn_failed_answers_the_retry() {
    let legion = Legion::new(RESUMABLE, "").await;
    legion.provider.inject(
        Some(&Legion::agent("bob")),
        Fault::Error("overloaded".into()),
    );
    let first = post_once(&legion, "hello @ann @bob", "k-1").await.unwrap();
    assert!(first.replies[0].outcome.is_ok(), "ann answered");
    assert!(first.replies[1].outcome.is_err(), "bob failed");
    let again = post_once(&legion, "hello @ann @bob", "k-1").await.unwrap();
    assert!(again.replayed);
    assert_eq!(reply_of(&again), reply_of(&first), "ann's reply, as it was");
    let bob = again.replies[1].outcome.clone().expect("bob answers now");
    assert_eq!(legion.requests("ann").len(), 1);
    let bob_calls: Vec<_> = legion.requests("bob");
    assert_eq!(bob_calls.iter().filter(|r| r.succeeded).count(), 1);
    assert_eq!(user_messages(&legion), ["hello @ann @bob"]);
    let replies_of_bob = legion
        .events()
        .into_iter()
        .filter(|r| matches!(&r.event, Event::MessagePosted(m) if m.sender == Participant::Agent(Legion::agent("bob"))))
        .count();
    assert_eq!(replies_of_bob, 1, "{bob:?}");
}

/// A retry of a message the agent went on from without answering (its turn failed, then it
/// answered a later message that carried this one as history) is not run again: the session
/// holds the message already, and showing it as new would show it twice. The retry says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_the_agent_went_on_is_refused_for_that_agent_not_run() {
    let legion = Legion::new(RESUMABLE, "").await;
    let bob = Legion::agent("bob");
    legion
        .provider
        .inject(Some(&bob), Fault::Error("overloaded".into()));
    let first = post_once(&legion, "first @bob", "k-1").await.unwrap();
    assert!(first.replies[0].outcome.is_err());
    let later = post_once(&legion, "later @bob", "k-2").await.unwrap();
    let later = reply_of(&later);
    let calls = legion.requests("bob").len();
    for attempt in 0..2 {
        let again = post_once(&legion, "first @bob", "k-1").await.unwrap();
        assert!(again.replayed);
        let error = again.replies[0].outcome.clone().unwrap_err();
        assert_eq!(
            error.kind,
            legio_runtime::TurnErrorKind::Unanswered,
            "attempt {attempt}: {error:?}"
        );
        assert_ne!(
            again.replies[0].seq(),
            Some(later.seq),
            "never the later message's reply"
        );
    }
    assert_eq!(legion.requests("bob").len(), calls, "no model call");
    assert_eq!(user_messages(&legion), ["first @bob", "later @bob"]);
}
