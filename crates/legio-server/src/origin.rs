//! The `Host` and `Origin` checks against DNS rebinding and cross-site requests, on every route
//! (`/mcp` included, as the MCP specification's Streamable HTTP transport asks: an `Origin` that
//! is present and not allowed is 403). A page of `evil.example.com` whose name the attacker
//! rebinds to 127.0.0.1 reaches a loopback server with `Host: evil.example.com` and
//! `Origin: http://evil.example.com`; both are refused here, before any guard or handler.
//!
//! - `Host`: on a loopback bind only the loopback names (`localhost`, `127.0.0.1`, `[::1]`, any
//!   port) and `server.allowed_hosts` are answered; on another bind (`0.0.0.0`, a LAN address)
//!   any `Host` is, unless `server.allowed_hosts` is set (such a bind needs a token, which a
//!   rebinding page does not have). `"*"` in the list accepts any `Host`. A request without
//!   `Host` (not a browser's) is not refused for it.
//! - `Origin`: absent passes (clients that are not browsers do not send it); present, it must be
//!   the request's own origin (its scheme's host and port equal to the accepted `Host`), so the
//!   dashboard's page works where it is served, or one of `server.allowed_origins`.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use legio_runtime::ErrorCode;

use crate::error::ApiError;

/// The names a loopback server always answers to.
const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// Which `Host` and `Origin` values a server accepts, fixed when it binds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Policy {
    /// `None`: any `Host`.
    hosts: Option<Vec<HostPattern>>,
    /// `server.allowed_origins`, normalized (`scheme://host:port`).
    origins: Vec<String>,
}

/// One accepted `Host`: a name (lowercase), with a port or any.
#[derive(Clone, Debug, PartialEq, Eq)]
struct HostPattern {
    name: String,
    port: Option<u16>,
}

impl Policy {
    /// The policy of a server bound to a loopback address (`loopback`) or another, with
    /// `server.allowed_hosts` (`hosts`, validated by [`check_host`]) and `server.allowed_origins`
    /// (validated by [`check_origin`]).
    pub(crate) fn new(loopback: bool, hosts: Option<&[String]>, origins: &[String]) -> Self {
        let hosts = match hosts {
            Some(list) if list.iter().any(|h| h == "*") => None,
            None if !loopback => None,
            listed => {
                let names = LOOPBACK_NAMES.iter().map(|n| (*n).to_owned());
                let patterns = names
                    .chain(listed.unwrap_or_default().iter().cloned())
                    .filter_map(|h| split_authority(&h))
                    .map(|(name, port)| HostPattern { name, port })
                    .collect();
                Some(patterns)
            }
        };
        let origins = origins.iter().filter_map(|o| normalize_origin(o)).collect();
        Self { hosts, origins }
    }

    /// `Ok` for a request with these headers, or the refusal.
    fn check(&self, host: Option<&str>, origin: Option<&str>) -> Result<(), ApiError> {
        let host = host.map(str::trim);
        if let (Some(patterns), Some(host)) = (&self.hosts, host) {
            let accepted = split_authority(host).is_some_and(|(name, port)| {
                patterns
                    .iter()
                    .any(|p| p.name == name && (p.port.is_none() || p.port == port))
            });
            if !accepted {
                return Err(ApiError::new(
                    ErrorCode::Forbidden,
                    format!(
                        "Host {host:?} is not a name this server answers to (on a loopback bind: localhost, 127.0.0.1 and [::1], against DNS rebinding); add it to server.allowed_hosts to serve it"
                    ),
                ));
            }
        }
        let Some(origin) = origin.map(str::trim) else {
            return Ok(());
        };
        let same_origin = host.is_some_and(|host| same_origin(origin, host));
        let listed = normalize_origin(origin).is_some_and(|o| self.origins.contains(&o));
        if same_origin || listed {
            return Ok(());
        }
        Err(ApiError::new(
            ErrorCode::Forbidden,
            format!(
                "Origin {origin:?} may not call this server (a page of another site; only this server's own origin and server.allowed_origins are accepted); add it to server.allowed_origins to allow it"
            ),
        ))
    }
}

