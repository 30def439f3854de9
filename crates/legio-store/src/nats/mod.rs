//! The NATS JetStream backend: [`NatsLog`] (the event log on a replicated stream) and
//! [`Leases`] (conversation ownership in a key-value bucket). The only code besides the sled log
//! that names a storage engine. [`NodeBus`] carries requests between nodes (core NATS
//! request/reply). See `docs/cluster.md`.

mod backoff;
mod bucket;
mod bus;
mod grouping;
mod inner;
mod leader;
mod lease;
mod log;
mod options;
mod projection;
mod publish;
mod reader;
mod runtime;
mod secret;
mod subject;
mod sync;
mod verify;
mod write;

pub use bus::{BusError, Incoming, NodeBus, Responder};
pub use lease::{node_lease_name, Lease, LeaseError, Leases};
pub use log::NatsLog;
pub use options::{NatsAuth, NatsOptions, NatsTls};
pub use secret::shared_secret;
pub use write::MAX_BATCH_EVENTS;
