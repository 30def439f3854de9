//! A file an export writes whole or not at all. `legio export -o FILE` writes into a new file
//! beside FILE (`.FILE.XXXXXX.part`), syncs it, and renames it over FILE only once every line is
//! written: an export that fails (a damaged record, a full disk) or is interrupted leaves the
//! previous FILE as it was, never a truncated one that an import would take for a shorter log.
//!
//! What `File::create` did and this keeps: a new file gets mode 0666 less the umask, an existing
//! one keeps its mode, a symbolic link is written through (the file it points to is replaced),
//! and a path that is not a regular file (`/dev/null`, a named pipe) is written in place. What
//! differs: the replaced file is a new inode, so another hard link to the old one keeps the old
//! lines, and its owner is the exporting user.

use std::fs::{File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use tempfile::NamedTempFile;

/// An output file being written (see the module docs).
pub struct OutputFile {
    kind: Kind,
}

enum Kind {
    /// A regular file (or a new one): written beside it, renamed over it by `commit`.
    Staged {
        temp: NamedTempFile,
        target: PathBuf,
    },
    /// Not a regular file (a device, a pipe), or a folder where a new file cannot be made: the
    /// path itself, opened as `File::create` opens it.
    InPlace(File),
}

impl OutputFile {
    /// Opens the output for `path`. Nothing at `path` changes until [`OutputFile::commit`].
    pub fn create(path: &Path) -> Result<Self> {
        let target = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        let existing = match std::fs::metadata(&target) {
            Ok(meta) => Some(meta),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        let dangling_link = existing.is_none() && std::fs::symlink_metadata(path).is_ok();
        if dangling_link || existing.as_ref().is_some_and(|m| !m.is_file()) {
            return Self::in_place(path);
        }
        let mode = existing.map(|m| m.permissions().mode() & 0o7777);
        match stage_beside(&target, mode) {
            Ok(temp) => Ok(Self {
                kind: Kind::Staged { temp, target },
            }),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                eprintln!(
                    "note: cannot create a file beside {} ({e}); writing it in place, so an \
                     interrupted export leaves it incomplete",
                    path.display()
                );
                Self::in_place(path)
            }
            Err(e) => {
                Err(e).with_context(|| format!("cannot create a file beside {}", path.display()))
            }
        }
    }

    fn in_place(path: &Path) -> Result<Self> {
        let file =
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        Ok(Self {
            kind: Kind::InPlace(file),
        })
    }

    /// Puts the written file in place: with `sync`, its bytes reach the disk first and the
    /// rename after. Dropping an `OutputFile` without committing removes what was written beside
    /// the target and leaves the target untouched.
    pub fn commit(self, sync: bool) -> Result<()> {
        match self.kind {
            Kind::InPlace(mut file) => file.flush().context("cannot write the output"),
            Kind::Staged { temp, target } => {
                if sync {
                    temp.as_file()
                        .sync_all()
                        .with_context(|| format!("cannot sync {}", temp.path().display()))?;
                }
                temp.persist(&target)
                    .map_err(|e| e.error)
                    .with_context(|| format!("cannot rename the export to {}", target.display()))?;
                if sync {
                    sync_parent(&target)?;
                }
                Ok(())
            }
        }
    }
}

impl Write for OutputFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.kind {
            Kind::Staged { temp, .. } => temp.as_file_mut().write(buf),
            Kind::InPlace(file) => file.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.kind {
            Kind::Staged { temp, .. } => temp.as_file_mut().flush(),
            Kind::InPlace(file) => file.flush(),
        }
    }
}

/// A new file in `target`'s folder, named after it: with `mode` exactly (an existing target's),
/// or 0666 less the umask (a new one).
fn stage_beside(target: &Path, mode: Option<u32>) -> io::Result<NamedTempFile> {
    let folder = folder_of(target);
    let name = target
        .file_name()
        .map_or_else(|| "export".into(), |n| n.to_string_lossy());
    let temp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".part")
        .permissions(Permissions::from_mode(0o666))
        .tempfile_in(folder)?;
    if let Some(mode) = mode {
        temp.as_file()
            .set_permissions(Permissions::from_mode(mode))?;
    }
    Ok(temp)
}

/// Makes a rename in `target`'s folder durable.
fn sync_parent(target: &Path) -> Result<()> {
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
