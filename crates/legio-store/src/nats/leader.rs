//! Which server a writer talks to: the one that leads the log's stream. Every publish goes to
//! the stream's leader; sent to a follower, it is forwarded over a route first, which costs the
//! servers CPU on every append (docs/cluster.md, "Which server a writer talks to").

use async_nats::jetstream;
use futures_util::stream::{FuturesUnordered, StreamExt};

use super::options::NatsOptions;

/// A connection, its JetStream context and the log's stream through it.
type Connection = (
    async_nats::Client,
    jetstream::Context,
    jetstream::stream::Stream,
);

/// A writer's connection to the server that leads the stream when it opens, if it is
/// connected elsewhere: a follower forwards each publish to the leader over a route, which
/// costs the servers CPU on every append (docs/cluster.md, "Which server a writer talks
/// to"). Only the first connection goes there; a reconnect picks a server as any does. Without
/// a leader found (one server, an election, no configured URL whose server leads), the
/// connection stays, and the log says why at debug level.
pub(super) async fn on_the_leader(
    options: &NatsOptions,
    client: async_nats::Client,
    js: jetstream::Context,
    stream: jetstream::stream::Stream,
) -> Connection {
    let stay = |why: &str| {
        tracing::debug!(why, "the log's connection stays where it is");
    };
    if options.servers.len() < 2 {
        return (client, js, stream);
    }
    let Some(leader) = leader_of(&stream).await else {
        stay("the stream has no leader now");
        return (client, js, stream);
    };
    if client.server_info().server_name == leader {
        return (client, js, stream);
    }
    let Some(url) = url_of(options, &leader).await else {
        stay("no configured server answered as the stream's leader");
        return (client, js, stream);
    };
    let moved = match options.connect_to(&options.servers, Some(&url)).await {
        Ok(moved) if moved.server_info().server_name == leader => moved,
        _ => {
            stay("the connection to the stream's leader failed");
            return (client, js, stream);
        }
    };
    let moved_js = jetstream::ContextBuilder::new()
        .timeout(options.request_timeout)
        .build(moved.clone());
    match moved_js.get_stream(&options.stream).await {
        Ok(moved_stream) => {
            tracing::debug!(%leader, "the log's connection moved to the stream's leader");
            (moved, moved_js, moved_stream)
        }
        Err(_) => {
            stay("the stream could not be read through the leader");
            (client, js, stream)
        }
    }
}

/// The name of the server that leads `stream`, as it was opened or, if it had none then (just
/// created), as it is now.
async fn leader_of(stream: &jetstream::stream::Stream) -> Option<String> {
    let cached = stream.cached_info().cluster.as_ref();
    if let Some(leader) = cached.and_then(|c| c.leader.clone()) {
        return Some(leader);
    }
    let mut fresh = stream.clone();
    let info = fresh.info().await.ok()?;
    info.cluster.as_ref()?.leader.clone()
}

/// The configured server URL whose server is named `name`: each is asked at once, for up to
/// `request_timeout`, and the first that answers with that name wins.
async fn url_of(options: &NatsOptions, name: &str) -> Option<String> {
    let mut probes: FuturesUnordered<_> = options
        .servers
        .iter()
        .map(|url| async move {
            let probe = options.connect_to(std::slice::from_ref(url), None);
            match tokio::time::timeout(options.request_timeout, probe).await {
                Ok(Ok(client)) if client.server_info().server_name == name => Some(url.clone()),
                _ => None,
            }
        })
        .collect();
    while let Some(answer) = probes.next().await {
        if answer.is_some() {
            return answer;
        }
    }
    None
}
