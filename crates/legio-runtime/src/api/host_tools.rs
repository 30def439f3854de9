//! The host's verbs on tools, as it calls them: declaring the tools it runs for a
//! conversation's turns (`declare_tools`, kept in the log), reading them back, handing over the
//! results of their calls (`submit_tool_results`, or `follow_tool_results` to follow the turn
//! from then on), and an MCP client's call of an agent's own tool (`call_tool_as`). Each runs
//! its command (command/) where the conversation runs.

use legio_core::{AgentName, ConversationKey};

use crate::command::{DeclareTools, DeclaredTools, FollowResults, SubmitResults, ToolCall};
use crate::error::RuntimeError;
use crate::names::IntoName;
use crate::progress::ProgressSink;
use crate::reply::Posted;
use crate::runtime::Runtime;
use crate::tools::host_calls::HostToolResult;
use crate::tools::host_desk::check_host_tools;
use crate::tools::memory::ToolSpec;

impl Runtime {
    /// Declares the tools the host runs for every turn it posts with
    /// [`Runtime::post_host_turn`] in `conversation` (replacing earlier ones; an empty list
    /// clears them). Recorded in the log (a `ToolsDeclared` event): the declaration outlives a
    /// restart, and on a cluster it goes to the node that owns the conversation, where every
    /// node reads it.
    pub async fn declare_tools(
        &self,
        conversation: impl IntoName<ConversationKey>,
        tools: Vec<ToolSpec>,
    ) -> Result<(), RuntimeError> {
        let key = Self::host_conversation(conversation)?;
        check_host_tools(&tools, &self.shared.tools)?;
        self.check_running()?;
        let declare = DeclareTools {
            conversation: key,
            tools,
        };
        self.run(declare, None).await
    }

    /// The tools the host declared for `conversation`, as the log has them. On a cluster, the
    /// node that holds the conversation answers (it reads them without a stream read); when
    /// nobody holds it, this node reads the log.
    pub async fn declared_tools(
        &self,
        conversation: impl IntoName<ConversationKey>,
    ) -> Result<Vec<ToolSpec>, RuntimeError> {
        let conversation = Self::host_conversation(conversation)?;
        self.run(DeclaredTools { conversation }, None).await
    }

    /// Hands the host's results to the calls waiting in `conversation` (all or none: an id that
    /// is not waiting refuses them all); each waiting turn goes on, and its progress and replies
    /// still go to the turn's caller. On a cluster, results for calls that do not wait here go
    /// to the node that owns the conversation (whose turn made the calls, when another node
    /// forwarded it there).
    pub async fn submit_tool_results(
        &self,
        conversation: impl IntoName<ConversationKey>,
        results: Vec<HostToolResult>,
    ) -> Result<(), RuntimeError> {
        let conversation = Self::host_conversation(conversation)?;
        match self.shared.host_desk.submit(&conversation, results.clone()) {
            // Calls wait only on the conversation's holder: another node's, if one holds it.
            Err(RuntimeError::NoPendingToolCall { .. }) => {
                let submit = SubmitResults {
                    conversation,
                    results,
                };
                self.run(submit, None).await
            }
            here => here,
        }
    }

    /// Hands the host's results to the calls waiting in `conversation`, as
    /// [`Runtime::submit_tool_results`] does, and takes over the turn that made the first of
    /// them: from now on that turn's progress goes to `progress` (no longer to its caller, whose
    /// post still ends with the replies), and this returns the turn's replies when it ends. For
    /// a host whose results reach another process than the turn's caller: the server of
    /// another node of a cluster behind a load balancer, or a server that no longer holds the
    /// request the turn was posted with. Of two calls handing the same results, the one whose
    /// results the calls took follows the turn; the other is refused. Should the turn call host
    /// tools again, those calls reach `progress` and a later hand-over may take the turn on
    /// (this call then fails: the turn is followed elsewhere).
    pub async fn follow_tool_results(
        &self,
        conversation: impl IntoName<ConversationKey>,
        results: Vec<HostToolResult>,
        progress: ProgressSink,
    ) -> Result<Posted, RuntimeError> {
        let conversation = Self::host_conversation(conversation)?;
        match self
            .follow_here(&conversation, results.clone(), &progress)
            .await
        {
            // Calls wait only on the conversation's holder: another node's, if one holds it.
            Err(RuntimeError::NoPendingToolCall { .. }) => {
                let follow = FollowResults {
                    conversation,
                    results,
                };
                self.run(follow, Some(progress)).await
            }
            here => here,
        }
    }

    /// Runs `agent`'s tool `name` with `arguments` (JSON text) in `conversation`, outside any
    /// turn (an MCP client's call), as a turn would: the call is recorded first as the agent's
    /// message (seen by that agent only), then the result as the message answering it. Answers
    /// the result text, or the error text the model would get. An unknown tool is an error result,
    /// as in a turn; `dispatch` waits at most `runtime.turn_timeout_seconds`. On a cluster the
    /// call runs on the node that owns the conversation (carried there if another node does;
    /// taken here if nobody does), where the agent's actors and its appends are.
    pub async fn call_tool_as(
        &self,
        conversation: &ConversationKey,
        agent: &AgentName,
        name: &str,
        arguments: &str,
    ) -> Result<Result<String, String>, RuntimeError> {
        let conversation = Self::host_conversation(conversation.clone())?;
        self.shared.roster_spec(agent)?;
        let call = ToolCall {
            conversation,
            agent: agent.clone(),
            name: name.to_owned(),
            arguments: arguments.to_owned(),
        };
        self.run(call, None).await
    }
}
