//! The operator's agents table with the roster (`legio inspect agents`, `GET
//! /operator/inspect/agents`): every configured agent with its role, provider and history mode,
//! next to what the log says of its sessions, and a row for each agent that has no session yet.
//! Kept apart from operator.rs's log-only views: it needs the configuration.

use legio_core::ConversationKey;
use legio_store::EventLog;

use legio_config::RuntimeConfig;

use crate::error::OpsError;
use crate::operator::{inspect, InspectKind, Table};

/// The status of a configured agent the log knows no session of.
pub const NO_SESSION: &str = "no session yet";

/// The agents table of the log (or of `only`), with the roster of `config`: the columns `role`,
/// `provider` and `history` after `agent` (`not configured` for an agent of the log that the
/// roster no longer has), and one row per configured agent without a session (in `only`, or in
/// any conversation), its conversation `-` unless `only` names one.
pub fn agents_with_roster(
    log: &dyn EventLog,
    config: &RuntimeConfig,
    only: Option<&ConversationKey>,
) -> Result<Table, OpsError> {
    let sessions = inspect(log, InspectKind::Agents, only)?;
    let mut header = sessions.header.clone();
    header.splice(2..2, ["role", "provider", "history"].map(String::from));
    let width = header.len();
    let mut rows: Vec<Vec<String>> = sessions
        .rows
        .into_iter()
        .map(|mut row| {
            row.splice(2..2, roster_cells(config, &row[1]));
            row
        })
        .collect();
    for spec in &config.agents {
        let name = spec.name.as_str();
        if rows.iter().any(|row| row[1] == name) {
            continue;
        }
        let mut row = vec![
            only.map_or_else(|| "-".to_owned(), ToString::to_string),
            name.to_owned(),
        ];
        row.extend(roster_cells(config, name));
        row.push(NO_SESSION.to_owned());
        row.resize(width, "-".to_owned());
        rows.push(row);
    }
    Ok(Table { header, rows })
}

/// Role, provider and history mode of the agent named `name` in the roster.
fn roster_cells(config: &RuntimeConfig, name: &str) -> [String; 3] {
    match config.agents.iter().find(|a| a.name.as_str() == name) {
        Some(spec) => [
            spec.role.as_str().to_owned(),
            spec.provider.clone(),
            config
                .history_of(spec)
                .map_or("-", |h| h.as_str())
                .to_owned(),
        ],
        None => ["not configured".to_owned(), "-".to_owned(), "-".to_owned()],
    }
}
