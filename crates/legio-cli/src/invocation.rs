//! The invocation every command runs in ([`Context`]): where the configuration and the database
//! are, and the live-mode server. A leaf module: the commands and `main` use it, it uses none of
//! them.

use std::path::PathBuf;

/// Where the CLI finds its configuration and database.
#[derive(Debug)]
pub struct Context {
    /// `--db`, if given.
    pub db: Option<PathBuf>,
    /// `--nats`, if given: the cluster's server URLs.
    pub nats: Option<Vec<String>>,
    /// The configuration file.
    pub config: PathBuf,
    /// Whether `--config` or `LEGIO_CONFIG` named it; the default file may be absent, and then
    /// store-only commands use the built-in store defaults.
    pub config_explicit: bool,
    /// `--server`, if given.
    pub server: Option<String>,
    /// `--token`, if given.
    pub token: Option<String>,
}

impl Context {
    /// The live-mode client, when `--server` is given.
    pub fn remote(&self) -> anyhow::Result<Option<crate::remote::Remote>> {
        let Some(url) = &self.server else {
            return Ok(None);
        };
        let token = self
            .token
            .clone()
            .or_else(|| std::env::var("LEGIO_OPERATOR_TOKEN").ok())
            .or_else(|| std::env::var("LEGIO_API_TOKEN").ok());
        Ok(Some(crate::remote::Remote::new(url, token)?))
    }

    /// The client for a host endpoint (`heartbeat --server`): the API token first (`--token`,
    /// then `LEGIO_API_TOKEN`), since the operator token does not open host endpoints.
    pub fn host_remote(&self) -> anyhow::Result<Option<crate::remote::Remote>> {
        let Some(url) = &self.server else {
            return Ok(None);
        };
        let token = self
            .token
            .clone()
            .or_else(|| std::env::var("LEGIO_API_TOKEN").ok());
        Ok(Some(crate::remote::Remote::new(url, token)?))
    }

    /// The validated configuration, with `--db` applied (a sled log in that folder).
    pub fn runtime_config(&self) -> anyhow::Result<legio_config::RuntimeConfig> {
        let mut config = legio_config::RuntimeConfig::load(&self.config).map_err(|e| match e {
            legio_config::ConfigError::Read { .. } => {
                anyhow::anyhow!("{e}; pass --config FILE or set LEGIO_CONFIG")
            }
            other => other.into(),
        })?;
        if let Some(db) = &self.db {
            // A folder is a sled log: on a configuration whose backend is NATS, `--db` still
            // means this folder (a backup imported into it, say), never the cluster.
            config.store.path = db.clone();
            config.store.backend = legio_config::StoreBackend::Sled;
        }
        Ok(config)
    }

    /// The store settings, with `--db` applied.
    pub fn store(&self) -> anyhow::Result<legio_config::StoreSettings> {
        if !self.config_explicit && !self.config.exists() {
            return Ok(legio_config::StoreSettings {
                path: self
                    .db
                    .clone()
                    .unwrap_or_else(|| PathBuf::from("data/legio")),
                options: legio_store::StoreOptions::default(),
                backend: legio_config::StoreBackend::Sled,
            });
        }
        Ok(self.runtime_config()?.store)
    }
}
