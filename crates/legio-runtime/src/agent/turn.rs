//! One turn of an agent, as plain functions over the shared state (no actor): the agent actor
//! calls [`run`] for each turn in its mailbox.
//!
//! A turn is a tool loop of steps, each one provider call: [`plan`] (the core's decision and
//! context, compacting first when the policy says so), [`open_session`] (the boundary events),
//! [`call_provider`] (the request, built and sent in one place), then [`record_reply`] (context
//! delivered, the reply, the turn's usage). Between steps the tools the model called run and
//! their results are recorded ([`record_results`]); the next step answers them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use legio_config::{AgentSpec, Role};
use legio_core::{
    estimate_tokens, AgentName, Audience, BoundaryReason, BudgetError, Calibration,
    ContextDelivered, ContextPlan, ConversationKey, EndSession, Event, History, Message, MessageId,
    OpenReason, Part, Participant, Seq, SessionEnded, SessionId, SessionOpened, SessionStart,
    Start, TokenUsage, TurnCompleted, TurnFailed,
};
use legio_llm::{
    Provider, ProviderError, ProviderReply, ProviderRequest, StreamDelta, ToolCallPart,
};
use legio_ops::{
    compaction_job, prepare_turn, window_tokens, CompactionJob, Fixed, PreparedTurn, TurnInputs,
    WindowTally,
};

use crate::agent::compact::compact;
use crate::agent::dispatch::Route;
use crate::agent::fit;
use crate::agent::taken_in::{taken_in, Taken};
use crate::clock::{fresh_uuid, now};
use crate::error::RuntimeError;
use crate::messages::TurnRequest;
use crate::metrics as m;
use crate::progress::{Progress, ProgressSink};
use crate::reply::{AgentReply, Reply, TurnErrorKind};
use crate::shared::Shared;
use crate::status::Activity;
use crate::tools::approval;
use crate::tools::calls::{run_calls, tools_for, CallContext, HostCalls, ToolOutcome};
use crate::tools::memory::ToolSpec;
use crate::tools::progress as tool_progress;

/// Whose turn it is: the shared state, the conversation, the agent, and the route to its
/// conversation's supervisor (through which `dispatch` sends turns to specialists).
#[derive(Clone)]
pub(crate) struct Agent {
    pub(crate) shared: Arc<Shared>,
    pub(crate) conversation: ConversationKey,
    pub(crate) name: AgentName,
    pub(crate) route: Arc<dyn Route>,
}

/// What an agent keeps between its turns (rebuilt empty on restart: the log holds the rest).
#[derive(Default)]
pub(crate) struct TurnState {
    /// The session this agent opened (or resumed) itself; an open session in the log that is not
    /// this one was left by a crash.
    pub(crate) live_session: Option<SessionId>,
    /// The tools offered to the model, built on the first turn (they depend only on the agent's
    /// role, the memory tools and the host's registry, all fixed for the actor's life) and
    /// shared by every request without copying their schemas; with their estimated tokens.
    tools: Option<(Arc<[ToolSpec]>, u64)>,
    /// The tokens of the agent's window through the message its last step answered (for the
    /// tokens-avoided metric: a delta turn counts only what arrived since).
    window: WindowTally,
    /// The furthest seq a step of this actor delivered context up to: a turn for a message at
    /// or before it may have been taken in by an earlier loop (taken_in.rs).
    pub(crate) delivered: Seq,
}

/// What one step of a turn ended with.
enum Step {
    /// The turn is over: the model's text reply, or an error reply (already recorded).
    Answered(AgentReply),
    /// The model asked for tools; the calls are recorded in the message `message`.
    Calls {
        calls: Vec<ToolCallPart>,
        message: MessageId,
        session: SessionId,
    },
}

/// The turn's fixed inputs, looked up once.
struct Setup {
    spec: AgentSpec,
    provider: Arc<dyn Provider>,
    tools: Arc<[ToolSpec]>,
    /// The tools' estimated tokens (`legio_ops::tool_tokens`).
    tool_tokens: u64,
    deadline: Instant,
    /// The host's instructions for this turn (instructions.rs), sent in each step.
    instructions: Option<String>,
}

