//! The session projection: an agent's latest session state in a conversation, folded from events.
//!
//! The fold is idempotent: an event at or below `last_seq` is ignored, so a store may re-apply a
//! tail of the log after a crash without double counting.

use serde::{Deserialize, Serialize};

use crate::event::{
    BoundaryReason, Event, OpenReason, SessionId, SessionOpened, SessionStart, TokenUsage,
};
use crate::name::{AgentName, ConversationKey};
use crate::seq::Seq;

/// Where a session stands.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum SessionStatus {
    /// Open: an actor owns it.
    Open,
    /// Suspended: no actor, but the provider session can be resumed.
    Suspended,
    /// Closed: the provider session is finished; the next turn opens a new one.
    Closed,
}

impl SessionStatus {
    /// The status as a word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Suspended => "suspended",
            Self::Closed => "closed",
        }
    }
}

/// An agent's latest session.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct SessionInfo {
    /// legio's session id.
    pub session: SessionId,
    /// Where it stands.
    pub status: SessionStatus,
    /// The seq of its `SessionOpened` event.
    pub opened_at: Seq,
    /// Why it was opened.
    pub why: OpenReason,
    /// How it got its context.
    pub how: SessionStart,
    /// The system prompt hash it was opened with.
    pub prompt_hash: String,
    /// The provider's session id, as last reported.
    pub provider_session: Option<String>,
    /// Every visible message up to this seq has been delivered to the session.
    pub checkpoint: Seq,
    /// Cumulative token usage of the session.
    pub usage: TokenUsage,
    /// Completed turns.
    pub turns: u64,
    /// Why it was suspended or closed, if it was.
    pub ended: Option<BoundaryReason>,
}

/// An agent that is failed until a manual reset.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct FailedInfo {
    /// The seq of the `AgentFailed` event.
    pub at: Seq,
    /// The last failure.
    pub reason: String,
}

/// The projection of one agent's session events in one conversation.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct AgentSessionState {
    /// The conversation.
    pub conversation: ConversationKey,
    /// The agent.
    pub agent: AgentName,
    /// The last event folded in.
    pub last_seq: Seq,
    /// The latest session, if any was ever opened.
    pub current: Option<SessionInfo>,
    /// Set while the agent is failed.
    pub failed: Option<FailedInfo>,
    /// How many sessions were opened in all.
    pub sessions_opened: u64,
    /// Cumulative usage over all sessions.
    pub total_usage: TokenUsage,
    /// The latest summary of the agent's context (compaction), if one was recorded. Summaries
    /// belong to the conversation, not to a provider session: they outlive session boundaries.
    pub latest_summary: Option<SummaryRef>,
}

/// Where the latest summary of an agent's context is.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct SummaryRef {
    /// The seq of the `SummaryRecorded` event (its text is read from there).
    pub event: Seq,
    /// The last seq the summary covers.
    pub covers_up_to: Seq,
}

impl AgentSessionState {
    /// The empty state of `agent` in `conversation`.
    pub fn new(conversation: ConversationKey, agent: AgentName) -> Self {
        Self {
            conversation,
            agent,
            last_seq: Seq::ZERO,
            current: None,
            failed: None,
            sessions_opened: 0,
            total_usage: TokenUsage::default(),
            latest_summary: None,
        }
    }

    /// Folds `event` at `seq` into the state. Returns whether it changed anything: false for an
    /// event at or below `last_seq`, of another conversation or agent, or a message.
    pub fn apply(&mut self, seq: Seq, event: &Event) -> bool {
        if seq <= self.last_seq
            || event.conversation() != &self.conversation
            || event.session_agent() != Some(&self.agent)
        {
            return false;
        }
        self.last_seq = seq;
        match event {
            Event::MessagePosted(_) => return false,
            Event::SessionOpened(e) => {
                self.sessions_opened += 1;
                self.current = Some(SessionInfo::opened(seq, e));
            }
            Event::ContextDelivered(e) => {
                if let Some(c) = self.current.as_mut().filter(|c| c.session == e.session) {
                    c.checkpoint = c.checkpoint.max(e.up_to);
                }
            }
            Event::TurnCompleted(e) => {
                if let Some(c) = self.current.as_mut().filter(|c| c.session == e.session) {
                    c.usage.add(e.usage);
                    c.turns += 1;
                    if e.provider_session.is_some() {
                        c.provider_session = e.provider_session.clone();
                    }
                }
                self.total_usage.add(e.usage);
            }
            Event::TurnFailed(_) => {}
            Event::SummaryRecorded(e) => {
                self.latest_summary = Some(SummaryRef {
                    event: seq,
                    covers_up_to: e.covers_up_to,
                });
            }
            // Never reached: `session_agent` is `None` for these.
            Event::DirectivePublished(_)
            | Event::DirectiveRevoked(_)
            | Event::NoteWritten(_)
            | Event::NotebookEntryAppended(_)
            | Event::HeartbeatRan(_)
            | Event::ToolsDeclared(_)
            | Event::ApprovalRequested(_)
            | Event::ApprovalAnswered(_)
            | Event::InstructionsGiven(_) => return false,
            Event::SessionSuspended(e) => self.end(&e.session, SessionStatus::Suspended, e.why),
            Event::SessionClosed(e) => {
                self.end(&e.session, SessionStatus::Closed, e.why);
                if e.why == BoundaryReason::ManualReset {
                    self.failed = None;
                }
            }
            Event::AgentFailed(e) => {
                self.failed = Some(FailedInfo {
                    at: seq,
                    reason: e.reason.clone(),
                });
            }
        }
        true
    }

