//! Shared memory: directives, shared notes and private notebooks, as events and a projection.
//!
//! Three stores, written only as events of the log and read from the fold of those events
//! ([`MemoryState`]), never from files:
//!
//! - **Directives** (global): standing instructions. The orchestrator publishes and revokes them;
//!   everyone reads them. A revoked directive stays in the projection, marked revoked.
//! - **Shared notes** (global): facts any agent wants others to know. Every agent reads and writes.
//!   A note is addressed by a key the writer chooses: writing an existing key replaces its text (a
//!   new revision; the log keeps every revision, the projection the latest with its author and the
//!   note's first author).
//! - **Private notebooks** (one per specialist): append-only. Only the owner appends and reads; the
//!   orchestrator reads every notebook. The orchestrator has no notebook.
//!
//! Memory is global, not of one conversation, so its events live under the reserved conversation
//! key [`MEMORY_CONVERSATION`] (`legio:memory`): the log's per-conversation index then reads all
//! of memory and nothing else. Who may do what is [`check_permission`]; the pure decision that turns
//! a caller's command into the event to append is [`MemoryState::decide`]. Both answer a broken
//! rule with a [`MemoryError`] value, never a panic.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::event::Event;
use crate::name::AgentName;
use crate::seq::Seq;
use crate::timestamp::Timestamp;

pub use crate::name::{MEMORY_CONVERSATION, RESERVED_CONVERSATION_PREFIX};
/// The largest directive, note or notebook entry, in bytes.
pub const MAX_MEMORY_TEXT_BYTES: usize = 64 * 1024;
/// The longest note key, in bytes.
pub const MAX_NOTE_KEY_LEN: usize = 64;

pub use crate::memory_event::{
    DirectivePublished, DirectiveRevoked, NoteWritten, NotebookEntryAppended,
};

/// Who is calling, with the role that decides its permissions.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Caller {
    /// The orchestrator.
    Orchestrator(AgentName),
    /// A specialist.
    Specialist(AgentName),
}

impl Caller {
    /// The caller's name.
    pub fn name(&self) -> &AgentName {
        match self {
            Self::Orchestrator(n) | Self::Specialist(n) => n,
        }
    }
}

/// One of the three stores (a notebook is named by its owner).
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum MemoryStore {
    /// The directives.
    Directives,
    /// The shared notes.
    Notes,
    /// The notebook of a specialist.
    Notebook(AgentName),
}

/// What a caller wants to do with a store.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MemoryOperation {
    /// List or read.
    Read,
    /// Publish a directive, write a note, append a notebook entry.
    Write,
    /// Revoke a directive (no other store can be revoked from).
    Revoke,
}

/// A memory rule broken by a caller's request: returned to the caller (a model, as a tool error),
/// never a panic.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum MemoryError {
    /// The caller's role does not allow the operation on this store.
    #[error("{caller} may not {action}: {rule}")]
    Forbidden {
        /// The caller.
        caller: String,
        /// What it tried, in words ("publish directives").
        action: String,
        /// The rule, in words.
        rule: &'static str,
    },
    /// No directive has this id.
    #[error("no directive {id:?}; directives: {}", if known.is_empty() { "none".to_owned() } else { known.join(", ") })]
    UnknownDirective {
        /// The id asked for.
        id: String,
        /// The ids that exist.
        known: Vec<String>,
    },
    /// The directive is revoked already.
    #[error("directive {id:?} is already revoked")]
    AlreadyRevoked {
        /// The id.
        id: String,
    },
    /// No note has this key.
    #[error("no note {key:?}; notes: {}", if known.is_empty() { "none".to_owned() } else { known.join(", ") })]
    UnknownNote {
        /// The key asked for.
        key: String,
        /// The keys that exist.
        known: Vec<String>,
    },
    /// A notebook has no entry with this number.
    #[error("the notebook of {owner} has no entry {number} (it has {len})")]
    UnknownEntry {
        /// The notebook's owner.
        owner: String,
        /// The number asked for (1-based).
        number: u64,
        /// How many entries it has.
        len: usize,
    },
    /// Empty text where some is needed.
    #[error("{field} is empty: give some text")]
    Empty {
        /// Which field.
        field: &'static str,
    },
    /// Text longer than [`MAX_MEMORY_TEXT_BYTES`].
    #[error("{field} is {bytes} bytes; the limit is {limit}: shorten it or split it")]
    TooLong {
        /// Which field.
        field: &'static str,
        /// Its size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// A note key of the wrong shape.
    #[error("invalid note key {key:?}: use 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' or '-'")]
    InvalidNoteKey {
        /// The rejected key.
        key: String,
    },
}

