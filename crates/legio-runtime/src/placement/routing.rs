//! Routing: a command (command/, here a [`Parcel`]) on a conversation another node runs is
//! carried to that node
//! over the node bus (core NATS request/reply, `legio_store::NodeBus`) and answered there; a
//! turn's progress comes back as frames. A command for the owner ([`Place::Owner`]) on a
//! conversation nobody owns runs here (this node takes the lease); while an owner that died
//! still holds its lease (until the TTL runs out), commands to it wait and ask again; a command
//! the owner was serving when it fell silent fails as moved (its outcome is in the log, or not).
//! A question for the holder ([`Place::Holder`]) is asked once, and answered here when nobody
//! else holds the conversation or the holder does not answer.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use legio_store::{BusError, Incoming, NodeBus};
use tokio::sync::mpsc;

use serde::de::DeserializeOwned;

use super::wire::{WireAnswer, WireRequest};
use super::{Cluster, Here, Owner, Parcel, Place};
use crate::error::{ErrorCode, RuntimeError};
use crate::metrics as m;
use crate::progress::{Progress, ProgressSink};

/// What serves a command sent here: its kind, its JSON body and a sink for its progress, to
/// the JSON of its answer (`command::serve`).
pub(crate) type RequestHandler = Arc<
    dyn Fn(
            String,
            serde_json::Value,
            Option<ProgressSink>,
        ) -> Pin<Box<dyn Future<Output = Result<serde_json::Value, RuntimeError>> + Send>>
        + Send
        + Sync,
>;

/// How long a caller waits without any frame from the owner (which sends one every
/// `KEEPALIVE` while it works) before it gives the command up.
const SILENCE: Duration = Duration::from_secs(3);
/// How long past the lease TTL a command keeps asking for an owner that does not answer.
const OWNER_GRACE: Duration = Duration::from_secs(2);
/// The pause between two such asks.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Where a command runs (see `Cluster::place`).
pub(crate) enum Placed<A> {
    /// Here. Keep the guard until the command ended.
    Here(Here),
    /// The answer of the node that runs the conversation.
    There(Result<A, RuntimeError>),
}

/// Where `parcel`'s command runs: here, or the answer of the node that runs its conversation.
pub(super) async fn place<A: DeserializeOwned>(
    cluster: &Cluster,
    parcel: &Parcel<'_>,
    progress: Option<&ProgressSink>,
) -> Placed<A> {
    match parcel.place {
        Place::Owner => {
            let in_use = cluster.ownership.pin(parcel.conversation);
            match find_owner(cluster, parcel, progress).await {
                None => Placed::Here(Here::owned(in_use)),
                Some(answer) => Placed::There(answer),
            }
        }
        Place::Holder => match ask_holder(cluster, parcel, progress).await {
            None => Placed::Here(Here::asked()),
            Some(answer) => Placed::There(answer),
        },
    }
}

/// On the node a command was sent to: where it must run now, never sent on (an owner's command
/// on a conversation another node owns by now fails as moved).
pub(super) async fn served_here(
    cluster: &Cluster,
    place: Place,
    conversation: &legio_core::ConversationKey,
) -> Result<Here, RuntimeError> {
    match place {
        Place::Owner => cluster.here(conversation).await,
        Place::Holder => Ok(Here::asked()),
    }
}

