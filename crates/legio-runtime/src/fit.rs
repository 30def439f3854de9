//! Fitting every request to its provider's window (issue 17): each provider's calibration
//! (reported prompt tokens over estimated ones, learned as turns go and seeded from the agent's
//! past turns in the log on first use, so it survives restarts without state of its own), the
//! window compaction is triggered against, the check every request passes before it is sent
//! (`legio_core::fit_to_window`), the summarizer's part budget, and the warning a failed
//! compaction gives. The turn code calls each from one line.

use std::sync::Arc;

use legio_core::{
    fit_to_window, summarizer_part_budget, AgentName, Budget, BudgetError, Calibration,
    ContextPlan, ConversationKey, Event, History, Seq, TokenUsage, SUMMARIZER_PROMPT,
};
use legio_llm::ProviderSettings;

use crate::error::RuntimeError;
use crate::memory::ToolSpec;
use crate::progress::{Progress, ProgressSink};
use crate::shared::Shared;
use legio_config::AgentSpec;

/// The most events read from the log to seed a provider's calibration.
const SEED_EVENTS: usize = 20_000;

fn settings<'a>(shared: &'a Shared, provider: &str) -> Option<&'a ProviderSettings> {
    shared.config.providers.get(provider)
}

/// Estimated tokens of the tools offered (their names, descriptions and schemas).
pub(crate) fn tool_tokens(tools: &[ToolSpec]) -> u64 {
    tools
        .iter()
        .map(|t| {
            legio_core::estimate_tokens(&t.name)
                + legio_core::estimate_tokens(&t.description)
                + legio_core::estimate_tokens(&t.parameters.to_string())
                + 8
        })
        .sum()
}

/// The calibration of `spec`'s provider; on its first use in this process, learned from the
/// agent's past turns in `conversation` (each `ContextDelivered` estimate, plus `fixed_tokens`
/// for the system prompt and tools, against the next `TurnCompleted`'s reported input).
pub(crate) async fn calibration(
    shared: &Arc<Shared>,
    conversation: &ConversationKey,
    spec: &AgentSpec,
    fixed_tokens: u64,
) -> Result<Calibration, RuntimeError> {
    if let Some(c) = shared.calibrations.get(&spec.provider) {
        return Ok(c);
    }
    let Some(settings) = settings(shared, &spec.provider) else {
        return Ok(Calibration::default());
    };
    if settings.counts_like_estimates() {
        shared
            .calibrations
            .set(&spec.provider, Calibration::exact());
        return Ok(Calibration::exact());
    }
    let (conversation, agent) = (conversation.clone(), spec.name.clone());
    let learns = settings.history() == History::Stateless;
    let seeded = shared
        .read(move |log| {
            let mut c = Calibration::default();
            if learns {
                seed(log, &conversation, &agent, fixed_tokens, &mut c)?;
            }
            Ok(c)
        })
        .await?;
    shared.calibrations.set(&spec.provider, seeded);
    Ok(shared.calibrations.get(&spec.provider).unwrap_or(seeded))
}

fn seed(
    log: &dyn legio_store::EventLog,
    conversation: &ConversationKey,
    agent: &AgentName,
    fixed_tokens: u64,
    calibration: &mut Calibration,
) -> Result<(), legio_store::StoreError> {
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

/// Learns from a request that succeeded: `estimated` tokens (fixed and plan) against the
/// prompt tokens the provider reported. Only stateless providers: a session's prompt holds
/// history the plan does not.
pub(crate) fn learn(shared: &Shared, spec: &AgentSpec, estimated: u64, usage: Option<&TokenUsage>) {
    let Some(settings) = settings(shared, &spec.provider) else {
        return;
    };
    if let (Some(usage), History::Stateless) = (usage, settings.history()) {
        let reported = match settings {
            ProviderSettings::AnthropicMessages(_) => {
                usage.input + usage.cache_read + usage.cache_write
            }
            _ => usage.input,
        };
        if let Some((before, after)) =
            shared
                .calibrations
                .observe(&spec.provider, estimated, reported)
        {
            // The real-server suite reads these lines (LEGIO_LOG=legio::calibration=info) to
            // report the calibration error before and after learning.
            tracing::info!(target: "legio::calibration", provider = %spec.provider, estimated, reported, ratio_before = before, ratio_after = after, "calibration");
        }
    }
}

fn budget(shared: &Shared, provider: &str, window: u64, calibration: Calibration) -> Budget {
    Budget {
        context_window: window,
        max_output_tokens: settings(shared, provider)
            .map_or(0, ProviderSettings::max_output_tokens),
        calibration,
    }
}

/// The window compaction is triggered against, in estimated tokens: what the provider's
/// window less its output limit holds by its calibration.
pub(crate) fn compaction_window(
    shared: &Shared,
    spec: &AgentSpec,
    window: u64,
    calibration: Calibration,
) -> u64 {
    let budget = budget(shared, &spec.provider, window, calibration);
    calibration.unscale(budget.request_limit())
}

/// Checks `plan` against the window before it is sent, leaving out the oldest messages if it
/// does not fit (never those from `question` on: the message answered and the current tool
/// loop). `Err`: the turn's error, naming the sizes.
pub(crate) fn fit_request(
    shared: &Shared,
    spec: &AgentSpec,
    window: u64,
    calibration: Calibration,
    fixed_tokens: u64,
    question: Seq,
    plan: &mut ContextPlan,
) -> Result<(), BudgetError> {
    let budget = budget(shared, &spec.provider, window, calibration);
    let fitted = fit_to_window(plan, fixed_tokens, question, &budget)?;
    if fitted.left_out > 0 || fitted.summary_left_out {
        metrics::counter!(crate::metrics::CONTEXT_LEFT_OUT, "agent" => spec.name.to_string())
            .increment(1);
        tracing::warn!(agent = %spec.name, left_out = fitted.left_out, summary_left_out = fitted.summary_left_out, tokens = fitted.tokens, window, "older messages left out to fit the model's window");
    }
    Ok(())
}

/// Estimated tokens a summarizer part may hold: the summarizer's window less its output limit,
/// instructions and framing, by its calibration.
pub(crate) fn summarizer_budget(shared: &Shared, provider: &str, window: u64) -> u64 {
    let calibration = match settings(shared, provider) {
        Some(s) if s.counts_like_estimates() => Calibration::exact(),
        _ => shared.calibrations.get(provider).unwrap_or_default(),
    };
    // The instructions, the part's request text and merge room for a previous summary's tags.
    let overhead = legio_core::estimate_tokens(SUMMARIZER_PROMPT) + 64;
    let output = settings(shared, provider).map_or(0, ProviderSettings::max_output_tokens);
    summarizer_part_budget(window, output, overhead, &calibration)
}

/// Tells whoever listens that a compaction failed and the turn goes on without it.
pub(crate) fn compaction_failed(progress: Option<&ProgressSink>, agent: &AgentName, reason: &str) {
    if let Some(progress) = progress {
        let _ = progress.send(Progress::CompactionFailed {
            agent: agent.clone(),
            reason: reason.to_owned(),
        });
    }
}