/// Whether `caller` may do `operation` on `store`. The whole permission model:
///
/// | store | read | write | revoke |
/// |---|---|---|---|
/// | directives | everyone | orchestrator | orchestrator |
/// | shared notes | everyone | everyone | nobody |
/// | notebook of S | S and the orchestrator | S (append) | nobody (append-only) |
pub fn check_permission(
    caller: &Caller,
    operation: MemoryOperation,
    store: &MemoryStore,
) -> Result<(), MemoryError> {
    let forbidden = |action: String, rule: &'static str| {
        Err(MemoryError::Forbidden {
            caller: caller.name().to_string(),
            action,
            rule,
        })
    };
    use MemoryOperation::{Read, Revoke, Write};
    match (store, operation, caller) {
        (MemoryStore::Directives, Read, _) => Ok(()),
        (MemoryStore::Directives, Write | Revoke, Caller::Orchestrator(_)) => Ok(()),
        (MemoryStore::Directives, Write, Caller::Specialist(_)) => forbidden(
            "publish directives".into(),
            "only the orchestrator publishes directives",
        ),
        (MemoryStore::Directives, Revoke, Caller::Specialist(_)) => forbidden(
            "revoke directives".into(),
            "only the orchestrator revokes directives",
        ),
        (MemoryStore::Notes, Read | Write, _) => Ok(()),
        (MemoryStore::Notes, Revoke, _) => {
            forbidden("revoke notes".into(), "notes are rewritten, not revoked")
        }
        (MemoryStore::Notebook(_), Read, Caller::Orchestrator(_)) => Ok(()),
        (MemoryStore::Notebook(owner), Read, Caller::Specialist(me)) if owner == me => Ok(()),
        (MemoryStore::Notebook(owner), Read, Caller::Specialist(_)) => forbidden(
            format!("read the notebook of {owner}"),
            "a notebook is read only by its owner and the orchestrator",
        ),
        (MemoryStore::Notebook(owner), Write, Caller::Specialist(me)) if owner == me => Ok(()),
        (MemoryStore::Notebook(owner), Write, _) => forbidden(
            format!("write to the notebook of {owner}"),
            "only a specialist writes, and only in its own notebook",
        ),
        (MemoryStore::Notebook(owner), Revoke, _) => forbidden(
            format!("change the notebook of {owner}"),
            "notebooks are append-only",
        ),
    }
}

/// A change a caller asks for. The notebook command names no owner: a caller appends to its own.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum MemoryCommand {
    /// Publish a directive.
    PublishDirective {
        /// Its text.
        text: String,
    },
    /// Revoke a directive.
    RevokeDirective {
        /// Its id.
        id: String,
        /// Why.
        reason: Option<String>,
    },
    /// Write (create or replace) a shared note.
    WriteNote {
        /// Its key.
        key: String,
        /// Its text.
        text: String,
    },
    /// Append an entry to the caller's own notebook.
    AppendNotebook {
        /// The entry.
        text: String,
    },
}

/// A directive in the projection.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Directive {
    /// Its id.
    pub id: String,
    /// Its text.
    pub text: String,
    /// Who published it.
    pub by: AgentName,
    /// When.
    pub at: Timestamp,
    /// The seq of its publication.
    pub seq: Seq,
    /// Set once revoked.
    pub revoked: Option<Revocation>,
}

/// How a directive was revoked.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Revocation {
    /// Who revoked it.
    pub by: AgentName,
    /// When.
    pub at: Timestamp,
    /// Why, if given.
    pub reason: Option<String>,
    /// The seq of the revocation.
    pub seq: Seq,
}