/// Refuses a request whose `Host` or `Origin` the policy does not accept (403 `forbidden`,
/// naming the setting that would accept it).
pub(crate) async fn guard(
    State(policy): State<Arc<Policy>>,
    request: Request,
    next: Next,
) -> Response {
    if let Err(refused) = check_request(&policy, &request) {
        return refused.into_response();
    }
    next.run(request).await
}

fn check_request(policy: &Policy, request: &Request) -> Result<(), ApiError> {
    let text = |name| {
        request
            .headers()
            .get(name)
            .map(|v: &axum::http::HeaderValue| v.to_str().unwrap_or("(not text)"))
    };
    // An absolute-form request (`GET http://host/path`) names its host in the URI.
    let host = text(header::HOST).or_else(|| request.uri().authority().map(|a| a.as_str()));
    let origin = text(header::ORIGIN);
    policy.check(host, origin).inspect_err(|_| {
        tracing::warn!(
            host = host.unwrap_or_default(),
            origin = origin.unwrap_or_default(),
            path = request.uri().path(),
            "refused a request for its Host or Origin"
        );
    })
}

/// Whether `origin` (`scheme://host[:port]`) is the origin of a request with `Host: host`: the
/// same host and port (a `Host` without a port has the origin's scheme's default). The scheme
/// itself cannot be told from `Host` (a proxy may end TLS), and need not: a page at that very
/// host and port is this server's.
fn same_origin(origin: &str, host: &str) -> bool {
    let Some((scheme, name, port)) = parse_origin(origin) else {
        return false;
    };
    let Some((host_name, host_port)) = split_authority(host) else {
        return false;
    };
    let default = default_port(&scheme);
    name == host_name && port.unwrap_or(default) == host_port.unwrap_or(default)
}

fn default_port(scheme: &str) -> u16 {
    if scheme == "https" {
        443
    } else {
        80
    }
}

/// `scheme://host[:port]` as (scheme, lowercase host, port); `None` for anything else (`null`,
/// a path, another scheme).
fn parse_origin(origin: &str) -> Option<(String, String, Option<u16>)> {
    let (scheme, authority) = origin.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return None;
    }
    let (name, port) = split_authority(authority)?;
    Some((scheme, name, port))
}

/// The origin as compared: `scheme://host:port`, the port always written.
fn normalize_origin(origin: &str) -> Option<String> {
    let (scheme, name, port) = parse_origin(origin)?;
    let port = port.unwrap_or(default_port(&scheme));
    Some(format!("{scheme}://{name}:{port}"))
}

/// `host[:port]` (an IPv6 address in brackets) as (lowercase host, port); `None` when it is not
/// one (a path, userinfo, an empty name, a bad port).
fn split_authority(authority: &str) -> Option<(String, Option<u16>)> {
    let (name, port) = if authority.starts_with('[') {
        let end = authority.find(']')?;
        let (name, rest) = authority.split_at(end + 1);
        match rest.strip_prefix(':') {
            Some(port) => (name, Some(port)),
            None if rest.is_empty() => (name, None),
            None => return None,
        }
    } else {
        match authority.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (authority, None),
        }
    };
    let valid = match name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        Some(address) => address.parse::<std::net::Ipv6Addr>().is_ok(),
        None => {
            let name_chars = |c: char| c.is_ascii_alphanumeric() || "-._".contains(c);
            !name.is_empty() && name.chars().all(name_chars)
        }
    };
    if !valid {
        return None;
    }
    let port = match port {
        Some(port) => Some(port.parse::<u16>().ok()?),
        None => None,
    };
    Some((name.to_ascii_lowercase(), port))
}

/// An entry of `server.allowed_hosts`: `"*"`, or a host name or address with an optional port.
pub(crate) fn check_host(entry: &str) -> Result<(), String> {
    if entry == "*" || split_authority(entry).is_some() {
        return Ok(());
    }
    Err(format!(
        "has {entry:?}, which is not a host name with an optional port (\"legio.example.com\", \"10.0.0.5:7878\", \"[::1]\") or \"*\""
    ))
}

