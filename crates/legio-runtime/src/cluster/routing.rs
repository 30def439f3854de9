//! Routing: a post to a conversation another node owns is carried to that node over the node
//! bus (core NATS request/reply, `legio_store::NodeBus`) and answered there; its progress comes
//! back as frames. A post to a conversation nobody owns is run here (this node takes the lease).
//! While an owner that died still holds its lease (until the TTL runs out), posts to it wait and
//! ask again; a post the owner was serving when it fell silent fails as moved (its outcome is in
//! the log, or not).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use legio_store::{BusError, Incoming, NodeBus};
use tokio::sync::mpsc;

use super::wire::{WireAnswer, WirePost, WireProgress};
use super::{Cluster, ForwardedPost, Owner};
use crate::error::{ErrorCode, RuntimeError};
use crate::metrics as m;
use crate::progress::ProgressSink;
use crate::reply::Posted;

/// What runs a forwarded post on the owner: the runtime's own post path, told not to forward.
pub(crate) type PostHandler = Arc<
    dyn Fn(
            ForwardedPost,
            Option<ProgressSink>,
        ) -> Pin<Box<dyn Future<Output = Result<Posted, RuntimeError>> + Send>>
        + Send
        + Sync,
>;

/// How long a caller waits without any frame from the owner (which sends one every
/// `KEEPALIVE` while it works) before it gives the post up.
const SILENCE: Duration = Duration::from_secs(3);
/// How long past the lease TTL a post keeps asking for an owner that does not answer.
const OWNER_GRACE: Duration = Duration::from_secs(2);
/// The pause between two such asks.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// `None`: run the post here. Otherwise the answer of the owner (see `Cluster::elsewhere`).
pub(super) async fn route(
    cluster: &Cluster,
    post: &ForwardedPost,
    progress: Option<&ProgressSink>,
    forwarded: bool,
) -> Option<Result<Posted, RuntimeError>> {
    let deadline = Instant::now() + cluster.ownership.ttl() + OWNER_GRACE;
    loop {
        let node = match cluster.ownership.owner(&post.conversation).await {
            Ok(Owner::Here) => return None,
            Ok(Owner::Node(node)) => node,
            Err(e) => return Some(Err(e)),
        };
        if forwarded {
            return Some(Err(RuntimeError::Moved {
                conversation: post.conversation.to_string(),
                reason: format!("node {node} owns it now"),
            }));
        }
        let answer = forward(cluster, &node, post, progress).await;
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

/// Sends `post` to `node` and waits for its answer, relaying progress.
async fn forward(
    cluster: &Cluster,
    node: &str,
    post: &ForwardedPost,
    progress: Option<&ProgressSink>,
) -> Result<Posted, RuntimeError> {
    let payload = serde_json::to_vec(&WirePost::new(post, progress.is_some())).map_err(|e| {
        RuntimeError::Remote {
            node: node.to_owned(),
            code: ErrorCode::Internal,
            message: format!("cannot encode the post: {e}"),
        }
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
    metrics::counter!(m::FORWARDED_POSTS, "outcome" => outcome).increment(1);
    let answer: WireAnswer =
        serde_json::from_slice(&answer?).map_err(|e| RuntimeError::Remote {
            node: node.to_owned(),
            code: ErrorCode::Internal,
            message: format!("unreadable answer: {e}"),
        })?;
    answer.into_result(node)
}

/// Serves the posts forwarded to `node`, each on its own task, until aborted.
pub(super) fn serve(
    bus: &NodeBus,
    node: &str,
    handler: PostHandler,
) -> Result<tokio::task::JoinHandle<()>, RuntimeError> {
    let mut incoming = bus.serve(node)?;
    Ok(tokio::spawn(async move {
        while let Some(request) = incoming.recv().await {
            tokio::spawn(answer(Arc::clone(&handler), request));
        }
    }))
}

/// Runs one forwarded post and sends its progress and answer back.
async fn answer(handler: PostHandler, request: Incoming) {
    let Incoming { payload, reply } = request;
    metrics::counter!(m::SERVED_POSTS).increment(1);
    let result = match serde_json::from_slice::<WirePost>(&payload) {
        Ok(wire) => match wire.into_parts() {
            (post, false) => handler(post, None).await,
            (post, true) => {
                let (sink, mut steps) = mpsc::unbounded_channel();
                let mut run = handler(post, Some(sink));
                let result = loop {
                    tokio::select! {
                        result = &mut run => break result,
                        Some(step) = steps.recv() => {
                            reply.progress(serde_json::to_vec(&WireProgress::from(&step)).unwrap_or_default());
                        }
                    }
                };
                while let Ok(step) = steps.try_recv() {
                    reply.progress(
                        serde_json::to_vec(&WireProgress::from(&step)).unwrap_or_default(),
                    );
                }
                result
            }
        },
        Err(e) => Err(RuntimeError::Remote {
            node: "the forwarding node".into(),
            code: ErrorCode::Internal,
            message: format!("unreadable forwarded post: {e}"),
        }),
    };
    let bytes = serde_json::to_vec(&WireAnswer::of(&result)).unwrap_or_default();
    reply.finish(bytes);
}
