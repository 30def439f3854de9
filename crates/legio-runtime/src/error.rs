//! The runtime's errors.

use std::path::PathBuf;

use legio_config::{ConfigError, UnknownAgent};
use legio_core::{MentionError, NameError};
use legio_ops::OpsError;
use legio_store::{ErrorSource, IoCause, StoreError};
use strum::{EnumString, IntoStaticStr};
use thiserror::Error;

/// Why a host's tool result answers no waiting call ([`RuntimeError::NoPendingToolCall`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotWaiting {
    /// No call with this id waits: answered already, or never made.
    Unknown,
    /// The call waited past `runtime.host_tool_timeout_seconds`: it got an error result and
    /// its turn went on.
    TimedOut,
    /// The request answers this call twice.
    Twice,
    /// The request carries no result.
    NoResults,
}

impl NotWaiting {
    /// The refusal in words, for the call `call_id`.
    fn says(self, call_id: &str) -> String {
        match self {
            Self::Unknown => format!(
                "no tool call {call_id:?} is waiting for a result in this conversation (answered already, or never made)"
            ),
            Self::TimedOut => format!(
                "tool call {call_id:?} waited past runtime.host_tool_timeout_seconds: it got an error result and its turn went on without this one"
            ),
            Self::Twice => format!(
                "tool call {call_id:?} is answered twice in this request; send one result per call"
            ),
            Self::NoResults => {
                "the request carries no tool result; send one per waiting call".to_owned()
            }
        }
    }
}

