//! The wire form of a forwarded request (JSON on the node bus): the parsed request (a post, a
//! reset, a heartbeat, a host's tool results, an MCP client's tool call, a status's question of
//! what the agents are doing), a post's progress and the typed answer, each convertible to and from the
//! runtime's own types. Only nodes of the same version talk to each other; an unknown kind or
//! code reads as the most general one.

use legio_core::{AgentName, MessageId, Seq};
use serde::{Deserialize, Serialize};

use super::{Answered, Forwarded};
use crate::error::{ErrorCode, RuntimeError};
use crate::progress::Progress;
use crate::reply::{AgentReply, Posted, Reply, TurnError, TurnErrorKind};
use crate::status::Activity;

/// The request, and whether the caller listens to its progress (posts and followed tool
/// results only).
#[derive(Serialize, Deserialize)]
pub(super) struct WireRequest {
    request: Forwarded,
    streamed: bool,
}

impl WireRequest {
    pub(super) fn new(request: &Forwarded, streamed: bool) -> Self {
        Self {
            request: request.clone(),
            streamed,
        }
    }

    /// The request, and whether its progress is streamed back (only for a post or followed tool
    /// results: the turns that make progress).
    pub(super) fn into_parts(self) -> (Forwarded, bool) {
        let turn = matches!(
            self.request,
            Forwarded::Post(_) | Forwarded::FollowToolResults { .. }
        );
        let streamed = self.streamed && turn;
        (self.request, streamed)
    }
}

#[derive(Serialize, Deserialize)]
pub(super) struct WireReply {
    agent: AgentName,
    outcome: Result<WireOk, WireTurnError>,
}

#[derive(Serialize, Deserialize)]
struct WireOk {
    text: String,
    message_id: Option<MessageId>,
    seq: Seq,
}

#[derive(Serialize, Deserialize)]
struct WireTurnError {
    kind: String,
    message: String,
}

/// The final frame: the owner's `Posted`, its reset done, its heartbeat's reply, or its error.
#[derive(Serialize, Deserialize)]
pub(super) enum WireAnswer {
    Posted {
        replies: Vec<WireReply>,
        unknown_mentions: Vec<String>,
        #[serde(default)]
        replayed: bool,
    },
    Reset,
    Heartbeat {
        reply: WireReply,
    },
    ToolResults,
    ToolCall {
        outcome: Result<String, String>,
    },
    Activities {
        activities: Vec<(AgentName, Activity)>,
    },
    Declared,
    DeclaredTools {
        tools: Vec<crate::memory::ToolSpec>,
    },
    Error {
        code: String,
        message: String,
    },
}

/// A progress frame.
#[derive(Serialize, Deserialize)]
pub(super) enum WireProgress {
    Started {
        agent: AgentName,
    },
    Delta {
        agent: AgentName,
        text: String,
    },
    CompactionFailed {
        agent: AgentName,
        reason: String,
    },
    Thinking {
        agent: AgentName,
        text: String,
    },
    ToolCalled {
        agent: AgentName,
        id: String,
        name: String,
        arguments: String,
    },
    ToolDone {
        agent: AgentName,
        id: String,
        name: String,
    },
    ToolFailed {
        agent: AgentName,
        id: String,
        name: String,
        error: String,
    },
    /// Host tool calls the owner's turn waits on: the host's results come back as
    /// `Forwarded::ToolResults`.
    ToolCallsRequired {
        agent: AgentName,
        calls: Vec<WireHostCall>,
    },
    Done {
        reply: WireReply,
    },
}

/// A host tool call in a progress frame.
#[derive(Serialize, Deserialize)]
pub(super) struct WireHostCall {
    agent: AgentName,
    id: String,
    name: String,
    arguments: String,
}

const TURN_KINDS: [(TurnErrorKind, &str); 11] = [
    (TurnErrorKind::Provider, "provider"),
    (TurnErrorKind::Timeout, "timeout"),
    (TurnErrorKind::ToolSteps, "tool_steps"),
    (TurnErrorKind::ContextTooLarge, "context_too_large"),
    (TurnErrorKind::Crashed, "crashed"),
    (TurnErrorKind::Unavailable, "unavailable"),
    (TurnErrorKind::Failed, "failed"),
    (TurnErrorKind::ShutDown, "shut_down"),
    (TurnErrorKind::Runtime, "runtime"),
    (TurnErrorKind::Moved, "moved"),
    (TurnErrorKind::Unanswered, "unanswered"),
];

