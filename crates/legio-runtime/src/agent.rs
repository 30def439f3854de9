//! The agent actor: one per (conversation, agent), owning that agent's provider session.
//!
//! Its state is rebuilt from the log in `pre_start` (an open session left by a dead actor or
//! process is closed or suspended as crashed first). A turn asks the core what to do
//! (`decide_session`, `plan_context`), records the boundary events, calls the provider, and
//! records the outcome: context delivered (the checkpoint), the reply, the turn's usage.

use std::sync::Arc;
use std::time::{Duration, Instant};

use legio_core::{
    crash_cleanup, estimate_tokens, stop_session, AgentName, Audience, BoundaryReason,
    ContextDelivered, ConversationKey, EndSession, Event, Message, MessageId, Part, Participant,
    Seq, SessionEnded, SessionId, SessionOpened, SessionStart, Start, TokenUsage, TurnCompleted,
    TurnFailed,
};
use legio_llm::{ProviderError, ProviderRequest, ToolCallPart};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::oneshot;

use crate::compact::compact;
use crate::config::Role;
use crate::error::RuntimeError;
use crate::memory::ToolSpec;
use crate::metrics as m;
use crate::prepare::{compaction_job, prepare_turn, window_tokens, PreparedTurn, TurnInputs};
use crate::progress::{Progress, ProgressSink};
use crate::shared::{fresh_uuid, now, Shared};
use crate::status::Activity;
use crate::supervisor::ConversationMsg;
use crate::tools::{prepare_call, tools_for, CallContext};

/// One agent's answer to a message: a reply, or an error for this agent only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentReply {
    /// The agent.
    pub agent: AgentName,
    /// The reply's text, if the turn succeeded.
    pub text: Option<String>,
    /// The reply message's id.
    pub message_id: Option<MessageId>,
    /// The reply's seq in the log.
    pub seq: Option<Seq>,
    /// What went wrong, if the turn failed.
    pub error: Option<String>,
}

impl AgentReply {
    pub(crate) fn failed(agent: &AgentName, error: impl Into<String>) -> Self {
        Self {
            agent: agent.clone(),
            text: None,
            message_id: None,
            seq: None,
            error: Some(error.into()),
        }
    }
}

/// The message a turn answers, and where to report the turn's progress (if anyone listens).
#[derive(Clone, Debug)]
pub(crate) struct TurnRequest {
    pub(crate) seq: Seq,
    pub(crate) id: MessageId,
    pub(crate) progress: Option<ProgressSink>,
    /// A heartbeat's text instead of a message (`seq` and `id` unused): run with no history and
    /// recorded as `HeartbeatRan` (heartbeat.rs). Travels as a turn so it queues like one.
    pub(crate) heartbeat: Option<String>,
}

pub(crate) enum AgentMsg {
    Turn {
        request: TurnRequest,
        reply: oneshot::Sender<AgentReply>,
    },
    /// Stop if idle longer than `idle`; answers whether it stopped.
    ReapIfIdle {
        idle: Duration,
        reply: oneshot::Sender<bool>,
    },
    /// Graceful stop: suspend (or close) the session as `why`, then stop.
    Stop {
        why: BoundaryReason,
        reply: oneshot::Sender<()>,
    },
    /// Manual reset: close the session; the next turn opens a new one.
    Reset {
        reply: oneshot::Sender<Result<(), RuntimeError>>,
    },
}

pub(crate) struct AgentActor {
    pub(crate) shared: Arc<Shared>,
    pub(crate) conversation: ConversationKey,
    pub(crate) agent: AgentName,
    /// Its conversation's supervisor, through which `dispatch` sends turns to specialists.
    pub(crate) supervisor: ActorRef<ConversationMsg>,
}

pub(crate) struct AgentState {
    /// The session this actor opened (or resumed) itself; an open session in the log that is not
    /// this one was left by a crash.
    live_session: Option<SessionId>,
    last_active: Instant,
    /// The tools offered to the model, built on the first turn (they depend only on the agent's
    /// role, the memory tools and the host's registry, all fixed for the actor's life) and shared
    /// by every request without copying their schemas.
    tools: Option<Arc<[ToolSpec]>>,
}