/// What the runtime's API can fail with, one variant per cause; [`RuntimeError::code`] names the
/// cause for a host that maps it (the server's status table). A failing agent is not an error of
/// `post`: it is an error reply for that agent.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RuntimeError {
    /// Bad configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The event log failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A configured provider cannot be built (a missing key variable, a bad base URL).
    #[error(transparent)]
    Provider(#[from] legio_llm::BuildError),
    /// A bad conversation key or agent name.
    #[error(transparent)]
    Name(#[from] NameError),
    /// A mention of an unknown agent (with `runtime.unknown_mentions = "error"`).
    #[error(transparent)]
    Mention(#[from] MentionError),
    /// An agent that is not in the roster.
    #[error("unknown agent {name:?}; the roster has: {}", known.join(", "))]
    UnknownAgent {
        /// The name asked for.
        name: String,
        /// The roster.
        known: Vec<String>,
    },
    /// A conversation with no event in the log.
    #[error("no conversation {key:?} in the log; conversations: {}", if known.is_empty() { "none".to_owned() } else { known.join(", ") })]
    UnknownConversation {
        /// The key asked for.
        key: String,
        /// The conversations the log has (perhaps only the first ones).
        known: Vec<String>,
    },
    /// A conversation key legio keeps for itself (`legio:...`, e.g. the memory stores').
    #[error("conversation key {key:?} is reserved by legio (keys starting with \"legio:\"): use another key")]
    ReservedConversation {
        /// The key.
        key: String,
    },
    /// An empty message.
    #[error("a message needs some text")]
    EmptyMessage,
    /// An idempotency key already used in the conversation for another message (another sender,
    /// text or addressee): a retry must send the same message, a new message a new key.
    #[error("idempotency key {key:?} was used for another message of this conversation (seq {seq}); send the same message to retry it, or a new key for a new message")]
    IdempotencyKeyReused {
        /// The key.
        key: String,
        /// The message stored with it.
        seq: legio_core::Seq,
    },
    /// The runtime is shutting down or shut down.
    #[error("the runtime is shut down")]
    ShutDown,
    /// Work on a blocking thread or a task was cancelled (the runtime is stopping).
    #[error("{what} was cancelled: {source}")]
    Cancelled {
        /// What was cancelled (`a log read`, `opening the log`).
        what: &'static str,
        /// Why: the task runtime's error (a task that panicked or was cut), or words.
        #[source]
        source: ErrorSource,
    },
    /// A supervisor could not be started.
    #[error("cannot start {what}: {source}")]
    SupervisorStart {
        /// Which supervisor.
        what: String,
        /// Why: the actor system's error.
        #[source]
        source: ErrorSource,
    },
    /// The provider an agent names is not available (neither built nor supplied by the host).
    #[error("provider {provider:?} of agent {agent} is not available; configure [providers.{provider}] or supply it to the runtime builder")]
    ProviderUnavailable {
        /// The agent.
        agent: String,
        /// The provider's name.
        provider: String,
    },
    /// An agent's prompt file cannot be read.
    #[error("cannot read the prompt of {agent} at {}: {source}", path.display())]
    PromptUnreadable {
        /// The agent.
        agent: String,
        /// The file.
        path: PathBuf,
        /// The operating system's kind of the failure.
        kind: std::io::ErrorKind,
        /// The operating system's error, as it was.
        #[source]
        source: ErrorSource,
    },
    /// The log lacks a record the runtime's state points at (a damaged log: run `legio verify`).
    #[error("{what} at seq {seq} is not in the log; run `legio verify`")]
    MissingRecord {
        /// What was expected (`the message to answer`, `the summary`).
        what: &'static str,
        /// Where.
        seq: legio_core::Seq,
    },
    /// The conversation's last tool declaration in the log does not read (a hand-made or
    /// damaged log); declaring the tools again replaces it.
    #[error("the tool declaration at seq {seq} of {conversation} does not read: tool {tool}'s schema is not JSON ({source}); declare the conversation's tools again to replace it")]
    BadDeclaration {
        /// The conversation.
        conversation: String,
        /// The `ToolsDeclared` event's seq.
        seq: legio_core::Seq,
        /// The tool.
        tool: String,
        /// Why its schema does not parse: the JSON parser's error.
        #[source]
        source: ErrorSource,
    },
    /// An `[mcp.NAME]` server cannot be started or did not list its tools when the runtime opened.
    #[error("cannot start the MCP server [mcp.{server}]: {source}; check its command or url")]
    McpUnavailable {
        /// The `[mcp.NAME]` table's name.
        server: String,
        /// What went wrong: the MCP client's or the operating system's error, or words.
        #[source]
        source: ErrorSource,
    },
    /// The agent's actor is restarting; the request can be retried.
    #[error("{agent} is restarting; try again")]
    AgentRestarting {
        /// The agent.
        agent: String,
    },
    /// A tool the host declared is invalid (its name, its schema, a name twice).
    #[error(transparent)]
    HostTool(#[from] crate::tools::registry_error::ToolRegistryError),
    /// A host tool result names no call waiting in the conversation (answered already, timed
    /// out, or never made), answers one twice, or none was given.
    #[error("{}; waiting: {}", why.says(call_id), if waiting.is_empty() { "none".to_owned() } else { waiting.join(", ") })]
    NoPendingToolCall {
        /// The call id given ("" when no result was).
        call_id: String,
        /// The calls that are waiting.
        waiting: Vec<String>,
        /// Why the result answers no waiting call.
        why: NotWaiting,
    },
    /// An answer to a tool call's approval that no approval takes: none asked for the call,
    /// a short id that begins several, or a second answer (the error names the first).
    #[error(transparent)]
    Approval(#[from] legio_core::AnswerError),
    /// A turn followed with [`crate::Runtime::follow_tool_results`] was taken over by later
    /// results of its calls, handed over with `follow_tool_results` too: it goes on, followed
    /// by that request.
    #[error("the turn in conversation {conversation} was taken over by later tool results; it goes on, followed by their request")]
    TurnTakenOver {
        /// The conversation.
        conversation: String,
    },
    /// The conversation is not (or no longer) owned by this node, and the request could not be
    /// carried out here; it can be retried (it goes to the new owner). `docs/cluster.md`.
    #[error("conversation {conversation} moved away from this node ({reason}); try again")]
    Moved {
        /// The conversation.
        conversation: String,
        /// What happened.
        reason: String,
    },
    /// The node that owns the conversation answered the forwarded request with this error.
    #[error("{message} (on node {node})")]
    Remote {
        /// The owner.
        node: String,
        /// The error's cause, as the owner classified it.
        code: ErrorCode,
        /// The owner's message.
        message: String,
    },
    /// A conversation lease could not be taken or kept (the cluster failed), or the lease
    /// bucket keeps another TTL than this node's while nodes hold leases in it.
    #[error(transparent)]
    Lease(#[from] legio_store::LeaseError),
    /// Another running process holds this node's id: it renewed the node's presence lease while
    /// this one started. `docs/cluster.md`.
    #[error("node id {node:?} is in use: another running process renewed its presence lease (legio:node:{node}, revision {} then {}) while this one started; give each process its own --node id (or LEGIO_NODE)", revisions.0, revisions.1)]
    NodeIdInUse {
        /// The node id.
        node: String,
        /// The lease's revision when first read, and after the other process renewed it.
        revisions: (u64, u64),
    },
    /// A request to the owning node got no answer.
    #[error(transparent)]
    Bus(#[from] legio_store::BusError),
}

/// Every error code legio answers with, one list for the runtime, the node bus, the server's
/// HTTP API and the CLI: the cause of a [`RuntimeError`] ([`RuntimeError::code`]), and the
/// codes only the server's HTTP layer gives (marked "The server's"). Each is named in snake
/// case (`unknown_agent`, [`ErrorCode::as_str`]), the same name on the bus and in the API's
/// `error.code`; a name this version does not know reads as `internal`. The server maps each
/// code to its HTTP status in one exhaustive table (so the enum is not `non_exhaustive`: a new
/// code is a new arm there, never a silent 500).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, IntoStaticStr, EnumString)]
#[strum(serialize_all = "snake_case")]
pub enum ErrorCode {
    /// The configuration is invalid.
    #[strum(serialize = "bad_configuration")]
    Config,
    /// A bad name (an agent's, a heartbeat's).
    BadName,
    /// A conversation key a host cannot use: reserved (`legio:...`) or, in the server, not a
    /// valid key.
    #[strum(serialize = "bad_conversation_key")]
    ReservedConversation,
    /// A mention of an unknown agent (strict mode).
    UnknownMention,
    /// An agent not in the roster.
    UnknownAgent,
    /// A conversation with no event.
    UnknownConversation,
    /// An empty message.
    EmptyMessage,
    /// An idempotency key used for another message.
    IdempotencyKeyReused,
    /// A message over the store's size limit.
    MessageTooLarge,
    /// The runtime (or its log) is shutting down.
    ShuttingDown,
    /// The database is locked by another process.
    StoreLocked,
    /// The disk is full (or a quota is exceeded).
    StorageFull,
    /// The log failed for want of file descriptors (`EMFILE`, `ENFILE`).
    TooManyOpenFiles,
    /// The log failed on another I/O error.
    StorageFailed,
    /// The NATS cluster could not be reached, or had no quorum, in time; retry.
    ClusterUnavailable,
    /// An agent is restarting, or its conversation moved to another node; retry.
    #[strum(serialize = "agent_unavailable")]
    Unavailable,
    /// A provider cannot be built or is not available.
    ProviderUnavailable,
    /// A host tool declaration is invalid.
    InvalidTool,
    /// A host tool result answers no waiting call.
    NoPendingToolCall,
    /// An approval answer names no call that waits for one.
    UnknownApproval,
    /// A call's approval was answered already (the error names the first answer).
    ApprovalAnswered,
    /// A followed turn was taken over by later tool results.
    TurnTakenOver,
    /// The server's: the body is not JSON.
    InvalidJson,
    /// The server's: the body is JSON of the wrong shape.
    InvalidBody,
    /// The server's: a required field is missing.
    MissingField,
    /// The server's: a request it cannot read otherwise.
    BadRequest,
    /// The server's: a bad query string.
    BadQuery,
    /// The server's: a bad path parameter.
    BadPath,
    /// The server's: a bad seq.
    BadSeq,
    /// The server's: a bad `Idempotency-Key` header.
    InvalidIdempotencyKey,
    /// The server's: the door's resent history does not match the conversation.
    HistoryMismatch,
    /// The server's: the addressed agent went on without answering the keyed message.
    MessageUnanswered,
    /// The server's: no valid credential.
    Unauthorized,
    /// The server's: the credential's scope does not cover the request.
    Forbidden,
    /// The server's: the body stopped arriving.
    BodyTimeout,
    /// The server's: too many turns in flight.
    TooManyTurns,
    /// The server's: an unknown model name on the OpenAI-compatible door.
    UnknownModel,
    /// The server's: an unknown response id on the OpenAI-compatible door.
    UnknownResponse,
    /// The server's: no such route.
    NotFound,
    /// The server's: the route does not take this method.
    MethodNotAllowed,
    /// The server's: the `Accept` header asks for nothing it answers with.
    NotAcceptable,
    /// The server's: the body is over the limit.
    BodyTooLarge,
    /// The server's: the agent's request cannot fit its model's window.
    ContextTooLarge,
    /// The server's: the body is not sent as JSON.
    UnsupportedMediaType,
    /// The server's: the addressed agent failed its turn.
    AgentFailed,
    /// Anything else: a failure of the runtime or the log.
    Internal,
}

impl ErrorCode {
    /// Its name: `unknown_agent`, `bad_configuration`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The code named `name`; a name this version does not know is `Internal`.
    pub fn from_name(name: &str) -> Self {
        name.parse().unwrap_or(Self::Internal)
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for ErrorCode {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Ok(Self::from_name(&name))
    }
}

impl From<OpsError> for RuntimeError {
    fn from(e: OpsError) -> Self {
        match e {
            OpsError::Store(e) => Self::Store(e),
            OpsError::UnknownConversation { key, known } => {
                Self::UnknownConversation { key, known }
            }
            OpsError::MissingRecord { what, seq } => Self::MissingRecord { what, seq },
        }
    }
}

impl From<UnknownAgent> for RuntimeError {
    fn from(e: UnknownAgent) -> Self {
        Self::UnknownAgent {
            name: e.name,
            known: e.known,
        }
    }
}

impl RuntimeError {
    /// The error's cause as a stable code.
    pub fn code(&self) -> ErrorCode {
        use ErrorCode as C;
        match self {
            Self::Config(_) | Self::NodeIdInUse { .. } => C::Config,
            Self::Store(e) => store_code(e),
            Self::Provider(_) | Self::ProviderUnavailable { .. } => C::ProviderUnavailable,
            Self::Name(_) => C::BadName,
            Self::Mention(_) => C::UnknownMention,
            Self::UnknownAgent { .. } => C::UnknownAgent,
            Self::UnknownConversation { .. } => C::UnknownConversation,
            Self::ReservedConversation { .. } => C::ReservedConversation,
            Self::EmptyMessage => C::EmptyMessage,
            Self::IdempotencyKeyReused { .. } => C::IdempotencyKeyReused,
            Self::ShutDown | Self::Cancelled { .. } => C::ShuttingDown,
            Self::HostTool(_) => C::InvalidTool,
            Self::NoPendingToolCall { .. } => C::NoPendingToolCall,
            Self::Approval(legio_core::AnswerError::AlreadyAnswered { .. }) => C::ApprovalAnswered,
            Self::Approval(_) => C::UnknownApproval,
            Self::TurnTakenOver { .. } => C::TurnTakenOver,
            Self::AgentRestarting { .. } | Self::Moved { .. } | Self::Bus(_) => C::Unavailable,
            Self::Remote { code, .. } => *code,
            Self::Lease(legio_store::LeaseError::Store(e)) => store_code(e),
            Self::Lease(legio_store::LeaseError::TtlDiffers { .. }) => C::Config,
            // The lease is someone else's, or no longer this node's: the conversation moved.
            Self::Lease(
                legio_store::LeaseError::Held { .. } | legio_store::LeaseError::Lost { .. },
            ) => C::Unavailable,
            Self::Lease(_) => C::Internal,
            Self::SupervisorStart { .. }
            | Self::PromptUnreadable { .. }
            | Self::MissingRecord { .. }
            | Self::BadDeclaration { .. }
            | Self::McpUnavailable { .. } => C::Internal,
        }
    }
}

fn store_code(e: &StoreError) -> ErrorCode {
    match e {
        StoreError::MessageTooLarge { .. } | StoreError::RecordTooLarge { .. } => {
            ErrorCode::MessageTooLarge
        }
        StoreError::Closed => ErrorCode::ShuttingDown,
        StoreError::Locked { .. } => ErrorCode::StoreLocked,
        StoreError::Io { cause, .. } => match cause {
            IoCause::DiskFull => ErrorCode::StorageFull,
            IoCause::TooManyOpenFiles => ErrorCode::TooManyOpenFiles,
            _ => ErrorCode::StorageFailed,
        },
        StoreError::Cluster { .. } | StoreError::Unreachable { .. } => {
            ErrorCode::ClusterUnavailable
        }
        // Another writer appended since, or this node stood down from the conversation: it
        // moved, as `RuntimeError::Moved` says; the retry goes to its owner.
        StoreError::Fenced { .. } => ErrorCode::Unavailable,
        // Credentials the servers refuse: retrying will not help, the configuration must change.
        StoreError::Refused { .. } | StoreError::NoJetStream { .. } => ErrorCode::Config,
        _ => ErrorCode::Internal,
    }
}
