//! The stored record format: `[format version u8][bincode 2 payload]`.
//!
//! Version 1 is the bincode 2 (`standard()` config: little endian, varint integers) encoding of
//! `legio_core::Event`, and of `AgentSessionState` for the sessions index. A later version adds a
//! decoder here and an upcast to the current types; old logs keep decoding.

use legio_core::{AgentSessionState, Event};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Result, StoreError};

/// The format version written by this build.
pub const FORMAT_VERSION: u8 = 1;

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(128);
    out.push(FORMAT_VERSION);
    bincode::serde::encode_into_std_write(value, &mut out, config())
        .map_err(|e| StoreError::io("encoding a record", e))?;
    Ok(out)
}

fn decode<T: DeserializeOwned>(
    bytes: &[u8],
    what: impl Fn() -> String,
    seq_hint: legio_core::Seq,
) -> Result<T> {
    let Some((&version, payload)) = bytes.split_first() else {
        return Err(StoreError::Corrupt {
            what: what(),
            reason: "empty record".into(),
        });
    };
    match version {
        1 => {
            let (value, used) =
                bincode::serde::decode_from_slice(payload, config()).map_err(|e| {
                    StoreError::Corrupt {
                        what: what(),
                        reason: e.to_string(),
                    }
                })?;
            if used != payload.len() {
                return Err(StoreError::Corrupt {
                    what: what(),
                    reason: format!("{} trailing bytes after the record", payload.len() - used),
                });
            }
            Ok(value)
        }
        other => Err(StoreError::UnknownFormatVersion {
            seq: seq_hint,
            version: other,
            known: FORMAT_VERSION,
        }),
    }
}

/// Encodes an event as a versioned record.
pub fn encode_event(event: &Event) -> Result<Vec<u8>> {
    encode(event)
}

/// Decodes a versioned event record stored at `seq`.
pub fn decode_event(seq: legio_core::Seq, bytes: &[u8]) -> Result<Event> {
    decode(bytes, || format!("at seq {seq}"), seq)
}

pub(crate) fn encode_state(state: &AgentSessionState) -> Result<Vec<u8>> {
    encode(state)
}

pub(crate) fn decode_state(
    bytes: &[u8],
    conversation: &str,
    agent: &str,
) -> Result<AgentSessionState> {
    decode(
        bytes,
        || format!("session state {conversation}/{agent}"),
        legio_core::Seq::ZERO,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use legio_core::Seq;

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bytes in [
            &[][..],
            &[1][..],
            &[1, 0xff, 0xff, 0xff][..],
            &[1, 9, 9, 9, 9, 9, 9][..],
        ] {
            let err = decode_event(Seq(3), bytes).unwrap_err();
            assert!(
                matches!(err, StoreError::Corrupt { .. }),
                "{bytes:?}: {err}"
            );
        }
        let err = decode_event(Seq(3), &[7, 0]).unwrap_err();
        assert!(
            matches!(err, StoreError::UnknownFormatVersion { version: 7, .. }),
            "{err}"
        );
    }
}
