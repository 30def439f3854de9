//! `[[server.tokens]]`: bearer tokens with scopes (`host`: post turns and read histories, maybe
//! only of conversations under a prefix; `post_as_agent`, beside `host`: post a turn whose
//! `sender` is an agent, speaking as that agent; `metrics`: /metrics and the dashboard;
//! `operator`: everything, the /operator endpoints included). Parsed here with the rest of `[server]`;
//! legio-server decides who may call what (its auth module), with the old `token` and
//! `operator_token` keys mapped onto the same scopes.

use serde::Deserialize;

/// One `[[server.tokens]]` table as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TokenSection {
    name: Option<String>,
    token_env: Option<String>,
    token: Option<String>,
    scopes: Vec<String>,
    conversations: Option<String>,
}

/// What a token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// `GET /meta`, `POST /sessions/{id}/turns`, `GET /sessions/{id}/history`.
    Host,
    /// Beside `host`: a turn whose `sender` is an agent of the roster (the host relays what that
    /// agent says, and the others see it as that agent's). Without it a token posts only as the
    /// user.
    PostAsAgent,
    /// `GET /metrics`, `/dashboard`.
    Metrics,
    /// Everything, the `/operator` endpoints included.
    Operator,
}

impl Scope {
    /// The scope's name in the configuration and in errors.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Host => "host",
            Self::PostAsAgent => "post_as_agent",
            Self::Metrics => "metrics",
            Self::Operator => "operator",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        [Self::Host, Self::PostAsAgent, Self::Metrics, Self::Operator]
            .into_iter()
            .find(|s| s.as_str() == name)
    }
}

/// A token with its scopes, validated.
#[derive(Clone, PartialEq, Eq)]
pub struct ScopedToken {
    /// A name for logs and errors (never the token).
    pub name: String,
    /// The bearer token.
    pub token: String,
    /// What it may do (`operator` implies every other scope).
    pub scopes: Vec<Scope>,
    /// With `host` only: the conversations it may post to and read start with this prefix.
    pub conversations: Option<String>,
}

impl std::fmt::Debug for ScopedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScopedToken")
            .field("name", &self.name)
            .field("token", &"<redacted>")
            .field("scopes", &self.scopes)
            .field("conversations", &self.conversations)
            .finish()
    }
}

