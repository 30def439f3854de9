//! Which server a writer talks to: the one that leads the log's stream. Every publish goes to
//! the stream's leader; sent to a follower, it is forwarded over a route first, which costs the
//! servers CPU on every append (docs/cluster.md, "Which server a writer talks to"). A writer's
//! connection moves there when the log opens, and again when the leader changes (checked every
//! [`LEADER_CHECK`] by the dispatcher, which moves it only with no append in flight).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_nats::connection::State;
use async_nats::jetstream::stream::Stream;
use futures_util::stream::{FuturesUnordered, StreamExt};

use super::options::{NatsOptions, Steer};
use super::sync::lock;

/// How often a writer asks which server leads its stream.
pub(super) const LEADER_CHECK: Duration = Duration::from_secs(5);

/// How long a leader the connection could not reach is left alone (three checks).
const RETRY_AFTER: Duration = Duration::from_secs(15);

/// A move of a writer's connection: to the server named `leader`, at `url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Move {
    leader: String,
    url: String,
}

/// Keeps a writer's connection on the server that leads the stream. Without a leader found (one
/// server, an election, no configured URL whose server leads) the connection stays where it is,
/// and the log says why at debug level.
#[derive(Default)]
pub(super) struct Steering {
    steer: Steer,
    /// Server names that answered at a configured URL.
    urls: Mutex<HashMap<String, String>>,
    /// A leader the connection could not reach, and when.
    failed: Mutex<Option<(String, Instant)>>,
}

impl Steering {
    /// What the writer's client is connected with: its (re)connects go where this steers.
    pub(super) fn steer(&self) -> Steer {
        self.steer.clone()
    }

    /// The move that puts `client` on the server leading `stream`, if it is connected
    /// elsewhere. `fresh` asks the cluster; otherwise the stream's cached state is used when it
    /// names a leader.
    pub(super) async fn wanted(
        &self,
        options: &NatsOptions,
        client: &async_nats::Client,
        stream: &Stream,
        fresh: bool,
    ) -> Option<Move> {
        if options.servers.len() < 2 {
            return None;
        }
        let Some(leader) = leader_of(stream, fresh).await else {
            stay("the stream has no leader now");
            return None;
        };
        if client.server_info().server_name == leader || self.left_alone(&leader) {
            return None;
        }
        let known = lock(&self.urls).get(&leader).cloned();
        let url = match known {
            Some(url) => url,
            None => match url_of(options, &leader).await {
                Some(url) => {
                    lock(&self.urls).insert(leader.clone(), url.clone());
                    url
                }
                None => {
                    stay("no configured server answered as the stream's leader");
                    self.leave_alone(&leader);
                    return None;
                }
            },
        };
        Some(Move { leader, url })
    }

    /// Moves `client` to `to`'s server (its next connect steered there, then a forced
    /// reconnect) and waits up to `timeout` for it to land (it logs whether it did). Call it with nothing
    /// in flight on `client`: a reply the reconnect cuts off is only retried after its timeout.
    /// A client that is not connected now (reconnecting on its own) is left alone: the next
    /// check finds where it went.
    pub(super) async fn apply(&self, client: &async_nats::Client, to: Move, timeout: Duration) {
        let connected = |client: &async_nats::Client| client.connection_state() == State::Connected;
        let was = client.server_info().server_name;
        if !connected(client) || !self.steer.set(&to.url) {
            return;
        }
        if client.force_reconnect().await.is_err() {
            self.steer.clear();
            return;
        }
        let deadline = Instant::now() + timeout;
        loop {
            let now = client.server_info().server_name;
            if connected(client) && now == to.leader {
                tracing::info!(leader = %to.leader, url = %to.url,
                    "the log's connection moved to the stream's leader");
                return;
            }
            // Landed on a third server (the steered connect failed), or waited long enough.
            let elsewhere = connected(client) && now != was;
            if elsewhere || Instant::now() >= deadline {
                self.steer.clear();
                lock(&self.urls).remove(&to.leader);
                self.leave_alone(&to.leader);
                stay("the connection to the stream's leader failed");
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn left_alone(&self, leader: &str) -> bool {
        let failed = lock(&self.failed);
        failed
            .as_ref()
            .is_some_and(|(name, at)| name == leader && at.elapsed() < RETRY_AFTER)
    }

    fn leave_alone(&self, leader: &str) {
        *lock(&self.failed) = Some((leader.to_owned(), Instant::now()));
    }
}

fn stay(why: &str) {
    tracing::debug!(why, "the log's connection stays where it is");
}

/// The name of the server that leads `stream`: asked of the cluster if `fresh` or if the
/// stream's cached state names none (just created).
async fn leader_of(stream: &Stream, fresh: bool) -> Option<String> {
    let cached = stream.cached_info().cluster.as_ref();
    if let Some(leader) = cached.and_then(|c| c.leader.clone()).filter(|_| !fresh) {
        return Some(leader);
    }
    let mut asked = stream.clone();
    let info = asked.info().await.ok()?;
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
