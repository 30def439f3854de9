//! The window check's inputs, shared by the runtime's turn and the preview: what every request
//! carries besides its plan ([`Fixed`]: system prompt, status block, tools) in a budget's units,
//! a provider's [`Budget`] from its settings, its calibration seeded from an agent's past turns
//! in the log, the orchestrator's status block, and [`check_window`], the check applied to a
//! prepared turn. Reads the log only in [`seed_calibration`] (blocking).

use legio_config::{AgentSpec, RuntimeConfig};
use legio_core::{
    fit_to_window, AgentName, Budget, BudgetError, Calibration, ConversationKey, Event, Fitted,
    History, Seq, CHAT_MESSAGE_OVERHEAD,
};
use legio_llm::{ProviderSettings, ToolDef};
use legio_store::{EventLog, StoreError};

use crate::prepare::{PreparedTurn, TurnPreview};
use crate::window_report::WindowReport;

/// The most events read from the log to seed a provider's calibration.
const SEED_EVENTS: usize = 20_000;

/// Estimated tokens of the tools offered (their names, descriptions and schemas).
pub fn tool_tokens(tools: &[ToolDef]) -> u64 {
    tool_units(tools, legio_core::estimate_tokens)
}

/// The tools offered in the units of `count`.
fn tool_units(tools: &[ToolDef], count: impl Fn(&str) -> u64) -> u64 {
    tools
        .iter()
        .map(|t| count(&t.name) + count(&t.description) + count(&t.parameters.to_string()) + 8)
        .sum()
}

/// What every request of a step carries besides its plan.
#[derive(Clone, Copy, Debug)]
pub struct Fixed<'a> {
    /// The system prompt.
    pub system_prompt: &'a str,
    /// The orchestrator's status block (its first step only).
    pub status: Option<&'a str>,
    /// The tools offered.
    pub tools: &'a [ToolDef],
    /// [`tool_tokens`] of `tools`, counted once by whoever holds them (an agent's tools are
    /// fixed for its actor's life; counting means serializing every schema).
    pub tool_tokens: u64,
}

impl Fixed<'_> {
    /// Estimated tokens (the units of plans and of calibration).
    pub fn estimated(&self) -> u64 {
        legio_core::estimate_tokens(self.system_prompt)
            + self.status.map_or(0, legio_core::estimate_tokens)
            + self.tool_tokens
    }

    /// In `budget`'s units: exact with the model's vocabulary (the system message's chat
    /// overhead included), else estimated.
    pub fn units(&self, budget: &Budget) -> u64 {
        if budget.vocabulary.is_none() {
            return self.estimated();
        }
        let count = |text: &str| budget.count_text(text);
        count(self.system_prompt)
            + CHAT_MESSAGE_OVERHEAD
            + self.status.map_or(0, count)
            + tool_units(self.tools, count)
    }
}

/// The budget of a provider with `settings` (`None`: one the host supplied, known only by its
/// window): its window less its output limit, counted exactly when the model's vocabulary is
/// known, else by `calibration`.
pub fn provider_budget(
    settings: Option<&ProviderSettings>,
    context_window: u64,
    calibration: Calibration,
) -> Budget {
    Budget {
        context_window,
        max_output_tokens: settings.map_or(0, ProviderSettings::max_output_tokens),
        calibration,
        vocabulary: settings.and_then(ProviderSettings::vocabulary),
    }
}

