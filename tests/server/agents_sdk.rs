//! The OpenAI Agents SDK (PyPI `openai-agents`, pinned, installed by
//! `scripts/install-openai-agents.sh` into a venv under target/) as a real client of the
//! OpenAI-compatible door: `openai_agents_sdk.py` runs an ordinary `Agent(instructions=...)`
//! with a function tool on both of the SDK's models (Chat Completions and Responses), with a
//! `SQLiteSession` and, on Responses, `previous_response_id`. The instructions reach the
//! agent's turn and are in the log (`InstructionsGiven`); the history the SDK resends, tool
//! traffic included, stores nothing again. Under `CI=true` a missing SDK fails; elsewhere the
//! test skips with a line.

use std::path::PathBuf;
use std::process::Command;

use legio_core::{AgentName, ConversationKey, Event, Participant, Seq};
use legio_llm::Fault;

use super::{Harness, TOKEN};

/// The venv's Python with the SDK: `LEGIO_OPENAI_AGENTS_PYTHON`, or the install script's
/// default path.
fn agents_python() -> Option<PathBuf> {
    super::sdk::venv_python(
        "LEGIO_OPENAI_AGENTS_PYTHON",
        "openai-agents-venv",
        "agents",
        "the OpenAI Agents SDK",
        "run scripts/install-openai-agents.sh (PyPI's openai-agents in a venv under target/; .ci/run does)",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_agents_sdk_runs_agents_with_instructions_sessions_and_tools() {
    let Some(python) = agents_python() else {
        return;
    };
    let h = Harness::start().await;
    let a = AgentName::new("a").unwrap();
    // One tool call per model's first turn; every other call answers.
    h.providers["stateless"].inject(
        Some(&a),
        Fault::tool_calls([("agents-call-1", "lookup", r#"{"q":"x"}"#)]),
    );
    h.providers["stateless"].inject(Some(&a), Fault::Reply("a read the fact".into()));
    h.providers["stateless"].inject(Some(&a), Fault::Reply("a read the second".into()));
    h.providers["stateless"].inject(
        Some(&a),
        Fault::tool_calls([("agents-call-2", "lookup", r#"{"q":"y"}"#)]),
    );
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/server/openai_agents_sdk.py");
    let base = h.base.clone();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(script)
            .env("LEGIO_BASE_URL", base)
            .env("LEGIO_TOKEN", TOKEN)
            .env("OPENAI_AGENTS_DISABLE_TRACING", "1")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "openai_agents_sdk.py failed:\n{stdout}\n{stderr}"
    );
    for check in [
        "ok chat session with a tool",
        "ok responses session with a tool",
        "ok responses previous_response_id",
    ] {
        assert!(
            stdout.lines().any(|l| l == check),
            "{check} missing:\n{stdout}"
        );
    }
    // Every provider call of agent a was sent the Agent's instructions, tool steps included.
    let calls: Vec<_> = h.providers["stateless"]
        .requests()
        .into_iter()
        .filter(|r| r.agent == a)
        .collect();
    assert_eq!(calls.len(), 7, "2 + 1 chat, 2 + 1 + 1 responses");
    for call in &calls {
        let status = call.status.as_deref().unwrap_or_default();
        assert!(
            status.contains("Instructions from the host for this turn:\nAnswer in one short line."),
            "a call without the instructions: {status:?}"
        );
    }
    for (conversation, users) in [
        ("agents:chat", &["look up x", "and now without tools"][..]),
        (
            "agents:responses",
            &["look up x", "and now without tools", "one more"][..],
        ),
    ] {
        let key = ConversationKey::new(conversation).unwrap();
        let records = h
            .runtime
            .log()
            .conversation_events(&key, Seq::ZERO, 10_000)
            .unwrap();
        let stored: Vec<String> = records
            .iter()
            .filter_map(|r| r.event.as_message())
            .filter(|m| m.sender == Participant::User)
            .map(|m| m.text_content())
            .collect();
        assert_eq!(
            stored, users,
            "{conversation}: the resent history stored again"
        );
        // The instructions are in the log, once per message, right before it.
        let given: Vec<_> = records
            .windows(2)
            .filter_map(|w| match (&w[0].event, &w[1].event) {
                (Event::InstructionsGiven(given), Event::MessagePosted(m)) => {
                    assert_eq!(given.for_message, m.id);
                    Some(given.text.clone())
                }
                _ => None,
            })
            .collect();
        assert_eq!(given.len(), users.len(), "{conversation}: {given:?}");
        assert!(given.iter().all(|g| g == "Answer in one short line."));
    }
    h.stop().await;
}
