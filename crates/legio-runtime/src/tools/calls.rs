//! Tools in the agent loop: what an agent is offered and how its calls run.
//!
//! Every agent whose provider takes tools is offered, in this order: the built-in `get_history`
//! (the conversation as the agent may see it), the orchestrator's `dispatch` (a message to named
//! specialists, their replies as the result), its memory tools ([`MemoryTools::tools_for`], scoped
//! by who calls), the host's tools ([`ToolRegistry`], registered through the embedding API), and
//! on turns a host posts with tools it runs over an API, those (tools/host_desk.rs: their calls are
//! announced and wait for the host's results instead of running here); and the tools of the
//! `[mcp.NAME]` servers that name the agent (`mcp__NAME__T`, mcp_client.rs).
//!
//! A call never fails the turn: unknown tools, arguments that are not JSON, a tool's error, a
//! panicking host tool and a tool cut by the turn's deadline all become error results for the
//! model. Calls of one step run in parallel, each on its own task.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use legio_core::{
    AgentName, Audience, ConversationKey, Event, Message, MessageId, Part, Participant, Seq,
};
use legio_llm::ToolCallPart;
use serde_json::{json, Value};

use crate::agent::dispatch::{gather, Route};
use crate::clock::{fresh_uuid, now};
use crate::messages::{Job, TurnRequest};
use crate::progress::{Progress, ProgressSink};
use crate::shared::Shared;
use crate::tools::host_calls::HostToolCall;
use crate::tools::host_desk::Waiting;
use crate::tools::mcp_client::McpClients;
use crate::tools::memory::{MemoryTools, ToolSpec};
pub(crate) use crate::tools::outcome::ToolOutcome;
use crate::tools::registry::ToolRegistry;
use crate::tools::registry::{DISPATCH, GET_HISTORY};
use legio_config::{AgentSpec, Role, RuntimeConfig};

/// How many messages `get_history` returns unless asked otherwise, and at most.
const HISTORY_DEFAULT: u64 = 20;
const HISTORY_MAX: u64 = 200;
/// How many characters of one tool part `get_history` shows.
const HISTORY_PART_CUT: usize = 500;

fn get_history_spec() -> ToolSpec {
    ToolSpec {
        name: GET_HISTORY.to_owned(),
        description: "Read the latest messages of this conversation that you may see (before \
this call), oldest first, each with its seq, sender and audience."
            .to_owned(),
        parameters: json!({
            "type": "object",
            "properties": {"limit": {"type": "integer", "minimum": 1, "maximum": HISTORY_MAX,
                "description": format!("how many messages (default {HISTORY_DEFAULT})")}},
            "additionalProperties": false,
        }),
    }
}

fn dispatch_spec(specialists: &[String]) -> ToolSpec {
    ToolSpec {
        name: DISPATCH.to_owned(),
        description: format!(
            "Send a message to one or more specialists ({}); they work on it in parallel and \
their replies are this tool's result. Everyone in the conversation sees the message and the replies.",
            specialists.join(", ")
        ),
        parameters: json!({
            "type": "object",
            "properties": {
                "agents": {"type": "array", "items": {"type": "string", "enum": specialists},
                    "minItems": 1, "description": "the specialists to ask"},
                "message": {"type": "string", "description": "what to ask them"},
            },
            "required": ["agents", "message"],
            "additionalProperties": false,
        }),
    }
}

/// The tools `spec`'s agent is offered, in order (see the module docs).
pub(crate) fn tools_for(shared: &Shared, spec: &AgentSpec) -> Vec<ToolSpec> {
    offered_tools(&shared.config, &shared.tools, &shared.mcp, spec)
        .into_iter()
        .map(|(tool, _)| tool)
        .collect()
}

