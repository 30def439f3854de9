//! Options for opening a log: durability mode and limits.

use std::time::Duration;

/// When an append counts as done.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Durability {
    /// Acknowledge only after the group is flushed by sled and `fdatasync`ed by legio: survives
    /// `kill -9` and power loss. The default.
    #[default]
    Sync,
    /// Acknowledge once applied; sled flushes in the background every `flush_every`. A crash or
    /// power loss may lose what was acknowledged within that window (never a torn batch, never a
    /// gap in what remains).
    Relaxed {
        /// How often sled's background flusher runs.
        flush_every: Duration,
    },
}

impl Durability {
    /// Relaxed mode with sled's default 500 ms flush interval.
    pub const RELAXED: Durability = Durability::Relaxed {
        flush_every: Duration::from_millis(500),
    };

    /// Parses `sync` or `relaxed` (the configuration's words).
    pub fn parse(word: &str) -> Option<Self> {
        match word {
            "sync" => Some(Self::Sync),
            "relaxed" => Some(Self::RELAXED),
            _ => None,
        }
    }
}

/// How to open a log.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// Durability mode (default `Sync`).
    pub durability: Durability,
    /// The largest message content accepted, in bytes (default 1 MiB).
    pub max_message_bytes: usize,
    /// Create the database when the folder does not exist (default true).
    pub create_if_missing: bool,
    /// sled's page cache size in bytes (default 1 GiB, sled's own default). Reads of a log larger
    /// than the cache go to disk: restore and scan times grow with the log once it outgrows it.
    pub cache_capacity_bytes: u64,
    /// Make everything already on disk durable when opening (default true): sled's flush, the
    /// data file's fdatasync and an fsync of every blob file, then the folder's fsync. A command
    /// that only reads may skip it (`false`) when the last process that wrote the log closed it
    /// cleanly (the `meta/closed` mark names the last seq; it is removed before any later group
    /// is applied): everything was durable then. After a crash or a kill there is no mark and a
    /// reading open syncs as a writer's does, so it never shows an event a power loss could
    /// still take back (`SledLog::synced_on_open` says which it did). The first commit of any
    /// writer still fsyncs every blob file it has not synced (on a busy disk those hundreds of
    /// fsyncs took most of a read command's start).
    pub sync_on_open: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            durability: Durability::Sync,
            max_message_bytes: 1024 * 1024,
            create_if_missing: true,
            cache_capacity_bytes: 1024 * 1024 * 1024,
            sync_on_open: true,
        }
    }
}
