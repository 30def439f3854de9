//! The store's errors. Expected conditions (locked db, too-large message, corrupt record) are
//! values; the store never panics on bad bytes.

use std::path::PathBuf;

use legio_core::Seq;
use thiserror::Error;

use crate::error_source::ErrorSource;

/// What can go wrong in the event log. `Clone` so that one commit failure can be reported to every
/// writer of the group.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// Another process holds the database.
    #[error("database at {path} is locked by another process (a running `legio chat`, `legio post` or host service); stop it and try again")]
    Locked {
        /// The database folder.
        path: PathBuf,
    },
    /// No database at the path, and creating one was not asked for.
    #[error("no database at {path}; check the path (--db or store.path), or run a command that creates one")]
    NotFound {
        /// The database folder.
        path: PathBuf,
    },
    /// A message is over `max_message_bytes`; nothing of its batch was stored.
    #[error("message of {size} bytes is over the limit of {limit} bytes (store.max_message_bytes); nothing was stored")]
    MessageTooLarge {
        /// The message's content size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// An event's encoded record is over the record limit; nothing of its batch was stored.
    #[error("event record of {size} bytes is over the limit of {limit} bytes; nothing was stored")]
    RecordTooLarge {
        /// The encoded size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// A batch larger than the backend can append atomically.
    #[error(
        "a batch of {events} events is over the limit of {limit} events of this log; split it"
    )]
    BatchTooLarge {
        /// Events in the batch.
        events: usize,
        /// The limit.
        limit: usize,
    },
    /// An append of no events.
    #[error("an append needs at least one event")]
    EmptyBatch,
    /// A record whose format version this build does not know (written by a newer legio?).
    #[error("record at seq {seq} has unknown format version {version}; this build reads versions up to {known}: upgrade legio")]
    UnknownFormatVersion {
        /// Where.
        seq: Seq,
        /// The version byte found.
        version: u8,
        /// The newest version this build knows.
        known: u8,
    },
    /// A file of the database is damaged or missing: sled found a checksum or format error in
    /// it, or could not find it.
    #[error("the database file {file} is damaged{at}: {reason}; nothing was changed; run `legio verify`, and `legio export --salvage` to get every event that still reads", file = file.display(), at = at_seq(*seq))]
    Damaged {
        /// The damaged (or missing) file or folder.
        file: PathBuf,
        /// The seq whose record was being read, when known.
        seq: Option<Seq>,
        /// What sled said.
        reason: String,
    },
    /// A record that does not decode.
    #[error("record {what} is corrupt: {reason}; run `legio verify` for a full report")]
    Corrupt {
        /// Which record (`seq 12`, `session state test:1/vorenus`).
        what: String,
        /// What the decoder said.
        reason: String,
    },
    /// An event or seq that the caller asked for is not in the log.
    #[error("seq range {from}..={to} is invalid: {reason}")]
    BadRange {
        /// Start.
        from: Seq,
        /// End.
        to: Seq,
        /// Why.
        reason: String,
    },
    /// The log was closed (its committer stopped).
    #[error("the event log is closed")]
    Closed,
    /// The cluster refused an append because the conversation's last seq was not the one this
    /// node expected: another node appended to it since (it took the conversation over). Nothing
    /// of the batch was stored; this node must stop writing to the conversation.
    #[error("append to conversation {conversation} refused: it expected the conversation's last seq to be {expected}, but another writer appended since; nothing was stored (this node no longer owns the conversation)")]
    Fenced {
        /// The conversation.
        conversation: String,
        /// The conversation's last seq this node expected (0: no event yet).
        expected: u64,
    },
    /// No server of the cluster could be reached.
    #[error("cannot reach the NATS servers {servers}: {reason}; check store.nats.servers (or --nats), that the servers run, and, with TLS, store.nats.tls_ca_file (a server certificate refused) or tls_cert_file and tls_key_file (servers that verify clients)")]
    Unreachable {
        /// The URLs tried.
        servers: String,
        /// What the client said.
        reason: String,
    },
    /// A server was reached but this client could not authenticate: the server refused its
    /// credentials (none given, or wrong), or the client could not use them (a bad nkey seed).
    #[error("could not authenticate to the NATS servers {servers}: {reason}; check store.nats.token or store.nats.credentials_file against the servers' authorization")]
    Refused {
        /// The URLs tried.
        servers: String,
        /// What the client said.
        reason: String,
    },
    /// The cluster answered a request with an error or not in time.
    #[error("NATS JetStream failure during {during}: {source}")]
    Cluster {
        /// What the log was doing.
        during: &'static str,
        /// What the cluster or client said, as it was.
        #[source]
        source: ErrorSource,
    },
    /// A server was reached, but it runs without JetStream.
    #[error("the NATS server at {server} runs without JetStream, which legio's log needs; start it with -js (or a `jetstream {{}}` block in its configuration), or point store.nats.servers (or --nats) at servers that have it (scripts/nats-cluster.sh starts such a cluster)")]
    NoJetStream {
        /// The server the client connected to.
        server: String,
    },
    /// The log's stream does not exist and a read-only open may not create it.
    #[error("no JetStream stream {stream} on the cluster; check store.nats.stream in the configuration (without one, --nats reads the stream `legio`), or start a legio node on this cluster, which creates it")]
    StreamNotFound {
        /// The stream's name.
        stream: String,
    },
    /// The log was opened read-only (operator commands) and was asked to append.
    #[error("this event log was opened read-only; appends go through a running legio node")]
    ReadOnly,
    /// Options that cannot work.
    #[error("invalid store options: {reason}")]
    BadOptions {
        /// What is wrong, naming the key.
        reason: String,
    },
    /// A filesystem or database failure.
    #[error("storage failure during {during} ({what}): {source}", what = cause.describe())]
    Io {
        /// What the store was doing.
        during: &'static str,
        /// The operating system's kind of the failure (`StorageFull`, `PermissionDenied`, ...;
        /// `Other` when the failure did not come from the operating system), so that a full disk
        /// or too many open files can be told apart from a corrupt database.
        kind: std::io::ErrorKind,
        /// What the failure came from, told from the operating system's error number
        /// (`ENOSPC`, `EMFILE`, ...) or kind, never from its text.
        cause: IoCause,
        /// The underlying error, as it was.
        #[source]
        source: ErrorSource,
    },
}

