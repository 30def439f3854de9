//! The runtime's clock and id source (the runtime is an edge: it reads the clock; the core does
//! not). A leaf module: every other module may use it.

use std::time::{SystemTime, UNIX_EPOCH};

use legio_core::Timestamp;

/// The current time.
pub(crate) fn now() -> Timestamp {
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    Timestamp::from_unix_micros(i64::try_from(micros).unwrap_or(i64::MAX))
}

/// A fresh UUID v7.
pub(crate) fn fresh_uuid() -> uuid::Uuid {
    uuid::Uuid::now_v7()
}
