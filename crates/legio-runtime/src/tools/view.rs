//! `legio inspect tools`: every agent's tools and where each comes from. Offline
//! ([`tools_table`]) from the configuration alone: the `[mcp.NAME]` servers are started to list
//! theirs, then stopped, and tools an embedding host registers are unknown. Live
//! ([`Runtime::tools_table`], `GET /operator/inspect/tools`) from the running runtime: its
//! configuration and providers, the tools its host registered and the MCP servers it opened. With
//! a conversation, both add the tools the host declared there (legio-ops' `declared_tool_rows`).

use std::collections::HashMap;

use crate::error::RuntimeError;
use crate::runtime::Runtime;
use crate::tools::calls::offered_tools;
use crate::tools::mcp_client::McpClients;
use crate::tools::registry::ToolRegistry;
use legio_config::RuntimeConfig;
use legio_core::ConversationKey;
use legio_ops::{tool_row, tools_header, Table};

/// One row per tool an agent is offered: agent, tool, source and its description's first line.
/// An agent whose provider takes none of legio's tools gets one row saying so.
pub async fn tools_table(config: &RuntimeConfig) -> Result<Table, RuntimeError> {
    let mcp = McpClients::start(&config.mcp).await?;
    let mut takes_tools = HashMap::new();
    for (name, settings) in &config.providers {
        let tools = legio_llm::build_provider(name, settings)
            .map(|p| p.capabilities().tools)
            .unwrap_or(true);
        takes_tools.insert(name.clone(), tools);
    }
    let table = agents_tools(config, &ToolRegistry::new(), &mcp, |provider| {
        takes_tools.get(provider).copied().unwrap_or(true)
    });
    mcp.stop().await;
    Ok(table)
}

impl Runtime {
    /// [`tools_table`] as this runtime offers the tools: its providers, the tools its host
    /// registered and those its `[mcp.NAME]` servers listed when they opened (none is started).
    /// With `conversation`, the tools the host declared there follow (the log's latest
    /// declaration; an unknown conversation is an error). On a cluster node that does not own
    /// the conversation, what its owner appended is read first.
    pub async fn tools_table(
        &self,
        conversation: Option<&ConversationKey>,
    ) -> Result<Table, RuntimeError> {
        let declared = match conversation {
            Some(key) => {
                self.catch_up(key).await?;
                let key = key.clone();
                self.shared
                    .read_with(move |log| legio_ops::declared_tool_rows(log, &key))
                    .await?
            }
            None => Vec::new(),
        };
        let shared = &self.shared;
        let mut table = agents_tools(&shared.config, &shared.tools, &shared.mcp, |provider| {
            shared
                .providers
                .get(provider)
                .is_none_or(|p| p.capabilities().tools)
        });
        table.rows.extend(declared);
        Ok(table)
    }
}

/// The agents' rows of the tools table, in the configuration's order; `takes_tools` says
/// whether the provider of that name takes legio's tools.
fn agents_tools(
    config: &RuntimeConfig,
    host: &ToolRegistry,
    mcp: &McpClients,
    takes_tools: impl Fn(&str) -> bool,
) -> Table {
    let mut table = tools_header();
    for spec in &config.agents {
        let agent = spec.name.as_str();
        if !takes_tools(&spec.provider) {
            let why = format!("provider {} takes none of legio's tools", spec.provider);
            table.rows.push(tool_row(agent, "(none)", &why, ""));
            continue;
        }
        for (tool, source) in offered_tools(config, host, mcp, spec) {
            let row = tool_row(agent, &tool.name, &source, &tool.description);
            table.rows.push(row);
        }
    }
    table
}