/// What a storage failure ([`StoreError::Io`]) came from: what an operator must fix, and what a
/// server reports (`/readyz`, the 503 of a refused write).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IoCause {
    /// The disk (or the quota) is full: `ENOSPC`, `EDQUOT`.
    DiskFull,
    /// The process or the system is out of file descriptors: `EMFILE`, `ENFILE`.
    TooManyOpenFiles,
    /// Any other failure of the filesystem or the database.
    Other,
}

impl IoCause {
    /// The cause of an operating system error: its error number where it has one, else its
    /// kind (sled keeps only the kind of an error it reports again later).
    pub fn of(raw_os_error: Option<i32>, kind: std::io::ErrorKind) -> Self {
        match raw_os_error {
            Some(libc::ENOSPC | libc::EDQUOT) => Self::DiskFull,
            Some(libc::EMFILE | libc::ENFILE) => Self::TooManyOpenFiles,
            _ if matches!(
                kind,
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
            ) =>
            {
                Self::DiskFull
            }
            _ => Self::Other,
        }
    }

    /// A stable name: `disk_full`, `too_many_open_files`, `io_error`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::DiskFull => "disk_full",
            Self::TooManyOpenFiles => "too_many_open_files",
            Self::Other => "io_error",
        }
    }

    /// In words, for an operator: `the disk is full`, ...
    pub fn describe(self) -> &'static str {
        match self {
            Self::DiskFull => "the disk is full",
            Self::TooManyOpenFiles => "too many open files (the descriptor limit, ulimit -n)",
            Self::Other => "an I/O error",
        }
    }
}

fn at_seq(seq: Option<Seq>) -> String {
    seq.map(|s| format!(" (reading seq {s})"))
        .unwrap_or_default()
}

/// An underlying failure, with its `io::ErrorKind` when it has one.
pub(crate) trait Cause: std::fmt::Display + Sized {
    /// The failure, kept as the error's source.
    fn into_source(self) -> ErrorSource;

    /// The kind, `Other` unless the operating system said.
    fn kind(&self) -> std::io::ErrorKind {
        std::io::ErrorKind::Other
    }

    /// The operating system's error number, when it said one.
    fn raw_os_error(&self) -> Option<i32> {
        None
    }
}

impl Cause for std::io::Error {
    fn into_source(self) -> ErrorSource {
        ErrorSource::new(self)
    }

    fn kind(&self) -> std::io::ErrorKind {
        std::io::Error::kind(self)
    }

    fn raw_os_error(&self) -> Option<i32> {
        std::io::Error::raw_os_error(self)
    }
}

