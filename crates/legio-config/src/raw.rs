//! A section of the configuration file kept as written, for the layer that owns it to parse
//! (the `[server]` table belongs to legio-server): the file stays one file, and each layer's
//! settings live with that layer.

use serde::de::DeserializeOwned;

/// A table of the configuration file, unparsed (empty when the file has none).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RawSection {
    table: toml::Table,
}

impl RawSection {
    pub(crate) fn new(table: toml::Table) -> Self {
        Self { table }
    }

    /// The section as `T` (strict when `T` denies unknown fields); the error says what is wrong
    /// and names the key.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, String> {
        self.table
            .clone()
            .try_into()
            .map_err(|e: toml::de::Error| e.message().to_owned())
    }

    /// Whether the file had no such table (or an empty one).
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }
}
