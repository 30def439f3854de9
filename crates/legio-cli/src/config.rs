//! The configuration file (`config/legio.toml`): parsed strictly, then resolved into options.
//!
//! Unknown keys are errors naming the key and the file. Relative paths resolve against the
//! config file's folder. `LEGIO_STORE_PATH` and `LEGIO_STORE_DURABILITY` override the file.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use legio_store::{Durability, StoreOptions};
use serde::Deserialize;

/// The file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    store: StoreSection,
    // Read by later layers (runtime, agents, providers); accepted here so one file serves all.
    #[serde(default)]
    runtime: Option<toml::Value>,
    #[serde(default)]
    agents: Option<toml::Value>,
    #[serde(default)]
    providers: Option<toml::Value>,
    #[serde(default)]
    server: Option<toml::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoreSection {
    path: Option<PathBuf>,
    durability: Option<String>,
    max_message_bytes: Option<usize>,
}

/// The store settings the CLI uses.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// The database folder.
    pub path: PathBuf,
    /// Options for opening it.
    pub options: StoreOptions,
}

/// Loads `file`. A missing file is fine only when it is the default path (`explicit` false): the
/// built-in defaults apply then.
pub fn load(file: &Path, explicit: bool) -> Result<StoreConfig> {
    let (parsed, base) = match std::fs::read_to_string(file) {
        Ok(text) => {
            let parsed: FileConfig = toml::from_str(&text)
                .map_err(|e| anyhow::anyhow!("{}: {}", file.display(), e.message()))
                .with_context(|| format!("invalid configuration in {}", file.display()))?;
            let base = file.parent().map(Path::to_path_buf).unwrap_or_default();
            (parsed, base)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {
            (FileConfig::default(), PathBuf::from("config"))
        }
        Err(e) => bail!(
            "cannot read configuration {}: {e}; pass --config FILE or set LEGIO_CONFIG",
            file.display()
        ),
    };
    let _ = (
        &parsed.runtime,
        &parsed.agents,
        &parsed.providers,
        &parsed.server,
    );
    let mut options = StoreOptions::default();
    let path_in_file = parsed
        .store
        .path
        .unwrap_or_else(|| PathBuf::from("../data/legio"));
    let mut path = base.join(path_in_file);
    if let Some(p) = std::env::var_os("LEGIO_STORE_PATH") {
        path = PathBuf::from(p);
    }
    let durability = std::env::var("LEGIO_STORE_DURABILITY")
        .ok()
        .or(parsed.store.durability);
    if let Some(word) = durability {
        options.durability = Durability::parse(&word).with_context(|| {
            format!(
                "store.durability = {word:?} in {} is not \"sync\" or \"relaxed\"",
                file.display()
            )
        })?;
    }
    if let Some(limit) = parsed.store.max_message_bytes {
        if limit == 0 {
            bail!(
                "store.max_message_bytes in {} must be above 0",
                file.display()
            );
        }
        options.max_message_bytes = limit;
    }
    Ok(StoreConfig { path, options })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_text(text: &str) -> Result<StoreConfig> {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("legio.toml");
        std::fs::write(&file, text).unwrap();
        load(&file, true)
    }

    #[test]
    fn unknown_keys_name_the_key_and_the_file() {
        let err = format!("{:#}", load_text("[store]\npaht = \"x\"\n").unwrap_err());
        assert!(err.contains("paht") && err.contains("legio.toml"), "{err}");
        let err = format!("{:#}", load_text("[stroe]\n").unwrap_err());
        assert!(err.contains("stroe"), "{err}");
    }

    #[test]
    fn relative_paths_resolve_against_the_file() {
        let config = load_text("[store]\npath = \"db\"\ndurability = \"relaxed\"\n").unwrap();
        assert!(config.path.ends_with("db") && config.path.is_absolute());
        assert_eq!(config.options.durability, Durability::RELAXED);
    }

    #[test]
    fn bad_durability_is_explained() {
        let err = format!(
            "{:#}",
            load_text("[store]\ndurability = \"fast\"\n").unwrap_err()
        );
        assert!(err.contains("\"fast\"") && err.contains("sync"), "{err}");
    }

    #[test]
    fn a_missing_explicit_file_is_an_error() {
        let err = load(Path::new("/nonexistent/legio.toml"), true).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/legio.toml"), "{err}");
    }
}