/// A shared note in the projection: its latest revision.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Note {
    /// Its key.
    pub key: String,
    /// The latest text.
    pub text: String,
    /// Who wrote the latest revision.
    pub author: AgentName,
    /// When.
    pub at: Timestamp,
    /// The seq of the latest revision.
    pub seq: Seq,
    /// Who wrote the first revision.
    pub created_by: AgentName,
    /// How many revisions were written (1 for a note written once).
    pub revisions: u64,
}

/// One notebook entry.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct NotebookEntry {
    /// Its number in the notebook, from 1.
    pub number: u64,
    /// Its text.
    pub text: String,
    /// When.
    pub at: Timestamp,
    /// Its seq.
    pub seq: Seq,
}

/// The projection of every memory event: the three stores as they stand.
///
/// The fold is idempotent like the session fold: an event at or below `last_seq` is ignored.
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
pub struct MemoryState {
    /// The last event folded in.
    pub last_seq: Seq,
    /// Every directive ever published, in order of first publication (revoked ones marked).
    pub directives: Vec<Directive>,
    /// The shared notes by key.
    pub notes: BTreeMap<String, Note>,
    /// The notebooks by owner, entries in order.
    pub notebooks: BTreeMap<AgentName, Vec<NotebookEntry>>,
}

impl Event {
    /// Whether the event is one of the memory stores' (and so belongs to [`MEMORY_CONVERSATION`]).
    pub fn is_memory(&self) -> bool {
        matches!(
            self,
            Self::DirectivePublished(_)
                | Self::DirectiveRevoked(_)
                | Self::NoteWritten(_)
                | Self::NotebookEntryAppended(_)
        )
    }
}

fn check_text(field: &'static str, text: &str) -> Result<(), MemoryError> {
    if text.trim().is_empty() {
        return Err(MemoryError::Empty { field });
    }
    if text.len() > MAX_MEMORY_TEXT_BYTES {
        return Err(MemoryError::TooLong {
            field,
            bytes: text.len(),
            limit: MAX_MEMORY_TEXT_BYTES,
        });
    }
    Ok(())
}

/// Validates a note key: 1 to 64 characters of `[A-Za-z0-9._-]`.
pub fn check_note_key(key: &str) -> Result<(), MemoryError> {
    let ok = !key.is_empty()
        && key.len() <= MAX_NOTE_KEY_LEN
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(MemoryError::InvalidNoteKey {
            key: key.to_owned(),
        })
    }
}

impl MemoryState {
    /// The empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Folds `event` at `seq` in. Returns whether it changed anything: false for an event at or
    /// below `last_seq` and for events that are not memory events. A revocation of an unknown
    /// directive changes nothing but `last_seq`; a publication reusing an id replaces that
    /// directive (only an imported log can hold one: [`MemoryState::decide`] never reuses ids).
    pub fn apply(&mut self, seq: Seq, event: &Event) -> bool {
        if seq <= self.last_seq || !event.is_memory() {
            return false;
        }
        self.last_seq = seq;
        match event {
            Event::DirectivePublished(e) => {
                let directive = Directive {
                    id: e.id.clone(),
                    text: e.text.clone(),
                    by: e.by.clone(),
                    at: e.at,
                    seq,
                    revoked: None,
                };
                match self.directives.iter_mut().find(|d| d.id == e.id) {
                    Some(existing) => *existing = directive,
                    None => self.directives.push(directive),
                }
            }
            Event::DirectiveRevoked(e) => {
                if let Some(d) = self.directives.iter_mut().find(|d| d.id == e.id) {
                    if d.revoked.is_none() {
                        d.revoked = Some(Revocation {
                            by: e.by.clone(),
                            at: e.at,
                            reason: e.reason.clone(),
                            seq,
                        });
                    }
                }
            }
            Event::NoteWritten(e) => {
                let note = self.notes.entry(e.key.clone()).or_insert_with(|| Note {
                    key: e.key.clone(),
                    text: String::new(),
                    author: e.author.clone(),
                    at: e.at,
                    seq,
                    created_by: e.author.clone(),
                    revisions: 0,
                });
                note.text = e.text.clone();
                note.author = e.author.clone();
                note.at = e.at;
                note.seq = seq;
                note.revisions += 1;
            }
            Event::NotebookEntryAppended(e) => {
                let entries = self.notebooks.entry(e.owner.clone()).or_default();
                entries.push(NotebookEntry {
                    number: entries.len() as u64 + 1,
                    text: e.text.clone(),
                    at: e.at,
                    seq,
                });
            }
            _ => {}
        }
        true
    }

