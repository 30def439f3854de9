//! legio-store: the append-only event log, the source of truth of a legion.
//!
//! [`EventLog`] is the contract; [`SledLog`] is the durable implementation (the only code in legio
//! that names sled) and [`MemoryLog`] the in-memory one for tests. Both share one engine: seqs,
//! indexes, reads and verify are written once. [`NatsLog`] keeps the log on a NATS JetStream
//! cluster instead (its own write path and projections; `docs/cluster.md`), and [`Leases`] keeps
//! who owns which conversation there. See `docs/storage.md` for the write path and what a
//! crash can lose.

mod backend;
mod codec;
mod copy;
mod damage;
mod engine;
mod error;
mod error_source;
mod group;
mod keys;
mod layout;
mod log;
mod memory;
mod message_codec;
pub mod metrics;
mod migrate;
mod nats;
mod options;
mod salvage;
mod sled_backend;
mod sled_log;
#[cfg(test)]
mod test_events;
#[doc(hidden)]
pub mod testing;
mod verify;

pub use codec::{decode_event, encode_event, FORMAT_VERSION};
pub use engine::check_event;
pub use error::{IoCause, Result, StoreError};
pub use error_source::ErrorSource;
pub use layout::LAYOUT_VERSION;
pub use log::{AppendHandle, EventLog, Subscription};
pub use memory::MemoryLog;
pub use migrate::{MigrateProgress, Migration};
pub use nats::{
    node_lease_name, shared_secret, BusError, Incoming, Lease, LeaseError, Leases, NatsAuth,
    NatsLog, NatsOptions, NatsTls, NodeBus, Responder, MAX_BATCH_EVENTS,
};
pub use options::{Durability, StoreOptions};
pub use salvage::{LostRange, Salvaged};
pub use sled_log::{ReadAround, SledLog};
pub use verify::{Finding, VerifyProgress, VerifyReport, MAX_FINDINGS};
