//! Heartbeat runs: the provider gets only the system prompt and the text, never the agent's live
//! provider session; the exchange is one `HeartbeatRan` event that no later context shows, and the
//! agent's session is untouched. Also: the runtime's view of the memory stores and the reserved
//! conversation key.

use legio_core::{Event, History, Seq};
use legio_llm::Fault;
use legio_runtime::RuntimeError;
use serde_json::json;

use super::{shape, Legion, CONV};

const RESUMABLE: History = History::Session { resumable: true };

fn heartbeats(legion: &Legion) -> Vec<(Seq, legio_core::HeartbeatRan)> {
    legion
        .events()
        .into_iter()
        .filter_map(|r| match r.event {
            Event::HeartbeatRan(h) => Some((r.seq, h)),
            _ => None,
        })
        .collect()
}

/// Every text the plan of `request` carries.
fn texts(request: &legio_llm::RecordedRequest) -> Vec<String> {
    request
        .plan
        .messages()
        .map(|i| i.message.text_content())
        .collect()
}

async fn heartbeat_leaves_no_trace_in_context(history: History) {
    let legion = Legion::new(history, "").await;
    legion.post("hello").await;
    let lead = Legion::agent("lead");
    let session_before = legion
        .rt()
        .log()
        .session_state(&CONV.parse().unwrap(), &lead)
        .unwrap();
    let boundaries_before = legion.boundaries("lead");

    let reply = legion
        .rt()
        .heartbeat(CONV, "lead", "HEARTBEAT-PING anything due?")
        .await
        .unwrap();
    assert_eq!(reply.error(), None);
    // The scripted provider says what it read: one message, and its seq (0: not in the log).
    let mode = if history.is_stateful() {
        "bootstrap"
    } else {
        "full"
    };
    let answer = format!("lead read 1 message(s) ({mode}) and answers #0.");
    assert_eq!(reply.text(), Some(answer.as_str()));
    assert_eq!(
        reply.message_id(),
        None,
        "a heartbeat's reply is not a message"
    );

    // The provider got the system prompt and the text, nothing else, and no session to resume.
    let requests = legion.requests("lead");
    let (first, beat) = (&requests[0], requests.last().unwrap());
    assert_eq!(requests.len(), 2);
    assert_eq!(beat.system_prompt, first.system_prompt);
    assert!(beat.plan.history.is_empty(), "{}", shape(beat));
    assert_eq!(texts(beat), ["HEARTBEAT-PING anything due?"]);
    assert_eq!(beat.resumed, None, "never the agent's provider session");
    assert_eq!(beat.status, None);
    assert_eq!(beat.plan.notice, None);
    assert_eq!(beat.plan.mode.as_str(), mode);

    // The log holds it, outside every session.
    let recorded = heartbeats(&legion);
    assert_eq!(recorded.len(), 1);
    let (seq, event) = &recorded[0];
    assert_eq!(Some(*seq), reply.seq());
    assert_eq!(event.prompt, "HEARTBEAT-PING anything due?");
    assert_eq!(event.reply.as_deref(), Some(answer.as_str()));
    assert_eq!(event.error, None);
    assert!(event.usage.input > 0, "the provider's usage is recorded");
    assert_eq!(
        legion
            .rt()
            .log()
            .session_state(&CONV.parse().unwrap(), &lead)
            .unwrap(),
        session_before,
        "no checkpoint or session change"
    );
    assert_eq!(legion.boundaries("lead"), boundaries_before);

    // The next normal turn's context shows neither the text nor the reply, and (stateful)
    // continues the agent's own provider session.
    legion.post("again").await;
    let requests = legion.requests("lead");
    let next = requests.last().unwrap();
    for text in texts(next) {
        assert!(
            !text.contains("HEARTBEAT") && !text.contains(&answer),
            "{text}"
        );
    }
    assert!(!next.rendered.contains("HEARTBEAT"), "{}", next.rendered);
    assert!(!next.rendered.contains(&answer), "{}", next.rendered);
    if history.is_stateful() {
        assert_eq!(next.resumed, first.provider_session);
        assert_eq!(shape(next), format!("delta  | {}", next.plan.up_to));
    } else {
        assert_eq!(next.plan.history.len(), 2, "{}", shape(next));
    }
    // The planner's preview agrees.
    let preview = legion.rt().next_context(CONV, "lead", None).await.unwrap();
    let preview = format!("{preview:?}");
    assert!(
        !preview.contains("HEARTBEAT") && !preview.contains(&answer),
        "{preview}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateful_heartbeat_sends_only_the_prompt_and_text_and_leaves_no_trace() {
    heartbeat_leaves_no_trace_in_context(RESUMABLE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_heartbeat_sends_only_the_prompt_and_text_and_leaves_no_trace() {
    heartbeat_leaves_no_trace_in_context(History::Stateless).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_heartbeat_is_an_error_reply_and_recorded() {
    let legion = Legion::new(RESUMABLE, "").await;
    let ann = Legion::agent("ann");
    legion
        .provider
        .inject(Some(&ann), Fault::Error("quota exceeded".into()));
    let reply = legion.rt().heartbeat(CONV, "ann", "check").await.unwrap();
    assert!(reply.text().is_none());
    assert!(
        reply.error().unwrap().contains("quota exceeded"),
        "{reply:?}"
    );
    let recorded = heartbeats(&legion);
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].1.reply, None);
    assert!(recorded[0]
        .1
        .error
        .as_deref()
        .unwrap()
        .contains("quota exceeded"));
    assert!(
        legion.boundaries("ann").is_empty(),
        "a heartbeat opens no session"
    );
    assert!(
        !legion
            .events()
            .iter()
            .any(|r| r.event.as_message().is_some()),
        "and posts no message"
    );
    // Bad requests are refused before anything runs.
    let rt = legion.rt();
    assert!(matches!(
        rt.heartbeat(CONV, "zed", "x").await,
        Err(RuntimeError::UnknownAgent { .. })
    ));
    assert!(matches!(
        rt.heartbeat(CONV, "ann", "  ").await,
        Err(RuntimeError::EmptyMessage)
    ));
    assert!(matches!(
        rt.heartbeat("legio:memory", "ann", "x").await,
        Err(RuntimeError::ReservedConversation { .. })
    ));
    assert_eq!(heartbeats(&legion).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_lives_in_its_reserved_conversation_and_survives_a_restart() {
    let mut legion = Legion::new(RESUMABLE, "").await;
    let (lead, ann) = (Legion::agent("lead"), Legion::agent("ann"));
    let tools = legion.rt().memory_tools().clone();
    tools
        .call(&lead, "publish_directive", json!({"text": "ship at noon"}))
        .await
        .unwrap();
    tools
        .call(
            &ann,
            "append_notebook",
            json!({"text": "lead likes small PRs"}),
        )
        .await
        .unwrap();
    let err = legion.rt().post("legio:memory", "hello").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "conversation key \"legio:memory\" is reserved by legio (keys starting with \"legio:\"): use another key"
    );
    assert!(legion.rt().reset("legio:memory", "ann").await.is_err());
    drop(tools); // it holds the log, as the runtime does
    legion.crash_and_restart().await;
    let memory = legion.rt().memory().await.unwrap();
    assert_eq!(memory.directives.len(), 1);
    assert_eq!(memory.notebooks[&ann][0].text, "lead likes small PRs");
    let conversations = legion.rt().log().conversations().unwrap();
    assert_eq!(
        conversations.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
        ["legio:memory"]
    );
    // The next directive continues the numbering from the log.
    let out = legion
        .rt()
        .memory_tools()
        .call(&lead, "publish_directive", json!({"text": "second"}))
        .await
        .unwrap();
    assert_eq!(out, "published directive d2");
    // Memory events are not messages: no agent's context shows them.
    legion.post("@ann hello").await;
    let ann_request = legion.requests("ann");
    assert!(!ann_request[0].rendered.contains("ship at noon"));
}
