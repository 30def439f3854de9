//! The migration of a layout-v1 log to layout v2, run by `SledLog::open` before the log serves.
//!
//! v1 kept one sled key per event (`events`) and per index entry (`by_conv`, `visible`); v2 packs
//! them into chunks and lists (`layout.rs`). The event records themselves are the same bytes in
//! both. Crash safety: the `meta/format` marker is written only after every chunk, list and
//! session state of v2 is durable, and the v1 trees are dropped only after the marker is durable.
//! An open that finds no marker but v1 events clears whatever v2 entries a stopped migration left
//! and starts again; one that finds the marker and leftover v1 trees drops them.

use legio_core::Seq;

use crate::backend::{Backend, TreeId, WriteSet};
use crate::codec::decode_event;
use crate::error::{Result, StoreError};
use crate::group::{self, GroupIndex, States};
use crate::keys;
use crate::layout::LAYOUT_VERSION;
use crate::sled_backend::{sled_err, SledBackend};

/// The trees of layout v1 (their key layouts are in `docs/storage.md`).
const V1_TREES: [&str; 3] = ["events", "by_conv", "visible"];

/// Events per group written by the migration (the committer's largest group).
const GROUP_EVENTS: usize = 4096;

/// Progress of a migration.
#[derive(Clone, Copy, Debug)]
pub struct MigrateProgress {
    /// Events rewritten so far.
    pub done: u64,
    /// Events to rewrite.
    pub total: u64,
}

/// What opening a log did to its stored layout.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Migration {
    /// The layout found (1 or 2).
    pub from: u8,
    /// The layout the log is in now.
    pub to: u8,
    /// Events rewritten (0 when `from == to`).
    pub events: u64,
}

/// Brings the database to layout v2: marks a fresh one, migrates a v1 one.
pub(crate) fn run(
    backend: &SledBackend,
    progress: &mut dyn FnMut(MigrateProgress),
) -> Result<Migration> {
    let unchanged = Migration {
        from: LAYOUT_VERSION,
        to: LAYOUT_VERSION,
        events: 0,
    };
    match backend.get(TreeId::Meta, keys::META_FORMAT)? {
        Some(v) if v.as_ref() == [LAYOUT_VERSION] => {
            drop_v1_trees(backend)?;
            return Ok(unchanged);
        }
        Some(v) => {
            return Err(StoreError::UnknownFormatVersion {
                seq: Seq::ZERO,
                version: v.first().copied().unwrap_or(0),
                known: LAYOUT_VERSION,
            })
        }
        None => {}
    }
    let events = v1_events(backend)?;
    let migrated = match events {
        Some(events) if !events.is_empty() => migrate(backend, &events, progress)?,
        _ => 0,
    };
    mark_v2(backend)?;
    drop_v1_trees(backend)?;
    if migrated == 0 {
        return Ok(unchanged);
    }
    tracing::info!(events = migrated, "migrated the log from layout v1 to v2");
    Ok(Migration {
        from: 1,
        to: LAYOUT_VERSION,
        events: migrated,
    })
}

fn v1_events(backend: &SledBackend) -> Result<Option<sled::Tree>> {
    let exists = backend
        .db()
        .tree_names()
        .iter()
        .any(|name| name.as_ref() == V1_TREES[0].as_bytes());
    if !exists {
        return Ok(None);
    }
    let tree = backend.db().open_tree(V1_TREES[0]);
    tree.map(Some).map_err(sled_err("opening the v1 events"))
}

