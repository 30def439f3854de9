//! The `[mcp.NAME]` tables of the configuration: the MCP servers whose tools legio offers its
//! agents (legio as an MCP client). Parsed strictly like every section, validated against the
//! roster; the connections themselves live in mcp_client.rs.
//!
//! A table names either a `command` (with `args` and `env`: a child process speaking MCP on
//! stdio) or a `url` (with `headers`: a streamable-HTTP server), the `agents` offered its tools
//! and `timeout_seconds`, how long one call (and the connection at start) may take.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use legio_core::AgentName;
use serde::Deserialize;

/// How long one MCP call may take unless `timeout_seconds` says otherwise.
pub const MCP_DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The prefix of every tool an MCP server offers: its tool `T` of `[mcp.NAME]` is offered as
/// `mcp__NAME__T` (Claude Code's convention), so it never collides with a built-in tool.
pub const MCP_TOOL_PREFIX: &str = "mcp__";

/// One `[mcp.NAME]` table as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct McpSection {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    agents: Vec<String>,
    timeout_seconds: Option<f64>,
}

/// How legio reaches an MCP server.
#[derive(Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// A child process speaking MCP on stdin and stdout.
    Stdio {
        /// The program (a path relative to the config file's folder when it has a `/`).
        command: PathBuf,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to its environment.
        env: BTreeMap<String, String>,
    },
    /// A streamable-HTTP endpoint.
    Http {
        /// The endpoint's URL.
        url: String,
        /// Headers sent with every request (an `Authorization` header, for example).
        headers: BTreeMap<String, String>,
    },
}

impl std::fmt::Debug for McpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Stdio { command, args, env } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env", &env.keys().collect::<Vec<_>>())
                .finish(),
            // Header values are often credentials: names only.
            Self::Http { url, headers } => f
                .debug_struct("Http")
                .field("url", url)
                .field("headers", &headers.keys().collect::<Vec<_>>())
                .finish(),
        }
    }
}

/// One MCP server, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpServerSpec {
    /// The table's name: the `NAME` of `mcp__NAME__T`.
    pub name: String,
    /// How to reach it.
    pub transport: McpTransport,
    /// The agents offered its tools.
    pub agents: Vec<AgentName>,
    /// How long one call, and connecting, may take.
    pub timeout: Duration,
}

impl McpServerSpec {
    /// Where its tools come from, for `legio inspect tools`: `stdio: COMMAND ARGS` or the URL.
    pub fn source(&self) -> String {
        match &self.transport {
            McpTransport::Stdio { command, args, .. } => {
                let mut out = format!("mcp {} (stdio: {}", self.name, command.display());
                for arg in args {
                    out.push(' ');
                    out.push_str(arg);
                }
                out.push(')');
                out
            }
            McpTransport::Http { url, .. } => format!("mcp {} ({url})", self.name),
        }
    }
}

fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && !name.contains("__")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Validates `[mcp.NAME]` against the roster; errors name the key.
pub(crate) fn validate(
    name: &str,
    section: &McpSection,
    roster: &[AgentName],
    base: &Path,
) -> Result<McpServerSpec, String> {
    let where_ = format!("mcp.{name}");
    if !valid_server_name(name) {
        return Err(format!(
            "[{where_}]: the name must be 1 to 32 characters of A-Z, a-z, 0-9, '_' or '-' \
without \"__\" (its tools are offered as mcp__{name}__TOOL)"
        ));
    }
    let transport = match (&section.command, &section.url) {
        (Some(command), None) => stdio_transport(&where_, command, section, base)?,
        (None, Some(url)) => http_transport(&where_, url, section)?,
        (Some(_), Some(_)) => {
            return Err(format!(
                "{where_} has both command and url: give command (a stdio server) or url (a streamable-HTTP server)"
            ))
        }
        (None, None) => {
            return Err(format!(
                "{where_} needs command (a stdio server) or url (a streamable-HTTP server)"
            ))
        }
    };
    if section.agents.is_empty() {
        return Err(format!(
            "{where_}.agents is empty: name the agents offered its tools"
        ));
    }
    let mut agents = Vec::new();
    for agent in &section.agents {
        match roster.iter().find(|a| a.as_str() == agent) {
            Some(name) if !agents.contains(name) => agents.push(name.clone()),
            Some(_) => return Err(format!("{where_}.agents names {agent:?} twice")),
            None => {
                let known: Vec<&str> = roster.iter().map(|a| a.as_str()).collect();
                return Err(format!(
                    "{where_}.agents names {agent:?}, which is not in [agents] (known: {})",
                    known.join(", ")
                ));
            }
        }
    }
    let timeout = match section.timeout_seconds {
        None => MCP_DEFAULT_TIMEOUT,
        Some(v) => Duration::try_from_secs_f64(v)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| format!("{where_}.timeout_seconds = {v} must be above 0"))?,
    };
    Ok(McpServerSpec {
        name: name.to_owned(),
        transport,
        agents,
        timeout,
    })
}

