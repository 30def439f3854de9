//! Tool calls in the agent loop, with the scripted provider: a loop runs to the text answer, the
//! step limit, tool errors as error results (never a crash), host tools, memory tools with the
//! caller's permissions, `get_history`, `dispatch` to specialists, the context rules (an orphaned
//! result dropped, an interrupted call completed), a stateful session getting only the results,
//! a restart in the middle continuing from the log, and every call and result linked by id.

use std::collections::HashMap;
use std::sync::Arc;

use legio_core::{Event, History, Message, MessageId, Part, Participant, Seq, INTERRUPTED};
use legio_llm::{Fault, RecordedRequest};
use legio_runtime::{ToolRegistry, ToolRegistryError};
use serde_json::{json, Value};

use super::{Legion, CONV};

const RESUMABLE: History = History::Session { resumable: true };

/// Every message in the log, with its seq.
fn messages(legion: &Legion) -> Vec<(Seq, Message)> {
    legion
        .events()
        .into_iter()
        .filter_map(|r| r.event.as_message().cloned().map(|m| (r.seq, m)))
        .collect()
}

/// The results recorded for `call_id`: (content, is_error).
fn results(legion: &Legion, call_id: &str) -> Vec<(String, bool)> {
    messages(legion)
        .into_iter()
        .flat_map(|(_, m)| m.parts)
        .filter_map(|p| match p {
            Part::ToolResult {
                call_id: id,
                content,
                is_error,
            } if id == call_id => Some((content, is_error)),
            _ => None,
        })
        .collect()
}

pub(super) fn result(legion: &Legion, call_id: &str) -> (String, bool) {
    let mut found = results(legion, call_id);
    assert_eq!(found.len(), 1, "one result for {call_id}: {found:?}");
    found.remove(0)
}

/// A plan's messages as words: `sender:` then `T` text, `C(id)` call, `R(id)` result,
/// `I(id)` interrupted result, joined by `+`.
fn shape(request: &RecordedRequest) -> Vec<String> {
    request
        .plan
        .messages()
        .map(|i| {
            let parts: Vec<String> = i
                .message
                .parts
                .iter()
                .map(|p| match p {
                    Part::Text { .. } => "T".to_owned(),
                    Part::ToolCall { id, .. } => format!("C({id})"),
                    Part::ToolResult {
                        call_id, content, ..
                    } if content == INTERRUPTED => format!("I({call_id})"),
                    Part::ToolResult { call_id, .. } => format!("R({call_id})"),
                })
                .collect();
            format!("{}:{}", i.message.sender, parts.join("+"))
        })
        .collect()
}

