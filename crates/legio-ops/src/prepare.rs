//! Preparing a turn: every read and every decision, no write. The agent actor runs it on a
//! blocking thread before each turn; `legio context` and the restore benchmark call it directly.

use legio_core::{
    covered_seq, crosses_policy, decide_session, estimate_message_tokens,
    plan_context_with_summary, summary_boundary_before, triggers_turn, AgentSessionState, Audience,
    ContextItem, ContextPlan, ContextSummary, ConversationKey, Delivery, Event, History, Message,
    MessageId, Participant, Record, Seq, SessionDecision, SessionFacts, SessionId, SessionInfo,
    SessionStatus, Timestamp,
};
use legio_store::EventLog;

use crate::error::OpsError;
use legio_config::{AgentSpec, RuntimeSettings};

/// The most delta messages one turn reads (a documented limit).
pub const MAX_DELTA: usize = 10_000;

/// What a turn will do: the session decision and the exact context.
#[derive(Clone, Debug)]
pub struct PreparedTurn {
    /// The agent's latest session before the turn.
    pub current: Option<SessionInfo>,
    /// Continue, resume or open; which boundary to record first.
    pub decision: SessionDecision,
    /// The context the provider will receive.
    pub plan: ContextPlan,
}

/// Everything `prepare_turn` needs to know besides the log.
#[derive(Clone, Copy, Debug)]
pub struct TurnInputs<'a> {
    /// The agent.
    pub spec: &'a AgentSpec,
    /// The conversation.
    pub conversation: &'a ConversationKey,
    /// Its provider's history capability.
    pub history: History,
    /// Window and token ceiling.
    pub settings: &'a RuntimeSettings,
    /// The hash of the system prompt the turn would use.
    pub prompt_hash: &'a str,
    /// The session the running actor opened itself, if any (`None` after a restart).
    pub live_session: Option<SessionId>,
    /// The message the turn answers.
    pub new_message: Seq,
}

/// Reads the agent's session state and the messages it needs, and decides the turn. Blocks on
/// log reads: call it from a blocking thread.
pub fn prepare_turn(log: &dyn EventLog, inputs: TurnInputs<'_>) -> Result<PreparedTurn, OpsError> {
    let state = log.session_state(inputs.conversation, &inputs.spec.name)?;
    let new: Record = log
        .read_range(inputs.new_message, inputs.new_message, 1)?
        .into_iter()
        .next()
        .ok_or(OpsError::MissingRecord {
            what: "the message to answer",
            seq: inputs.new_message,
        })?;
    plan_with_state(log, &inputs, state, new)
}

/// Decides and plans a turn from a session state and the message it answers.
fn plan_with_state(
    log: &dyn EventLog,
    inputs: &TurnInputs<'_>,
    state: Option<AgentSessionState>,
    new: Record,
) -> Result<PreparedTurn, OpsError> {
    let spec = inputs.spec;
    let current = state.as_ref().and_then(|s| s.current.clone());
    let live = matches!((&current, inputs.live_session), (Some(c), Some(id)) if c.session == id && c.status == SessionStatus::Open);
    let decision = decide_session(SessionFacts {
        state: state.as_ref(),
        live,
        history: inputs.history,
        prompt_hash: inputs.prompt_hash,
        max_input_tokens: inputs.settings.max_input_tokens,
    });
    let window = inputs.settings.history_window;
    let (visible, summary) = match decision.delivery {
        Delivery::Full | Delivery::Bootstrap { .. } => (
            log.visible_before(inputs.conversation, spec.viewer(), new.seq, window)?,
            latest_summary(log, state.as_ref())?,
        ),
        Delivery::Delta { checkpoint } => (
            log.visible_after(inputs.conversation, spec.viewer(), checkpoint, MAX_DELTA)?,
            None,
        ),
    };
    let plan = plan_context_with_summary(
        &spec.name,
        &decision.delivery,
        &visible,
        &new,
        window,
        summary.as_ref(),
    );
    Ok(PreparedTurn {
        current,
        decision,
        plan,
    })
}

/// `state` (folded up to `at`) with the agent's `SummaryRecorded` events that follow `at` before
/// any other event of the agent: the compaction the turn answering `at` made.
fn with_turn_summaries(
    log: &dyn EventLog,
    conversation: &ConversationKey,
    agent: &legio_core::AgentName,
    at: Seq,
    mut state: Option<AgentSessionState>,
) -> Result<Option<AgentSessionState>, OpsError> {
    let mut after = at;
    loop {
        let chunk = log.conversation_events(conversation, after, 256)?;
        let Some(last) = chunk.last().map(|r| r.seq) else {
            return Ok(state);
        };
        for record in &chunk {
            if record.event.session_agent() != Some(agent) {
                continue;
            }
            if !matches!(record.event, Event::SummaryRecorded(_)) {
                return Ok(state);
            }
            state
                .get_or_insert_with(|| AgentSessionState::new(conversation.clone(), agent.clone()))
                .apply(record.seq, &record.event);
        }
        after = last;
    }
}

