//! The wire form of a command sent to the node that runs its conversation (JSON on the node
//! bus): the command's kind and body and whether its progress is wanted; then progress frames,
//! each a [`crate::Progress`] as it is; then the final frame, the command's answer or the error
//! with its code. The command and answer types are serde types themselves (command/), so
//! nothing here mirrors them. Only nodes of the same version talk to each other; an unknown
//! error code reads as the most general one.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{ErrorCode, RuntimeError};

/// A command as it crosses the bus.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct WireRequest {
    /// Its kind (`Command::KIND`).
    pub(super) kind: String,
    /// Whether the caller listens to its progress.
    pub(super) streamed: bool,
    /// The command itself.
    pub(super) body: serde_json::Value,
}

/// The final frame: the answer's JSON, or the error.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum WireAnswer {
    Answer(serde_json::Value),
    Error { code: ErrorCode, message: String },
}

impl WireAnswer {
    pub(super) fn of(result: Result<serde_json::Value, RuntimeError>) -> Self {
        match result {
            Ok(answer) => Self::Answer(answer),
            Err(e) => Self::Error {
                code: e.code(),
                message: e.to_string(),
            },
        }
    }

    /// The answer as its command's answer type; an error as the owner's.
    pub(super) fn into_result<A: DeserializeOwned>(self, node: &str) -> Result<A, RuntimeError> {
        match self {
            Self::Answer(answer) => {
                serde_json::from_value(answer).map_err(|e| RuntimeError::Remote {
                    node: node.to_owned(),
                    code: ErrorCode::Internal,
                    message: format!("an answer of another kind: {e}"),
                })
            }
            Self::Error { code, message } => Err(RuntimeError::Remote {
                node: node.to_owned(),
                code,
                message,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{
        Activities, AnswerApproval, Command, DeclareTools, DeclaredTools, FollowResults, Heartbeat,
        Post, Reset, SubmitResults, ToolCall,
    };
    use crate::reply::{AgentReply, Posted, Reply, TurnErrorKind};
    use crate::status::Activity;
    use crate::{HostToolCall, HostToolResult, Progress, ToolSpec};
    use legio_core::{AgentName, ConversationKey, Participant, Seq};

    /// `command` sent and read back: the same command, of its own kind.
    fn crosses<C: Command + std::fmt::Debug>(command: C) {
        let wire = WireRequest {
            kind: C::KIND.to_owned(),
            streamed: C::STREAMS,
            body: serde_json::to_value(&command).unwrap(),
        };
        let bytes = serde_json::to_vec(&wire).unwrap();
        let back: WireRequest = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back.kind, C::KIND);
        let read: C = serde_json::from_value(back.body).unwrap();
        assert_eq!(format!("{read:?}"), format!("{command:?}"));
    }

    /// `answer` sent as the final frame and read back as its type.
    fn answers<A>(answer: A)
    where
        A: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        let frame = WireAnswer::of(Ok(serde_json::to_value(&answer).unwrap()));
        let bytes = serde_json::to_vec(&frame).unwrap();
        let back: WireAnswer = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back.into_result::<A>("n1").unwrap(), answer);
    }

    fn tool() -> ToolSpec {
        ToolSpec {
            name: "lookup".into(),
            description: "finds a fact".into(),
            parameters: serde_json::json!({"type": "object", "properties": {}}),
        }
    }

    #[test]
    fn every_command_crosses_the_wire_as_it_was() {
        let conversation = ConversationKey::new("w:1").unwrap();
        let agent = AgentName::new("ann").unwrap();
        let result = |id: &str, is_error| HostToolResult {
            call_id: id.into(),
            content: "the fact".into(),
            is_error,
        };
        crosses(Post {
            conversation: conversation.clone(),
            sender: Participant::User,
            text: "hi @ann".into(),
            to: None,
            tools: Vec::new(),
            key: None,
            instructions: None,
        });
        crosses(Post {
            conversation: conversation.clone(),
            sender: Participant::User,
            text: "look it up".into(),
            to: Some(agent.clone()),
            tools: vec![tool()],
            key: Some(legio_core::IdempotencyKey::new("retry-1").unwrap()),
            instructions: Some("answer in one line".into()),
        });
        crosses(Reset {
            conversation: conversation.clone(),
            agent: agent.clone(),
        });
        crosses(Heartbeat {
            conversation: conversation.clone(),
            agent,
            text: "still there?".into(),
        });
        crosses(SubmitResults {
            conversation: conversation.clone(),
            results: vec![result("call-1", true)],
        });
        crosses(FollowResults {
            conversation: conversation.clone(),
            results: vec![result("call-2", false)],
        });
        crosses(ToolCall {
            conversation: conversation.clone(),
            agent: AgentName::new("bob").unwrap(),
            name: "get_history".into(),
            arguments: r#"{"limit": 3}"#.into(),
        });
        crosses(Activities {
            conversation: conversation.clone(),
        });
        crosses(DeclaredTools {
            conversation: conversation.clone(),
        });
        crosses(DeclareTools {
            conversation: conversation.clone(),
            tools: vec![tool()],
        });
        crosses(AnswerApproval {
            conversation,
            call_id: "call_pay".into(),
            decision: legio_core::ApprovalDecision::Denied,
            by: "http:ops".into(),
            reason: Some("not today".into()),
        });
    }

    #[test]
    fn every_answer_and_an_error_cross_the_wire_typed() {
        let agent = AgentName::new("ann").unwrap();
        answers(Posted {
            replies: vec![
                AgentReply::answered(
                    &agent,
                    Reply {
                        text: "hi".into(),
                        message_id: None,
                        seq: Seq(7),
                    },
                ),
                AgentReply::failed(&agent, TurnErrorKind::Moved, "moved"),
            ],
            unknown_mentions: vec!["@zed".into()],
            replayed: true,
        });
        answers(());
        answers(AgentReply::failed(
            &agent,
            TurnErrorKind::Provider,
            "no model",
        ));
        answers::<Result<String, String>>(Ok("three messages".into()));
        answers::<Result<String, String>>(Err("no such tool".into()));
        answers(vec![(agent.clone(), Activity::Working)]);
        answers(vec![tool()]);
        let error = RuntimeError::EmptyMessage;
        let frame = WireAnswer::of(Err(error.clone()));
        let back: WireAnswer =
            serde_json::from_slice(&serde_json::to_vec(&frame).unwrap()).unwrap();
        let err = back.into_result::<()>("n1").unwrap_err();
        assert_eq!(err.code(), ErrorCode::EmptyMessage);
        assert!(err.to_string().contains(&error.to_string()), "{err}");
    }

    #[test]
    fn every_progress_step_crosses_the_wire_as_it_was() {
        let agent = AgentName::new("ann").unwrap();
        let reply = AgentReply::failed(&agent, TurnErrorKind::ToolSteps, "too many steps");
        let steps = [
            Progress::AgentStarted {
                agent: agent.clone(),
            },
            Progress::Delta {
                agent: agent.clone(),
                text: "hel".into(),
            },
            Progress::ToolCallsRequired {
                agent: agent.clone(),
                calls: vec![HostToolCall {
                    agent: agent.clone(),
                    id: "call-1".into(),
                    name: "lookup".into(),
                    arguments: "{}".into(),
                }],
            },
            Progress::AgentDone { reply },
        ];
        for step in steps {
            let back: Progress =
                serde_json::from_slice(&serde_json::to_vec(&step).unwrap()).unwrap();
            assert_eq!(back, step);
        }
    }

    /// A unit variant's serde name.
    fn name<T: Serialize>(value: &T) -> String {
        serde_json::to_value(value)
            .unwrap()
            .as_str()
            .unwrap()
            .to_owned()
    }

    #[test]
    fn codes_and_kinds_keep_their_names_and_unknown_ones_read_as_the_most_general() {
        assert_eq!(name(&ErrorCode::TooManyOpenFiles), "too_many_open_files");
        assert_eq!(name(&ErrorCode::NoPendingToolCall), "no_pending_tool_call");
        assert_eq!(name(&TurnErrorKind::ShutDown), "shut_down");
        assert_eq!(name(&TurnErrorKind::ContextTooLarge), "context_too_large");
        let code: ErrorCode = serde_json::from_str(r#""a_code_from_later""#).unwrap();
        assert_eq!(code, ErrorCode::Internal);
        let kind: TurnErrorKind = serde_json::from_str(r#""a_kind_from_later""#).unwrap();
        assert_eq!(kind, TurnErrorKind::Runtime);
        // The storage failures keep their cause across nodes (they were `internal` once).
        for code in [
            ErrorCode::StorageFull,
            ErrorCode::TooManyOpenFiles,
            ErrorCode::StorageFailed,
            ErrorCode::ClusterUnavailable,
        ] {
            let back: ErrorCode =
                serde_json::from_str(&serde_json::to_string(&code).unwrap()).unwrap();
            assert_eq!(back, code);
        }
    }
}
