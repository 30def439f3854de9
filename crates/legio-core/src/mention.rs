//! `@mention` parsing: which agents a user message addresses.
//!
//! A mention is `@` followed by a name, where the `@` starts the text or follows a character that
//! cannot be part of a word (so `a@b` and e-mail addresses are not mentions), and the name ends at
//! a character that cannot be part of a name. Text inside backtick code spans and fenced code
//! blocks is skipped, so `@decorator` in pasted code is not a mention. Names match without regard
//! to case. `@all` addresses everyone. A handle that names no agent addresses nobody: it is plain
//! text, reported in [`Mentions::unknown`] ([`parse_mentions`] is the strict form that refuses it).

use crate::error::MentionError;
use crate::message::Audience;
use crate::name::{AgentName, Participant};

/// What a message's mentions address, and the handles that named no agent.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Mentions {
    /// `None`: no mention of an agent (the message goes to the orchestrator).
    /// `Some(Audience::All)`: `@all` was mentioned. Otherwise the mentioned agents, sorted.
    pub audience: Option<Audience>,
    /// The `@handles` that name no agent, as written, in order of appearance, each once: plain
    /// text (`@media`, `@types/node` in pasted text), for the sender to be told about.
    pub unknown: Vec<String>,
}

/// Finds the mentions in `text`: the agents of `known` it addresses, and the handles that name
/// none of them (which address nobody).
pub fn find_mentions(text: &str, known: &[AgentName]) -> Mentions {
    let mut named: Vec<AgentName> = Vec::new();
    let mut unknown: Vec<String> = Vec::new();
    let mut all = false;
    for token in mention_tokens(text) {
        let lower = token.to_ascii_lowercase();
        if lower == "all" {
            all = true;
            continue;
        }
        match known.iter().find(|k| k.as_str() == lower) {
            Some(agent) => named.push(agent.clone()),
            None if !unknown.iter().any(|u| u == token) => unknown.push(token.to_owned()),
            None => {}
        }
    }
    let audience = if all {
        Some(Audience::All)
    } else if named.is_empty() {
        None
    } else {
        Some(Audience::only(named.into_iter().map(Participant::Agent)))
    };
    Mentions { audience, unknown }
}

/// [`find_mentions`], strict: a mention of an agent not in `known` is an error listing the known
/// agents. `Ok(None)`: no mention; `Ok(Some(audience))`: what the mentions address.
pub fn parse_mentions(text: &str, known: &[AgentName]) -> Result<Option<Audience>, MentionError> {
    let mentions = find_mentions(text, known);
    match mentions.unknown.into_iter().next() {
        Some(name) => {
            let mut known_names: Vec<String> = known.iter().map(|k| k.to_string()).collect();
            known_names.sort();
            Err(MentionError::UnknownAgent {
                name,
                known: known_names,
            })
        }
        None => Ok(mentions.audience),
    }
}

/// Characters a handle goes on with: those of agent names (ASCII), and any other letter or digit,
/// so that `@vörenus` is the unknown handle `vörenus`, never a mention of `v`.
fn is_name_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '-'
}

/// Characters that, right before an `@`, make it part of a word (an address, code) rather than a
/// mention.
fn joins_word(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '@' | '/' | '\\' | '+' | '=' | '`')
}

/// The raw names after each `@` that counts as a mention, outside code.
fn mention_tokens(text: &str) -> Vec<&str> {
    let mut tokens = Vec::new();
    let mut in_fence = false;
    for line in text.split('\n') {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let mut in_code = false;
        let mut prev: Option<char> = None;
        for (i, c) in line.char_indices() {
            if c == '`' {
                in_code = !in_code;
            } else if c == '@' && !in_code && !prev.is_some_and(joins_word) {
                let rest = &line[i + 1..];
                let end = rest
                    .find(|ch: char| !is_name_char(ch))
                    .unwrap_or(rest.len());
                let name = &rest[..end];
                // A name continues into `.x` (as in `@host.com`): not a mention.
                let continues = rest[end..]
                    .strip_prefix('.')
                    .and_then(|after| after.chars().next())
                    .is_some_and(is_name_char);
                if name.starts_with(char::is_alphabetic) && !continues {
                    tokens.push(name);
                }
            }
            prev = Some(c);
        }
    }
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> Vec<AgentName> {
        ["legatus", "vorenus", "pullo"]
            .into_iter()
            .map(|n| AgentName::new(n).unwrap())
            .collect()
    }

    /// `expected`: "none", "all", a comma-separated list of agents, or "error:<name>".
    fn check(text: &str, expected: &str) {
        let got = match parse_mentions(text, &known()) {
            Ok(None) => "none".to_owned(),
            Ok(Some(audience)) => audience.to_string(),
            Err(MentionError::UnknownAgent { name, .. }) => format!("error:{name}"),
        };
        assert_eq!(got, expected, "input {text:?}");
    }

    #[test]
    fn table() {
        check("hello there", "none");
        check("@vorenus review this", "vorenus");
        check("@vorenus @pullo compare", "pullo,vorenus");
        check("@pullo, then @vorenus.", "pullo,vorenus");
        check("(@pullo) and @vorenus!", "pullo,vorenus");
        check("@VORENUS hi", "vorenus");
        check("@vorenus @vorenus twice", "vorenus");
        check("@all status please", "all");
        check("@all and @vorenus", "all");
        check("mail me at a@b.com", "none");
        check("write to someone@vorenus", "none");
        check("user@example.org", "none");
        check("see x@vorenus", "none");
        check("@example.org is a domain", "none");
        check("use `@decorator` here", "none");
        check("```\n@property\ndef x(): pass\n```\n@pullo look", "pullo");
        check("@ nobody", "none");
        check("@@vorenus", "none");
        check("@123", "none");
        check("@nobody hello", "error:nobody");
        check("ask @Nobody", "error:Nobody");
        check("end with @pullo", "pullo");
        check("line one\n@vorenus on line two", "vorenus");
        // A handle with letters agent names never have is one unknown handle, whole.
        check("@vörenus hi", "error:vörenus");
        check("@élan hi", "error:élan");
        check("@pullo—and you?", "pullo");
    }

    /// Regression (issue 11, defect 4): handles that name no agent are plain text.
    #[test]
    fn unknown_handles_are_plain_text_and_reported() {
        let found = find_mentions("ask @benandjerrys and @media, see @types/node", &known());
        assert_eq!(found.audience, None);
        assert_eq!(found.unknown, ["benandjerrys", "media", "types"]);
        let found = find_mentions("@pullo see what @media and @media think", &known());
        assert_eq!(
            found.audience.map(|a| a.to_string()).as_deref(),
            Some("pullo")
        );
        assert_eq!(found.unknown, ["media"]);
    }

    #[test]
    fn unknown_agent_error_lists_known_agents() {
        let err = parse_mentions("@brutus hi", &known()).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("\"brutus\""), "{text}");
        assert!(text.contains("legatus, pullo, vorenus"), "{text}");
    }
}
