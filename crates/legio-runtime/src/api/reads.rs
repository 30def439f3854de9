//! What a runtime reads for its host and operators, writing nothing: a conversation's history
//! as an agent may see it, what an agent's next turn would be sent ([`Runtime::next_context`],
//! the operator's [`Runtime::context_report`]), and a provider's history capability.

use std::sync::Arc;

use legio_config::Role;
use legio_core::{AgentName, ConversationKey, Record, Seq, Viewer};
use legio_ops::{preview_turn, ContextReport, TurnInputs, TurnPreview};

use crate::error::RuntimeError;
use crate::names::IntoName;
use crate::runtime::Runtime;

impl Runtime {
    /// The last `limit` messages of a conversation, as `agent` may see them (`None`: everything,
    /// the user's and orchestrator's view).
    pub async fn history(
        &self,
        conversation: impl IntoName<ConversationKey>,
        agent: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Record>, RuntimeError> {
        let key = conversation.into_name()?;
        let spec = match agent {
            Some(name) => {
                let name = self.roster_agent(name)?;
                self.shared.spec(&name).cloned()
            }
            None => None,
        };
        self.catch_up(&key).await?;
        self.shared
            .read(move |log| {
                let viewer = spec.as_ref().map_or(Viewer::Everything, |s| s.viewer());
                log.visible_window(&key, viewer, limit)
            })
            .await
    }

    /// What `agent`'s provider would receive for its next turn in `conversation` had the log
    /// ended at `at` (default: now): the same decision and planner the agent actor uses
    /// ([`preview_turn`]), with the agent's current prompt and its provider's capability. Never
    /// calls a provider; writes nothing.
    pub async fn next_context(
        &self,
        conversation: impl IntoName<ConversationKey>,
        agent: impl IntoName<AgentName>,
        at: Option<Seq>,
    ) -> Result<TurnPreview, RuntimeError> {
        let key = conversation.into_name()?;
        let spec = self.shared.roster_spec(&agent.into_name()?)?.clone();
        let history = self.shared.provider(&spec)?.capabilities().history;
        let (_, prompt_hash) = self.shared.system_prompt(&spec)?;
        self.catch_up(&key).await?;
        let shared = Arc::clone(&self.shared);
        // A session this process opened is live; one open from before it started was left by a
        // dead process (a graceful stop suspends them). On a cluster another node may hold it.
        let live_since = Some(match self.cluster {
            Some(_) => Seq::ZERO,
            None => self.started_at,
        });
        tokio::task::spawn_blocking(move || {
            let at = at.unwrap_or_else(|| shared.log.last_seq());
            let inputs = TurnInputs {
                spec: &spec,
                conversation: &key,
                history,
                settings: &shared.config.runtime,
                prompt_hash: &prompt_hash,
                live_session: None,
                new_message: at,
            };
            preview_turn(shared.log.as_ref(), inputs, at, live_since).map_err(RuntimeError::from)
        })
        .await
        .map_err(|e| RuntimeError::Cancelled {
            what: "previewing the context",
            source: legio_store::ErrorSource::new(e),
        })?
    }

    /// [`Runtime::next_context`] as the operator's report (`legio context`'s JSON). An unknown
    /// conversation is an error.
    pub async fn context_report(
        &self,
        conversation: impl IntoName<ConversationKey>,
        agent: impl IntoName<AgentName>,
        at: Option<Seq>,
    ) -> Result<ContextReport, RuntimeError> {
        let key = conversation.into_name()?;
        let agent = self.roster_agent(agent)?;
        // Before the lookup: an earlier read on this node may have left it an empty copy of a
        // conversation another node has written since.
        self.catch_up(&key).await?;
        let lookup = key.clone();
        let last = self
            .shared
            .read(move |log| {
                Ok(legio_ops::require_conversation(log, &lookup).map(|()| log.last_seq()))
            })
            .await??;
        let at = at.unwrap_or(last).min(last);
        let history = self.provider_history(&agent)?;
        let mut preview = self.next_context(&key, &agent, Some(at)).await?;
        self.fit_preview(&key, &agent, &mut preview).await?;
        Ok(legio_ops::context_report(
            &preview,
            &key,
            agent.as_str(),
            at,
            history,
        ))
    }

    /// Applies the window check to `preview` as the agent's next turn would: its provider's
    /// window, the calibration the runtime holds (or would seed from the log), the system prompt
    /// and the orchestrator's status block as it stands (not the tools: `legio_ops::fit_preview`).
    async fn fit_preview(
        &self,
        conversation: &ConversationKey,
        agent: &AgentName,
        preview: &mut TurnPreview,
    ) -> Result<(), RuntimeError> {
        let spec = self.shared.roster_spec(agent)?.clone();
        let provider = self.shared.provider(&spec)?;
        let (system_prompt, _) = self.shared.system_prompt(&spec)?;
        let status =
            (spec.role == Role::Orchestrator).then(|| self.shared.status_block(conversation));
        let fixed = legio_ops::Fixed {
            system_prompt: &system_prompt,
            status: status.as_deref(),
            tools: &[],
            tool_tokens: 0,
        };
        let calibration =
            crate::agent::fit::calibration(&self.shared, conversation, &spec, fixed.estimated())
                .await?;
        let window = provider.capabilities().context_window;
        let budget = crate::agent::fit::budget(&self.shared, &spec.provider, window, calibration);
        legio_ops::fit_preview(preview, fixed, &budget);
        Ok(())
    }

    /// The history capability of `agent`'s provider.
    pub fn provider_history(
        &self,
        agent: impl IntoName<AgentName>,
    ) -> Result<legio_core::History, RuntimeError> {
        let spec = self.shared.roster_spec(&agent.into_name()?)?;
        Ok(self.shared.provider(spec)?.capabilities().history)
    }
}