fn stdio_transport(
    where_: &str,
    command: &str,
    section: &McpSection,
    base: &Path,
) -> Result<McpTransport, String> {
    if !section.headers.is_empty() {
        return Err(format!(
            "{where_}.headers is for url servers; a command server takes env"
        ));
    }
    if command.trim().is_empty() {
        return Err(format!("{where_}.command is empty"));
    }
    // A bare program name is looked up on PATH; a path is relative to the config file.
    let command = if command.contains('/') {
        base.join(command)
    } else {
        PathBuf::from(command)
    };
    Ok(McpTransport::Stdio {
        command,
        args: section.args.clone(),
        env: section.env.clone(),
    })
}

fn http_transport(where_: &str, url: &str, section: &McpSection) -> Result<McpTransport, String> {
    if !section.args.is_empty() || !section.env.is_empty() {
        return Err(format!(
            "{where_}.args and .env are for command servers; a url server takes headers"
        ));
    }
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(format!(
            "{where_}.url = {url:?} must start with http:// or https://"
        ));
    }
    Ok(McpTransport::Http {
        url: url.to_owned(),
        headers: section.headers.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roster() -> Vec<AgentName> {
        ["lead", "ann"]
            .iter()
            .map(|name| AgentName::new(*name).unwrap())
            .collect()
    }

    /// Validates the table `text` as `[mcp.name]`: the spec or the error.
    fn check(name: &str, text: &str) -> Result<McpServerSpec, String> {
        let section: McpSection = toml::from_str(text).map_err(|e| e.message().to_owned())?;
        validate(name, &section, &roster(), Path::new("/etc/legio"))
    }

    fn error(name: &str, text: &str) -> String {
        check(name, text).unwrap_err()
    }

    #[test]
    fn a_stdio_table_resolves_paths_against_the_config_folder() {
        let spec = check(
            "fs",
            "command = \"./bin/server\"\nargs = [\"-v\"]\nenv = { A = \"1\" }\nagents = [\"ann\"]",
        )
        .unwrap();
        assert_eq!(spec.timeout, MCP_DEFAULT_TIMEOUT);
        assert_eq!(spec.agents, [AgentName::new("ann").unwrap()]);
        let McpTransport::Stdio { command, args, env } = &spec.transport else {
            panic!("{spec:?}")
        };
        assert_eq!(command, Path::new("/etc/legio/./bin/server"));
        assert_eq!(args, &["-v"]);
        assert_eq!(env["A"], "1");
        let bare = check("fs", "command = \"npx\"\nagents = [\"ann\"]").unwrap();
        assert!(
            matches!(bare.transport, McpTransport::Stdio { command, .. } if command == Path::new("npx"))
        );
    }

    #[test]
    fn an_http_table_keeps_its_headers_out_of_debug() {
        let spec = check(
            "web",
            "url = \"https://x.test/mcp\"\nheaders = { Authorization = \"Bearer s3cret\" }\nagents = [\"lead\", \"ann\"]\ntimeout_seconds = 2.5",
        )
        .unwrap();
        assert_eq!(spec.timeout, Duration::from_millis(2500));
        assert!(!format!("{spec:?}").contains("s3cret"));
        assert_eq!(spec.source(), "mcp web (https://x.test/mcp)");
    }

    #[test]
    fn bad_tables_are_refused_naming_the_key() {
        for (name, text, expect) in [
            ("x", "agents = [\"ann\"]", "mcp.x needs command"),
            (
                "x",
                "command = \"a\"\nurl = \"http://b\"\nagents = [\"ann\"]",
                "both command and url",
            ),
            (
                "x",
                "command = \"a\"\nagents = [\"zed\"]",
                "mcp.x.agents names \"zed\"",
            ),
            ("x", "command = \"a\"\nagents = []", "mcp.x.agents is empty"),
            ("x", "command = \"a\"\nagents = [\"ann\", \"ann\"]", "twice"),
            (
                "x",
                "command = \"a\"\nagents = [\"ann\"]\ntimeout_seconds = 0",
                "timeout_seconds = 0",
            ),
            (
                "x",
                "url = \"ftp://a\"\nagents = [\"ann\"]",
                "must start with http",
            ),
            (
                "x",
                "url = \"http://a\"\nenv = { A = \"1\" }\nagents = [\"ann\"]",
                "a url server takes headers",
            ),
            (
                "x",
                "command = \"a\"\nheaders = { A = \"1\" }\nagents = [\"ann\"]",
                "a command server takes env",
            ),
            (
                "a__b",
                "command = \"a\"\nagents = [\"ann\"]",
                "without \"__\"",
            ),
            (
                "x",
                "command = \"a\"\nagents = [\"ann\"]\ncwd = \"/\"",
                "unknown field `cwd`",
            ),
        ] {
            let got = error(name, text);
            assert!(
                got.contains(expect),
                "{text:?}: {got:?} should contain {expect:?}"
            );
        }
    }
}
