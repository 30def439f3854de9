//! The tools an agent is offered and how their calls run (calls.rs): the host's registry and
//! the built-in names (tools/registry.rs, tools/registry_error.rs), a call's outcome (outcome.rs), the
//! memory tools with typed arguments (memory.rs, memory_calls.rs, arguments.rs), the tools a
//! host runs (host_calls.rs, the host desk host_desk.rs, their declarations declared.rs, their
//! results results.rs, who follows their turns follow.rs), the progress of a step's calls
//! (progress.rs), the calls that wait for a person's approval (approval.rs), MCP as a client (mcp_client.rs) and as a server (mcp_server.rs, its tokens
//! mcp_token.rs), and the operator's tools table (view.rs).

pub(crate) mod approval;
pub(crate) mod arguments;
pub(crate) mod calls;
pub(crate) mod declared;
pub(crate) mod follow;
pub(crate) mod host_calls;
pub(crate) mod host_desk;
pub(crate) mod mcp_client;
pub(crate) mod mcp_server;
pub(crate) mod mcp_token;
pub(crate) mod memory;
pub(crate) mod memory_calls;
pub(crate) mod outcome;
pub(crate) mod progress;
pub(crate) mod registry;
pub(crate) mod registry_error;
pub(crate) mod results;
pub(crate) mod view;