/// The agent's latest summary, read from its `SummaryRecorded` event.
fn latest_summary(
    log: &dyn EventLog,
    state: Option<&AgentSessionState>,
) -> Result<Option<ContextSummary>, OpsError> {
    let Some(at) = state.and_then(|s| s.latest_summary) else {
        return Ok(None);
    };
    let record = log.read_range(at.event, at.event, 1)?.into_iter().next();
    match record.map(|r| r.event) {
        Some(Event::SummaryRecorded(e)) => Ok(Some(ContextSummary {
            covers_up_to: e.covers_up_to,
            text: e.text,
        })),
        _ => Err(OpsError::MissingRecord {
            what: "the summary the session state points at",
            seq: at.event,
        }),
    }
}

/// Older messages to summarize before a turn (the context crossed the agent's compaction
/// policy), and what the summary replaces.
#[derive(Clone, Debug)]
pub struct CompactionJob {
    /// Every visible message after the previous summary up to `covers_up_to`, in log order (not
    /// only those in the windowed context: a summary never skips a message).
    pub items: Vec<ContextItem>,
    /// The summary being extended, if any.
    pub previous: Option<ContextSummary>,
    /// The last seq the new summary will cover.
    pub covers_up_to: Seq,
    /// Estimated tokens of the context before compaction.
    pub tokens_before: u64,
    /// Estimated tokens of what stays verbatim (recent history and the new message).
    pub kept_tokens: u64,
}

/// Whether `turn` (a full or bootstrap context) crosses the agent's compaction policy, and if so
/// what to summarize: everything before the last `keep_recent` messages, with the boundary moved
/// so that no tool call is separated from its result, and never past `question` (the turn's
/// message: inside a tool loop, the question and the loop are never summarized).
/// `fixed_tokens`: the system prompt's and the tools'. Blocks on a log read.
pub fn compaction_job(
    log: &dyn EventLog,
    inputs: &TurnInputs<'_>,
    turn: &PreparedTurn,
    context_window: u64,
    fixed_tokens: u64,
    question: Seq,
) -> Result<Option<CompactionJob>, OpsError> {
    let plan = &turn.plan;
    if matches!(turn.decision.delivery, Delivery::Delta { .. }) {
        return Ok(None);
    }
    let policy = &inputs.spec.compaction;
    // The plan's estimate already counts its messages and summary.
    let tokens = fixed_tokens + plan.estimated_tokens;
    if !crosses_policy(policy, plan.history.len(), tokens, context_window) {
        return Ok(None);
    }
    let boundary = summary_boundary_before(&plan.history, policy.keep_recent, question);
    if boundary == 0 {
        return Ok(None);
    }
    let Some(covers_up_to) = covered_seq(&plan.history, boundary) else {
        return Ok(None);
    };
    // Every visible message after the previous summary up to the cut, read in pages: a summary
    // never claims a seq range it did not read.
    let mut after = plan.summary.as_ref().map_or(Seq::ZERO, |s| s.covers_up_to);
    let mut items: Vec<ContextItem> = Vec::new();
    while after < covers_up_to {
        let page =
            log.visible_after(inputs.conversation, inputs.spec.viewer(), after, MAX_DELTA)?;
        let Some(last) = page.last().map(|r| r.seq) else {
            break;
        };
        items.extend(
            page.into_iter()
                .filter(|r| r.seq <= covers_up_to)
                .filter_map(|r| {
                    r.event.as_message().cloned().map(|message| ContextItem {
                        seq: r.seq,
                        message,
                        redelivered: false,
                    })
                }),
        );
        after = last;
    }
    let kept_tokens = plan.history[boundary..]
        .iter()
        .chain(std::iter::once(&plan.new_message))
        .map(|i| estimate_message_tokens(&i.message))
        .sum();
    Ok(Some(CompactionJob {
        items,
        previous: plan.summary.clone(),
        covers_up_to,
        tokens_before: tokens,
        kept_tokens,
    }))
}

/// A turn as it would have been prepared had the log ended at a seq.
#[derive(Clone, Debug)]
pub struct TurnPreview {
    /// The agent's session state folded from its events up to that seq.
    pub state: Option<AgentSessionState>,
    /// The prepared turn.
    pub turn: PreparedTurn,
    /// Whether the plan answers a real message at that seq (otherwise its new message is a
    /// placeholder for the next message addressed to the agent).
    pub answers_message: bool,
    /// The window check, once applied ([`crate::fit_preview`]): the plan is then what would
    /// really be sent.
    pub window: Option<crate::window_report::WindowReport>,
}

