//! The `[store] backend` key and the `[store.nats]` table: which event log a node opens (sled, the
//! embedded default, or a NATS JetStream cluster) and how it reaches the cluster. Kept apart from
//! the rest of the configuration so it can move with it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use legio_store::{NatsAuth, NatsOptions, NatsTls};
use serde::Deserialize;

/// `[store.nats]` as written in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NatsSection {
    servers: Option<Vec<String>>,
    stream: Option<String>,
    replicas: Option<usize>,
    token: Option<String>,
    credentials_file: Option<PathBuf>,
    tls_ca_file: Option<PathBuf>,
    tls_cert_file: Option<PathBuf>,
    tls_key_file: Option<PathBuf>,
    lease_ttl_seconds: Option<f64>,
    request_timeout_seconds: Option<f64>,
    append_deadline_seconds: Option<f64>,
    ping_interval_seconds: Option<f64>,
    connect_timeout_seconds: Option<f64>,
}

/// Which event log the node opens.
#[derive(Clone, Debug, Default)]
pub enum StoreBackend {
    /// The embedded sled log at `store.path` (the default).
    #[default]
    Sled,
    /// The log on a NATS JetStream cluster (`docs/cluster.md`).
    Nats(Box<NatsOptions>),
}

/// Validates `[store] backend` and `[store.nats]`; relative paths resolve against `base` (the
/// config file's folder). `LEGIO_STORE_BACKEND` overrides the key. Errors name the key.
pub(crate) fn parse_backend(
    backend: Option<&str>,
    nats: Option<&NatsSection>,
    base: &Path,
    max_message_bytes: usize,
) -> Result<StoreBackend, String> {
    let word = std::env::var("LEGIO_STORE_BACKEND")
        .ok()
        .or(backend.map(str::to_owned));
    match word.as_deref() {
        None | Some("sled") => Ok(StoreBackend::Sled),
        Some("nats") => {
            let empty = NatsSection::default();
            let options = nats_options(nats.unwrap_or(&empty), base, max_message_bytes)?;
            Ok(StoreBackend::Nats(Box::new(options)))
        }
        Some(other) => Err(format!(
            "store.backend = {other:?} is not \"sled\" or \"nats\""
        )),
    }
}

fn nats_options(
    section: &NatsSection,
    base: &Path,
    max_message_bytes: usize,
) -> Result<NatsOptions, String> {
    let mut options = NatsOptions {
        max_message_bytes,
        ..NatsOptions::default()
    };
    match &section.servers {
        Some(servers) => options.servers = servers.clone(),
        None => return Err(
            "store.backend = \"nats\" needs store.nats.servers (a list of nats://HOST:PORT URLs)"
                .into(),
        ),
    }
    if let Some(stream) = &section.stream {
        options.stream = stream.clone();
    }
    if let Some(replicas) = section.replicas {
        options.replicas = replicas;
    }
    options.auth = match (&section.token, &section.credentials_file) {
        (Some(_), Some(_)) => {
            return Err(
                "store.nats.token and store.nats.credentials_file exclude each other; set one"
                    .into(),
            )
        }
        (Some(token), None) => NatsAuth::Token(token.clone()),
        (None, Some(file)) => NatsAuth::CredentialsFile(base.join(file)),
        (None, None) => NatsAuth::None,
    };
    options.tls = tls(section, base)?;
    if let Some(seconds) = section.lease_ttl_seconds {
        options.lease_ttl = seconds_at_least("lease_ttl_seconds", seconds, 1.0)?;
    }
    if let Some(seconds) = section.request_timeout_seconds {
        options.request_timeout = seconds_at_least("request_timeout_seconds", seconds, 0.1)?;
    }
    if let Some(seconds) = section.append_deadline_seconds {
        options.append_deadline = seconds_at_least("append_deadline_seconds", seconds, 0.1)?;
    }
    if let Some(seconds) = section.ping_interval_seconds {
        options.ping_interval = seconds_at_least("ping_interval_seconds", seconds, 0.1)?;
    }
    if let Some(seconds) = section.connect_timeout_seconds {
        options.connect_timeout = seconds_at_least("connect_timeout_seconds", seconds, 0.1)?;
    }
    options.validate().map_err(|e| e.to_string())?;
    Ok(options)
}

/// `store.nats.<key> = seconds` as a duration, if it is a finite number from `least` to a day.
fn seconds_at_least(key: &str, seconds: f64, least: f64) -> Result<Duration, String> {
    if seconds.is_finite() && seconds >= least && seconds <= 86_400.0 {
        Ok(Duration::from_secs_f64(seconds))
    } else {
        Err(format!(
            "store.nats.{key} = {seconds} must be a number of seconds from {least} to 86400"
        ))
    }
}

