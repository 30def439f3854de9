//! `tool_call`: an MCP client's call of one of an agent's own tools, outside any turn, run as a
//! turn would run it: the call is recorded first as the agent's message (seen by that agent
//! only), then the result as the message answering it; the answer is the result text, or the
//! error text the model would get. Runs on the conversation's owner, where the agent's actors
//! and its appends are (api/host_tools.rs is its entry).

use std::sync::Arc;
use std::time::Instant;

use legio_core::{
    AgentName, Audience, ConversationKey, Event, Message, MessageId, Part, Participant,
};
use legio_llm::ToolCallPart;
use serde::{Deserialize, Serialize};

use super::{Command, Place};
use crate::agent::dispatch::Route;
use crate::clock::{fresh_uuid, now};
use crate::error::RuntimeError;
use crate::placement::Here;
use crate::progress::ProgressSink;
use crate::runtime::Runtime;
use crate::tools::calls::{run_calls, CallContext, ToolOutcome};

/// `agent`'s tool `name` called with `arguments` (JSON text) in `conversation`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct ToolCall {
    pub(crate) conversation: ConversationKey,
    pub(crate) agent: AgentName,
    pub(crate) name: String,
    pub(crate) arguments: String,
}

impl Command for ToolCall {
    /// The result text, or the error text the model would get.
    type Answer = Result<String, String>;
    const KIND: &'static str = "tool_call";
    const PLACE: Place = Place::Owner;

    fn conversation(&self) -> &ConversationKey {
        &self.conversation
    }

    async fn run(
        self,
        runtime: &Runtime,
        _here: Here,
        _progress: Option<ProgressSink>,
    ) -> Result<Self::Answer, RuntimeError> {
        let conversation = Runtime::host_conversation(self.conversation.clone())?;
        let spec = runtime.shared.roster_spec(&self.agent)?.clone();
        let call_id = format!("mcp_{}", fresh_uuid().simple());
        let call_message = MessageId(fresh_uuid());
        let call = Part::ToolCall {
            id: call_id.clone(),
            name: self.name.clone(),
            arguments: self.arguments.clone(),
        };
        let asked = self.message(call_message, vec![call], None);
        runtime
            .shared
            .append(vec![Event::MessagePosted(asked)])
            .await?;
        let route: Arc<dyn Route> = Arc::new(runtime.route_to(&conversation));
        let ctx = CallContext {
            shared: Arc::clone(&runtime.shared),
            conversation,
            spec,
            route,
            call_message,
            deadline: Instant::now() + runtime.shared.config.runtime.turn_timeout,
            // Host tools belong to a host's turn; an MCP client calls the agent's own tools.
            host: None,
        };
        let called = ToolCallPart {
            id: call_id.clone(),
            name: self.name.clone(),
            arguments: self.arguments.clone(),
        };
        // As in a turn: on its own task, cut at the deadline, a panic an error result.
        let outcome = run_calls(&ctx, &[called])
            .await
            .pop()
            .unwrap_or_else(|| ToolOutcome::Failed("the call did not run".to_owned()));
        let result = outcome.clone().into_part(&call_id);
        let answer = self.message(MessageId(fresh_uuid()), vec![result], Some(call_message));
        runtime
            .shared
            .append(vec![Event::MessagePosted(answer)])
            .await?;
        Ok(match outcome {
            ToolOutcome::Done(text) => Ok(text),
            ToolOutcome::Failed(text) => Err(text),
        })
    }
}

impl ToolCall {
    /// The agent's own message `id` with `parts`, seen by the agent only.
    fn message(&self, id: MessageId, parts: Vec<Part>, reply_to: Option<MessageId>) -> Message {
        Message {
            id,
            conversation: self.conversation.clone(),
            sender: Participant::Agent(self.agent.clone()),
            audience: Audience::agent(self.agent.clone()),
            parts,
            reply_to,
            at: now(),
        }
    }
}
