//! Deterministic builders and generators of conversations, shared by the workspace's integration
//! tests (`tests/it`) and benchmarks (`benches/`).

pub mod bench;
pub mod chromium;
pub mod nats;
pub mod proxy;
pub mod stalls;

use legio_core::{
    AgentName, Audience, BoundaryReason, ContextDelivered, ConversationKey, DeliveryMode, Event,
    Message, MessageId, OpenReason, Part, Participant, Seq, SessionEnded, SessionId, SessionOpened,
    SessionStart, Timestamp, TokenUsage, TurnCompleted,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A test needs `what`, which is missing here. Under `CI=true` that is a failure (CI must provide
/// every component: `.ci/run` installs them) and this panics with `install`, what to do; outside CI
/// it prints that the test is skipped and why, and returns (the caller then returns).
pub fn component_missing(what: &str, install: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{what} is missing, and CI=true requires it: {install}");
    }
    eprintln!("skipped: {what} is missing ({install}); under CI=true this test fails instead");
}

/// A fixed base time: 2026-02-15T12:00:00Z.
pub const BASE_MICROS: i64 = 1_771_156_800_000_000;

/// `BASE + n` milliseconds (`n` taken modulo 2^40, so any `n` gives a valid time).
pub fn ts(n: u64) -> Timestamp {
    Timestamp::from_unix_micros(BASE_MICROS + ((n % (1 << 40)) as i64) * 1000)
}

/// A conversation key, panicking on a bad literal (tests only).
pub fn conv(key: &str) -> ConversationKey {
    ConversationKey::new(key).expect("valid conversation key literal")
}

/// An agent name, panicking on a bad literal (tests only).
pub fn agent(name: &str) -> AgentName {
    AgentName::new(name).expect("valid agent name literal")
}

/// A message id unique per `n`.
pub fn message_id(n: u64) -> MessageId {
    let mut random = [0u8; 10];
    random[2..].copy_from_slice(&n.to_be_bytes());
    MessageId::from_parts(ts(n), random)
}

/// A session id unique per `n` (and distinct from every message id).
pub fn session_id(n: u64) -> SessionId {
    let mut random = [0u8; 10];
    random[0] = 0x5e;
    random[2..].copy_from_slice(&n.to_be_bytes());
    SessionId::from_parts(ts(n), random)
}

/// A text message; `audience` is `all` or a comma-separated list of participants.
pub fn text_message(n: u64, conversation: &str, sender: &str, audience: &str, text: &str) -> Event {
    let audience = if audience == "all" {
        Audience::All
    } else {
        Audience::only(
            audience
                .split(',')
                .map(|p| Participant::parse(p).expect("valid participant literal")),
        )
    };
    Event::MessagePosted(Message::text(
        message_id(n),
        conv(conversation),
        Participant::parse(sender).expect("valid sender literal"),
        audience,
        text,
        ts(n),
    ))
}

/// A session opened by `agent`.
pub fn session_opened(n: u64, conversation: &str, name: &str, session: u64) -> Event {
    Event::SessionOpened(SessionOpened {
        conversation: conv(conversation),
        agent: agent(name),
        session: session_id(session),
        at: ts(n),
        why: OpenReason::FirstUse,
        how: SessionStart::Bootstrapped { up_to: Seq(n) },
        prompt_hash: "sha256:test".into(),
    })
}

/// Context delivered up to `up_to`.
pub fn context_delivered(
    n: u64,
    conversation: &str,
    name: &str,
    session: u64,
    up_to: u64,
) -> Event {
    Event::ContextDelivered(ContextDelivered {
        conversation: conv(conversation),
        agent: agent(name),
        session: session_id(session),
        at: ts(n),
        up_to: Seq(up_to),
        mode: DeliveryMode::Delta,
        messages: 1,
        estimated_tokens: 42,
    })
}

/// A completed turn using `input` tokens.
pub fn turn_completed(n: u64, conversation: &str, name: &str, session: u64, input: u64) -> Event {
    Event::TurnCompleted(TurnCompleted {
        conversation: conv(conversation),
        agent: agent(name),
        session: session_id(session),
        at: ts(n),
        usage: TokenUsage {
            input,
            output: input / 10,
            cache_read: 0,
            cache_write: 0,
        },
        provider_session: Some(format!("provider-{session}")),
        reply: None,
    })
}

/// A session closed for `why`.
pub fn session_closed(
    n: u64,
    conversation: &str,
    name: &str,
    session: u64,
    why: BoundaryReason,
) -> Event {
    Event::SessionClosed(SessionEnded {
        conversation: conv(conversation),
        agent: agent(name),
        session: session_id(session),
        at: ts(n),
        why,
    })
}

/// Generates realistic multi-agent traffic: messages from the user to the orchestrator or to 1 to
/// 3 specialists, broadcasts (`@all`) at a given rate, and replies from agents to the user.
#[derive(Debug)]
pub struct TrafficGen {
    rng: StdRng,
    agents: Vec<String>,
    conversations: Vec<String>,
    broadcast_percent: u32,
    body_bytes: usize,
    counter: u64,
}

impl TrafficGen {
    /// `agents` specialists named `a0`, `a1`, ...; the orchestrator is `lead`.
    pub fn new(
        seed: u64,
        agents: usize,
        conversations: usize,
        broadcast_percent: u32,
        body_bytes: usize,
    ) -> Self {
        Self {
            rng: StdRng::seed_from_u64(seed),
            agents: (0..agents).map(|i| format!("a{i}")).collect(),
            conversations: (0..conversations).map(|i| format!("bench:{i}")).collect(),
            broadcast_percent,
            body_bytes,
            counter: 0,
        }
    }

    /// The specialists' names.
    pub fn agents(&self) -> &[String] {
        &self.agents
    }

    /// The conversation keys.
    pub fn conversations(&self) -> &[String] {
        &self.conversations
    }

    /// The next message event.
    pub fn next_message(&mut self) -> Event {
        self.counter += 1;
        let n = self.counter;
        let conversation =
            self.conversations[self.rng.gen_range(0..self.conversations.len())].clone();
        let body: String = "x".repeat(self.body_bytes);
        let roll = self.rng.gen_range(0..100);
        let (sender, audience) = if roll < self.broadcast_percent {
            ("user".to_owned(), "all".to_owned())
        } else if roll < 50 {
            let k = self.rng.gen_range(1..=3);
            let mut names: Vec<String> = (0..k)
                .map(|_| self.agents[self.rng.gen_range(0..self.agents.len())].clone())
                .collect();
            names.sort();
            names.dedup();
            ("user".to_owned(), names.join(","))
        } else if roll < 60 {
            ("user".to_owned(), "lead".to_owned())
        } else {
            let from = self.agents[self.rng.gen_range(0..self.agents.len())].clone();
            (from, "user".to_owned())
        };
        text_message(n, &conversation, &sender, &audience, &body)
    }

    /// A message carrying tool parts, to exercise every `Part` variant.
    pub fn tool_exchange(&mut self, conversation: &str, sender: &str) -> Event {
        self.counter += 1;
        let n = self.counter;
        let call = format!("call_{n}");
        Event::MessagePosted(Message {
            id: message_id(n),
            conversation: conv(conversation),
            sender: Participant::parse(sender).expect("valid sender"),
            audience: Audience::user(),
            parts: vec![
                Part::text("checking"),
                Part::ToolCall {
                    id: call.clone(),
                    name: "get_history".into(),
                    arguments: "{\"limit\":5}".into(),
                },
                Part::ToolResult {
                    call_id: call,
                    content: "[]".into(),
                    is_error: false,
                },
            ],
            reply_to: None,
            at: ts(n),
        })
    }
}