/// The tools `spec`'s agent is offered, in order, each with where it comes from (`built-in`,
/// `memory`, `host`, or the MCP server's table and command or URL).
pub(crate) fn offered_tools(
    config: &RuntimeConfig,
    host: &ToolRegistry,
    mcp: &McpClients,
    spec: &AgentSpec,
) -> Vec<(ToolSpec, String)> {
    let mut tools = vec![(get_history_spec(), "built-in".to_owned())];
    if spec.role == Role::Orchestrator {
        let specialists: Vec<String> = config.specialists().map(|a| a.name.to_string()).collect();
        if !specialists.is_empty() {
            tools.push((dispatch_spec(&specialists), "built-in".to_owned()));
        }
    }
    let tagged = |source: &str| {
        let source = source.to_owned();
        move |t: ToolSpec| (t, source.clone())
    };
    tools.extend(
        MemoryTools::tools_for(spec)
            .into_iter()
            .map(tagged("memory")),
    );
    tools.extend(
        host.tools
            .iter()
            .map(|t| t.spec.clone())
            .map(tagged("host")),
    );
    for server in mcp
        .servers
        .iter()
        .filter(|s| s.spec.agents.contains(&spec.name))
    {
        let source = server.spec.source();
        tools.extend(
            server
                .tools
                .iter()
                .map(|t| (t.offered.clone(), source.clone())),
        );
    }
    tools
}

/// What a call runs in: the calling agent, its conversation, the message that called, the route
/// to the conversation's supervisor (for `dispatch`) and the turn's deadline.
#[derive(Clone)]
pub(crate) struct CallContext {
    pub(crate) shared: Arc<Shared>,
    pub(crate) conversation: ConversationKey,
    pub(crate) spec: AgentSpec,
    pub(crate) route: Arc<dyn Route>,
    /// The message holding the calls (a dispatched message replies to it).
    pub(crate) call_message: MessageId,
    pub(crate) deadline: Instant,
    /// The tools the host runs on this turn, and where their calls are announced (tools/host_desk.rs).
    pub(crate) host: Option<HostCalls>,
}

/// A turn's host tools and the progress sink that takes their calls to the host.
#[derive(Clone)]
pub(crate) struct HostCalls {
    pub(crate) tools: Arc<[ToolSpec]>,
    pub(crate) progress: ProgressSink,
}

/// A call ready to run on its own task.
pub(crate) type CallFuture = Pin<Box<dyn Future<Output = ToolOutcome> + Send + 'static>>;

/// Runs a step's calls in parallel, each on its own task, until the turn's deadline: the
/// outcomes in the calls' order. A panicking tool and one cut by the deadline are error results.
pub(crate) async fn run_calls(ctx: &CallContext, calls: &[ToolCallPart]) -> Vec<ToolOutcome> {
    // Aborted when dropped: a turn cancelled (the actor killed, the runtime aborted) takes its
    // calls with it.
    let mut waiting = announce_host_calls(ctx, calls);
    let mut tasks = Tasks(
        calls
            .iter()
            .zip(waiting.iter_mut())
            .map(|(call, waiting)| match waiting.take() {
                Some(waiting) => tokio::spawn(wait_for_host(ctx, waiting)),
                None => tokio::spawn(prepare_call(ctx, &call.name, &call.arguments)),
            })
            .collect(),
    );
    let deadline = tokio::time::Instant::from_std(ctx.deadline);
    let mut outcomes = Vec::with_capacity(calls.len());
    for (call, handle) in calls.iter().zip(tasks.0.iter_mut()) {
        let outcome = match tokio::time::timeout_at(deadline, &mut *handle).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(e)) => ToolOutcome::Failed(format!("the tool {} failed: {e}", call.name)),
            Err(_) => {
                handle.abort();
                ToolOutcome::Failed(
                    "interrupted: the turn ran out of time (runtime.turn_timeout_seconds) while this tool ran".to_owned(),
                )
            }
        };
        metrics::counter!(crate::metrics::TOOL_CALLS, "tool" => call.name.clone(), "outcome" => outcome.label())
            .increment(1);
        outcomes.push(outcome);
    }
    outcomes
}

/// Registers the step's calls of host tools (before any call runs, so a quick host finds them)
/// and announces them in one `ToolCallsRequired`: a waiting call per host call, in the calls'
/// order.
fn announce_host_calls(ctx: &CallContext, calls: &[ToolCallPart]) -> Vec<Option<Waiting>> {
    let Some(host) = &ctx.host else {
        return calls.iter().map(|_| None).collect();
    };
    let is_host = |call: &ToolCallPart| host.tools.iter().any(|t| t.name == call.name);
    let desk = &ctx.shared.host_desk;
    let waiting: Vec<_> = calls
        .iter()
        .map(|call| is_host(call).then(|| desk.wait_for(&ctx.conversation, &call.id)))
        .collect();
    let announced: Vec<HostToolCall> = calls
        .iter()
        .filter(|call| is_host(call))
        .map(|call| HostToolCall {
            agent: ctx.spec.name.clone(),
            id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        })
        .collect();
    if !announced.is_empty() {
        let _ = host.progress.send(Progress::ToolCallsRequired {
            agent: ctx.spec.name.clone(),
            calls: announced,
        });
    }
    waiting
}

