//! Token estimates for when a provider reports no usage: about 4 characters a token, or 3 for
//! text that is mostly CJK (which tokenizes denser).

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
    use tiktoken_rs::tokenizer::{get_tokenizer, Tokenizer};
    let bpe = match get_tokenizer(model) {
        Some(Tokenizer::O200kBase) => tiktoken_rs::o200k_base_singleton(),
        Some(Tokenizer::Cl100kBase) => tiktoken_rs::cl100k_base_singleton(),
        _ => return None,
    };
    Some(bpe.encode_with_special_tokens(text).len() as u64)
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
    fn estimates() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("abc"), 1);
        assert_eq!(estimate_tokens("abcdefgh"), 2);
        assert_eq!(estimate_tokens("日本語のテキスト"), 3); // 8 CJK chars / 3
    }
}