impl Actor for AgentActor {
    type Msg = AgentMsg;
    type State = AgentState;
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        _args: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        let spec = self
            .shared
            .spec(&self.agent)
            .ok_or("agent not in the roster")?;
        let history = self.shared.provider(spec)?.capabilities().history;
        let (conversation, agent) = (self.conversation.clone(), self.agent.clone());
        let state = self
            .shared
            .read(move |log| log.session_state(&conversation, &agent))
            .await?;
        if let (Some(end), Some(current)) = (
            crash_cleanup(state.as_ref(), history),
            state.as_ref().and_then(|s| s.current.as_ref()),
        ) {
            tracing::info!(conversation = %self.conversation, agent = %self.agent, suspend = end.suspend, "closing a session left open by a crash");
            self.shared
                .append(vec![self.end_event(current.session, end)])
                .await?;
            record_end(end);
        }
        metrics::gauge!(m::LIVE_ACTORS).increment(1.0);
        Ok(AgentState {
            live_session: None,
            last_active: Instant::now(),
            tools: None,
        })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        _state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        metrics::gauge!(m::LIVE_ACTORS).decrement(1.0);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            AgentMsg::Turn { request, reply } if request.heartbeat.is_some() => {
                // Between turns, outside the session: no boundary, no checkpoint, no idle reset.
                let prompt = request.heartbeat.unwrap_or_default();
                self.shared
                    .board
                    .set(&self.conversation, &self.agent, Activity::Working);
                let outcome =
                    crate::heartbeat::run(&self.shared, &self.conversation, &self.agent, prompt)
                        .await;
                self.shared
                    .board
                    .set(&self.conversation, &self.agent, Activity::Idle);
                let _ = reply.send(outcome);
            }
            AgentMsg::Turn { request, reply } => {
                let started = Instant::now();
                self.shared
                    .board
                    .set(&self.conversation, &self.agent, Activity::Working);
                if let Some(progress) = &request.progress {
                    let _ = progress.send(Progress::AgentStarted {
                        agent: self.agent.clone(),
                    });
                }
                let outcome = match self.turn(state, request).await {
                    Ok(outcome) => outcome,
                    Err(e) => {
                        // A store or prompt failure: record it if the log still takes writes.
                        let _ = self
                            .shared
                            .append(vec![self.turn_failed(state.live_session, e.to_string())])
                            .await;
                        AgentReply::failed(&self.agent, e.to_string())
                    }
                };
                let outcome_label = if outcome.error.is_none() {
                    "ok"
                } else {
                    "error"
                };
                metrics::counter!(m::TURNS, "agent" => self.agent.to_string(), "outcome" => outcome_label).increment(1);
                metrics::histogram!(m::TURN_LATENCY, "agent" => self.agent.to_string())
                    .record(started.elapsed().as_secs_f64());
                self.shared
                    .board
                    .set(&self.conversation, &self.agent, Activity::Idle);
                state.last_active = Instant::now();
                let _ = reply.send(outcome);
            }
            AgentMsg::ReapIfIdle { idle, reply } => {
                let reaped = state.last_active.elapsed() >= idle;
                if reaped {
                    self.end_live_session(state, BoundaryReason::Idle).await?;
                    metrics::counter!(m::REAPED).increment(1);
                    myself.stop(Some("reaped".into()));
                }
                let _ = reply.send(reaped);
            }
            AgentMsg::Stop { why, reply } => {
                self.end_live_session(state, why).await?;
                myself.stop(Some(why.as_str().into()));
                let _ = reply.send(());
            }
            AgentMsg::Reset { reply } => {
                let result = self.reset(state).await;
                let _ = reply.send(result);
            }
        }
        Ok(())
    }
}

fn record_end(end: EndSession) {
    let name = if end.suspend {
        m::SESSIONS_SUSPENDED
    } else {
        m::SESSIONS_CLOSED
    };
    metrics::counter!(name, "reason" => end.why.as_str()).increment(1);
}

