//! Approval policies: which tool calls wait for a person's yes (`approval = [...]` under
//! `[runtime]`, for every agent, and under `[agents.NAME]`, added to those), and
//! `runtime.approval_timeout_seconds`, after which an unanswered call is denied.
//!
//! A pattern is a tool's name as offered (`write_note`, `mcp__fs__write_file`) where `*` stands
//! for any run of characters (`mcp__fs__*`, `*`).

use std::fmt;
use std::time::Duration;

/// The default `runtime.approval_timeout_seconds`: one day.
pub const APPROVAL_TIMEOUT_DEFAULT: Duration = Duration::from_secs(24 * 60 * 60);

/// One tool-name pattern, as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolPattern(String);

impl ToolPattern {
    /// Checks `text` (`key` names where it was written, for the error): not empty, and only the
    /// characters of a tool's name (letters, digits, `_`, `-`, `.`) and `*`.
    pub fn parse(key: &str, text: &str) -> Result<Self, String> {
        if text.trim().is_empty() {
            return Err(format!(
                "{key} holds an empty pattern; write a tool's name (\"write_note\") or a pattern with * (\"mcp__fs__*\")"
            ));
        }
        if let Some(bad) = text
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '*')))
        {
            return Err(format!(
                "{key} pattern {text:?} has {bad:?}; a pattern is a tool's name (letters, digits, _ - .) where * stands for any characters"
            ));
        }
        Ok(Self(text.to_owned()))
    }

    /// Whether `tool` matches: `*` matches any run of characters, everything else itself.
    pub fn matches(&self, tool: &str) -> bool {
        glob(self.0.as_bytes(), tool.as_bytes())
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ToolPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `*`-only glob, iterative with one backtrack point (linear in practice, never exponential).
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if let Some((sp, st)) = star {
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// The tools whose calls wait for a person's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApprovalPolicy {
    /// The patterns, `[runtime]`'s first, then the agent's own.
    pub patterns: Vec<ToolPattern>,
}

impl ApprovalPolicy {
    /// Parses the list written at `key` (`runtime.approval`, `agents.NAME.approval`).
    pub fn parse(key: &str, written: &[String]) -> Result<Self, String> {
        let patterns = written
            .iter()
            .map(|p| ToolPattern::parse(key, p))
            .collect::<Result<_, _>>()?;
        Ok(Self { patterns })
    }

    /// This policy with `more`'s patterns after its own.
    pub fn and(&self, more: &ApprovalPolicy) -> ApprovalPolicy {
        let mut patterns = self.patterns.clone();
        patterns.extend(more.patterns.iter().cloned());
        ApprovalPolicy { patterns }
    }

    /// The first pattern `tool` matches, if any: its calls need an approval.
    pub fn needs_approval(&self, tool: &str) -> Option<&ToolPattern> {
        self.patterns.iter().find(|p| p.matches(tool))
    }
}

/// `runtime.approval_timeout_seconds`: above zero, at most ten years.
pub fn approval_timeout(seconds: f64) -> Result<Duration, String> {
    const MAX: f64 = 10.0 * 365.0 * 24.0 * 3600.0;
    if !(seconds > 0.0 && seconds <= MAX) {
        return Err(format!(
            "runtime.approval_timeout_seconds = {seconds} must be above 0 and at most {MAX} (ten years); an unanswered approval is denied when it passes"
        ));
    }
    Ok(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(text: &str) -> ToolPattern {
        ToolPattern::parse("runtime.approval", text).unwrap()
    }

    #[test]
    fn stars_match_any_run_and_the_rest_matches_itself() {
        let cases = [
            ("write_note", "write_note", true),
            ("write_note", "write_notes", false),
            ("write_note", "rewrite_note", false),
            ("mcp__fs__*", "mcp__fs__write_file", true),
            ("mcp__fs__*", "mcp__fs__", true),
            ("mcp__fs__*", "mcp__web__get", false),
            ("*", "anything", true),
            ("*_note", "write_note", true),
            ("*_note", "write_notebook", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("a*a", "a", false),
        ];
        for (p, tool, expected) in cases {
            assert_eq!(pattern(p).matches(tool), expected, "{p} ~ {tool}");
        }
    }

    #[test]
    fn bad_patterns_name_the_key_and_the_character() {
        let e = ToolPattern::parse("agents.lead.approval", "").unwrap_err();
        assert!(
            e.contains("agents.lead.approval") && e.contains("empty"),
            "{e}"
        );
        let e = ToolPattern::parse("runtime.approval", "write note").unwrap_err();
        assert!(e.contains("runtime.approval") && e.contains("' '"), "{e}");
        let e = ToolPattern::parse("runtime.approval", "mcp__fs__?").unwrap_err();
        assert!(e.contains("'?'"), "{e}");
    }

    #[test]
    fn the_first_matching_pattern_is_named_and_timeouts_are_checked() {
        let runtime = ApprovalPolicy::parse("runtime.approval", &["pay".into()]).unwrap();
        let agent = ApprovalPolicy::parse("agents.a.approval", &["mcp__*".into()]).unwrap();
        let both = runtime.and(&agent);
        assert_eq!(both.needs_approval("pay").map(|p| p.as_str()), Some("pay"));
        assert_eq!(
            both.needs_approval("mcp__fs__rm").map(|p| p.as_str()),
            Some("mcp__*")
        );
        assert_eq!(both.needs_approval("get_history"), None);
        assert!(approval_timeout(0.0).is_err());
        assert!(approval_timeout(-1.0).is_err());
        assert!(approval_timeout(f64::NAN).is_err());
        assert_eq!(approval_timeout(1.5).unwrap(), Duration::from_millis(1500));
    }
}
