//! Provider settings as the configuration gives them: which kind, where, which model, which
//! environment variable holds the key, streaming, timeouts and retries. Validated here so that
//! every layer reports the same errors.

use std::path::PathBuf;
use std::time::Duration;

/// The provider kinds this build knows, as written in `kind = "..."`.
pub const KINDS: [&str; 5] = [
    "scripted",
    "openai-chat",
    "anthropic-messages",
    "openai-responses",
    "claude-code",
];

/// Retries of one request: exponential backoff with jitter between `initial_backoff` and
/// `max_backoff`, at most `max_retries` times, on 429 (honouring `Retry-After`), 5xx and
/// connection failures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetrySettings {
    /// Retries after the first attempt (0 = never retry).
    pub max_retries: u32,
    /// The first delay.
    pub initial_backoff: Duration,
    /// The largest backoff delay (a server's `Retry-After` is honoured beyond it).
    pub max_backoff: Duration,
}

impl Default for RetrySettings {
    fn default() -> Self {
        Self {
            max_retries: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
        }
    }
}

/// Settings of an HTTP provider (`openai-chat`, `anthropic-messages`, `openai-responses`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpSettings {
    /// The API's base URL including its version path, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// The model name sent with every request.
    pub model: String,
    /// The name of the environment variable that holds the API key; `None` for local servers
    /// that need no key. The key itself is never logged, printed or stored.
    pub api_key_env: Option<String>,
    /// Whether to stream replies (server-sent events).
    pub stream: bool,
    /// How long to wait for a connection.
    pub connect_timeout: Duration,
    /// How long to wait for each read (the next bytes of a body or stream); a long stream that
    /// keeps sending is never cut. The runtime's per-turn timeout bounds the whole turn.
    pub read_timeout: Duration,
    /// Retries.
    pub retry: RetrySettings,
    /// The model's context window in tokens.
    pub context_window: u64,
    /// The most tokens a reply may have, sent by every kind in the field its API expects
    /// (`openai-chat`: `max_completion_tokens` to OpenAI, `max_tokens` elsewhere;
    /// `openai-responses`: `max_output_tokens`; `anthropic-messages`: `max_tokens`). A reply cut
    /// there is an error. See [`default_max_output_tokens`].
    pub max_output_tokens: u32,
    /// Whether replies are streamed when tools are offered (`stream_tools`; `openai-chat` only).
    /// Some local servers (llama-cpp-python) refuse a streamed request whose `tool_choice` is
    /// `"auto"`: `false` sends such requests non-streamed.
    pub stream_tools: bool,
    /// Whether other senders' messages carry their name in the text (`[bob]: ...`), for chat
    /// templates that drop the `name` field (`sender_labels`; `openai-chat` only). Default: on,
    /// except for OpenAI's own API (see [`HttpSettings::new`]).
    pub sender_labels: bool,
    /// How long Anthropic keeps the prompt prefix each request marks for caching (`cache_ttl`;
    /// `anthropic-messages` only).
    pub cache_ttl: CacheTtl,
    /// Whether each request carries a `prompt_cache_key` naming its conversation and agent, so
    /// the requests of one agent session reach the same prompt cache (`prompt_cache_key`;
    /// `openai-chat` and `openai-responses`). Off for servers that refuse unknown fields.
    pub prompt_cache_key: bool,
}

/// How long Anthropic keeps a cached prompt prefix after its last use: the value of
/// `cache_control.ttl` on every breakpoint of a request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CacheTtl {
    /// Five minutes (`"5m"`), the API's default: a write costs 1.25x base input.
    #[default]
    FiveMinutes,
    /// One hour (`"1h"`): a write costs 2x base input, for agents idle longer than five minutes
    /// between turns.
    OneHour,
}

impl CacheTtl {
    /// The values `cache_ttl` takes, as written in the configuration and sent to the API.
    pub const VALUES: [&'static str; 2] = ["5m", "1h"];

    /// The value as the API and the configuration write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FiveMinutes => "5m",
            Self::OneHour => "1h",
        }
    }

    /// The TTL written `value` (`"5m"` or `"1h"`), or `None`.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "5m" => Some(Self::FiveMinutes),
            "1h" => Some(Self::OneHour),
            _ => None,
        }
    }
}

/// The output limit when the configuration sets none: 4096 tokens, or a quarter of a smaller
/// window (a 2,048-token model gets 512), so a reply never takes the whole window.
pub fn default_max_output_tokens(context_window: u64) -> u32 {
    u32::try_from((context_window / 4).clamp(16, 4096)).unwrap_or(4096)
}

/// Whether `base_url` is OpenAI's own API (which reads `name` and wants `max_completion_tokens`).
pub fn is_openai_api(base_url: &str) -> bool {
    base_url.contains("://api.openai.com")
}

impl HttpSettings {
    /// Settings with the defaults for everything but where and which model.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        let base_url: String = base_url.into();
        let sender_labels = !is_openai_api(&base_url);
        Self {
            base_url,
            model: model.into(),
            api_key_env: None,
            stream: true,
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(120),
            retry: RetrySettings::default(),
            context_window: 128_000,
            max_output_tokens: default_max_output_tokens(128_000),
            stream_tools: true,
            sender_labels,
            cache_ttl: CacheTtl::default(),
            prompt_cache_key: true,
        }
    }

    /// `base_url` joined with `path` (`/chat/completions`), without a doubled slash.
    pub fn url(&self, path: &str) -> String {
        format!(
            "{}/{}",
            self.base_url.trim_end_matches('/'),
            path.trim_start_matches('/')
        )
    }
}

/// Settings of the `claude-code` provider: the Claude Code CLI run as a subprocess.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaudeCodeSettings {
    /// The executable (`claude` on the PATH by default).
    pub executable: PathBuf,
    /// `--model`, if set.
    pub model: Option<String>,
    /// Extra arguments passed before ours (e.g. `--permission-mode`, `--allowedTools`).
    pub extra_args: Vec<String>,
    /// The model's context window in tokens.
    pub context_window: u64,
    /// How long to wait for the next output line before the run is treated as hung.
    pub read_timeout: Duration,
    /// The folder legio keeps the CLI's state in (made with mode 0700): the CLI's working
    /// directory per agent and conversation (`work/CONVERSATION/AGENT`), the pid files of
    /// running CLIs, a turn's `--mcp-config` file. The configuration's default is beside the database (`<store.path>.claude-code`);
    /// [`Default`] has `legio-claude-code-UID` in the system's temporary folder.
    pub state_dir: PathBuf,
}

impl ClaudeCodeSettings {
    /// The state directory used without a configuration: `legio-claude-code-UID` in the
    /// system's temporary folder (one per user: it holds credentials while a turn runs).
    pub fn default_state_dir() -> PathBuf {
        // The owner of /proc/self is this process's user (Linux); elsewhere the login name.
        let user = std::fs::metadata("/proc/self")
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m).to_string())
            .or_else(|_| std::env::var("USER"))
            .unwrap_or_else(|_| "user".to_owned());
        std::env::temp_dir().join(format!("legio-claude-code-{user}"))
    }
}

impl Default for ClaudeCodeSettings {
    fn default() -> Self {
        Self {
            executable: PathBuf::from("claude"),
            model: None,
            extra_args: Vec::new(),
            context_window: 200_000,
            read_timeout: Duration::from_secs(600),
            state_dir: Self::default_state_dir(),
        }
    }
}
