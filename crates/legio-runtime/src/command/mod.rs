//! The runtime's verbs on a conversation as commands: each a request type with its answer type
//! ([`Command`]), in a file of its own, run by one generic path ([`Runtime::run`]): here, or on
//! the node that runs the conversation (placement/), which serves it with [`serve`]. Nothing
//! else knows a request crossed the bus: a command's `run` gets a [`Here`] guard, which only the
//! placement gives out, once the conversation runs on this node.
//!
//! A new verb is a file here (its request, answer and `run`) and one arm in [`serve`].

mod activities;
mod answer_approval;
mod declare_tools;
mod declared_tools;
mod follow_results;
mod heartbeat;
mod post;
mod reset;
mod submit_results;
mod tool_call;

use std::future::Future;

use legio_core::ConversationKey;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{ErrorCode, RuntimeError};
pub(crate) use crate::placement::Place;
use crate::placement::{Here, Parcel, Placed};
use crate::progress::ProgressSink;
use crate::runtime::Runtime;

pub(crate) use activities::Activities;
pub(crate) use answer_approval::AnswerApproval;
pub use answer_approval::ApprovalAnswer;
pub(crate) use declare_tools::DeclareTools;
pub(crate) use declared_tools::DeclaredTools;
pub(crate) use follow_results::FollowResults;
pub(crate) use heartbeat::Heartbeat;
pub(crate) use post::Post;
pub(crate) use reset::Reset;
pub(crate) use submit_results::SubmitResults;
pub(crate) use tool_call::ToolCall;

/// A verb on one conversation: what crosses the node bus (itself, then its answer).
pub(crate) trait Command: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// What it answers.
    type Answer: Serialize + DeserializeOwned + Send + 'static;
    /// Its name on the node bus and in metrics.
    const KIND: &'static str;
    /// Where it runs.
    const PLACE: Place;
    /// Whether its progress goes back to a caller on another node (a turn's steps).
    const STREAMS: bool = false;

    /// The conversation it is about.
    fn conversation(&self) -> &ConversationKey;

    /// Runs it on this node, where the conversation runs (`here` says so: keep it until the
    /// command ended, so the conversation is not released under it).
    fn run(
        self,
        runtime: &Runtime,
        here: Here,
        progress: Option<ProgressSink>,
    ) -> impl Future<Output = Result<Self::Answer, RuntimeError>> + Send;
}

impl Runtime {
    /// Runs `command` where its conversation runs: here, or on the node that owns it (carried
    /// there over the bus, its progress relayed to `progress`).
    pub(crate) async fn run<C: Command>(
        &self,
        command: C,
        progress: Option<ProgressSink>,
    ) -> Result<C::Answer, RuntimeError> {
        let here = match self.cluster() {
            None => Here::alone(),
            Some(cluster) => {
                let relay = progress.as_ref().filter(|_| C::STREAMS);
                let body = || serde_json::to_value(&command);
                let parcel = Parcel {
                    kind: C::KIND,
                    place: C::PLACE,
                    conversation: command.conversation(),
                    body: &body,
                };
                match cluster.place(&parcel, relay).await {
                    Placed::Here(here) => here,
                    Placed::There(answer) => return answer,
                }
            }
        };
        command.run(self, here, progress).await
    }
}

/// Serves a command another node sent here (its `kind` and its JSON `body`) and answers its
/// answer's JSON: one arm per verb.
pub(crate) async fn serve(
    runtime: &Runtime,
    kind: &str,
    body: serde_json::Value,
    progress: Option<ProgressSink>,
) -> Result<serde_json::Value, RuntimeError> {
    match kind {
        Post::KIND => serve_one::<Post>(runtime, body, progress).await,
        Reset::KIND => serve_one::<Reset>(runtime, body, progress).await,
        Heartbeat::KIND => serve_one::<Heartbeat>(runtime, body, progress).await,
        SubmitResults::KIND => serve_one::<SubmitResults>(runtime, body, progress).await,
        FollowResults::KIND => serve_one::<FollowResults>(runtime, body, progress).await,
        ToolCall::KIND => serve_one::<ToolCall>(runtime, body, progress).await,
        Activities::KIND => serve_one::<Activities>(runtime, body, progress).await,
        DeclareTools::KIND => serve_one::<DeclareTools>(runtime, body, progress).await,
        DeclaredTools::KIND => serve_one::<DeclaredTools>(runtime, body, progress).await,
        AnswerApproval::KIND => serve_one::<AnswerApproval>(runtime, body, progress).await,
        other => Err(unreadable(format!(
            "a command this node does not know: {other:?}"
        ))),
    }
}

/// Runs one command sent here, where it must run now (never sent on: see [`Place`]).
async fn serve_one<C: Command>(
    runtime: &Runtime,
    body: serde_json::Value,
    progress: Option<ProgressSink>,
) -> Result<serde_json::Value, RuntimeError> {
    let command: C = serde_json::from_value(body)
        .map_err(|e| unreadable(format!("an unreadable {}: {e}", C::KIND)))?;
    let here = match runtime.cluster() {
        Some(cluster) => {
            let conversation = command.conversation();
            cluster.served_here(C::PLACE, conversation).await?
        }
        None => Here::alone(),
    };
    let answer = command
        .run(runtime, here, progress.filter(|_| C::STREAMS))
        .await?;
    serde_json::to_value(answer).map_err(|e| unreadable(format!("an unwritable answer: {e}")))
}

fn unreadable(message: String) -> RuntimeError {
    RuntimeError::Remote {
        node: "the forwarding node".into(),
        code: ErrorCode::Internal,
        message,
    }
}
