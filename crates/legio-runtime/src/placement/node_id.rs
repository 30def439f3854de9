//! One process per node id: a node about to start claims its presence lease
//! (`legio:node:<id>`) before anything else of it runs. The claim is the lease bucket's
//! create-if-absent, so of two processes starting at once under one id only one gets it. If it
//! is held under this id already, it is either this node's crashed process's (left to expire a
//! TTL after its last renewal) or another running process's (renewed every TTL/3). So the start
//! watches it until it would have expired: renewed, another process runs as this node and the
//! start fails (two processes with one id would take each other's leases back by revision and
//! both answer the id's forwarded requests); gone or not renewed, the node takes it.

use std::time::{Duration, Instant};

use legio_store::{node_lease_name, Lease, LeaseError, Leases, StoreError};

use crate::error::RuntimeError;

/// Beyond the lease's expiry, how long the watch waits (the servers expire keys on a timer).
const MARGIN: Duration = Duration::from_secs(1);
/// How often the lease is read while watching.
const POLL: Duration = Duration::from_millis(200);
/// How long a claim the cluster fails is tried again: a lease bucket just created answers
/// "503 no responders" for a moment (seen for over 400 ms on a loaded machine), an election
/// takes seconds; the log's stream creation at start waits as long.
const CLAIM_FOR: Duration = Duration::from_secs(30);

/// What the watch of a held presence lease saw.
enum Watched {
    /// Written again (another revision): a process holding it runs.
    Renewed(u64),
    /// Expired or released.
    Gone,
    /// Still there, never written again, past its expiry.
    Unrenewed,
}

/// Takes `node`'s presence lease for this process, or fails with [`RuntimeError::NodeIdInUse`]
/// if another running process holds it (blocking: up to a TTL and a second when it is held).
pub(crate) fn claim_node_id(leases: &Leases, node: &str) -> Result<Lease, RuntimeError> {
    let name = node_lease_name(node);
    let started = Instant::now();
    loop {
        let held = match leases.acquire(&name, node) {
            Ok(lease) => return Ok(lease),
            Err(LeaseError::Held {
                holder, revision, ..
            }) => Lease {
                name: name.clone(),
                holder,
                revision,
            },
            Err(LeaseError::Store(StoreError::Cluster { during, source }))
                if started.elapsed() < CLAIM_FOR =>
            {
                tracing::info!(node, during, %source, "claiming the node's presence lease failed; trying again");
                std::thread::sleep(POLL);
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let (held, age) = match leases.get(&name)? {
            Some((now, age)) if now == held => (held, age),
            // Written since the refused create: only a process running as this node writes it.
            Some((now, _)) if now.holder == node => {
                return Err(RuntimeError::NodeIdInUse {
                    node: node.to_owned(),
                    revisions: (held.revision, now.revision),
                })
            }
            _ => continue, // expired meanwhile: claim again
        };
        let watch = leases.ttl().saturating_sub(age) + MARGIN;
        tracing::warn!(
            node,
            "node {node}'s presence lease is held (last written {age:?} ago): by this node's \
             previous process if it stopped without releasing it, or by another process running \
             as {node}; watching it for {watch:?} for a renewal"
        );
        match watch_lease(leases, &held, watch)? {
            Watched::Renewed(now) => {
                return Err(RuntimeError::NodeIdInUse {
                    node: node.to_owned(),
                    revisions: (held.revision, now),
                })
            }
            Watched::Gone => continue,
            Watched::Unrenewed => match leases.renew(&held) {
                Ok(lease) => {
                    tracing::info!(
                        node,
                        "node {node}'s presence lease was not renewed: took it back"
                    );
                    return Ok(lease);
                }
                Err(LeaseError::Lost { .. }) => continue,
                Err(e) => return Err(e.into()),
            },
        }
    }
}

/// Reads `held` every [`POLL`] for `watch`: until it is written again or gone.
fn watch_lease(leases: &Leases, held: &Lease, watch: Duration) -> Result<Watched, RuntimeError> {
    let started = Instant::now();
    while started.elapsed() < watch {
        std::thread::sleep(POLL);
        match leases.get(&held.name)? {
            None => return Ok(Watched::Gone),
            Some((now, _)) if now.revision != held.revision => {
                return Ok(Watched::Renewed(now.revision))
            }
            Some(_) => {}
        }
    }
    Ok(Watched::Unrenewed)
}
