//! The `[server]` section of the configuration: where `legio serve` listens and how it guards
//! its endpoints. The configuration keeps the table as written (`RawSection`); the server parses
//! it here, strictly like every section. `LEGIO_API_TOKEN` and `LEGIO_OPERATOR_TOKEN` override the
//! file's tokens.

use std::net::SocketAddr;
use std::time::Duration;

use legio_runtime::{ConfigError, RuntimeConfig};
use serde::Deserialize;

/// The `[server]` table as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerSection {
    bind: Option<String>,
    token: Option<String>,
    operator_token: Option<String>,
    body_limit_bytes: Option<usize>,
    shutdown_grace_seconds: Option<f64>,
    storage_failure_exit_seconds: Option<f64>,
    allowed_hosts: Option<Vec<String>>,
    #[serde(default)]
    allowed_origins: Vec<String>,
    #[serde(default)]
    limits: crate::server_limits::LimitsSection,
    #[serde(default)]
    tokens: Vec<crate::server_tokens::TokenSection>,
}

/// The server's settings, validated.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerSettings {
    /// The address to listen on (default `127.0.0.1:7878`, loopback).
    pub bind: SocketAddr,
    /// The bearer token every endpoint but `/healthz` and `/readyz` requires. Required to bind a
    /// non-loopback address.
    pub token: Option<String>,
    /// A separate token for the operator endpoints (`/operator/...`); without it, `token` opens
    /// them too.
    pub operator_token: Option<String>,
    /// The largest request body accepted, in bytes (default 2 MiB).
    pub body_limit_bytes: usize,
    /// How long a shutdown waits for in-flight requests before cancelling them (default 10 s).
    pub shutdown_grace: Duration,
    /// How long after the event log failed (a full disk, too many open files, an I/O error)
    /// `legio serve` stops and exits non-zero, so that its supervisor starts it again (default
    /// 10 s). Meanwhile `/readyz` answers 503 with the cause and writes are refused.
    pub storage_failure_exit: Duration,
    /// `Host` names answered besides the loopback names (`"*"`: any), against DNS rebinding
    /// (origin.rs). Unset: on a loopback bind only the loopback names (`localhost`,
    /// `127.0.0.1`, `[::1]`), on another bind any `Host`.
    pub allowed_hosts: Option<Vec<String>>,
    /// Browser origins (`https://app.example.com`) accepted besides the server's own; a request
    /// with another `Origin` is 403 on every route (origin.rs).
    pub allowed_origins: Vec<String>,
    /// `[server.limits]`: timeouts and caps (server_limits.rs).
    pub limits: crate::server_limits::ServerLimits,
    /// `[[server.tokens]]`: tokens with scopes (server_tokens.rs), beside `token` and
    /// `operator_token`.
    pub tokens: Vec<crate::server_tokens::ScopedToken>,
}

impl std::fmt::Debug for ServerSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let redact = |t: &Option<String>| t.as_ref().map(|_| "<redacted>");
        f.debug_struct("ServerSettings")
            .field("bind", &self.bind)
            .field("token", &redact(&self.token))
            .field("operator_token", &redact(&self.operator_token))
            .field("body_limit_bytes", &self.body_limit_bytes)
            .field("shutdown_grace", &self.shutdown_grace)
            .field("storage_failure_exit", &self.storage_failure_exit)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("allowed_origins", &self.allowed_origins)
            .field("limits", &self.limits)
            .field("tokens", &self.tokens)
            .finish()
    }
}

/// The default address: loopback only.
pub const DEFAULT_BIND: &str = "127.0.0.1:7878";

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 7878)),
            token: None,
            operator_token: None,
            body_limit_bytes: 2 * 1024 * 1024,
            shutdown_grace: Duration::from_secs(10),
            storage_failure_exit: Duration::from_secs(10),
            allowed_hosts: None,
            allowed_origins: Vec::new(),
            limits: crate::server_limits::ServerLimits::default(),
            tokens: Vec::new(),
        }
    }
}

