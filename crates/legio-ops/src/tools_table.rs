//! The table `legio inspect tools` prints, offline and live alike: its header, one row per tool,
//! and the rows of the tools a host declared in a conversation (read from the log). The agents'
//! own rows need the MCP servers' tools, so legio-runtime builds them (tools_view.rs) with
//! [`tool_row`].

use legio_core::{ConversationKey, Seq};
use legio_store::EventLog;

use crate::error::OpsError;
use crate::operator::{latest_declaration, require_conversation, Table};

/// The agent cell of the host's declared tools: offered on the host's turns, whoever they
/// address.
pub const HOST_TURNS: &str = "(host turns)";

/// An empty tools table: its header (agent, tool, source, description), no rows.
pub fn tools_header() -> Table {
    Table {
        header: ["agent", "tool", "source", "description"]
            .map(str::to_owned)
            .to_vec(),
        rows: Vec::new(),
    }
}

/// One row of the tools table: the agent, the tool, where it comes from and its description's
/// first line.
pub fn tool_row(agent: &str, tool: &str, source: &str, description: &str) -> Vec<String> {
    vec![
        agent.to_owned(),
        tool.to_owned(),
        source.to_owned(),
        description.lines().next().unwrap_or_default().to_owned(),
    ]
}

/// The tools the host declared in `conversation` (its latest `ToolsDeclared`, none when it
/// cleared them) as rows of the tools table. Errors when the log has no such conversation.
/// Blocks on log reads.
pub fn declared_tool_rows(
    log: &dyn EventLog,
    conversation: &ConversationKey,
) -> Result<Vec<Vec<String>>, OpsError> {
    require_conversation(log, conversation)?;
    let (latest, _) = latest_declaration(log, conversation, Seq::ZERO)?;
    let Some((seq, declared)) = latest else {
        return Ok(Vec::new());
    };
    let source = format!("declared by the host in {conversation} (seq {seq})");
    Ok(declared
        .tools
        .iter()
        .map(|tool| tool_row(HOST_TURNS, &tool.name, &source, &tool.description))
        .collect())
}
