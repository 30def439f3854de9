//! A small tmpfs mounted for one test (mounting needs root; without it the test is skipped with
//! a message), for tests of a full disk.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A small tmpfs, unmounted when dropped.
pub struct SmallDisk {
    _dir: tempfile::TempDir,
    mount: PathBuf,
}

impl SmallDisk {
    /// Mounts a tmpfs of `megabytes`, or `None` (with a message) where mounting is not permitted.
    pub fn mount(megabytes: u32) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let mount = dir.path().join("disk");
        std::fs::create_dir(&mount).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={megabytes}m"), "tmpfs"])
            .arg(&mount)
            .output();
        match out {
            Ok(out) if out.status.success() => Some(Self { _dir: dir, mount }),
            Ok(out) => {
                eprintln!(
                    "skipped: cannot mount a tmpfs ({}); run as root to test a full disk",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("skipped: cannot run mount ({e}); run as root to test a full disk");
                None
            }
        }
    }

    /// The mounted folder.
    pub fn path(&self) -> &Path {
        &self.mount
    }

    /// Fills the disk with one file, then shortens it to leave `free` bytes; returns the file.
    pub fn fill_leaving(&self, free: u64) -> PathBuf {
        use std::io::Write;
        let filler = self.mount.join("filler");
        let mut file = std::fs::File::create(&filler).unwrap();
        let block = vec![0u8; 64 * 1024];
        while file.write_all(&block).is_ok() {}
        while file.write_all(&block[..512]).is_ok() {}
        let len = file.metadata().unwrap().len();
        file.set_len(len.saturating_sub(free)).unwrap();
        let _ = file.sync_all();
        filler
    }
}

impl Drop for SmallDisk {
    /// Unmounts; lazily when a file on it is still open (a log that failed leaks sled's
    /// handles: its tmpfs goes away when the process ends).
    fn drop(&mut self) {
        let unmounted = Command::new("umount")
            .arg(&self.mount)
            .stderr(std::process::Stdio::null())
            .status();
        if !unmounted.is_ok_and(|s| s.success()) {
            let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
        }
    }
}