const CODES: [(ErrorCode, &str); 21] = [
    (ErrorCode::Config, "config"),
    (ErrorCode::BadName, "bad_name"),
    (ErrorCode::ReservedConversation, "reserved_conversation"),
    (ErrorCode::UnknownMention, "unknown_mention"),
    (ErrorCode::UnknownAgent, "unknown_agent"),
    (ErrorCode::UnknownConversation, "unknown_conversation"),
    (ErrorCode::EmptyMessage, "empty_message"),
    (ErrorCode::IdempotencyKeyReused, "idempotency_key_reused"),
    (ErrorCode::MessageTooLarge, "message_too_large"),
    (ErrorCode::ShuttingDown, "shutting_down"),
    (ErrorCode::StoreLocked, "store_locked"),
    (ErrorCode::StorageFull, "storage_full"),
    (ErrorCode::TooManyOpenFiles, "too_many_open_files"),
    (ErrorCode::StorageFailed, "storage_failed"),
    (ErrorCode::ClusterUnavailable, "cluster_unavailable"),
    (ErrorCode::Unavailable, "unavailable"),
    (ErrorCode::ProviderUnavailable, "provider_unavailable"),
    (ErrorCode::InvalidTool, "invalid_tool"),
    (ErrorCode::NoPendingToolCall, "no_pending_tool_call"),
    (ErrorCode::TurnTakenOver, "turn_taken_over"),
    (ErrorCode::Internal, "internal"),
];

fn kind_name(kind: TurnErrorKind) -> &'static str {
    TURN_KINDS
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or("runtime", |(_, n)| n)
}

fn kind_of(name: &str) -> TurnErrorKind {
    TURN_KINDS
        .iter()
        .find(|(_, n)| *n == name)
        .map_or(TurnErrorKind::Runtime, |(k, _)| *k)
}

fn code_of(name: &str) -> ErrorCode {
    CODES
        .iter()
        .find(|(_, n)| *n == name)
        .map_or(ErrorCode::Internal, |(c, _)| *c)
}

fn code_name(code: ErrorCode) -> &'static str {
    CODES
        .iter()
        .find(|(c, _)| *c == code)
        .map_or("internal", |(_, n)| n)
}

impl From<&AgentReply> for WireReply {
    fn from(r: &AgentReply) -> Self {
        Self {
            agent: r.agent.clone(),
            outcome: match &r.outcome {
                Ok(reply) => Ok(WireOk {
                    text: reply.text.clone(),
                    message_id: reply.message_id,
                    seq: reply.seq,
                }),
                Err(e) => Err(WireTurnError {
                    kind: kind_name(e.kind).to_owned(),
                    message: e.message.clone(),
                }),
            },
        }
    }
}

impl From<WireReply> for AgentReply {
    fn from(r: WireReply) -> Self {
        Self {
            agent: r.agent,
            outcome: match r.outcome {
                Ok(ok) => Ok(Reply {
                    text: ok.text,
                    message_id: ok.message_id,
                    seq: ok.seq,
                }),
                Err(e) => Err(TurnError::new(kind_of(&e.kind), e.message)),
            },
        }
    }
}

impl WireAnswer {
    pub(super) fn of(result: &Result<Answered, RuntimeError>) -> Self {
        match result {
            Ok(Answered::Posted(posted)) => Self::Posted {
                replies: posted.replies.iter().map(WireReply::from).collect(),
                unknown_mentions: posted.unknown_mentions.clone(),
                replayed: posted.replayed,
            },
            Ok(Answered::Reset) => Self::Reset,
            Ok(Answered::Heartbeat(reply)) => Self::Heartbeat {
                reply: reply.into(),
            },
            Ok(Answered::ToolResults) => Self::ToolResults,
            Ok(Answered::ToolCall(outcome)) => Self::ToolCall {
                outcome: outcome.clone(),
            },
            Ok(Answered::Activities(activities)) => Self::Activities {
                activities: activities.clone(),
            },
            Ok(Answered::Declared) => Self::Declared,
            Ok(Answered::DeclaredTools(tools)) => Self::DeclaredTools {
                tools: tools.clone(),
            },
            Err(e) => Self::Error {
                code: code_name(e.code()).to_owned(),
                message: e.to_string(),
            },
        }
    }