impl ScopedToken {
    /// Whether the token has `scope` (an operator token has every scope).
    pub fn allows(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope) || self.scopes.contains(&Scope::Operator)
    }

    /// Whether the token may post to and read `conversation`.
    pub fn may_access(&self, conversation: &str) -> bool {
        self.conversations
            .as_deref()
            .is_none_or(|prefix| conversation.starts_with(prefix))
    }

    /// Validates the tables; `env` reads the variables named by `token_env`.
    pub(crate) fn from_sections(
        sections: &[TokenSection],
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Vec<Self>, String> {
        let mut tokens: Vec<Self> = Vec::with_capacity(sections.len());
        for (i, section) in sections.iter().enumerate() {
            let token = Self::from_section(i, section, &env)?;
            if tokens.iter().any(|t| t.token == token.token) {
                return Err(format!(
                    "server.tokens[{i}] repeats the token of another entry; give each token one entry"
                ));
            }
            tokens.push(token);
        }
        Ok(tokens)
    }

    fn from_section(
        i: usize,
        section: &TokenSection,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        let at = format!("server.tokens[{i}]");
        let token = match (&section.token_env, &section.token) {
            (Some(var), None) => {
                env(var).ok_or_else(|| format!("{at}.token_env names {var}, which is not set"))?
            }
            (None, Some(token)) => token.clone(),
            _ => {
                return Err(format!(
                    "{at} needs exactly one of token_env (preferred) or token"
                ))
            }
        };
        check_token(&token).map_err(|why| format!("{at}: the token {why}"))?;
        let scopes = section
            .scopes
            .iter()
            .map(|s| {
                Scope::parse(s).ok_or_else(|| {
                    format!(
                        "{at}.scopes has {s:?}; the scopes are \"host\", \"post_as_agent\", \"metrics\", \"operator\""
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if scopes.is_empty() {
            return Err(format!(
                "{at}.scopes is empty; give \"host\", \"metrics\" or \"operator\""
            ));
        }
        if scopes.contains(&Scope::PostAsAgent)
            && !scopes.contains(&Scope::Host)
            && !scopes.contains(&Scope::Operator)
        {
            return Err(format!(
                "{at}.scopes has \"post_as_agent\" without \"host\"; it widens what a host token may post, so give both"
            ));
        }
        if let Some(prefix) = &section.conversations {
            check_prefix(prefix, &scopes).map_err(|why| format!("{at}.conversations {why}"))?;
        }
        Ok(Self {
            name: section
                .name
                .clone()
                .unwrap_or_else(|| format!("tokens[{i}]")),
            token,
            scopes,
            conversations: section.conversations.clone(),
        })
    }
}

/// A bearer token is one word of printable characters.
pub(crate) fn check_token(token: &str) -> Result<(), &'static str> {
    if token.trim().is_empty() {
        return Err("is empty");
    }
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("contains whitespace; a bearer token is one word");
    }
    Ok(())
}

fn check_prefix(prefix: &str, scopes: &[Scope]) -> Result<(), String> {
    if scopes.contains(&Scope::Operator) {
        return Err("cannot limit an operator token (operators see every conversation)".into());
    }
    let key_chars = |b: u8| b.is_ascii_alphanumeric() || b":._@+-".contains(&b);
    if prefix.is_empty() || !prefix.bytes().all(key_chars) {
        return Err(format!(
            "= {prefix:?} is not the start of a conversation key ([A-Za-z0-9:._@+-], e.g. \"tenant-a:\")"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, env: &[(&str, &str)]) -> Result<Vec<ScopedToken>, String> {
        #[derive(Deserialize)]
        struct Wrap {
            tokens: Vec<TokenSection>,
        }
        let wrap: Wrap = toml::from_str(text).map_err(|e| e.to_string())?;
        ScopedToken::from_sections(&wrap.tokens, |k| {
            env.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn tokens_read_their_variables_and_scopes() {
        let tokens = parse(
            "[[tokens]]\nname = \"front\"\ntoken_env = \"A\"\nscopes = [\"host\"]\nconversations = \"tenant-a:\"\n[[tokens]]\ntoken = \"ops\"\nscopes = [\"operator\"]",
            &[("A", "secret-a")],
        )
        .unwrap();
        assert_eq!(tokens[0].name, "front");
        assert_eq!(tokens[0].token, "secret-a");
        assert!(tokens[0].allows(Scope::Host) && !tokens[0].allows(Scope::Operator));
        assert!(tokens[0].may_access("tenant-a:1") && !tokens[0].may_access("tenant-b:1"));
        assert_eq!(tokens[1].name, "tokens[1]");
        assert!(tokens[1].allows(Scope::Metrics) && tokens[1].may_access("any"));
        assert!(
            !format!("{tokens:?}").contains("secret-a"),
            "tokens are redacted"
        );
    }

    #[test]
    fn errors_name_the_entry_and_key() {
        for (text, env, want) in [
            ("[[tokens]]\ntoken_env = \"B\"\nscopes = [\"host\"]", vec![], "tokens[0].token_env names B"),
            ("[[tokens]]\nscopes = [\"host\"]", vec![], "exactly one of"),
            ("[[tokens]]\ntoken = \"a b\"\nscopes = [\"host\"]", vec![], "whitespace"),
            ("[[tokens]]\ntoken = \"a\"\nscopes = [\"root\"]", vec![], "\"root\""),
            ("[[tokens]]\ntoken = \"a\"\nscopes = []", vec![], "scopes is empty"),
            ("[[tokens]]\ntoken = \"a\"\nscopes = [\"post_as_agent\"]", vec![], "without \"host\""),
            ("[[tokens]]\ntoken = \"a\"\nscopes = [\"operator\"]\nconversations = \"x:\"", vec![], "cannot limit an operator"),
            ("[[tokens]]\ntoken = \"a\"\nscopes = [\"host\"]\nconversations = \"a/b\"", vec![], "not the start of a conversation key"),
            ("[[tokens]]\ntoken = \"a\"\nscopes = [\"host\"]\n[[tokens]]\ntoken = \"a\"\nscopes = [\"metrics\"]", vec![], "tokens[1] repeats"),
            ("[[tokens]]\ntoken = \"a\"\nscope = \"host\"", vec![], "scope"),
        ] {
            let e = parse(text, &env).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
        }
    }
}