/// Runs one turn and answers it: the reply, or an error reply (a store or prompt failure is
/// recorded as `TurnFailed` if the log still takes writes). Reports progress and metrics.
pub(crate) async fn run(agent: &Agent, state: &mut TurnState, request: TurnRequest) -> AgentReply {
    let started = Instant::now();
    let board = &agent.shared.conversations;
    board.set_activity(&agent.conversation, &agent.name, Activity::Working);
    if let Some(progress) = &request.progress {
        let _ = progress.send(Progress::AgentStarted {
            agent: agent.name.clone(),
        });
    }
    let reply = match tool_loop(agent, state, &request).await {
        Ok(reply) => reply,
        Err(e) => {
            let failed = turn_failed(agent, state.live_session, e.to_string());
            let _ = agent.shared.append(vec![failed]).await;
            AgentReply::failed(&agent.name, TurnErrorKind::Runtime, e.to_string())
        }
    };
    let outcome = if reply.outcome.is_ok() { "ok" } else { "error" };
    let name = agent.name.to_string();
    metrics::counter!(m::TURNS, "agent" => name.clone(), "outcome" => outcome).increment(1);
    metrics::histogram!(m::TURN_LATENCY, "agent" => name).record(started.elapsed().as_secs_f64());
    board.set_activity(&agent.conversation, &agent.name, Activity::Idle);
    reply
}

/// Provider calls until the model answers with text, running the tools it calls in between
/// (each step's calls and results are in the log before the next step), within
/// `runtime.max_tool_steps` calls and the turn timeout; none when an earlier loop of the agent
/// took the message in and answered it (taken_in.rs), or, for a keyed post's retry, when the
/// agent answered it already (its own turn is such a loop; before a restart too).
async fn tool_loop(
    agent: &Agent,
    state: &mut TurnState,
    request: &TurnRequest,
) -> Result<AgentReply, RuntimeError> {
    if request.seq <= state.delivered || request.replayed {
        let (shared, conversation) = (&agent.shared, &agent.conversation);
        match taken_in(shared, conversation, &agent.name, request.seq).await? {
            Taken::Answered(reply) => return Ok(AgentReply::answered(&agent.name, reply)),
            Taken::MovedOn if request.replayed => {
                let why = format!("{} went on to later messages without answering this one (its turn failed or was cut short); post it again with a new idempotency key to ask again", agent.name);
                return Ok(AgentReply::failed(
                    &agent.name,
                    TurnErrorKind::Unanswered,
                    why,
                ));
            }
            Taken::MovedOn | Taken::Open => {}
        }
    }
    let mut setup = setup(agent, state, request)?;
    setup.instructions =
        super::instructions::for_turn(&agent.shared, &agent.name, request.seq, request.id).await?;
    run_steps(agent, state, &setup, request, request.seq, 0).await
}

/// The tool loop's steps from the message at `answering`, `steps` of the turn's steps taken
/// already (a continued turn took the step that asked for approval).
async fn run_steps(
    agent: &Agent,
    state: &mut TurnState,
    setup: &Setup,
    request: &TurnRequest,
    mut answering: Seq,
    mut steps: usize,
) -> Result<AgentReply, RuntimeError> {
    let max_steps = agent.shared.config.runtime.max_tool_steps;
    loop {
        steps += 1;
        let (calls, message, session) =
            match step(agent, state, setup, request, answering, steps == 1).await? {
                Step::Answered(reply) => return Ok(reply),
                Step::Calls {
                    calls,
                    message,
                    session,
                } => (calls, message, session),
            };
        let last = steps >= max_steps;
        tool_progress::called(request.progress.as_ref(), &agent.name, &calls);
        if !last {
            if let Some(paused) = approval::pause(
                &agent.shared,
                &agent.conversation,
                &setup.spec,
                &calls,
                message,
            )
            .await?
            {
                return Ok(paused);
            }
        }
        let outcomes = if last {
            let why = format!(
                "not run: the turn reached its limit of {max_steps} steps (runtime.max_tool_steps)"
            );
            calls
                .iter()
                .map(|_| ToolOutcome::Failed(why.clone()))
                .collect()
        } else {
            let ctx = call_context(agent, setup, request, message);
            run_calls(&ctx, &calls).await
        };
        tool_progress::ended(request.progress.as_ref(), &agent.name, &calls, &outcomes);
        answering = record_results(agent, &calls, outcomes, message).await?;
        if last {
            let error = format!(
                "{} was still calling tools after {max_steps} steps (runtime.max_tool_steps) and gave no answer",
                agent.name
            );
            return fail(agent, session, TurnErrorKind::ToolSteps, error).await;
        }
        if Instant::now() >= setup.deadline {
            return timed_out(agent, session).await;
        }
    }
}

/// Continues the turn paused on the step `call_message` once every approval it waits for is
/// answered: the step's outcomes (approved calls run once, refused ones answered with an error
/// result) recorded as its results, then the tool loop from them, with the same call ids and no
/// new model call for that step. A step not ready (an answer missing, or its results recorded
/// already) runs nothing.
pub(crate) async fn resume(
    agent: &Agent,
    state: &mut TurnState,
    call_message: MessageId,
) -> AgentReply {
    let board = &agent.shared.conversations;
    board.set_activity(&agent.conversation, &agent.name, Activity::Working);
    let reply = match resume_loop(agent, state, call_message).await {
        Ok(reply) => reply,
        Err(e) => {
            let failed = turn_failed(agent, state.live_session, e.to_string());
            let _ = agent.shared.append(vec![failed]).await;
            AgentReply::failed(&agent.name, TurnErrorKind::Runtime, e.to_string())
        }
    };
    board.set_activity(&agent.conversation, &agent.name, Activity::Idle);
    reply
}

