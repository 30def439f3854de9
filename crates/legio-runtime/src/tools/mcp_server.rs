//! legio as an MCP server: an agent's own tools for an MCP client (Claude Code, the Python SDK),
//! scoped by a credential, never by an argument the model fills in.
//!
//! [`McpService`] is an rmcp server handler: `tools/list` answers exactly the tools the scope's
//! agent is offered in a turn (the same `offered_tools`: built-ins, its memory tools with
//! `check_permission`'s rules, its `[mcp.NAME]` tools); `tools/call` runs one through
//! [`Runtime::call_tool_as`], which records the call and its result in the log as the agent's
//! tool-call message and the result message answering it, both visible to that agent only (as
//! in a turn). The transports are at the edges: stdio in `legio mcp serve`, streamable HTTP under
//! `/mcp` in legio-server, which resolves the scope from the bearer token per request.

use std::sync::Arc;

use legio_core::AgentName;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, Content, CustomRequest, CustomResult, ErrorCode,
    Extensions, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerInfo, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;

use crate::error::RuntimeError;
use crate::runtime::Runtime;
use crate::tools::calls::tools_for;
pub use crate::tools::mcp_token::McpScope;
use crate::tools::memory::ToolSpec;

/// Finds the scope of one request from what the transport attached to it (the HTTP server puts
/// the verified token's scope in the request's extensions); `None` refuses the request.
pub type ScopeResolver = Arc<dyn Fn(&Extensions) -> Option<McpScope> + Send + Sync>;

#[derive(Clone)]
enum ScopeSource {
    Fixed(McpScope),
    PerRequest(ScopeResolver),
}

/// The rmcp server handler serving one scope's tools (see the module docs).
#[derive(Clone)]
pub struct McpService {
    runtime: Arc<Runtime>,
    scope: ScopeSource,
}

impl std::fmt::Debug for McpService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpService").finish_non_exhaustive()
    }
}

impl McpService {
    /// Serves `scope` on every request (stdio: the process was started for one scope).
    pub fn fixed(runtime: Arc<Runtime>, scope: McpScope) -> Self {
        Self {
            runtime,
            scope: ScopeSource::Fixed(scope),
        }
    }

    /// Serves the scope `resolve` finds in each request's extensions (HTTP: from its token).
    pub fn per_request(runtime: Arc<Runtime>, resolve: ScopeResolver) -> Self {
        Self {
            runtime,
            scope: ScopeSource::PerRequest(resolve),
        }
    }

    fn scope(&self, extensions: &Extensions) -> Result<McpScope, ErrorData> {
        match &self.scope {
            ScopeSource::Fixed(scope) => Ok(scope.clone()),
            ScopeSource::PerRequest(resolve) => resolve(extensions).ok_or_else(|| {
                ErrorData::invalid_request("no valid legio MCP credential on this request", None)
            }),
        }
    }
}

fn as_tool(spec: ToolSpec) -> Tool {
    let schema = match spec.parameters {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    Tool::new(spec.name, spec.description, Arc::new(schema))
}

fn runtime_error(e: RuntimeError) -> ErrorData {
    ErrorData::invalid_params(e.to_string(), None)
}

/// The MCP methods a client may call: one that reaches the custom-request handler had params
/// of the wrong shape (rmcp parses a known method's params into its type, and what fails to
/// parse arrives as a custom request), which is invalid params, not an unknown method.
const KNOWN_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "completion/complete",
    "logging/setLevel",
    "prompts/get",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "tools/call",
    "tools/list",
];

impl ServerHandler for McpService {
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let method = request.method;
        if KNOWN_METHODS.contains(&method.as_str()) {
            let shape = match method.as_str() {
                "tools/call" => " (tools/call takes {\"name\": string, \"arguments\"?: object})",
                _ => "",
            };
            return Err(ErrorData::invalid_params(
                format!("{method}: its params do not have the shape the method takes{shape}"),
                None,
            ));
        }
        Err(ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("no method {method:?} here"),
            None,
        ))
    }

    fn get_info(&self) -> ServerInfo {
        ServerInfo {
            capabilities: ServerCapabilities::builder().enable_tools().build(),
            server_info: rmcp::model::Implementation {
                name: "legio".to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
                ..rmcp::model::Implementation::default()
            },
            instructions: Some(
                "legio: the tools of one agent in one conversation (get_history, dispatch for the \
orchestrator, memory); every call is recorded in the conversation's log."
                    .to_owned(),
            ),
            ..ServerInfo::default()
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let scope = self.scope(&context.extensions)?;
        let tools = self
            .runtime
            .agent_tools(&scope.agent)
            .map_err(runtime_error)?;
        Ok(ListToolsResult {
            tools: tools.into_iter().map(as_tool).collect(),
            ..ListToolsResult::default()
        })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let scope = self.scope(&context.extensions)?;
        let arguments = request
            .arguments
            .map(|a| Value::Object(a).to_string())
            .unwrap_or_default();
        let outcome = self
            .runtime
            .call_tool_as(&scope.conversation, &scope.agent, &request.name, &arguments)
            .await
            .map_err(runtime_error)?;
        Ok(match outcome {
            Ok(text) => CallToolResult::success(vec![Content::text(text)]),
            Err(text) => CallToolResult::error(vec![Content::text(text)]),
        })
    }
}

impl Runtime {
    /// Tells the runtime that `url` (`http://HOST:PORT/mcp`) serves its MCP endpoint with tokens
    /// signed by `key`: from then on an agent whose provider runs its own tool loop
    /// (`claude-code`) gets it, with a fresh token for its conversation, on every call. The
    /// first call wins (a runtime has one server).
    pub fn serve_mcp_at(&self, url: String, key: crate::tools::mcp_token::McpTokenKey) {
        let _ = self.shared.mcp_endpoint.set((url, key));
    }

    /// The tools `agent` is offered in a turn (whatever its provider takes), in order.
    pub fn agent_tools(&self, agent: &AgentName) -> Result<Vec<ToolSpec>, RuntimeError> {
        let spec = self.shared.roster_spec(agent)?;
        Ok(tools_for(&self.shared, spec))
    }
}

/// Serves `scope`'s tools over MCP on this process's stdin and stdout until the client closes
/// them (`legio mcp serve`); stdout carries only MCP messages.
pub async fn serve_mcp_stdio(runtime: Arc<Runtime>, scope: McpScope) -> Result<(), RuntimeError> {
    use rmcp::ServiceExt;
    let failed = |reason: String| RuntimeError::Cancelled {
        what: "the MCP stdio session",
        source: legio_store::ErrorSource::new(reason),
    };
    let running = McpService::fixed(runtime, scope)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| failed(e.to_string()))?;
    running.waiting().await.map_err(|e| failed(e.to_string()))?;
    Ok(())
}
