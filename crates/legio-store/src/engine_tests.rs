//! The list overlay while a list write is in progress or has failed: reads stay exact, and the
//! items of a failed write stay readable and are written by the next one. A backend over the
//! in-memory one holds a list write at a gate, or fails it, on request.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use legio_core::{AgentName, Seq, Viewer};
use legio_core::{Audience, ConversationKey, Event, Participant};

use super::{Engine, Limits};
use crate::backend::{Backend, Direction, TreeId, Visitor, WriteSet};
use crate::error::{Result, StoreError};
use crate::memory::MemoryBackend;
use crate::test_events::text_event;

/// A list write's gate: it says it has arrived, then waits to be let through.
type Gate = (mpsc::Sender<()>, mpsc::Receiver<()>);

#[derive(Default)]
struct Gated {
    inner: MemoryBackend,
    fail_lists: AtomicBool,
    gate: Mutex<Option<Gate>>,
}

impl Backend for Gated {
    type Value = Arc<[u8]>;

    fn get(&self, tree: TreeId, key: &[u8]) -> Result<Option<Self::Value>> {
        self.inner.get(tree, key)
    }

    fn floor(
        &self,
        tree: TreeId,
        prefix: &[u8],
        key: &[u8],
    ) -> Result<Option<(Vec<u8>, Self::Value)>> {
        self.inner.floor(tree, prefix, key)
    }

    fn scan(
        &self,
        tree: TreeId,
        start: &[u8],
        end: Option<&[u8]>,
        direction: Direction,
        visit: &mut Visitor<'_>,
    ) -> Result<()> {
        self.inner.scan(tree, start, end, direction, visit)
    }

    fn last(&self, tree: TreeId) -> Result<Option<(Vec<u8>, Self::Value)>> {
        self.inner.last(tree)
    }

    fn apply(&self, writes: WriteSet) -> Result<()> {
        if writes.indexed.is_some() {
            if self.fail_lists.swap(false, Ordering::SeqCst) {
                return Err(StoreError::io("writing list entries", "injected failure"));
            }
            if let Some((arrived, go)) = self.gate.lock().unwrap().take() {
                arrived.send(()).unwrap();
                go.recv().unwrap();
            }
        }
        self.inner.apply(writes)
    }

    fn size_on_disk(&self) -> Result<u64> {
        Ok(0)
    }
}

fn conv() -> ConversationKey {
    ConversationKey::new("t:overlay").unwrap()
}

/// Message `n`: to everyone when `n` is even, otherwise only to the agent `vorenus`.
fn message(n: u64) -> Event {
    let audience = if n.is_multiple_of(2) {
        Audience::All
    } else {
        Audience::only([Participant::parse("vorenus").unwrap()])
    };
    text_event(n, conv(), audience)
}

/// Appends messages `from..=to`, one group each, and acknowledges them.
fn append(engine: &Engine<Gated>, from: u64, to: u64) {
    for n in from..=to {
        let encoded = engine.encode_batch(vec![message(n)]).unwrap();
        let (ranges, _) = engine.apply_group(vec![encoded]).unwrap();
        engine.publish(ranges[0].last);
    }
}

/// The seqs of the conversation's events, and of the messages `titus` (everyone's only) sees.
fn reads(engine: &Engine<Gated>) -> (Vec<u64>, Vec<u64>) {
    let all = engine
        .conversation_events(&conv(), Seq::ZERO, 1000)
        .unwrap();
    let titus = AgentName::new("titus").unwrap();
    let seen = engine
        .visible_after(&conv(), Viewer::Specialist(&titus), Seq::ZERO, 1000)
        .unwrap();
    (
        all.iter().map(|r| r.seq.0).collect(),
        seen.iter().map(|r| r.seq.0).collect(),
    )
}

fn expected(to: u64) -> (Vec<u64>, Vec<u64>) {
    (
        (1..=to).collect(),
        (1..=to).filter(|n| n % 2 == 0).collect(),
    )
}

fn limits() -> Limits {
    Limits {
        max_message_bytes: 1 << 20,
    }
}

#[test]
fn reads_during_a_list_write_see_its_items_and_the_groups_applied_meanwhile() {
    let engine = Arc::new(Engine::open(Gated::default(), limits()).unwrap());
    append(&engine, 1, 10);
    engine.flush_lists().unwrap();
    append(&engine, 11, 20);
    let (arrived, wait_arrival) = mpsc::channel();
    let (go, wait_go) = mpsc::channel();
    *engine.backend.gate.lock().unwrap() = Some((arrived, wait_go));
    let writer = {
        let engine = Arc::clone(&engine);
        std::thread::spawn(move || engine.flush_lists())
    };
    wait_arrival.recv().unwrap();
    // The write holds 11..=20 aside, unwritten: groups go on and reads see every seq.
    append(&engine, 21, 25);
    assert_eq!(reads(&engine), expected(25));
    assert_eq!(engine.conversations().unwrap(), vec![conv()]);
    go.send(()).unwrap();
    writer.join().unwrap().unwrap();
    assert_eq!(reads(&engine), expected(25));
    engine.flush_lists().unwrap();
    assert!(!engine.lists_pending());
    assert_eq!(reads(&engine), expected(25));
}

#[test]
fn a_failed_list_write_keeps_its_items_readable_and_the_next_write_stores_them() {
    let engine = Engine::open(Gated::default(), limits()).unwrap();
    append(&engine, 1, 10);
    engine.flush_lists().unwrap();
    append(&engine, 11, 20);
    engine.backend.fail_lists.store(true, Ordering::SeqCst);
    assert!(engine.flush_lists().is_err());
    assert!(engine.lists_pending());
    assert_eq!(reads(&engine), expected(20));
    append(&engine, 21, 25);
    assert_eq!(reads(&engine), expected(25));
    engine.flush_lists().unwrap();
    assert!(!engine.lists_pending());
    assert_eq!(reads(&engine), expected(25));
    // Stored, not only held: a log opened on the same data reads every seq from its entries.
    let reopened = Engine::open(engine.backend, limits()).unwrap();
    assert_eq!(reads(&reopened), expected(25));
}