async fn resume_loop(
    agent: &Agent,
    state: &mut TurnState,
    call_message: MessageId,
) -> Result<AgentReply, RuntimeError> {
    let read = approval::read(&agent.shared, &agent.conversation).await?;
    if !read.approvals.ready(call_message) {
        let why = format!(
            "{}'s step {call_message} is not waiting to go on: a call of it still waits for an answer, or its results are recorded already",
            agent.name
        );
        return Ok(AgentReply::failed(
            &agent.name,
            TurnErrorKind::AwaitingApproval,
            why,
        ));
    }
    let missing = |what| RuntimeError::MissingRecord {
        what,
        seq: Seq::ZERO,
    };
    let (_, calls_message) = read
        .call_messages
        .get(&call_message)
        .ok_or_else(|| missing("the message of the paused step's calls"))?;
    let id = calls_message
        .reply_to
        .ok_or_else(|| missing("the message the paused turn answers"))?;
    let seq = *read
        .seqs
        .get(&id)
        .ok_or_else(|| missing("the message the paused turn answers"))?;
    let request = TurnRequest {
        seq,
        id,
        progress: None,
        host_tools: None,
        replayed: false,
    };
    let mut setup = setup(agent, state, &request)?;
    setup.instructions = super::instructions::for_turn(&agent.shared, &agent.name, seq, id).await?;
    let calls = approval::step_calls(&read, call_message);
    let ctx = call_context(agent, &setup, &request, call_message);
    let outcomes = approval::outcomes(&ctx, &read, call_message, &calls).await;
    let answering = record_results(agent, &calls, outcomes, call_message).await?;
    run_steps(agent, state, &setup, &request, answering, 1).await
}

/// The agent's spec, provider and tools (built on its first turn; the host's tools of this turn
/// after them), and the turn's deadline.
fn setup(
    agent: &Agent,
    state: &mut TurnState,
    request: &TurnRequest,
) -> Result<Setup, RuntimeError> {
    let shared = &agent.shared;
    let spec = shared.roster_spec(&agent.name)?.clone();
    let provider = shared.provider(&spec)?;
    let (tools, tool_tokens) = match &state.tools {
        Some((tools, tokens)) => (Arc::clone(tools), *tokens),
        None => {
            let tools: Arc<[ToolSpec]> = if provider.capabilities().tools {
                tools_for(shared, &spec).into()
            } else {
                Arc::from(Vec::new())
            };
            let tokens = legio_ops::tool_tokens(&tools);
            state.tools = Some((Arc::clone(&tools), tokens));
            (tools, tokens)
        }
    };
    let (tools, tool_tokens) = match (&request.host_tools, provider.capabilities().tools) {
        (Some(host), true) => {
            let host_tokens = legio_ops::tool_tokens(host);
            let all = tools.iter().chain(host.iter()).cloned().collect();
            (all, tool_tokens + host_tokens)
        }
        _ => (tools, tool_tokens),
    };
    let deadline = Instant::now() + shared.config.runtime.turn_timeout;
    Ok(Setup {
        spec,
        provider,
        tools,
        tool_tokens,
        deadline,
        instructions: None,
    })
}

fn call_context(
    agent: &Agent,
    setup: &Setup,
    request: &TurnRequest,
    call_message: MessageId,
) -> CallContext {
    let host = match (&request.host_tools, &request.progress) {
        (Some(tools), Some(progress)) => Some(HostCalls {
            tools: Arc::clone(tools),
            progress: progress.clone(),
        }),
        _ => None,
    };
    CallContext {
        host,
        shared: Arc::clone(&agent.shared),
        conversation: agent.conversation.clone(),
        spec: setup.spec.clone(),
        route: Arc::clone(&agent.route),
        call_message,
        deadline: setup.deadline,
    }
}

