//! The official `openai` Python SDK (PyPI, installed by `scripts/install-openai-sdk.sh` into a
//! venv under target/) as a real client of the OpenAI-compatible door: `openai_sdk.py` runs
//! chat.completions (whole and streamed), responses with `previous_response_id`, models.list, a
//! host tool round-trip, the error shape, and validates the history views with the SDK's
//! `Message[]` types. Under `CI=true` a missing SDK fails; elsewhere the test skips with a line.

use std::path::PathBuf;
use std::process::Command;

use legio_core::{AgentName, ConversationKey, Participant};
use legio_llm::Fault;

use super::{messages_of, Harness, TOKEN};

/// A venv's Python that imports `imports`: the variable `var`, or `venv` under target/ (where
/// the install script puts it); `None` after saying `what` is missing and `how` to install it.
pub(crate) fn venv_python(
    var: &str,
    venv: &str,
    imports: &str,
    what: &str,
    how: &str,
) -> Option<PathBuf> {
    let python = std::env::var_os(var).map_or_else(
        || {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join(format!("../../target/{venv}/bin/python"))
        },
        PathBuf::from,
    );
    let works = Command::new(&python)
        .args(["-c", &format!("import {imports}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if works {
        return Some(python);
    }
    legio_tests::component_missing(what, how);
    None
}

/// The venv's Python with the SDK: `LEGIO_OPENAI_PYTHON`, or the install script's default path.
fn sdk_python() -> Option<PathBuf> {
    venv_python(
        "LEGIO_OPENAI_PYTHON",
        "openai-sdk-venv",
        "openai, pydantic",
        "the openai Python SDK",
        "run scripts/install-openai-sdk.sh (PyPI's openai in a venv under target/; .ci/run does)",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_python_sdk_is_a_real_client() {
    let Some(python) = sdk_python() else {
        return;
    };
    let h = Harness::start().await;
    let a = AgentName::new("a").unwrap();
    h.providers["stateless"].inject(
        Some(&a),
        Fault::tool_calls([("sdk-call-1", "lookup", r#"{"q":"x"}"#)]),
    );
    // Faults are taken call by call: the round trip's second call answers, then the streamed
    // Responses one calls.
    h.providers["stateless"].inject(Some(&a), Fault::Reply("a read the lookup's result".into()));
    h.providers["stateless"].inject(
        Some(&a),
        Fault::tool_calls([("sdk-call-2", "lookup", r#"{"q":"y"}"#)]),
    );
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/server/openai_sdk.py");
    let base = h.base.clone();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(script)
            .env("LEGIO_BASE_URL", base)
            .env("LEGIO_TOKEN", TOKEN)
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
        "openai_sdk.py failed:\n{stdout}\n{stderr}"
    );
    for check in [
        "ok models.list",
        "ok chat.completions",
        "ok chat.completions stream",
        "ok responses previous_response_id",
        "ok host tool round-trip",
        "ok responses stream",
        "ok error shape",
        "ok history as Message[]",
    ] {
        assert!(
            stdout.lines().any(|l| l == check),
            "{check} missing:\n{stdout}"
        );
    }
    // What the SDK sent is in the log once each: the door stored only the new messages.
    let key = ConversationKey::new("sdk:chat").unwrap();
    let users: Vec<String> = messages_of(h.runtime.log().as_ref(), &key)
        .iter()
        .filter_map(|r| r.event.as_message())
        .filter(|m| m.sender == Participant::User)
        .map(|m| m.text_content())
        .collect();
    assert_eq!(users, ["hello", "again", "stream please"]);
    h.stop().await;
}
