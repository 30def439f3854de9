//! Posting a message, the one way the server, the CLI and an embedding host do it:
//! [`Runtime::posting`] gives a [`Posting`], which says who sends the message, whom it is for,
//! the tools the host runs, its idempotency key and where its progress goes; `send` posts it
//! (the `post` command, command/post.rs). `post`, `post_as`, `post_streaming`, `post_once` and
//! `post_host_turn` are shorthands of it.

use legio_core::{AgentName, ConversationKey, IdempotencyKey, Participant};

use crate::command::Post;
use crate::error::RuntimeError;
use crate::names::IntoName;
use crate::progress::ProgressSink;
use crate::reply::Posted;
use crate::runtime::Runtime;
use crate::tools::host_calls::HostTurn;
use crate::tools::host_desk::{check_host_tools, turn_tools};
use crate::tools::memory::ToolSpec;

/// A message about to be posted ([`Runtime::posting`]); nothing happens until [`Posting::send`].
#[must_use = "a posting does nothing until it is sent"]
pub struct Posting<'r> {
    runtime: &'r Runtime,
    conversation: Result<ConversationKey, RuntimeError>,
    text: String,
    sender: Result<Participant, RuntimeError>,
    to: Option<Result<AgentName, RuntimeError>>,
    host_tools: Option<Vec<ToolSpec>>,
    instructions: Option<String>,
    key: Option<IdempotencyKey>,
    progress: Option<ProgressSink>,
}

impl std::fmt::Debug for Posting<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Posting")
            .field("conversation", &self.conversation)
            .field("sender", &self.sender)
            .field("to", &self.to)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// A message of the user's with `text` to `conversation` (a `ConversationKey`, or its
    /// text), addressed by its mentions: no mention goes to the orchestrator, `@a @b` to each
    /// named agent in parallel, `@all` to every agent. Say more with the [`Posting`]'s methods,
    /// then [`Posting::send`] it.
    pub fn posting(&self, conversation: impl IntoName<ConversationKey>, text: &str) -> Posting<'_> {
        Posting {
            runtime: self,
            conversation: Self::host_conversation(conversation),
            text: text.to_owned(),
            sender: Ok(Participant::User),
            to: None,
            host_tools: None,
            instructions: None,
            key: None,
            progress: None,
        }
    }

    /// Posts a user message: appended durably, then dispatched. Answers one reply per addressed
    /// agent, in roster order (a failed agent's reply is its error), and the `@handles` that named
    /// no agent. `conversation`: a `ConversationKey`, or its text.
    pub async fn post(
        &self,
        conversation: impl IntoName<ConversationKey>,
        text: &str,
    ) -> Result<Posted, RuntimeError> {
        self.posting(conversation, text).send().await
    }

    /// Posts a message from `sender`: the user, or an agent of the roster (a host relaying what
    /// one agent says to others; as a `Participant` or its text, `user` or the agent's name).
    /// Mentions address agents as in [`Runtime::post`]; without one, a specialist's message goes
    /// to the orchestrator, and the orchestrator's to the user (no turn). The sender never gets a
    /// turn for its own message.
    pub async fn post_as(
        &self,
        conversation: impl IntoName<ConversationKey>,
        sender: impl IntoName<Participant>,
        text: &str,
    ) -> Result<Posted, RuntimeError> {
        self.posting(conversation, text).sender(sender).send().await
    }

    /// Like [`Runtime::post_as`], reporting each addressed agent's progress to `progress` as it
    /// happens: started, text fragments where the provider streams, done (see
    /// [`crate::Progress`]). Nothing is sent when the post is refused (an error) or addresses no
    /// agent.
    pub async fn post_streaming(
        &self,
        conversation: impl IntoName<ConversationKey>,
        sender: impl IntoName<Participant>,
        text: &str,
        progress: ProgressSink,
    ) -> Result<Posted, RuntimeError> {
        let posting = self.posting(conversation, text).sender(sender);
        posting.progress(progress).send().await
    }

    /// Like [`Runtime::post_streaming`] (with `progress` or without), stored at most once per
    /// `key` in the conversation, on whichever node: a retry of a post whose answer was lost (a
    /// timeout, a node that died) stores nothing new and answers with `replayed` set; an agent
    /// that has answered the message gives that reply again (waiting for it if its turn still
    /// runs), one that has not answers now, unless it has since replied to a later message (its
    /// reply is then the error [`crate::TurnErrorKind::Unanswered`]). The same key with another
    /// sender or text is refused ([`RuntimeError::IdempotencyKeyReused`]). See keyed.rs.
    pub async fn post_once(
        &self,
        conversation: impl IntoName<ConversationKey>,
        sender: impl IntoName<Participant>,
        text: &str,
        key: IdempotencyKey,
        progress: Option<ProgressSink>,
    ) -> Result<Posted, RuntimeError> {
        let posting = self.posting(conversation, text).sender(sender).key(key);
        posting.progress(progress).send().await
    }

    /// Posts a host's message with tools the host runs (tools/host_desk.rs): the conversation's
    /// declared tools and the turn's own are offered to the addressed agents; a model's calls of
    /// them reach `progress` as [`crate::Progress::ToolCallsRequired`] and wait for
    /// [`Runtime::submit_tool_results`] (or `runtime.host_tool_timeout_seconds`). With `to`, the
    /// message goes to that agent only, whatever its mentions. Invalid tools refuse the message
    /// (nothing is stored).
    pub async fn post_host_turn(
        &self,
        conversation: impl IntoName<ConversationKey>,
        turn: HostTurn,
        progress: ProgressSink,
    ) -> Result<Posted, RuntimeError> {
        let mut posting = self.posting(conversation, &turn.text).sender(turn.sender);
        posting.to = turn.to.map(Ok);
        posting.key = turn.idempotency_key;
        posting
            .host_tools(turn.tools)
            .progress(progress)
            .send()
            .await
    }
}

