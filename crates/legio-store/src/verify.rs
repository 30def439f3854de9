//! `verify`: walks the log and its indexes and reports gaps, undecodable records, index entries
//! that disagree with the events, session states that disagree with a fresh fold, and replies to
//! unknown messages. It reports; it never panics and never repairs.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::ops::ControlFlow;

use legio_core::{Event, MessageId, Seq};

use crate::backend::{Backend, Direction, TreeId};
use crate::codec::{decode_event, decode_state};
use crate::engine::Engine;
use crate::error::Result;
use crate::group::{self, GroupIndex, States};
use crate::keys;
use crate::layout::{decode_list, Chunk, ListItems};
use crate::metrics as m;

/// At most this many findings are kept in a report; the rest are only counted.
pub const MAX_FINDINGS: usize = 1000;

/// Progress of a verify walk.
#[derive(Clone, Copy, Debug)]
pub struct VerifyProgress {
    /// Events walked so far.
    pub done: u64,
    /// Events to walk.
    pub total: u64,
}

/// One problem found by `verify`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Finding {
    /// Seqs missing between two stored events (or before the first).
    Gap {
        /// The first missing seq.
        from: Seq,
        /// The last missing seq.
        to: Seq,
    },
    /// A record that does not decode.
    Undecodable {
        /// Where.
        seq: Seq,
        /// What the decoder said.
        reason: String,
    },
    /// An index entry the event calls for is absent.
    MissingIndexEntry {
        /// The index: `by_conv` (the conversation list) or `visible` (a visibility list, or the
        /// message flag of the conversation list).
        index: &'static str,
        /// The event.
        seq: Seq,
    },
    /// An index entry that no event calls for.
    StrayIndexEntry {
        /// The index: `by_conv` or `visible`, as for `MissingIndexEntry`.
        index: &'static str,
        /// The seq the entry names.
        seq: Seq,
    },
    /// A stored session state that differs from the fold of the events.
    SessionStateMismatch {
        /// Conversation and agent.
        who: String,
    },
    /// A message whose `reply_to` names no earlier message.
    ReplyToUnknown {
        /// The reply.
        seq: Seq,
        /// The id it answers.
        reply_to: MessageId,
    },
    /// An event that names a seq after its own (a delivery up to a message not yet posted): an
    /// edited or badly imported log.
    SeqNamedAhead {
        /// The event.
        seq: Seq,
        /// The seq it names.
        named: Seq,
    },
    /// Two messages with the same id.
    DuplicateMessageId {
        /// The second one.
        seq: Seq,
        /// The id.
        id: MessageId,
    },
    /// Events the index watermark says were stored, after the last event that reads: a damaged
    /// file (sled drops a page it cannot read, such as one whose blob is damaged) hides them.
    HiddenEvents {
        /// The first hidden seq.
        from: Seq,
        /// The watermark: the last seq stored.
        to: Seq,
    },
    /// The index watermark disagrees with the log.
    Watermark {
        /// The watermark.
        indexed_through: Seq,
        /// The last event.
        last: Seq,
    },
}

impl Finding {
    /// A stable word for the kind of problem.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Gap { .. } => "gap",
            Self::Undecodable { .. } => "undecodable",
            Self::MissingIndexEntry { .. } => "missing_index_entry",
            Self::StrayIndexEntry { .. } => "stray_index_entry",
            Self::SessionStateMismatch { .. } => "session_state_mismatch",
            Self::ReplyToUnknown { .. } => "reply_to_unknown",
            Self::DuplicateMessageId { .. } => "duplicate_message_id",
            Self::SeqNamedAhead { .. } => "seq_named_ahead",
            Self::HiddenEvents { .. } => "hidden_events",
            Self::Watermark { .. } => "watermark",
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Gap { from, to } if from == to => write!(f, "gap: seq {from} is missing"),
            Self::Gap { from, to } => write!(f, "gap: seqs {from} to {to} are missing"),
            Self::Undecodable { seq, reason } => {
                write!(f, "undecodable record at seq {seq}: {reason}")
            }
            Self::MissingIndexEntry { index, seq } => {
                write!(f, "index {index} lacks the entry for seq {seq}")
            }
            Self::StrayIndexEntry { index, seq } => write!(
                f,
                "index {index} has an entry for seq {seq} that no event calls for"
            ),
            Self::SessionStateMismatch { who } => {
                write!(f, "session state of {who} differs from the events")
            }
            Self::ReplyToUnknown { seq, reply_to } => write!(
                f,
                "message at seq {seq} replies to unknown message {reply_to}"
            ),
            Self::DuplicateMessageId { seq, id } => {
                write!(f, "message at seq {seq} reuses id {id}")
            }
            Self::SeqNamedAhead { seq, named } => {
                write!(f, "the event at seq {seq} names seq {named}, after itself")
            }
            Self::HiddenEvents { from, to } => write!(
                f,
                "seqs {from} to {to} were stored (the index watermark says so) but do not read: a \
                 damaged file hides them; `legio export --salvage` gets every event that reads"
            ),
            Self::Watermark {
                indexed_through,
                last,
            } => {
                write!(
                    f,
                    "index watermark {indexed_through} disagrees with the last event {last}"
                )
            }
        }
    }
}

