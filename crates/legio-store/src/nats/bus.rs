//! The node bus: core NATS request/reply between legio nodes (no JetStream, nothing stored), so
//! that a node can hand a request to the node that owns its conversation and get the answer
//! back, with progress on the way. The bytes are the caller's; this module only moves them.
//!
//! A request is one message on `<stream>.node.<node>.turns` whose reply subject is a fresh inbox
//! of the caller. The serving node answers on that inbox with frames, each a message with the
//! header `Legio-Frame`: `progress` (any number, in order), `alive` (every `keepalive` while the
//! work runs) and one `done` that carries the answer. A caller that hears nothing for `silence`
//! gives up (the node died or was cut off); a request nobody subscribes to is answered at once by
//! the server's "no responders" status.

use std::time::Duration;

use async_nats::{HeaderMap, StatusCode};
use futures_util::StreamExt;
use thiserror::Error;
use tokio::sync::mpsc;

use super::options::NatsOptions;
use super::subject::encode_token;
use crate::error::StoreError;

const FRAME: &str = "Legio-Frame";

/// Why a request over the bus got no answer.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum BusError {
    /// No process serves the node (it is not running, or not connected to the cluster).
    #[error("node {node} does not answer requests (it is not running or not connected)")]
    NoResponder {
        /// The node asked.
        node: String,
    },
    /// The node took the request and then fell silent (it died or was cut off); whether the
    /// request was carried out is unknown.
    #[error("node {node} fell silent for {} ms while serving the request; its outcome is unknown", silence.as_millis())]
    Silent {
        /// The node asked.
        node: String,
        /// How long it was silent.
        silence: Duration,
    },
    /// The cluster could not be reached or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One request received by a serving node: its bytes, and where the answer goes.
#[derive(Debug)]
pub struct Incoming {
    /// The request's bytes.
    pub payload: Vec<u8>,
    /// The way back to the caller.
    pub reply: Responder,
}

/// Sends the frames of one answer, in order. Dropping it without [`Responder::finish`] leaves
/// the caller to its silence timeout.
#[derive(Debug)]
pub struct Responder {
    frames: mpsc::UnboundedSender<(&'static str, Vec<u8>)>,
}

impl Responder {
    /// Sends a progress frame.
    pub fn progress(&self, bytes: Vec<u8>) {
        let _ = self.frames.send(("progress", bytes));
    }

    /// Sends the answer; the request is over.
    pub fn finish(self, bytes: Vec<u8>) {
        let _ = self.frames.send(("done", bytes));
    }
}

/// The bus of one cluster (see the module docs). Its methods run on its own small runtime, so
/// they may be awaited from any async runtime.
pub struct NodeBus {
    client: async_nats::Client,
    prefix: String,
    keepalive: Duration,
    runtime: Option<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for NodeBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeBus")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl Drop for NodeBus {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl NodeBus {
    /// Connects to the cluster; serving nodes send an `alive` frame every `keepalive`.
    pub fn open(options: &NatsOptions, keepalive: Duration) -> Result<Self, StoreError> {
        options.validate()?;
        let runtime = super::runtime::build(1)?;
        let connect = {
            let options = options.clone();
            async move { options.connect().await }
        };
        let client = super::runtime::block_on(runtime.handle(), connect)?;
        Ok(Self {
            client,
            prefix: format!("{}.node.", options.stream),
            keepalive,
            runtime: Some(runtime),
        })
    }

    fn subject(&self, node: &str) -> String {
        format!("{}{}.turns", self.prefix, encode_token(node))
    }

    fn handle(&self) -> tokio::runtime::Handle {
        match &self.runtime {
            Some(runtime) => runtime.handle().clone(),
            None => unreachable!("the runtime lives as long as the bus"),
        }
    }