/// A host tool's call: the host's result, or an interrupted error result after
/// `runtime.host_tool_timeout_seconds`. The call is forgotten however it ends (also when the
/// turn's deadline aborts it).
fn wait_for_host(ctx: &CallContext, mut call: Waiting) -> CallFuture {
    let shared = Arc::clone(&ctx.shared);
    let timeout = ctx.shared.config.runtime.host_tool_timeout;
    Box::pin(async move {
        let answered = tokio::time::timeout(timeout, &mut call.outcome).await;
        if answered.is_err() {
            shared.host_desk.timed_out(&call);
        }
        match answered {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) | Err(_) => ToolOutcome::Failed(format!(
                "interrupted: the host did not answer within {} s (runtime.host_tool_timeout_seconds)",
                timeout.as_secs_f64()
            )),
        }
    })
}

/// Spawned tool calls, aborted when dropped.
struct Tasks(Vec<tokio::task::JoinHandle<ToolOutcome>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Prepares one call; every failure is an error outcome. A host tool's future holds only the
/// tool (never the runtime's log), so a call that never returns cannot keep the log open after
/// the runtime stops.
pub(crate) fn prepare_call(ctx: &CallContext, name: &str, arguments: &str) -> CallFuture {
    let args: Value = if arguments.trim().is_empty() {
        Value::Null
    } else {
        match serde_json::from_str(arguments) {
            Ok(v) => v,
            Err(e) => {
                let error = format!("the arguments are not valid JSON ({e}): {arguments}");
                return Box::pin(std::future::ready(ToolOutcome::Failed(error)));
            }
        }
    };
    let builtin = name == GET_HISTORY
        || (name == DISPATCH && ctx.spec.role == Role::Orchestrator)
        || MemoryTools::is_memory_tool(name);
    if let Some((server, remote)) = ctx.shared.mcp.find(&ctx.spec.name, name) {
        return Box::pin(async move { server.call(remote, args).await });
    }
    if !builtin {
        if let Some(tool) = ctx.shared.tools.get(name) {
            let run = Arc::clone(&tool.run);
            return Box::pin(async move { ToolOutcome::from(run(args).await) });
        }
    }
    let (ctx, name) = (ctx.clone(), name.to_owned());
    Box::pin(async move { ToolOutcome::from(run_builtin(&ctx, &name, args).await) })
}

async fn run_builtin(ctx: &CallContext, name: &str, args: Value) -> Result<String, String> {
    match name {
        GET_HISTORY => get_history(ctx, &args).await,
        DISPATCH if ctx.spec.role == Role::Orchestrator => dispatch(ctx, &args).await,
        _ if MemoryTools::is_memory_tool(name) => ctx
            .shared
            .memory
            .call(&ctx.spec.name, name, args)
            .await
            .map_err(|e| e.to_string()),
        _ => Err(format!(
            "no tool {name:?}; your tools: {}",
            tools_for(&ctx.shared, &ctx.spec)
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let head: String = text.chars().take(max).collect();
        format!("{head}…")
    }
}

/// A message as one block of `get_history`'s result.
fn history_line(seq: Seq, message: &Message) -> String {
    let mut out = format!(
        "#{seq} {} {} -> {}:",
        message.at, message.sender, message.audience
    );
    for part in &message.parts {
        out.push('\n');
        match part {
            Part::Text { text } => out.push_str(text),
            Part::ToolCall {
                id,
                name,
                arguments,
            } => out.push_str(&format!(
                "[tool call {name} id={id}] {}",
                cut(arguments, HISTORY_PART_CUT)
            )),
            Part::ToolResult {
                call_id,
                content,
                is_error,
            } => out.push_str(&format!(
                "[{} id={call_id}] {}",
                if *is_error {
                    "tool error"
                } else {
                    "tool result"
                },
                cut(content, HISTORY_PART_CUT)
            )),
        }
    }
    out
}

async fn get_history(ctx: &CallContext, args: &Value) -> Result<String, String> {
    let limit = match args.get("limit") {
        None | Some(Value::Null) => HISTORY_DEFAULT,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=HISTORY_MAX).contains(&n) => n,
            _ => return Err(format!("limit must be an integer from 1 to {HISTORY_MAX}")),
        },
    };
    if let Some(unknown) = args
        .as_object()
        .and_then(|o| o.keys().find(|k| *k != "limit"))
    {
        return Err(format!("unexpected argument {unknown:?}; arguments: limit"));
    }
    let (conversation, spec) = (ctx.conversation.clone(), ctx.spec.clone());
    // One more than asked: the call's own message (recorded before it runs) is left out.
    let window = limit as usize + 1;
    let records = ctx
        .shared
        .read(move |log| log.visible_window(&conversation, spec.viewer(), window))
        .await
        .map_err(|e| format!("cannot read the history: {e}"))?;
    let mut lines: Vec<String> = records
        .iter()
        .filter_map(|r| r.event.as_message().map(|m| (r.seq, m)))
        .filter(|(_, m)| m.id != ctx.call_message)
        .map(|(seq, m)| history_line(seq, m))
        .collect();
    let extra = lines.len().saturating_sub(limit as usize);
    lines.drain(..extra);
    if lines.is_empty() {
        return Ok("(no messages)".to_owned());
    }
    Ok(lines.join("\n\n"))
}

/// The `dispatch` call's message and its specialists, in the order named, each once.
fn dispatch_arguments<'a>(
    ctx: &CallContext,
    args: &'a Value,
) -> Result<(&'a str, Vec<AgentName>), String> {
    let specialists: BTreeSet<String> = ctx
        .shared
        .config
        .specialists()
        .map(|a| a.name.to_string())
        .collect();
    let known = || specialists.iter().cloned().collect::<Vec<_>>().join(", ");
    let text = args
        .get("message")
        .and_then(Value::as_str)
        .filter(|t| !t.trim().is_empty())
        .ok_or("missing argument \"message\": the text to send")?;
    let names = args
        .get("agents")
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty())
        .ok_or_else(|| {
            format!(
                "missing argument \"agents\": a list of specialists ({})",
                known()
            )
        })?;
    let mut targets: Vec<AgentName> = Vec::new();
    for name in names {
        let name = name.as_str().unwrap_or_default();
        if !specialists.contains(name) {
            return Err(format!(
                "{name:?} is not a specialist; specialists: {}",
                known()
            ));
        }
        let agent = AgentName::new(name).map_err(|e| e.to_string())?;
        if !targets.contains(&agent) {
            targets.push(agent);
        }
    }
    Ok((text, targets))
}

