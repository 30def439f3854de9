//! The durable log under storage faults: a disk that fills during an open, and recovery once
//! space is back. Needs a small tmpfs (mounting needs root); skipped with a message without it.

use std::path::{Path, PathBuf};
use std::process::Command;

use legio_core::Seq;
use legio_store::{EventLog, SledLog, StoreOptions};
use legio_tests::*;

/// A small tmpfs mounted for one test, unmounted when dropped.
struct SmallDisk {
    _dir: tempfile::TempDir,
    mount: PathBuf,
}

impl SmallDisk {
    /// Mounts a tmpfs of `megabytes`, or `None` (with a message) where mounting is not permitted.
    fn mount(megabytes: u32) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let mount = dir.path().join("disk");
        std::fs::create_dir(&mount).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={megabytes}m"), "tmpfs"])
            .arg(&mount)
            .output();
        match status {
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

    fn path(&self) -> &Path {
        &self.mount
    }

    /// Fills the disk with one file until writing fails; returns the file.
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let filler = self.mount.join("filler");
        let mut file = std::fs::File::create(&filler).unwrap();
        let block = vec![0u8; 64 * 1024];
        while file.write_all(&block).is_ok() {}
        // Smaller writes take the last pages.
        while file.write_all(&block[..512]).is_ok() {}
        let _ = file.sync_all();
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount).status();
    }
}

#[test]
fn a_full_disk_during_an_open_leaves_the_log_openable_once_space_is_back() {
    let Some(disk) = SmallDisk::mount(16) else {
        return;
    };
    let path = disk.path().join("db");
    let mut gen = TrafficGen::new(5, 4, 2, 3, 200);
    {
        let log = SledLog::open(&path, &StoreOptions::default()).unwrap();
        for _ in 0..10 {
            log.append((0..100).map(|_| gen.next_message()).collect())
                .unwrap();
        }
    }
    // Opens while the disk is full or nearly full (what a read-only `verify` does) may fail,
    // but must not damage the log: leave a few sizes of free space, each after a write so that
    // sled has a newer snapshot to write on open.
    for slack in [0u64, 512, 4096, 16 * 1024, 64 * 1024] {
        {
            let log = SledLog::open(&path, &StoreOptions::default()).unwrap();
            log.append(vec![gen.next_message()]).unwrap();
        }
        let filler = disk.fill();
        let len = std::fs::metadata(&filler).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&filler)
            .unwrap()
            .set_len(len - slack)
            .unwrap();
        if let Ok(log) = SledLog::open(&path, &StoreOptions::default()) {
            log.verify(&mut |_| {}).unwrap();
        }
        std::fs::remove_file(filler).unwrap();
    }
    let log =
        SledLog::open(&path, &StoreOptions::default()).expect("the log opens once space is back");
    assert_eq!(log.last_seq(), Seq(1005));
    assert!(log.verify(&mut |_| {}).unwrap().is_clean());
    log.append(vec![gen.next_message()]).unwrap();
}
