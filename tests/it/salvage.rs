//! Damaged files on disk: a read-only open writes nothing to the database folder, each kind of
//! damage (a deleted `blobs/` folder, a flipped byte in a blob, a flipped byte in sled's snapshot)
//! is an error that names the file (and the seq read, where known), and salvage gets every event
//! that still reads, naming the ranges it could not.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use legio_core::{Event, Record, Seq};
use legio_store::{EventLog, Finding, ReadAround, Salvaged, SledLog, StoreError, StoreOptions};
use legio_tests::*;

/// Every file under `path` with its bytes.
fn contents(path: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(path).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            out.extend(contents(&p));
        } else {
            out.insert(p.clone(), std::fs::read(&p).unwrap());
        }
    }
    out
}

/// A log of 61 events, the 31st of them large enough for sled to keep its node in a blob file,
/// closed, opened and closed again (so that sled wrote a snapshot file).
fn written_log() -> (tempfile::TempDir, PathBuf, Vec<Event>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    // The largest message accepted: over a quarter of sled's 4 MiB segment, so sled writes its
    // page to a blob file.
    let big = "z".repeat(1024 * 1024);
    let events: Vec<Event> = (1..=61)
        .map(|n| {
            let text = if n == 31 {
                big.clone()
            } else {
                format!("m{n}")
            };
            text_message(n, "t:1", "user", "lead", &text)
        })
        .collect();
    {
        let log = SledLog::open(&path, &StoreOptions::default()).unwrap();
        for chunk in events.chunks(10) {
            log.append(chunk.to_vec()).unwrap();
        }
    }
    drop(SledLog::open(&path, &StoreOptions::default()).unwrap());
    (dir, path, events)
}

fn snapshot_file(path: &Path) -> PathBuf {
    std::fs::read_dir(path)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.starts_with("snap.") && !name.ends_with(".generating")
        })
        .expect("sled wrote a snapshot file")
}

