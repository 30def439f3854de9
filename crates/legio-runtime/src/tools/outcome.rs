//! One tool call's outcome for the model, its result or an error result (a leaf: the tool loop,
//! the MCP clients and the host's tools all answer one).

use legio_core::Part;

/// One call's outcome, for the model: its result, or an error result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ToolOutcome {
    /// The tool's result text.
    Done(String),
    /// What went wrong, as an error result.
    Failed(String),
}

impl ToolOutcome {
    /// The result part answering the call `call_id`.
    pub(crate) fn into_part(self, call_id: &str) -> Part {
        let (content, is_error) = match self {
            ToolOutcome::Done(text) => (text, false),
            ToolOutcome::Failed(text) => (text, true),
        };
        Part::ToolResult {
            call_id: call_id.to_owned(),
            content,
            is_error,
        }
    }

    pub(crate) fn label(&self) -> &'static str {
        match self {
            ToolOutcome::Done(_) => "ok",
            ToolOutcome::Failed(_) => "error",
        }
    }
}

impl From<Result<String, String>> for ToolOutcome {
    fn from(result: Result<String, String>) -> Self {
        match result {
            Ok(text) => ToolOutcome::Done(text),
            Err(text) => ToolOutcome::Failed(text),
        }
    }
}