/// One provider call of the tool loop: plan the context for the message at `answering` (the
/// turn's message, then each step's results), record the boundaries, call the provider and
/// record what it answered. `first`: the turn's first step (the only one that carries the
/// status block). A provider that lost the session to resume gets one retry in a new session.
async fn step(
    agent: &Agent,
    state: &mut TurnState,
    setup: &Setup,
    request: &TurnRequest,
    answering: Seq,
    first: bool,
) -> Result<Step, RuntimeError> {
    let prompt = Prompt::of(agent, setup, first)?;
    let fixed = prompt.fixed(setup);
    let sizes = sizes(agent, setup, fixed).await?;
    let mut retry_lost = true;
    loop {
        let (mut prepared, window) =
            plan(agent, state, setup, request, answering, &prompt, sizes).await?;
        let fitted = fit_to_window(agent, setup, request, sizes, fixed, &mut prepared);
        let (session, resume) = open_session(agent, state, setup, &prepared, &prompt.hash).await?;
        if let Err(e) = fitted {
            let error = format!("{} failed: {e}", agent.name);
            return fail(agent, session, TurnErrorKind::ContextTooLarge, error)
                .await
                .map(Step::Answered);
        }
        let provider_request = provider_request(agent, setup, &prompt, resume, &prepared.plan);
        let plan = &prepared.plan;
        let called = call_provider(setup, provider_request, request.progress.as_ref()).await;
        return match called {
            Ok(Ok(reply)) => {
                let sent = sizes.fixed_tokens + plan.estimated_tokens;
                fit::learn(&agent.shared, &setup.spec, sent, reply.usage.as_ref());
                let step = record_reply(agent, session, plan, window, request.id, reply).await;
                if step.is_ok() {
                    state.delivered = state.delivered.max(plan.up_to);
                }
                step
            }
            Ok(Err(ProviderError::SessionLost { session: lost })) if retry_lost => {
                tracing::warn!(agent = %agent.name, session = %lost, "the provider lost the session; opening a new one from the log");
                close_lost_session(agent, state, session).await?;
                retry_lost = false;
                continue;
            }
            Ok(Err(e)) => {
                let error = format!("{} failed: {e}", agent.name);
                fail(agent, session, TurnErrorKind::Provider, error)
                    .await
                    .map(Step::Answered)
            }
            Err(_elapsed) => timed_out(agent, session).await.map(Step::Answered),
        };
    }
}

/// The step's fixed cost (the system prompt, which the compaction trigger counts as the policy
/// says, and the tools' schemas, which the check before the call counts too) and the provider's
/// calibration.
async fn sizes(agent: &Agent, setup: &Setup, fixed: Fixed<'_>) -> Result<Sizes, RuntimeError> {
    let fixed_tokens = fixed.estimated();
    let calibration = fit::calibration(
        &agent.shared,
        &agent.conversation,
        &setup.spec,
        fixed_tokens,
    )
    .await?;
    Ok(Sizes {
        fixed_tokens,
        calibration,
    })
}

/// What a step's requests carry besides the plan: the system prompt, its hash and, in the
/// orchestrator's first step only, the status block.
struct Prompt {
    system: String,
    hash: String,
    status: Option<String>,
}

impl Prompt {
    fn of(agent: &Agent, setup: &Setup, first: bool) -> Result<Self, RuntimeError> {
        let (system, hash) = agent.shared.system_prompt(&setup.spec)?;
        let status = (first && setup.spec.role == Role::Orchestrator)
            .then(|| agent.shared.status_block(&agent.conversation));
        let given = setup
            .instructions
            .as_deref()
            .map(super::instructions::lead_in);
        let status = match (given, status) {
            (Some(given), Some(status)) => Some(format!("{given}{status}")),
            (given, status) => given.or(status),
        };
        Ok(Self {
            system,
            hash,
            status,
        })
    }

    fn fixed<'a>(&'a self, setup: &'a Setup) -> Fixed<'a> {
        Fixed {
            system_prompt: &self.system,
            status: self.status.as_deref(),
            tools: &setup.tools,
            tool_tokens: setup.tool_tokens,
        }
    }
}

/// The request a step sends.
fn provider_request(
    agent: &Agent,
    setup: &Setup,
    prompt: &Prompt,
    resume: Option<String>,
    plan: &ContextPlan,
) -> ProviderRequest {
    ProviderRequest {
        conversation: agent.conversation.clone(),
        agent: agent.name.clone(),
        system_prompt: prompt.system.clone(),
        resume,
        plan: plan.clone(),
        status: prompt.status.clone(),
        deltas: None,
        tools: Arc::clone(&setup.tools),
        mcp: mcp_access(agent, setup),
    }
}

/// legio's MCP endpoint with a fresh token for this agent and conversation, for a provider that
/// takes no tool definitions (it runs its own loop), once a server serves `/mcp`.
fn mcp_access(agent: &Agent, setup: &Setup) -> Option<legio_llm::McpAccess> {
    if setup.provider.capabilities().tools {
        return None;
    }
    let (url, key) = agent.shared.mcp_endpoint.get()?;
    let scope = crate::tools::mcp_token::McpScope {
        conversation: agent.conversation.clone(),
        agent: agent.name.clone(),
    };
    // Valid for the turn, with a margin for a restart's backoff.
    let ttl = agent.shared.config.runtime.turn_timeout + Duration::from_secs(60);
    Some(legio_llm::McpAccess {
        url: url.clone(),
        bearer: key.issue(&scope, ttl),
        tools: crate::tools::calls::tools_for(&agent.shared, &setup.spec)
            .into_iter()
            .map(|t| t.name)
            .collect(),
    })
}

