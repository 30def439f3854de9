//! Running a compaction before a turn: the summarizer calls (one per part that fits the
//! summarizer's window with its instructions and output limit, then a merge), and the `SummaryRecorded` event. A failed or empty
//! summarization records nothing: the turn keeps its uncompacted context (never lose context
//! because compaction failed), with a warning and a metric.

use legio_core::{
    estimate_tokens, finish_summary, merge_prompt, part_prompt, split_for_summarizer, AgentName,
    Audience, ContextItem, ContextPlan, ConversationKey, DeliveryMode, Event, Message, MessageId,
    Participant, Seq, SummaryRecorded, SUMMARIZER_PROMPT,
};
use legio_llm::{Provider, ProviderRequest};

use crate::clock::now;
use crate::error::RuntimeError;
use crate::metrics as m;
use crate::shared::Shared;
use legio_config::AgentSpec;
use legio_ops::CompactionJob;

/// Why a compaction produced no summary.
#[derive(Debug)]
enum Failure {
    /// The summarizer failed or timed out.
    Call(String),
    /// It answered with nothing.
    Empty,
}

/// Summarizes `job` for `agent` and records the summary. Returns `Ok(Ok(()))` when a summary
/// was recorded, `Ok(Err(why))` when none was (the turn goes on without it); `Err` only when
/// the log itself fails.
pub(crate) async fn compact(
    shared: &Shared,
    conversation: &ConversationKey,
    spec: &AgentSpec,
    job: CompactionJob,
) -> Result<Result<(), String>, RuntimeError> {
    let agent = &spec.name;
    let name = spec.summarizer.as_deref().unwrap_or(&spec.provider);
    let summarizer =
        shared
            .providers
            .get(name)
            .cloned()
            .ok_or_else(|| RuntimeError::ProviderUnavailable {
                agent: agent.to_string(),
                provider: name.to_owned(),
            })?;
    match summarize(shared, conversation, agent, name, summarizer.as_ref(), &job).await {
        Ok(text) => {
            let tokens_after = estimate_tokens(&text) + job.kept_tokens;
            shared
                .append(vec![Event::SummaryRecorded(SummaryRecorded {
                    conversation: conversation.clone(),
                    agent: agent.clone(),
                    at: now(),
                    covers_up_to: job.covers_up_to,
                    text,
                    tokens_before: job.tokens_before,
                    tokens_after,
                })])
                .await?;
            metrics::counter!(m::COMPACTIONS, "agent" => agent.to_string(), "outcome" => "ok")
                .increment(1);
            tracing::info!(%agent, %conversation, covers_up_to = %job.covers_up_to, tokens_before = job.tokens_before, tokens_after, "context compacted");
            Ok(Ok(()))
        }
        Err(failure) => {
            let (outcome, reason) = match failure {
                Failure::Call(e) => ("failed", e),
                Failure::Empty => ("empty", "the summarizer answered with nothing".to_owned()),
            };
            metrics::counter!(m::COMPACTIONS, "agent" => agent.to_string(), "outcome" => outcome)
                .increment(1);
            tracing::warn!(%agent, %conversation, %reason, "compaction failed; the turn keeps its uncompacted context");
            Ok(Err(reason))
        }
    }
}

async fn summarize(
    shared: &Shared,
    conversation: &ConversationKey,
    agent: &AgentName,
    summarizer_name: &str,
    summarizer: &dyn Provider,
    job: &CompactionJob,
) -> Result<String, Failure> {
    let window = summarizer.capabilities().context_window;
    let budget = crate::agent::fit::summarizer_budget(shared, summarizer_name, window);
    let split = split_for_summarizer(&job.items, job.previous.as_ref(), budget);
    let count = split.parts.len();
    let mut partials = Vec::with_capacity(count);
    for (index, part) in split.parts.iter().enumerate() {
        let prompt = part_prompt(job.previous.as_ref(), part, index, count);
        partials.push(
            call(
                shared,
                conversation,
                agent,
                summarizer,
                prompt,
                job.covers_up_to,
            )
            .await?,
        );
    }
    let text = match partials.len() {
        0 => job
            .previous
            .as_ref()
            .map(|p| p.text.clone())
            .unwrap_or_default(),
        1 => partials.remove(0),
        _ => {
            call(
                shared,
                conversation,
                agent,
                summarizer,
                merge_prompt(&partials),
                job.covers_up_to,
            )
            .await?
        }
    };
    if text.trim().is_empty() && split.left_out.is_empty() {
        return Err(Failure::Empty);
    }
    Ok(finish_summary(&text, &split.left_out))
}

/// One summarizer call: no history, no session to resume (a summarizer call never touches the
/// agent's provider session), the runtime's turn timeout.
async fn call(
    shared: &Shared,
    conversation: &ConversationKey,
    agent: &AgentName,
    summarizer: &dyn Provider,
    prompt: String,
    up_to: Seq,
) -> Result<String, Failure> {
    let at = now();
    let estimated_tokens = estimate_tokens(&prompt);
    let message = Message::text(
        MessageId(uuid::Uuid::nil()),
        conversation.clone(),
        Participant::User,
        Audience::agent(agent.clone()),
        prompt,
        at,
    );
    let request = ProviderRequest {
        conversation: conversation.clone(),
        agent: agent.clone(),
        system_prompt: SUMMARIZER_PROMPT.to_owned(),
        resume: None,
        plan: ContextPlan {
            mode: DeliveryMode::Full,
            notice: None,
            history: Vec::new(),
            new_message: ContextItem {
                seq: up_to,
                message,
                redelivered: false,
            },
            up_to,
            estimated_tokens,
            summary: None,
        },
        status: None,
        deltas: None,
        tools: Default::default(),
        mcp: None,
    };
    let timeout = shared.config.runtime.turn_timeout;
    match tokio::time::timeout(timeout, summarizer.call(request)).await {
        Ok(Ok(reply)) if reply.text.trim().is_empty() => Err(Failure::Empty),
        Ok(Ok(reply)) => Ok(reply.text),
        Ok(Err(e)) => Err(Failure::Call(e.to_string())),
        Err(_) => Err(Failure::Call(format!(
            "no answer within {} s",
            timeout.as_secs_f64()
        ))),
    }
}
