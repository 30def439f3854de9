//! How to reach a NATS JetStream cluster: servers, stream, replicas, credentials, TLS, lease TTL;
//! and the one place that turns those options into a connected client.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::ConnectErrorKind;

use super::sync::lock;
use crate::error::{Result, StoreError};

/// How the client proves who it is to the NATS servers.
#[derive(Clone, PartialEq, Eq, Default)]
pub enum NatsAuth {
    /// No credentials (a local or trusted cluster).
    #[default]
    None,
    /// A bearer token (`authorization { token: ... }` on the servers).
    Token(String),
    /// A `.creds` file (JWT and nkey seed, decentralized auth).
    CredentialsFile(PathBuf),
}

impl std::fmt::Debug for NatsAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::None => f.write_str("None"),
            // Never print the token itself.
            Self::Token(_) => f.write_str("Token(..)"),
            Self::CredentialsFile(path) => f.debug_tuple("CredentialsFile").field(path).finish(),
        }
    }
}

/// TLS towards the servers: a CA to trust and, for mutual TLS, a client certificate and key.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct NatsTls {
    /// PEM file of the CA that signed the servers' certificates.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate and its key, for servers that verify clients.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

/// How to open a [`NatsLog`](super::NatsLog) or [`Leases`](super::Leases).
#[derive(Clone, Debug)]
pub struct NatsOptions {
    /// Server URLs (`nats://127.0.0.1:4222`); the client connects to one and learns the rest.
    pub servers: Vec<String>,
    /// The JetStream stream that holds the log (default `legio`). Its subjects are
    /// `<stream>.conv.<conversation>`; the lease bucket is `<stream>_leases`.
    pub stream: String,
    /// Copies of every event and lease: 1, or 3 for a cluster that survives losing a server.
    pub replicas: usize,
    /// Credentials.
    pub auth: NatsAuth,
    /// TLS, when the servers require it.
    pub tls: Option<NatsTls>,
    /// How long a lease lives without renewal (default 10 s).
    pub lease_ttl: Duration,
    /// The largest message content accepted, in bytes (default 1 MiB, as for sled).
    pub max_message_bytes: usize,
    /// How long one request to the cluster may take before it is retried (default 5 s;
    /// `store.nats.request_timeout_seconds`). A reply a leader change cut off is noticed only
    /// after it, so it bounds how long such a change stalls the appends in flight.
    pub request_timeout: Duration,
    /// How long an append, or a read of the stream, keeps retrying through a leader election or a
    /// lost connection before it fails (default 30 s; `store.nats.append_deadline_seconds`).
    pub append_deadline: Duration,
    /// How often the client pings a server that sent it nothing (default 2 s;
    /// `store.nats.ping_interval_seconds`). async-nats gives up on a connection once two pings
    /// went unanswered (`MAX_PENDING_PINGS`, fixed in the client) and reconnects to another
    /// server: a connection whose frames are silently dropped (a partition, a server stopped
    /// with SIGSTOP) is noticed within about three intervals. async-nats's default, 60 s, left
    /// a node on a dead link for three minutes.
    pub ping_interval: Duration,
    /// How long one connection attempt to one server may take (default 2 s;
    /// `store.nats.connect_timeout_seconds`). A reconnect after a lost connection first tries
    /// the server that led the stream, which may be the one that was cut off: it answers no
    /// connection, so this is what that try costs before the client goes on to another server.
    /// It was `request_timeout` (5 s), which the partition run (scripts/partition.sh) measured
    /// as 5 s of the majority side's stall.
    pub connect_timeout: Duration,
}

impl Default for NatsOptions {
    fn default() -> Self {
        Self {
            servers: vec!["nats://127.0.0.1:4222".into()],
            stream: "legio".into(),
            replicas: 1,
            auth: NatsAuth::None,
            tls: None,
            lease_ttl: Duration::from_secs(10),
            max_message_bytes: 1024 * 1024,
            request_timeout: Duration::from_secs(5),
            append_deadline: Duration::from_secs(30),
            ping_interval: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(2),
        }
    }
}