    /// Sends `payload` to `node` and waits for its answer; progress frames go to `progress` as
    /// they come. Gives up after `silence` without any frame.
    pub async fn request(
        &self,
        node: &str,
        payload: Vec<u8>,
        progress: mpsc::UnboundedSender<Vec<u8>>,
        silence: Duration,
    ) -> Result<Vec<u8>, BusError> {
        let (client, subject, node) = (self.client.clone(), self.subject(node), node.to_owned());
        let task = self.handle().spawn(async move {
            let inbox = client.new_inbox();
            let mut answers = client
                .subscribe(inbox.clone())
                .await
                .map_err(|e| StoreError::cluster("subscribing to an inbox", e))?;
            client
                .publish_with_reply(subject, inbox, payload.into())
                .await
                .map_err(|e| StoreError::cluster("sending a request to a node", e))?;
            loop {
                let message = match tokio::time::timeout(silence, answers.next()).await {
                    Ok(Some(message)) => message,
                    Ok(None) | Err(_) => return Err(BusError::Silent { node, silence }),
                };
                if message.status == Some(StatusCode::NO_RESPONDERS) {
                    return Err(BusError::NoResponder { node });
                }
                let kind = message
                    .headers
                    .as_ref()
                    .and_then(|h| h.get(FRAME))
                    .map(|v| v.as_str().to_owned());
                match kind.as_deref() {
                    Some("done") => return Ok(message.payload.to_vec()),
                    Some("progress") => {
                        let _ = progress.send(message.payload.to_vec());
                    }
                    _ => {} // alive, or a frame of a later version
                }
            }
        });
        task.await.unwrap_or_else(|e| {
            Err(BusError::Store(StoreError::cluster(
                "waiting for a node's answer",
                e,
            )))
        })
    }

    /// Serves the requests sent to `node`: each arrives on the returned channel with its
    /// [`Responder`]. Serving stops when the receiver is dropped.
    pub fn serve(&self, node: &str) -> Result<mpsc::UnboundedReceiver<Incoming>, StoreError> {
        let (client, subject, keepalive) =
            (self.client.clone(), self.subject(node), self.keepalive);
        let subscribe = {
            let client = client.clone();
            async move {
                let subscriber = client
                    .subscribe(subject)
                    .await
                    .map_err(|e| StoreError::cluster("subscribing to the node's subject", e))?;
                // A round trip on this connection, so the server has processed the subscription
                // before we say we serve (a flush only sends it). Interest still takes a moment
                // to reach the other servers of a cluster: callers retry "no responders".
                client
                    .request("$JS.API.INFO", bytes::Bytes::new())
                    .await
                    .map_err(|e| StoreError::cluster("subscribing to the node's subject", e))?;
                Ok::<_, StoreError>(subscriber)
            }
        };
        let handle = self.handle();
        let mut subscriber = super::runtime::block_on(&handle, subscribe)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let spawner = handle.clone();
        handle.spawn(async move {
            while let Some(message) = subscriber.next().await {
                let Some(inbox) = message.reply.clone() else {
                    continue;
                };
                let (frames, queue) = mpsc::unbounded_channel();
                spawner.spawn(pump(client.clone(), inbox.to_string(), queue, keepalive));
                let incoming = Incoming {
                    payload: message.payload.to_vec(),
                    reply: Responder { frames },
                };
                if tx.send(incoming).is_err() {
                    break;
                }
            }
        });
        Ok(rx)
    }
}

/// Publishes one answer's frames to the caller's inbox in order, with an `alive` frame whenever
/// `keepalive` passes without one; ends after `done` or when the responder is dropped.
async fn pump(
    client: async_nats::Client,
    inbox: String,
    mut queue: mpsc::UnboundedReceiver<(&'static str, Vec<u8>)>,
    keepalive: Duration,
) {
    loop {
        let (kind, bytes) = match tokio::time::timeout(keepalive, queue.recv()).await {
            Ok(Some(frame)) => frame,
            Ok(None) => return,
            Err(_) => ("alive", Vec::new()),
        };
        let mut headers = HeaderMap::new();
        headers.insert(FRAME, kind);
        let sent = client
            .publish_with_headers(inbox.clone(), headers, bytes.into())
            .await;
        if sent.is_err() || kind == "done" {
            let _ = client.flush().await;
            return;
        }
    }
}
