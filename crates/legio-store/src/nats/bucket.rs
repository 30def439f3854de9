//! Opening a key-value bucket of the cluster (the leases', the secrets'), creating it if need be,
//! and bringing one that exists to the max age and replica count a node asks for.

use std::time::Duration;

use async_nats::jetstream::{self, kv};

use super::options::NatsOptions;
use crate::error::{Result, StoreError};

/// A key-value bucket, with the JetStream context it was opened through.
pub(super) struct Bucket {
    pub(super) store: kv::Store,
    js: jetstream::Context,
}

/// Connects and opens the key-value bucket `config` names, creating it if need be (another
/// node may create it first, or an earlier configuration: then it is opened as it is; see
/// [`Bucket::conform`]).
pub(super) async fn key_value(
    options: &NatsOptions,
    config: kv::Config,
    during: &'static str,
) -> Result<Bucket> {
    let js = context(options).await?;
    let name = config.bucket.clone();
    let store = match js.create_key_value(config).await {
        Ok(store) => store,
        Err(create) => js
            .get_key_value(name)
            .await
            .map_err(|_| StoreError::cluster(during, create))?,
    };
    Ok(Bucket { store, js })
}

/// Opens the key-value bucket `name` as it is, or `None` when there is none: for a reader that
/// must neither create nor change it.
pub(super) async fn existing_key_value(
    options: &NatsOptions,
    name: &str,
    during: &'static str,
) -> Result<Option<Bucket>> {
    let js = context(options).await?;
    if let Err(e) = js.get_stream(format!("KV_{name}")).await {
        if let jetstream::context::GetStreamErrorKind::JetStream(error) = e.kind() {
            if error.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND {
                return Ok(None);
            }
        }
        return Err(StoreError::cluster(during, e));
    }
    let store = js
        .get_key_value(name)
        .await
        .map_err(|e| StoreError::cluster(during, e))?;
    Ok(Some(Bucket { store, js }))
}

async fn context(options: &NatsOptions) -> Result<jetstream::Context> {
    let client = options.connect().await?;
    Ok(jetstream::ContextBuilder::new()
        .timeout(options.request_timeout)
        .build(client))
}

impl Bucket {
    /// How long the bucket keeps an entry nobody rewrites (zero: for ever), as it was when
    /// opened.
    pub(super) fn max_age(&self) -> Duration {
        self.store.stream.cached_info().config.max_age
    }

    /// How many copies the bucket keeps, as it was when opened.
    pub(super) fn replicas(&self) -> usize {
        self.store.stream.cached_info().config.num_replicas
    }

    /// Gives the bucket `max_age` and `replicas` copies where it has others (made by an earlier
    /// configuration, or `legio mcp token` run with another one). JetStream changes both in
    /// place, keeping the entries.
    pub(super) async fn conform(&self, max_age: Duration, replicas: usize) -> Result<()> {
        let kept = &self.store.stream.cached_info().config;
        if (kept.max_age, kept.num_replicas) == (max_age, replicas) {
            return Ok(());
        }
        tracing::info!(
            bucket = %self.store.name,
            from_max_age = ?kept.max_age,
            to_max_age = ?max_age,
            from_replicas = kept.num_replicas,
            to_replicas = replicas,
            "bringing a key-value bucket to the configuration"
        );
        let mut config = kept.clone();
        config.max_age = max_age;
        config.num_replicas = replicas;
        // JetStream refuses a duplicate window longer than the max age.
        if !max_age.is_zero() {
            config.duplicate_window = config.duplicate_window.min(max_age);
        }
        self.js
            .update_stream(&config)
            .await
            .map_err(|e| StoreError::cluster("changing a key-value bucket's configuration", e))?;
        self.settled(replicas).await
    }

    /// Waits until the bucket's stream has a leader and `replicas - 1` followers that are
    /// current: a stream whose replicas just changed refuses or loses writes meanwhile (seen: a
    /// lease taken right after growing from one replica to three timed out).
    async fn settled(&self, replicas: usize) -> Result<()> {
        let deadline = tokio::time::Instant::now() + SETTLE_FOR;
        let mut stream = self.store.stream.clone();
        loop {
            let settled = stream.info().await.ok().and_then(|info| {
                let Some(cluster) = info.cluster.as_ref() else {
                    return Some(()); // a server without a cluster: one replica
                };
                let followers = &cluster.replicas;
                let current = followers.iter().filter(|p| p.current && !p.offline).count();
                (cluster.leader.is_some() && current + 1 >= replicas).then_some(())
            });
            if settled.is_some() {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(StoreError::cluster(
                    "changing a key-value bucket's configuration",
                    format!("its {replicas} replicas were not in place after {SETTLE_FOR:?}"),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// How long a bucket whose configuration changed may take to have its replicas in place.
const SETTLE_FOR: Duration = Duration::from_secs(30);
