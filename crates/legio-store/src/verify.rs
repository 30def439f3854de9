//! `verify`: walks the log and its indexes and reports gaps, undecodable records, index entries
//! that disagree with the events, session states that disagree with a fresh fold, and replies to
//! unknown messages. It reports; it never panics and never repairs.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::ops::ControlFlow;

use legio_core::{visibility_keys, AgentSessionState, Event, MessageId, Seq};

use crate::backend::{Backend, Direction, TreeId};
use crate::codec::{decode_event, decode_state};
use crate::engine::Engine;
use crate::error::Result;
use crate::keys;
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
        /// The index tree.
        index: &'static str,
        /// The event.
        seq: Seq,
    },
    /// An index entry that no event calls for.
    StrayIndexEntry {
        /// The index tree.
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
    /// Two messages with the same id.
    DuplicateMessageId {
        /// The second one.
        seq: Seq,
        /// The id.
        id: MessageId,
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

/// Expected index keys of one event.
pub(crate) fn expected_keys(seq: Seq, event: &Event) -> (Vec<u8>, Vec<Vec<u8>>) {
    let conv = event.conversation();
    let visible = match event {
        Event::MessagePosted(message) => visibility_keys(message)
            .iter()
            .map(|k| keys::visible_key(conv, k, seq))
            .collect(),
        _ => Vec::new(),
    };
    (keys::conv_key(conv, seq), visible)
}

pub(crate) fn verify<B: Backend>(
    engine: &Engine<B>,
    progress: &mut dyn FnMut(VerifyProgress),
) -> Result<VerifyReport> {
    let _span = tracing::info_span!("verify").entered();
    let backend = &engine.backend;
    let last = engine.committed();
    let mut report = VerifyReport {
        last_seq: last,
        ..Default::default()
    };
    let mut expected = Seq::FIRST;
    let mut seen_ids: HashSet<MessageId> = HashSet::new();
    let mut states: HashMap<Vec<u8>, AgentSessionState> = HashMap::new();
    let (mut conv_expected, mut visible_expected) = (0u64, 0u64);
    let mut missing = false;
    let mut failure = None;

    backend.scan(
        TreeId::Events,
        &keys::seq_key(Seq::FIRST),
        Some(&keys::seq_key(last.next())),
        Direction::Forward,
        &mut |key, value| {
            let Some(seq) = keys::seq_suffix(key).filter(|_| key.len() == 8) else {
                return ControlFlow::Continue(());
            };
            if seq > expected {
                report.add(Finding::Gap {
                    from: expected,
                    to: Seq(seq.0 - 1),
                });
            }
            expected = seq.next();
            report.events += 1;
            if report.events.is_multiple_of(10_000) {
                progress(VerifyProgress {
                    done: report.events,
                    total: last.0,
                });
            }
            let event = match decode_event(seq, value) {
                Ok(event) => event,
                Err(e) => {
                    report.add(Finding::Undecodable {
                        seq,
                        reason: e.to_string(),
                    });
                    return ControlFlow::Continue(());
                }
            };
            let (conv_key, visible_keys) = expected_keys(seq, &event);
            let check = |tree: TreeId, key: &[u8]| backend.get(tree, key).map(|v| v.is_some());
            match check(TreeId::ByConv, &conv_key) {
                Ok(true) => {}
                Ok(false) => {
                    missing = true;
                    report.add(Finding::MissingIndexEntry {
                        index: TreeId::ByConv.name(),
                        seq,
                    });
                }
                Err(e) => {
                    failure = Some(e);
                    return ControlFlow::Break(());
                }
            }
            conv_expected += 1;
            for key in &visible_keys {
                match check(TreeId::Visible, key) {
                    Ok(true) => {}
                    Ok(false) => {
                        missing = true;
                        report.add(Finding::MissingIndexEntry {
                            index: TreeId::Visible.name(),
                            seq,
                        });
                    }
                    Err(e) => {
                        failure = Some(e);
                        return ControlFlow::Break(());
                    }
                }
                visible_expected += 1;
            }
            if let Event::MessagePosted(message) = &event {
                if let Some(reply_to) = message.reply_to {
                    if !seen_ids.contains(&reply_to) {
                        report.add(Finding::ReplyToUnknown { seq, reply_to });
                    }
                }
                if !seen_ids.insert(message.id) {
                    report.add(Finding::DuplicateMessageId {
                        seq,
                        id: message.id,
                    });
                }
            }
            if let Some(agent) = event.session_agent() {
                let conv = event.conversation();
                states
                    .entry(keys::session_key(conv, agent))
                    .or_insert_with(|| AgentSessionState::new(conv.clone(), agent.clone()))
                    .apply(seq, &event);
            }
            ControlFlow::Continue(())
        },
    )?;
    if let Some(e) = failure {
        return Err(e);
    }
    if expected <= last {
        report.add(Finding::Gap {
            from: expected,
            to: last,
        });
    }
    progress(VerifyProgress {
        done: report.events,
        total: last.0,
    });

    // Stray entries: count the index entries up to `last`; walk them only if the counts disagree.
    for (tree, want) in [
        (TreeId::ByConv, conv_expected),
        (TreeId::Visible, visible_expected),
    ] {
        let mut have = 0u64;
        backend.scan(tree, &[], None, Direction::Forward, &mut |key, _| {
            if keys::seq_suffix(key).is_some_and(|s| s <= last) {
                have += 1;
            }
            ControlFlow::Continue(())
        })?;
        if have != want || missing {
            find_strays(backend, tree, last, &mut report)?;
        }
    }

    // Session states: the stored projection must equal a fresh fold.
    let mut stored: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    backend.scan(
        TreeId::Sessions,
        &[],
        None,
        Direction::Forward,
        &mut |key, value| {
            stored.insert(key.to_vec(), value.to_vec());
            ControlFlow::Continue(())
        },
    )?;
    for (key, state) in &states {
        let who = format!("{}/{}", state.conversation, state.agent);
        match stored
            .remove(key)
            .map(|bytes| decode_state(&bytes, state.conversation.as_str(), state.agent.as_str()))
        {
            Some(Ok(found)) if found.last_seq > last => {} // written after the walk began
            Some(Ok(found)) if &found == state => {}
            _ => report.add(Finding::SessionStateMismatch { who }),
        }
    }
    for key in stored.keys() {
        report.add(Finding::SessionStateMismatch {
            who: format!("stray entry {}", String::from_utf8_lossy(key)),
        });
    }

    let watermark = backend
        .get(TreeId::Meta, keys::META_INDEXED_THROUGH)?
        .and_then(|v| keys::seq_suffix(&v))
        .unwrap_or(Seq::ZERO);
    if watermark < last {
        report.add(Finding::Watermark {
            indexed_through: watermark,
            last,
        });
    }
    tracing::info!(
        events = report.events,
        findings = report.total_findings(),
        "verify done"
    );
    Ok(report)
}

/// Walks an index and reports every entry up to `last` that no event calls for.
fn find_strays<B: Backend>(
    backend: &B,
    tree: TreeId,
    last: Seq,
    report: &mut VerifyReport,
) -> Result<()> {
    let mut entries = Vec::new();
    backend.scan(tree, &[], None, Direction::Forward, &mut |key, _| {
        if let Some(seq) = keys::seq_suffix(key).filter(|s| *s <= last) {
            entries.push((key.to_vec(), seq));
        }
        ControlFlow::Continue(())
    })?;
    for (key, seq) in entries {
        let calls_for = match backend.get(TreeId::Events, &keys::seq_key(seq))? {
            Some(bytes) => match decode_event(seq, &bytes) {
                Ok(event) => {
                    let (conv_key, visible_keys) = expected_keys(seq, &event);
                    conv_key == key || visible_keys.contains(&key)
                }
                Err(_) => true, // already reported as undecodable
            },
            None => false,
        };
        if !calls_for {
            report.add(Finding::StrayIndexEntry {
                index: tree.name(),
                seq,
            });
        }
    }
    Ok(())
}
