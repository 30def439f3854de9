//! legio-core: the pure domain of legio. Names, messages, events, visibility, mentions and the
//! session projection, session lifecycle decisions and context planning, and the shared memory
//! stores (directives, notes, notebooks: events, projection and permissions). No IO, no clock or randomness reads, no async runtime: time and random
//! bytes are passed in by the caller.

mod approval_event;
mod approvals;
mod budget;
mod compaction;
mod context;
mod context_item;
mod error;
mod event;
mod event_json;
mod idempotency;
mod lifecycle;
mod memory;
mod memory_event;
mod mention;
mod message;
mod name;
mod seq;
mod session;
mod sorted_json;
mod timestamp;
mod tokens;
mod tool_calls;
mod visibility;

#[cfg(test)]
mod test_support;

pub use approval_event::{ApprovalAnswered, ApprovalDecision, ApprovalRequested};
pub use approvals::{AnswerError, Approval, Approvals};
pub use budget::{
    fit_to_window, summarizer_part_budget, Budget, BudgetError, Calibration, Fitted, MAX_RATIO,
    MIN_RATIO, PRIOR_RATIO, SAFETY_MARGIN,
};
pub use compaction::{
    covered_seq, crosses_policy, finish_summary, merge_prompt, needs_compaction, part_prompt,
    split_for_summarizer, summary_boundary, summary_boundary_before, summary_tokens,
    CompactionPolicy, ContextSummary, LeftOut, SummaryJob, SUMMARIZER_PROMPT,
};
pub use context::{
    plan_context, plan_context_with_summary, triggers_turn, ContextItem, ContextPlan,
};
pub use error::{MentionError, NameError, TimestampError};
pub use event::{
    AgentFailed, BoundaryReason, ContextDelivered, DeclaredTool, DeliveryMode, Event, EventKind,
    HeartbeatRan, InstructionsGiven, OpenReason, Record, SessionEnded, SessionId, SessionOpened,
    SessionStart, SummaryRecorded, TokenUsage, ToolsDeclared, TurnCompleted, TurnFailed,
};
pub use event_json::{record_from_json, record_to_json, JsonEventError, RecordJson};
pub use idempotency::{IdempotencyKey, IdempotencyKeyError, MAX_IDEMPOTENCY_KEY_BYTES};
pub use lifecycle::{
    crash_cleanup, decide_session, manual_reset, resettable, restored_notice, stop_session,
    Delivery, EndSession, History, SessionDecision, SessionFacts, Start,
};
pub use memory::{
    check_note_key, check_permission, Caller, Directive, DirectivePublished, DirectiveRevoked,
    MemoryCommand, MemoryError, MemoryOperation, MemoryState, MemoryStore, Note, NoteWritten,
    NotebookEntry, NotebookEntryAppended, Revocation, MAX_MEMORY_TEXT_BYTES, MAX_NOTE_KEY_LEN,
    MEMORY_CONVERSATION, RESERVED_CONVERSATION_PREFIX,
};
pub use mention::{find_mentions, parse_mentions, Mentions};
pub use message::{Audience, Message, MessageId, Part};
pub use name::{
    AgentName, ConversationKey, Participant, MAX_AGENT_NAME_LEN, MAX_CONVERSATION_KEY_LEN,
    RESERVED_NAMES,
};
pub use seq::{Seq, SeqRange};
pub use session::{AgentSessionState, FailedInfo, SessionInfo, SessionStatus, SummaryRef};
pub use sorted_json::{Object as JsonObject, SortedJson};
pub use timestamp::Timestamp;
pub use tokens::{
    estimate_message_tokens, estimate_tokens, estimate_tokens_for_model, exact_tokens_for_model,
    Vocabulary, CHAT_MESSAGE_OVERHEAD, CHAT_REPLY_PRIMING,
};
pub use tool_calls::{
    has_tool_result, settle_tool_calls, tool_call_ids, INTERRUPTED, RESULTS_LEFT_OUT,
};
pub use visibility::{can_see, visibility_keys, Viewer, VisibilityKey};
