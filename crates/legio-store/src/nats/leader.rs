//! Which server a writer talks to: the one that leads the log's stream. Every publish goes to
//! the stream's leader; sent to a follower, it is forwarded over a route first, which costs the
//! servers CPU on every append (docs/cluster.md, "Which server a writer talks to").

use std::time::Duration;

use async_nats::jetstream;

use super::options::NatsOptions;

/// How long a server may take to answer the probe that asks its name.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// A connection, its JetStream context and the log's stream through it.
type Connection = (
    async_nats::Client,
    jetstream::Context,
    jetstream::stream::Stream,
);

/// A writer's connection to the server that leads the stream when it opens, if it is
/// connected elsewhere: a follower forwards each publish to the leader over a route, which
/// costs the servers CPU on every append (docs/cluster.md, "Which server a writer talks
/// to"). The servers are then tried leader first, at every reconnect too. Without a leader
/// found (one server, an election, a server not answering its probe), the connection stays.
pub(super) async fn on_the_leader(
    options: &NatsOptions,
    client: async_nats::Client,
    js: jetstream::Context,
    stream: jetstream::stream::Stream,
) -> Connection {
    if options.servers.len() < 2 {
        return (client, js, stream);
    }
    let Some(leader) = leader_of(&stream).await else {
        return (client, js, stream);
    };
    if client.server_info().server_name == leader {
        return (client, js, stream);
    }
    let Some(first) = url_of(options, &leader).await else {
        return (client, js, stream);
    };
    let mut servers = vec![first.clone()];
    servers.extend(options.servers.iter().filter(|s| **s != first).cloned());
    let Ok(moved) = options.connect_to(&servers, true).await else {
        return (client, js, stream);
    };
    let moved_js = jetstream::ContextBuilder::new()
        .timeout(options.request_timeout)
        .build(moved.clone());
    match moved_js.get_stream(&options.stream).await {
        Ok(moved_stream) => {
            tracing::debug!(%leader, "the log's connection moved to the stream's leader");
            (moved, moved_js, moved_stream)
        }
        Err(_) => (client, js, stream),
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

/// The configured server URL whose server is named `name`: each is asked, all at once,
/// each for at most `PROBE_TIMEOUT`.
async fn url_of(options: &NatsOptions, name: &str) -> Option<String> {
    let probes = options.servers.iter().map(|url| async move {
        let probe = options.connect_to(std::slice::from_ref(url), false);
        match tokio::time::timeout(PROBE_TIMEOUT, probe).await {
            Ok(Ok(client)) if client.server_info().server_name == name => Some(url.clone()),
            _ => None,
        }
    });
    futures_util::future::join_all(probes)
        .await
        .into_iter()
        .flatten()
        .next()
}
