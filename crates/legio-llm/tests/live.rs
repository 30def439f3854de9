//! Opt-in tests against a real endpoint: `#[ignore]`d (reported as ignored, never as passed), run
//! with `--ignored` and these variables: `LEGIO_LIVE_BASE_URL` (required: the endpoint, or the
//! executable for `claude-code`), `LEGIO_LIVE_KIND` (default `openai-chat`), `LEGIO_LIVE_MODEL`,
//! `LEGIO_LIVE_KEY_ENV` (the name of the variable holding the key). Run with `--ignored` but
//! without `LEGIO_LIVE_BASE_URL`, the test fails saying so. Examples:
//!
//! ```text
//! LEGIO_LIVE_KIND=openai-chat LEGIO_LIVE_BASE_URL=http://127.0.0.1:11434/v1 LEGIO_LIVE_MODEL=llama3.2 \
//!     cargo test -p legio-llm --test live -- --ignored --nocapture
//! LEGIO_LIVE_KIND=openai-responses LEGIO_LIVE_BASE_URL=https://api.openai.com/v1 \
//!     LEGIO_LIVE_MODEL=gpt-4o-mini LEGIO_LIVE_KEY_ENV=OPENAI_API_KEY cargo test -p legio-llm --test live -- --ignored
//! LEGIO_LIVE_KIND=anthropic-messages LEGIO_LIVE_BASE_URL=https://api.anthropic.com/v1 \
//!     LEGIO_LIVE_MODEL=claude-haiku-4-5 LEGIO_LIVE_KEY_ENV=ANTHROPIC_API_KEY cargo test -p legio-llm --test live -- --ignored
//! LEGIO_LIVE_KIND=claude-code LEGIO_LIVE_BASE_URL=claude cargo test -p legio-llm --test live -- --ignored
//! ```
//! (for `claude-code`, `LEGIO_LIVE_BASE_URL` is the executable).

use legio_core::{
    AgentName, Audience, ContextItem, ContextPlan, ConversationKey, DeliveryMode, Message,
    MessageId, Participant, Seq, Timestamp,
};
use legio_llm::{
    build_provider, ClaudeCodeSettings, HttpSettings, ProviderRequest, ProviderSettings,
};

fn message(seq: u64, text: &str) -> ContextItem {
    let at = Timestamp::from_unix_micros(1_700_000_000_000_000 + seq as i64);
    ContextItem {
        seq: Seq(seq),
        message: Message::text(
            MessageId::from_parts(at, [seq as u8; 10]),
            ConversationKey::new("live:test").unwrap(),
            Participant::User,
            Audience::All,
            text,
            at,
        ),
        redelivered: false,
    }
}

fn request(mode: DeliveryMode, new: ContextItem, resume: Option<String>) -> ProviderRequest {
    ProviderRequest {
        conversation: ConversationKey::new("live:test").unwrap(),
        agent: AgentName::new("ann").unwrap(),
        system_prompt: "You are a terse test assistant. Answer in at most five words.".into(),
        resume,
        plan: ContextPlan {
            mode,
            notice: None,
            up_to: new.seq,
            history: Vec::new(),
            new_message: new,
            estimated_tokens: 20,
            summary: None,
        },
        status: None,
        deltas: None,
        tools: Default::default(),
        mcp: None,
    }
}

#[tokio::test]
#[ignore = "needs a real endpoint: set LEGIO_LIVE_BASE_URL (and LEGIO_LIVE_KIND, LEGIO_LIVE_MODEL, LEGIO_LIVE_KEY_ENV), then run with --ignored"]
async fn a_real_endpoint_answers_and_a_stateful_one_resumes() {
    let base_url = std::env::var("LEGIO_LIVE_BASE_URL").expect(
        "LEGIO_LIVE_BASE_URL is not set: set it (and LEGIO_LIVE_KIND, LEGIO_LIVE_MODEL, LEGIO_LIVE_KEY_ENV) to run this test",
    );
    let kind = std::env::var("LEGIO_LIVE_KIND").unwrap_or_else(|_| "openai-chat".into());
    let model = std::env::var("LEGIO_LIVE_MODEL").unwrap_or_default();
    let mut http = HttpSettings::new(base_url.clone(), model.clone());
    http.api_key_env = std::env::var("LEGIO_LIVE_KEY_ENV").ok();
    let settings = match kind.as_str() {
        "openai-chat" => ProviderSettings::OpenAiChat(http),
        "anthropic-messages" => ProviderSettings::AnthropicMessages(http),
        "openai-responses" => ProviderSettings::OpenAiResponses(http),
        "claude-code" => ProviderSettings::ClaudeCode(ClaudeCodeSettings {
            executable: base_url.into(),
            model: (!model.is_empty()).then_some(model),
            ..ClaudeCodeSettings::default()
        }),
        other => panic!("LEGIO_LIVE_KIND={other} is not a real provider kind"),
    };
    let provider = build_provider("live", &settings).unwrap();
    let stateful = settings.history().is_stateful();
    let first = provider
        .call(request(
            if stateful {
                DeliveryMode::Bootstrap
            } else {
                DeliveryMode::Full
            },
            message(1, "Remember the word 'heliotrope'. Reply with OK."),
            None,
        ))
        .await
        .unwrap();
    eprintln!("first reply: {:?} usage {:?}", first.text, first.usage);
    assert!(!first.text.trim().is_empty());
    assert!(first.usage.is_some_and(|u| u.input > 0));
    if stateful {
        let session = first.provider_session.clone().expect("a provider session");
        let second = provider
            .call(request(
                DeliveryMode::Delta,
                message(2, "Which word did I ask you to remember?"),
                Some(session),
            ))
            .await
            .unwrap();
        eprintln!("second reply: {:?}", second.text);
        assert!(
            second.text.to_lowercase().contains("heliotrope"),
            "the session was resumed"
        );
    }
}