/// Learns `calibration` from `agent`'s past turns in `conversation`: each `ContextDelivered`
/// estimate, plus `fixed_tokens`, against the next `TurnCompleted`'s reported input. Blocks.
pub fn seed_calibration(
    log: &dyn EventLog,
    conversation: &ConversationKey,
    agent: &AgentName,
    fixed_tokens: u64,
    calibration: &mut Calibration,
) -> Result<(), StoreError> {
    let (mut after, mut read, mut pending) = (Seq::ZERO, 0, None);
    while read < SEED_EVENTS {
        let page = log.conversation_events(conversation, after, 2_000)?;
        let Some(last) = page.last().map(|r| r.seq) else {
            break;
        };
        read += page.len();
        for record in page
            .iter()
            .filter(|r| r.event.session_agent() == Some(agent))
        {
            match &record.event {
                Event::ContextDelivered(d) => pending = Some(d.estimated_tokens),
                Event::TurnCompleted(t) => {
                    // The log does not say whether usage was reported or estimated in its
                    // place (the runtime's estimate of the messages alone, under the request's
                    // own estimate): ratios under 1 are skipped here, never learned from.
                    let estimated = pending.take().map(|e| e + fixed_tokens);
                    if let Some(estimated) = estimated.filter(|e| t.usage.input >= *e) {
                        calibration.observe(estimated, t.usage.input);
                    }
                }
                _ => {}
            }
        }
        after = last;
    }
    Ok(())
}

/// The calibration a runtime would start `spec`'s provider with in `conversation`: exact for a
/// provider that counts like the estimate, learned from the agent's past turns for a stateless
/// one, else the prior. `fixed_tokens`: the estimated system prompt, status block and tools.
/// Blocks (log reads).
pub fn preview_calibration(
    log: &dyn EventLog,
    config: &RuntimeConfig,
    spec: &AgentSpec,
    conversation: &ConversationKey,
    fixed_tokens: u64,
) -> Result<Calibration, StoreError> {
    let mut calibration = Calibration::default();
    match config.providers.get(&spec.provider) {
        Some(s) if s.counts_like_estimates() => return Ok(Calibration::exact()),
        Some(s) if s.history() == History::Stateless => {
            seed_calibration(
                log,
                conversation,
                &spec.name,
                fixed_tokens,
                &mut calibration,
            )?;
        }
        _ => {}
    }
    Ok(calibration)
}

/// The orchestrator's status block: each specialist with what it is doing (`activity`).
pub fn status_block<'a>(specialists: impl IntoIterator<Item = (&'a AgentName, &'a str)>) -> String {
    let mut out = String::from("<agent_status>\n");
    for (name, activity) in specialists {
        out.push_str(&format!("<agent name=\"{name}\" status=\"{activity}\"/>\n"));
    }
    out.push_str("</agent_status>");
    out
}

/// The window check applied to `turn`'s plan: the oldest messages left out (with a notice)
/// when it does not fit, never the message at or after `question`.
pub fn check_window(
    turn: &mut PreparedTurn,
    fixed: Fixed<'_>,
    question: Seq,
    budget: &Budget,
) -> Result<Fitted, BudgetError> {
    fit_to_window(&mut turn.plan, fixed.units(budget), question, budget)
}

/// Applies the window check to `preview` as the turn would (never leaving out its new message):
/// its plan becomes what would really be sent, with the notice of what was left out.
/// The tools' schemas are not part of a preview's `fixed`: a host may offer its own tools, which
/// only a running service knows, and the CLI's offline and live reports must agree.
pub fn fit_preview(preview: &mut TurnPreview, fixed: Fixed<'_>, budget: &Budget) -> WindowReport {
    let question = preview.turn.plan.new_message.seq;
    let counted = match budget.vocabulary {
        Some(v) => format!("exact ({v:?})"),
        None => format!(
            "calibrated (ratio {:.2} from {} turns, margin {:.2})",
            budget.calibration.ratio, budget.calibration.samples, budget.calibration.margin
        ),
    };
    let checked = check_window(&mut preview.turn, fixed, question, budget);
    let plan = &preview.turn.plan;
    let report = WindowReport {
        request_tokens: budget.real_tokens(fixed.units(budget) + budget.count_plan(plan)),
        limit: budget.request_limit(),
        counted,
        left_out: checked.as_ref().map_or(0, |f| f.left_out),
        summary_left_out: checked.as_ref().is_ok_and(|f| f.summary_left_out),
        error: checked.err().map(|e| e.to_string()),
    };
    preview.window = Some(report.clone());
    report
}
