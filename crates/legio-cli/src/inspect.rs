//! `legio inspect`: tables of conversations, agents, sessions and the shared memory, from the log;
//! on a cluster, which node owns which conversation, from the lease bucket; and every agent's
//! tools, from the configuration (or the running server's, live).

use std::process::ExitCode;

use anyhow::Result;
use comfy_table::presets::UTF8_FULL_CONDENSED;
use legio_core::ConversationKey;
use legio_ops::{InspectKind, Table};
use serde_json::json;

use crate::common;
use crate::invocation::Context;

/// What to inspect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum What {
    /// Message counts and last activity per conversation.
    Conversations,
    /// Every configured agent (role, provider, history mode) and, per conversation, its status,
    /// current session, provider session, tokens, checkpoint.
    Agents,
    /// Every session with why it opened and why it ended.
    Sessions,
    /// The shared memory: directives, notes and every notebook (JSON: the whole projection).
    Memory,
    /// On a cluster (`--nats` or `store.backend = "nats"`): each running node and the
    /// conversations it owns (none: an empty conversation), with the lease's revision and the
    /// time since it was last renewed.
    Nodes,
    /// Every agent's tools and where each comes from (built-in, memory, or an [mcp.NAME]
    /// server, which is started to list them), from the configuration; with --conversation,
    /// also the tools the host declared there (from the log), offered on the host's turns.
    /// With --server, the running server's tools (its configuration, the MCP servers it opened).
    Tools,
    /// Tool calls that wait, or waited, for a person's answer (`approval` in the configuration):
    /// conversation, agent, call id, tool, arguments, state (pending, approved, denied,
    /// timed_out), deadline, who answered and when, and why. Answer with `legio approve` or
    /// `legio deny`.
    Approvals,
}

/// Table or JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TableFormat {
    /// A table.
    Table,
    /// JSON.
    Json,
}

/// Arguments of `legio inspect`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to show.
    #[arg(value_enum)]
    what: What,
    /// Only this conversation.
    #[arg(long)]
    conversation: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = TableFormat::Table)]
    format: TableFormat,
}

fn print(format: TableFormat, header: &[&str], rows: Vec<Vec<String>>) -> Result<()> {
    match format {
        TableFormat::Json => {
            let objects: Vec<serde_json::Value> = rows
                .iter()
                .map(|row| {
                    serde_json::Value::Object(
                        header
                            .iter()
                            .zip(row)
                            .map(|(h, v)| ((*h).to_owned(), json!(v)))
                            .collect(),
                    )
                })
                .collect();
            outln!("{}", serde_json::to_string_pretty(&objects)?);
        }
        TableFormat::Table => {
            let mut table = comfy_table::Table::new();
            table
                .load_preset(UTF8_FULL_CONDENSED)
                .set_header(header.to_vec());
            for row in rows {
                // Cells quote what agents wrote (notes, notebooks): escaped for the terminal.
                table.add_row(row.iter().map(|cell| crate::output::visible(cell)));
            }
            outln!("{table}");
        }
    }
    Ok(())
}

/// `legio inspect approvals`: from the log, or the running server's (`GET
/// /operator/inspect/approvals`).
fn approvals(context: &Context, args: &Args) -> Result<ExitCode> {
    let table: Table = match context.remote()? {
        Some(remote) => {
            let query = conversation_query(args);
            serde_json::from_value(remote.get_json("/operator/inspect/approvals", &query)?)?
        }
        None => {
            let log = common::open_log_for_reading(context)?;
            let only = args
                .conversation
                .clone()
                .map(ConversationKey::new)
                .transpose()?;
            legio_ops::approvals_table(&*log, only.as_ref())?
        }
    };
    let header: Vec<&str> = table.header.iter().map(String::as_str).collect();
    print(args.format, &header, table.rows)?;
    Ok(ExitCode::SUCCESS)
}

/// `legio inspect tools`: with `--server`, the running server's table
/// (`GET /operator/inspect/tools`: its configuration and the MCP servers it opened); offline,
/// from the configuration, the MCP servers started to list their tools. With `--conversation`,
/// also the tools the host declared there (read from the log).
fn tools(context: &Context, args: &Args) -> Result<ExitCode> {
    let table: Table = match context.remote()? {
        Some(remote) => {
            let query = conversation_query(args);
            serde_json::from_value(remote.get_json("/operator/inspect/tools", &query)?)?
        }
        None => offline_tools(context, args.conversation.as_deref())?,
    };
    let header: Vec<&str> = table.header.iter().map(String::as_str).collect();
    print(args.format, &header, table.rows)?;
    Ok(ExitCode::SUCCESS)
}

