//! legio-llm: LLM providers. The [`Provider`] trait every provider implements, helpers that
//! render a context plan as chat turns, and a deterministic [`ScriptedProvider`] for tests, demos
//! and benchmarks. The only crate that will know provider JSON (real providers are a later issue).

mod provider;
mod render;
mod scripted;

pub use provider::{
    Capabilities, DeltaSink, Provider, ProviderError, ProviderFuture, ProviderReply,
    ProviderRequest,
};
pub use render::{bootstrap_block, chat_turns, ChatRole, ChatTurn};
pub use scripted::{Fault, RecordedRequest, ScriptedConfig, ScriptedProvider};
