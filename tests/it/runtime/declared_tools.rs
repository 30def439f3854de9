//! The tools a host declares for a conversation are `ToolsDeclared` events in the log: they
//! outlive a graceful restart and a crash, the last declaration wins, an empty one clears them, a
//! host's turn offers them, and a last declaration that does not read is an error naming its
//! seq, which declaring again mends.

use legio_core::{ConversationKey, DeclaredTool, Event, History, Participant, ToolsDeclared};
use legio_runtime::{HostTurn, RuntimeError, ToolSpec};
use serde_json::json;

use super::{Legion, CONV};

fn tool(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: format!("the host's {name}"),
        parameters: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
    }
}

fn names(tools: &[ToolSpec]) -> Vec<&str> {
    tools.iter().map(|t| t.name.as_str()).collect()
}

/// The tool names of every `ToolsDeclared` event in the log, in order.
fn declarations(legion: &Legion) -> Vec<Vec<String>> {
    legion
        .events()
        .into_iter()
        .filter_map(|r| match r.event {
            Event::ToolsDeclared(d) => Some(d.tools.into_iter().map(|t| t.name).collect()),
            _ => None,
        })
        .collect()
}

async fn declared(legion: &Legion) -> Vec<ToolSpec> {
    legion.rt().declared_tools(CONV).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_tools_are_in_the_log_and_outlive_a_restart() {
    let mut legion = Legion::new(History::Stateless, "").await;
    legion.post("hello").await;
    let rt = legion.rt();
    rt.declare_tools(CONV, vec![tool("lookup"), tool("now")])
        .await
        .unwrap();
    rt.declare_tools(CONV, vec![tool("fetch")]).await.unwrap();
    assert_eq!(names(&declared(&legion).await), ["fetch"]);

    legion.shutdown_and_restart().await;
    let after_restart = declared(&legion).await;
    assert_eq!(after_restart, vec![tool("fetch")], "schema and all");
    assert_eq!(
        declarations(&legion),
        [vec!["lookup", "now"], vec!["fetch"]]
    );

    legion.rt().declare_tools(CONV, Vec::new()).await.unwrap();
    legion.crash_and_restart().await;
    assert!(declared(&legion).await.is_empty(), "cleared for good");

    // A host's turn after a crash offers what was declared before it.
    legion
        .rt()
        .declare_tools(CONV, vec![tool("lookup")])
        .await
        .unwrap();
    legion.crash_and_restart().await;
    let (progress, _updates) = tokio::sync::mpsc::unbounded_channel();
    let turn = HostTurn {
        sender: Participant::User,
        to: Some(Legion::agent("lead")),
        text: "anything new?".into(),
        tools: vec![tool("note")],
        idempotency_key: None,
    };
    legion
        .rt()
        .post_host_turn(CONV, turn, progress)
        .await
        .unwrap();
    let offered = legion
        .requests("lead")
        .last()
        .unwrap()
        .tool_names()
        .join(",");
    assert!(
        offered.contains("lookup") && offered.contains("note"),
        "offered {offered}"
    );

    // A declaration that does not read (a hand-made or damaged log) is an error, not no tools.
    let bad = Event::ToolsDeclared(ToolsDeclared {
        conversation: ConversationKey::new(CONV).unwrap(),
        at: legio_core::Timestamp::from_unix_micros(1),
        tools: vec![DeclaredTool {
            name: "broken".into(),
            description: String::new(),
            parameters: "{not json".into(),
        }],
    });
    let range = legion.rt().log().submit(vec![bad]).unwrap().await.unwrap();
    legion.crash_and_restart().await;
    match legion.rt().declared_tools(CONV).await {
        Err(e @ RuntimeError::BadDeclaration { seq, .. }) => {
            assert_eq!(seq, range.last);
            assert!(
                e.to_string()
                    .contains("declare the conversation's tools again"),
                "{e}"
            );
        }
        other => panic!("a declaration that does not read gave {other:?}"),
    }
    // Declaring again mends it, also for a process that reads the log afresh.
    legion
        .rt()
        .declare_tools(CONV, vec![tool("fetch")])
        .await
        .unwrap();
    legion.crash_and_restart().await;
    assert_eq!(names(&declared(&legion).await), ["fetch"]);
    assert!(matches!(
        legion.rt().declared_tools("legio:memory").await,
        Err(RuntimeError::ReservedConversation { .. })
    ));
}
