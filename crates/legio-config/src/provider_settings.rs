//! The `[providers.NAME]` tables: parsed strictly, validated per kind into
//! [`legio_llm::ProviderSettings`]. A key that does not apply to the table's kind is an error
//! naming it, so a typo or a key copied from another kind's example never goes unnoticed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use legio_core::History;
use legio_llm::{
    default_max_output_tokens, CacheTtl, ClaudeCodeSettings, HttpSettings, ProviderSettings,
    ScriptedConfig, KINDS,
};
use serde::Deserialize;

/// One `[providers.NAME]` table as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProviderSection {
    kind: String,
    context_window: Option<u64>,
    // scripted
    history: Option<String>,
    latency_ms: Option<u64>,
    // HTTP kinds
    base_url: Option<String>,
    model: Option<String>,
    api_key_env: Option<String>,
    stream: Option<bool>,
    connect_timeout_seconds: Option<f64>,
    read_timeout_seconds: Option<f64>,
    max_retries: Option<u32>,
    retry_initial_ms: Option<u64>,
    retry_max_ms: Option<u64>,
    max_output_tokens: Option<u32>,
    stream_tools: Option<bool>,
    sender_labels: Option<bool>,
    cache_ttl: Option<String>,
    prompt_cache_key: Option<bool>,
    // claude-code
    executable: Option<PathBuf>,
    extra_args: Option<Vec<String>>,
    state_dir: Option<PathBuf>,
}

impl ProviderSection {
    /// The keys set in this table, by name, for the applies-to-this-kind check.
    fn set_keys(&self) -> Vec<&'static str> {
        let mut keys = Vec::new();
        let mut check = |set: bool, key: &'static str| {
            if set {
                keys.push(key);
            }
        };
        check(self.model.is_some(), "model");
        check(self.read_timeout_seconds.is_some(), "read_timeout_seconds");
        check(self.history.is_some(), "history");
        check(self.latency_ms.is_some(), "latency_ms");
        check(self.base_url.is_some(), "base_url");
        check(self.api_key_env.is_some(), "api_key_env");
        check(self.stream.is_some(), "stream");
        check(
            self.connect_timeout_seconds.is_some(),
            "connect_timeout_seconds",
        );
        check(self.max_retries.is_some(), "max_retries");
        check(self.retry_initial_ms.is_some(), "retry_initial_ms");
        check(self.retry_max_ms.is_some(), "retry_max_ms");
        check(self.max_output_tokens.is_some(), "max_output_tokens");
        check(self.stream_tools.is_some(), "stream_tools");
        check(self.sender_labels.is_some(), "sender_labels");
        check(self.cache_ttl.is_some(), "cache_ttl");
        check(self.prompt_cache_key.is_some(), "prompt_cache_key");
        check(self.executable.is_some(), "executable");
        check(self.extra_args.is_some(), "extra_args");
        check(self.state_dir.is_some(), "state_dir");
        keys
    }
}

const SCRIPTED_KEYS: &[&str] = &["history", "latency_ms"];
const HTTP_KEYS: &[&str] = &[
    "model",
    "read_timeout_seconds",
    "base_url",
    "api_key_env",
    "stream",
    "connect_timeout_seconds",
    "max_retries",
    "retry_initial_ms",
    "retry_max_ms",
    "max_output_tokens",
    "stream_tools",
    "sender_labels",
    "cache_ttl",
    "prompt_cache_key",
];
const CLAUDE_CODE_KEYS: &[&str] = &[
    "model",
    "read_timeout_seconds",
    "executable",
    "extra_args",
    "state_dir",
];

fn seconds(
    name: &str,
    key: &str,
    value: Option<f64>,
    default: Duration,
) -> Result<Duration, String> {
    match value {
        None => Ok(default),
        Some(v) if v.is_finite() && v > 0.0 => Ok(Duration::from_secs_f64(v)),
        Some(v) => Err(format!(
            "providers.{name}.{key} = {v} must be a positive number of seconds"
        )),
    }
}

