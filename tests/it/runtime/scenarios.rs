//! One scenario per session boundary (prompt change, token ceiling, idle reap, manual reset,
//! actor panic, process restart, graceful shutdown, lost provider session), plus routing,
//! parallel dispatch with a failing or hanging agent, and restart intensity.

use std::time::{Duration, Instant};

use legio_core::{Event, History};
use legio_llm::Fault;
use legio_runtime::Activity;

use super::{shape, Legion, CONV};

const RESUMABLE: History = History::Session { resumable: true };
const NOT_RESUMABLE: History = History::Session { resumable: false };
/// Fast restarts for tests.
const FAST: &str = "restart_backoff_ms = 5\nrestart_backoff_max_ms = 20";

/// Polls until `agent` is idle or failed (its actor restarted or gave up), with a deadline.
async fn settle(legion: &Legion, agent: &str) -> Activity {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = legion.rt().status(CONV).await.unwrap();
        let activity = status
            .iter()
            .find(|s| s.agent.as_str() == agent)
            .unwrap()
            .activity;
        if matches!(activity, Activity::Idle | Activity::Failed) {
            return activity;
        }
        assert!(
            Instant::now() < deadline,
            "{agent} never settled (still {activity:?})"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateful_sessions_get_a_bootstrap_then_only_deltas() {
    let legion = Legion::new(RESUMABLE, "").await;
    let replies = legion.post("hello").await;
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].agent.as_str(), "lead");
    assert!(replies[0].error().is_none(), "{:?}", replies[0].error());
    assert_eq!(
        replies[0].seq().map(|s| s.0),
        Some(4),
        "the reply is in the log before it is returned"
    );
    legion.post("again").await;
    legion.post("@ann check this").await;
    legion.post("status?").await;
    let lead: Vec<String> = legion.requests("lead").iter().map(shape).collect();
    // 1 user, 2 opened, 3 delivered, 4 reply, 5 completed; 6 user, 7-9 turn; 10 @ann, 11 opened,
    // 12-14 ann's turn; 15 user.
    assert_eq!(
        lead,
        vec!["bootstrap  | 1", "delta  | 6", "delta 10 13 | 15"]
    );
    let ann: Vec<String> = legion.requests("ann").iter().map(shape).collect();
    assert_eq!(
        ann,
        vec!["bootstrap  | 10"],
        "ann sees nothing addressed to the lead"
    );
    assert!(legion.requests("lead")[0]
        .status
        .as_deref()
        .unwrap()
        .contains("<agent name=\"ann\" status=\"idle\"/>"));
    assert!(
        legion.requests("lead")[0]
            .system_prompt
            .contains("<agent name=\"ann\">reviews</agent>"),
        "the roster is in the system prompt"
    );
    assert!(
        legion.requests("ann")[0].status.is_none(),
        "only the orchestrator gets the status"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateless_providers_get_the_window_every_time() {
    let legion = Legion::new(History::Stateless, "history_window = 2").await;
    legion.post("one").await;
    legion.post("two").await;
    legion.post("three").await;
    let lead: Vec<String> = legion.requests("lead").iter().map(shape).collect();
    // 1 user, 2 opened, 3-5 turn; 6 user, 7-9 turn; 10 user.
    assert_eq!(lead, vec!["full  | 1", "full 1 4 | 6", "full 6 8 | 10"]);
    assert_eq!(legion.boundaries("lead"), vec!["opened:first_use"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mentions_route_to_each_named_agent_in_parallel() {
    let legion = Legion::new(RESUMABLE, "").await;
    let replies = legion.post("@bob @ann compare").await;
    let agents: Vec<&str> = replies.iter().map(|r| r.agent.as_str()).collect();
    assert_eq!(agents, vec!["ann", "bob"], "roster order");
    assert!(replies.iter().all(|r| r.error().is_none()));
    assert!(
        legion.requests("lead").is_empty(),
        "a mention does not reach the orchestrator"
    );
    let replies = legion.post("@all ship it").await;
    assert_eq!(replies.len(), 3);
    // Issue 11, defect 4: an unknown handle is plain text (the strict mode is
    // `an_unknown_handle_is_plain_text`'s).
    let replies = legion.post("@nobody hi").await;
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].agent.as_str(), "lead");
    assert_eq!(replies.unknown_mentions, ["nobody"]);
    let err = legion.rt().post(CONV, "   ").await.unwrap_err();
    assert!(err.to_string().contains("needs some text"), "{err}");
    let err = legion.rt().post("bad key", "hi").await.unwrap_err();
    assert!(err.to_string().contains("\"bad key\""), "{err}");
}

/// Regression (issue 11, defect 4): an `@word` that names no agent is plain text: the message
/// goes where its real mentions send it, or to the orchestrator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_handle_is_plain_text() {
    let legion = Legion::new(RESUMABLE, "").await;
    let replies = legion
        .rt()
        .post(CONV, "npm says @types/node is missing, ask @benandjerrys")
        .await
        .unwrap();
    let agents: Vec<&str> = replies.iter().map(|r| r.agent.as_str()).collect();
    assert_eq!(agents, vec!["lead"], "no real mention: the orchestrator");
    assert_eq!(replies.unknown_mentions, ["types", "benandjerrys"]);
    let replies = legion
        .rt()
        .post(CONV, "@ann see what @media thinks")
        .await
        .unwrap();
    let agents: Vec<&str> = replies.iter().map(|r| r.agent.as_str()).collect();
    assert_eq!(agents, vec!["ann"], "the real mention routes it");
    assert_eq!(replies.unknown_mentions, ["media"]);

    // The strict mode refuses the message, storing nothing.
    let strict = Legion::new(RESUMABLE, "unknown_mentions = \"error\"").await;
    let err = strict.rt().post(CONV, "@nobody hi").await.unwrap_err();
    assert!(
        err.to_string().contains("\"nobody\"") && err.to_string().contains("ann"),
        "{err}"
    );
    assert!(
        strict.events().is_empty(),
        "a refused message stores nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_change_rotates_the_session_with_a_notice() {
    let legion = Legion::new(RESUMABLE, "").await;
    legion.post("hello").await;
    std::fs::write(legion.dir.path().join("lead.md"), "You lead, differently.").unwrap();
    legion.post("again").await;
    assert_eq!(
        legion.boundaries("lead"),
        vec![
            "opened:first_use",
            "closed:prompt_changed",
            "opened:prompt_changed"
        ]
    );
    let second = &legion.requests("lead")[1];
    // 1 user, 2-5 first turn; 6 user (appended before dispatch), 7 closed, 8 opened.
    assert_eq!(shape(second), "bootstrap 1 4 | 6");
    assert!(second
        .plan
        .notice
        .as_deref()
        .unwrap()
        .contains("change of your instructions"));
    assert!(second.resumed.is_none(), "a new provider session");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_ceiling_rotates_the_session() {
    let legion = Legion::new(RESUMABLE, "max_input_tokens = 5").await;
    legion.post("hello").await;
    legion.post("again").await;
    assert_eq!(
        legion.boundaries("lead"),
        vec![
            "opened:first_use",
            "closed:token_ceiling",
            "opened:token_ceiling"
        ]
    );
    let second = &legion.requests("lead")[1];
    assert_eq!(second.plan.mode.as_str(), "bootstrap");
    assert!(second
        .plan
        .notice
        .as_deref()
        .unwrap()
        .contains("grew too long"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_reaping_suspends_a_resumable_session_and_resumes_it() {
    let legion = Legion::new(RESUMABLE, "").await;
    legion.post("hello").await;
    assert_eq!(
        legion.rt().reap_idle().await.unwrap(),
        0,
        "30 minutes have not passed"
    );
    assert_eq!(
        legion
            .rt()
            .reap_idle_older_than(Duration::ZERO)
            .await
            .unwrap(),
        1
    );
    legion.post("again").await;
    assert_eq!(
        legion.boundaries("lead"),
        vec!["opened:first_use", "suspended:idle", "opened:idle"]
    );
    let requests = legion.requests("lead");
    assert_eq!(shape(&requests[1]), "delta  | 7");
    assert_eq!(
        requests[1].resumed, requests[0].provider_session,
        "the same provider session is resumed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_reaping_closes_a_session_that_cannot_resume() {
    let legion = Legion::new(NOT_RESUMABLE, "").await;
    legion.post("hello").await;
    assert_eq!(
        legion
            .rt()
            .reap_idle_older_than(Duration::ZERO)
            .await
            .unwrap(),
        1
    );
    legion.post("again").await;
    assert_eq!(
        legion.boundaries("lead"),
        vec!["opened:first_use", "closed:idle", "opened:idle"]
    );
    let second = &legion.requests("lead")[1];
    assert_eq!(shape(second), "bootstrap 1 4 | 7");
    assert!(second
        .plan
        .notice
        .as_deref()
        .unwrap()
        .contains("idle pause"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_reset_closes_and_the_next_turn_is_restored() {
    let legion = Legion::new(RESUMABLE, "").await;
    legion.post("hello").await;
    legion.rt().reset(CONV, "lead").await.unwrap();
    legion.post("again").await;
    assert_eq!(
        legion.boundaries("lead"),
        vec![
            "opened:first_use",
            "closed:manual_reset",
            "opened:manual_reset"
        ]
    );
    let second = &legion.requests("lead")[1];
    assert_eq!(second.plan.mode.as_str(), "bootstrap");
    assert!(second
        .plan
        .notice
        .as_deref()
        .unwrap()
        .contains("manual reset"));
    let err = legion.rt().reset(CONV, "nobody").await.unwrap_err();
    assert!(err.to_string().contains("\"nobody\""), "{err}");
    // Nothing to reset, nothing written: a second reset (the session is closed), an agent that
    // never had a session, a conversation the log does not have (found by a host's walkthrough:
    // each wrote a `session_closed`, the last one making the conversation).
    legion.rt().reset(CONV, "lead").await.unwrap();
    let before = legion.events().len();
    legion.rt().reset(CONV, "lead").await.unwrap();
    legion.rt().reset(CONV, "ann").await.unwrap();
    legion.rt().reset("never:1", "lead").await.unwrap();
    assert_eq!(legion.events().len(), before, "nothing written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_panic_is_an_error_reply_then_the_session_resumes_with_a_marked_redelivery() {
    let legion = Legion::new(RESUMABLE, FAST).await;
    legion.post("hello").await;
    legion
        .provider
        .inject(Some(&Legion::agent("lead")), Fault::Panic);
    let replies = legion.post("this one crashes").await;
    let error = replies[0].error().unwrap();
    assert!(error.contains("crashed"), "{error}");
    assert_eq!(settle(&legion, "lead").await, Activity::Idle);
    legion.post("after the crash").await;
    assert_eq!(
        legion.boundaries("lead"),
        vec!["opened:first_use", "suspended:crashed", "opened:crashed"]
    );
    let requests = legion.requests("lead");
    assert_eq!(requests.len(), 2, "the panicking call never completed");
    // 6 is the message whose turn crashed: the provider may have seen it, so it is marked.
    let last = requests.last().unwrap();
    assert!(shape(last).starts_with("delta 6* |"), "{}", shape(last));
    assert_eq!(last.resumed, requests[0].provider_session);
    let crashes = legion
        .events()
        .iter()
        .filter(|r| matches!(&r.event, Event::TurnFailed(f) if f.error.contains("actor crashed")))
        .count();
    assert_eq!(crashes, 1, "the crash is in the audit trail");
}

/// Regression (issue 11, defect 2): a crash during the first turn of a resumed session suspends
/// it; the next turn resumes the same provider session with the delta, the message whose turn
/// crashed marked as possibly seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_in_the_first_turn_of_a_resumed_session_suspends_it() {
    let mut legion = Legion::new(RESUMABLE, FAST).await;
    legion.post("hello").await;
    legion.shutdown_and_restart().await;
    legion
        .provider
        .inject(Some(&Legion::agent("lead")), Fault::Panic);
    let replies = legion.post("this one crashes").await;
    assert!(replies[0].error().is_some());
    assert_eq!(settle(&legion, "lead").await, Activity::Idle);
    legion.post("after the crash").await;
    assert_eq!(
        legion.boundaries("lead"),
        vec![
            "opened:first_use",
            "suspended:shutdown",
            "opened:shutdown",
            "suspended:crashed",
            "opened:crashed"
        ]
    );
    let requests = legion.requests("lead");
    let last = requests.last().unwrap();
    assert_eq!(
        last.resumed, requests[0].provider_session,
        "the same provider session"
    );
    // 1-5 the first turn, 6 suspended; 7 the message whose turn crashed: marked.
    assert!(shape(last).starts_with("delta 7* |"), "{}", shape(last));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_restart_resumes_a_resumable_session_with_only_the_delta() {
    let mut legion = Legion::new(RESUMABLE, "").await;
    legion.post("hello").await;
    legion.post("@ann look").await;
    legion.crash_and_restart().await;
    legion.post("back again").await;
    assert_eq!(
        legion.boundaries("lead"),
        vec!["opened:first_use", "suspended:crashed", "opened:crashed"]
    );
    let requests = legion.requests("lead");
    // 1 user, 2-5 lead; 6 @ann, 7-10 ann; after the restart: 11 user (appended before dispatch),
    // 12 suspended by the new actor's crash cleanup, 13 opened.
    assert_eq!(shape(&requests[1]), "delta 6 9 | 11");
    assert_eq!(requests[1].resumed, requests[0].provider_session);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_restart_bootstraps_a_session_that_cannot_resume() {
    let mut legion = Legion::new(NOT_RESUMABLE, "").await;
    legion.post("hello").await;
    legion.crash_and_restart().await;
    legion.post("back again").await;
    assert_eq!(
        legion.boundaries("lead"),
        vec!["opened:first_use", "closed:crashed", "opened:crashed"]
    );
    let second = &legion.requests("lead")[1];
    assert_eq!(shape(second), "bootstrap 1 4 | 6");
    assert!(second
        .plan
        .notice
        .as_deref()
        .unwrap()
        .contains("after a restart"));
    assert!(second.resumed.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_shutdown_suspends_and_the_next_process_resumes() {
    let mut legion = Legion::new(RESUMABLE, "").await;
    legion.post("hello").await;
    legion.shutdown_and_restart().await;
    legion.post("back").await;
    assert_eq!(
        legion.boundaries("lead"),
        vec!["opened:first_use", "suspended:shutdown", "opened:shutdown"]
    );
    assert_eq!(shape(&legion.requests("lead")[1]), "delta  | 7");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_provider_session_falls_back_to_a_restored_bootstrap() {
    let mut legion = Legion::new(RESUMABLE, "").await;
    legion.post("hello").await;
    legion.crash_and_restart().await;
    legion.provider.forget_sessions();
    let replies = legion.post("are you there").await;
    assert!(replies[0].error().is_none(), "{:?}", replies[0].error());
    assert_eq!(
        legion.boundaries("lead"),
        vec![
            "opened:first_use",
            "suspended:crashed",
            "opened:crashed",
            "closed:provider_session_lost",
            "opened:provider_session_lost"
        ]
    );
    let last = legion.requests("lead").last().unwrap().clone();
    assert_eq!(last.plan.mode.as_str(), "bootstrap");
    assert!(last
        .plan
        .notice
        .as_deref()
        .unwrap()
        .contains("lost the previous session"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_failing_and_one_hanging_agent_do_not_hold_up_the_others() {
    let legion = Legion::new(RESUMABLE, "turn_timeout_seconds = 0.5").await;
    legion.provider.inject(
        Some(&Legion::agent("ann")),
        Fault::Error("model overloaded".into()),
    );
    legion
        .provider
        .inject(Some(&Legion::agent("bob")), Fault::Hang);
    // The hanging agent is cut by its turn timeout: the post completes (a generous deadline,
    // not a speed goal) with the others' replies.
    let replies = tokio::time::timeout(Duration::from_secs(60), legion.post("@all report"))
        .await
        .expect("a hanging agent held up the post past its turn timeout");
    let by_agent = |name: &str| {
        replies
            .iter()
            .find(|r| r.agent.as_str() == name)
            .unwrap()
            .clone()
    };
    assert!(by_agent("lead").error().is_none());
    assert!(by_agent("ann")
        .error()
        .unwrap()
        .contains("model overloaded"));
    assert!(by_agent("bob")
        .error()
        .unwrap()
        .contains("did not answer within 0.5 s"));
    let events = legion.events();
    assert!(
        matches!(&events[0].event, Event::MessagePosted(m) if m.text_content() == "@all report")
    );
    assert_eq!(
        events
            .iter()
            .filter(|r| matches!(r.event, Event::TurnFailed(_)))
            .count(),
        2
    );
    // Both recover on the next turn, with the failed turn's message marked as possibly seen.
    let replies = legion.post("@ann @bob again").await;
    assert!(replies.iter().all(|r| r.error().is_none()), "{replies:?}");
    let bob = legion.requests("bob");
    assert!(
        shape(bob.last().unwrap()).starts_with("bootstrap"),
        "bob's first turn never completed: re-bootstrap"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_always_panics_ends_failed_not_in_a_crash_loop() {
    let legion = Legion::new(RESUMABLE, &format!("restart_max = 2\n{FAST}")).await;
    let ann = Legion::agent("ann");
    for _ in 0..10 {
        legion.provider.inject(Some(&ann), Fault::Panic);
    }
    for attempt in 0..3 {
        let replies = legion.post("@ann try").await;
        assert!(replies[0].error().is_some(), "attempt {attempt}");
        settle(&legion, "ann").await;
    }
    assert_eq!(settle(&legion, "ann").await, Activity::Failed);
    let replies = legion.post("@ann once more").await;
    let error = replies[0].error().unwrap();
    assert!(
        error.contains("failed") && error.contains("manual reset"),
        "{error}"
    );
    assert!(legion
        .events()
        .iter()
        .any(|r| matches!(&r.event, Event::AgentFailed(f) if f.agent == ann && f.restarts == 2)));
    // Everyone else carries on: the supervisor is alive.
    assert!(legion.post("hello lead").await[0].error().is_none());
    // A manual reset clears the failure.
    legion.provider.clear_faults();
    legion.rt().reset(CONV, "ann").await.unwrap();
    let replies = legion.post("@ann are you back").await;
    assert!(replies[0].error().is_none(), "{:?}", replies[0].error());
    assert_eq!(settle(&legion, "ann").await, Activity::Idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_can_address_each_other_through_the_host() {
    let legion = Legion::new(RESUMABLE, "").await;
    let replies = legion
        .rt()
        .post_as(CONV, "ann", "@bob can you plan this")
        .await
        .unwrap();
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].agent.as_str(), "bob");
    let replies = legion
        .rt()
        .post_as(CONV, "ann", "done, lead")
        .await
        .unwrap();
    assert_eq!(
        replies[0].agent.as_str(),
        "lead",
        "no mention: the orchestrator"
    );
    let replies = legion
        .rt()
        .post_as(CONV, "lead", "summary for the user")
        .await
        .unwrap();
    assert!(
        replies.is_empty(),
        "the orchestrator's unaddressed message is for the user"
    );
    let replies = legion
        .rt()
        .post_as(CONV, "ann", "@all heads up")
        .await
        .unwrap();
    let agents: Vec<&str> = replies.iter().map(|r| r.agent.as_str()).collect();
    assert_eq!(agents, vec!["lead", "bob"], "never a turn for the sender");
    let err = legion.rt().post_as(CONV, "zed", "hi").await.unwrap_err();
    assert!(err.to_string().contains("\"zed\""), "{err}");
    // ann sees what she sent; bob's first request carried ann's message.
    assert_eq!(
        legion.requests("bob")[0]
            .plan
            .new_message
            .message
            .sender
            .as_str(),
        "ann"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reaping_while_messages_arrive_never_turns_a_turn_into_an_error() {
    let legion = Legion::new(RESUMABLE, FAST).await;
    for round in 0..40 {
        let rt = legion.rt();
        let text = format!("@ann round {round}");
        let (replies, reaped) = tokio::join!(
            rt.post(CONV, &text),
            rt.reap_idle_older_than(Duration::ZERO)
        );
        let replies = replies.unwrap();
        reaped.unwrap();
        assert!(
            replies[0].error().is_none(),
            "round {round}: {:?}",
            replies[0].error()
        );
    }
    assert!(
        legion
            .boundaries("ann")
            .iter()
            .any(|b| b == "suspended:idle"),
        "some reaps happened"
    );
}

/// The scripted provider lives in the process: after a restart it knows none of its sessions,
/// and the ids it gives new ones must differ from those it gave before. Otherwise one
/// conversation's resume lands in another conversation's new session of the same number, and
/// its model reads the other conversation's messages (seen on a cluster after a failover: two
/// conversations on `scripted-legatus-1`, one node).
#[tokio::test]
async fn a_fresh_scripted_provider_never_resumes_another_conversations_session() {
    let mut legion = Legion::new(RESUMABLE, "").await;
    legion.rt().post("test:a", "hello from a").await.unwrap();
    legion.rt().post("test:b", "hello from b").await.unwrap();
    legion.provider = match &legion.config.providers["local"] {
        legio_runtime::ProviderSpec::Scripted(c) => legio_llm::ScriptedProvider::new(*c),
        other => panic!("scripted, not {other:?}"),
    };
    legion.crash_and_restart().await;
    legion.rt().post("test:b", "again from b").await.unwrap();
    legion.rt().post("test:a", "again from a").await.unwrap();

    let conversation_of: std::collections::HashMap<_, _> = legion
        .events()
        .into_iter()
        .map(|r| (r.seq, r.event.conversation().clone()))
        .collect();
    let threads = legion.provider.session_threads();
    assert_eq!(
        threads.len(),
        2,
        "one new session per conversation: {threads:?}"
    );
    for (id, seqs) in threads {
        let conversations: std::collections::BTreeSet<_> = seqs
            .iter()
            .map(|seq| conversation_of[seq].as_str())
            .collect();
        assert_eq!(conversations.len(), 1, "session {id} got {conversations:?}");
    }
}