    pub(super) fn into_result(self, node: &str) -> Result<Answered, RuntimeError> {
        match self {
            Self::Posted {
                replies,
                unknown_mentions,
                replayed,
            } => Ok(Answered::Posted(Posted {
                replies: replies.into_iter().map(AgentReply::from).collect(),
                unknown_mentions,
                replayed,
            })),
            Self::Reset => Ok(Answered::Reset),
            Self::Heartbeat { reply } => Ok(Answered::Heartbeat(reply.into())),
            Self::ToolResults => Ok(Answered::ToolResults),
            Self::ToolCall { outcome } => Ok(Answered::ToolCall(outcome)),
            Self::Activities { activities } => Ok(Answered::Activities(activities)),
            Self::Declared => Ok(Answered::Declared),
            Self::DeclaredTools { tools } => Ok(Answered::DeclaredTools(tools)),
            Self::Error { code, message } => Err(RuntimeError::Remote {
                node: node.to_owned(),
                code: code_of(&code),
                message,
            }),
        }
    }
}

impl From<&Progress> for WireProgress {
    fn from(p: &Progress) -> Self {
        match p {
            Progress::AgentStarted { agent } => Self::Started {
                agent: agent.clone(),
            },
            Progress::Delta { agent, text } => Self::Delta {
                agent: agent.clone(),
                text: text.clone(),
            },
            Progress::CompactionFailed { agent, reason } => Self::CompactionFailed {
                agent: agent.clone(),
                reason: reason.clone(),
            },
            Progress::Thinking { agent, text } => Self::Thinking {
                agent: agent.clone(),
                text: text.clone(),
            },
            Progress::ToolCalled {
                agent,
                id,
                name,
                arguments,
            } => Self::ToolCalled {
                agent: agent.clone(),
                id: id.clone(),
                name: name.clone(),
                arguments: arguments.clone(),
            },
            Progress::ToolDone { agent, id, name } => Self::ToolDone {
                agent: agent.clone(),
                id: id.clone(),
                name: name.clone(),
            },
            Progress::ToolFailed {
                agent,
                id,
                name,
                error,
            } => Self::ToolFailed {
                agent: agent.clone(),
                id: id.clone(),
                name: name.clone(),
                error: error.clone(),
            },
            Progress::ToolCallsRequired { agent, calls } => Self::ToolCallsRequired {
                agent: agent.clone(),
                calls: calls
                    .iter()
                    .map(|c| WireHostCall {
                        agent: c.agent.clone(),
                        id: c.id.clone(),
                        name: c.name.clone(),
                        arguments: c.arguments.clone(),
                    })
                    .collect(),
            },
            Progress::AgentDone { reply } => Self::Done {
                reply: reply.into(),
            },
        }
    }
}

