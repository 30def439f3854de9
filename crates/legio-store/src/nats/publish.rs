//! Putting one group of events into the stream: a single message with a message id, or an atomic
//! batch (ADR-50) for more; each conversation's first message states the subject's last sequence
//! it expects. Retries through leader elections and reconnects until the append deadline, and
//! recognizes its own earlier attempt when a retry finds it stored.

use std::time::Duration;

use async_nats::header::{
    HeaderMap, NATS_BATCH_COMMIT, NATS_BATCH_ID, NATS_BATCH_SEQUENCE,
    NATS_EXPECTED_LAST_SUBJECT_SEQUENCE,
};
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::response::Response;
use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::{self, stream::Stream};
use bytes::Bytes;
use serde::Deserialize;
use tokio::sync::Semaphore;

use super::backoff::Backoff;
use crate::error::{Result, StoreError};

/// Our own header: the id of the append a message belongs to, on every message, so that a retry
/// can tell its own earlier, acknowledged-but-lost attempt from another writer's append.
pub(crate) const LEGIO_APPEND: &str = "Legio-Append";

/// JetStream's "wrong last sequence" (an expectation header did not hold).
const WRONG_LAST_SEQUENCE: u64 = 10071;
/// Atomic batch errors that no retry can fix.
const PERMANENT_BATCH_ERRORS: [u64; 4] = [10199, 10205, 10206, 10209];

/// One message to publish.
#[derive(Debug, Clone)]
pub(crate) struct Outgoing {
    pub(crate) subject: String,
    pub(crate) payload: Bytes,
    /// The subject's last sequence this append expects (first message per subject only).
    pub(crate) expect: Option<u64>,
}

/// How a publish ended, short of a failure.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Stored; the last message got this stream sequence, the others the ones before it.
    Stored { last: u64 },
    /// An expectation did not hold: another writer appended to one of the subjects.
    WrongLast,
}

/// The at most this many atomic batches in flight per stream (the server allows 50).
pub(crate) const MAX_BATCHES_IN_FLIGHT: usize = 40;

/// Publishes groups of messages to one stream.
#[derive(Debug)]
pub(crate) struct Publisher {
    pub(crate) client: async_nats::Client,
    pub(crate) js: jetstream::Context,
    pub(crate) stream: Stream,
    pub(crate) timeout: Duration,
    pub(crate) deadline: Duration,
    pub(crate) batches: Semaphore,
}

/// What one attempt gave: an outcome, a failure worth retrying, or one that is final.
enum Attempt {
    Done(Outcome),
    Retry(String),
    Fail(StoreError),
}

#[derive(Deserialize)]
struct BatchAck {
    seq: u64,
    #[serde(default)]
    count: u64,
}

impl Publisher {
    /// Publishes `messages` (one append) under the append id `id`, retrying transient failures
    /// until the deadline, or until `abandoned` says the append is no longer wanted (its node
    /// stood down from every conversation in it while the cluster was out of reach).
    pub(crate) async fn publish(
        &self,
        id: &str,
        messages: &[Outgoing],
        abandoned: impl Fn() -> bool,
    ) -> Result<Outcome> {
        let _permit = if messages.len() > 1 {
            Some(
                self.batches
                    .acquire()
                    .await
                    .map_err(|_| StoreError::Closed)?,
            )
        } else {
            None
        };
        let mut backoff = Backoff::new(self.deadline);
        for attempt in 1u32.. {
            let result = if messages.len() == 1 {
                self.publish_one(id, &messages[0]).await
            } else {
                self.publish_batch(&format!("{id}-{attempt}"), id, messages)
                    .await
            };
            let result = match result {
                Attempt::Done(Outcome::WrongLast) if attempt > 1 => {
                    // Our earlier attempt may have been stored after all: its last message says
                    // (a failed read of it is retried with the publish).
                    let last = &messages[messages.len() - 1].subject;
                    match self.stored_append(last, id).await {
                        Ok(Some(seq)) => Attempt::Done(Outcome::Stored { last: seq }),
                        Ok(None) => Attempt::Done(Outcome::WrongLast),
                        Err(error) => Attempt::Retry(error.to_string()),
                    }
                }
                other => other,
            };
            match result {
                Attempt::Done(outcome) => return Ok(outcome),
                Attempt::Fail(error) => return Err(error),
                Attempt::Retry(reason) if abandoned() => {
                    return Err(StoreError::cluster(
                        "appending",
                        format!(
                            "stopped after {attempt} attempt{} in {:.1} s: this node stood \
                             down from the conversation (it could not renew its lease); the \
                             append may or may not be stored: {reason}",
                            if attempt == 1 { "" } else { "s" },
                            backoff.elapsed().as_secs_f64()
                        ),
                    ))
                }
                Attempt::Retry(reason) => {
                    let Some(pause) = backoff.next() else {
                        return Err(StoreError::cluster(
                            "appending",
                            format!(
                                "gave up after {attempt} attempts in {:.1} s (is a majority of \
                                 the stream's servers up and reachable?): {reason}",
                                backoff.elapsed().as_secs_f64()
                            ),
                        ));
                    };
                    tracing::debug!(attempt, %reason, "append failed, retrying");
                    tokio::time::sleep(pause).await;
                }
            }
        }
        unreachable!("the retry loop returns")
    }