impl ServerSettings {
    /// The settings of `config`'s `[server]` table (defaults without one); errors name the key
    /// and the file, like the configuration's own.
    pub fn from_config(config: &RuntimeConfig) -> Result<Self, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            file: config.source.clone().unwrap_or_default(),
            message,
        };
        let section: ServerSection = config
            .server
            .parse()
            .map_err(|e| invalid(format!("[server]: {e}")))?;
        Self::from_section(&section, |var| std::env::var(var).ok()).map_err(invalid)
    }

    /// Validates the section; `invalid` wraps a message naming the key into the file's error.
    /// `env` reads an environment variable (injected so tests need not touch the process's).
    fn from_section(
        section: &ServerSection,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        let mut settings = Self::default();
        if let Some(bind) = &section.bind {
            settings.bind = bind.parse().map_err(|_| {
                format!(
                    "server.bind = {bind:?} is not an address with a port, like \"{DEFAULT_BIND}\""
                )
            })?;
        }
        let token =
            |key: &str, var: &str, value: &Option<String>| -> Result<Option<String>, String> {
                let (value, from) = match env(var) {
                    Some(v) => (Some(v), var.to_owned()),
                    None => (value.clone(), format!("server.{key}")),
                };
                match value {
                    Some(t) if t.trim().is_empty() => {
                        Err(format!("{from} is empty; set a token or remove it"))
                    }
                    Some(t) => crate::server_tokens::check_token(&t)
                        .map(|()| Some(t))
                        .map_err(|why| format!("{from} {why}")),
                    None => Ok(None),
                }
            };
        settings.token = token("token", "LEGIO_API_TOKEN", &section.token)?;
        settings.operator_token = token(
            "operator_token",
            "LEGIO_OPERATOR_TOKEN",
            &section.operator_token,
        )?;
        if let Some(limit) = section.body_limit_bytes {
            if limit == 0 {
                return Err("server.body_limit_bytes must be above 0".into());
            }
            settings.body_limit_bytes = limit;
        }
        if let Some(grace) = section.shutdown_grace_seconds {
            settings.shutdown_grace = Duration::try_from_secs_f64(grace).map_err(|_| {
                format!("server.shutdown_grace_seconds = {grace} is not a valid duration")
            })?;
        }
        if let Some(exit) = section.storage_failure_exit_seconds {
            settings.storage_failure_exit = Duration::try_from_secs_f64(exit).map_err(|_| {
                format!("server.storage_failure_exit_seconds = {exit} is not a valid duration")
            })?;
        }
        if let Some(hosts) = &section.allowed_hosts {
            for host in hosts {
                crate::origin::check_host(host)
                    .map_err(|why| format!("server.allowed_hosts {why}"))?;
            }
            settings.allowed_hosts = Some(hosts.clone());
        }
        for origin in &section.allowed_origins {
            crate::origin::check_origin(origin)
                .map_err(|why| format!("server.allowed_origins {why}"))?;
        }
        settings
            .allowed_origins
            .clone_from(&section.allowed_origins);
        settings.limits = crate::server_limits::ServerLimits::from_section(&section.limits)?;
        settings.tokens = crate::server_tokens::ScopedToken::from_sections(&section.tokens, &env)?;
        Ok(settings)
    }

    /// Whether any token is configured (a non-loopback bind needs one).
    pub fn has_tokens(&self) -> bool {
        self.token.is_some() || self.operator_token.is_some() || !self.tokens.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, env: &[(&str, &str)]) -> Result<ServerSettings, String> {
        let section: ServerSection = toml::from_str(text).map_err(|e| e.to_string())?;
        ServerSettings::from_section(&section, |k| {
            env.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn defaults_are_loopback_without_a_token() {
        let s = parse("", &[]).unwrap();
        assert_eq!(s, ServerSettings::default());
        assert!(s.bind.ip().is_loopback());
        assert_eq!(s.body_limit_bytes, 2 * 1024 * 1024);
    }

    #[test]
    fn values_and_env_overrides() {
        let s = parse(
            "bind = \"0.0.0.0:9000\"\ntoken = \"file-token\"\nbody_limit_bytes = 10\nshutdown_grace_seconds = 1.5\nstorage_failure_exit_seconds = 0.5",
            &[("LEGIO_OPERATOR_TOKEN", "ops")],
        )
        .unwrap();
        assert_eq!(s.bind.port(), 9000);
        assert_eq!(s.token.as_deref(), Some("file-token"));
        assert_eq!(s.operator_token.as_deref(), Some("ops"));
        assert_eq!(s.shutdown_grace, Duration::from_millis(1500));
        assert_eq!(s.storage_failure_exit, Duration::from_millis(500));
        let s = parse("token = \"file\"", &[("LEGIO_API_TOKEN", "env")]).unwrap();
        assert_eq!(s.token.as_deref(), Some("env"));
        assert!(!format!("{s:?}").contains("env\""), "tokens are redacted");
    }

    /// The configuration keeps `[server]` as written; the server parses it, strictly, and its
    /// errors name the file and the key.
    #[test]
    fn the_server_parses_its_own_table_of_the_configuration() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("lead.md"), "You lead.").unwrap();
        let file = dir.path().join("legio.toml");
        let config = |server: &str| {
            let text = format!(
                "[agents.lead]\nrole = \"orchestrator\"\nprompt = \"lead.md\"\nprovider = \"p\"\n\
                 [providers.p]\nkind = \"scripted\"\n{server}"
            );
            RuntimeConfig::parse(&text, &file).unwrap()
        };
        let settings = ServerSettings::from_config(&config("")).unwrap();
        assert_eq!(settings.bind, ServerSettings::default().bind);
        let settings =
            ServerSettings::from_config(&config("[server]\nbind = \"127.0.0.1:9001\"")).unwrap();
        assert_eq!(settings.bind.port(), 9001);
        let e = ServerSettings::from_config(&config("[server]\ntokn = \"x\"")).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("[server]") && text.contains("tokn"), "{text}");
        assert!(text.contains("legio.toml"), "{text}");
        let e = ServerSettings::from_config(&config("[server]\nbind = \"x\"")).unwrap_err();
        assert!(e.to_string().contains("server.bind"), "{e}");
    }

    #[test]
    fn errors_name_the_key() {
        let e = parse("bind = \"localhost\"", &[]).unwrap_err();
        assert!(e.contains("server.bind"), "{e}");
        let e = parse("token = \" \"", &[]).unwrap_err();
        assert!(e.contains("server.token"), "{e}");
        let e = parse("", &[("LEGIO_API_TOKEN", "a b")]).unwrap_err();
        assert!(e.contains("LEGIO_API_TOKEN"), "{e}");
        let e = parse("body_limit_bytes = 0", &[]).unwrap_err();
        assert!(e.contains("server.body_limit_bytes"), "{e}");
        let e = parse("shutdown_grace_seconds = -1", &[]).unwrap_err();
        assert!(e.contains("shutdown_grace_seconds"), "{e}");
        let e = parse("storage_failure_exit_seconds = -1", &[]).unwrap_err();
        assert!(e.contains("server.storage_failure_exit_seconds"), "{e}");
        let e = parse("tokn = \"x\"", &[]).unwrap_err();
        assert!(e.contains("tokn"), "{e}");
        let e = parse("allowed_hosts = [\"http://x\"]", &[]).unwrap_err();
        assert!(e.contains("server.allowed_hosts"), "{e}");
        let e = parse("allowed_origins = [\"x.example.com\"]", &[]).unwrap_err();
        assert!(e.contains("server.allowed_origins"), "{e}");
        let s = parse(
            "allowed_hosts = [\"legio.lan\"]\nallowed_origins = [\"https://app.example.com\"]",
            &[],
        )
        .unwrap();
        assert_eq!(s.allowed_hosts, Some(vec!["legio.lan".to_owned()]));
        assert_eq!(s.allowed_origins, ["https://app.example.com"]);
    }
}