impl AgentActor {
    fn end_event(&self, session: SessionId, end: EndSession) -> Event {
        let ended = SessionEnded {
            conversation: self.conversation.clone(),
            agent: self.agent.clone(),
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

    fn turn_failed(&self, session: Option<SessionId>, error: String) -> Event {
        Event::TurnFailed(TurnFailed {
            conversation: self.conversation.clone(),
            agent: self.agent.clone(),
            session,
            at: now(),
            error,
        })
    }

    /// Ends this actor's live session, if it still is the open one: suspended when the provider
    /// can resume it, closed when not.
    async fn end_live_session(
        &self,
        state: &mut AgentState,
        why: BoundaryReason,
    ) -> Result<(), RuntimeError> {
        let Some(live) = state.live_session.take() else {
            return Ok(());
        };
        let (conversation, agent) = (self.conversation.clone(), self.agent.clone());
        let current = self
            .shared
            .read(move |log| log.session_state(&conversation, &agent))
            .await?
            .and_then(|s| s.current);
        let Some(current) =
            current.filter(|c| c.session == live && c.status == legio_core::SessionStatus::Open)
        else {
            return Ok(());
        };
        let spec = self
            .shared
            .spec(&self.agent)
            .ok_or_else(|| RuntimeError::Actor("agent left the roster".into()))?;
        let history = self.shared.provider(spec)?.capabilities().history;
        let end = stop_session(&current, history, why);
        self.shared.append(vec![self.end_event(live, end)]).await?;
        record_end(end);
        Ok(())
    }

    async fn reset(&self, state: &mut AgentState) -> Result<(), RuntimeError> {
        state.live_session = None;
        self.shared
            .record_reset(&self.conversation, &self.agent)
            .await
    }

    /// One provider call of a turn's tool loop: plan the context for the message at `answering`
    /// (the turn's message, then each step's results), record the boundaries, call the provider
    /// and record what it answered: the reply, or the calls it asked for. `first`: the turn's
    /// first step (the only one that carries the status block). `retry_lost` allows one retry
    /// with a new session when the provider lost the one to resume.
    #[allow(clippy::too_many_arguments)]
    async fn step(
        &self,
        state: &mut AgentState,
        request: &TurnRequest,
        answering: Seq,
        first: bool,
        tools: &Arc<[ToolSpec]>,
        deadline: Instant,
        retry_lost: bool,
    ) -> Result<Step, RuntimeError> {
        let shared = &self.shared;
        let spec = shared
            .spec(&self.agent)
            .ok_or_else(|| RuntimeError::Actor("agent left the roster".into()))?
            .clone();
        let provider = shared.provider(&spec)?;
        let capabilities = provider.capabilities();
        let (system_prompt, prompt_hash) = shared.system_prompt(&spec)?;

        // One hop to the blocking pool: the plan, the window it saves (for the metric), and
        // whether the context must be compacted first. After a compaction, a second hop plans
        // the turn on the compacted view.
        // The compaction trigger counts the system prompt (as the policy says); the check before
        // the call counts the tools' schemas too.
        let system_tokens = estimate_tokens(&system_prompt);
        let fixed_tokens = system_tokens + crate::fit::tool_tokens(tools);
        let calibration =
            crate::fit::calibration(shared, &self.conversation, &spec, fixed_tokens).await?;
        let question = request.seq;
        let mut compacted = false;
        let prepared = loop {
            let (shared_, spec_, conversation) =
                (Arc::clone(shared), spec.clone(), self.conversation.clone());
            let (history, live_session, prompt_hash) = (
                capabilities.history,
                state.live_session,
                prompt_hash.clone(),
            );
            let context_window = crate::fit::compaction_window(
                shared,
                &spec,
                capabilities.context_window,
                calibration,
            );
            let check = !compacted;
            let (prepared, window, job) = tokio::task::spawn_blocking(move || {
                let inputs = TurnInputs {
                    spec: &spec_,
                    conversation: &conversation,
                    history,
                    settings: &shared_.config.runtime,
                    prompt_hash: &prompt_hash,
                    live_session,
                    new_message: answering,
                };
                let log = shared_.log.as_ref();
                let prepared = prepare_turn(log, inputs)?;
                let window = window_tokens(log, &inputs, &prepared)?;
                let job = if check {
                    compaction_job(
                        log,
                        &inputs,
                        &prepared,
                        context_window,
                        system_tokens,
                        question,
                    )?
                } else {
                    None
                };
                Ok::<_, RuntimeError>((prepared, window, job))
            })
            .await
            .map_err(|e| RuntimeError::Actor(format!("preparing the turn was cancelled: {e}")))??;
            match job {
                Some(job) => {
                    compacted = true;
                    if let Err(why) = compact(shared, &self.conversation, &spec, job).await? {
                        crate::fit::compaction_failed(request.progress.as_ref(), &self.agent, &why);
                        break (prepared, window);
                    }
                }
                None => break (prepared, window),
            }
        };
        let (
            PreparedTurn {
                current,
                decision,
                mut plan,
            },
            window_tokens,
        ) = prepared;
        let window = capabilities.context_window;
        let fit = crate::fit::fit_request(
            shared,
            &spec,
            window,
            calibration,
            fixed_tokens,
            question,
            &mut plan,
        );

        // Boundaries first: end the old session, open the new one.
        let mut events = Vec::new();
        if let (Some(end), Some(c)) = (decision.end, &current) {
            events.push(self.end_event(c.session, end));
            record_end(end);
        }
        let (session, resume) = match &decision.start {
            Start::Continue => {
                let c = current
                    .as_ref()
                    .ok_or_else(|| RuntimeError::Actor("continue without a session".into()))?;
                (
                    c.session,
                    if capabilities.history.is_stateful() {
                        c.provider_session.clone()
                    } else {
                        None
                    },
                )
            }
            Start::OpenStateless { why }
            | Start::OpenBootstrap { why }
            | Start::OpenResume { why, .. } => {
                let session = SessionId(fresh_uuid());
                let (how, resume) = match &decision.start {
                    Start::OpenStateless { .. } => (SessionStart::Stateless, None),
                    Start::OpenResume {
                        provider_session,
                        checkpoint,
                        ..
                    } => (
                        SessionStart::Resumed {
                            provider_session: provider_session.clone(),
                            checkpoint: *checkpoint,
                        },
                        Some(provider_session.clone()),
                    ),
                    _ => (SessionStart::Bootstrapped { up_to: plan.up_to }, None),
                };
                events.push(Event::SessionOpened(SessionOpened {
                    conversation: self.conversation.clone(),
                    agent: self.agent.clone(),
                    session,
                    at: now(),
                    why: *why,
                    how,
                    prompt_hash: prompt_hash.clone(),
                }));
                let reason = match why {
                    legio_core::OpenReason::FirstUse => "first_use",
                    legio_core::OpenReason::After(r) => r.as_str(),
                };
                metrics::counter!(m::SESSIONS_OPENED, "reason" => reason).increment(1);
                (session, resume)
            }
        };
        if !events.is_empty() {
            shared.append(events).await?;
        }
        state.live_session = Some(session);
        if let Err(e) = fit {
            let error = format!("{} failed: {e}", self.agent);
            shared
                .append(vec![self.turn_failed(Some(session), error.clone())])
                .await?;
            return Ok(Step::Answered(AgentReply::failed(&self.agent, error)));
        }

        let status = (first && spec.role == Role::Orchestrator)
            .then(|| shared.status_block(&self.conversation));
        // Streamed fragments go to the listener as `Delta`s; the forwarder ends when the provider
        // drops its sender (the call finished or was cancelled) and is awaited before the reply
        // is returned, so every fragment precedes the agent's `AgentDone`.
        let (deltas, forwarder) = match &request.progress {
            Some(progress) => {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
                let (progress, agent) = (progress.clone(), self.agent.clone());
                let forwarder = tokio::spawn(async move {
                    while let Some(text) = rx.recv().await {
                        let _ = progress.send(Progress::Delta {
                            agent: agent.clone(),
                            text,
                        });
                    }
                });
                (Some(tx), Some(forwarder))
            }
            None => (None, None),
        };
        let provider_request = ProviderRequest {
            conversation: self.conversation.clone(),
            agent: self.agent.clone(),
            system_prompt,
            resume,
            plan: plan.clone(),
            status,
            deltas,
            tools: Arc::clone(tools),
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        let result = tokio::time::timeout(remaining, provider.call(provider_request)).await;
        if let Some(forwarder) = forwarder {
            let _ = forwarder.await;
        }
        match result {
            Ok(Ok(reply)) => {
                let sent = fixed_tokens + plan.estimated_tokens;
                crate::fit::learn(shared, &spec, sent, reply.usage.as_ref());
                let reply_id = MessageId(fresh_uuid());
                let calls = reply.tool_calls.clone();
                let message = if calls.is_empty() {
                    Message::text(
                        reply_id,
                        self.conversation.clone(),
                        Participant::Agent(self.agent.clone()),
                        Audience::user(),
                        reply.text.clone(),
                        now(),
                    )
                } else {
                    // The calls, with any text the model wrote along, addressed to the agent
                    // itself: its tool traffic is its own (the orchestrator and the user see it).
                    let mut parts = Vec::new();
                    if !reply.text.trim().is_empty() {
                        parts.push(Part::text(reply.text.clone()));
                    }
                    parts.extend(calls.iter().map(|c| Part::ToolCall {
                        id: c.id.clone(),
                        name: c.name.clone(),
                        arguments: c.arguments.clone(),
                    }));
                    Message {
                        id: reply_id,
                        conversation: self.conversation.clone(),
                        sender: Participant::Agent(self.agent.clone()),
                        audience: Audience::agent(self.agent.clone()),
                        parts,
                        reply_to: None,
                        at: now(),
                    }
                }
                .replying_to(request.id);
                let usage = reply.usage.unwrap_or_else(|| TokenUsage {
                    input: estimate_tokens(&provider_request_text(&plan)),
                    output: estimate_tokens(&reply.text),
                    ..Default::default()
                });
                let range = shared
                    .append(vec![
                        Event::ContextDelivered(ContextDelivered {
                            conversation: self.conversation.clone(),
                            agent: self.agent.clone(),
                            session,
                            at: now(),
                            up_to: plan.up_to,
                            mode: plan.mode,
                            messages: u32::try_from(plan.history.len() + 1).unwrap_or(u32::MAX),
                            estimated_tokens: plan.estimated_tokens,
                        }),
                        Event::MessagePosted(message),
                        Event::TurnCompleted(TurnCompleted {
                            conversation: self.conversation.clone(),
                            agent: self.agent.clone(),
                            session,
                            at: now(),
                            usage,
                            provider_session: reply.provider_session.clone(),
                            reply: Some(reply_id),
                        }),
                    ])
                    .await?;
                metrics::counter!(m::TOKENS_SENT, "mode" => plan.mode.as_str())
                    .increment(plan.estimated_tokens);
                metrics::counter!(m::TOKENS_AVOIDED)
                    .increment(window_tokens.saturating_sub(plan.estimated_tokens));
                if !calls.is_empty() {
                    return Ok(Step::Calls {
                        calls,
                        message: reply_id,
                        session,
                    });
                }
                Ok(Step::Answered(AgentReply {
                    agent: self.agent.clone(),
                    text: Some(reply.text),
                    message_id: Some(reply_id),
                    seq: Some(Seq(range.first.0 + 1)),
                    error: None,
                }))
            }
            Ok(Err(ProviderError::SessionLost { session: lost })) if retry_lost => {
                tracing::warn!(agent = %self.agent, session = %lost, "the provider lost the session; opening a new one from the log");
                let end = EndSession {
                    suspend: false,
                    why: BoundaryReason::ProviderSessionLost,
                };
                shared.append(vec![self.end_event(session, end)]).await?;
                record_end(end);
                state.live_session = None;
                Box::pin(self.step(state, request, answering, first, tools, deadline, false)).await
            }
            Ok(Err(e)) => {
                let error = format!("{} failed: {e}", self.agent);
                shared
                    .append(vec![self.turn_failed(Some(session), error.clone())])
                    .await?;
                Ok(Step::Answered(AgentReply::failed(&self.agent, error)))
            }
            Err(_elapsed) => Ok(Step::Answered(self.timed_out(session).await?)),
        }
    }

    /// The turn ran out of time: recorded as failed, answered with an error.
    async fn timed_out(&self, session: SessionId) -> Result<AgentReply, RuntimeError> {
        let error = format!(
            "{} did not answer within {} s (runtime.turn_timeout_seconds)",
            self.agent,
            self.shared.config.runtime.turn_timeout.as_secs_f64()
        );
        self.shared
            .append(vec![self.turn_failed(Some(session), error.clone())])
            .await?;
        metrics::counter!(m::TURNS, "agent" => self.agent.to_string(), "outcome" => "timeout")
            .increment(1);
        Ok(AgentReply::failed(&self.agent, error))
    }

    /// One turn: provider calls until the model answers with text, running the tools it calls
    /// in between (each step's calls and results are in the log before the next step), within
    /// `runtime.max_tool_steps` calls and the turn timeout.
    async fn turn(
        &self,
        state: &mut AgentState,
        request: TurnRequest,
    ) -> Result<AgentReply, RuntimeError> {
        let shared = &self.shared;
        let spec = shared
            .spec(&self.agent)
            .ok_or_else(|| RuntimeError::Actor("agent left the roster".into()))?
            .clone();
        let settings = &shared.config.runtime;
        let deadline = Instant::now() + settings.turn_timeout;
        let tools = match &state.tools {
            Some(tools) => Arc::clone(tools),
            None => {
                let tools: Arc<[ToolSpec]> = if shared.provider(&spec)?.capabilities().tools {
                    tools_for(shared, &spec).into()
                } else {
                    Arc::from(Vec::new())
                };
                state.tools = Some(Arc::clone(&tools));
                tools
            }
        };
        let mut answering = request.seq;
        let mut steps = 0;
        loop {
            steps += 1;
            let first = steps == 1;
            let step = self
                .step(state, &request, answering, first, &tools, deadline, true)
                .await?;
            let (calls, message, session) = match step {
                Step::Answered(reply) => return Ok(reply),
                Step::Calls {
                    calls,
                    message,
                    session,
                } => (calls, message, session),
            };
            let last = steps >= settings.max_tool_steps;
            let outcomes: Vec<(String, bool)> = if last {
                let why = format!(
                    "not run: the turn reached its limit of {} steps (runtime.max_tool_steps)",
                    settings.max_tool_steps
                );
                calls.iter().map(|_| (why.clone(), true)).collect()
            } else {
                let ctx = CallContext {
                    shared: Arc::clone(shared),
                    conversation: self.conversation.clone(),
                    spec: spec.clone(),
                    supervisor: self.supervisor.clone(),
                    call_message: message,
                    deadline,
                };
                run_calls(&ctx, &calls).await
            };
            let results = Message {
                id: MessageId(fresh_uuid()),
                conversation: self.conversation.clone(),
                sender: Participant::Agent(self.agent.clone()),
                audience: Audience::agent(self.agent.clone()),
                parts: calls
                    .iter()
                    .zip(outcomes)
                    .map(|(call, (content, is_error))| Part::ToolResult {
                        call_id: call.id.clone(),
                        content,
                        is_error,
                    })
                    .collect(),
                reply_to: Some(message),
                at: now(),
            };
            let range = shared.append(vec![Event::MessagePosted(results)]).await?;
            if last {
                let error = format!(
                    "{} was still calling tools after {} steps (runtime.max_tool_steps) and gave no answer",
                    self.agent, settings.max_tool_steps
                );
                shared
                    .append(vec![self.turn_failed(Some(session), error.clone())])
                    .await?;
                return Ok(AgentReply::failed(&self.agent, error));
            }
            if Instant::now() >= deadline {
                return self.timed_out(session).await;
            }
            answering = range.first;
        }
    }
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

/// Runs a step's calls in parallel, each on its own task, until the turn's deadline: the
/// outcomes in the calls' order. A panicking tool and one cut by the deadline are error results.
async fn run_calls(ctx: &CallContext, calls: &[ToolCallPart]) -> Vec<(String, bool)> {
    // Aborted when dropped: a turn cancelled (the actor killed, the runtime aborted) takes its
    // calls with it.
    let mut tasks = Tasks(
        calls
            .iter()
            .map(|call| tokio::spawn(prepare_call(ctx, &call.name, &call.arguments)))
            .collect(),
    );
    let deadline = tokio::time::Instant::from_std(ctx.deadline);
    let mut outcomes = Vec::with_capacity(calls.len());
    for (call, handle) in calls.iter().zip(tasks.0.iter_mut()) {
        let outcome = match tokio::time::timeout_at(deadline, &mut *handle).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(e)) => (format!("the tool {} failed: {e}", call.name), true),
            Err(_) => {
                handle.abort();
                (
                    "interrupted: the turn ran out of time (runtime.turn_timeout_seconds) while this tool ran".to_owned(),
                    true,
                )
            }
        };
        let label = if outcome.1 { "error" } else { "ok" };
        metrics::counter!(m::TOOL_CALLS, "tool" => call.name.clone(), "outcome" => label)
            .increment(1);
        outcomes.push(outcome);
    }
    outcomes
}

/// Spawned tool calls, aborted when dropped.
struct Tasks(Vec<tokio::task::JoinHandle<crate::tools::Outcome>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

fn provider_request_text(plan: &legio_core::ContextPlan) -> String {
    plan.messages()
        .map(|i| i.message.text_content())
        .collect::<Vec<_>>()
        .join("\n")
}
