//! Token estimates for when a provider reports no usage: about 4 characters a token, or 3 for
//! text that is mostly CJK (which tokenizes denser); and exact counts where the model's own
//! vocabulary is known ([`Vocabulary`]: tiktoken's BPE for OpenAI models, compiled into the
//! binary, so counting reads no file).

use crate::message::{Message, Part};

/// Estimated tokens of `text`; at least 1 for non-empty text.
pub fn estimate_tokens(text: &str) -> u64 {
    if text.is_empty() {
        return 0;
    }
    let (mut chars, mut cjk) = (0u64, 0u64);
    for c in text.chars() {
        chars += 1;
        if is_cjk(c) {
            cjk += 1;
        }
    }
    let per_token = if cjk * 2 > chars { 3 } else { 4 };
    chars.div_ceil(per_token)
}

/// Tokens of `text` for `model`: exact for OpenAI-family models (the BPE vocabulary tiktoken
/// uses for that model, embedded in the binary; the first use of each vocabulary builds it),
/// otherwise the [`estimate_tokens`] heuristic. Used when a provider reports no usage.
pub fn estimate_tokens_for_model(model: &str, text: &str) -> u64 {
    exact_tokens_for_model(model, text).unwrap_or_else(|| estimate_tokens(text))
}

/// Tokens of `text` counted with `model`'s own vocabulary, when it is one tiktoken knows
/// (OpenAI-family models); `None` otherwise: the caller has no exact count.
pub fn exact_tokens_for_model(model: &str, text: &str) -> Option<u64> {
    Some(Vocabulary::for_model(model)?.count(text))
}

/// Tokens the chat format adds to each message: 3 for its role and delimiters, 1 for its `name`
/// (OpenAI's counting guide for gpt-3.5-turbo, gpt-4 and later models).
pub const CHAT_MESSAGE_OVERHEAD: u64 = 4;
/// Tokens every reply is primed with (`<|start|>assistant<|message|>`).
pub const CHAT_REPLY_PRIMING: u64 = 3;
/// Tokens a tool call's framing adds besides its name and arguments (not documented by OpenAI:
/// the same allowance the estimate makes).
const TOOL_CALL_FRAMING: u64 = 4;

/// A model's own BPE vocabulary, as tiktoken embeds it (no IO: the first use of each builds it
/// from bytes compiled into the binary).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vocabulary {
    /// gpt-4o, gpt-4.1, o1, o3, o4 and later.
    O200kBase,
    /// gpt-4, gpt-3.5-turbo and the text-embedding-3 models.
    Cl100kBase,
}

impl Vocabulary {
    /// The vocabulary of `model` when tiktoken knows it (OpenAI models: `gpt-*`, `o1`, `o3`, ...).
    pub fn for_model(model: &str) -> Option<Self> {
        use tiktoken_rs::tokenizer::{get_tokenizer, Tokenizer};
        match get_tokenizer(model)? {
            Tokenizer::O200kBase => Some(Self::O200kBase),
            Tokenizer::Cl100kBase => Some(Self::Cl100kBase),
            _ => None,
        }
    }

    /// Exact tokens of `text` (as ordinary text: special-token markers in it count as text).
    pub fn count(self, text: &str) -> u64 {
        let bpe = match self {
            Self::O200kBase => tiktoken_rs::o200k_base_singleton(),
            Self::Cl100kBase => tiktoken_rs::cl100k_base_singleton(),
        };
        bpe.encode_ordinary(text).len() as u64
    }

    /// Tokens of `message` as one chat message: its text, tool calls and results counted
    /// exactly, plus the chat format's [`CHAT_MESSAGE_OVERHEAD`] (and a tool call's framing).
    pub fn count_message(self, message: &Message) -> u64 {
        CHAT_MESSAGE_OVERHEAD
            + message
                .parts
                .iter()
                .map(|p| match p {
                    Part::Text { text } => self.count(text),
                    Part::ToolCall {
                        name, arguments, ..
                    } => self.count(name) + self.count(arguments) + TOOL_CALL_FRAMING,
                    Part::ToolResult { content, .. } => self.count(content),
                })
                .sum::<u64>()
    }
}

/// Estimated tokens of a message's parts, plus a few for its framing (sender, id).
pub fn estimate_message_tokens(message: &Message) -> u64 {
    const FRAMING: u64 = 8;
    FRAMING
        + message
            .parts
            .iter()
            .map(|p| match p {
                Part::Text { text } => estimate_tokens(text),
                Part::ToolCall {
                    name, arguments, ..
                } => estimate_tokens(name) + estimate_tokens(arguments) + 4,
                Part::ToolResult { content, .. } => estimate_tokens(content) + 4,
            })
            .sum::<u64>()
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF   // Hiragana, Katakana
        | 0x3400..=0x4DBF // CJK extension A
        | 0x4E00..=0x9FFF // CJK unified ideographs
        | 0xAC00..=0xD7AF // Hangul syllables
        | 0xF900..=0xFAFF) // CJK compatibility ideographs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_models_count_with_their_vocabulary_others_estimate() {
        // "hello world" is two tokens in both cl100k and o200k; the heuristic says 3.
        assert_eq!(estimate_tokens_for_model("gpt-4o-mini", "hello world"), 2);
        assert_eq!(estimate_tokens_for_model("gpt-4-0613", "hello world"), 2);
        assert_eq!(estimate_tokens_for_model("llama3.2", "hello world"), 3);
        assert_eq!(estimate_tokens_for_model("gpt-4o", ""), 0);
        assert_eq!(exact_tokens_for_model("gpt-4o", "hello world"), Some(2));
        assert_eq!(exact_tokens_for_model("smollm2", "hello world"), None);
    }

    #[test]
    fn known_strings_count_exactly_with_the_chat_overhead() {
        // Counts checked against OpenAI's tokenizer: "hello world" is 2 tokens in both
        // vocabularies; "tiktoken is great!" is 6 in cl100k_base ("t|ik|token| is| great|!").
        let o200k = Vocabulary::for_model("gpt-4o").unwrap();
        let cl100k = Vocabulary::for_model("gpt-3.5-turbo").unwrap();
        assert_eq!(
            (o200k, cl100k),
            (Vocabulary::O200kBase, Vocabulary::Cl100kBase)
        );
        assert_eq!(
            Vocabulary::for_model("o3-mini"),
            Some(Vocabulary::O200kBase)
        );
        assert_eq!(Vocabulary::for_model("llama3.2"), None);
        assert_eq!(cl100k.count("tiktoken is great!"), 6);
        assert_eq!(o200k.count("hello world"), 2);
        assert_eq!(
            o200k.count("<|endoftext|>"),
            7,
            "a special marker counts as text"
        );
        let m = crate::test_support::message(1, "user", "all", "hello world");
        assert_eq!(o200k.count_message(&m), 2 + CHAT_MESSAGE_OVERHEAD);
    }

    #[test]
    fn estimates() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("abc"), 1);
        assert_eq!(estimate_tokens("abcdefgh"), 2);
        assert_eq!(estimate_tokens("日本語のテキスト"), 3); // 8 CJK chars / 3
    }
}
