//! Names in NATS: conversation keys as subject tokens and key-value keys, reversibly.
//!
//! A conversation key may hold `.` (a subject separator) and `:`/`@`/`+` (not allowed in
//! key-value keys). Letters, digits, `_` and `-` are kept; every other byte becomes `=XX` (upper
//! case hex). `=` itself is escaped, so decoding is unambiguous, and the result is a valid subject
//! token and key-value key.

use legio_core::ConversationKey;

/// Encodes `text` as one subject token / key-value key.
pub(crate) fn encode_token(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            out.push(b as char);
        } else {
            out.push_str(&format!("={b:02X}"));
        }
    }
    out
}

/// Decodes what [`encode_token`] made; `None` for anything it cannot have made.
pub(crate) fn decode_token(token: &str) -> Option<String> {
    let bytes = token.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'=' {
            let hex = token.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The subjects of one stream: `<stream>.conv.<token>`.
#[derive(Clone, Debug)]
pub(crate) struct Subjects {
    prefix: String,
}

impl Subjects {
    pub(crate) fn new(stream: &str) -> Self {
        Self {
            prefix: format!("{stream}.conv."),
        }
    }

    /// The wildcard that the stream captures.
    pub(crate) fn all(&self) -> String {
        format!("{}>", self.prefix)
    }

    /// The subject of one conversation.
    pub(crate) fn of(&self, conversation: &ConversationKey) -> String {
        format!("{}{}", self.prefix, encode_token(conversation.as_str()))
    }

    /// The conversation a subject belongs to, if it is one of ours.
    pub(crate) fn conversation(&self, subject: &str) -> Option<ConversationKey> {
        let token = subject.strip_prefix(&self.prefix)?;
        ConversationKey::new(decode_token(token)?).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_hold_no_separator() {
        for key in [
            "t:1",
            "a.b.c",
            "legio:memory",
            "x@y+z",
            "plain-key_1",
            "=.=",
        ] {
            let token = encode_token(key);
            assert!(
                token
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_-=".contains(&b)),
                "{token}"
            );
            assert_eq!(decode_token(&token).as_deref(), Some(key));
        }
        assert_eq!(encode_token("t:1.x"), "t=3A1=2Ex");
        assert_eq!(decode_token("bad=Z"), None);
    }

    #[test]
    fn subjects_name_conversations() {
        let subjects = Subjects::new("legio");
        let conv = ConversationKey::new("team.a:1").unwrap();
        let subject = subjects.of(&conv);
        assert_eq!(subject, "legio.conv.team=2Ea=3A1");
        assert_eq!(subjects.conversation(&subject), Some(conv));
        assert_eq!(subjects.conversation("other.conv.x"), None);
        assert_eq!(subjects.all(), "legio.conv.>");
    }
}
