//! The stored record format: `[format version u8][bincode 2 payload]`.
//!
//! Version 1 is the bincode 2 (`standard()` config: little endian, varint integers) encoding of
//! `legio_core::Event`, and of `AgentSessionState` for the sessions index. A later version adds a
//! decoder here and an upcast to the current types; old logs keep decoding.
//!
//! Session states (a derived index) are at version 2: the state gained `latest_summary`. A
//! version-1 state decodes through [`StateV1`] and is upcast with no summary (builds that wrote
//! version 1 never recorded summaries). Events are still version 1.

use legio_core::{
    AgentName, AgentSessionState, ConversationKey, Event, FailedInfo, Seq, SessionInfo, TokenUsage,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Result, StoreError};

/// The format version of events written by this build.
pub const FORMAT_VERSION: u8 = 1;

/// The format version of session states written by this build.
pub const STATE_FORMAT_VERSION: u8 = 2;

/// A session state as version 1 stored it (before `latest_summary`).
#[derive(serde::Deserialize)]
struct StateV1 {
    conversation: ConversationKey,
    agent: AgentName,
    last_seq: Seq,
    current: Option<SessionInfo>,
    failed: Option<FailedInfo>,
    sessions_opened: u64,
    total_usage: TokenUsage,
}

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// The most a decode may claim (1 GiB), far above any record (`store.max_message_bytes` is 1 MiB
/// by default). Found by fuzzing (issue 16): without a limit, a damaged length prefix made bincode
/// allocate that many bytes before noticing the record is shorter, and the process aborted
/// (`memory allocation of 906832281601540208 bytes failed`). With it, such a length is an error.
const DECODE_LIMIT: usize = 1 << 30;

fn decode_config() -> bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Varint,
    bincode::config::Limit<DECODE_LIMIT>,
> {
    config().with_limit::<DECODE_LIMIT>()
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    encode_as(FORMAT_VERSION, value)
}

fn encode_as<T: Serialize>(version: u8, value: &T) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(128);
    out.push(version);
    bincode::serde::encode_into_std_write(value, &mut out, config())
        .map_err(|e| StoreError::io("encoding a record", e))?;
    Ok(out)
}

fn decode<T: DeserializeOwned>(
    bytes: &[u8],
    what: impl Fn() -> String,
    seq_hint: legio_core::Seq,
) -> Result<T> {
    match split(bytes, &what)? {
        (1, payload) => payload_of(payload, &what),
        (other, _) => Err(StoreError::UnknownFormatVersion {
            seq: seq_hint,
            version: other,
            known: FORMAT_VERSION,
        }),
    }
}

fn split<'a>(bytes: &'a [u8], what: &impl Fn() -> String) -> Result<(u8, &'a [u8])> {
    let Some((&version, payload)) = bytes.split_first() else {
        return Err(StoreError::Corrupt {
            what: what(),
            reason: "empty record".into(),
        });
    };
    Ok((version, payload))
}

