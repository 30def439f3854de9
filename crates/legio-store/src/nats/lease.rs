//! Leases: who owns what (a conversation) for how long, in a JetStream key-value bucket.
//! Acquire is create-if-absent, renew is an update that states the revision it holds (the
//! revision is the fencing token), release deletes by revision, and a lease nobody renews
//! disappears after the bucket's max age (the lease TTL).
//!
//! Every node of a cluster must use the TTL the bucket keeps: a node that believed in a longer
//! one would go on serving a conversation another node may already have taken. So a node whose
//! `lease_ttl` differs from the bucket's is refused while any lease is held (a node is running),
//! and changes the bucket when none is (every node stopped: the new TTL takes effect); a running
//! node reads the bucket's TTL again each round and trusts the shorter one
//! ([`Leases::follow_bucket_ttl`]).

use std::time::Duration;

use async_nats::jetstream::stream::LastRawMessageErrorKind;
use async_nats::jetstream::{self, kv};
use futures_util::{stream, StreamExt, TryStreamExt};
use thiserror::Error;

use super::backoff::Backoff;
use super::bucket::{existing_key_value, key_value, Bucket};
use super::options::NatsOptions;
use super::subject::{decode_token, encode_token};
use crate::error::StoreError;

/// How many leases a listing reads from the stream's leader at once.
const LIST_READS_IN_FLIGHT: usize = 32;

/// The names of the leases nodes hold to say they are up (`legio:node:<id>`): under legio's
/// reserved conversation prefix, so no conversation's lease has such a name.
const NODE_LEASE_PREFIX: &str = "legio:node:";

/// The name of the lease node `node` holds while it runs (see [`Lease::node_present`]).
pub fn node_lease_name(node: &str) -> String {
    format!("{NODE_LEASE_PREFIX}{node}")
}

/// A lease held: what it guards, by whom, and the revision that proves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// What the lease guards: a conversation key, or a node's presence ([`node_lease_name`]).
    pub name: String,
    /// Who holds it (a node id).
    pub holder: String,
    /// The bucket revision of the holder's last write: the fencing token. Every renewal gives a
    /// new one; only the newest renews or releases.
    pub revision: u64,
}

impl Lease {
    /// The node whose presence this lease is (a running node holds one, renewed with its
    /// conversations' leases, released when it stops gracefully), or `None` for a
    /// conversation's lease.
    pub fn node_present(&self) -> Option<&str> {
        self.name.strip_prefix(NODE_LEASE_PREFIX)
    }
}

/// Why a lease operation did not succeed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum LeaseError {
    /// Someone holds the lease (and it has not expired).
    #[error("lease {name} is held by {holder} (revision {revision}); wait for its release or its expiry")]
    Held {
        /// The lease.
        name: String,
        /// Its holder.
        holder: String,
        /// The holder's revision.
        revision: u64,
    },
    /// The revision presented is not the lease's latest: it expired and was taken, or was
    /// released. The former holder must stop using what the lease guarded.
    #[error("lease {name} is no longer held at revision {revision} (it expired, was released or was taken); stop using what it guarded")]
    Lost {
        /// The lease.
        name: String,
        /// The revision presented.
        revision: u64,
    },
    /// The bucket holds a key that is no lease of ours.
    #[error("lease bucket key {key} is not a lease name written by legio")]
    BadKey {
        /// The key.
        key: String,
    },
    /// The bucket keeps leases for another TTL than this node's, and nodes hold leases in it.
    #[error(
        "lease bucket {bucket} keeps leases for {} s and nodes hold leases in it ({holders}), but \
         store.nats.lease_ttl_seconds asks for {} s. Every node of a cluster must use one TTL: \
         give this node lease_ttl_seconds = {}, or stop every node and start them with the new \
         TTL (the first node to start when no lease is held changes the bucket; leases of nodes \
         that stopped without releasing them, a crash, expire within {} s)",
        kept.as_secs_f64(), asked.as_secs_f64(), kept.as_secs_f64(), kept.as_secs_f64()
    )]
    TtlDiffers {
        /// The bucket.
        bucket: String,
        /// The TTL it keeps.
        kept: Duration,
        /// The TTL this node asked for.
        asked: Duration,
        /// Who holds leases in it now.
        holders: String,
    },
    /// The cluster could not be reached or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The lease bucket `<stream>_leases` (see the module docs). Methods block, like the log's.