impl NatsOptions {
    /// Options for these servers, every other field at its default.
    pub fn for_servers(servers: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            servers: servers.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// Checks what the servers would refuse later with a less helpful message.
    pub fn validate(&self) -> Result<()> {
        let bad = |reason: String| Err(StoreError::BadOptions { reason });
        if self.servers.is_empty() {
            return bad("store.nats.servers is empty; name at least one server URL".into());
        }
        let name_ok = !self.stream.is_empty()
            && self
                .stream
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !name_ok {
            return bad(format!(
                "store.nats.stream {:?} is not a valid stream name; use letters, digits, '_' and '-'",
                self.stream
            ));
        }
        if self.replicas != 1 && self.replicas != 3 {
            return bad(format!(
                "store.nats.replicas is {}; use 1 (one server) or 3 (a cluster of at least three)",
                self.replicas
            ));
        }
        if self.lease_ttl < Duration::from_secs(1) {
            return bad("store.nats.lease_ttl_seconds must be at least 1".into());
        }
        if self.request_timeout.is_zero() {
            return bad("store.nats.request_timeout_seconds must be above 0".into());
        }
        if self.connect_timeout < Duration::from_millis(100) {
            return bad("store.nats.connect_timeout_seconds must be at least 0.1".into());
        }
        if self.ping_interval < Duration::from_millis(100) {
            return bad("store.nats.ping_interval_seconds must be at least 0.1".into());
        }
        if self.append_deadline < self.request_timeout {
            return bad(format!(
                "store.nats.append_deadline_seconds ({:.1} s) is shorter than one request \
                 (request_timeout_seconds, {:.1} s); make it at least as long",
                self.append_deadline.as_secs_f64(),
                self.request_timeout.as_secs_f64()
            ));
        }
        Ok(())
    }

    /// Connects to the cluster with these options' credentials and TLS.
    pub(crate) async fn connect(&self) -> Result<async_nats::Client> {
        self.connect_to(&self.servers, None).await
    }

    /// Connects to `servers` with these options' credentials and TLS. Each (re)connect goes to
    /// the server `steer` holds if it holds one (taken as it is used), or else to whichever the
    /// client picks (shuffled, the servers that failed last).
    pub(crate) async fn connect_to(
        &self,
        servers: &[String],
        steer: Option<Steer>,
    ) -> Result<async_nats::Client> {
        let mut options = async_nats::ConnectOptions::new()
            .request_timeout(Some(self.request_timeout))
            .connection_timeout(self.connect_timeout)
            .ping_interval(self.ping_interval);
        options = match &self.auth {
            NatsAuth::None => options,
            NatsAuth::Token(token) => options.token(token.clone()),
            NatsAuth::CredentialsFile(path) => options
                .credentials_file(path)
                .await
                .map_err(|e| StoreError::cluster("reading the credentials file", e))?,
        };
        if let Some(tls) = &self.tls {
            options = options.require_tls(true);
            if let Some(ca) = &tls.ca_file {
                options = options.add_root_certificates(ca.clone());
            }
            if let Some((cert, key)) = &tls.client_cert {
                options = options.add_client_certificate(cert.clone(), key.clone());
            }
        }
        if let Some(steer) = steer {
            options = options.reconnect_to_server_callback(move |_, _| {
                std::future::ready(steer.take().map(|addr| async_nats::ReconnectToServer {
                    addr,
                    delay: Some(Duration::ZERO),
                }))
            });
        }
        let client = options.connect(servers.to_vec()).await.map_err(|e| {
            let (servers, reason) = (servers.join(", "), e.to_string());
            match e.kind() {
                ConnectErrorKind::AuthorizationViolation | ConnectErrorKind::Authentication => {
                    StoreError::Refused { servers, reason }
                }
                _ => StoreError::Unreachable { servers, reason },
            }
        })?;
        // Without JetStream every request would go unanswered until its retries ran out (about
        // 30 s) and end in a message that does not say why. A server without it may still reach
        // JetStream on others of its cluster: asked once before refusing.
        let info = client.server_info();
        if !info.jetstream {
            let js = async_nats::jetstream::new(client.clone());
            let asked = tokio::time::timeout(self.request_timeout, js.query_account()).await;
            if !matches!(asked, Ok(Ok(_))) {
                return Err(StoreError::NoJetStream {
                    server: format!("{}:{}", info.host, info.port),
                });
            }
        }
        Ok(client)
    }
}

/// Where a client's next (re)connect goes: one server, once. Set it, then force the client to
/// reconnect (`Client::force_reconnect`); a connect it does not steer goes where the client
/// picks.
#[derive(Clone, Default)]
pub(crate) struct Steer(Arc<Mutex<Option<async_nats::ServerAddr>>>);

impl Steer {
    /// Steers the next (re)connect to `url`; false if `url` is no server address.
    pub(crate) fn set(&self, url: &str) -> bool {
        let Ok(addr) = url.parse::<async_nats::ServerAddr>() else {
            return false;
        };
        *lock(&self.0) = Some(addr);
        true
    }

    /// Forgets a steer the client did not use.
    pub(crate) fn clear(&self) {
        lock(&self.0).take();
    }

    fn take(&self) -> Option<async_nats::ServerAddr> {
        lock(&self.0).take()
    }
}