/// What the agent's provider would receive for its next turn had the log ended at `at`. Uses the
/// same decision and planner as the runtime. An open session is taken as held by a running actor
/// unless the log says otherwise: the session's next word after `at` is a crash boundary (the turn
/// after `at` found it left by a dead process), or, when the log says nothing more of it, it was
/// not opened after `live_since` (the seq after which a running process opened the sessions it
/// holds: `None` when none runs the log's actors, `Seq::ZERO` when any may; a session left by a
/// dead process is ended as crashed by the next turn). A message asking the agent for a turn at
/// the log's end is the turn previewed only when a live process may still run that turn (it is
/// after `live_since`); otherwise the next message's turn is, which carries it. The prompt is the
/// one the session was opened with (`prompt_hash` is used only when there is no session). Blocks
/// on log reads.
pub fn preview_turn(
    log: &dyn EventLog,
    inputs: TurnInputs<'_>,
    at: Seq,
    live_since: Option<Seq>,
) -> Result<TurnPreview, OpsError> {
    let last = log.last_seq();
    let at = at.min(last);
    let agent = &inputs.spec.name;
    let state = state_at(log, &inputs, at)?;
    let current = state.as_ref().and_then(|s| s.current.as_ref());
    let prompt_hash = current.map_or(inputs.prompt_hash.to_owned(), |c| c.prompt_hash.clone());
    let live_session = match current.filter(|c| c.status == SessionStatus::Open) {
        Some(c) if held_after(log, &inputs, at, c, live_since)? => Some(c.session),
        _ => None,
    };
    let at_record = if at == Seq::ZERO {
        None
    } else {
        log.read_range(at, at, 1)?.into_iter().next()
    };
    // A message at the log's end is the next turn's only if a live process may still run its
    // turn (it came after that process started): nothing runs a turn again after a crash or a
    // restart, so the next turn is the next message's, which carries it (marked redelivered).
    let may_run = at < last || live_since.is_some_and(|since| at > since);
    let answering = at_record.filter(|r| {
        may_run
            && r.event
                .as_message()
                .is_some_and(|m| triggers_turn(agent, m) && m.conversation == *inputs.conversation)
    });
    let answers_message = answering.is_some();
    // A compaction for the turn answering the message at `at` is recorded just after it, before
    // the turn's other events: fold it in, so the preview shows the compacted view that turn used.
    let state = if answers_message {
        with_turn_summaries(log, inputs.conversation, agent, at, state)?
    } else {
        state
    };
    let new = answering.unwrap_or_else(|| Record {
        seq: at.next(),
        event: Event::MessagePosted(Message::text(
            MessageId(uuid::Uuid::nil()),
            inputs.conversation.clone(),
            Participant::User,
            Audience::agent(agent.clone()),
            "(the next message addressed to this agent)",
            Timestamp::EPOCH,
        )),
    });
    let inputs = TurnInputs {
        prompt_hash: &prompt_hash,
        live_session,
        ..inputs
    };
    let turn = plan_with_state(log, &inputs, state.clone(), new)?;
    Ok(TurnPreview {
        state,
        turn,
        answers_message,
        window: None,
    })
}

/// Whether the agent's session open at `at` was still held by a live actor after it: the log's
/// next word on the session (after `at`) is anything but a crash boundary, or, when the log says
/// nothing more of it, the session was opened after `live_since`.
fn held_after(
    log: &dyn EventLog,
    inputs: &TurnInputs<'_>,
    at: Seq,
    current: &legio_core::SessionInfo,
    live_since: Option<Seq>,
) -> Result<bool, OpsError> {
    let (agent, session) = (&inputs.spec.name, current.session);
    let mut after = at;
    loop {
        let chunk = log.conversation_events(inputs.conversation, after, 10_000)?;
        let Some(last) = chunk.last().map(|r| r.seq) else {
            return Ok(live_since.is_some_and(|since| current.opened_at > since));
        };
        for record in &chunk {
            match &record.event {
                Event::SessionSuspended(e) | Event::SessionClosed(e)
                    if e.agent == *agent && e.session == session =>
                {
                    return Ok(e.why != legio_core::BoundaryReason::Crashed)
                }
                Event::ContextDelivered(d) if d.agent == *agent && d.session == session => {
                    return Ok(true)
                }
                _ => {}
            }
        }
        after = last;
    }
}

/// The agent's session state folded from its events up to `at`. Blocks on log reads.
fn state_at(
    log: &dyn EventLog,
    inputs: &TurnInputs<'_>,
    at: Seq,
) -> Result<Option<AgentSessionState>, OpsError> {
    let agent = &inputs.spec.name;
    if at == log.last_seq() {
        return Ok(log.session_state(inputs.conversation, agent)?);
    }
    let mut state: Option<AgentSessionState> = None;
    let mut after = Seq::ZERO;
    loop {
        let chunk = log.conversation_events(inputs.conversation, after, 10_000)?;
        let Some(last) = chunk.last().map(|r| r.seq) else {
            break;
        };
        for record in chunk.iter().filter(|r| r.seq <= at) {
            if record.event.session_agent() == Some(agent) {
                state
                    .get_or_insert_with(|| {
                        AgentSessionState::new(inputs.conversation.clone(), agent.clone())
                    })
                    .apply(record.seq, &record.event);
            }
        }
        if last >= at {
            break;
        }
        after = last;
    }
    Ok(state)
}