/// Rewrites every v1 event into v2 groups; returns how many.
fn migrate(
    backend: &SledBackend,
    events: &sled::Tree,
    progress: &mut dyn FnMut(MigrateProgress),
) -> Result<u64> {
    let _span = tracing::info_span!("migrate").entered();
    for tree in [TreeId::Chunks, TreeId::Lists] {
        backend.tree(tree).clear().map_err(sled_err("clearing"))?;
    }
    let total = match events.last().map_err(sled_err("reading v1"))? {
        Some((key, _)) => keys::seq_suffix(&key).unwrap_or(Seq::ZERO).0,
        None => 0,
    };
    let mut states = States::new();
    let mut group: Vec<sled::IVec> = Vec::with_capacity(GROUP_EVENTS);
    let mut next = Seq::FIRST;
    for item in events.iter() {
        let (key, value) = item.map_err(sled_err("reading v1"))?;
        let seq = keys::seq_suffix(&key).filter(|_| key.len() == 8);
        if seq != Some(next) {
            return Err(StoreError::Corrupt {
                what: "the v1 log".into(),
                reason: format!(
                    "seq {next} is missing, so it cannot be migrated; run `legio verify` with the previous legio release"
                ),
            });
        }
        next = next.next();
        group.push(value);
        if group.len() == GROUP_EVENTS {
            write_group(
                backend,
                Seq(next.0 - group.len() as u64),
                &group,
                &mut states,
            )?;
            group.clear();
            progress(MigrateProgress {
                done: next.0 - 1,
                total,
            });
        }
    }
    if !group.is_empty() {
        write_group(
            backend,
            Seq(next.0 - group.len() as u64),
            &group,
            &mut states,
        )?;
    }
    let last = Seq(next.0 - 1);
    let mut ws = WriteSet::default();
    group::put_states_and_watermark(&mut ws, &states, last)?;
    backend.apply(ws)?;
    backend.sync()?;
    progress(MigrateProgress {
        done: last.0,
        total,
    });
    Ok(last.0)
}

/// Writes one v2 group of v1 records starting at `first`; session states are folded from
/// scratch (v1's stored states are not trusted, they are re-derived).
fn write_group(
    backend: &SledBackend,
    first: Seq,
    records: &[sled::IVec],
    states: &mut States,
) -> Result<()> {
    let mut index = GroupIndex::default();
    for (i, record) in records.iter().enumerate() {
        let seq = Seq(first.0 + i as u64);
        // An undecodable record is copied as it is; `verify` reports it, as v1 did.
        if let Ok(event) = decode_event(seq, record) {
            index.add(seq, &event);
            group::fold_state(states, seq, &event, &mut |_| Ok(None))?;
        }
    }
    let mut ws = WriteSet::default();
    let slices: Vec<&[u8]> = records.iter().map(|r| r.as_ref()).collect();
    group::put_chunks(&mut ws, first, &slices);
    group::put_lists(&mut ws, &index);
    backend.apply(ws)
}

fn mark_v2(backend: &SledBackend) -> Result<()> {
    let mut ws = WriteSet::default();
    ws.put(
        TreeId::Meta,
        keys::META_FORMAT.to_vec(),
        vec![LAYOUT_VERSION],
    );
    backend.apply(ws)?;
    backend.sync()
}

