//! `verify` for [`NatsLog`](super::NatsLog): a walk of the stream that reports gaps,
//! undecodable records, events on a wrong subject, replies to unknown messages and reused ids.

use std::collections::HashSet;
use std::sync::Arc;

use legio_core::{Event, Record, Seq};

use super::inner::{Inner, READ_CHUNK};
use super::reader::Scan;
use super::runtime::block_on;
use crate::error::Result;
use crate::verify::{Finding, VerifyProgress, VerifyReport};

/// Walks the stream: gaps, undecodable records, events on a wrong subject, replies to unknown
/// messages, reused message ids.
pub(super) fn verify_walk(
    inner: &Arc<Inner>,
    runtime: &tokio::runtime::Handle,
    last: Seq,
    progress: &mut dyn FnMut(VerifyProgress),
) -> Result<VerifyReport> {
    let mut report = VerifyReport {
        last_seq: last,
        ..Default::default()
    };
    let mut expected = Seq::FIRST;
    let mut seen = HashSet::new();
    while expected <= last {
        let reading = Arc::clone(inner);
        let next = Scan {
            from: expected.0,
            to: last.0,
            filter: None,
            limit: READ_CHUNK,
            reader: inner.next_reader(),
            // Verify reports a gap as a finding; it does not retry it away.
            whole_through: 0,
        };
        let stored = block_on(runtime, async move { reading.scan(next).await })?;
        if stored.is_empty() {
            break;
        }
        for message in &stored {
            let seq = Seq(message.seq);
            if seq > expected {
                report.add(Finding::Gap {
                    from: expected,
                    to: Seq(seq.0 - 1),
                });
            }
            expected = seq.next();
            report.events += 1;
            match message.decode(&inner.subjects) {
                Ok(record) => {
                    crate::verify::named_ahead(&mut report, record.seq, &record.event);
                    check_message(&mut report, &mut seen, &record)
                }
                Err(e) => report.add(Finding::Undecodable {
                    seq,
                    reason: e.to_string(),
                }),
            }
        }
        progress(VerifyProgress {
            done: report.events,
            total: last.0,
        });
    }
    if expected <= last {
        report.add(Finding::Gap {
            from: expected,
            to: last,
        });
    }
    Ok(report)
}

fn check_message(
    report: &mut VerifyReport,
    seen: &mut HashSet<legio_core::MessageId>,
    record: &Record,
) {
    let Event::MessagePosted(message) = &record.event else {
        return;
    };
    if let Some(reply_to) = message.reply_to {
        if !seen.contains(&reply_to) {
            report.add(Finding::ReplyToUnknown {
                seq: record.seq,
                reply_to,
            });
        }
    }
    if !seen.insert(message.id) {
        report.add(Finding::DuplicateMessageId {
            seq: record.seq,
            id: message.id,
        });
    }
}
