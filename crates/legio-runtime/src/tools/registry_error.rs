//! Why a tool cannot be registered or declared (a leaf: the registry, the host's tools and the
//! runtime's errors all name it).

use thiserror::Error;

/// Why a host tool cannot be registered.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ToolRegistryError {
    /// The name is not 1 to 64 characters of `A-Z a-z 0-9 _ -` (what every provider accepts).
    #[error("tool name {name:?} is invalid: use 1 to 64 characters of A-Z, a-z, 0-9, '_' or '-'")]
    InvalidName {
        /// The name.
        name: String,
    },
    /// A built-in or memory tool already has the name, or it starts with `mcp__` (the prefix of
    /// the `[mcp.NAME]` servers' tools).
    #[error("tool name {name:?} is taken by a built-in tool or starts with \"mcp__\" (reserved for MCP servers' tools); choose another name")]
    Reserved {
        /// The name.
        name: String,
    },
    /// The name is registered already.
    #[error("tool {name:?} is registered twice")]
    Duplicate {
        /// The name.
        name: String,
    },
    /// The parameters are not an object schema.
    #[error("the parameters of tool {name:?} must be a JSON schema with \"type\": \"object\"")]
    InvalidSchema {
        /// The name.
        name: String,
    },
}