/// Validates the table of provider `name`; relative executable paths (with a `/`) resolve
/// against `base`, the config file's folder; `store` is the database's folder (a `claude-code`
/// provider keeps its state beside it by default).
pub(crate) fn validate(
    name: &str,
    p: &ProviderSection,
    base: &Path,
    store: &Path,
) -> Result<ProviderSettings, String> {
    let kind = p.kind.as_str();
    let allowed: &[&str] = match kind {
        "scripted" => SCRIPTED_KEYS,
        "openai-chat" | "anthropic-messages" | "openai-responses" => HTTP_KEYS,
        "claude-code" => CLAUDE_CODE_KEYS,
        other => {
            return Err(format!(
                "providers.{name}.kind = {other:?} is not a known provider kind (known: {})",
                KINDS.join(", ")
            ))
        }
    };
    if let Some(key) = p.set_keys().into_iter().find(|k| !allowed.contains(k)) {
        return Err(format!(
            "providers.{name}.{key} does not apply to kind {kind:?} (its keys: context_window, {})",
            allowed.join(", ")
        ));
    }
    match kind {
        "scripted" => scripted(name, p),
        "claude-code" => claude_code(name, p, base, store),
        _ => {
            let s = http(name, p)?;
            Ok(match kind {
                "openai-chat" => ProviderSettings::OpenAiChat(s),
                "anthropic-messages" => ProviderSettings::AnthropicMessages(s),
                _ => ProviderSettings::OpenAiResponses(s),
            })
        }
    }
}

/// A `scripted` provider's settings.
fn scripted(name: &str, p: &ProviderSection) -> Result<ProviderSettings, String> {
    let history = match p.history.as_deref().unwrap_or("session") {
        "stateless" => History::Stateless,
        "session" => History::Session { resumable: true },
        "session-not-resumable" => History::Session { resumable: false },
        other => {
            return Err(format!(
                "providers.{name}.history = {other:?} is not \"stateless\", \"session\" or \"session-not-resumable\""
            ))
        }
    };
    Ok(ProviderSettings::Scripted(ScriptedConfig {
        history,
        latency: Duration::from_millis(p.latency_ms.unwrap_or(0)),
        context_window: p.context_window.unwrap_or(200_000),
    }))
}

/// A `claude-code` provider's settings; a relative executable path with a folder in it, and a
/// relative `state_dir`, are read from the config file's folder. The state directory defaults
/// to `<store.path>.claude-code`, beside the database (as its MCP key file is).
fn claude_code(
    name: &str,
    p: &ProviderSection,
    base: &Path,
    store: &Path,
) -> Result<ProviderSettings, String> {
    let defaults = ClaudeCodeSettings::default();
    let executable = match &p.executable {
        Some(path) if path.components().count() > 1 && path.is_relative() => base.join(path),
        Some(path) => path.clone(),
        None => defaults.executable.clone(),
    };
    Ok(ProviderSettings::ClaudeCode(ClaudeCodeSettings {
        executable,
        model: p.model.clone(),
        extra_args: p.extra_args.clone().unwrap_or_default(),
        context_window: p.context_window.unwrap_or(defaults.context_window),
        read_timeout: seconds(
            name,
            "read_timeout_seconds",
            p.read_timeout_seconds,
            defaults.read_timeout,
        )?,
        state_dir: match &p.state_dir {
            Some(path) if path.as_os_str().is_empty() => {
                return Err(format!(
                    "providers.{name}.state_dir is empty; remove it to keep the CLI's state beside the database"
                ))
            }
            Some(path) => base.join(path),
            None => {
                let mut beside = store.as_os_str().to_owned();
                beside.push(".claude-code");
                PathBuf::from(beside)
            }
        },
    }))
}

/// The settings of an HTTP provider (`openai-chat`, `anthropic-messages`, `openai-responses`).
fn http(name: &str, p: &ProviderSection) -> Result<HttpSettings, String> {
    let base_url = p.base_url.clone().ok_or_else(|| {
        format!("providers.{name}.base_url is missing (the API's URL with its version path, e.g. https://api.openai.com/v1 or http://127.0.0.1:11434/v1)")
    })?;
    let model = p
        .model
        .clone()
        .ok_or_else(|| format!("providers.{name}.model is missing"))?;
    let mut s = HttpSettings::new(base_url, model);
    s.api_key_env = p.api_key_env.clone().filter(|v| !v.is_empty());
    s.stream = p.stream.unwrap_or(true);
    s.connect_timeout = seconds(
        name,
        "connect_timeout_seconds",
        p.connect_timeout_seconds,
        s.connect_timeout,
    )?;
    s.read_timeout = seconds(
        name,
        "read_timeout_seconds",
        p.read_timeout_seconds,
        s.read_timeout,
    )?;
    retries(name, p, &mut s)?;
    window(name, p, &mut s)?;
    openai_chat_only(name, p, &mut s)?;
    prompt_caching(name, p, &mut s)?;
    Ok(s)
}