/// The tools table from the configuration; the conversation's declared tools are read first,
/// so a mistyped key fails before any MCP server starts.
#[cfg(feature = "runtime")]
fn offline_tools(context: &Context, conversation: Option<&str>) -> Result<Table> {
    let declared = match conversation {
        Some(key) => {
            let log = common::open_log_for_reading(context)?;
            legio_ops::declared_tool_rows(&*log, &ConversationKey::new(key)?)?
        }
        None => Vec::new(),
    };
    let config = common::config(context)?;
    let mut table = common::tokio()?.block_on(legio_runtime::tools_table(&config))?;
    table.rows.extend(declared);
    Ok(table)
}

/// Without the `runtime` feature there is no MCP client to start the servers with.
#[cfg(not(feature = "runtime"))]
fn offline_tools(_context: &Context, _conversation: Option<&str>) -> Result<Table> {
    anyhow::bail!("this legio was built without the `runtime` feature, which `inspect tools` needs to start the [mcp.NAME] servers (or ask a running server: --server URL)")
}

/// Runs the command.
pub fn run(context: &Context, args: Args) -> Result<ExitCode> {
    let kind = match args.what {
        What::Tools => return tools(context, &args),
        What::Approvals => return approvals(context, &args),
        What::Conversations => InspectKind::Conversations,
        What::Agents => InspectKind::Agents,
        What::Sessions => InspectKind::Sessions,
        What::Memory => {
            if args.conversation.is_some() {
                anyhow::bail!("the shared memory belongs to no conversation; drop --conversation");
            }
            let state: legio_core::MemoryState = match context.remote()? {
                Some(remote) => serde_json::from_value(remote.get_json("/operator/memory", &[])?)?,
                None => legio_ops::read_memory(&*common::open_log_for_reading(context)?)?,
            };
            if args.format == TableFormat::Json {
                outln!("{}", serde_json::to_string_pretty(&state)?);
                return Ok(ExitCode::SUCCESS);
            }
            let table = legio_ops::memory_table(&state);
            let header: Vec<&str> = table.header.iter().map(String::as_str).collect();
            print(args.format, &header, table.rows)?;
            return Ok(ExitCode::SUCCESS);
        }
        What::Nodes => return nodes(context, args.format),
    };
    let table: Table = match context.remote()? {
        Some(remote) => {
            let query = conversation_query(&args);
            serde_json::from_value(
                remote.get_json(&format!("/operator/inspect/{}", kind.as_str()), &query)?,
            )?
        }
        None => {
            let log = common::open_log_for_reading(context)?;
            let only = args.conversation.map(ConversationKey::new).transpose()?;
            match kind {
                // With the roster when there is a configuration; a bare `--db` without one (the
                // default file absent) still gets the log's own table.
                InspectKind::Agents if context.config_explicit || context.config.exists() => {
                    let config = common::config(context)?;
                    legio_ops::agents_with_roster(&*log, &config, only.as_ref())?
                }
                _ => legio_ops::inspect(&*log, kind, only.as_ref())?,
            }
        }
    };
    let header: Vec<&str> = table.header.iter().map(String::as_str).collect();
    print(args.format, &header, table.rows)?;
    Ok(ExitCode::SUCCESS)
}

/// `legio inspect nodes`: the lease bucket, one row per conversation lease, by node, and one
/// with no conversation for each running node that owns none (a node holds a presence lease
/// while it runs: `legio_store::node_lease_name`).
fn nodes(context: &Context, format: TableFormat) -> Result<ExitCode> {
    let Some(options) = common::nats_options(context)? else {
        anyhow::bail!(
            "`legio inspect nodes` reads a cluster's leases: give --nats URL or set store.backend = \"nats\""
        );
    };
    // As it is: a reader neither creates the bucket nor brings it to this TTL.
    let listed = match legio_store::Leases::open_to_read(&options)? {
        Some(leases) => leases.list_with_age()?,
        // No node ran on this stream yet, or the stream is misnamed: the open says which.
        None => {
            legio_store::NatsLog::open_read_only(&options)?;
            Vec::new()
        }
    };
    let (present, mut held): (Vec<_>, Vec<_>) = listed
        .into_iter()
        .partition(|(lease, _)| lease.node_present().is_some());
    for (lease, age) in present {
        if !held.iter().any(|(h, _)| h.holder == lease.holder) {
            let name = String::new();
            held.push((legio_store::Lease { name, ..lease }, age));
        }
    }
    held.sort_by(|a, b| (&a.0.holder, &a.0.name).cmp(&(&b.0.holder, &b.0.name)));
    let rows = held
        .into_iter()
        .map(|(lease, age)| {
            vec![
                lease.holder,
                lease.name,
                lease.revision.to_string(),
                format!("{:.1} s", age.as_secs_f64()),
            ]
        })
        .collect();
    print(
        format,
        &["node", "conversation", "lease revision", "renewed ago"],
        rows,
    )?;
    Ok(ExitCode::SUCCESS)
}

/// The live query of `--conversation`, if given.
fn conversation_query(args: &Args) -> Vec<(&'static str, String)> {
    args.conversation
        .iter()
        .map(|c| ("conversation", c.clone()))
        .collect()
}
