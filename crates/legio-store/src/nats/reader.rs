//! Reading the stream: a forward scan from a seq, of the whole stream or of one subject, through
//! an ordered consumer (served by the stream's leader, so it sees every acknowledged event).

use std::time::Duration;

use async_nats::jetstream::consumer::{pull::OrderedConfig, DeliverPolicy};
use async_nats::jetstream::stream::Stream;
use bytes::Bytes;
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

/// What to scan: messages with `from <= seq <= to`, on `filter` (a subject) or all, at most
/// `limit`. The caller caps `to` at a seq known to exist, so the scan knows when it is done.
#[derive(Debug)]
pub(crate) struct Scan {
    pub(crate) from: u64,
    pub(crate) to: u64,
    pub(crate) filter: Option<String>,
    pub(crate) limit: usize,
}

/// Runs a scan. Stops at `to`, at `limit`, or when the consumer reports nothing pending.
pub(crate) async fn scan(stream: &Stream, scan: Scan, timeout: Duration) -> Result<Vec<Stored>> {
    let mut out = Vec::new();
    if scan.from > scan.to || scan.limit == 0 {
        return Ok(out);
    }
    let consumer = stream
        .create_consumer(OrderedConfig {
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