pub struct Leases {
    store: kv::Store,
    /// The TTL this process asked for (or, opened to read, the bucket's).
    configured: Duration,
    /// The TTL to trust, in nanoseconds: the configured one, or the bucket's if shorter as last
    /// read ([`Leases::follow_bucket_ttl`]).
    ttl: std::sync::atomic::AtomicU64,
    /// How long a listing keeps retrying through a leader election (`append_deadline`).
    retry_for: Duration,
    /// How long `acquire`'s read of the holder keeps retrying: one `request_timeout` and a TTL
    /// (a take is on a post's path, whose caller retries for about a TTL).
    read_holder_for: Duration,
    runtime: Option<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for Leases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leases")
            .field("ttl", &self.ttl())
            .finish_non_exhaustive()
    }
}

impl Drop for Leases {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn cluster(
    during: &'static str,
    err: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> LeaseError {
    LeaseError::Store(StoreError::cluster(during, err))
}

impl Leases {
    /// Connects and opens (creating if need be) the lease bucket, with `options.lease_ttl` as
    /// its max age and `options.replicas` copies. A bucket kept with another TTL is refused
    /// while leases are held in it ([`LeaseError::TtlDiffers`]), and changed when none are;
    /// one with other replicas is changed.
    pub fn open(options: &NatsOptions) -> Result<Self, LeaseError> {
        options.validate()?;
        let runtime = super::runtime::build(1)?;
        let bucket = super::runtime::block_on(runtime.handle(), Self::bucket(options.clone()))?;
        let kept = bucket.max_age();
        let leases = Self::with(options, &bucket, options.lease_ttl, runtime);
        if kept != options.lease_ttl {
            let mut holders: Vec<String> = leases.list()?.into_iter().map(|l| l.holder).collect();
            holders.sort();
            holders.dedup();
            if !holders.is_empty() {
                return Err(LeaseError::TtlDiffers {
                    bucket: bucket.store.name.clone(),
                    kept,
                    asked: options.lease_ttl,
                    holders: holders.join(", "),
                });
            }
        }
        let (ttl, replicas) = (options.lease_ttl, options.replicas);
        leases.block_on(async move { bucket.conform(ttl, replicas).await })?;
        Ok(leases)
    }

    /// Opens the lease bucket as it is, for reading (`legio inspect nodes`): never created or
    /// changed, its TTL the one it keeps. `None` when there is none (no node ran on this stream).
    pub fn open_to_read(options: &NatsOptions) -> Result<Option<Self>, LeaseError> {
        options.validate()?;
        let runtime = super::runtime::build(1)?;
        let (name, owned) = (format!("{}_leases", options.stream), options.clone());
        let bucket = super::runtime::block_on(runtime.handle(), async move {
            existing_key_value(&owned, &name, "opening the lease bucket").await
        })?;
        Ok(bucket.map(|bucket| {
            let ttl = bucket.max_age();
            Self::with(options, &bucket, ttl, runtime)
        }))
    }

    fn with(
        options: &NatsOptions,
        bucket: &Bucket,
        ttl: Duration,
        runtime: tokio::runtime::Runtime,
    ) -> Self {
        Self {
            store: bucket.store.clone(),
            configured: ttl,
            ttl: std::sync::atomic::AtomicU64::new(nanos(ttl)),
            retry_for: options.append_deadline,
            read_holder_for: options.request_timeout + ttl,
            runtime: Some(runtime),
        }
    }

    async fn bucket(options: NatsOptions) -> Result<Bucket, LeaseError> {
        let config = kv::Config {
            bucket: format!("{}_leases", options.stream),
            history: 1,
            max_age: options.lease_ttl,
            num_replicas: options.replicas,
            storage: jetstream::stream::StorageType::File,
            ..Default::default()
        };
        Ok(key_value(&options, config, "creating the lease bucket").await?)
    }

    /// How long a lease lives without renewal: the configured TTL, or the bucket's if shorter
    /// as last read.
    pub fn ttl(&self) -> Duration {
        Duration::from_nanos(self.ttl.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Reads the bucket's max age again and trusts the shorter of it and the configured TTL
    /// (a running node calls it every renewal round): should another node change the bucket to
    /// a shorter TTL (nodes that started at once with different TTLs, see [`Leases::open`]),
    /// this node's trust follows within a round instead of outliving the servers' expiry for
    /// good. Returns the TTL now trusted.
    pub fn follow_bucket_ttl(&self) -> Result<Duration, LeaseError> {
        let mut stream = self.store.stream.clone();
        let kept = self.block_on(async move {
            stream
                .info()
                .await
                .map(|info| info.config.max_age)
                .map_err(|e| cluster("reading the lease bucket's configuration", e))
        })?;
        let trusted = match kept.is_zero() {
            true => self.configured,
            false => self.configured.min(kept),
        };
        if trusted != self.ttl() {
            tracing::warn!(
                bucket = %self.store.name,
                bucket_ttl = ?kept,
                configured = ?self.configured,
                "the lease bucket's TTL changed: this node now trusts its leases for 3/4 of {trusted:?}"
            );
            let trusted = nanos(trusted);
            self.ttl
                .store(trusted, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(trusted)
    }

    fn block_on<F>(&self, future: F) -> F::Output
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match &self.runtime {
            Some(runtime) => super::runtime::block_on(runtime.handle(), future),
            None => unreachable!("the runtime lives as long as the leases"),
        }
    }

    /// Takes the lease `name` for `holder` if nobody holds it. When someone does, the holder
    /// is read from the stream's leader; the cluster just answered the create, so a read it
    /// fails (a leader moving, a request lost on a loaded server) is tried again, for one
    /// `request_timeout` and a TTL: it writes nothing.
    pub fn acquire(&self, name: &str, holder: &str) -> Result<Lease, LeaseError> {
        let key = encode_token(name);
        let (store, name, holder) = (self.store.clone(), name.to_owned(), holder.to_owned());
        let retry_for = self.read_holder_for;
        self.block_on(async move {
            match store.create(&key, holder.clone().into()).await {
                Ok(revision) => Ok(Lease {
                    name,
                    holder,
                    revision,
                }),
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
                    let (holder, revision) = latest_retried(&store, &key, retry_for)
                        .await?
                        .map_or((String::new(), 0), |(lease, _)| {
                            (lease.holder, lease.revision)
                        });
                    Err(LeaseError::Held {
                        name,
                        holder,
                        revision,
                    })
                }
                Err(e) => Err(cluster("acquiring a lease", e)),
            }
        })
    }

    /// Renews a lease held: its TTL starts again, and it gets a new revision.
    pub fn renew(&self, lease: &Lease) -> Result<Lease, LeaseError> {
        let key = encode_token(&lease.name);
        let (store, lease) = (self.store.clone(), lease.clone());
        self.block_on(async move {
            match store
                .update(&key, lease.holder.clone().into(), lease.revision)
                .await
            {
                Ok(revision) => Ok(Lease { revision, ..lease }),
                Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                    Err(LeaseError::Lost {
                        name: lease.name.clone(),
                        revision: lease.revision,
                    })
                }
                Err(e) => Err(cluster("renewing a lease", e)),
            }
        })
    }

    /// Gives a lease up so that another holder may take it at once.
    pub fn release(&self, lease: Lease) -> Result<(), LeaseError> {
        let key = encode_token(&lease.name);
        let store = self.store.clone();
        self.block_on(async move {
            match store
                .delete_expect_revision(&key, Some(lease.revision))
                .await
            {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                    Err(LeaseError::Lost {
                        name: lease.name,
                        revision: lease.revision,
                    })
                }
                Err(e) => Err(cluster("releasing a lease", e)),
            }
        })
    }

    /// Gives `lease` up, or, if its holder renewed it since (a renewal whose answer never
    /// reached the caller: one still on its way when the caller stopped), its latest revision.
    /// A lease that expired or passed to another holder is left alone.
    pub fn release_latest(&self, lease: Lease) -> Result<(), LeaseError> {
        let holder = lease.holder.clone();
        match self.release(lease) {
            Err(LeaseError::Lost { name, .. }) => self
                .list()?
                .into_iter()
                .find(|l| l.name == name && l.holder == holder)
                .map_or(Ok(()), |latest| self.release(latest)),
            released => released,
        }
    }

    /// The lease `name` as the stream's leader has it now, with the time since its holder last
    /// wrote it, or `None` if nobody holds it. Retried like [`Leases::list_with_age`].
    pub fn get(&self, name: &str) -> Result<Option<(Lease, Duration)>, LeaseError> {
        self.get_within(name, self.retry_for)
    }

    /// [`Leases::get`], tried again while the cluster fails it only until `retry_for` has
    /// passed (a caller that answers a person, not a writer that must not give up early).
    pub fn get_within(
        &self,
        name: &str,
        retry_for: Duration,
    ) -> Result<Option<(Lease, Duration)>, LeaseError> {
        let (store, key) = (self.store.clone(), encode_token(name));
        self.block_on(async move { latest_retried(&store, &key, retry_for).await })
    }

    /// Every lease currently held, sorted by name.
    pub fn list(&self) -> Result<Vec<Lease>, LeaseError> {
        Ok(self.list_with_age()?.into_iter().map(|(l, _)| l).collect())
    }

    /// Every lease currently held, sorted by name, with the time since its holder last wrote it
    /// (took or renewed it; by the servers' clock against this machine's). Keys come from the
    /// stream's state and each lease from its leader, so a lease taken a moment ago is listed
    /// (a key watcher can miss a key renewed while it runs, and a replica answering a direct
    /// read can lag behind the leader). A listing the cluster fails (a leader election, a
    /// server that just rejoined) is tried again, as the log's reads are, until
    /// `append_deadline`: it writes nothing.
    pub fn list_with_age(&self) -> Result<Vec<(Lease, Duration)>, LeaseError> {
        let mut backoff = Backoff::new(self.retry_for);
        loop {
            match self.list_once() {
                Err(LeaseError::Store(StoreError::Cluster { during, source })) => {
                    let Some(pause) = backoff.next() else {
                        return Err(LeaseError::Store(StoreError::Cluster { during, source }));
                    };
                    tracing::debug!(during, %source, "listing the leases failed, retrying");
                    std::thread::sleep(pause);
                }
                other => return other,
            }
        }
    }

    fn list_once(&self) -> Result<Vec<(Lease, Duration)>, LeaseError> {
        let store = self.store.clone();
        self.block_on(async move {
            let subjects: Vec<(String, usize)> = store
                .stream
                .info_with_subjects(format!("{}>", store.prefix))
                .await
                .map_err(|e| cluster("listing leases", e))?
                .try_collect()
                .await
                .map_err(|e| cluster("listing leases", e))?;
            // Each lease is one request to the leader: many at a time, not one after another.
            let found: Vec<Option<(Lease, Duration)>> = stream::iter(subjects)
                .map(|(subject, _)| {
                    let store = &store;
                    async move {
                        let key = subject
                            .strip_prefix(store.prefix.as_str())
                            .unwrap_or(&subject);
                        latest(store, key).await
                    }
                })
                .buffer_unordered(LIST_READS_IN_FLIGHT)
                .try_collect()
                .await?;
            let mut out: Vec<(Lease, Duration)> = found.into_iter().flatten().collect();
            out.sort_by(|a, b| a.0.name.cmp(&b.0.name));
            Ok(out)
        })
    }
}

/// [`latest`], tried again while the cluster fails it, until `retry_for` has passed.
async fn latest_retried(
    store: &kv::Store,
    key: &str,
    retry_for: Duration,
) -> Result<Option<(Lease, Duration)>, LeaseError> {
    let mut backoff = Backoff::new(retry_for);
    loop {
        match latest(store, key).await {
            Err(LeaseError::Store(StoreError::Cluster { during, source })) => {
                let Some(pause) = backoff.next() else {
                    return Err(LeaseError::Store(StoreError::Cluster { during, source }));
                };
                tracing::debug!(during, %source, "reading a lease failed, retrying");
                tokio::time::sleep(pause).await;
            }
            other => return other,
        }
    }
}

/// The lease under `key` as the stream's leader has it now (not a replica's possibly older
/// copy), with its age; `None` if there is none (never taken, released or expired).
async fn latest(store: &kv::Store, key: &str) -> Result<Option<(Lease, Duration)>, LeaseError> {
    let name = decode_token(key).ok_or(LeaseError::BadKey {
        key: key.to_owned(),
    })?;
    let message = match store
        .stream
        .get_last_raw_message_by_subject(&format!("{}{key}", store.prefix))
        .await
    {
        Ok(message) => message,
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => return Ok(None),
        Err(e) => return Err(cluster("reading a lease", e)),
    };
    // A put, not a delete, a purge or the server's marker of an expired key.
    let put = match message.headers.get("KV-Operation") {
        Some(op) => matches!(op.as_str().parse(), Ok(kv::Operation::Put)),
        None => message
            .headers
            .get(async_nats::header::NATS_MARKER_REASON)
            .is_none(),
    };
    if !put {
        return Ok(None);
    }
    let lease = Lease {
        name,
        holder: String::from_utf8_lossy(&message.payload).into_owned(),
        revision: message.sequence,
    };
    Ok(Some((lease, age_of(message.time.unix_timestamp_nanos()))))
}

/// The time since `written` (nanoseconds since the Unix epoch); zero if it is in the future.
fn age_of(written: i128) -> Duration {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    Duration::from_nanos(u64::try_from(now - written).unwrap_or(0))
}
