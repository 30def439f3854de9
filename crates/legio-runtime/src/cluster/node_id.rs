//! One process per node id: a node about to start checks that no running process holds its id,
//! by its presence lease (`legio:node:<id>`). A running node renews that lease every TTL/3; one
//! that stopped gracefully released it; one that crashed left it to expire. So if the lease is
//! held under this id, the start watches it for a renewal period and a margin: renewed, another
//! process runs as this node and the start fails (two processes with one id would take each
//! other's leases back by revision, and both answer the id's forwarded requests); gone or not
//! renewed, it was this node's crashed process, and the start goes on (taking it back).

use std::time::{Duration, Instant};

use legio_store::{node_lease_name, Leases};

use crate::error::RuntimeError;

/// Beyond the renewal period, how long a running holder's renewal may take to show.
const MARGIN: Duration = Duration::from_secs(1);
/// How often the lease is read while watching.
const POLL: Duration = Duration::from_millis(200);

/// Fails with [`RuntimeError::NodeIdInUse`] if another running process holds `node`'s presence
/// lease (blocking: up to TTL/3 + 1 s when a lease under this id is found).
pub(crate) fn check_node_id_free(leases: &Leases, node: &str) -> Result<(), RuntimeError> {
    let name = node_lease_name(node);
    let Some((first, age)) = leases.get(&name)? else {
        return Ok(());
    };
    let watch = leases.ttl() / 3 + MARGIN;
    tracing::warn!(
        node,
        age = ?age,
        "node {node}'s presence lease is held: by this node's previous process if it crashed, \
         or by another process running as {node}; watching it for {watch:?} for a renewal"
    );
    let started = Instant::now();
    while started.elapsed() < watch {
        std::thread::sleep(POLL);
        match leases.get(&name)? {
            None => return Ok(()),
            Some((now, _)) if now.revision != first.revision => {
                return Err(RuntimeError::NodeIdInUse {
                    node: node.to_owned(),
                    revisions: (first.revision, now.revision),
                })
            }
            Some(_) => {}
        }
    }
    tracing::info!(
        node,
        "node {node}'s presence lease was not renewed: taking it back"
    );
    Ok(())
}