/// `None`: run the command here. Otherwise the answer of the owner.
async fn find_owner<A: DeserializeOwned>(
    cluster: &Cluster,
    parcel: &Parcel<'_>,
    progress: Option<&ProgressSink>,
) -> Option<Result<A, RuntimeError>> {
    let deadline = Instant::now() + cluster.ownership.ttl() + OWNER_GRACE;
    loop {
        let node = match cluster.ownership.owner(parcel.conversation).await {
            Ok(Owner::Here) => return None,
            Ok(Owner::Node(node)) => node,
            Err(e) => return Some(Err(e)),
        };
        let answer = forward(cluster, &node, parcel, progress).await;
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

/// `None`: answer here (nobody else holds the conversation, or its holder no longer answers on
/// the bus: it died with its lease still running, and nobody runs the conversation). Otherwise
/// the holder's answer (no lease read beyond the holder's, no take, no retry).
async fn ask_holder<A: DeserializeOwned>(
    cluster: &Cluster,
    parcel: &Parcel<'_>,
    progress: Option<&ProgressSink>,
) -> Option<Result<A, RuntimeError>> {
    let node = match cluster.ownership.holder(parcel.conversation).await {
        Ok(Some(node)) if node != cluster.ownership.node() => node,
        Ok(_) => return None,
        Err(e) => return Some(Err(e)),
    };
    match forward(cluster, &node, parcel, progress).await {
        Err(RuntimeError::Bus(BusError::NoResponder { .. })) => None,
        answer => Some(answer),
    }
}

/// Sends `parcel` to `node` and waits for its answer, relaying progress.
async fn forward<A: DeserializeOwned>(
    cluster: &Cluster,
    node: &str,
    parcel: &Parcel<'_>,
    progress: Option<&ProgressSink>,
) -> Result<A, RuntimeError> {
    let failed = |message: String| RuntimeError::Remote {
        node: node.to_owned(),
        code: ErrorCode::Internal,
        message,
    };
    let kind = parcel.kind;
    let encoding = |e: serde_json::Error| failed(format!("cannot encode the {kind}: {e}"));
    let wire = WireRequest {
        kind: kind.to_owned(),
        streamed: progress.is_some(),
        body: (parcel.body)().map_err(encoding)?,
    };
    let payload = serde_json::to_vec(&wire).map_err(encoding)?;
    let (frames, mut received) = mpsc::unbounded_channel::<Vec<u8>>();
    let relay = progress.cloned().map(|sink| {
        tokio::spawn(async move {
            while let Some(bytes) = received.recv().await {
                if let Ok(step) = serde_json::from_slice::<Progress>(&bytes) {
                    let _ = sink.send(step);
                }
            }
        })
    });
    let answer = cluster.bus.request(node, payload, frames, SILENCE).await;
    if let Some(relay) = relay {
        let _ = relay.await;
    }
    let outcome = if answer.is_ok() { "ok" } else { "error" };
    metrics::counter!(m::FORWARDED_POSTS, "kind" => kind, "outcome" => outcome).increment(1);
    let answer: WireAnswer =
        serde_json::from_slice(&answer?).map_err(|e| failed(format!("unreadable answer: {e}")))?;
    answer.into_result(node)
}

/// Serves the commands sent to `node`, each on its own task, until aborted.
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

/// Runs one command sent here and sends its progress and answer back.
async fn answer(handler: RequestHandler, request: Incoming) {
    let Incoming { payload, reply } = request;
    let result = match serde_json::from_slice::<WireRequest>(&payload) {
        Ok(wire) => {
            metrics::counter!(m::SERVED_POSTS, "kind" => wire.kind.clone()).increment(1);
            if wire.streamed {
                run_streamed(&handler, wire, &reply).await
            } else {
                handler(wire.kind, wire.body, None).await
            }
        }
        Err(e) => Err(RuntimeError::Remote {
            node: "the forwarding node".into(),
            code: ErrorCode::Internal,
            message: format!("unreadable forwarded request: {e}"),
        }),
    };
    let bytes = serde_json::to_vec(&WireAnswer::of(result)).unwrap_or_default();
    reply.finish(bytes);
}

/// Runs a command with a progress sink whose steps go back as progress frames, in order.
async fn run_streamed(
    handler: &RequestHandler,
    wire: WireRequest,
    reply: &legio_store::Responder,
) -> Result<serde_json::Value, RuntimeError> {
    let (sink, mut steps) = mpsc::unbounded_channel();
    let mut run = handler(wire.kind, wire.body, Some(sink));
    let send = |step: &Progress| reply.progress(serde_json::to_vec(step).unwrap_or_default());
    let result = loop {
        tokio::select! {
            result = &mut run => break result,
            Some(step) = steps.recv() => send(&step),
        }
    };
    while let Ok(step) = steps.try_recv() {
        send(&step);
    }
    result
}
