//! sled as the `Engine`'s backend: the database, its trees and the fsyncs of its data file, blob
//! files and folder (a leaf module: the sled log and the layout migration both use it).

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use crate::backend::{Backend, Direction, TreeId, Visitor, WriteSet};
use crate::error::{Result, StoreError};
use crate::metrics as m;
use crate::options::{Durability, StoreOptions};

pub(crate) struct SledBackend {
    db: sled::Db,
    trees: [sled::Tree; 4],
    pub(crate) path: PathBuf,
    data_file: File,
    synced_blobs: Mutex<HashSet<OsString>>,
}

impl std::fmt::Debug for SledBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledBackend")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

pub(crate) fn sled_err(during: &'static str) -> impl Fn(sled::Error) -> StoreError {
    move |e| StoreError::io(during, e)
}

impl SledBackend {
    pub(crate) fn open(path: &Path, options: &StoreOptions) -> Result<Self> {
        if !options.create_if_missing && !path.join("db").exists() {
            return Err(StoreError::NotFound {
                path: path.to_owned(),
            });
        }
        let config = sled::Config::new()
            .path(path)
            .cache_capacity(options.cache_capacity_bytes)
            .flush_every_ms(match options.durability {
                // The committer flushes every group itself.
                Durability::Sync => None,
                Durability::Relaxed { flush_every } => Some(flush_every.as_millis().max(1) as u64),
            });
        let db = open_with_lock_grace(&config, path)?;
        let tree = |id: TreeId| db.open_tree(id.name()).map_err(sled_err("opening a tree"));
        let trees = [
            tree(TreeId::Chunks)?,
            tree(TreeId::Lists)?,
            tree(TreeId::Sessions)?,
            tree(TreeId::Meta)?,
        ];
        let data_file = File::open(path.join("db"))
            .map_err(|e| StoreError::io("opening the data file for fsync", e))?;
        let backend = Self {
            db,
            trees,
            path: path.to_owned(),
            data_file,
            synced_blobs: Mutex::new(HashSet::new()),
        };
        // Make the files' directory entries durable once (a fresh database's `db` file).
        backend.sync()?;
        sync_dir(path)?;
        Ok(backend)
    }

    pub(crate) fn tree(&self, id: TreeId) -> &sled::Tree {
        &self.trees[id as usize]
    }

    pub(crate) fn db(&self) -> &sled::Db {
        &self.db
    }

    /// Makes everything applied so far durable: sled's flush, then a real fdatasync of the data
    /// file, then fsync of blob files sled wrote since the last sync (sled never fsyncs them).
    pub(crate) fn sync(&self) -> Result<()> {
        self.db.flush().map_err(sled_err("flushing"))?;
        self.data_file
            .sync_data()
            .map_err(|e| StoreError::io("fdatasync of the data file", e))?;
        let mut fsyncs = 1;
        let blob_dir = self.path.join("blobs");
        if let Ok(entries) = std::fs::read_dir(&blob_dir) {
            let mut synced = self
                .synced_blobs
                .lock()
                .map_err(|_| StoreError::io("syncing blobs", "lock poisoned"))?;
            let mut present = HashSet::new();
            let mut new_blobs = false;
            for entry in entries.flatten() {
                let name = entry.file_name();
                if !synced.contains(&name) {
                    // A blob may be removed by sled's GC between listing and opening: skip it.
                    if let Ok(file) = File::open(entry.path()) {
                        file.sync_all()
                            .map_err(|e| StoreError::io("fsync of a blob file", e))?;
                        fsyncs += 1;
                        new_blobs = true;
                    }
                }
                present.insert(name);
            }
            if new_blobs {
                sync_dir(&blob_dir)?;
                fsyncs += 1;
            }
            *synced = present;
        }
        m::fsyncs(fsyncs);
        Ok(())
    }
}

/// How long `open` keeps retrying a held lock. sled hands some writes to its own thread pool,
/// which can hold the file (and its lock) for a moment after the last handle in this process is
/// dropped; a lock held by another live process is still reported within this time.
const LOCK_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

fn open_with_lock_grace(config: &sled::Config, path: &Path) -> Result<sled::Db> {
    let deadline = Instant::now() + LOCK_GRACE;
    loop {
        match config.open() {
            Ok(db) => return Ok(db),
            Err(e) => {
                let text = e.to_string();
                if !text.contains("could not acquire lock") {
                    return Err(StoreError::Io {
                        during: "opening the database",
                        kind: crate::error::Cause::kind(&e),
                        reason: format!("{} ({text})", path.display()),
                    });
                }
                if Instant::now() >= deadline {
                    return Err(StoreError::Locked {
                        path: path.to_owned(),
                    });
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
}

fn sync_dir(path: &Path) -> Result<()> {
    File::open(path)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io("fsync of the database folder", e))
}

impl Backend for SledBackend {
    type Value = sled::IVec;

    fn get(&self, tree: TreeId, key: &[u8]) -> Result<Option<Self::Value>> {
        self.tree(tree).get(key).map_err(sled_err("reading"))
    }

    fn floor(
        &self,
        tree: TreeId,
        prefix: &[u8],
        key: &[u8],
    ) -> Result<Option<(Vec<u8>, Self::Value)>> {
        let found = self
            .tree(tree)
            .range::<&[u8], _>(..=key)
            .next_back()
            .transpose()
            .map_err(sled_err("reading"))?;
        Ok(found
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.to_vec(), v)))
    }

    fn scan(
        &self,
        tree: TreeId,
        start: &[u8],
        end: Option<&[u8]>,
        direction: Direction,
        visit: &mut Visitor<'_>,
    ) -> Result<()> {
        let tree = self.tree(tree);
        let iter = match end {
            Some(end) => tree.range(start..end),
            None => tree.range(start..),
        };
        let mut step = |item: sled::Result<(sled::IVec, sled::IVec)>| -> Result<bool> {
            let (k, v) = item.map_err(sled_err("scanning"))?;
            Ok(visit(&k, &v).is_break())
        };
        match direction {
            Direction::Forward => {
                for item in iter {
                    if step(item)? {
                        break;
                    }
                }
            }
            Direction::Backward => {
                for item in iter.rev() {
                    if step(item)? {
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    fn last(&self, tree: TreeId) -> Result<Option<(Vec<u8>, Self::Value)>> {
        Ok(self
            .tree(tree)
            .last()
            .map_err(sled_err("reading"))?
            .map(|(k, v)| (k.to_vec(), v)))
    }

    fn apply(&self, writes: WriteSet) -> Result<()> {
        // One sled batch for the chunks: a group's events are stored all or none. List entries,
        // session states and the watermark are plain writes after them, in that order: sled's
        // log keeps writes in order, and recovery re-derives every group past the watermark, so
        // they need no batch of their own (each sled batch costs a manifest and a transaction).
        if !writes.chunks.is_empty() {
            let mut chunks = sled::Batch::default();
            for (key, value) in writes.chunks {
                chunks.insert(key, value);
            }
            self.tree(TreeId::Chunks)
                .apply_batch(chunks)
                .map_err(sled_err("applying a batch"))?;
        }
        for (tree, key, value) in writes.puts {
            self.tree(tree)
                .insert(key, value)
                .map_err(sled_err("writing an index entry"))?;
        }
        for (tree, key) in writes.removes {
            self.tree(tree)
                .remove(key)
                .map_err(sled_err("removing a key"))?;
        }
        Ok(())
    }

    fn size_on_disk(&self) -> Result<u64> {
        self.db.size_on_disk().map_err(sled_err("measuring size"))
    }
}
