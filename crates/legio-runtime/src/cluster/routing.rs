//! Routing: a request (a post, a host's turn with tools too, a reset, a heartbeat, a host's tool
//! results, an MCP client's tool call) to a conversation another node owns is
//! carried to that node over the node bus (core NATS request/reply, `legio_store::NodeBus`) and
//! answered there; a post's progress comes back as frames. A request to a conversation nobody
//! owns is run here (this node takes the lease). While an owner that died still holds its lease
//! (until the TTL runs out), requests to it wait and ask again; a request the owner was serving
//! when it fell silent fails as moved (its outcome is in the log, or not).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use legio_store::{BusError, Incoming, NodeBus};
use tokio::sync::mpsc;

use super::wire::{WireAnswer, WireProgress, WireRequest};
use super::{Answered, Cluster, Forwarded, InUse, Owner};
use crate::error::{ErrorCode, RuntimeError};
use crate::metrics as m;
use crate::progress::ProgressSink;

/// What runs a forwarded request on the owner: the runtime's own paths, told not to forward.
pub(crate) type RequestHandler = Arc<
    dyn Fn(
            Forwarded,
            Option<ProgressSink>,
        ) -> Pin<Box<dyn Future<Output = Result<Answered, RuntimeError>> + Send>>
        + Send
        + Sync,
>;

/// How long a caller waits without any frame from the owner (which sends one every
/// `KEEPALIVE` while it works) before it gives the request up.
const SILENCE: Duration = Duration::from_secs(3);
/// How long past the lease TTL a request keeps asking for an owner that does not answer.
const OWNER_GRACE: Duration = Duration::from_secs(2);
/// The pause between two such asks.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Where a request runs (see `Cluster::elsewhere`).
pub(crate) enum Routed {
    /// Here: this node owns the conversation. Keep the guard until the request ended, so the
    /// conversation is not released under it.
    Here(InUse),
    /// The owner's answer.
    There(Result<Answered, RuntimeError>),
}

/// Where `request` runs: here, or the owner's answer (see `Cluster::elsewhere`).
pub(super) async fn route(
    cluster: &Cluster,
    request: &Forwarded,
    progress: Option<&ProgressSink>,
    forwarded: bool,
) -> Routed {
    let in_use = cluster.ownership.pin(request.conversation());
    match find_owner(cluster, request, progress, forwarded).await {
        None => Routed::Here(in_use),
        Some(answer) => Routed::There(answer),
    }
}

/// `None`: run the request here. Otherwise the answer of the owner.
async fn find_owner(
    cluster: &Cluster,
    request: &Forwarded,
    progress: Option<&ProgressSink>,
    forwarded: bool,
) -> Option<Result<Answered, RuntimeError>> {
    let deadline = Instant::now() + cluster.ownership.ttl() + OWNER_GRACE;
    loop {
        let node = match cluster.ownership.owner(request.conversation()).await {
            Ok(Owner::Here) => return None,
            Ok(Owner::Node(node)) => node,
            Err(e) => return Some(Err(e)),
        };
        if forwarded {
            return Some(Err(RuntimeError::Moved {
                conversation: request.conversation().to_string(),
                reason: format!("node {node} owns it now"),
            }));
        }
        let answer = forward(cluster, &node, request, progress).await;
        let retry = match &answer {
            Err(RuntimeError::Bus(BusError::NoResponder { .. })) => true,
            Err(RuntimeError::Remote { code, .. }) => *code == ErrorCode::Unavailable,
            _ => false,
        };
        if !(retry && Instant::now() < deadline) {
            return Some(answer);
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

/// Sends `request` to `node` (known to hold its conversation) and waits for its answer (its
/// progress relayed to `progress`), with no retry: for a request only the holder can answer,
/// that takes no conversation.
pub(super) async fn ask(
    cluster: &Cluster,
    node: &str,
    request: &Forwarded,
    progress: Option<&ProgressSink>,
) -> Result<Answered, RuntimeError> {
    forward(cluster, node, request, progress).await
}

/// Sends `request` to `node` and waits for its answer, relaying progress.
async fn forward(
    cluster: &Cluster,
    node: &str,
    request: &Forwarded,
    progress: Option<&ProgressSink>,
) -> Result<Answered, RuntimeError> {
    let wire = WireRequest::new(request, progress.is_some());
    let payload = serde_json::to_vec(&wire).map_err(|e| RuntimeError::Remote {
        node: node.to_owned(),
        code: ErrorCode::Internal,
        message: format!("cannot encode the {}: {e}", request.kind()),
    })?;
    let (frames, mut received) = mpsc::unbounded_channel::<Vec<u8>>();
    let relay = progress.cloned().map(|sink| {
        tokio::spawn(async move {
            while let Some(bytes) = received.recv().await {
                if let Ok(step) = serde_json::from_slice::<WireProgress>(&bytes) {
                    let _ = sink.send(step.into());
                }
            }
        })
    });
    let answer = cluster.bus.request(node, payload, frames, SILENCE).await;
    if let Some(relay) = relay {
        let _ = relay.await;
    }
    let outcome = if answer.is_ok() { "ok" } else { "error" };
    metrics::counter!(m::FORWARDED_POSTS, "kind" => request.kind(), "outcome" => outcome)
        .increment(1);
    let answer: WireAnswer =
        serde_json::from_slice(&answer?).map_err(|e| RuntimeError::Remote {
            node: node.to_owned(),
            code: ErrorCode::Internal,
            message: format!("unreadable answer: {e}"),
        })?;
    answer.into_result(node)
}

/// Serves the requests forwarded to `node`, each on its own task, until aborted.
pub(super) fn serve(
    bus: &NodeBus,
    node: &str,
    handler: RequestHandler,
) -> Result<tokio::task::JoinHandle<()>, RuntimeError> {
    let mut incoming = bus.serve(node)?;
    Ok(tokio::spawn(async move {
        while let Some(request) = incoming.recv().await {
            tokio::spawn(answer(Arc::clone(&handler), request));
        }
    }))
}

/// Runs one forwarded request and sends its progress and answer back.
async fn answer(handler: RequestHandler, request: Incoming) {
    let Incoming { payload, reply } = request;
    let result = match serde_json::from_slice::<WireRequest>(&payload) {
        Ok(wire) => {
            let (request, streamed) = wire.into_parts();
            metrics::counter!(m::SERVED_POSTS, "kind" => request.kind()).increment(1);
            if streamed {
                run_streamed(&handler, request, &reply).await
            } else {
                handler(request, None).await
            }
        }
        Err(e) => Err(RuntimeError::Remote {
            node: "the forwarding node".into(),
            code: ErrorCode::Internal,
            message: format!("unreadable forwarded request: {e}"),
        }),
    };
    let bytes = serde_json::to_vec(&WireAnswer::of(&result)).unwrap_or_default();
    reply.finish(bytes);
}

/// Runs `request` with a progress sink whose steps go back as progress frames, in order.
async fn run_streamed(
    handler: &RequestHandler,
    request: Forwarded,
    reply: &legio_store::Responder,
) -> Result<Answered, RuntimeError> {
    let (sink, mut steps) = mpsc::unbounded_channel();
    let mut run = handler(request, Some(sink));
    let result = loop {
        tokio::select! {
            result = &mut run => break result,
            Some(step) = steps.recv() => {
                reply.progress(serde_json::to_vec(&WireProgress::from(&step)).unwrap_or_default());
            }
        }
    };
    while let Ok(step) = steps.try_recv() {
        reply.progress(serde_json::to_vec(&WireProgress::from(&step)).unwrap_or_default());
    }
    result
}