    /// The directive with `id`.
    pub fn directive(&self, id: &str) -> Result<&Directive, MemoryError> {
        self.directives
            .iter()
            .find(|d| d.id == id)
            .ok_or_else(|| MemoryError::UnknownDirective {
                id: id.to_owned(),
                known: self.directives.iter().map(|d| d.id.clone()).collect(),
            })
    }

    /// The directives in force (not revoked), in order.
    pub fn active_directives(&self) -> impl Iterator<Item = &Directive> {
        self.directives.iter().filter(|d| d.revoked.is_none())
    }

    /// The note with `key`.
    pub fn note(&self, key: &str) -> Result<&Note, MemoryError> {
        self.notes.get(key).ok_or_else(|| MemoryError::UnknownNote {
            key: key.to_owned(),
            known: self.notes.keys().cloned().collect(),
        })
    }

    /// The notebook of `owner` as `caller` may read it (empty if it has no entry yet).
    pub fn notebook(
        &self,
        caller: &Caller,
        owner: &AgentName,
    ) -> Result<&[NotebookEntry], MemoryError> {
        check_permission(
            caller,
            MemoryOperation::Read,
            &MemoryStore::Notebook(owner.clone()),
        )?;
        Ok(self.notebooks.get(owner).map_or(&[], Vec::as_slice))
    }

