//! Fitting every request to its provider's window (issue 17): each provider's calibration
//! (reported prompt tokens over estimated ones, learned as turns go and seeded from the agent's
//! past turns in the log on first use, so it survives restarts without state of its own), the
//! window compaction is triggered against, the check every request passes before it is sent
//! (`legio_ops::check_window`, over `legio_core::fit_to_window`), the summarizer's part budget, and the warning a failed
//! compaction gives. The turn code calls each from one line.

use std::sync::Arc;

use legio_config::AgentSpec;
use legio_core::{
    summarizer_part_budget, AgentName, Budget, BudgetError, Calibration, ConversationKey, History,
    Seq, TokenUsage, SUMMARIZER_PROMPT,
};
use legio_llm::ProviderSettings;
use legio_ops::{check_window, provider_budget, seed_calibration, Fixed, PreparedTurn};

use crate::error::RuntimeError;
use crate::progress::{Progress, ProgressSink};
use crate::shared::Shared;

fn settings<'a>(shared: &'a Shared, provider: &str) -> Option<&'a ProviderSettings> {
    shared.config.providers.get(provider)
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
                seed_calibration(log, &conversation, &agent, fixed_tokens, &mut c)?;
            }
            Ok(c)
        })
        .await?;
    shared.calibrations.set(&spec.provider, seeded);
    Ok(shared.calibrations.get(&spec.provider).unwrap_or(seeded))
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

pub(crate) fn budget(
    shared: &Shared,
    provider: &str,
    window: u64,
    calibration: Calibration,
) -> Budget {
    provider_budget(settings(shared, provider), window, calibration)
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
    fixed: Fixed<'_>,
    question: Seq,
    turn: &mut PreparedTurn,
) -> Result<(), BudgetError> {
    let budget = budget(shared, &spec.provider, window, calibration);
    let fitted = check_window(turn, fixed, question, &budget)?;
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
