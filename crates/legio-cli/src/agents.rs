//! What the commands that talk to agents share (`chat`, `post`): opening the legion and posting
//! with status lines. Built only with the `runtime` feature, so the offline commands never link the
//! actor crates.

use anyhow::Result;
use legio_runtime::Runtime;

use crate::common::config;
use crate::invocation::Context;

/// Opens the legion described by the configuration.
pub async fn open_runtime(context: &Context) -> Result<Runtime> {
    Ok(Runtime::open(config(context)?).await?)
}

/// Posts `text` as the user and prints status lines on stderr as the turns go (seed 001's
/// status messages): each tool call and how it ended, when an agent starts thinking (where its
/// provider streams thinking), and a warning for each compaction that failed (the turn goes on;
/// older messages may be left out to fit the window).
/// With `key`, a retry of a post already stored stores nothing new (`Runtime::post_once`).
pub async fn post_with_status(
    runtime: &Runtime,
    conversation: &str,
    text: &str,
    key: Option<legio_core::IdempotencyKey>,
) -> std::result::Result<legio_runtime::Posted, legio_runtime::RuntimeError> {
    let (sink, mut progress) = tokio::sync::mpsc::unbounded_channel();
    let lines = tokio::spawn(async move {
        let mut thinking = std::collections::HashSet::new();
        while let Some(step) = progress.recv().await {
            if let Some(line) = status_line(&step, &mut thinking) {
                eprintln!("{}", crate::output::visible(&line));
            }
        }
    });
    let posting = runtime.posting(conversation, text).key(key).progress(sink);
    let replies = posting.send().await;
    let _ = lines.await;
    replies
}

/// The status line for one step of progress, if it gets one. `thinking` holds the agents whose
/// thinking was announced, so a stream of fragments is one line until the agent does something
/// else.
pub fn status_line(
    step: &legio_runtime::Progress,
    thinking: &mut std::collections::HashSet<String>,
) -> Option<String> {
    use legio_runtime::Progress as P;
    let cut = |text: &str| crate::render::cut(text);
    match step {
        P::Thinking { agent, .. } => thinking
            .insert(agent.to_string())
            .then(|| format!("⏳ {agent}: thinking…")),
        P::ToolCalled {
            agent,
            name,
            arguments,
            ..
        } => {
            thinking.remove(agent.as_str());
            Some(format!("⏳ {agent}: calling {name} {}", cut(arguments)))
        }
        P::ToolDone { agent, name, .. } => Some(format!("✓ {agent}: {name} done")),
        P::ToolFailed {
            agent, name, error, ..
        } => Some(format!("✗ {agent}: {name} failed: {}", cut(error))),
        P::CompactionFailed { agent, reason } => Some(format!(
            "warning: {agent}: compacting the context failed ({reason}); the turn went on without a new summary"
        )),
        P::Delta { agent, .. } | P::AgentStarted { agent } => {
            thinking.remove(agent.as_str());
            None
        }
        P::AgentDone { .. } | P::ToolCallsRequired { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use legio_core::AgentName;
    use legio_runtime::Progress;

    use super::status_line;

    #[test]
    fn status_lines_name_each_tool_call_its_end_and_one_thinking_per_burst() {
        let ann = AgentName::new("ann").unwrap();
        let thinking = |text: &str| Progress::Thinking {
            agent: ann.clone(),
            text: text.into(),
        };
        let steps = [
            Progress::AgentStarted { agent: ann.clone() },
            thinking("Let me"),
            thinking(" look."),
            Progress::ToolCalled {
                agent: ann.clone(),
                id: "c1".into(),
                name: "get_history".into(),
                arguments: "{\"limit\":3}".into(),
            },
            Progress::ToolDone {
                agent: ann.clone(),
                id: "c1".into(),
                name: "get_history".into(),
            },
            Progress::ToolFailed {
                agent: ann.clone(),
                id: "c2".into(),
                name: "web".into(),
                error: "unknown tool web".into(),
            },
            thinking("Now"),
            Progress::Delta {
                agent: ann.clone(),
                text: "Done.".into(),
            },
        ];
        let mut announced = HashSet::new();
        let lines: Vec<String> = steps
            .iter()
            .filter_map(|s| status_line(s, &mut announced))
            .collect();
        assert_eq!(
            lines,
            [
                "⏳ ann: thinking…",
                "⏳ ann: calling get_history {\"limit\":3}",
                "✓ ann: get_history done",
                "✗ ann: web failed: unknown tool web",
                "⏳ ann: thinking…",
            ]
        );
    }
}
