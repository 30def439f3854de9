//! Preparing a turn: every read and every decision, no write. The agent actor runs it on a
//! blocking thread before each turn; `legio context` and the restore benchmark call it directly.

use legio_core::{
    decide_session, estimate_message_tokens, plan_context, triggers_turn, AgentSessionState,
    Audience, ContextPlan, ConversationKey, Delivery, Event, History, Message, MessageId,
    Participant, Record, Seq, SessionDecision, SessionFacts, SessionId, SessionInfo, SessionStatus,
    Timestamp,
};
use legio_store::EventLog;

use crate::config::{AgentSpec, RuntimeSettings};
use crate::error::RuntimeError;

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
pub fn prepare_turn(
    log: &dyn EventLog,
    inputs: TurnInputs<'_>,
) -> Result<PreparedTurn, RuntimeError> {
    let state = log.session_state(inputs.conversation, &inputs.spec.name)?;
    let new: Record = log
        .read_range(inputs.new_message, inputs.new_message, 1)?
        .into_iter()
        .next()
        .ok_or_else(|| {
            RuntimeError::Actor(format!(
                "message at seq {} is not in the log",
                inputs.new_message
            ))
        })?;
    plan_with_state(log, &inputs, state, new)
}

/// Decides and plans a turn from a session state and the message it answers.
fn plan_with_state(
    log: &dyn EventLog,
    inputs: &TurnInputs<'_>,
    state: Option<AgentSessionState>,
    new: Record,
) -> Result<PreparedTurn, RuntimeError> {
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
    let visible = match decision.delivery {
        Delivery::Full | Delivery::Bootstrap { .. } => {
            log.visible_before(inputs.conversation, spec.viewer(), new.seq, window)?
        }
        Delivery::Delta { checkpoint } => {
            log.visible_after(inputs.conversation, spec.viewer(), checkpoint, MAX_DELTA)?
        }
    };
    let plan = plan_context(&spec.name, &decision.delivery, &visible, &new, window);
    Ok(PreparedTurn {
        current,
        decision,
        plan,
    })
}

/// Estimated tokens that re-sending the window would cost for `turn`: the last `history_window`
/// visible messages before its new message, plus the new message. For the tokens-avoided metric;
/// equal to the plan's own estimate unless the plan is a delta. Blocks on a log read.
pub fn window_tokens(
    log: &dyn EventLog,
    inputs: &TurnInputs<'_>,
    turn: &PreparedTurn,
) -> Result<u64, RuntimeError> {
    let plan = &turn.plan;
    if !matches!(turn.decision.delivery, Delivery::Delta { .. }) {
        return Ok(plan.estimated_tokens);
    }
    let window = inputs.settings.history_window;
    let full = log.visible_before(
        inputs.conversation,
        inputs.spec.viewer(),
        plan.new_message.seq,
        window,
    )?;
    Ok(full
        .iter()
        .filter_map(|r| r.event.as_message())
        .chain(std::iter::once(&plan.new_message.message))
        .map(estimate_message_tokens)
        .sum())
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
}

/// What the agent's provider would receive for its next turn had the log ended at `at`. Uses the
/// same decision and planner as the runtime. Assumptions, stated: an open session is held by a
/// running actor (no crash in between), and the prompt is the one the session was opened with
/// (`prompt_hash` is used only when there is no session). Blocks on log reads.
pub fn preview_turn(
    log: &dyn EventLog,
    inputs: TurnInputs<'_>,
    at: Seq,
) -> Result<TurnPreview, RuntimeError> {
    let at = at.min(log.last_seq());
    let agent = &inputs.spec.name;
    let state = if at == log.last_seq() {
        log.session_state(inputs.conversation, agent)?
    } else {
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
        state
    };
    let current = state.as_ref().and_then(|s| s.current.as_ref());
    let prompt_hash = current.map_or(inputs.prompt_hash.to_owned(), |c| c.prompt_hash.clone());
    let live_session = current
        .filter(|c| c.status == SessionStatus::Open)
        .map(|c| c.session);
    let at_record = if at == Seq::ZERO {
        None
    } else {
        log.read_range(at, at, 1)?.into_iter().next()
    };
    let answering = at_record.filter(|r| {
        r.event
            .as_message()
            .is_some_and(|m| triggers_turn(agent, m) && m.conversation == *inputs.conversation)
    });
    let answers_message = answering.is_some();
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
    })
}