impl From<WireProgress> for Progress {
    fn from(p: WireProgress) -> Self {
        match p {
            WireProgress::Started { agent } => Self::AgentStarted { agent },
            WireProgress::Delta { agent, text } => Self::Delta { agent, text },
            WireProgress::CompactionFailed { agent, reason } => {
                Self::CompactionFailed { agent, reason }
            }
            WireProgress::Thinking { agent, text } => Self::Thinking { agent, text },
            WireProgress::ToolCalled {
                agent,
                id,
                name,
                arguments,
            } => Self::ToolCalled {
                agent,
                id,
                name,
                arguments,
            },
            WireProgress::ToolDone { agent, id, name } => Self::ToolDone { agent, id, name },
            WireProgress::ToolFailed {
                agent,
                id,
                name,
                error,
            } => Self::ToolFailed {
                agent,
                id,
                name,
                error,
            },
            WireProgress::ToolCallsRequired { agent, calls } => Self::ToolCallsRequired {
                agent,
                calls: calls
                    .into_iter()
                    .map(|c| crate::HostToolCall {
                        agent: c.agent,
                        id: c.id,
                        name: c.name,
                        arguments: c.arguments,
                    })
                    .collect(),
            },
            WireProgress::Done { reply } => Self::AgentDone {
                reply: reply.into(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::ForwardedPost;
    use legio_core::{ConversationKey, Participant};

    #[test]
    fn every_request_crosses_the_wire_as_it_was() {
        let conversation = ConversationKey::new("w:1").unwrap();
        let agent = AgentName::new("ann").unwrap();
        let requests = [
            Forwarded::Post(ForwardedPost {
                conversation: conversation.clone(),
                sender: Participant::User,
                text: "hi @ann".into(),
                to: None,
                tools: Vec::new(),
                key: None,
            }),
            Forwarded::Post(ForwardedPost {
                conversation: conversation.clone(),
                sender: Participant::User,
                text: "look it up".into(),
                to: Some(agent.clone()),
                tools: vec![crate::ToolSpec {
                    name: "lookup".into(),
                    description: "finds a fact".into(),
                    parameters: serde_json::json!({"type": "object", "properties": {}}),
                }],
                key: Some(legio_core::IdempotencyKey::new("retry-1").unwrap()),
            }),
            Forwarded::Reset {
                conversation: conversation.clone(),
                agent: agent.clone(),
            },
            Forwarded::Heartbeat {
                conversation: conversation.clone(),
                agent,
                text: "still there?".into(),
            },
            Forwarded::ToolResults {
                conversation: conversation.clone(),
                results: vec![crate::HostToolResult {
                    call_id: "call-1".into(),
                    content: "the fact".into(),
                    is_error: true,
                }],
            },
            Forwarded::FollowToolResults {
                conversation: conversation.clone(),
                results: vec![crate::HostToolResult {
                    call_id: "call-2".into(),
                    content: "found".into(),
                    is_error: false,
                }],
            },
            Forwarded::ToolCall {
                conversation: conversation.clone(),
                agent: AgentName::new("bob").unwrap(),
                name: "get_history".into(),
                arguments: r#"{"limit": 3}"#.into(),
            },
            Forwarded::Activities {
                conversation: conversation.clone(),
            },
            Forwarded::DeclaredTools {
                conversation: conversation.clone(),
            },
            Forwarded::DeclareTools {
                conversation,
                tools: vec![crate::ToolSpec {
                    name: "lookup".into(),
                    description: String::new(),
                    parameters: serde_json::json!({"type": "object"}),
                }],
            },
        ];
        for request in requests {
            let bytes = serde_json::to_vec(&WireRequest::new(&request, true)).unwrap();
            let back: WireRequest = serde_json::from_slice(&bytes).unwrap();
            let (read, streamed) = back.into_parts();
            assert_eq!(format!("{read:?}"), format!("{request:?}"));
            let turn = matches!(
                request,
                Forwarded::Post(_) | Forwarded::FollowToolResults { .. }
            );
            assert_eq!(streamed, turn);
        }
    }

    #[test]
    fn every_kind_and_code_has_a_name_that_reads_back() {
        for (kind, name) in TURN_KINDS {
            assert_eq!(kind_of(kind_name(kind)), kind, "{name}");
        }
        for (code, name) in CODES {
            assert_eq!(code_of(code_name(code)), code, "{name}");
        }
        // The storage failures keep their cause across nodes (they were `internal` once).
        for code in [
            ErrorCode::StorageFull,
            ErrorCode::TooManyOpenFiles,
            ErrorCode::StorageFailed,
            ErrorCode::ClusterUnavailable,
        ] {
            assert_eq!(code_of(code_name(code)), code);
            assert_ne!(code_name(code), "internal");
        }
    }

    #[test]
    fn every_answer_and_an_error_cross_the_wire_typed() {
        let agent = AgentName::new("ann").unwrap();
        let posted = Posted {
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
        };
        let bytes =
            serde_json::to_vec(&WireAnswer::of(&Ok(Answered::Posted(posted.clone())))).unwrap();
        let back: WireAnswer = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back.into_result("n1").unwrap(), Answered::Posted(posted));
        let reply = AgentReply::failed(&agent, TurnErrorKind::Provider, "no model");
        for answered in [
            Answered::Reset,
            Answered::Heartbeat(reply),
            Answered::ToolResults,
            Answered::ToolCall(Ok("three messages".into())),
            Answered::ToolCall(Err("no such tool".into())),
            Answered::Activities(vec![(agent.clone(), Activity::Working)]),
            Answered::Declared,
            Answered::DeclaredTools(vec![crate::ToolSpec {
                name: "lookup".into(),
                description: "finds a fact".into(),
                parameters: serde_json::json!({"type": "object"}),
            }]),
        ] {
            let bytes = serde_json::to_vec(&WireAnswer::of(&Ok(answered.clone()))).unwrap();
            let back: WireAnswer = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(back.into_result("n1").unwrap(), answered);
        }
        let error = RuntimeError::EmptyMessage;
        let bytes = serde_json::to_vec(&WireAnswer::of(&Err(error.clone()))).unwrap();
        let back: WireAnswer = serde_json::from_slice(&bytes).unwrap();
        let err = back.into_result("n1").unwrap_err();
        assert_eq!(err.code(), ErrorCode::EmptyMessage);
        assert!(err.to_string().contains(&error.to_string()), "{err}");
    }
}
