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
        self.with_rfc3339(str::to_owned)
    }

    /// Calls `f` with [`Timestamp::to_rfc3339`]'s text, built on the stack for the years 0 to
    /// 9999 (no allocation: JSON export and replay format one per event).
    pub fn with_rfc3339<R>(self, f: impl FnOnce(&str) -> R) -> R {
        let Ok(t) = OffsetDateTime::from_unix_timestamp_nanos(i128::from(self.0) * 1000) else {
            // Outside what RFC 3339 can say: show the raw number rather than failing.
            return f(&format!("@{}us", self.0));
        };
        let (year, month, day) = (t.year(), u8::from(t.month()), t.day());
        let Ok(year @ 0..=9999) = u32::try_from(year) else {
            return f(&format!(
                "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
                t.hour(),
                t.minute(),
                t.second(),
                t.microsecond()
            ));
        };
        let mut text = *b"0000-00-00T00:00:00.000000Z";
        let fields = [
            (0, 4, year),
            (5, 2, month.into()),
            (8, 2, day.into()),
            (11, 2, t.hour().into()),
            (14, 2, t.minute().into()),
            (17, 2, t.second().into()),
            (20, 6, t.microsecond()),
        ];
        for (at, width, mut value) in fields {
            for digit in text[at..at + width].iter_mut().rev() {
                // A digit: `value % 10` is below 10.
                *digit = b'0' + (value % 10) as u8;
                value /= 10;
            }
        }
        // Only ASCII digits and separators were written.
        f(std::str::from_utf8(&text).unwrap_or_default())
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
            self.with_rfc3339(|text| serializer.serialize_str(text))
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

    /// The text the stack-built formatting must match: `time`'s fields through `format!`.
    fn reference(micros: i64) -> String {
        match OffsetDateTime::from_unix_timestamp_nanos(i128::from(micros) * 1000) {
            Ok(t) => format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
                t.year(),
                u8::from(t.month()),
                t.day(),
                t.hour(),
                t.minute(),
                t.second(),
                t.microsecond()
            ),
            Err(_) => format!("@{micros}us"),
        }
    }

    #[test]
    fn rfc3339_text_matches_the_reference_formatting_at_every_kind_of_instant() {
        let year = 31_556_952_000_000_i64;
        let mut instants = vec![0, -1, 1, 999_999, 1_700_000_000_123_456, i64::MIN, i64::MAX];
        instants.extend([-1970, 8029, 8030, 10_000].map(|years| years * year));
        // A pseudo-random walk over ±300 years, to every microsecond digit.
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            instants.push((x % (600 * year as u64)) as i64 - 300 * year);
        }
        for micros in instants {
            let t = Timestamp::from_unix_micros(micros);
            assert_eq!(t.to_rfc3339(), reference(micros), "at {micros} µs");
        }
    }
}