fn tls(section: &NatsSection, base: &Path) -> Result<Option<NatsTls>, String> {
    let client_cert = match (&section.tls_cert_file, &section.tls_key_file) {
        (Some(cert), Some(key)) => Some((base.join(cert), base.join(key))),
        (None, None) => None,
        _ => return Err(
            "store.nats.tls_cert_file and store.nats.tls_key_file go together; set both or neither"
                .into(),
        ),
    };
    let ca_file = section.tls_ca_file.as_ref().map(|ca| base.join(ca));
    Ok(
        (ca_file.is_some() || client_cert.is_some()).then_some(NatsTls {
            ca_file,
            client_cert,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(text: &str) -> Result<NatsSection, String> {
        toml::from_str(text).map_err(|e| e.message().to_owned())
    }

    #[test]
    fn sled_is_the_default_and_nats_needs_servers() {
        let base = Path::new("/etc/legio");
        assert!(matches!(
            parse_backend(None, None, base, 1024),
            Ok(StoreBackend::Sled)
        ));
        let err = parse_backend(Some("nats"), None, base, 1024).unwrap_err();
        assert!(err.contains("store.nats.servers"), "{err}");
        let err = parse_backend(Some("postgres"), None, base, 1024).unwrap_err();
        assert!(err.contains("store.backend"), "{err}");
    }

    #[test]
    fn a_full_nats_table_is_parsed_and_validated() {
        let base = Path::new("/etc/legio");
        let text = r#"
            servers = ["nats://10.0.0.1:4222", "nats://10.0.0.2:4222"]
            stream = "prod"
            replicas = 3
            credentials_file = "legio.creds"
            tls_ca_file = "ca.pem"
            tls_cert_file = "cert.pem"
            tls_key_file = "key.pem"
            lease_ttl_seconds = 15
            request_timeout_seconds = 2.5
            append_deadline_seconds = 60
            ping_interval_seconds = 1.5
            connect_timeout_seconds = 0.5
        "#;
        let nats = section(text).unwrap();
        let StoreBackend::Nats(options) =
            parse_backend(Some("nats"), Some(&nats), base, 1024).unwrap()
        else {
            panic!("nats expected")
        };
        assert_eq!(options.servers.len(), 2);
        assert_eq!((options.stream.as_str(), options.replicas), ("prod", 3));
        assert_eq!(
            options.auth,
            NatsAuth::CredentialsFile(base.join("legio.creds"))
        );
        let tls = options.tls.unwrap();
        assert_eq!(tls.ca_file, Some(base.join("ca.pem")));
        assert_eq!(options.lease_ttl, Duration::from_secs(15));
        assert_eq!(options.request_timeout, Duration::from_millis(2500));
        assert_eq!(options.append_deadline, Duration::from_secs(60));
        assert_eq!(options.ping_interval, Duration::from_millis(1500));
        assert_eq!(options.connect_timeout, Duration::from_millis(500));
        assert_eq!(options.max_message_bytes, 1024);
    }

    #[test]
    fn mistakes_name_their_key() {
        let base = Path::new("/");
        let err = section("servers = [\"nats://a:1\"]\nreplica = 3").unwrap_err();
        assert!(err.contains("replica"), "{err}");
        for (text, key) in [
            (
                "servers = [\"nats://a:1\"]\nreplicas = 2",
                "store.nats.replicas",
            ),
            ("servers = []", "store.nats.servers"),
            (
                "servers = [\"nats://a:1\"]\nstream = \"a.b\"",
                "store.nats.stream",
            ),
            (
                "servers = [\"nats://a:1\"]\nlease_ttl_seconds = 0.5",
                "lease_ttl_seconds",
            ),
            (
                "servers = [\"nats://a:1\"]\nrequest_timeout_seconds = 0",
                "store.nats.request_timeout_seconds",
            ),
            (
                "servers = [\"nats://a:1\"]\nappend_deadline_seconds = -1",
                "store.nats.append_deadline_seconds",
            ),
            (
                "servers = [\"nats://a:1\"]\nrequest_timeout_seconds = 10\nappend_deadline_seconds = 5",
                "store.nats.append_deadline_seconds",
            ),
            (
                "servers = [\"nats://a:1\"]\ntoken = \"t\"\ncredentials_file = \"c\"",
                "store.nats.token",
            ),
            (
                "servers = [\"nats://a:1\"]\ntls_cert_file = \"c\"",
                "tls_key_file",
            ),
        ] {
            let err =
                parse_backend(Some("nats"), Some(&section(text).unwrap()), base, 1024).unwrap_err();
            assert!(err.contains(key), "{text}: {err}");
        }
    }
}
