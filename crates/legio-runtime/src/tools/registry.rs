//! The host's tools ([`ToolRegistry`]) and the names of the built-in ones: vocabulary shared by
//! the runtime's state and the tool calls (tools/calls.rs), in a module that depends on neither.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;

use crate::tools::memory::{MemoryTools, ToolSpec};
pub use crate::tools::registry_error::ToolRegistryError;

/// The built-in tool that reads the conversation as the calling agent may see it.
pub const GET_HISTORY: &str = "get_history";
/// The orchestrator's built-in tool that sends a message to specialists and returns their replies.
pub const DISPATCH: &str = "dispatch";

/// What a host tool returns: its result text, or an error text for the model.
pub type ToolFuture = Pin<Box<dyn Future<Output = Result<String, String>> + Send>>;

type ToolFn = Arc<dyn Fn(Value) -> ToolFuture + Send + Sync>;

#[derive(Clone)]
pub(crate) struct HostTool {
    pub(crate) spec: ToolSpec,
    pub(crate) run: ToolFn,
}

/// The host's own tools, offered to every agent whose provider takes tools: each a name, a
/// description, the JSON schema of its arguments and an async function from the arguments (a
/// JSON value) to a result or an error text. Pass it to [`crate::RuntimeBuilder::tools`].
#[derive(Clone, Default)]
pub struct ToolRegistry {
    pub(crate) tools: Vec<HostTool>,
}

impl fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolRegistry")
            .field("tools", &self.names())
            .finish()
    }
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Checks a tool's name (valid, not a built-in's) and that its parameters are an object schema:
/// what every host tool passes, registered in the process or declared over the API.
pub(crate) fn check_tool(name: &str, parameters: &Value) -> Result<(), ToolRegistryError> {
    let owned = || name.to_owned();
    if !valid_name(name) {
        return Err(ToolRegistryError::InvalidName { name: owned() });
    }
    if name == GET_HISTORY
        || name == DISPATCH
        || MemoryTools::is_memory_tool(name)
        || name.starts_with(legio_config::MCP_TOOL_PREFIX)
    {
        return Err(ToolRegistryError::Reserved { name: owned() });
    }
    if parameters.get("type").and_then(Value::as_str) != Some("object") {
        return Err(ToolRegistryError::InvalidSchema { name: owned() });
    }
    Ok(())
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a tool. `run` gets the model's arguments (parsed JSON; `null` when it gave
    /// none) and answers the result text, or an error text that the model gets as an error
    /// result. The schema is described to the model, not enforced: check the arguments in `run`.
    pub fn register<F, Fut>(
        &mut self,
        name: &str,
        description: &str,
        parameters: Value,
        run: F,
    ) -> Result<&mut Self, ToolRegistryError>
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<String, String>> + Send + 'static,
    {
        let owned = || name.to_owned();
        check_tool(name, &parameters)?;
        if self.tools.iter().any(|t| t.spec.name == name) {
            return Err(ToolRegistryError::Duplicate { name: owned() });
        }
        self.tools.push(HostTool {
            spec: ToolSpec {
                name: owned(),
                description: description.to_owned(),
                parameters,
            },
            run: Arc::new(move |args| Box::pin(run(args))),
        });
        Ok(self)
    }

    /// The registered tools' names, in order.
    pub fn names(&self) -> Vec<&str> {
        self.tools.iter().map(|t| t.spec.name.as_str()).collect()
    }

    pub(crate) fn get(&self, name: &str) -> Option<&HostTool> {
        self.tools.iter().find(|t| t.spec.name == name)
    }
}
