//! Reading the stream: a forward scan from a seq, of the whole stream or of one subject. Short
//! reads ask the stream's leader for each message (`STREAM.MSG.GET`, all requests in flight at
//! once; by subject, one after another); longer ones go through an ordered consumer, deleted as
//! soon as the scan ends. Both are served by the stream's leader, so they see every acknowledged
//! event. (A consumer per read, left to expire, once filled the server's consumer limit after
//! a few thousand quick reads: JetStream error 10026.)

use std::time::Duration;

use async_nats::jetstream::consumer::{pull::OrderedConfig, DeliverPolicy};
use async_nats::jetstream::message::StreamMessage;
use async_nats::jetstream::stream::{RawMessageErrorKind, Stream};
use bytes::Bytes;
use futures_util::future::try_join_all;
use futures_util::StreamExt;
use legio_core::{Record, Seq};

use super::subject::Subjects;
use crate::codec::decode_event;
use crate::error::{Result, StoreError};

/// One stored message: its stream sequence (legio's seq), subject and record bytes.
#[derive(Debug)]
pub(crate) struct Stored {
    pub(crate) seq: u64,
    pub(crate) subject: String,
    pub(crate) payload: Bytes,
}

impl Stored {
    /// Decodes the record, checking that it sits on its conversation's subject.
    pub(crate) fn decode(&self, subjects: &Subjects) -> Result<Record> {
        let seq = Seq(self.seq);
        let event = decode_event(seq, &self.payload)?;
        if subjects.conversation(&self.subject).as_ref() != Some(event.conversation()) {
            return Err(StoreError::Corrupt {
                what: format!("seq {seq}"),
                reason: format!(
                    "stored under subject {} but belongs to conversation {}",
                    self.subject,
                    event.conversation()
                ),
            });
        }
        Ok(Record { seq, event })
    }
}

/// Ranges of at most this many messages are read by asking for each one (all at once).
pub(crate) const SHORT_READ: u64 = 64;
/// A subject's messages are asked for one by one (the next after a seq) up to this many times
/// before the rest is read through a consumer.
const SUBJECT_PROBES: usize = 16;

/// What to scan: messages with `from <= seq <= to`, on `filter` (a subject) or all, at most
/// `limit`. The caller caps `to` at a seq known to exist, so the scan knows when it is done.
/// `reader` names the consumer a long scan uses (unique per scan).
#[derive(Clone, Debug)]
pub(crate) struct Scan {
    pub(crate) from: u64,
    pub(crate) to: u64,
    pub(crate) filter: Option<String>,
    pub(crate) limit: usize,
    pub(crate) reader: String,
    /// Seqs up to here are known acknowledged, so (the log having no gaps) an unfiltered scan
    /// must return every one of them it covers: see [`Scan::check_whole`]. Zero: no check.
    pub(crate) whole_through: u64,
}

