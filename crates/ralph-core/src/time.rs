//! UTC timestamps in RFC 3339 form, as the state, the log and the clients
//! write them (whole seconds; the clients' milliseconds are read), over
//! `humantime`.

use std::time::{SystemTime, UNIX_EPOCH};

/// Parses a timestamp written by [`rfc3339_of_secs`] (`YYYY-MM-DDTHH:MM:SSZ`), or
/// by Claude Code in its transcript, with a fraction of a second
/// (`…:SS.123Z`; the fraction is dropped).
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    // Only the shape ralph and the clients write: `YYYY-MM-DDTHH:MM:SS`, an
    // optional fraction of one or more digits, `Z`.
    let b = text.as_bytes();
    let shaped = b.len() >= 20
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b[b.len() - 1] == b'Z'
        && match &b[19..b.len() - 1] {
            [] => true,
            [b'.', digits @ ..] => !digits.is_empty() && digits.iter().all(u8::is_ascii_digit),
            _ => false,
        };
    if !shaped {
        return None;
    }
    humantime::parse_rfc3339(text).ok()
}

/// Seconds since the epoch of a timestamp [`parse_rfc3339`] reads.
pub fn epoch_secs(text: &str) -> Option<u64> {
    parse_rfc3339(text)?
        .duration_since(UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs())
}

/// The last second RFC 3339 can write (9999-12-31T23:59:59Z).
const MAX_RFC3339_SECS: u64 = 253_402_300_799;

/// A time given in seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ`
/// (UTC), the form the state file uses for every time it records; a later
/// one than RFC 3339 can write is written as its last second, never a panic.
pub fn rfc3339_of_secs(secs: u64) -> String {
    let at = UNIX_EPOCH + std::time::Duration::from_secs(secs.min(MAX_RFC3339_SECS));
    humantime::format_rfc3339_seconds(at).to_string()
}

/// A moment in UTC, to the second: every time the state and the audit
/// log record. Written (and read) as RFC 3339 (`2026-11-25T07:15:23Z`);
/// the clients' milliseconds are read and dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(u64);

impl Timestamp {
    /// Now.
    pub fn now() -> Timestamp {
        Timestamp::of(SystemTime::now())
    }

    /// `secs` seconds after the epoch (at most the last second RFC 3339 can write).
    pub const fn from_secs(secs: u64) -> Timestamp {
        if secs > MAX_RFC3339_SECS {
            Timestamp(MAX_RFC3339_SECS)
        } else {
            Timestamp(secs)
        }
    }

    /// The moment `at`, to the second.
    pub fn of(at: SystemTime) -> Timestamp {
        Timestamp::from_secs(at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()))
    }

    /// Seconds since the epoch.
    pub fn secs(self) -> u64 {
        self.0
    }

    /// Reads an RFC 3339 UTC time (see [`parse_rfc3339`]).
    pub fn parse(text: &str) -> Option<Timestamp> {
        epoch_secs(text).map(Timestamp::from_secs)
    }
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&rfc3339_of_secs(self.0))
    }
}

/// Text that is no RFC 3339 UTC time (what a [`Timestamp`] is read from).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an RFC 3339 UTC time")]
pub struct NotATimestamp(pub String);

impl std::str::FromStr for Timestamp {
    type Err = NotATimestamp;

    fn from_str(text: &str) -> Result<Timestamp, NotATimestamp> {
        Timestamp::parse(text).ok_or_else(|| NotATimestamp(text.to_string()))
    }
}

impl serde::Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_past_what_rfc3339_can_write_is_its_last_second() {
        assert_eq!(rfc3339_of_secs(u64::MAX), "9999-12-31T23:59:59Z");
        assert_eq!(rfc3339_of_secs(MAX_RFC3339_SECS), "9999-12-31T23:59:59Z");
        assert_eq!(
            epoch_secs(&rfc3339_of_secs(MAX_RFC3339_SECS)),
            Some(MAX_RFC3339_SECS)
        );
    }

    #[test]
    fn formats_known_instants() {
        let cases = [
            (0, "1970-01-01T00:00:00Z"),
            (951_782_400, "2000-02-29T00:00:00Z"),
            (1_795_000_000, "2026-11-18T11:06:40Z"),
            (4_107_542_399, "2100-02-28T23:59:59Z"),
        ];
        assert_eq!(
            epoch_secs("2026-11-18T11:06:40.937Z"),
            Some(1_795_000_000),
            "the client's transcript times"
        );
        assert_eq!(rfc3339_of_secs(1_795_000_000), "2026-11-18T11:06:40Z");
        for bad in [
            "",
            "2026-11-22",
            "2026-11-18T11:06:40.Z",
            "2026-11-18T11:06:40.9x3Z",
            "2026-11-18T11:06:40",
            "2026-13-01T00:00:00Z",
            "2026-11-22T25:00:00Z",
            "2026-11-22 10:00:00Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
        for (secs, want) in cases {
            assert_eq!(rfc3339_of_secs(secs), want, "{secs}");
        }
    }
}