impl Posting<'_> {
    /// Sent by `sender`: the user (the default), or an agent of the roster (a host relaying
    /// what one agent says to others), as a `Participant` or its text. The sender never gets a
    /// turn for its own message, and without a mention a specialist's message goes to the
    /// orchestrator, the orchestrator's to the user (no turn).
    pub fn sender(mut self, sender: impl IntoName<Participant>) -> Self {
        self.sender = sender.into_name().map_err(RuntimeError::from);
        self
    }

    /// For `agent` only, whatever the message's mentions.
    pub fn to(mut self, agent: impl IntoName<AgentName>) -> Self {
        self.to = Some(agent.into_name().map_err(RuntimeError::from));
        self
    }

    /// A host's turn with tools the host runs: these and the conversation's declared ones are
    /// offered to the addressed agents; a model's calls of them reach the progress sink as
    /// [`crate::Progress::ToolCallsRequired`] and wait for [`Runtime::submit_tool_results`] (or
    /// `runtime.host_tool_timeout_seconds`). Invalid tools refuse the message (nothing is
    /// stored). Without a progress sink nobody could run them, and none is offered.
    pub fn host_tools(mut self, tools: Vec<ToolSpec>) -> Self {
        self.host_tools = Some(tools);
        self
    }

    /// The host's instructions for this turn of the agent it is for (with [`Posting::to`]):
    /// recorded in the log right before the message (an `InstructionsGiven` event) and sent in
    /// front of the message's text in each step of that turn, never in a later turn. `None` or
    /// blank text gives none.
    pub fn instructions(mut self, instructions: impl Into<Option<String>>) -> Self {
        self.instructions = instructions.into().filter(|i| !i.trim().is_empty());
        self
    }

    /// With a key, stored at most once per `key` in the conversation (see
    /// [`Runtime::post_once`]); `None` leaves the posting as it was.
    pub fn key(mut self, key: impl Into<Option<IdempotencyKey>>) -> Self {
        self.key = key.into().or(self.key);
        self
    }

    /// Each addressed agent's progress goes to `progress` as it happens (see
    /// [`crate::Progress`]); nothing is sent when the post is refused or addresses no agent.
    /// `None` leaves the posting as it was.
    pub fn progress(mut self, progress: impl Into<Option<ProgressSink>>) -> Self {
        self.progress = progress.into().or(self.progress);
        self
    }

    /// The message as a host's turn says it: its sender, the agent it is for (if it names
    /// one), its tools and its idempotency key (see [`Posting::host_tools`]).
    pub fn host_turn(self, turn: HostTurn) -> Self {
        let mut posting = self.sender(turn.sender).key(turn.idempotency_key);
        posting.to = turn.to.map(Ok);
        posting.host_tools(turn.tools)
    }

    /// Posts the message: appended durably, then dispatched (on a cluster, on the node that
    /// owns the conversation). Answers one reply per addressed agent, in roster order (a failed
    /// agent's reply is its error), and the `@handles` that named no agent.
    pub async fn send(self) -> Result<Posted, RuntimeError> {
        let runtime = self.runtime;
        let conversation = self.conversation?;
        let tools = match self.host_tools {
            Some(tools) => {
                check_host_tools(&tools, &runtime.shared.tools)?;
                let declared = runtime.declared_tools(&conversation).await?;
                turn_tools(declared, tools).map_or_else(Vec::new, |t| t.to_vec())
            }
            None => Vec::new(),
        };
        let to = match self.to {
            Some(agent) => Some(runtime.roster_agent(agent?)?),
            None => None,
        };
        let post = Post {
            conversation,
            sender: self.sender?,
            text: self.text,
            to,
            tools,
            key: self.key,
            instructions: self.instructions,
        };
        post.check(runtime)?;
        runtime.run(post, self.progress).await
    }
}