/// `max_retries`, `retry_initial_ms` and `retry_max_ms`.
fn retries(name: &str, p: &ProviderSection, s: &mut HttpSettings) -> Result<(), String> {
    if let Some(v) = p.max_retries {
        s.retry.max_retries = v;
    }
    if let Some(v) = p.retry_initial_ms {
        s.retry.initial_backoff = Duration::from_millis(v.max(1));
    }
    if let Some(v) = p.retry_max_ms {
        s.retry.max_backoff = Duration::from_millis(v.max(1));
    }
    if s.retry.max_backoff < s.retry.initial_backoff {
        return Err(format!(
            "providers.{name}.retry_max_ms is below retry_initial_ms"
        ));
    }
    Ok(())
}

/// `context_window` and `max_output_tokens`, which must leave room for the request.
fn window(name: &str, p: &ProviderSection, s: &mut HttpSettings) -> Result<(), String> {
    if let Some(v) = p.context_window {
        s.context_window = v;
    }
    s.max_output_tokens = p
        .max_output_tokens
        .unwrap_or_else(|| default_max_output_tokens(s.context_window));
    if u64::from(s.max_output_tokens) >= s.context_window {
        return Err(format!(
            "providers.{name}.max_output_tokens = {} leaves no room for the request in context_window {}",
            s.max_output_tokens, s.context_window
        ));
    }
    Ok(())
}

/// `stream_tools` and `sender_labels`, which only `openai-chat` takes.
fn openai_chat_only(name: &str, p: &ProviderSection, s: &mut HttpSettings) -> Result<(), String> {
    if p.kind != "openai-chat" {
        for (key, set) in [
            ("stream_tools", p.stream_tools.is_some()),
            ("sender_labels", p.sender_labels.is_some()),
        ] {
            if set {
                return Err(format!(
                    "providers.{name}.{key} applies only to kind \"openai-chat\""
                ));
            }
        }
    }
    s.stream_tools = p.stream_tools.unwrap_or(true);
    if let Some(v) = p.sender_labels {
        s.sender_labels = v;
    }
    Ok(())
}