    /// One message: a JetStream publish with a message id (duplicates of a retry are dropped by
    /// the server within its duplicate window) and the subject expectation.
    async fn publish_one(&self, id: &str, message: &Outgoing) -> Attempt {
        let mut publish = PublishMessage::build()
            .payload(message.payload.clone())
            .message_id(id)
            .header(LEGIO_APPEND, id);
        if let Some(expect) = message.expect {
            publish = publish.expected_last_subject_sequence(expect);
        }
        let ack = match self.js.send_publish(message.subject.clone(), publish).await {
            Ok(future) => future.await,
            Err(e) => Err(e),
        };
        match ack {
            Ok(ack) => Attempt::Done(Outcome::Stored { last: ack.sequence }),
            Err(e) => match e.kind() {
                PublishErrorKind::WrongLastSequence => Attempt::Done(Outcome::WrongLast),
                PublishErrorKind::MaxPayloadExceeded => {
                    Attempt::Fail(StoreError::cluster("appending", e))
                }
                _ => Attempt::Retry(e.to_string()),
            },
        }
    }

    /// Several messages: an atomic batch. Every message but the last is published without a
    /// reply; the last commits, and its reply is the batch's ack (or why nothing was stored).
    async fn publish_batch(&self, batch_id: &str, id: &str, messages: &[Outgoing]) -> Attempt {
        let count = messages.len();
        for (index, message) in messages.iter().enumerate() {
            let mut headers = HeaderMap::new();
            headers.insert(NATS_BATCH_ID, batch_id);
            headers.insert(NATS_BATCH_SEQUENCE, (index + 1).to_string().as_str());
            headers.insert(LEGIO_APPEND, id);
            if let Some(expect) = message.expect {
                headers.insert(
                    NATS_EXPECTED_LAST_SUBJECT_SEQUENCE,
                    expect.to_string().as_str(),
                );
            }
            if index + 1 < count {
                let sent = self
                    .client
                    .publish_with_headers(message.subject.clone(), headers, message.payload.clone())
                    .await;
                if let Err(e) = sent {
                    return Attempt::Retry(e.to_string());
                }
                continue;
            }
            headers.insert(NATS_BATCH_COMMIT, "1");
            let request = async_nats::Request::new()
                .headers(headers)
                .payload(message.payload.clone())
                .timeout(Some(self.timeout));
            return match self
                .client
                .send_request(message.subject.clone(), request)
                .await
            {
                Ok(reply) => Self::batch_reply(&reply.payload, count),
                Err(e) => Attempt::Retry(e.to_string()),
            };
        }
        Attempt::Fail(StoreError::EmptyBatch)
    }

    fn batch_reply(payload: &[u8], count: usize) -> Attempt {
        match serde_json::from_slice::<Response<BatchAck>>(payload) {
            Ok(Response::Ok(ack)) if ack.count == count as u64 => {
                Attempt::Done(Outcome::Stored { last: ack.seq })
            }
            Ok(Response::Ok(ack)) => Attempt::Fail(StoreError::cluster(
                "appending",
                format!(
                    "the cluster acknowledged a batch of {} messages for one of {count}",
                    ack.count
                ),
            )),
            Ok(Response::Err { error }) => match error.error_code() {
                ErrorCode(WRONG_LAST_SEQUENCE) => Attempt::Done(Outcome::WrongLast),
                ErrorCode(code) if PERMANENT_BATCH_ERRORS.contains(&code) => {
                    Attempt::Fail(StoreError::cluster("appending a batch", error))
                }
                _ => Attempt::Retry(error.to_string()),
            },
            Err(_) => Attempt::Retry(format!(
                "unexpected reply to a batch commit: {}",
                String::from_utf8_lossy(payload)
            )),
        }
    }

    /// The stream sequence of the last message on `subject` if it belongs to append `id`.
    async fn stored_append(&self, subject: &str, id: &str) -> Result<Option<u64>> {
        match self.stream.get_last_raw_message_by_subject(subject).await {
            Ok(message) => {
                let ours = message
                    .headers
                    .get(LEGIO_APPEND)
                    .is_some_and(|v| v.as_str() == id);
                Ok(ours.then_some(message.sequence))
            }
            Err(e) => Err(StoreError::cluster("checking an earlier attempt", e)),
        }
    }
}
