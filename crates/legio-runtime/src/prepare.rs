//! Preparing a turn: every read and every decision, no write. The agent actor runs it on a
//! blocking thread before each turn; `legio context` and the restore benchmark call it directly.

use legio_core::{
    decide_session, plan_context, ContextPlan, ConversationKey, Delivery, History, Record, Seq,
    SessionDecision, SessionFacts, SessionId, SessionInfo, SessionStatus,
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
    let spec = inputs.spec;
    let state = log.session_state(inputs.conversation, &spec.name)?;
    let current = state.as_ref().and_then(|s| s.current.clone());
    let live = matches!((&current, inputs.live_session), (Some(c), Some(id)) if c.session == id && c.status == SessionStatus::Open);
    let decision = decide_session(SessionFacts {
        state: state.as_ref(),
        live,
        history: inputs.history,
        prompt_hash: inputs.prompt_hash,
        max_input_tokens: inputs.settings.max_input_tokens,
    });
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
    let window = inputs.settings.history_window;
    let visible = match decision.delivery {
        Delivery::Full | Delivery::Bootstrap { .. } => log.visible_before(
            inputs.conversation,
            spec.viewer(),
            inputs.new_message,
            window,
        )?,
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
