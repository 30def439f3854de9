//! `legio inspect tools`: every agent's tools and where each comes from, from the configuration
//! alone (the `[mcp.NAME]` servers are started to list theirs, then stopped). Host tools are the
//! embedding host's and do not appear here.

use std::collections::HashMap;

use crate::error::RuntimeError;
use crate::mcp_client::McpClients;
use crate::registry::ToolRegistry;
use crate::tools::offered_tools;
use legio_config::RuntimeConfig;
use legio_ops::Table;

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
    let mut rows = Vec::new();
    for spec in &config.agents {
        if !takes_tools.get(&spec.provider).copied().unwrap_or(true) {
            rows.push(vec![
                spec.name.to_string(),
                "(none)".to_owned(),
                format!("provider {} takes none of legio's tools", spec.provider),
                String::new(),
            ]);
            continue;
        }
        for (tool, source) in offered_tools(config, &ToolRegistry::new(), &mcp, spec) {
            let summary = tool
                .description
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned();
            rows.push(vec![spec.name.to_string(), tool.name, source, summary]);
        }
    }
    mcp.stop().await;
    Ok(Table {
        header: ["agent", "tool", "source", "description"]
            .map(str::to_owned)
            .to_vec(),
        rows,
    })
}