impl Scan {
    /// An error when `stored` (this scan's answer) lacks a seq it must hold: one at or below
    /// `whole_through`, within the scan's range and limit. The answering server is then behind:
    /// a stream leader cut off by a partition answers reads until it learns of the new leader
    /// (seen after a heal: it skipped the events appended during the cut). A cluster error, so
    /// the read is tried again.
    pub(crate) fn check_whole(&self, stored: &[Stored]) -> Result<()> {
        let end = self.to.min(self.whole_through);
        if self.filter.is_some() || end < self.from {
            return Ok(());
        }
        let want = (end - self.from + 1).min(self.limit as u64);
        for (seq, got) in (self.from..self.from + want)
            .zip(stored.iter().map(|s| s.seq).chain(std::iter::repeat(0)))
        {
            if got != seq {
                return Err(StoreError::cluster(
                    "reading the stream",
                    format!(
                        "seq {seq} is acknowledged but the server that answered has no message \
                         there: it is behind (a stream leader cut off by a partition answers \
                         until it learns of the new leader)"
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl From<StreamMessage> for Stored {
    fn from(message: StreamMessage) -> Self {
        Self {
            seq: message.sequence,
            subject: message.subject.to_string(),
            payload: message.payload,
        }
    }
}

/// Runs a scan: by requests when short, else (for what is left) through a consumer.
pub(crate) async fn scan(stream: &Stream, scan: Scan, timeout: Duration) -> Result<Vec<Stored>> {
    if scan.from > scan.to || scan.limit == 0 {
        return Ok(Vec::new());
    }
    let mut out = match &scan.filter {
        None => {
            let last = scan.to.min(scan.from.saturating_add(scan.limit as u64 - 1));
            if last - scan.from < SHORT_READ {
                return by_sequence(stream, scan.from, last).await;
            }
            Vec::new()
        }
        Some(subject) => {
            let (probed, done) = by_subject(stream, subject, &scan).await?;
            if done {
                return Ok(probed);
            }
            probed
        }
    };
    let from = out.last().map_or(scan.from, |s| s.seq + 1);
    let rest = Scan {
        from,
        limit: scan.limit - out.len(),
        ..scan
    };
    let name = rest.reader.clone();
    let read = through_consumer(stream, rest, timeout).await;
    // Deleted at once (not left to expire), whatever the scan gave.
    if let Err(e) = stream.delete_consumer(&name).await {
        tracing::debug!(consumer = %name, error = %e, "deleting a reader failed; it expires");
    }
    out.extend(read?);
    Ok(out)
}

/// Every message with `from <= seq <= last`, asked of the stream leader all at once. A seq with
/// no message (the stream has none to skip, but a damaged one might) is left out, as a consumer
/// leaves it out.
async fn by_sequence(stream: &Stream, from: u64, last: u64) -> Result<Vec<Stored>> {
    let gets = (from..=last).map(|seq| async move {
        match stream.get_raw_message(seq).await {
            Ok(message) => Ok(Some(Stored::from(message))),
            Err(e) if e.kind() == RawMessageErrorKind::NoMessageFound => Ok(None),
            Err(e) => Err(StoreError::cluster("reading the stream", e)),
        }
    });
    Ok(try_join_all(gets).await?.into_iter().flatten().collect())
}

/// Up to [`SUBJECT_PROBES`] messages of `subject` from `scan.from` on, one request each; and
/// whether that finished the scan.
async fn by_subject(stream: &Stream, subject: &str, scan: &Scan) -> Result<(Vec<Stored>, bool)> {
    let mut out = Vec::new();
    let mut from = scan.from;
    for _ in 0..SUBJECT_PROBES {
        let message = match stream.get_first_raw_message_by_subject(subject, from).await {
            Ok(message) => message,
            Err(e) if e.kind() == RawMessageErrorKind::NoMessageFound => return Ok((out, true)),
            Err(e) => return Err(StoreError::cluster("reading a conversation", e)),
        };
        if message.sequence > scan.to {
            return Ok((out, true));
        }
        from = message.sequence + 1;
        out.push(Stored::from(message));
        if from > scan.to || out.len() >= scan.limit {
            return Ok((out, true));
        }
    }
    Ok((out, false))
}

/// The scan through an ordered consumer named `scan.reader`. Stops at `to`, at `limit`, or when
/// the consumer reports nothing pending.
async fn through_consumer(stream: &Stream, scan: Scan, timeout: Duration) -> Result<Vec<Stored>> {
    let mut out = Vec::new();
    if scan.from > scan.to || scan.limit == 0 {
        return Ok(out);
    }
    let consumer = stream
        .create_consumer(OrderedConfig {
            name: Some(scan.reader.clone()),
            deliver_policy: DeliverPolicy::ByStartSequence {
                start_sequence: scan.from,
            },
            filter_subject: scan.filter.unwrap_or_default(),
            ..Default::default()
        })
        .await
        .map_err(|e| StoreError::cluster("creating a reader", e))?;
    let mut messages = consumer
        .messages()
        .await
        .map_err(|e| StoreError::cluster("starting a read", e))?;
    loop {
        let next = tokio::time::timeout(timeout, messages.next())
            .await
            .map_err(|_| StoreError::cluster("reading the stream", "no message in time"))?;
        let Some(message) = next else { break };
        let message = message.map_err(|e| StoreError::cluster("reading the stream", e))?;
        let info = message
            .info()
            .map_err(|e| StoreError::cluster("reading the stream", e))?;
        let (seq, pending) = (info.stream_sequence, info.pending);
        // An ordered consumer that async-nats recreates (after a missed heartbeat, say) before
        // it delivered anything starts again from the stream's first message (async-nats 0.51
        // uses `DeliverPolicy::All` then): skip what is before the scan.
        if seq < scan.from {
            continue;
        }
        if seq > scan.to {
            break;
        }
        out.push(Stored {
            seq,
            subject: message.subject.to_string(),
            payload: message.payload.clone(),
        });
        if seq == scan.to || pending == 0 || out.len() >= scan.limit {
            break;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(from: u64, to: u64, limit: usize, whole_through: u64, filtered: bool) -> Scan {
        Scan {
            from,
            to,
            filter: filtered.then(|| "legio.c.t".to_string()),
            limit,
            reader: "r".into(),
            whole_through,
        }
    }

    fn stored(seqs: &[u64]) -> Vec<Stored> {
        seqs.iter()
            .map(|&seq| Stored {
                seq,
                subject: "legio.c.t".into(),
                payload: Bytes::new(),
            })
            .collect()
    }

    #[test]
    fn a_scan_must_hold_every_seq_known_acknowledged_that_it_covers() {
        // (scan, answer, the seq named missing)
        let cases: &[(Scan, &[u64], Option<u64>)] = &[
            (scan(1, 5, 100, 5, false), &[1, 2, 3, 4, 5], None),
            (scan(1, 5, 100, 5, false), &[1, 2, 4, 5], Some(3)),
            (scan(1, 5, 100, 5, false), &[1, 2, 3], Some(4)),
            (scan(1, 5, 100, 5, false), &[], Some(1)),
            (scan(3, 5, 100, 5, false), &[4, 5], Some(3)),
            // Above what the node knows acknowledged: not checked (the stream may end sooner).
            (scan(1, 9, 100, 5, false), &[1, 2, 3, 4, 5], None),
            (scan(6, 9, 100, 5, false), &[], None),
            // Only up to the limit.
            (scan(1, 5, 2, 5, false), &[1, 2], None),
            (scan(1, 5, 2, 5, false), &[1, 3], Some(2)),
            // A conversation's scan skips other conversations' seqs, and no check was asked.
            (scan(1, 5, 100, 5, true), &[2, 5], None),
            (scan(1, 5, 100, 0, false), &[2, 5], None),
        ];
        for (i, (scan, answer, missing)) in cases.iter().enumerate() {
            let got = scan.check_whole(&stored(answer));
            match missing {
                None => assert!(got.is_ok(), "case {i}: {got:?}"),
                Some(seq) => {
                    let reason = match got {
                        Err(StoreError::Cluster { source, .. }) => source.to_string(),
                        other => panic!("case {i}: {other:?}"),
                    };
                    assert!(
                        reason.starts_with(&format!("seq {seq} is acknowledged")),
                        "case {i}: {reason}"
                    );
                }
            }
        }
    }
}