/// Closes the session whose provider session the provider no longer knows, so the retry opens a
/// new one from the log.
async fn close_lost_session(
    agent: &Agent,
    state: &mut TurnState,
    session: SessionId,
) -> Result<(), RuntimeError> {
    let end = EndSession {
        suspend: false,
        why: BoundaryReason::ProviderSessionLost,
    };
    agent
        .shared
        .append(vec![end_event(agent, session, end)])
        .await?;
    record_end(end);
    state.live_session = None;
    Ok(())
}

/// The context for the message at `answering`, and the tokens re-sending the window would cost
/// (for the tokens-avoided metric). One hop to the blocking pool decides the plan and whether
/// the context must be compacted first; after a compaction, a second hop plans on the
/// compacted view.
async fn plan(
    agent: &Agent,
    state: &mut TurnState,
    setup: &Setup,
    request: &TurnRequest,
    answering: Seq,
    prompt: &Prompt,
    sizes: Sizes,
) -> Result<(PreparedTurn, u64), RuntimeError> {
    let capabilities = setup.provider.capabilities();
    let system_tokens = estimate_tokens(&prompt.system);
    let context_window = fit::compaction_window(
        &agent.shared,
        &setup.spec,
        capabilities.context_window,
        sizes.calibration,
    );
    // Inside a tool loop, the turn's message and the loop after it are never summarized.
    let mut compaction = Some((context_window, system_tokens, request.seq));
    loop {
        let hop = Hop {
            history: capabilities.history,
            prompt_hash: prompt.hash.clone(),
            live_session: state.live_session,
            answering,
            compaction: compaction.take(),
        };
        let (prepared, window, job) =
            prepare_hop(agent, &setup.spec, hop, &mut state.window).await?;
        let Some(job) = job else {
            return Ok((prepared, window));
        };
        if let Err(why) = compact(&agent.shared, &agent.conversation, &setup.spec, job).await? {
            fit::compaction_failed(request.progress.as_ref(), &agent.name, &why);
            return Ok((prepared, window));
        }
    }
}

/// What one hop to the blocking pool needs besides the agent.
struct Hop {
    history: History,
    prompt_hash: String,
    live_session: Option<SessionId>,
    answering: Seq,
    /// `Some((window, fixed tokens, question))`: also ask whether the context must be compacted
    /// first (against that window, never past that question).
    compaction: Option<(u64, u64, Seq)>,
}

/// One hop to the blocking pool: the core's decision and plan, the tokens re-sending the window
/// would cost, and the compaction job when asked for and needed.
async fn prepare_hop(
    agent: &Agent,
    spec: &AgentSpec,
    hop: Hop,
    tally: &mut WindowTally,
) -> Result<(PreparedTurn, u64, Option<CompactionJob>), RuntimeError> {
    let (shared, spec) = (Arc::clone(&agent.shared), spec.clone());
    let conversation = agent.conversation.clone();
    // Lent to the blocking thread and given back; lost (counted afresh next time) on an error.
    let mut lent = std::mem::take(tally);
    let (prepared, window, job, lent) = tokio::task::spawn_blocking(move || {
        let inputs = TurnInputs {
            spec: &spec,
            conversation: &conversation,
            history: hop.history,
            settings: &shared.config.runtime,
            prompt_hash: &hop.prompt_hash,
            live_session: hop.live_session,
            new_message: hop.answering,
        };
        let log = shared.log.as_ref();
        let prepared = prepare_turn(log, inputs)?;
        let window = window_tokens(log, &inputs, &prepared, &mut lent)?;
        let job = match hop.compaction {
            Some((context_window, fixed_tokens, question)) => compaction_job(
                log,
                &inputs,
                &prepared,
                context_window,
                fixed_tokens,
                question,
            )?,
            None => None,
        };
        Ok::<_, RuntimeError>((prepared, window, job, lent))
    })
    .await
    .map_err(|e| RuntimeError::Cancelled {
        what: "preparing the turn",
        source: legio_store::ErrorSource::new(e),
    })??;
    *tally = lent;
    Ok((prepared, window, job))
}

/// What a step's request costs beyond its plan, and how the provider counts.
#[derive(Clone, Copy)]
struct Sizes {
    /// The system prompt's, the status block's and the tools' estimated tokens.
    fixed_tokens: u64,
    /// The provider's calibration (reported prompt tokens over estimated).
    calibration: Calibration,
}

