//! The durable log under storage faults: a disk that fills during an open, and recovery once
//! space is back. Needs a small tmpfs (mounting needs root); skipped with a message without it.

use legio_core::Seq;
use legio_store::{EventLog, SledLog, StoreOptions};
use legio_tests::*;

#[path = "../support/small_disk.rs"]
mod small_disk;
use small_disk::SmallDisk;

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
        let filler = disk.fill_leaving(slack);
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
