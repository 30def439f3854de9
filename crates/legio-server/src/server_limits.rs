//! `[server.limits]`: how long a client may take and how much of the server it may hold, with
//! safe defaults (a header read timeout that also closes idle keep-alive connections, a body read
//! timeout, a cap on open connections, a cap on turns in flight per token). Parsed here with the
//! rest of `[server]`; enforced by legio-server (hyper's timer, tower-http's body timeout).

use std::time::Duration;

use serde::Deserialize;

/// The `[server.limits]` table as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LimitsSection {
    header_read_timeout_seconds: Option<f64>,
    body_read_timeout_seconds: Option<f64>,
    max_connections: Option<usize>,
    max_turns_in_flight_per_token: Option<usize>,
    retry_after_seconds: Option<u64>,
}

/// The server's limits, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    /// From the moment a connection waits for a request (a new connection, or one kept alive
    /// after a response) until that request's head is complete; past it the connection is
    /// closed. It is therefore also the idle keep-alive timeout (default 10 s).
    pub header_read_timeout: Duration,
    /// The longest pause while a request body arrives; past it the request fails with 408 and
    /// the connection is closed (default 30 s).
    pub body_read_timeout: Duration,
    /// Open connections at once; one more is answered 503 and closed (default 512).
    pub max_connections: usize,
    /// Turns one token may have in flight at once; one more is answered 429 with `Retry-After`
    /// (default 16).
    pub max_turns_in_flight_per_token: usize,
    /// The `Retry-After` of a 429, in seconds (default 1).
    pub retry_after_seconds: u64,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            max_connections: 512,
            max_turns_in_flight_per_token: 16,
            retry_after_seconds: 1,
        }
    }
}

impl ServerLimits {
    /// Validates the table; errors name the key.
    pub(crate) fn from_section(section: &LimitsSection) -> Result<Self, String> {
        let mut limits = Self::default();
        let seconds = |key: &str, value: Option<f64>, default: Duration| match value {
            None => Ok(default),
            Some(s) if s > 0.0 => Duration::try_from_secs_f64(s)
                .map_err(|_| format!("server.limits.{key} = {s} is not a valid duration")),
            Some(s) => Err(format!("server.limits.{key} = {s} must be above 0")),
        };
        limits.header_read_timeout = seconds(
            "header_read_timeout_seconds",
            section.header_read_timeout_seconds,
            limits.header_read_timeout,
        )?;
        limits.body_read_timeout = seconds(
            "body_read_timeout_seconds",
            section.body_read_timeout_seconds,
            limits.body_read_timeout,
        )?;
        let count = |key: &str, value: Option<usize>, default: usize| match value {
            Some(0) => Err(format!("server.limits.{key} must be above 0")),
            Some(n) => Ok(n),
            None => Ok(default),
        };
        limits.max_connections = count(
            "max_connections",
            section.max_connections,
            limits.max_connections,
        )?;
        limits.max_turns_in_flight_per_token = count(
            "max_turns_in_flight_per_token",
            section.max_turns_in_flight_per_token,
            limits.max_turns_in_flight_per_token,
        )?;
        limits.retry_after_seconds = section
            .retry_after_seconds
            .unwrap_or(limits.retry_after_seconds);
        Ok(limits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ServerLimits, String> {
        let section: LimitsSection = toml::from_str(text).map_err(|e| e.to_string())?;
        ServerLimits::from_section(&section)
    }

    #[test]
    fn defaults_are_bounded() {
        let limits = parse("").unwrap();
        assert_eq!(limits, ServerLimits::default());
        assert!(limits.header_read_timeout <= Duration::from_secs(30));
        assert!(limits.max_connections < 1024, "below a common ulimit -n");
    }

    #[test]
    fn values_and_errors_name_the_key() {
        let limits = parse(
            "header_read_timeout_seconds = 0.5\nbody_read_timeout_seconds = 2\nmax_connections = 7\nmax_turns_in_flight_per_token = 3\nretry_after_seconds = 4",
        )
        .unwrap();
        assert_eq!(limits.header_read_timeout, Duration::from_millis(500));
        assert_eq!(limits.body_read_timeout, Duration::from_secs(2));
        assert_eq!(
            (
                limits.max_connections,
                limits.max_turns_in_flight_per_token,
                limits.retry_after_seconds
            ),
            (7, 3, 4)
        );
        for (text, key) in [
            (
                "header_read_timeout_seconds = 0",
                "header_read_timeout_seconds",
            ),
            (
                "body_read_timeout_seconds = -1",
                "body_read_timeout_seconds",
            ),
            ("max_connections = 0", "max_connections"),
            (
                "max_turns_in_flight_per_token = 0",
                "max_turns_in_flight_per_token",
            ),
            ("idle = 3", "idle"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(key), "{text}: {e}");
        }
    }
}
