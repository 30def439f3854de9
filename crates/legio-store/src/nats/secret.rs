//! Secrets every node of a cluster shares (the key that signs MCP tokens, so a token made on one
//! node is accepted by every other): each made once, by whichever node asks first, and kept in
//! a key-value bucket of its own, `<stream>_secrets` (no max age, one revision, the stream's
//! replica count, to which a bucket made with fewer is grown); every other node reads it.
//! Whoever may read the cluster's buckets may read them, as they may read the log itself.

use async_nats::jetstream::{self, kv};

use super::backoff::Backoff;
use super::bucket::{key_value, Bucket};
use super::options::NatsOptions;
use super::subject::encode_token;
use crate::error::{Result, StoreError};

/// The secret `name` of the cluster `options` reaches: the one kept there, or `fresh`, kept now
/// because none was (create-if-absent: of two nodes asking at once, both get the one stored
/// first). Blocks, like the log's calls.
pub fn shared_secret(options: &NatsOptions, name: &str, fresh: Vec<u8>) -> Result<Vec<u8>> {
    options.validate()?;
    let runtime = super::runtime::build(1)?;
    let (options, key) = (options.clone(), encode_token(name));
    let kept = super::runtime::block_on(runtime.handle(), async move {
        let bucket = bucket(&options).await?;
        // Grown, never shrunk: `legio mcp token` asks too, with whatever configuration it has
        // (no log stream checks its replicas first, as a node's does). A failure to grow it
        // (no permission to change the bucket) leaves it as it is, said in a warning.
        let replicas = options.replicas.max(bucket.replicas());
        if let Err(e) = bucket.conform(std::time::Duration::ZERO, replicas).await {
            tracing::warn!(error = %e, "the secrets bucket keeps fewer copies than store.nats.replicas asks");
        }
        // A bucket just grown to more replicas may still elect its leader ("no responders"):
        // retried as the log's reads are, until `append_deadline`.
        let mut backoff = Backoff::new(options.append_deadline);
        loop {
            let error = match keep(&bucket.store, &key, &fresh).await {
                Ok(value) => return Ok(value),
                Err(e) => e,
            };
            match backoff.next() {
                Some(pause) => tokio::time::sleep(pause).await,
                None => return Err(error),
            }
        }
    });
    // Not dropped in place: the caller may be inside an async runtime.
    runtime.shutdown_background();
    kept
}

/// Keeps `fresh` as the secret `key` unless one is kept (create-if-absent), and reads it back.
async fn keep(store: &kv::Store, key: &str, fresh: &[u8]) -> Result<Vec<u8>> {
    match store.create(key, fresh.to_vec().into()).await {
        Ok(_) => {}
        Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {}
        Err(e) => return Err(StoreError::cluster("keeping a shared secret", e)),
    }
    match store.get(key).await {
        Ok(Some(value)) => Ok(value.to_vec()),
        Ok(None) => Err(StoreError::cluster(
            "reading a shared secret",
            "it was deleted right after it was kept",
        )),
        Err(e) => Err(StoreError::cluster("reading a shared secret", e)),
    }
}

/// The secrets bucket, created if need be.
async fn bucket(options: &NatsOptions) -> Result<Bucket> {
    let config = kv::Config {
        bucket: format!("{}_secrets", options.stream),
        history: 1,
        num_replicas: options.replicas,
        storage: jetstream::stream::StorageType::File,
        ..Default::default()
    };
    key_value(options, config, "creating the secrets bucket").await
}