async fn dispatch(ctx: &CallContext, args: &Value) -> Result<String, String> {
    let (text, targets) = dispatch_arguments(ctx, args)?;
    // The message is durable before any specialist acts on it, as a post is.
    let id = MessageId(fresh_uuid());
    let message = Message::text(
        id,
        ctx.conversation.clone(),
        Participant::Agent(ctx.spec.name.clone()),
        Audience::only(targets.iter().cloned().map(Participant::Agent)),
        text,
        now(),
    )
    .replying_to(ctx.call_message);
    let (range, ticket) = ctx
        .shared
        .append_for_dispatch(&ctx.conversation, vec![Event::MessagePosted(message)])
        .await
        .map_err(|e| format!("cannot record the message: {e}"))?;
    let job = Job::Turn(TurnRequest {
        seq: range.first,
        id,
        progress: None,
        host_tools: None,
        replayed: false,
    });
    let remaining = ctx.deadline.saturating_duration_since(Instant::now());
    let replies = gather(
        ctx.route.as_ref(),
        job,
        &targets,
        remaining,
        None,
        Some(ticket),
    )
    .await;
    let answered = replies.iter().filter(|r| r.outcome.is_ok()).count();
    let result = replies
        .iter()
        .map(|reply| match &reply.outcome {
            Ok(r) => format!("{} (message #{}):\n{}", reply.agent, r.seq, r.text),
            Err(e) => format!("{} failed: {e}", reply.agent),
        })
        .collect::<Vec<_>>()
        .join("\n\n");
    if answered == 0 {
        Err(result)
    } else {
        Ok(result)
    }
}
