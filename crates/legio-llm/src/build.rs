//! Building a provider from its settings: the one place that maps a configured `kind` to code.

use std::sync::Arc;

use legio_core::{History, Vocabulary};

use crate::http::BuildError;
use crate::provider::Provider;
use crate::scripted::{ScriptedConfig, ScriptedProvider};
use crate::settings::{ClaudeCodeSettings, HttpSettings};

/// A provider's settings by kind.
#[derive(Clone, Debug, PartialEq)]
pub enum ProviderSettings {
    /// The deterministic offline provider.
    Scripted(ScriptedConfig),
    /// OpenAI-compatible Chat Completions (stateless).
    OpenAiChat(HttpSettings),
    /// Anthropic Messages (stateless).
    AnthropicMessages(HttpSettings),
    /// OpenAI Responses (session-stateful, resumable through `previous_response_id`).
    OpenAiResponses(HttpSettings),
    /// The Claude Code CLI (session-stateful, resumable through its session id).
    ClaudeCode(ClaudeCodeSettings),
}

impl ProviderSettings {
    /// The `kind` word of these settings.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Scripted(_) => "scripted",
            Self::OpenAiChat(_) => "openai-chat",
            Self::AnthropicMessages(_) => "anthropic-messages",
            Self::OpenAiResponses(_) => "openai-responses",
            Self::ClaudeCode(_) => "claude-code",
        }
    }

    /// Whether a provider of these settings keeps its own history (what the planner needs to
    /// know before any provider is built, e.g. for `legio context`).
    pub fn history(&self) -> History {
        match self {
            Self::Scripted(c) => c.history,
            Self::OpenAiChat(_) | Self::AnthropicMessages(_) => History::Stateless,
            Self::OpenAiResponses(_) | Self::ClaudeCode(_) => History::Session { resumable: true },
        }
    }

    /// The reply's output limit the provider sends (0: the kind sends none and the window
    /// needs no reserve for it: `scripted`, `claude-code`).
    pub fn max_output_tokens(&self) -> u64 {
        match self {
            Self::OpenAiChat(s) | Self::AnthropicMessages(s) | Self::OpenAiResponses(s) => {
                u64::from(s.max_output_tokens)
            }
            Self::Scripted(_) | Self::ClaudeCode(_) => 0,
        }
    }

    /// Whether the provider counts tokens with legio's own estimate (the scripted provider),
    /// so estimates need no calibration.
    pub fn counts_like_estimates(&self) -> bool {
        matches!(self, Self::Scripted(_))
    }

    /// The model's own vocabulary, when legio has it (OpenAI models on the OpenAI kinds): the
    /// window check then counts requests exactly instead of by a calibrated estimate.
    pub fn vocabulary(&self) -> Option<Vocabulary> {
        match self {
            Self::OpenAiChat(s) | Self::OpenAiResponses(s) => Vocabulary::for_model(&s.model),
            _ => None,
        }
    }

    /// The context window the settings claim.
    pub fn context_window(&self) -> u64 {
        match self {
            Self::Scripted(c) => c.context_window,
            Self::OpenAiChat(s) | Self::AnthropicMessages(s) | Self::OpenAiResponses(s) => {
                s.context_window
            }
            Self::ClaudeCode(s) => s.context_window,
        }
    }
}

/// Builds the provider named `name` in the configuration. An HTTP provider reads its key from
/// its environment variable now: a missing variable is an error naming it.
pub fn build_provider(
    name: &str,
    settings: &ProviderSettings,
) -> Result<Arc<dyn Provider>, BuildError> {
    Ok(match settings {
        ProviderSettings::Scripted(c) => {
            let provider = ScriptedProvider::new(*c);
            // Test support across processes (the cluster tests): see `with_shared_sessions`.
            Arc::new(
                match std::env::var_os(crate::scripted::SHARED_SESSIONS_ENV) {
                    Some(dir) => provider.with_shared_sessions(dir.into()),
                    None => provider,
                },
            )
        }
        ProviderSettings::OpenAiChat(s) => {
            Arc::new(crate::openai_chat::OpenAiChat::new(name, s.clone())?)
        }
        ProviderSettings::AnthropicMessages(s) => {
            Arc::new(crate::anthropic::AnthropicMessages::new(name, s.clone())?)
        }
        ProviderSettings::OpenAiResponses(s) => Arc::new(
            crate::openai_responses::OpenAiResponses::new(name, s.clone())?,
        ),
        ProviderSettings::ClaudeCode(s) => {
            Arc::new(crate::claude_code::ClaudeCode::new(name, s.clone())?)
        }
    })
}