/// An entry of `server.allowed_origins`: `http(s)://host[:port]`, as a browser sends it.
pub(crate) fn check_origin(entry: &str) -> Result<(), String> {
    if parse_origin(entry).is_some() {
        return Ok(());
    }
    Err(format!(
        "has {entry:?}, which is not an origin as a browser sends it (\"https://app.example.com\", \"http://localhost:5173\": a scheme, a host, an optional port, no path)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(policy: &Policy, host: Option<&str>, origin: Option<&str>) -> bool {
        policy.check(host, origin).is_ok()
    }

    #[test]
    fn a_loopback_bind_answers_loopback_names_and_the_listed_ones() {
        let policy = Policy::new(true, None, &[]);
        for host in [
            "localhost",
            "LOCALHOST:7878",
            "127.0.0.1:1",
            "[::1]",
            "[::1]:7878",
        ] {
            assert!(ok(&policy, Some(host), None), "{host}");
        }
        for host in ["evil.example.com", "evil.example.com:7878", "127.0.0.2", ""] {
            let e = policy.check(Some(host), None).unwrap_err();
            assert!(e.message.contains("server.allowed_hosts"), "{e}");
        }
        assert!(ok(&policy, None, None), "no Host is no browser's");
        let listed = Policy::new(true, Some(&["legio.lan:7878".to_owned()]), &[]);
        assert!(ok(&listed, Some("legio.lan:7878"), None));
        assert!(!ok(&listed, Some("legio.lan:80"), None));
        assert!(ok(&listed, Some("localhost"), None));
        let any = Policy::new(true, Some(&["*".to_owned()]), &[]);
        assert!(ok(&any, Some("evil.example.com"), None));
    }

    #[test]
    fn another_bind_checks_host_only_when_listed() {
        let open = Policy::new(false, None, &[]);
        assert!(ok(&open, Some("10.0.0.5:7878"), None));
        let listed = Policy::new(false, Some(&["legio.lan".to_owned()]), &[]);
        assert!(ok(&listed, Some("legio.lan:7878"), None));
        assert!(!ok(&listed, Some("10.0.0.5:7878"), None));
    }

    #[test]
    fn origins_are_the_servers_own_or_listed() {
        let policy = Policy::new(true, None, &["https://app.example.com".to_owned()]);
        let host = Some("127.0.0.1:7878");
        assert!(ok(&policy, host, Some("http://127.0.0.1:7878")));
        assert!(ok(&policy, Some("localhost"), Some("http://localhost")));
        assert!(ok(&policy, Some("localhost:80"), Some("http://localhost")));
        assert!(ok(&policy, host, Some("https://APP.example.com:443")));
        for origin in [
            "http://evil.example.com",
            "http://localhost:7878",
            "http://127.0.0.1:5173",
            "null",
            "file://",
        ] {
            let e = policy.check(host, Some(origin)).unwrap_err();
            assert!(
                e.message.contains("server.allowed_origins"),
                "{origin}: {e}"
            );
        }
        let open = Policy::new(false, None, &[]);
        assert!(ok(
            &open,
            Some("10.0.0.5:7878"),
            Some("http://10.0.0.5:7878")
        ));
        assert!(!ok(
            &open,
            Some("10.0.0.5:7878"),
            Some("http://evil.example.com")
        ));
    }

    #[test]
    fn entries_are_checked() {
        assert!(check_host("legio.lan").is_ok() && check_host("[::1]:1").is_ok());
        assert!(check_host("*").is_ok());
        assert!(check_host("http://legio.lan").is_err());
        assert!(check_host("legio.lan/x").is_err());
        assert!(check_host("legio.lan:99999").is_err());
        assert!(check_origin("https://app.example.com").is_ok());
        assert!(check_origin("app.example.com").is_err());
        assert!(check_origin("https://app.example.com/path").is_err());
    }
}
