//! Heartbeat runs: an agent answers a host's text with no history (seed 004's scheduled checks).
//!
//! The request carries only the system prompt and the text: a plan with empty history (mode `full`
//! for a stateless provider, `bootstrap` for a stateful one, which starts a throwaway provider
//! session: never `resume`, so the agent's live provider session is not touched), no notice, no
//! status block. Neither the text nor the reply becomes a message: one `HeartbeatRan` event records
//! both (or the error) with the usage, so the audit is complete while no context ever shows them.
//! No session boundary is written and no checkpoint moves. It runs inside the agent actor, between
//! its turns (see `docs/runtime-semantics.md`).

use std::sync::Arc;

use legio_core::{
    estimate_tokens, plan_context, AgentName, Audience, ContextPlan, ConversationKey, Delivery,
    Event, HeartbeatRan, History, Message, MessageId, Participant, Record, Seq, TokenUsage,
};
use legio_llm::{Provider, ProviderRequest};

use crate::clock::{fresh_uuid, now};
use crate::error::RuntimeError;
use crate::reply::{AgentReply, Reply, TurnErrorKind};
use crate::shared::Shared;

/// The plan of a heartbeat: `prompt` as the only message (seq 0: it is not in the log), no history.
pub(crate) fn heartbeat_plan(
    conversation: &ConversationKey,
    agent: &AgentName,
    history: History,
    prompt: &str,
) -> ContextPlan {
    let message = Message::text(
        MessageId(fresh_uuid()),
        conversation.clone(),
        Participant::User,
        Audience::agent(agent.clone()),
        prompt,
        now(),
    );
    let new_message = Record {
        seq: Seq::ZERO,
        event: Event::MessagePosted(message),
    };
    let delivery = if history.is_stateful() {
        Delivery::Bootstrap { notice: None }
    } else {
        Delivery::Full
    };
    plan_context(agent, &delivery, &[], &new_message, 0)
}

/// Runs a heartbeat of `agent` in `conversation` and records it. A failed call is an error reply
/// (and is recorded too); only a failure to record it is an error of the runtime.
pub(crate) async fn run(
    shared: &Arc<Shared>,
    conversation: &ConversationKey,
    agent: &AgentName,
    prompt: String,
) -> AgentReply {
    match run_inner(shared, conversation, agent, prompt).await {
        Ok(reply) => reply,
        Err(e) => AgentReply::failed(agent, TurnErrorKind::Runtime, e.to_string()),
    }
}

async fn run_inner(
    shared: &Arc<Shared>,
    conversation: &ConversationKey,
    agent: &AgentName,
    prompt: String,
) -> Result<AgentReply, RuntimeError> {
    let spec = shared.roster_spec(agent)?.clone();
    let provider = shared.provider(&spec)?;
    let (system_prompt, prompt_hash) = shared.system_prompt(&spec)?;
    let plan = heartbeat_plan(
        conversation,
        agent,
        provider.capabilities().history,
        &prompt,
    );
    let request = ProviderRequest {
        conversation: conversation.clone(),
        agent: agent.clone(),
        system_prompt,
        resume: None,
        plan,
        status: None,
        deltas: None,
        // A heartbeat offers no tools: the request is the prompt and the text, nothing else.
        tools: Default::default(),
        mcp: None,
    };
    let timeout = shared.config.runtime.turn_timeout;
    let (outcome, usage) = call(provider.as_ref(), request, &prompt, timeout, agent).await;
    let range = shared
        .append(vec![Event::HeartbeatRan(HeartbeatRan {
            conversation: conversation.clone(),
            agent: agent.clone(),
            at: now(),
            prompt_hash,
            prompt,
            reply: outcome.as_ref().ok().cloned(),
            error: outcome.as_ref().err().map(|(_, e)| e.clone()),
            usage,
        })])
        .await?;
    let counted = if outcome.is_ok() { "ok" } else { "failed" };
    metrics::counter!(crate::metrics::HEARTBEATS, "agent" => agent.to_string(), "outcome" => counted)
        .increment(1);
    Ok(match outcome {
        Ok(text) => AgentReply::answered(
            agent,
            Reply {
                text,
                message_id: None,
                seq: range.first,
            },
        ),
        Err((kind, error)) => AgentReply::failed(agent, kind, error),
    })
}

/// What a heartbeat's call answered: the reply text, or the error's kind and text; the usage.
async fn call(
    provider: &dyn Provider,
    request: ProviderRequest,
    prompt: &str,
    timeout: std::time::Duration,
    agent: &AgentName,
) -> (Result<String, (TurnErrorKind, String)>, TokenUsage) {
    match tokio::time::timeout(timeout, provider.call(request)).await {
        Ok(Ok(reply)) => {
            let usage = reply.usage.unwrap_or_else(|| TokenUsage {
                input: estimate_tokens(prompt),
                output: estimate_tokens(&reply.text),
                ..Default::default()
            });
            (Ok(reply.text), usage)
        }
        Ok(Err(e)) => (
            Err((
                TurnErrorKind::Provider,
                format!("{agent} heartbeat failed: {e}"),
            )),
            TokenUsage::default(),
        ),
        Err(_) => (
            Err((
                TurnErrorKind::Timeout,
                format!(
                    "{agent} did not answer the heartbeat within {} s (runtime.turn_timeout_seconds)",
                    timeout.as_secs_f64()
                ),
            )),
            TokenUsage::default(),
        ),
    }
}