impl Cause for sled::Error {
    fn into_source(self) -> ErrorSource {
        ErrorSource::new(self)
    }

    fn kind(&self) -> std::io::ErrorKind {
        match self {
            sled::Error::Io(e) => e.kind(),
            _ => std::io::ErrorKind::Other,
        }
    }

    fn raw_os_error(&self) -> Option<i32> {
        match self {
            sled::Error::Io(e) => e.raw_os_error(),
            _ => None,
        }
    }
}

impl Cause for &str {
    fn into_source(self) -> ErrorSource {
        ErrorSource::new(self)
    }
}

impl Cause for String {
    fn into_source(self) -> ErrorSource {
        ErrorSource::new(self)
    }
}

impl Cause for bincode::error::EncodeError {
    fn into_source(self) -> ErrorSource {
        ErrorSource::new(self.to_string())
    }
}

impl StoreError {
    pub(crate) fn io(during: &'static str, err: impl Cause) -> Self {
        Self::Io {
            during,
            kind: err.kind(),
            cause: IoCause::of(err.raw_os_error(), err.kind()),
            source: err.into_source(),
        }
    }

    /// What a storage failure came from; `None` for every error that is not one.
    pub fn io_cause(&self) -> Option<IoCause> {
        match self {
            Self::Io { cause, .. } => Some(*cause),
            _ => None,
        }
    }

    /// The operating system's kind of an `Io` failure; `None` for every other error.
    pub fn io_kind(&self) -> Option<std::io::ErrorKind> {
        match self {
            Self::Io { kind, .. } => Some(*kind),
            _ => None,
        }
    }
}

impl StoreError {
    /// A cluster failure during `during`, keeping what the client said (its error, or words)
    /// as the source.
    pub(crate) fn cluster(
        during: &'static str,
        err: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self::Cluster {
            during,
            source: ErrorSource::new(err),
        }
    }
}

/// The store's result type.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::ErrorKind;

    #[test]
    fn an_io_failure_keeps_its_kind() {
        let full = StoreError::io("appending", std::io::Error::from(ErrorKind::StorageFull));
        assert_eq!(full.io_kind(), Some(ErrorKind::StorageFull));
        let sled = sled::Error::Io(std::io::Error::from(ErrorKind::PermissionDenied));
        assert_eq!(
            StoreError::io("opening", sled).io_kind(),
            Some(ErrorKind::PermissionDenied)
        );
        let source = std::error::Error::source(&full).and_then(|s| s.downcast_ref::<ErrorSource>());
        let kept = source.and_then(|s| s.get().downcast_ref::<std::io::Error>());
        assert_eq!(
            kept.map(|e| e.kind()),
            Some(ErrorKind::StorageFull),
            "the source, as it was"
        );
        let other = StoreError::io("closing", "the committer thread panicked");
        assert_eq!(other.io_kind(), Some(ErrorKind::Other));
        assert_eq!(StoreError::Closed.io_kind(), None);
    }

    /// The cause comes from the error number (std has no stable kind for `EMFILE`), and from the
    /// kind where only that survived (sled reports a failure again as a copy with its kind).
    #[test]
    fn an_io_failure_names_its_cause() {
        let os = |n| StoreError::io("committing", std::io::Error::from_raw_os_error(n));
        assert_eq!(os(libc::ENOSPC).io_cause(), Some(IoCause::DiskFull));
        assert_eq!(os(libc::EDQUOT).io_cause(), Some(IoCause::DiskFull));
        assert_eq!(os(libc::EMFILE).io_cause(), Some(IoCause::TooManyOpenFiles));
        assert_eq!(os(libc::ENFILE).io_cause(), Some(IoCause::TooManyOpenFiles));
        assert_eq!(os(libc::EIO).io_cause(), Some(IoCause::Other));
        let sled = sled::Error::Io(std::io::Error::from_raw_os_error(libc::EMFILE));
        assert_eq!(
            StoreError::io("committing", sled).io_cause(),
            Some(IoCause::TooManyOpenFiles)
        );
        let copied = sled::Error::Io(std::io::Error::from_raw_os_error(libc::ENOSPC)).clone();
        assert_eq!(
            StoreError::io("flushing", copied).io_cause(),
            Some(IoCause::DiskFull)
        );
        let text = StoreError::io("closing", "no space left on device (in words only)");
        assert_eq!(text.io_cause(), Some(IoCause::Other), "never from text");
        assert_eq!(StoreError::Closed.io_cause(), None);
    }
}
