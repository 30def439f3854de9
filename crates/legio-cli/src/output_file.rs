//! A file an export writes whole or not at all. `legio export -o FILE` writes into a new file
//! beside FILE (`.FILE.XXXXXX.part`; in place of an existing file, readable by its owner only
//! until it takes that file's mode), syncs it, and renames it over FILE only once every line is
//! written: an export that fails (a damaged
//! record, a full disk) or is interrupted leaves the previous FILE as it was, never a truncated
//! one that an import would take for a shorter log.
//!
//! What `File::create` did and this keeps: a new file gets mode 0666 less the umask, an existing
//! one keeps its mode, a file this user may not write is refused, a symbolic link is written
//! through (the file it points to is replaced), and a path that is not a regular file
//! (`/dev/null`, a named pipe) is written in place. Where no file can be made beside FILE (a
//! folder this user may not write, a name too long for a longer one) or FILE cannot be renamed
//! over (a file bind-mounted on its own, another user's file in a sticky folder), FILE is written
//! in place, with a note. What differs: replacing a file needs room for both copies for a moment,
//! the replaced file is a new inode (another hard link keeps the old lines), and its owner is the
//! exporting user.
//!
//! With `sync`, a thread of the file's own syncs what is written every [`SYNC_EVERY`] bytes while
//! the export goes on, so the sync before the rename waits only for the last stretch: the disk
//! (and, on a virtual machine, the host's cache behind it) works while the lines are rendered.
//! Measured (`strace -T` of `legio export -o FILE`, 432 MB): the final sync took 0.54-0.57 s
//! alone, 0.03-0.04 s after the syncs along the way (docs/benchmarks.md, "replay_export").