/// Reports each seq `event` (at `seq`) names after its own.
pub(crate) fn named_ahead(report: &mut VerifyReport, seq: Seq, event: &Event) {
    for named in event.seq_references() {
        if named > seq {
            report.add(Finding::SeqNamedAhead { seq, named });
        }
    }
}

/// What `verify` found.
#[derive(Clone, Debug, Default)]
pub struct VerifyReport {
    /// Events walked.
    pub events: u64,
    /// The last seq walked (the log's last acknowledged seq when the walk began).
    pub last_seq: Seq,
    /// The first [`MAX_FINDINGS`] problems.
    pub findings: Vec<Finding>,
    /// Problems found in all, by kind.
    pub counts: HashMap<&'static str, u64>,
}

impl VerifyReport {
    /// Whether nothing is wrong.
    pub fn is_clean(&self) -> bool {
        self.counts.is_empty()
    }

    /// Problems found in all.
    pub fn total_findings(&self) -> u64 {
        self.counts.values().sum()
    }

    pub(crate) fn add(&mut self, finding: Finding) {
        m::verify_finding(finding.kind());
        *self.counts.entry(finding.kind()).or_default() += 1;
        if self.findings.len() < MAX_FINDINGS {
            self.findings.push(finding);
        }
    }
}

/// The index names findings use: the conversation list stands for v1's `by_conv`, the named
/// lists (and the conversation list's message flags) for `visible`.
const BY_CONV: &str = "by_conv";
const VISIBLE: &str = "visible";

/// One list's stored items read ahead of the walk.
struct ListCursor {
    conversation: bool,
    /// The list's entries with keys below this seq were read.
    read_to: Seq,
    /// Items read, not yet compared (seqs of groups after the one that read them).
    items: ListItems,
}

/// The walk's state between chunks.
struct Walk<'a, B: Backend> {
    backend: &'a B,
    last: Seq,
    report: VerifyReport,
    expected: Seq,
    /// After a chunk whose framing is corrupt, where the next chunk starts is unknown.
    lost_track: bool,
    seen_ids: HashSet<MessageId>,
    states: States,
    /// The group being walked: its first seq, its end, its index, its undecodable seqs.
    group: Option<(Seq, Seq)>,
    index: GroupIndex,
    undecodable: HashSet<Seq>,
    /// List keys accounted for by some group (the rest are strays).
    accounted: HashSet<Vec<u8>>,
    /// Per list: the stored items read but not yet compared (a merged entry holds the seqs of
    /// several groups), and where its entries were read up to.
    cursors: HashMap<Vec<u8>, ListCursor>,
    /// Every undecodable seq (already reported; its list entries are not strays).
    all_undecodable: HashSet<Seq>,
}

pub(crate) fn verify<B: Backend>(
    engine: &Engine<B>,
    progress: &mut dyn FnMut(VerifyProgress),
) -> Result<VerifyReport> {
    let _span = tracing::info_span!("verify").entered();
    let last = engine.committed();
    let mut walk = Walk {
        backend: &engine.backend,
        last,
        report: VerifyReport {
            last_seq: last,
            ..Default::default()
        },
        expected: Seq::FIRST,
        lost_track: false,
        seen_ids: HashSet::new(),
        states: States::new(),
        group: None,
        index: GroupIndex::default(),
        undecodable: HashSet::new(),
        accounted: HashSet::new(),
        cursors: HashMap::new(),
        all_undecodable: HashSet::new(),
    };
    // The overlay's items (a live log's groups applied since the last list write) are written
    // first, so that the stored entries hold every seq up to `last`: entries written later have
    // keys past it.
    engine.flush_lists()?;
    let mut failure = None;
    engine.backend.scan(
        TreeId::Chunks,
        &keys::seq_key(Seq::FIRST),
        Some(&keys::seq_key(last.next())),
        Direction::Forward,
        &mut |key, value| match walk.chunk(key, value, progress) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                failure = Some(e);
                ControlFlow::Break(())
            }
        },
    )?;
    if let Some(e) = failure {
        return Err(e);
    }
    walk.finish_group()?;
    if walk.expected <= last && !walk.lost_track {
        walk.report.add(Finding::Gap {
            from: walk.expected,
            to: last,
        });
    }
    progress(VerifyProgress {
        done: walk.report.events,
        total: last.0,
    });
    walk.strays()?;
    walk.sessions()?;
    match engine.hidden_events() {
        Some((from, to)) => walk.report.add(Finding::HiddenEvents { from, to }),
        None => walk.watermark()?,
    }
    let report = walk.report;
    tracing::info!(
        events = report.events,
        findings = report.total_findings(),
        "verify done"
    );
    Ok(report)
}