fn blob_files(path: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(path.join("blobs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect()
}

fn flip_byte(file: &Path, at: usize) {
    let mut bytes = std::fs::read(file).unwrap();
    let at = at.min(bytes.len() - 1);
    bytes[at] ^= 0x5a;
    std::fs::write(file, bytes).unwrap();
}

/// Salvages the log at `path` (read-only): the records read and the lost ranges.
fn salvage(path: &Path) -> (Vec<Record>, Salvaged) {
    let before = contents(path);
    let mut records = Vec::new();
    let salvaged = SledLog::salvage(path, &StoreOptions::default(), &mut |record| {
        records.push(record);
        ControlFlow::Continue(())
    })
    .unwrap();
    assert!(
        before == contents(path),
        "salvage changed the database folder"
    );
    (records, salvaged)
}

/// Every salvaged record is the event written at its seq, and every seq up to `through` is
/// either salvaged or inside a lost range.
fn check_salvage(events: &[Event], records: &[Record], salvaged: &Salvaged, through: u64) {
    assert_eq!(salvaged.events, records.len() as u64);
    for record in records {
        assert_eq!(&record.event, &events[record.seq.0 as usize - 1]);
    }
    for seq in 1..=through {
        let read = records.iter().any(|r| r.seq == Seq(seq));
        let lost = salvaged
            .lost
            .iter()
            .any(|l| l.from.0 <= seq && l.to.is_none_or(|to| seq <= to.0));
        assert!(read ^ lost, "seq {seq}: read {read}, lost {lost}");
    }
}

#[test]
fn a_read_only_open_and_verify_leave_the_folder_byte_identical() {
    let (_dir, path, events) = written_log();
    // One more append, so that the next open has a newer snapshot to write.
    {
        let log = SledLog::open(&path, &StoreOptions::default()).unwrap();
        log.append(vec![text_message(99, "t:2", "user", "lead", "late")])
            .unwrap();
    }
    let before = contents(&path);
    {
        let log = SledLog::open_read_only(&path, &StoreOptions::default()).unwrap();
        assert_eq!(log.last_seq(), Seq(events.len() as u64 + 1));
        assert!(log.read_around().is_none());
        assert!(log.verify(&mut |_| {}).unwrap().is_clean());
        assert!(matches!(
            log.append(vec![text_message(100, "t:2", "user", "lead", "no")]),
            Err(StoreError::ReadOnly)
        ));
        assert_eq!(log.path(), path.as_path());
    }
    assert!(
        before == contents(&path),
        "a read-only open changed the database folder"
    );
    // A writable open does change it (sled writes its snapshot): the check above can fail.
    drop(SledLog::open(&path, &StoreOptions::default()).unwrap());
    assert!(before != contents(&path));
}

#[test]
fn a_read_only_open_of_a_log_held_by_a_writer_is_refused_as_locked() {
    let (_dir, path, _) = written_log();
    let _writer = SledLog::open(&path, &StoreOptions::default()).unwrap();
    assert!(matches!(
        SledLog::open_read_only(&path, &StoreOptions::default()),
        Err(StoreError::Locked { .. })
    ));
}

#[test]
fn a_deleted_blob_folder_is_named_and_only_the_events_it_held_are_lost() {
    let (_dir, path, events) = written_log();
    std::fs::remove_dir_all(path.join("blobs")).unwrap();
    let blobs = path.join("blobs");
    // A writable open reads the last chunk, which lived in the missing blob.
    let err = SledLog::open(&path, &StoreOptions::default()).unwrap_err();
    assert!(
        matches!(&err, StoreError::Damaged { file, .. } if file == &blobs),
        "{err}"
    );
    assert!(err.to_string().contains("blob"), "{err}");
    std::fs::remove_dir_all(&blobs).ok(); // sled made the folder again on that open
                                          // Read-only, sled reads its log alone: every event but the large one.
    let log = SledLog::open_read_only(&path, &StoreOptions::default()).unwrap();
    match log.read_around() {
        Some(ReadAround::Damage(StoreError::Damaged { file, .. })) => assert_eq!(file, &blobs),
        other => panic!("{other:?}"),
    }
    let report = log.verify(&mut |_| {}).unwrap();
    assert_eq!(
        report.findings[0],
        Finding::Gap {
            from: Seq(31),
            to: Seq(31)
        }
    );
    drop(log);
    let (records, salvaged) = salvage(&path);
    check_salvage(&events, &records, &salvaged, 61);
    assert_eq!(records.len(), 60);
    assert_eq!(salvaged.lost.len(), 1);
    assert_eq!(
        (salvaged.lost[0].from, salvaged.lost[0].to),
        (Seq(31), Some(Seq(31)))
    );
    assert!(matches!(salvaged.read_around, Some(ReadAround::Damage(_))));
}

#[test]
fn a_flipped_byte_in_a_blob_is_named_as_damage_and_salvage_gets_what_sled_reads() {
    let (_dir, path, events) = written_log();
    let blobs = blob_files(&path);
    assert!(!blobs.is_empty(), "the large event went to a blob");
    for blob in &blobs {
        flip_byte(blob, 100_000);
    }
    let err = SledLog::open(&path, &StoreOptions::default()).unwrap_err();
    assert!(
        matches!(&err, StoreError::Damaged { file, .. } if file == &path),
        "{err}"
    );
    assert!(err.to_string().contains("blob file"), "{err}");
    // sled's log alone ends at the damaged blob: what it reads is a clean prefix, and the
    // read-only open says it read around damage.
    let log = SledLog::open_read_only(&path, &StoreOptions::default()).unwrap();
    assert!(matches!(log.read_around(), Some(ReadAround::Damage(_))));
    assert_eq!(log.last_seq(), Seq(30));
    drop(log);
    let (records, salvaged) = salvage(&path);
    check_salvage(&events, &records, &salvaged, 30);
    assert_eq!(records.len(), 30);
    assert!(matches!(salvaged.read_around, Some(ReadAround::Damage(_))));
}

#[test]
fn a_flipped_byte_in_the_snapshot_is_named_and_a_read_only_open_reads_around_it() {
    let (_dir, path, events) = written_log();
    let snapshot = snapshot_file(&path);
    flip_byte(&snapshot, 20);
    let err = SledLog::open(&path, &StoreOptions::default()).unwrap_err();
    assert!(
        matches!(&err, StoreError::Damaged { file, .. } if file == &snapshot),
        "{err}"
    );
    let log = SledLog::open_read_only(&path, &StoreOptions::default()).unwrap();
    assert_eq!(
        log.read_around(),
        Some(&ReadAround::Snapshot(snapshot.clone()))
    );
    assert!(log.verify(&mut |_| {}).unwrap().is_clean());
    drop(log);
    let (records, salvaged) = salvage(&path);
    check_salvage(&events, &records, &salvaged, 61);
    assert_eq!(records.len(), events.len());
    assert!(salvaged.lost.is_empty());
    // The snapshot is only a cache: without it the database opens again, whole.
    std::fs::remove_file(&snapshot).unwrap();
    let log = SledLog::open(&path, &StoreOptions::default()).unwrap();
    assert_eq!(log.last_seq(), Seq(61));
    assert!(log.verify(&mut |_| {}).unwrap().is_clean());
}