fn payload_of<T: DeserializeOwned>(payload: &[u8], what: &impl Fn() -> String) -> Result<T> {
    let (value, used) =
        bincode::serde::decode_from_slice(payload, decode_config()).map_err(|e| {
            StoreError::Corrupt {
                what: what(),
                reason: decode_reason(&e),
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

/// Why bincode could not decode a record, in words: its own `Display` prints the error's `Debug`
/// (`OtherString("invalid value: ...")`), which is no text for an operator.
fn decode_reason(e: &bincode::error::DecodeError) -> String {
    use bincode::error::DecodeError as E;
    match e {
        E::OtherString(text) => text.clone(),
        E::Other(text) => (*text).to_owned(),
        E::UnexpectedEnd { additional } => {
            format!("the record ends early ({additional} more bytes expected)")
        }
        E::LimitExceeded => "a length in the record is over the size limit".to_owned(),
        E::Utf8 { inner } => format!("a text in the record is not UTF-8 ({inner})"),
        E::InvalidBooleanValue(value) => format!("{value} where a boolean (0 or 1) belongs"),
        E::UnexpectedVariant {
            type_name, found, ..
        } => format!("variant {found} of {type_name} does not exist"),
        _ => "the bytes do not form a record".to_owned(),
    }
}

/// Encodes an event as a versioned record.
pub fn encode_event(event: &Event) -> Result<Vec<u8>> {
    encode(event)
}

/// Decodes a versioned event record stored at `seq`.
///
/// A version-1 message goes through the hand decoder (`message_codec.rs`), which accepts
/// exactly what serde would and builds the same event with fewer copies; everything else, and
/// any bytes it does not accept, through serde ([`decode_event_with_serde`]).
pub fn decode_event(seq: legio_core::Seq, bytes: &[u8]) -> Result<Event> {
    if let Some((&FORMAT_VERSION, payload)) = bytes.split_first() {
        if payload.len() < DECODE_LIMIT {
            if let Some(event) = crate::message_codec::decode_message_posted(payload) {
                return Ok(event);
            }
        }
    }
    decode_event_with_serde(seq, bytes)
}

/// Decodes a versioned event record stored at `seq` through serde only: the reference the hand
/// decoder is tested against, and the decoder of every record it does not take.
pub(crate) fn decode_event_with_serde(seq: legio_core::Seq, bytes: &[u8]) -> Result<Event> {
    decode(bytes, || format!("at seq {seq}"), seq)
}

pub(crate) fn encode_state(state: &AgentSessionState) -> Result<Vec<u8>> {
    encode_as(STATE_FORMAT_VERSION, state)
}

pub(crate) fn decode_state(
    bytes: &[u8],
    conversation: &str,
    agent: &str,
) -> Result<AgentSessionState> {
    let what = || format!("session state {conversation}/{agent}");
    match split(bytes, &what)? {
        (1, payload) => {
            let v1: StateV1 = payload_of(payload, &what)?;
            Ok(AgentSessionState {
                conversation: v1.conversation,
                agent: v1.agent,
                last_seq: v1.last_seq,
                current: v1.current,
                failed: v1.failed,
                sessions_opened: v1.sessions_opened,
                total_usage: v1.total_usage,
                latest_summary: None,
            })
        }
        (STATE_FORMAT_VERSION, payload) => payload_of(payload, &what),
        (other, _) => Err(StoreError::UnknownFormatVersion {
            seq: Seq::ZERO,
            version: other,
            known: STATE_FORMAT_VERSION,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use legio_core::{Seq, SummaryRef};

    /// A version-1 state (as an older build wrote it) decodes, upcast with no summary; a state
    /// written now round-trips with its summary.
    #[test]
    fn version_one_states_upcast_and_version_two_round_trips() {
        #[derive(Serialize)]
        struct WrittenV1 {
            conversation: ConversationKey,
            agent: AgentName,
            last_seq: Seq,
            current: Option<SessionInfo>,
            failed: Option<FailedInfo>,
            sessions_opened: u64,
            total_usage: TokenUsage,
        }
        let conversation = ConversationKey::new("t:1").unwrap();
        let agent = AgentName::new("ann").unwrap();
        let old = WrittenV1 {
            conversation: conversation.clone(),
            agent: agent.clone(),
            last_seq: Seq(9),
            current: None,
            failed: None,
            sessions_opened: 2,
            total_usage: TokenUsage::default(),
        };
        let bytes = encode_as(1, &old).unwrap();
        let state = decode_state(&bytes, "t:1", "ann").unwrap();
        assert_eq!(state.last_seq, Seq(9));
        assert_eq!(state.sessions_opened, 2);
        assert_eq!(state.latest_summary, None);

        let mut now = AgentSessionState::new(conversation, agent);
        now.latest_summary = Some(SummaryRef {
            event: Seq(12),
            covers_up_to: Seq(10),
        });
        let bytes = encode_state(&now).unwrap();
        assert_eq!(bytes[0], STATE_FORMAT_VERSION);
        assert_eq!(decode_state(&bytes, "t:1", "ann").unwrap(), now);
        let err = decode_state(&[9, 0], "t:1", "ann").unwrap_err();
        assert!(
            matches!(err, StoreError::UnknownFormatVersion { version: 9, .. }),
            "{err}"
        );
    }

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
            // Words, not bincode's `Debug` (`OtherString("...")`, `UnexpectedEnd { .. }`).
            let text = err.to_string();
            assert!(!text.contains('(') || !text.contains('"'), "{text}");
            assert!(!text.contains(" { "), "{text}");
        }
        let err = decode_event(Seq(3), &[7, 0]).unwrap_err();
        assert!(
            matches!(err, StoreError::UnknownFormatVersion { version: 7, .. }),
            "{err}"
        );
    }

    /// The fuzzer's case (issue 16): a message whose text length prefix was damaged into a huge
    /// number aborted the process (bincode allocated that length first); now it is an error.
    #[test]
    fn a_damaged_length_prefix_is_an_error_not_an_abort() {
        use legio_core::{Audience, ConversationKey, Message, MessageId, Participant, Timestamp};
        let at = Timestamp::from_unix_micros(1_771_156_800_000_000);
        let event = Event::MessagePosted(Message::text(
            MessageId::from_parts(at, [7; 10]),
            ConversationKey::new("t:1").unwrap(),
            Participant::parse("user").unwrap(),
            Audience::All,
            "hello fuzz",
            at,
        ));
        let bytes = encode_event(&event).unwrap();
        let text = bytes.windows(10).position(|w| w == b"hello fuzz").unwrap();
        assert_eq!(bytes[text - 1], 10, "a one-byte length before the text");
        // bincode's varint: 253 then a little-endian u64.
        let mut damaged = bytes[..text - 1].to_vec();
        damaged.push(253);
        damaged.extend_from_slice(&906_832_281_601_540_208u64.to_le_bytes());
        damaged.extend_from_slice(&bytes[text..]);
        let err = decode_event(Seq(3), &damaged).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
        // The undamaged record still decodes under the limit.
        assert_eq!(decode_event(Seq(3), &bytes).unwrap(), event);
    }
}