/// Checks the plan against the provider's window before it is sent, leaving out the oldest
/// messages (never the turn's message nor the tool loop after it) when it does not fit.
fn fit_to_window(
    agent: &Agent,
    setup: &Setup,
    request: &TurnRequest,
    sizes: Sizes,
    fixed: Fixed<'_>,
    prepared: &mut PreparedTurn,
) -> Result<(), BudgetError> {
    fit::fit_request(
        &agent.shared,
        &setup.spec,
        setup.provider.capabilities().context_window,
        sizes.calibration,
        fixed,
        request.seq,
        prepared,
    )
}

/// Records the decision's boundaries (end the old session, open the new one) and returns the
/// session the step runs in, with the provider session to resume (stateful providers).
async fn open_session(
    agent: &Agent,
    state: &mut TurnState,
    setup: &Setup,
    prepared: &PreparedTurn,
    prompt_hash: &str,
) -> Result<(SessionId, Option<String>), RuntimeError> {
    let PreparedTurn {
        current, decision, ..
    } = prepared;
    let mut events = Vec::new();
    if let (Some(end), Some(c)) = (decision.end, current) {
        events.push(end_event(agent, c.session, end));
        record_end(end);
    }
    let stateful = setup.provider.capabilities().history.is_stateful();
    let (session, resume) = match (&decision.start, current) {
        (Start::Continue, Some(c)) => (c.session, c.provider_session.clone().filter(|_| stateful)),
        (Start::Continue, None) => {
            return Err(RuntimeError::MissingRecord {
                what: "the session to continue",
                seq: prepared.plan.up_to,
            })
        }
        (start, _) => {
            let opened = opened_event(agent, start, prepared.plan.up_to, prompt_hash);
            let (session, resume) = match &opened {
                Event::SessionOpened(e) => (e.session, resumed_from(&e.how)),
                _ => unreachable!("opened_event makes a SessionOpened"),
            };
            events.push(opened);
            (session, resume)
        }
    };
    if !events.is_empty() {
        agent.shared.append(events).await?;
    }
    state.live_session = Some(session);
    Ok((session, resume))
}

/// The `SessionOpened` event of a decision that opens a session (`start` is not `Continue`).
fn opened_event(agent: &Agent, start: &Start, up_to: Seq, prompt_hash: &str) -> Event {
    let (why, how) = match start {
        Start::OpenStateless { why } => (*why, SessionStart::Stateless),
        Start::OpenResume {
            why,
            provider_session,
            checkpoint,
        } => (
            *why,
            SessionStart::Resumed {
                provider_session: provider_session.clone(),
                checkpoint: *checkpoint,
            },
        ),
        Start::OpenBootstrap { why } => (*why, SessionStart::Bootstrapped { up_to }),
        Start::Continue => (OpenReason::FirstUse, SessionStart::Bootstrapped { up_to }),
    };
    let reason = match why {
        OpenReason::FirstUse => "first_use",
        OpenReason::After(r) => r.as_str(),
    };
    metrics::counter!(m::SESSIONS_OPENED, "reason" => reason).increment(1);
    Event::SessionOpened(SessionOpened {
        conversation: agent.conversation.clone(),
        agent: agent.name.clone(),
        session: SessionId(fresh_uuid()),
        at: now(),
        why,
        how,
        prompt_hash: prompt_hash.to_owned(),
    })
}

fn resumed_from(how: &SessionStart) -> Option<String> {
    match how {
        SessionStart::Resumed {
            provider_session, ..
        } => Some(provider_session.clone()),
        _ => None,
    }
}

/// Sends the request to the provider within the turn's deadline: the one place a turn's request
/// reaches a provider. Streamed fragments go to the progress listener as `Delta`s; the forwarder
/// ends when the provider drops its sender and is awaited before returning, so every fragment
/// precedes the agent's `AgentDone`.
async fn call_provider(
    setup: &Setup,
    mut request: ProviderRequest,
    progress: Option<&ProgressSink>,
) -> Result<Result<ProviderReply, ProviderError>, tokio::time::error::Elapsed> {
    let forwarder = progress.map(|progress| {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<StreamDelta>();
        request.deltas = Some(tx);
        let (progress, agent) = (progress.clone(), request.agent.clone());
        tokio::spawn(async move {
            while let Some(delta) = rx.recv().await {
                let agent = agent.clone();
                let _ = progress.send(match delta {
                    StreamDelta::Text(text) => Progress::Delta { agent, text },
                    StreamDelta::Thinking(text) => Progress::Thinking { agent, text },
                });
            }
        })
    });
    let remaining = setup.deadline.saturating_duration_since(Instant::now());
    let result = tokio::time::timeout(remaining, setup.provider.call(request)).await;
    if let Some(forwarder) = forwarder {
        let _ = forwarder.await;
    }
    result
}