/// `cache_ttl` (`anthropic-messages` only: the TTL of its cache breakpoints) and
/// `prompt_cache_key` (`openai-chat` and `openai-responses`: whether requests carry one).
fn prompt_caching(name: &str, p: &ProviderSection, s: &mut HttpSettings) -> Result<(), String> {
    if let Some(ttl) = &p.cache_ttl {
        if p.kind != "anthropic-messages" {
            return Err(format!(
                "providers.{name}.cache_ttl applies only to kind \"anthropic-messages\" (OpenAI caches prompts without breakpoints)"
            ));
        }
        s.cache_ttl = CacheTtl::parse(ttl).ok_or_else(|| {
            format!(
                "providers.{name}.cache_ttl = {ttl:?} is not one of {} (how long Anthropic keeps a cached prompt prefix)",
                CacheTtl::VALUES.map(|v| format!("{v:?}")).join(", ")
            )
        })?;
    }
    if let Some(on) = p.prompt_cache_key {
        if p.kind == "anthropic-messages" {
            return Err(format!(
                "providers.{name}.prompt_cache_key applies only to kinds \"openai-chat\" and \"openai-responses\" (Anthropic caches at the breakpoints of cache_ttl)"
            ));
        }
        s.prompt_cache_key = on;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ProviderSettings, String> {
        let section: ProviderSection = toml::from_str(text).map_err(|e| e.to_string())?;
        validate(
            "p",
            &section,
            Path::new("/etc/legio"),
            Path::new("/var/lib/legio/db"),
        )
    }

    #[test]
    fn each_kind_parses_with_its_defaults() {
        let s = parse("kind = \"openai-chat\"\nbase_url = \"http://127.0.0.1:11434/v1\"\nmodel = \"llama3.2\"").unwrap();
        let ProviderSettings::OpenAiChat(h) = s else {
            panic!("{s:?}")
        };
        assert!(h.stream && h.api_key_env.is_none());
        assert!(
            h.stream_tools && h.sender_labels,
            "labels on for a local server"
        );
        assert_eq!(h.max_output_tokens, 4096);
        let s = parse("kind = \"openai-chat\"\nbase_url = \"https://api.openai.com/v1\"\nmodel = \"gpt-4o\"\ncontext_window = 2048\nstream_tools = false").unwrap();
        let ProviderSettings::OpenAiChat(h) = s else {
            panic!("{s:?}")
        };
        assert!(!h.sender_labels && !h.stream_tools);
        assert_eq!(h.max_output_tokens, 512, "a quarter of a small window");
        let s = parse("kind = \"openai-responses\"\nbase_url = \"https://api.openai.com/v1\"\nmodel = \"gpt-4o-mini\"\napi_key_env = \"OPENAI_API_KEY\"\nstream = false\nread_timeout_seconds = 30").unwrap();
        assert_eq!(s.history(), History::Session { resumable: true });
        let ProviderSettings::OpenAiResponses(h) = s else {
            panic!()
        };
        assert_eq!(h.api_key_env.as_deref(), Some("OPENAI_API_KEY"));
        assert!(!h.stream);
        assert_eq!(h.read_timeout, Duration::from_secs(30));
        let s = parse("kind = \"claude-code\"\nexecutable = \"bin/claude\"").unwrap();
        let ProviderSettings::ClaudeCode(c) = s else {
            panic!()
        };
        assert_eq!(c.executable, Path::new("/etc/legio/bin/claude"));
        let s = parse("kind = \"claude-code\"").unwrap();
        let ProviderSettings::ClaudeCode(c) = s else {
            panic!()
        };
        assert_eq!(
            c.executable,
            Path::new("claude"),
            "a bare name is looked up on PATH"
        );
        assert_eq!(
            c.state_dir,
            Path::new("/var/lib/legio/db.claude-code"),
            "beside the database by default"
        );
        let s = parse("kind = \"claude-code\"\nstate_dir = \"cc-state\"").unwrap();
        let ProviderSettings::ClaudeCode(c) = s else {
            panic!()
        };
        assert_eq!(c.state_dir, Path::new("/etc/legio/cc-state"));
    }

    /// The shipped config/legio.toml with every commented provider example uncommented: each
    /// example parses, so the file's documentation cannot drift from the code.
    #[test]
    fn the_shipped_examples_parse() {
        let shipped = include_str!("../../../config/legio.toml");
        let mut text = String::new();
        let mut in_example = false;
        for line in shipped.lines() {
            if line.starts_with("# [providers.") {
                in_example = true;
            } else if !line.starts_with("# ") {
                in_example = false;
            }
            if in_example {
                text.push_str(&line[2..]);
            } else {
                text.push_str(line);
            }
            text.push('\n');
        }
        let dir = tempfile::tempdir().unwrap();
        for name in ["legatus", "vorenus", "pullo"] {
            std::fs::create_dir_all(dir.path().join("agents")).unwrap();
            std::fs::write(dir.path().join(format!("agents/{name}.md")), "prompt").unwrap();
        }
        let config = crate::RuntimeConfig::parse(&text, &dir.path().join("legio.toml")).unwrap();
        let kinds: Vec<&str> = config.providers.values().map(|p| p.kind()).collect();
        for kind in KINDS {
            assert!(kinds.contains(&kind), "no example of {kind}: {kinds:?}");
        }
        assert_eq!(config.providers.len(), 7, "{kinds:?}");
    }

    #[test]
    fn cache_ttl_is_five_minutes_unless_set_to_an_hour() {
        let http = |text: &str| match parse(text).unwrap() {
            ProviderSettings::AnthropicMessages(h) => h,
            other => panic!("{other:?}"),
        };
        let base = "kind = \"anthropic-messages\"\nbase_url = \"https://api.anthropic.com/v1\"\nmodel = \"m\"";
        assert_eq!(http(base).cache_ttl, CacheTtl::FiveMinutes);
        assert_eq!(
            http(&format!("{base}\ncache_ttl = \"5m\"")).cache_ttl,
            CacheTtl::FiveMinutes
        );
        assert_eq!(
            http(&format!("{base}\ncache_ttl = \"1h\"")).cache_ttl,
            CacheTtl::OneHour
        );
    }

    #[test]
    fn prompt_cache_key_is_on_unless_turned_off() {
        for kind in ["openai-chat", "openai-responses"] {
            let http = |extra: &str| match parse(&format!(
                "kind = \"{kind}\"\nbase_url = \"http://127.0.0.1:8080/v1\"\nmodel = \"m\"{extra}"
            ))
            .unwrap()
            {
                ProviderSettings::OpenAiChat(h) | ProviderSettings::OpenAiResponses(h) => h,
                other => panic!("{other:?}"),
            };
            assert!(http("").prompt_cache_key, "{kind}: on by default");
            assert!(
                !http("\nprompt_cache_key = false").prompt_cache_key,
                "{kind}"
            );
            assert!(http("\nprompt_cache_key = true").prompt_cache_key, "{kind}");
        }
    }

    #[test]
    fn errors_name_the_key() {
        for (text, needle) in [
            ("kind = \"gpt\"", "known: scripted, openai-chat"),
            ("kind = \"openai-chat\"\nmodel = \"m\"", "base_url is missing"),
            ("kind = \"openai-chat\"\nbase_url = \"http://x/v1\"", "model is missing"),
            ("kind = \"scripted\"\nbase_url = \"http://x/v1\"", "base_url does not apply"),
            ("kind = \"openai-chat\"\nbase_url = \"http://x/v1\"\nmodel = \"m\"\nlatency_ms = 3", "latency_ms does not apply"),
            ("kind = \"claude-code\"\napi_key_env = \"K\"", "api_key_env does not apply"),
            ("kind = \"claude-code\"\nstate_dir = \"\"", "state_dir is empty"),
            ("kind = \"anthropic-messages\"\nbase_url = \"http://x/v1\"\nmodel = \"m\"\nread_timeout_seconds = -1", "read_timeout_seconds"),
            ("kind = \"openai-chat\"\nbase_url = \"http://x/v1\"\nmodel = \"m\"\nmodle = \"m\"", "modle"),
            ("kind = \"anthropic-messages\"\nbase_url = \"http://x/v1\"\nmodel = \"m\"\nstream_tools = false", "stream_tools applies only"),
            ("kind = \"openai-chat\"\nbase_url = \"http://x/v1\"\nmodel = \"m\"\ncontext_window = 1000\nmax_output_tokens = 1000", "leaves no room"),
            ("kind = \"anthropic-messages\"\nbase_url = \"http://x/v1\"\nmodel = \"m\"\ncache_ttl = \"2h\"", "providers.p.cache_ttl = \"2h\" is not one of \"5m\", \"1h\""),
            ("kind = \"anthropic-messages\"\nbase_url = \"http://x/v1\"\nmodel = \"m\"\ncache_ttl = 3600", "cache_ttl"),
            ("kind = \"openai-chat\"\nbase_url = \"http://x/v1\"\nmodel = \"m\"\ncache_ttl = \"1h\"", "cache_ttl applies only to kind \"anthropic-messages\""),
            ("kind = \"claude-code\"\ncache_ttl = \"1h\"", "cache_ttl does not apply"),
            ("kind = \"openai-chat\"\nbase_url = \"http://x/v1\"\nmodel = \"m\"\nprompt_cache_key = \"off\"", "prompt_cache_key"),
            ("kind = \"anthropic-messages\"\nbase_url = \"http://x/v1\"\nmodel = \"m\"\nprompt_cache_key = false", "prompt_cache_key applies only to kinds \"openai-chat\" and \"openai-responses\""),
            ("kind = \"scripted\"\nprompt_cache_key = false", "prompt_cache_key does not apply"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(needle), "{text:?}: {e}");
        }
    }
}