use std::fs::{File, OpenOptions};
use std::io::{self, ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

use anyhow::{Context as _, Result};
use tempfile::NamedTempFile;

/// Bytes written between two syncs while the export goes on (see the module docs).
pub const SYNC_EVERY: u64 = 64 << 20;

/// An output file being written (see the module docs).
pub struct OutputFile {
    kind: Kind,
    /// Whether the file reaches the disk before it is put in place.
    sync: bool,
    /// With `sync`, for a regular file: the thread that syncs it along the way.
    syncer: Option<Syncer>,
}

enum Kind {
    /// A regular file (or a new one): written beside it, renamed over it by `commit`, with the
    /// replaced file's mode (`None`: a new file, created with 0666 less the umask).
    Staged {
        temp: NamedTempFile,
        target: PathBuf,
        mode: Option<u32>,
    },
    /// Written where it is, as `File::create` writes; `regular` when it is a plain file (synced
    /// on commit), not a device or a pipe.
    InPlace { file: File, regular: bool },
}

impl OutputFile {
    /// Opens the output for `path`. Nothing at `path` changes until [`OutputFile::commit`].
    /// With `sync`, the file reaches the disk before it is put in place (see `commit`).
    pub fn create(path: &Path, sync: bool) -> Result<Self> {
        let mut out = Self::open(path)?;
        out.sync = sync;
        if sync {
            out.syncer = out.regular_file().map(Syncer::start).transpose()?;
        }
        Ok(out)
    }

    fn open(path: &Path) -> Result<Self> {
        let target = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        let existing = match std::fs::metadata(&target) {
            Ok(meta) => Some(meta),
            Err(e) if e.kind() == ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        let dangling_link = existing.is_none() && std::fs::symlink_metadata(path).is_ok();
        if dangling_link || existing.as_ref().is_some_and(|m| !m.is_file()) {
            return Self::in_place(path);
        }
        if existing.is_some() {
            // As `File::create`: a file this user may not write is refused, not replaced.
            OpenOptions::new()
                .write(true)
                .open(&target)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        let mode = existing.as_ref().and_then(mode_of);
        match stage_beside(&target, existing.is_none()) {
            Ok(temp) => Ok(Self {
                kind: Kind::Staged { temp, target, mode },
                sync: false,
                syncer: None,
            }),
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::PermissionDenied | ErrorKind::InvalidFilename
                ) =>
            {
                let out = Self::in_place(path)?;
                eprintln!(
                    "note: cannot create a file beside {} ({e}); writing it in place, so an \
                     interrupted export leaves it incomplete",
                    path.display()
                );
                Ok(out)
            }
            Err(e) => {
                Err(e).with_context(|| format!("cannot create a file beside {}", path.display()))
            }
        }
    }

    fn in_place(path: &Path) -> Result<Self> {
        let file =
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        let regular = file.metadata().is_ok_and(|m| m.is_file());
        Ok(Self {
            kind: Kind::InPlace { file, regular },
            sync: false,
            syncer: None,
        })
    }

    /// Puts the written file in place: with `sync` (given to `create`), its bytes reach the
    /// disk before the rename, and the rename before this returns. Dropping an `OutputFile`
    /// without committing removes what was written beside the target and leaves the target
    /// untouched.
    pub fn commit(self) -> Result<()> {
        let sync = self.sync;
        if let Some(syncer) = self.syncer {
            let syncs = syncer.finish()?;
            tracing::debug!(syncs, "the output was synced along the way");
        }
        match self.kind {
            Kind::InPlace { mut file, regular } => {
                file.flush().context("cannot write the output")?;
                if sync && regular {
                    file.sync_all().context("cannot sync the output")?;
                }
                Ok(())
            }
            Kind::Staged { temp, target, mode } => {
                if let Some(mode) = mode {
                    set_mode(temp.as_file(), mode).with_context(|| {
                        format!("cannot set the mode of {}", temp.path().display())
                    })?;
                }
                if sync {
                    temp.as_file()
                        .sync_all()
                        .with_context(|| format!("cannot sync {}", temp.path().display()))?;
                }
                rename_over(temp, &target, sync)
            }
        }
    }
}

impl OutputFile {
    /// The file being written, when it is a regular file.
    fn regular_file(&self) -> Option<&File> {
        match &self.kind {
            Kind::Staged { temp, .. } => Some(temp.as_file()),
            Kind::InPlace { file, regular } => regular.then_some(file),
        }
    }

    /// The file being written: the one beside the target, or the target itself.
    fn file(&mut self) -> &mut File {
        match &mut self.kind {
            Kind::Staged { temp, .. } => temp.as_file_mut(),
            Kind::InPlace { file, .. } => file,
        }
    }
}

impl Write for OutputFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(syncer) = &mut self.syncer {
            syncer.check()?;
        }
        let n = self.file().write(buf)?;
        if let Some(syncer) = &mut self.syncer {
            syncer.wrote(n as u64);
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file().flush()
    }
}

/// The thread that syncs a file while it is written (see the module docs).
struct Syncer {
    /// Asks the thread for one more sync; `None` once finishing.
    due: Option<mpsc::SyncSender<()>>,
    /// Ends with its first error, if any.
    thread: Option<std::thread::JoinHandle<io::Result<()>>>,
    /// The syncs the thread has made.
    syncs: Arc<AtomicU64>,
    /// Why a sync failed, once one has: every later write and the commit fail with it.
    failed: Option<(io::ErrorKind, String)>,
    /// Bytes written since the last sync was asked for.
    since: u64,
    /// Bytes between two syncs: [`SYNC_EVERY`].
    every: u64,
}

impl Syncer {
    fn start(file: &File) -> Result<Self> {
        let file = file.try_clone().context("cannot open the output twice")?;
        let (due, asked) = mpsc::sync_channel::<()>(1);
        let syncs = Arc::new(AtomicU64::new(0));
        let made = Arc::clone(&syncs);
        let thread = std::thread::Builder::new()
            .name("legio-export-sync".into())
            .spawn(move || {
                while asked.recv().is_ok() {
                    file.sync_data()?;
                    made.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
            .context("cannot start the output's sync thread")?;
        Ok(Self {
            due: Some(due),
            thread: Some(thread),
            syncs,
            failed: None,
            since: 0,
            every: SYNC_EVERY,
        })
    }

    /// Fails once a sync has failed: the thread ends only then while it is still asked for
    /// syncs. Checked before each write, so an export stops at its next write, with nothing
    /// written after the failure.
    fn check(&mut self) -> io::Result<()> {
        if self.failed.is_none() && self.thread.as_ref().is_some_and(|t| t.is_finished()) {
            let why = self
                .join()
                .err()
                .unwrap_or_else(|| io::Error::other("the sync thread ended"));
            self.failed = Some((why.kind(), why.to_string()));
        }
        match &self.failed {
            Some((kind, why)) => Err(sync_failed(*kind, why)),
            None => Ok(()),
        }
    }

    /// Counts `n` more bytes written; asks for a sync once [`SYNC_EVERY`] bytes wait, unless
    /// one is already asked for (then the next write asks again). A thread that has ended is
    /// found by the next [`Syncer::check`].
    fn wrote(&mut self, n: u64) {
        self.since += n;
        if self.since < self.every {
            return;
        }
        if self
            .due
            .as_ref()
            .is_some_and(|due| due.try_send(()).is_ok())
        {
            self.since = 0;
        }
    }

    /// Lets the thread end after the sync it is doing: the syncs it made, or the first error.
    fn finish(mut self) -> io::Result<u64> {
        self.check()?;
        self.due = None;
        self.join()
            .map_err(|e| sync_failed(e.kind(), &e.to_string()))?;
        Ok(self.syncs.load(Ordering::Relaxed))
    }

    fn join(&mut self) -> io::Result<()> {
        match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(io::Error::other("the output's sync thread panicked")),
            None => Ok(()),
        }
    }
}

/// The error of a sync along the way that failed.
fn sync_failed(kind: io::ErrorKind, why: &str) -> io::Error {
    io::Error::new(
        kind,
        format!("cannot sync the output while writing it: {why}"),
    )
}

/// Renames `temp` over `target`; where the rename is refused but the target can be written
/// (see the module docs), copies it in place instead. With `sync`, makes the result durable; a
/// folder that cannot be synced after the rename is a warning, as the file is in place.
fn rename_over(temp: NamedTempFile, target: &Path, sync: bool) -> Result<()> {
    match temp.persist(target) {
        Ok(_) => {
            if sync {
                if let Err(e) = sync_folder(target) {
                    eprintln!(
                        "warning: {} is written, but its folder could not be synced ({e:#}); a \
                         power loss soon after may bring the previous file back",
                        target.display()
                    );
                }
            }
            Ok(())
        }
        Err(e) if refused_rename(&e.error) => {
            eprintln!(
                "note: cannot rename over {} ({}); copying the export into it",
                target.display(),
                e.error
            );
            std::fs::copy(e.file.path(), target)
                .with_context(|| format!("cannot write {}", target.display()))?;
            if sync {
                File::open(target)
                    .and_then(|f| f.sync_all())
                    .with_context(|| format!("cannot sync {}", target.display()))?;
            }
            Ok(())
        }
        Err(e) => Err(e.error)
            .with_context(|| format!("cannot rename the export to {}", target.display())),
    }
}

/// A rename the file system refuses although the target itself can be written: a file mounted
/// on its own (EBUSY, EXDEV), another user's file in a sticky folder (EPERM).
fn refused_rename(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::ResourceBusy | ErrorKind::CrossesDevices | ErrorKind::PermissionDenied
    )
}

/// A new file in `target`'s folder, named after it: 0666 less the umask when `new` (as
/// `File::create` makes it), else the owner's only until `commit` gives it the replaced file's.
fn stage_beside(target: &Path, new: bool) -> io::Result<NamedTempFile> {
    let name = target
        .file_name()
        .map_or_else(|| "export".into(), |n| n.to_string_lossy());
    let prefix = format!(".{name}.");
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(".part");
    #[cfg(unix)]
    if new {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    #[cfg(not(unix))]
    let _ = new;
    builder.tempfile_in(folder_of(target))
}

/// The permission bits of an existing file (Unix).
fn mode_of(meta: &std::fs::Metadata) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        Some(meta.permissions().mode() & 0o7777)
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        None
    }
}

/// Gives `file` the permission bits `mode` (Unix).
fn set_mode(file: &File, mode: u32) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(mode))
    }
    #[cfg(not(unix))]
    {
        let _ = (file, mode);
        Ok(())
    }
}