/// Records a successful provider call: the checkpoint (`ContextDelivered`), the model's message
/// (its text reply, or its tool calls addressed to itself) and `TurnCompleted` with the usage.
async fn record_reply(
    agent: &Agent,
    session: SessionId,
    plan: &ContextPlan,
    window: u64,
    answering: MessageId,
    reply: ProviderReply,
) -> Result<Step, RuntimeError> {
    let reply_id = MessageId(fresh_uuid());
    let message = reply_message(agent, reply_id, &reply).replying_to(answering);
    let usage = reply.usage.unwrap_or_else(|| TokenUsage {
        input: estimate_tokens(&plan_text(plan)),
        output: estimate_tokens(&reply.text),
        ..Default::default()
    });
    let delivered = ContextDelivered {
        conversation: agent.conversation.clone(),
        agent: agent.name.clone(),
        session,
        at: now(),
        up_to: plan.up_to,
        mode: plan.mode,
        messages: u32::try_from(plan.history.len() + 1).unwrap_or(u32::MAX),
        estimated_tokens: plan.estimated_tokens,
    };
    let completed = TurnCompleted {
        conversation: agent.conversation.clone(),
        agent: agent.name.clone(),
        session,
        at: now(),
        usage,
        provider_session: reply.provider_session.clone(),
        reply: Some(reply_id),
    };
    let events = vec![
        Event::ContextDelivered(delivered),
        Event::MessagePosted(message),
        Event::TurnCompleted(completed),
    ];
    let range = agent.shared.append(events).await?;
    metrics::counter!(m::INPUT_TOKENS, "agent" => agent.name.to_string())
        .increment(usage.context_tokens());
    metrics::counter!(m::TOKENS_SENT, "mode" => plan.mode.as_str())
        .increment(plan.estimated_tokens);
    metrics::counter!(m::TOKENS_AVOIDED).increment(window.saturating_sub(plan.estimated_tokens));
    if !reply.tool_calls.is_empty() {
        return Ok(Step::Calls {
            calls: reply.tool_calls,
            message: reply_id,
            session,
        });
    }
    let reply = Reply {
        text: reply.text,
        message_id: Some(reply_id),
        seq: Seq(range.first.0 + 1),
    };
    Ok(Step::Answered(AgentReply::answered(&agent.name, reply)))
}

/// The model's message: its text reply to the user, or its tool calls (with any text it wrote
/// along) addressed to itself: its tool traffic is its own (the orchestrator and the user see it).
fn reply_message(agent: &Agent, id: MessageId, reply: &ProviderReply) -> Message {
    let sender = Participant::Agent(agent.name.clone());
    if reply.tool_calls.is_empty() {
        let text = reply.text.clone();
        return Message::text(
            id,
            agent.conversation.clone(),
            sender,
            Audience::user(),
            text,
            now(),
        );
    }
    let mut parts = Vec::new();
    if !reply.text.trim().is_empty() {
        parts.push(Part::text(reply.text.clone()));
    }
    parts.extend(reply.tool_calls.iter().map(|c| Part::ToolCall {
        id: c.id.clone(),
        name: c.name.clone(),
        arguments: c.arguments.clone(),
    }));
    Message {
        id,
        conversation: agent.conversation.clone(),
        sender,
        audience: Audience::agent(agent.name.clone()),
        parts,
        reply_to: None,
        at: now(),
    }
}

/// Records the outcomes of a step's calls as one message of the agent, addressed to itself, one
/// result per call, replying to the calls' message. Returns its seq: the next step answers it.
async fn record_results(
    agent: &Agent,
    calls: &[ToolCallPart],
    outcomes: Vec<ToolOutcome>,
    calls_message: MessageId,
) -> Result<Seq, RuntimeError> {
    let parts = calls
        .iter()
        .zip(outcomes)
        .map(|(call, outcome)| outcome.into_part(&call.id))
        .collect();
    let results = Message {
        id: MessageId(fresh_uuid()),
        conversation: agent.conversation.clone(),
        sender: Participant::Agent(agent.name.clone()),
        audience: Audience::agent(agent.name.clone()),
        parts,
        reply_to: Some(calls_message),
        at: now(),
    };
    let range = agent
        .shared
        .append(vec![Event::MessagePosted(results)])
        .await?;
    Ok(range.first)
}

/// Records the turn as failed with `error` and answers with it.
async fn fail(
    agent: &Agent,
    session: SessionId,
    kind: TurnErrorKind,
    error: String,
) -> Result<AgentReply, RuntimeError> {
    let failed = turn_failed(agent, Some(session), error.clone());
    agent.shared.append(vec![failed]).await?;
    Ok(AgentReply::failed(&agent.name, kind, error))
}