    /// Ends the current session if it is `session`: suspended or closed, and why.
    fn end(&mut self, session: &SessionId, status: SessionStatus, why: BoundaryReason) {
        if let Some(c) = self.current.as_mut().filter(|c| &c.session == session) {
            c.status = status;
            c.ended = Some(why);
        }
    }
}

impl SessionInfo {
    /// The session `opened` starts at `seq`: open, its checkpoint the resumed one (none for a
    /// new or bootstrapped session), no turns yet.
    fn opened(seq: Seq, opened: &SessionOpened) -> Self {
        let (checkpoint, provider_session) = match &opened.how {
            SessionStart::Resumed {
                checkpoint,
                provider_session,
            } => (*checkpoint, Some(provider_session.clone())),
            SessionStart::Stateless | SessionStart::Bootstrapped { .. } => (Seq::ZERO, None),
        };
        SessionInfo {
            session: opened.session,
            status: SessionStatus::Open,
            opened_at: seq,
            why: opened.why,
            how: opened.how.clone(),
            prompt_hash: opened.prompt_hash.clone(),
            provider_session,
            checkpoint,
            usage: TokenUsage::default(),
            turns: 0,
            ended: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{
        ContextDelivered, DeliveryMode, SessionEnded, SessionOpened, TurnCompleted,
    };
    use crate::test_support::{agent, conv, ts};

    fn opened(id: u8) -> Event {
        Event::SessionOpened(SessionOpened {
            conversation: conv(),
            agent: agent("vorenus"),
            session: SessionId::from_parts(ts(1), [id; 10]),
            at: ts(1),
            why: OpenReason::FirstUse,
            how: SessionStart::Bootstrapped { up_to: Seq(0) },
            prompt_hash: "h".into(),
        })
    }

    #[test]
    fn fold_is_idempotent_and_tracks_the_session() {
        let session = SessionId::from_parts(ts(1), [1; 10]);
        let events = vec![
            (Seq(2), opened(1)),
            (
                Seq(3),
                Event::ContextDelivered(ContextDelivered {
                    conversation: conv(),
                    agent: agent("vorenus"),
                    session,
                    at: ts(2),
                    up_to: Seq(1),
                    mode: DeliveryMode::Bootstrap,
                    messages: 1,
                    estimated_tokens: 10,
                }),
            ),
            (
                Seq(4),
                Event::TurnCompleted(TurnCompleted {
                    conversation: conv(),
                    agent: agent("vorenus"),
                    session,
                    at: ts(3),
                    usage: TokenUsage {
                        input: 100,
                        output: 5,
                        ..Default::default()
                    },
                    provider_session: Some("p-1".into()),
                    reply: None,
                }),
            ),
            (
                Seq(5),
                Event::SessionSuspended(SessionEnded {
                    conversation: conv(),
                    agent: agent("vorenus"),
                    session,
                    at: ts(4),
                    why: BoundaryReason::Idle,
                }),
            ),
        ];
        let mut state = AgentSessionState::new(conv(), agent("vorenus"));
        for (seq, e) in &events {
            assert!(state.apply(*seq, e));
        }
        let once = state.clone();
        for (seq, e) in &events {
            assert!(!state.apply(*seq, e), "re-applying {seq} must be ignored");
        }
        assert_eq!(state, once);
        let current = state.current.unwrap();
        assert_eq!(current.status, SessionStatus::Suspended);
        assert_eq!(current.checkpoint, Seq(1));
        assert_eq!(current.usage.input, 100);
        assert_eq!(current.provider_session.as_deref(), Some("p-1"));
        assert_eq!(current.ended, Some(BoundaryReason::Idle));
    }

    #[test]
    fn other_agents_are_ignored() {
        let mut state = AgentSessionState::new(conv(), agent("pullo"));
        assert!(!state.apply(Seq(1), &opened(1)));
        assert_eq!(state.last_seq, Seq::ZERO);
    }
}