    /// Entry `number` (from 1) of the notebook of `owner`, as `caller` may read it.
    pub fn notebook_entry(
        &self,
        caller: &Caller,
        owner: &AgentName,
        number: u64,
    ) -> Result<&NotebookEntry, MemoryError> {
        let entries = self.notebook(caller, owner)?;
        usize::try_from(number)
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| entries.get(i))
            .ok_or_else(|| MemoryError::UnknownEntry {
                owner: owner.to_string(),
                number,
                len: entries.len(),
            })
    }

    /// The id the next published directive gets: `d<N>` for the first unused N from the count + 1.
    fn next_directive_id(&self) -> String {
        let mut n = self.directives.len() + 1;
        loop {
            let id = format!("d{n}");
            if self.directives.iter().all(|d| d.id != id) {
                return id;
            }
            n += 1;
        }
    }

    /// Decides the event `command` by `caller` appends at `at`, or why it may not.
    pub fn decide(
        &self,
        caller: &Caller,
        command: MemoryCommand,
        at: Timestamp,
    ) -> Result<Event, MemoryError> {
        let by = caller.name().clone();
        match command {
            MemoryCommand::PublishDirective { text } => {
                check_permission(caller, MemoryOperation::Write, &MemoryStore::Directives)?;
                check_text("the directive", &text)?;
                Ok(Event::DirectivePublished(DirectivePublished {
                    id: self.next_directive_id(),
                    by,
                    at,
                    text,
                }))
            }
            MemoryCommand::RevokeDirective { id, reason } => {
                check_permission(caller, MemoryOperation::Revoke, &MemoryStore::Directives)?;
                if self.directive(&id)?.revoked.is_some() {
                    return Err(MemoryError::AlreadyRevoked { id });
                }
                let reason = reason.filter(|r| !r.trim().is_empty());
                if let Some(r) = &reason {
                    check_text("the reason", r)?;
                }
                Ok(Event::DirectiveRevoked(DirectiveRevoked {
                    id,
                    by,
                    at,
                    reason,
                }))
            }
            MemoryCommand::WriteNote { key, text } => {
                check_permission(caller, MemoryOperation::Write, &MemoryStore::Notes)?;
                check_note_key(&key)?;
                check_text("the note", &text)?;
                Ok(Event::NoteWritten(NoteWritten {
                    key,
                    author: by,
                    at,
                    text,
                }))
            }
            MemoryCommand::AppendNotebook { text } => {
                check_permission(
                    caller,
                    MemoryOperation::Write,
                    &MemoryStore::Notebook(by.clone()),
                )?;
                check_text("the notebook entry", &text)?;
                Ok(Event::NotebookEntryAppended(NotebookEntryAppended {
                    owner: by,
                    at,
                    text,
                }))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{agent, ts};

    fn lead() -> Caller {
        Caller::Orchestrator(agent("lead"))
    }
    fn ann() -> Caller {
        Caller::Specialist(agent("ann"))
    }
    fn bob() -> Caller {
        Caller::Specialist(agent("bob"))
    }

    /// One row of the permission table: caller, operation, store, allowed.
    fn check(caller: Caller, op: MemoryOperation, store: MemoryStore, allowed: bool) {
        let result = check_permission(&caller, op, &store);
        assert_eq!(
            result.is_ok(),
            allowed,
            "{caller:?} {op:?} {store:?}: {result:?}"
        );
        if let Err(e) = result {
            assert!(matches!(e, MemoryError::Forbidden { .. }), "{e}");
        }
    }

    #[test]
    fn the_permission_table() {
        use MemoryOperation::{Read, Revoke, Write};
        let ann_book = || MemoryStore::Notebook(agent("ann"));
        for (caller, op, store, allowed) in [
            (lead(), Read, MemoryStore::Directives, true),
            (lead(), Write, MemoryStore::Directives, true),
            (lead(), Revoke, MemoryStore::Directives, true),
            (ann(), Read, MemoryStore::Directives, true),
            (ann(), Write, MemoryStore::Directives, false),
            (ann(), Revoke, MemoryStore::Directives, false),
            (lead(), Read, MemoryStore::Notes, true),
            (lead(), Write, MemoryStore::Notes, true),
            (ann(), Read, MemoryStore::Notes, true),
            (ann(), Write, MemoryStore::Notes, true),
            (ann(), Revoke, MemoryStore::Notes, false),
            (ann(), Read, ann_book(), true),
            (ann(), Write, ann_book(), true),
            (ann(), Revoke, ann_book(), false),
            (bob(), Read, ann_book(), false),
            (bob(), Write, ann_book(), false),
            (lead(), Read, ann_book(), true),
            (lead(), Write, ann_book(), false),
            (lead(), Write, MemoryStore::Notebook(agent("lead")), false),
        ] {
            check(caller, op, store, allowed);
        }
    }

    fn run(
        state: &mut MemoryState,
        caller: &Caller,
        command: MemoryCommand,
    ) -> Result<Event, MemoryError> {
        let event = state.decide(caller, command, ts(state.last_seq.0 as i64))?;
        let seq = state.last_seq.next();
        assert!(state.apply(seq, &event));
        Ok(event)
    }

    #[test]
    fn directives_are_published_with_fresh_ids_and_revoked_once() {
        let mut s = MemoryState::new();
        let publish = |text: &str| MemoryCommand::PublishDirective { text: text.into() };
        run(&mut s, &lead(), publish("ship at noon")).unwrap();
        run(&mut s, &lead(), publish("no force pushes")).unwrap();
        let err = run(&mut s, &ann(), publish("mine")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "ann may not publish directives: only the orchestrator publishes directives"
        );
        let revoke = |id: &str| MemoryCommand::RevokeDirective {
            id: id.into(),
            reason: Some("done".into()),
        };
        assert!(run(&mut s, &ann(), revoke("d1")).is_err());
        run(&mut s, &lead(), revoke("d1")).unwrap();
        assert_eq!(
            run(&mut s, &lead(), revoke("d1")).unwrap_err(),
            MemoryError::AlreadyRevoked { id: "d1".into() }
        );
        assert!(matches!(
            run(&mut s, &lead(), revoke("d9")).unwrap_err(),
            MemoryError::UnknownDirective { .. }
        ));
        let active: Vec<&str> = s.active_directives().map(|d| d.id.as_str()).collect();
        assert_eq!(active, ["d2"]);
        run(&mut s, &lead(), publish("third")).unwrap();
        assert_eq!(s.directives[2].id, "d3");
        assert_eq!(
            s.directive("d1")
                .unwrap()
                .revoked
                .as_ref()
                .unwrap()
                .reason
                .as_deref(),
            Some("done")
        );
    }

    #[test]
    fn notes_are_rewritten_by_key_with_their_authors() {
        let mut s = MemoryState::new();
        let write = |key: &str, text: &str| MemoryCommand::WriteNote {
            key: key.into(),
            text: text.into(),
        };
        run(&mut s, &ann(), write("api", "v1")).unwrap();
        run(&mut s, &bob(), write("api", "v2")).unwrap();
        let note = s.note("api").unwrap();
        assert_eq!((note.text.as_str(), note.revisions), ("v2", 2));
        assert_eq!(
            (note.author.as_str(), note.created_by.as_str()),
            ("bob", "ann")
        );
        assert!(matches!(
            run(&mut s, &ann(), write("bad key", "x")).unwrap_err(),
            MemoryError::InvalidNoteKey { .. }
        ));
        assert_eq!(
            run(&mut s, &ann(), write("k", "  ")).unwrap_err(),
            MemoryError::Empty { field: "the note" }
        );
        let long = "x".repeat(MAX_MEMORY_TEXT_BYTES + 1);
        assert!(matches!(
            run(&mut s, &ann(), write("k", &long)).unwrap_err(),
            MemoryError::TooLong { .. }
        ));
        assert!(matches!(
            s.note("nope").unwrap_err(),
            MemoryError::UnknownNote { .. }
        ));
    }

    #[test]
    fn notebooks_are_private_and_append_only() {
        let mut s = MemoryState::new();
        let append = |text: &str| MemoryCommand::AppendNotebook { text: text.into() };
        run(&mut s, &ann(), append("first")).unwrap();
        run(&mut s, &ann(), append("second")).unwrap();
        assert!(run(&mut s, &lead(), append("the lead has none")).is_err());
        let ann_name = agent("ann");
        let texts = |c: &Caller| -> Result<Vec<String>, MemoryError> {
            Ok(s.notebook(c, &ann_name)?
                .iter()
                .map(|e| e.text.clone())
                .collect())
        };
        assert_eq!(texts(&ann()).unwrap(), ["first", "second"]);
        assert_eq!(texts(&lead()).unwrap(), ["first", "second"]);
        assert!(texts(&bob()).is_err());
        assert_eq!(
            s.notebook_entry(&ann(), &ann_name, 2).unwrap().text,
            "second"
        );
        assert!(matches!(
            s.notebook_entry(&ann(), &ann_name, 3).unwrap_err(),
            MemoryError::UnknownEntry { len: 2, .. }
        ));
        assert!(s.notebook_entry(&ann(), &ann_name, 0).is_err());
        assert!(s.notebook(&bob(), &agent("bob")).unwrap().is_empty());
    }

    #[test]
    fn the_fold_is_idempotent_and_ignores_other_events() {
        let mut s = MemoryState::new();
        let e = s
            .decide(
                &ann(),
                MemoryCommand::AppendNotebook { text: "x".into() },
                ts(1),
            )
            .unwrap();
        assert!(s.apply(Seq(5), &e));
        let once = s.clone();
        assert!(!s.apply(Seq(5), &e), "the same seq again");
        assert!(!s.apply(Seq(3), &e), "an older seq");
        assert_eq!(s, once);
        let message = Event::MessagePosted(crate::test_support::message(1, "user", "all", "hi"));
        assert!(!s.apply(Seq(6), &message));
        assert_eq!(s, once);
        assert!(e.is_memory() && !message.is_memory());
        assert_eq!(e.conversation().as_str(), MEMORY_CONVERSATION);
    }
}