fn calls(list: &[(&'static str, &'static str, &'static str)]) -> Fault {
    Fault::tool_calls(list.iter().copied())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_loop_runs_the_calls_and_ends_with_the_text_answer() {
    let legion = Legion::new(History::Stateless, "").await;
    let ann = Legion::agent("ann");
    legion.provider.inject(
        Some(&ann),
        calls(&[("call_1", "get_history", "{\"limit\":5}")]),
    );
    let replies = legion.post("@ann what happened so far?").await;
    assert_eq!(replies[0].error(), None);
    assert!(replies[0].text().unwrap().starts_with("ann read"));

    let requests = legion.requests("ann");
    assert_eq!(
        requests.len(),
        2,
        "one step with the call, one with the answer"
    );
    let offered = requests[0].tool_names();
    for tool in [
        "get_history",
        "list_directives",
        "write_note",
        "append_notebook",
    ] {
        assert!(
            offered.contains(&tool),
            "{tool} offered to ann: {offered:?}"
        );
    }
    assert!(
        !offered.contains(&"dispatch") && !offered.contains(&"publish_directive"),
        "{offered:?}"
    );
    assert_eq!(shape(&requests[0]), ["user:T"]);
    assert_eq!(
        shape(&requests[1]),
        ["user:T", "ann:C(call_1)", "ann:R(call_1)"]
    );

    // The log: the question, the call (ann's own), the result linked to it, the answer.
    let log = messages(&legion);
    assert_eq!(log.len(), 4);
    let (question, call, outcome, answer) = (&log[0].1, &log[1].1, &log[2].1, &log[3].1);
    assert_eq!(call.sender, Participant::Agent(ann.clone()));
    assert_eq!(call.audience, legio_core::Audience::agent(ann.clone()));
    assert_eq!(call.reply_to, Some(question.id));
    assert_eq!(outcome.reply_to, Some(call.id));
    assert_eq!(outcome.audience, legio_core::Audience::agent(ann.clone()));
    assert_eq!(answer.reply_to, Some(question.id));
    assert_eq!(replies[0].message_id(), Some(answer.id));
    let (content, is_error) = result(&legion, "call_1");
    assert!(!is_error);
    assert!(
        content.contains("what happened so far?"),
        "get_history shows the question: {content}"
    );
    let completed = legion
        .events()
        .into_iter()
        .filter(|r| matches!(&r.event, Event::TurnCompleted(e) if e.agent == ann))
        .count();
    assert_eq!(completed, 2, "one TurnCompleted per provider call");

    // The orchestrator is offered dispatch and the directive tools.
    legion.post("hello").await;
    let lead = legion.requests("lead");
    let offered = lead[0].tool_names();
    assert!(offered.contains(&"dispatch") && offered.contains(&"publish_directive"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_step_limit_ends_the_turn_with_an_error_reply() {
    let legion = Legion::new(History::Stateless, "max_tool_steps = 3").await;
    let ann = Legion::agent("ann");
    for id in ["s1", "s2", "s3"] {
        legion
            .provider
            .inject(Some(&ann), Fault::tool_calls([(id, "list_notes", "{}")]));
    }
    let replies = legion.post("@ann loop forever").await;
    let error = replies[0].error().expect("an error reply");
    assert!(
        error.contains("3 steps") && error.contains("max_tool_steps"),
        "{error}"
    );
    assert_eq!(legion.requests("ann").len(), 3);
    assert!(!result(&legion, "s1").1 && !result(&legion, "s2").1);
    let (content, is_error) = result(&legion, "s3");
    assert!(
        is_error && content.starts_with("not run"),
        "the last step's calls are not run: {content}"
    );
    assert!(legion
        .events()
        .iter()
        .any(|r| matches!(&r.event, Event::TurnFailed(e) if e.agent == ann && e.error.contains("max_tool_steps"))));

    // The next turn reads the three complete pairs and answers.
    let replies = legion.post("@ann just answer").await;
    assert_eq!(replies[0].error(), None);
    let last = legion.requests("ann").pop().unwrap();
    let words = shape(&last).join(" ");
    for id in ["s1", "s2", "s3"] {
        assert!(
            words.contains(&format!("ann:C({id}) ann:R({id})")),
            "{words}"
        );
    }
}

fn host_tools() -> ToolRegistry {
    let mut tools = ToolRegistry::new();
    tools
        .register(
            "lookup",
            "Look a word up.",
            json!({"type": "object", "properties": {"word": {"type": "string"}}}),
            |args: Value| async move {
                match args.get("word").and_then(Value::as_str) {
                    Some(word) => Ok(format!("{word}: a Roman legion")),
                    None => Err("give a word".to_owned()),
                }
            },
        )
        .unwrap()
        .register(
            "broken",
            "Always fails.",
            json!({"type": "object"}),
            |_args: Value| async move { Err::<String, _>("the backend is down".to_owned()) },
        )
        .unwrap()
        .register(
            "explode",
            "Panics.",
            json!({"type": "object"}),
            |_args: Value| async move {
                if true {
                    panic!("the host tool exploded");
                }
                Ok(String::new())
            },
        )
        .unwrap();
    tools
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_tool_runs_with_the_models_arguments() {
    let mut legion = Legion::new(History::Stateless, "").await;
    legion.with_tools(host_tools()).await;
    let ann = Legion::agent("ann");
    legion.provider.inject(
        Some(&ann),
        calls(&[("h1", "lookup", "{\"word\":\"legio\"}")]),
    );
    let replies = legion.post("@ann what is a legio?").await;
    assert_eq!(replies[0].error(), None);
    assert_eq!(
        result(&legion, "h1"),
        ("legio: a Roman legion".to_owned(), false)
    );
    let requests = legion.requests("ann");
    let offered = requests[0].tool_names();
    assert!(
        offered.ends_with(&["lookup", "broken", "explode"]),
        "{offered:?}"
    );
    let lookup = requests[0]
        .tools
        .iter()
        .find(|t| t.name == "lookup")
        .unwrap();
    assert_eq!(lookup.parameters["properties"]["word"]["type"], "string");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_tool_is_an_error_result_for_the_model_never_a_crash() {
    let mut legion = Legion::new(History::Stateless, "").await;
    legion.with_tools(host_tools()).await;
    let ann = Legion::agent("ann");
    legion.provider.inject(
        Some(&ann),
        calls(&[
            ("e1", "broken", "{}"),
            ("e2", "explode", "{}"),
            ("e3", "no_such_tool", "{}"),
            ("e4", "lookup", "not json"),
            ("e5", "lookup", "{}"),
            ("e6", "read_note", "{\"key\":\"missing\"}"),
        ]),
    );
    let replies = legion.post("@ann try everything").await;
    assert_eq!(
        replies[0].error(),
        None,
        "the turn goes on to the text answer"
    );
    let expect = [
        ("e1", "the backend is down"),
        ("e2", "panicked"),
        ("e3", "no tool \"no_such_tool\""),
        ("e4", "not valid JSON"),
        ("e5", "give a word"),
        ("e6", "missing"),
    ];
    for (id, words) in expect {
        let (content, is_error) = result(&legion, id);
        assert!(is_error, "{id} is an error result");
        assert!(content.contains(words), "{id}: {content}");
    }
    // The model saw every error result, and the agent is still fine.
    let second = &legion.requests("ann")[1];
    assert_eq!(
        shape(second).last().unwrap(),
        "ann:R(e1)+R(e2)+R(e3)+R(e4)+R(e5)+R(e6)"
    );
    assert_eq!(legion.post("@ann still there?").await[0].error(), None);
}

#[test]
fn host_tools_cannot_take_a_built_in_name_or_an_invalid_one() {
    let mut tools = ToolRegistry::new();
    let ok = |_: Value| async { Ok::<_, String>(String::new()) };
    let schema = json!({"type": "object"});
    for (name, expected) in [
        (
            "get_history",
            ToolRegistryError::Reserved {
                name: "get_history".into(),
            },
        ),
        (
            "dispatch",
            ToolRegistryError::Reserved {
                name: "dispatch".into(),
            },
        ),
        (
            "write_note",
            ToolRegistryError::Reserved {
                name: "write_note".into(),
            },
        ),
        (
            // The prefix of the [mcp.NAME] servers' tools.
            "mcp__fs__read",
            ToolRegistryError::Reserved {
                name: "mcp__fs__read".into(),
            },
        ),
        ("a b", ToolRegistryError::InvalidName { name: "a b".into() }),
    ] {
        assert_eq!(
            tools.register(name, "", schema.clone(), ok).unwrap_err(),
            expected
        );
    }
    assert_eq!(
        tools
            .register("x", "", json!({"type": "string"}), ok)
            .unwrap_err(),
        ToolRegistryError::InvalidSchema { name: "x".into() }
    );
    tools.register("x", "", schema.clone(), ok).unwrap();
    assert_eq!(
        tools.register("x", "", schema, ok).unwrap_err(),
        ToolRegistryError::Duplicate { name: "x".into() }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_tools_run_through_the_loop_with_the_callers_permissions() {
    let legion = Legion::new(History::Stateless, "").await;
    let (ann, lead) = (Legion::agent("ann"), Legion::agent("lead"));
    legion.provider.inject(
        Some(&ann),
        calls(&[
            ("m1", "publish_directive", "{\"text\":\"ann rules\"}"),
            (
                "m2",
                "write_note",
                "{\"key\":\"plan\",\"text\":\"ship friday\"}",
            ),
            ("m3", "append_notebook", "{\"text\":\"my own thought\"}"),
        ]),
    );
    legion.post("@ann take notes").await;
    let (content, is_error) = result(&legion, "m1");
    assert!(is_error, "a specialist may not publish: {content}");
    assert!(!result(&legion, "m2").1 && !result(&legion, "m3").1);

    legion.provider.inject(
        Some(&lead),
        calls(&[
            (
                "m4",
                "publish_directive",
                "{\"text\":\"review every plan\"}",
            ),
            ("m5", "read_notebook", "{\"agent\":\"ann\",\"entry\":1}"),
        ]),
    );
    legion.post("set the rules").await;
    assert!(!result(&legion, "m4").1);
    assert!(!result(&legion, "m5").1);
    assert!(result(&legion, "m5").0.contains("my own thought"));

    let memory = legion.rt().memory().await.unwrap();
    assert_eq!(memory.directives.len(), 1);
    assert_eq!(memory.directives[0].text, "review every plan");
    assert_eq!(memory.notes["plan"].author, ann);
    assert_eq!(memory.notebooks[&ann].len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_history_returns_what_the_calling_agent_may_see() {
    let legion = Legion::new(History::Stateless, "").await;
    let (ann, lead) = (Legion::agent("ann"), Legion::agent("lead"));
    legion.post("@bob the secret word is azure").await;
    legion.post("@ann hello ann").await;
    legion
        .provider
        .inject(Some(&ann), calls(&[("g1", "get_history", "{}")]));
    legion.post("@ann what do you know?").await;
    let (seen, _) = result(&legion, "g1");
    assert!(seen.contains("hello ann"), "{seen}");
    assert!(
        !seen.contains("azure"),
        "ann may not see bob's message: {seen}"
    );

    legion.provider.inject(
        Some(&lead),
        calls(&[("g2", "get_history", "{\"limit\":50}")]),
    );
    legion.post("summarise everything").await;
    let (seen, _) = result(&legion, "g2");
    assert!(
        seen.contains("azure") && seen.contains("[tool call get_history id=g1]"),
        "the orchestrator sees everything, the specialists' tool traffic too: {seen}"
    );

    legion
        .provider
        .inject(Some(&ann), calls(&[("g3", "get_history", "{\"limit\":0}")]));
    legion.post("@ann again").await;
    assert!(result(&legion, "g3").1, "a limit of 0 is an error result");

    // The call's own message is not history: `limit` counts the messages before it (an MCP
    // client's walkthrough got only its own call back with a limit of 1).
    legion
        .provider
        .inject(Some(&ann), calls(&[("g4", "get_history", "{\"limit\":1}")]));
    legion.post("@ann the last word").await;
    let (seen, _) = result(&legion, "g4");
    assert!(seen.contains("the last word"), "{seen}");
    assert!(!seen.contains("id=g4"), "{seen}");
    assert_eq!(seen.matches("\n\n#").count(), 0, "one message: {seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispatch_posts_to_the_named_specialists_and_returns_their_replies() {
    let legion = Legion::new(History::Stateless, "").await;
    let lead = Legion::agent("lead");
    legion.provider.inject(
        Some(&lead),
        calls(&[(
            "d1",
            "dispatch",
            "{\"agents\":[\"ann\",\"bob\"],\"message\":\"status of the release?\"}",
        )]),
    );
    let replies = legion.post("ask the team how the release is going").await;
    assert_eq!(replies.len(), 1, "the host gets the orchestrator's answer");
    assert_eq!(replies[0].error(), None);

    let log = messages(&legion);
    let call = log
        .iter()
        .find(|(_, m)| {
            m.parts
                .iter()
                .any(|p| matches!(p, Part::ToolCall { id, .. } if id == "d1"))
        })
        .map(|(_, m)| m.clone())
        .unwrap();
    let (dispatched_seq, dispatched) = log
        .iter()
        .find(|(_, m)| m.text_content() == "status of the release?")
        .cloned()
        .expect("the dispatched message is in the log");
    assert_eq!(dispatched.sender, Participant::Agent(lead.clone()));
    assert_eq!(dispatched.audience.to_string(), "ann,bob");
    assert_eq!(dispatched.reply_to, Some(call.id));
    for name in ["ann", "bob"] {
        let request = &legion.requests(name)[0];
        assert_eq!(request.plan.new_message.seq, dispatched_seq);
        assert!(
            shape(request)
                .iter()
                .all(|w| !w.contains('C') && !w.contains('R')),
            "the orchestrator's tool traffic is not in {name}'s context: {:?}",
            shape(request)
        );
    }
    let (content, is_error) = result(&legion, "d1");
    assert!(!is_error);
    assert!(
        content.contains("ann (message #") && content.contains("bob (message #"),
        "{content}"
    );
    assert!(content.contains("ann read") && content.contains("bob read"));

    // The orchestrator's next step: the call and its result right after it, and nothing more:
    // the dispatched message is the call's argument and the replies are its result, so neither
    // is shown again as a message of its own (issue 51).
    let words = shape(&legion.requests("lead")[1]);
    assert_eq!(
        words,
        ["user:T", "lead:C(d1)", "lead:R(d1)"],
        "the call and its result, each message once"
    );

    // A bad dispatch is an error result.
    legion.provider.inject(
        Some(&lead),
        calls(&[(
            "d2",
            "dispatch",
            "{\"agents\":[\"lead\"],\"message\":\"me?\"}",
        )]),
    );
    legion.post("ask yourself").await;
    let (content, is_error) = result(&legion, "d2");
    assert!(
        is_error && content.contains("not a specialist"),
        "{content}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphaned_result_is_dropped_from_the_context() {
    let legion = Legion::new(History::Stateless, "history_window = 2").await;
    let ann = Legion::agent("ann");
    legion
        .provider
        .inject(Some(&ann), calls(&[("o1", "list_notes", "{}")]));
    legion.post("@ann one").await;
    legion.post("@ann two").await;
    let last = legion.requests("ann").pop().unwrap();
    // The window holds the result and the answer; the call is cut, so the result goes too.
    assert_eq!(shape(&last), ["ann:T", "user:T"]);
    assert!(!results(&legion, "o1").is_empty(), "the log keeps it");
}

/// A host tool that says it started, then never finishes.
pub(super) fn hanging_tool(started: Arc<tokio::sync::Notify>) -> ToolRegistry {
    let mut tools = ToolRegistry::new();
    tools
        .register(
            "wait_forever",
            "Never returns.",
            json!({"type": "object"}),
            move |_args: Value| {
                let started = Arc::clone(&started);
                async move {
                    started.notify_one();
                    std::future::pending::<Result<String, String>>().await
                }
            },
        )
        .unwrap();
    tools
}

/// The process dies while ann's tool runs; after the restart ann's next context completes the
/// call with an interrupted result.
async fn interrupted_call_is_completed(history: History) -> (Legion, RecordedRequest) {
    let mut legion = Legion::new(history, "").await;
    let started = Arc::new(tokio::sync::Notify::new());
    legion.with_tools(hanging_tool(Arc::clone(&started))).await;
    let ann = Legion::agent("ann");
    legion
        .provider
        .inject(Some(&ann), calls(&[("w1", "wait_forever", "{}")]));
    tokio::select! {
        _ = legion.rt().post(CONV, "@ann start the long job") => panic!("the tool never returns"),
        _ = started.notified() => {}
    }
    legion.crash_and_restart().await;
    assert!(results(&legion, "w1").is_empty(), "no result was recorded");
    let replies = legion.post("@ann is it done?").await;
    assert_eq!(replies[0].error(), None);
    let last = legion.requests("ann").pop().unwrap();
    let interrupted = last
        .plan
        .messages()
        .flat_map(|i| &i.message.parts)
        .find_map(|p| match p {
            Part::ToolResult {
                call_id,
                content,
                is_error,
            } if call_id == "w1" => Some((content.clone(), *is_error)),
            _ => None,
        })
        .expect("the call is completed in the context");
    assert_eq!(interrupted, (INTERRUPTED.to_owned(), true));
    (legion, last)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_call_is_completed_in_a_stateless_context() {
    let (_legion, last) = interrupted_call_is_completed(History::Stateless).await;
    assert_eq!(shape(&last), ["user:T", "ann:C(w1)", "ann:I(w1)", "user:T"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_call_is_completed_in_a_resumed_sessions_delta() {
    let (legion, last) = interrupted_call_is_completed(RESUMABLE).await;
    let first = &legion.requests("ann")[0];
    assert_eq!(
        last.resumed, first.provider_session,
        "the session is resumed"
    );
    assert_eq!(last.plan.mode.as_str(), "delta");
    // The session made the call itself: only the interrupted result and the new message.
    assert_eq!(shape(&last), ["ann:I(w1)", "user:T"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateful_session_gets_only_the_results_as_its_next_step() {
    let legion = Legion::new(RESUMABLE, "").await;
    let ann = Legion::agent("ann");
    legion
        .provider
        .inject(Some(&ann), calls(&[("t1", "list_notes", "{}")]));
    legion.post("@bob something for bob").await;
    legion.post("@ann any notes?").await;
    let requests = legion.requests("ann");
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].resumed, requests[0].provider_session);
    assert_eq!(requests[1].plan.mode.as_str(), "delta");
    assert_eq!(shape(&requests[1]), ["ann:R(t1)"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_in_the_middle_of_a_loop_continues_from_the_log() {
    let mut legion = Legion::new(RESUMABLE, "").await;
    let ann = Legion::agent("ann");
    legion
        .provider
        .inject(Some(&ann), calls(&[("r1", "list_notes", "{}")]));
    legion
        .provider
        .inject(Some(&ann), Fault::Error("the provider went away".into()));
    let replies = legion.post("@ann start").await;
    assert!(replies[0].error().is_some(), "the second step failed");
    assert_eq!(results(&legion, "r1").len(), 1, "the result is in the log");

    legion.crash_and_restart().await;
    let replies = legion.post("@ann carry on").await;
    assert_eq!(replies[0].error(), None);
    let requests = legion.requests("ann");
    let first = &requests[0];
    let last = requests.last().unwrap();
    assert_eq!(
        last.resumed, first.provider_session,
        "the session that made the call continues"
    );
    assert_eq!(last.plan.mode.as_str(), "delta");
    assert_eq!(
        shape(last),
        ["ann:R(r1)", "user:T"],
        "the result it has not confirmed, then the new message"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_and_result_is_linked_by_the_providers_id_in_the_log() {
    let mut legion = Legion::new(History::Stateless, "").await;
    legion.with_tools(host_tools()).await;
    let lead = Legion::agent("lead");
    legion.provider.inject(
        Some(&lead),
        calls(&[
            ("k1", "list_notes", "{}"),
            ("k2", "lookup", "{\"word\":\"a\"}"),
        ]),
    );
    legion.provider.inject(
        Some(&lead),
        calls(&[("k3", "get_history", "{}"), ("k4", "broken", "{}")]),
    );
    legion.post("do some work").await;
    legion.crash_and_restart().await;

    let log = messages(&legion);
    let by_id: HashMap<MessageId, &Message> = log.iter().map(|(_, m)| (m.id, m)).collect();
    let mut answered = Vec::new();
    for (_, message) in &log {
        for part in &message.parts {
            if let Part::ToolResult { call_id, .. } = part {
                let call = by_id[&message.reply_to.expect("a result replies to its call")];
                assert_eq!(call.sender, message.sender);
                assert!(
                    call.parts
                        .iter()
                        .any(|p| matches!(p, Part::ToolCall { id, .. } if id == call_id)),
                    "{call_id} is a call of the message it replies to"
                );
                answered.push(call_id.clone());
            }
        }
    }
    assert_eq!(answered, ["k1", "k2", "k3", "k4"]);
    // Each step's TurnCompleted names the message holding its calls (or the answer).
    let steps: Vec<Option<MessageId>> = legion
        .events()
        .into_iter()
        .filter_map(|r| match r.event {
            Event::TurnCompleted(e) if e.agent == lead => Some(e.reply),
            _ => None,
        })
        .collect();
    assert_eq!(steps.len(), 3);
    for reply in steps {
        assert!(by_id.contains_key(&reply.unwrap()));
    }
}

/// Regression (issue 11, defect 1): the replies a `dispatch` call returned as its result count as
/// delivered to the orchestrator: its next delta carries the result, never the replies again,
/// and the operator's preview of that step (`legio context`) shows the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_returned_by_dispatch_is_not_in_the_orchestrators_next_delta() {
    let legion = Legion::new(RESUMABLE, "").await;
    let lead = Legion::agent("lead");
    legion.post("hello").await;
    legion.provider.inject(
        Some(&lead),
        calls(&[(
            "d1",
            "dispatch",
            "{\"agents\":[\"ann\",\"bob\"],\"message\":\"status of the release?\"}",
        )]),
    );
    legion.post("ask the team how the release is going").await;
    let (content, _) = result(&legion, "d1");
    assert!(content.contains("ann read") && content.contains("bob read"));
    let requests = legion.requests("lead");
    let step = &requests[2];
    assert_eq!(step.plan.mode.as_str(), "delta");
    assert_eq!(
        shape(step),
        ["lead:R(d1)"],
        "the result carries the replies; they are not sent again"
    );
    let at = step.plan.up_to;
    let report = legion
        .rt()
        .context_report(CONV, "lead", Some(at))
        .await
        .unwrap();
    let senders: Vec<&str> = report.history.iter().map(|i| i.sender.as_str()).collect();
    assert!(
        !senders.contains(&"ann") && !senders.contains(&"bob"),
        "legio context shows the replies as delivered: {senders:?}"
    );
}
