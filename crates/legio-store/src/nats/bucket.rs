//! Opening a key-value bucket of the cluster (the leases', the secrets'), creating it if need be.

use async_nats::jetstream::{self, kv};

use super::options::NatsOptions;
use crate::error::{Result, StoreError};

/// Connects and opens the key-value bucket `config` names, creating it if need be (another
/// node may create it first: then it is opened as it is).
pub(super) async fn key_value(
    options: &NatsOptions,
    config: kv::Config,
    during: &'static str,
) -> Result<kv::Store> {
    let client = options.connect().await?;
    let js = jetstream::ContextBuilder::new()
        .timeout(options.request_timeout)
        .build(client);
    let name = config.bucket.clone();
    match js.create_key_value(config).await {
        Ok(store) => Ok(store),
        Err(create) => js
            .get_key_value(name)
            .await
            .map_err(|_| StoreError::cluster(during, create)),
    }
}