/// Makes a rename in `target`'s folder durable.
fn sync_folder(target: &Path) -> Result<()> {
    let folder = folder_of(target);
    OpenOptions::new()
        .read(true)
        .open(folder)
        .and_then(|dir| dir.sync_all())
        .with_context(|| format!("cannot sync {}", folder.display()))
}

/// The folder `target` is in (`.` for a bare file name).
fn folder_of(target: &Path) -> &Path {
    match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    const LINE: &[u8] = b"{\"seq\":1,\"kind\":\"message_posted\"}\n";

    /// Writes at least `bytes` in lines; returns what was written.
    fn lines(out: &mut OutputFile, bytes: u64) -> Vec<u8> {
        let count = bytes as usize / LINE.len() + 1;
        for _ in 0..count {
            out.write_all(LINE).unwrap();
        }
        LINE.repeat(count)
    }

    /// Waits until the syncer has made `n` syncs (it makes them on its own thread).
    fn wait_for_syncs(syncs: &AtomicU64, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while syncs.load(Ordering::Relaxed) < n {
            assert!(Instant::now() < deadline, "sync {n} never came");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn each_stretch_written_is_synced_along_the_way_and_the_file_holds_every_byte() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        let mut out = OutputFile::create(&path, true).unwrap();
        let every = 64 << 10;
        let syncer = out.syncer.as_mut().unwrap();
        syncer.every = every;
        let syncs = Arc::clone(&syncer.syncs);
        let mut expected = Vec::new();
        for stretch in 1..=3 {
            expected.extend(lines(&mut out, every));
            wait_for_syncs(&syncs, stretch);
        }
        expected.extend(lines(&mut out, every / 3));
        out.commit().unwrap();
        assert_eq!(
            syncs.load(Ordering::Relaxed),
            3,
            "no sync for a part stretch"
        );
        assert!(std::fs::read(&path).unwrap() == expected);
    }

    #[test]
    fn a_failed_sync_fails_every_later_write_and_the_commit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        let mut out = OutputFile::create(&path, true).unwrap();
        let before = lines(&mut out, 1 << 10);
        // The sync thread ends as one whose sync failed ends.
        let syncer = out.syncer.as_mut().unwrap();
        // The real thread ends (its channel closes); the one in its place fails.
        drop(syncer.due.replace(mpsc::sync_channel(1).0));
        let failed = std::thread::spawn(|| Err(io::Error::other("the disk went away")));
        syncer
            .thread
            .replace(failed)
            .unwrap()
            .join()
            .unwrap()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !syncer.thread.as_ref().unwrap().is_finished() {
            assert!(Instant::now() < deadline, "the thread never ended");
            std::thread::sleep(Duration::from_millis(1));
        }
        for _ in 0..2 {
            let e = out.write_all(LINE).unwrap_err();
            assert!(
                e.to_string() == "cannot sync the output while writing it: the disk went away",
                "{e}"
            );
        }
        let staged = match &out.kind {
            Kind::Staged { temp, .. } => temp.path().to_owned(),
            Kind::InPlace { .. } => unreachable!("a new file is staged"),
        };
        assert!(
            std::fs::read(&staged).unwrap() == before,
            "nothing written after"
        );
        let e = out.commit().unwrap_err();
        assert!(format!("{e:#}").contains("the disk went away"), "{e:#}");
        assert!(!path.exists(), "a failed export puts nothing in place");
    }

    #[test]
    fn without_sync_no_thread_syncs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        let mut out = OutputFile::create(&path, false).unwrap();
        assert!(out.syncer.is_none());
        let expected = lines(&mut out, 1 << 20);
        out.commit().unwrap();
        assert!(std::fs::read(&path).unwrap() == expected);
    }
}