impl<B: Backend> Walk<'_, B> {
    fn chunk(
        &mut self,
        key: &[u8],
        value: &[u8],
        progress: &mut dyn FnMut(VerifyProgress),
    ) -> Result<()> {
        let Some(first) = keys::seq_suffix(key).filter(|_| key.len() == 8) else {
            return Ok(());
        };
        if first > self.expected && !self.lost_track {
            self.report.add(Finding::Gap {
                from: self.expected,
                to: Seq(first.0 - 1),
            });
        }
        let chunk = match Chunk::parse(first, value) {
            Ok(chunk) => chunk,
            Err(e) => {
                self.report.add(Finding::Undecodable {
                    seq: first,
                    reason: e.to_string(),
                });
                self.lost_track = true;
                self.expected = first.next();
                return Ok(());
            }
        };
        self.lost_track = false;
        if self.group.map(|(g, _)| g) != Some(chunk.group_first) {
            self.finish_group()?;
            self.group = Some((chunk.group_first, chunk.first));
        }
        self.expected = chunk.end_seq();
        if let Some((_, end)) = &mut self.group {
            *end = chunk.end_seq();
        }
        for (seq, record) in chunk.iter() {
            self.report.events += 1;
            if self.report.events.is_multiple_of(10_000) {
                progress(VerifyProgress {
                    done: self.report.events,
                    total: self.last.0,
                });
            }
            match record.and_then(|bytes| decode_event(seq, bytes)) {
                Ok(event) => self.event(seq, &event)?,
                Err(e) => {
                    self.undecodable.insert(seq);
                    self.all_undecodable.insert(seq);
                    self.report.add(Finding::Undecodable {
                        seq,
                        reason: e.to_string(),
                    });
                }
            }
        }
        Ok(())
    }

    fn event(&mut self, seq: Seq, event: &Event) -> Result<()> {
        self.index.add(seq, event);
        named_ahead(&mut self.report, seq, event);
        if let Event::MessagePosted(message) = event {
            if let Some(reply_to) = message.reply_to {
                if !self.seen_ids.contains(&reply_to) {
                    self.report.add(Finding::ReplyToUnknown { seq, reply_to });
                }
            }
            if !self.seen_ids.insert(message.id) {
                self.report.add(Finding::DuplicateMessageId {
                    seq,
                    id: message.id,
                });
            }
        }
        group::fold_state(&mut self.states, seq, event, &mut |_| Ok(None))
    }

    /// Compares the walked group's lists, list by list, with the stored items of the group's
    /// seq range.
    fn finish_group(&mut self) -> Result<()> {
        let index = std::mem::take(&mut self.index);
        let undecodable = std::mem::take(&mut self.undecodable);
        let Some((first, end)) = self.group.take() else {
            return Ok(());
        };
        for (prefix, (conversation, want)) in &index.lists {
            let have = self.stored_items(prefix, *conversation, (first, end))?;
            self.compare(*conversation, want, &have, &undecodable);
        }
        Ok(())
    }

    /// The stored items of one list in `[first, end)`: those of its entries read before (a
    /// merged entry) and of its entries whose keys fall below `end`, read now. Items read but
    /// below `first` belong to no group that lists them: strays. Items from `end` on wait for
    /// the groups after.
    fn stored_items(
        &mut self,
        prefix: &[u8],
        conversation: bool,
        (first, end): (Seq, Seq),
    ) -> Result<ListItems> {
        let mut cursor = self.cursors.remove(prefix).unwrap_or(ListCursor {
            conversation,
            read_to: first,
            items: ListItems::new(),
        });
        let mut keys_seen = Vec::new();
        let mut bad = Vec::new();
        if cursor.read_to < end {
            let items = &mut cursor.items;
            self.backend.scan(
                TreeId::Lists,
                &keys::list_key(prefix, cursor.read_to),
                Some(&keys::list_key(prefix, end)),
                Direction::Forward,
                &mut |key, value| {
                    let at = keys::seq_suffix(key).unwrap_or(Seq::ZERO);
                    match decode_list(at, value, conversation) {
                        Ok(found) => items.extend(found),
                        Err(e) => bad.push((at, e.to_string())),
                    }
                    keys_seen.push(key.to_vec());
                    ControlFlow::Continue(())
                },
            )?;
            cursor.read_to = end;
        }
        self.accounted.extend(keys_seen);
        for (seq, reason) in bad {
            self.report.add(Finding::Undecodable { seq, reason });
        }
        let (before, rest): (ListItems, ListItems) =
            cursor.items.drain(..).partition(|(seq, _)| *seq < first);
        let (have, later): (ListItems, ListItems) =
            rest.into_iter().partition(|(seq, _)| *seq < end);
        cursor.items = later;
        self.cursors.insert(prefix.to_vec(), cursor);
        self.report_strays(conversation, before.into_iter().map(|(seq, _)| seq));
        Ok(have)
    }

    /// Reports stored `seqs` no event calls for (up to the last seq walked; undecodable events'
    /// seqs are already reported).
    fn report_strays(&mut self, conversation: bool, seqs: impl IntoIterator<Item = Seq>) {
        let index = if conversation { BY_CONV } else { VISIBLE };
        for seq in seqs {
            if seq <= self.last && !self.all_undecodable.contains(&seq) {
                self.report.add(Finding::StrayIndexEntry { index, seq });
            }
        }
    }

    fn compare(
        &mut self,
        conversation: bool,
        want: &ListItems,
        have: &ListItems,
        undecodable: &HashSet<Seq>,
    ) {
        let index = if conversation { BY_CONV } else { VISIBLE };
        let have_map: HashMap<Seq, bool> = have.iter().copied().collect();
        let want_map: HashMap<Seq, bool> = want.iter().copied().collect();
        for &(seq, flag) in want {
            match have_map.get(&seq) {
                None => self.report.add(Finding::MissingIndexEntry { index, seq }),
                Some(&stored) if stored != flag => {
                    let finding = if flag {
                        Finding::MissingIndexEntry {
                            index: VISIBLE,
                            seq,
                        }
                    } else {
                        Finding::StrayIndexEntry {
                            index: VISIBLE,
                            seq,
                        }
                    };
                    self.report.add(finding);
                }
                Some(_) => {}
            }
        }
        for &(seq, _) in have {
            if !want_map.contains_key(&seq) && !undecodable.contains(&seq) {
                self.report.add(Finding::StrayIndexEntry { index, seq });
            }
        }
    }

    /// List items read but no group's (left in the cursors), and list entries up to the last
    /// seq that no group accounts for.
    fn strays(&mut self) -> Result<()> {
        let mut cursors: Vec<ListCursor> = self.cursors.drain().map(|(_, c)| c).collect();
        for cursor in &mut cursors {
            let seqs = cursor.items.drain(..).map(|(seq, _)| seq);
            self.report_strays(cursor.conversation, seqs);
        }
        let mut strays = Vec::new();
        self.backend.scan(
            TreeId::Lists,
            &[],
            None,
            Direction::Forward,
            &mut |key, value| {
                let Some(first) = keys::seq_suffix(key) else {
                    return ControlFlow::Continue(());
                };
                if first <= self.last && !self.accounted.contains(key) {
                    let conversation = keys::is_conversation_list(key);
                    let seqs = decode_list(first, value, conversation)
                        .map(|items| items.into_iter().map(|(s, _)| s).collect())
                        .unwrap_or_else(|_| vec![first]);
                    strays.push((conversation, seqs));
                }
                ControlFlow::Continue(())
            },
        )?;
        for (conversation, seqs) in strays {
            self.report_strays(conversation, seqs);
        }
        Ok(())
    }

    /// The stored session states must equal a fresh fold.
    fn sessions(&mut self) -> Result<()> {
        let mut stored: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        self.backend.scan(
            TreeId::Sessions,
            &[],
            None,
            Direction::Forward,
            &mut |key, value| {
                stored.insert(key.to_vec(), value.to_vec());
                ControlFlow::Continue(())
            },
        )?;
        for (key, state) in &self.states {
            let who = format!("{}/{}", state.conversation, state.agent);
            let found = stored.remove(key).map(|bytes| {
                decode_state(&bytes, state.conversation.as_str(), state.agent.as_str())
            });
            match found {
                Some(Ok(found)) if found.last_seq > self.last => {} // written after the walk began
                Some(Ok(found)) if &found == state => {}
                _ => self.report.add(Finding::SessionStateMismatch { who }),
            }
        }
        for key in stored.keys() {
            self.report.add(Finding::SessionStateMismatch {
                who: format!("stray entry {}", String::from_utf8_lossy(key)),
            });
        }
        Ok(())
    }

    fn watermark(&mut self) -> Result<()> {
        let watermark = self
            .backend
            .get(TreeId::Meta, keys::META_INDEXED_THROUGH)?
            .and_then(|v| keys::seq_suffix(v.as_ref()))
            .unwrap_or(Seq::ZERO);
        if watermark < self.last {
            self.report.add(Finding::Watermark {
                indexed_through: watermark,
                last: self.last,
            });
        }
        Ok(())
    }
}