fn drop_v1_trees(backend: &SledBackend) -> Result<()> {
    let names = backend.db().tree_names();
    let mut dropped = false;
    for name in V1_TREES {
        if names.iter().any(|n| n.as_ref() == name.as_bytes()) {
            backend
                .db()
                .drop_tree(name)
                .map_err(sled_err("dropping a v1 tree"))?;
            dropped = true;
        }
    }
    if dropped {
        backend.sync()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::encode_event;
    use crate::test_events::text_event;
    use crate::{EventLog, SledLog, StoreOptions};
    use legio_core::{Audience, ConversationKey, Event, Participant};

    fn message(n: u64) -> Event {
        let audience = if n.is_multiple_of(3) {
            Audience::All
        } else {
            Audience::only([Participant::parse("vorenus").unwrap()])
        };
        text_event(
            n,
            ConversationKey::new(format!("t:{}", n % 2)).unwrap(),
            audience,
        )
    }

    /// A v1 database as the v1 build laid it out (events only: indexes are re-derived anyway),
    /// plus whatever `extra` leaves behind, as a stopped migration would.
    fn v1_database(path: &std::path::Path, events: u64, extra: impl FnOnce(&sled::Db)) {
        let db = sled::open(path).unwrap();
        let tree = db.open_tree(V1_TREES[0]).unwrap();
        for n in 1..=events {
            tree.insert(n.to_be_bytes(), encode_event(&message(n)).unwrap())
                .unwrap();
        }
        db.open_tree(V1_TREES[1]).unwrap();
        extra(&db);
        db.flush().unwrap();
    }

    /// sled's own threads can hold the lock a moment after the last handle is dropped.
    fn open_raw(path: &std::path::Path) -> sled::Db {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match sled::open(path) {
                Ok(db) => return db,
                Err(e) if std::time::Instant::now() < deadline => {
                    assert!(e.to_string().contains("lock"), "{e}");
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(e) => panic!("{e}"),
            }
        }
    }

    fn check_migrated(path: &std::path::Path, events: u64) {
        let log = SledLog::open(path, &StoreOptions::default()).unwrap();
        assert_eq!(log.migration().from, 1);
        assert_eq!(log.migration().events, events);
        let back = log.read_range(Seq(1), Seq(u64::MAX), usize::MAX).unwrap();
        let want: Vec<Event> = (1..=events).map(message).collect();
        assert_eq!(back.into_iter().map(|r| r.event).collect::<Vec<_>>(), want);
        assert!(log.verify(&mut |_| {}).unwrap().is_clean());
        drop(log);
        let log = SledLog::open(path, &StoreOptions::default()).unwrap();
        assert_eq!(log.migration().from, LAYOUT_VERSION);
        assert_eq!(log.last_seq(), Seq(events));
    }

    #[test]
    fn a_stopped_migration_starts_again_from_scratch() {
        let dir = tempfile::tempdir().unwrap();
        v1_database(dir.path(), 5000, |db| {
            // A stopped migration: some v2 entries written, no marker.
            let chunks = db.open_tree(TreeId::Chunks.name()).unwrap();
            chunks
                .insert(Seq(1).0.to_be_bytes(), &b"half written"[..])
                .unwrap();
            let lists = db.open_tree(TreeId::Lists.name()).unwrap();
            lists
                .insert(&b"\x03t:9\x00junk0000"[..], &b"junk"[..])
                .unwrap();
        });
        check_migrated(dir.path(), 5000);
    }

    #[test]
    fn leftover_v1_trees_after_the_marker_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        v1_database(dir.path(), 10, |_| {});
        check_migrated(dir.path(), 10);
        {
            let db = open_raw(dir.path());
            // The crash came after the marker, before the v1 trees were dropped.
            db.open_tree(V1_TREES[2])
                .unwrap()
                .insert(b"k", b"v")
                .unwrap();
            db.flush().unwrap();
        }
        let log = SledLog::open(dir.path(), &StoreOptions::default()).unwrap();
        assert_eq!(log.migration().from, LAYOUT_VERSION);
        assert_eq!(log.last_seq(), Seq(10));
        drop(log);
        let db = open_raw(dir.path());
        assert!(!db
            .tree_names()
            .iter()
            .any(|n| n.as_ref() == V1_TREES[2].as_bytes()));
    }

    #[test]
    fn a_v1_log_with_a_gap_is_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        v1_database(dir.path(), 10, |db| {
            db.open_tree(V1_TREES[0])
                .unwrap()
                .remove(4u64.to_be_bytes())
                .unwrap();
        });
        let err = SledLog::open(dir.path(), &StoreOptions::default()).unwrap_err();
        assert!(err.to_string().contains("seq 4 is missing"), "{err}");
        let db = open_raw(dir.path());
        assert_eq!(
            db.open_tree(V1_TREES[0]).unwrap().len(),
            9,
            "v1 left as it was"
        );
    }
}
