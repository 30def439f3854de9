//! UTC timestamps, always passed in by the caller (the core never reads a clock).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::error::TimestampError;

/// A UTC instant with microsecond precision, stored as microseconds since the Unix epoch.
///
/// In binary formats it is an `i64`; in human-readable formats (JSON) an RFC 3339 string.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The Unix epoch.
    pub const EPOCH: Timestamp = Timestamp(0);

    /// From microseconds since the Unix epoch.
    pub const fn from_unix_micros(micros: i64) -> Self {
        Self(micros)
    }

    /// Microseconds since the Unix epoch.
    pub const fn unix_micros(self) -> i64 {
        self.0
    }

    /// Milliseconds since the Unix epoch (rounded down).
    pub const fn unix_millis(self) -> i64 {
        self.0.div_euclid(1000)
    }

    /// Parses an RFC 3339 date-time such as `2026-02-15T12:00:00Z` or `...+01:00`.
    pub fn parse_rfc3339(text: &str) -> Result<Self, TimestampError> {
        let parsed =
            OffsetDateTime::parse(text, &Rfc3339).map_err(|e| TimestampError::Invalid {
                value: text.to_owned(),
                reason: e.to_string(),
            })?;
        let micros = parsed.unix_timestamp_nanos() / 1000;
        i64::try_from(micros)
            .map(Self)
            .map_err(|_| TimestampError::OutOfRange {
                value: text.to_owned(),
            })
    }

    /// Formats as RFC 3339 in UTC with microseconds, e.g. `2026-02-15T12:00:00.000000Z`.
    pub fn to_rfc3339(self) -> String {
        match OffsetDateTime::from_unix_timestamp_nanos(i128::from(self.0) * 1000) {
            Ok(t) => {
                let (year, month, day) = (t.year(), u8::from(t.month()), t.day());
                format!(
                    "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
                    t.hour(),
                    t.minute(),
                    t.second(),
                    t.microsecond()
                )
            }
            // Outside what RFC 3339 can say: show the raw number rather than failing.
            Err(_) => format!("@{}us", self.0),
        }
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({})", self.to_rfc3339())
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            serializer.serialize_str(&self.to_rfc3339())
        } else {
            serializer.serialize_i64(self.0)
        }
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            let text = String::deserialize(deserializer)?;
            Timestamp::parse_rfc3339(&text).map_err(serde::de::Error::custom)
        } else {
            i64::deserialize(deserializer).map(Timestamp)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trip() {
        let t = Timestamp::parse_rfc3339("2026-02-15T12:00:00.123456Z").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-02-15T12:00:00.123456Z");
        let offset = Timestamp::parse_rfc3339("2026-02-15T13:00:00+01:00").unwrap();
        assert_eq!(offset.to_rfc3339(), "2026-02-15T12:00:00.000000Z");
    }

    #[test]
    fn bad_input_is_an_error_quoting_it() {
        let err = Timestamp::parse_rfc3339("yesterday").unwrap_err();
        assert!(err.to_string().contains("\"yesterday\""), "{err}");
    }

    #[test]
    fn json_is_text() {
        let t = Timestamp::from_unix_micros(1_700_000_000_000_000);
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(json, "\"2023-11-14T22:13:20.000000Z\"");
        assert_eq!(serde_json::from_str::<Timestamp>(&json).unwrap(), t);
    }
}
