//! `legio approve` and `legio deny`: answer a tool call that paused its turn because its tool
//! needs a person's yes (`approval = [...]` under `[runtime]` or `[agents.NAME]`). Offline the
//! legion opens here and the turn goes on in this process; with `--server` the running server
//! answers (`POST /sessions/{id}/approvals/{call_id}`, an operator token). A second answer to the
//! same call fails naming the first. Exit code 1 if the answer was refused or the continued turn
//! failed.

use std::process::ExitCode;

use anyhow::Result;
use serde_json::{json, Value};

use crate::invocation::Context;
#[cfg(feature = "runtime")]
use crate::{agents, common};

/// Arguments of `legio approve`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  legio inspect approvals --conversation cli:local     # find the call id
  legio approve --conversation cli:local call_7f3a      # the beginning of an id is enough
  legio --server http://127.0.0.1:7878 approve --conversation web:42 call_7f3a")]
pub struct ApproveArgs {
    /// The conversation the call was made in.
    #[arg(long, default_value = "cli:local")]
    conversation: String,
    /// Why (recorded with the answer).
    #[arg(long)]
    reason: Option<String>,
    /// Print the answer as JSON (`call_id`, `decision`, `still_waiting`, `continued`).
    #[arg(long)]
    json: bool,
    /// The call's id as recorded, or its beginning (the short id the pause showed).
    call_id: String,
}

/// Arguments of `legio deny`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  legio deny --conversation cli:local call_7f3a --reason \"not that account\"
The model gets an error result saying the call was denied, by whom, and the reason.")]
pub struct DenyArgs {
    /// The conversation the call was made in.
    #[arg(long, default_value = "cli:local")]
    conversation: String,
    /// Why: recorded, and told to the model in the call's error result.
    #[arg(long)]
    reason: Option<String>,
    /// Print the answer as JSON.
    #[arg(long)]
    json: bool,
    /// The call's id as recorded, or its beginning.
    call_id: String,
}

/// Runs `legio approve`.
pub fn approve(context: &Context, args: ApproveArgs) -> Result<ExitCode> {
    let answer = Answer {
        conversation: args.conversation,
        call_id: args.call_id,
        approve: true,
        reason: args.reason,
    };
    answer.run(context, args.json)
}

/// Runs `legio deny`.
pub fn deny(context: &Context, args: DenyArgs) -> Result<ExitCode> {
    let answer = Answer {
        conversation: args.conversation,
        call_id: args.call_id,
        approve: false,
        reason: args.reason,
    };
    answer.run(context, args.json)
}

struct Answer {
    conversation: String,
    call_id: String,
    approve: bool,
    reason: Option<String>,
}

impl Answer {
    fn run(self, context: &Context, as_json: bool) -> Result<ExitCode> {
        let answer = match context.remote()? {
            Some(remote) => remote.post_json(
                &format!("/sessions/{}/approvals/{}", self.conversation, self.call_id),
                &json!({
                    "decision": if self.approve { "approve" } else { "deny" },
                    "reason": self.reason,
                }),
            )?,
            None => local(context, &self)?,
        };
        if as_json {
            outln!("{}", serde_json::to_string_pretty(&answer)?);
        } else {
            print(&answer);
        }
        let failed = answer["continued"]["error"].is_string();
        Ok(if failed {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        })
    }
}

fn print(answer: &Value) {
    let text = |key: &str| answer[key].as_str().unwrap_or_default().to_owned();
    outln!(
        "{} call {} ({}) {}",
        text("agent"),
        text("call_id"),
        text("tool"),
        text("decision")
    );
    let waiting: Vec<&str> = answer["still_waiting"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if !waiting.is_empty() {
        outln!(
            "the turn goes on once these are answered too: {}",
            waiting.join(", ")
        );
    }
    let continued = &answer["continued"];
    if continued.is_object() {
        outln!("── {} ──", continued["agent"].as_str().unwrap_or_default());
        match (continued["content"].as_str(), continued["error"].as_str()) {
            (_, Some(error)) => outln!("(error) {error}"),
            (Some(text), None) => outln!("{text}"),
            (None, None) => outln!("(no reply)"),
        }
    }
}

/// The answer through the legion in the configuration, as the server's JSON.
#[cfg(feature = "runtime")]
fn local(context: &Context, answer: &Answer) -> Result<Value> {
    use legio_core::ApprovalDecision;
    common::tokio()?.block_on(async {
        let runtime = agents::open_runtime(context).await?;
        let decision = if answer.approve {
            ApprovalDecision::Approved
        } else {
            ApprovalDecision::Denied
        };
        let result = runtime
            .answer_approval(
                answer.conversation.as_str(),
                &answer.call_id,
                decision,
                "cli",
                answer.reason.clone(),
            )
            .await;
        runtime.shutdown().await?;
        let answer = result?;
        let continued = answer.continued.as_ref().map(|reply| {
            json!({
                "agent": reply.agent.as_str(),
                "content": reply.text(),
                "seq": reply.seq().map(|s| s.get()),
                "error": reply.error(),
                "error_kind": reply.error_kind().map(|k| k.as_str()),
            })
        });
        Ok(json!({
            "call_id": answer.call_id,
            "agent": answer.agent.as_str(),
            "tool": answer.tool,
            "decision": answer.decision.as_str(),
            "still_waiting": answer.still_waiting,
            "continued": continued,
        }))
    })
}

/// Without the `runtime` feature this `legio` has no legion to run: only `--server` works.
#[cfg(not(feature = "runtime"))]
fn local(_context: &Context, _answer: &Answer) -> Result<Value> {
    anyhow::bail!("this legio was built without the `runtime` feature; answer through a server: legio --server URL approve|deny ...")
}