/// The turn ran out of time: recorded as failed, answered with an error.
async fn timed_out(agent: &Agent, session: SessionId) -> Result<AgentReply, RuntimeError> {
    let timeout: Duration = agent.shared.config.runtime.turn_timeout;
    let error = format!(
        "{} did not answer within {} s (runtime.turn_timeout_seconds)",
        agent.name,
        timeout.as_secs_f64()
    );
    let reply = fail(agent, session, TurnErrorKind::Timeout, error).await?;
    metrics::counter!(m::TURNS, "agent" => agent.name.to_string(), "outcome" => "timeout")
        .increment(1);
    Ok(reply)
}

pub(crate) fn turn_failed(agent: &Agent, session: Option<SessionId>, error: String) -> Event {
    Event::TurnFailed(TurnFailed {
        conversation: agent.conversation.clone(),
        agent: agent.name.clone(),
        session,
        at: now(),
        error,
    })
}

/// The event that ends `session` as `end` says: suspended or closed.
pub(crate) fn end_event(agent: &Agent, session: SessionId, end: EndSession) -> Event {
    let ended = SessionEnded {
        conversation: agent.conversation.clone(),
        agent: agent.name.clone(),
        session,
        at: now(),
        why: end.why,
    };
    if end.suspend {
        Event::SessionSuspended(ended)
    } else {
        Event::SessionClosed(ended)
    }
}

/// Counts a session end in the metrics.
pub(crate) fn record_end(end: EndSession) {
    let name = if end.suspend {
        m::SESSIONS_SUSPENDED
    } else {
        m::SESSIONS_CLOSED
    };
    metrics::counter!(name, "reason" => end.why.as_str()).increment(1);
}

fn plan_text(plan: &ContextPlan) -> String {
    plan.messages()
        .map(|i| i.message.text_content())
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    //! The turn without an actor: plain function calls on a shared state over an in-memory log.

    use super::*;
    use crate::agent::dispatch::Sent;
    use crate::messages::ConversationMsg;
    use legio_core::{DeliveryMode, History};
    use legio_llm::{ScriptedConfig, ScriptedProvider};
    use legio_store::{EventLog, MemoryLog};

    /// A turn run outside any conversation: `dispatch` has nowhere to go.
    struct Nowhere;

    impl Route for Nowhere {
        fn send(&self, _message: ConversationMsg) -> Sent<'_> {
            Box::pin(std::future::ready(false))
        }
    }

    fn shared(dir: &std::path::Path, provider: ScriptedProvider) -> Arc<Shared> {
        std::fs::write(dir.join("lead.md"), "You lead.").unwrap();
        let file = dir.join("legio.toml");
        std::fs::write(
            &file,
            "[runtime]\ncompaction = false\n[agents.lead]\nrole = \"orchestrator\"\nprompt = \"lead.md\"\nprovider = \"local\"\n[providers.local]\nkind = \"scripted\"\nhistory = \"session\"\n",
        )
        .unwrap();
        let config = crate::RuntimeConfig::load(&file).unwrap();
        let log: Arc<dyn EventLog> = Arc::new(MemoryLog::new());
        let provider: Arc<dyn Provider> = Arc::new(provider);
        let providers = [("local".to_owned(), provider)].into();
        let tools = Default::default();
        Shared::new(log, config, providers, tools, Default::default(), None)
    }

    async fn post(agent: &Agent, text: &str) -> TurnRequest {
        let id = MessageId(fresh_uuid());
        let message = Message::text(
            id,
            agent.conversation.clone(),
            Participant::User,
            Audience::agent(agent.name.clone()),
            text,
            now(),
        );
        let range = agent
            .shared
            .append(vec![Event::MessagePosted(message)])
            .await;
        let seq = range.unwrap().first;
        TurnRequest {
            seq,
            id,
            progress: None,
            host_tools: None,
            replayed: false,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_turn_runs_as_plain_functions_and_the_next_one_is_a_delta() {
        let dir = tempfile::tempdir().unwrap();
        let provider =
            ScriptedProvider::new(ScriptedConfig::new(History::Session { resumable: true }));
        let agent = Agent {
            shared: shared(dir.path(), provider.clone()),
            conversation: ConversationKey::new("t:1").unwrap(),
            name: AgentName::new("lead").unwrap(),
            route: Arc::new(Nowhere),
        };
        let mut state = TurnState::default();
        let first = post(&agent, "hello").await;
        let reply = run(&agent, &mut state, first).await;
        let answer = reply.outcome.expect("a reply");
        assert_eq!(
            answer.seq,
            Seq(4),
            "message, opened, delivered, then the reply"
        );
        let second = post(&agent, "again").await;
        let reply = run(&agent, &mut state, second).await;
        assert!(reply.outcome.is_ok(), "{reply:?}");
        let modes: Vec<DeliveryMode> = provider.requests().iter().map(|r| r.plan.mode).collect();
        assert_eq!(modes, [DeliveryMode::Bootstrap, DeliveryMode::Delta]);
        assert!(state.live_session.is_some());
    }
}
