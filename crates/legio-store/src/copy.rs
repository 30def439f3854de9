//! A private copy of a database folder, for the opens that must not write to the original
//! (`SledLog::open_read_only`: `legio verify`, `legio export --salvage`). sled writes on every
//! open (a snapshot of its page table, the zeroed tail of a torn segment) and legio re-derives
//! indexes past the watermark; on a copy, all of that happens to the copy, which is removed when
//! the log is dropped. The original's process lock is held (shared) while it is copied, so a
//! running writer is reported as `StoreError::Locked` and none can start half way through.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Result, StoreError};
use crate::error_source::ErrorSource;
use crate::sled_backend::LOCK_GRACE;

/// A copied database folder, removed on drop.
#[derive(Debug)]
pub(crate) struct Copy {
    pub(crate) path: PathBuf,
}

impl Drop for Copy {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            tracing::warn!(path = %self.path.display(), error = %e, "removing the read-only copy of the log failed");
        }
    }
}

/// Which of the original's files to copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Snapshots {
    /// sled's finished snapshot files too (fast to open).
    Keep,
    /// Without them: sled rebuilds its page table from the log itself (slower; for a damaged
    /// snapshot).
    Leave,
}

static NEXT: AtomicU64 = AtomicU64::new(0);

/// Takes a shared lock of the data file `lock` of `original`, waiting up to
/// [`LOCK_GRACE`] as a writable open does: sled's own threads can hold the file (and its
/// lock) for a moment after the last handle of this process was dropped, and a read-only open
/// right after a writer closed once failed as locked.
fn lock_shared(lock: &File, original: &Path) -> Result<()> {
    let deadline = Instant::now() + LOCK_GRACE;
    loop {
        match lock.try_lock_shared() {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(StoreError::Locked {
                    path: original.to_owned(),
                })
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(StoreError::io("locking the database to copy it", e))
            }
        }
    }
}

/// Copies the database folder `original` into a new folder under the system's temporary folder
/// (`TMPDIR`), holding the original's lock meanwhile. Unfinished snapshot files are never copied.
pub(crate) fn copy_database(original: &Path, snapshots: Snapshots) -> Result<Copy> {
    let data = original.join("db");
    let lock = File::open(&data).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => StoreError::NotFound {
            path: original.to_owned(),
        },
        _ => StoreError::io("opening the data file to copy it", e),
    })?;
    lock_shared(&lock, original)?;
    let name = format!(
        "legio-read-only-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let copy = Copy {
        path: std::env::temp_dir().join(name),
    };
    copy_folder(original, &copy.path, snapshots).map_err(|e| StoreError::Io {
        during: "copying the database for a read-only open",
        kind: e.kind(),
        cause: crate::error::IoCause::of(e.raw_os_error(), e.kind()),
        source: ErrorSource::new(format!(
            "{} to {} ({e}); a read-only open works on a copy: it needs as much free space in \
             the temporary folder (TMPDIR) as the database takes",
            original.display(),
            copy.path.display()
        )),
    })?;
    drop(lock);
    Ok(copy)
}

fn copy_folder(from: &Path, to: &Path, snapshots: Snapshots) -> std::io::Result<()> {
    std::fs::create_dir(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        let text = name.to_string_lossy();
        if text.starts_with("snap.")
            && (text.ends_with(".generating") || snapshots == Snapshots::Leave)
        {
            continue;
        }
        let target = to.join(&name);
        if entry.file_type()?.is_dir() {
            copy_folder(&entry.path(), &target, snapshots)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}
