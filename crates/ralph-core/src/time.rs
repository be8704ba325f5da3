//! UTC timestamps in RFC 3339 form without pulling in a date crate.

use std::time::{SystemTime, UNIX_EPOCH};

/// Formats a point in time as `YYYY-MM-DDTHH:MM:SSZ` (UTC), the form the
/// state file uses for every time it records.
pub fn rfc3339(at: SystemTime) -> String {
    let secs = at
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// The current time, formatted by [`rfc3339`].
pub fn now_rfc3339() -> String {
    rfc3339(SystemTime::now())
}

/// Parses a timestamp written by [`rfc3339`] (`YYYY-MM-DDTHH:MM:SSZ`), or
/// by Claude Code in its transcript, with a fraction of a second
/// (`…:SS.123Z`; the fraction is dropped).
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let whole;
    let text = match text.split_once('.') {
        Some((seconds, fraction))
            if fraction.len() >= 2
                && fraction.ends_with('Z')
                && fraction[..fraction.len() - 1]
                    .bytes()
                    .all(|c| c.is_ascii_digit()) =>
        {
            whole = format!("{seconds}Z");
            whole.as_str()
        }
        _ => text,
    };
    let b = text.as_bytes();
    if b.len() != 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[19] != b'Z'
    {
        return None;
    }
    let num = |range: std::ops::Range<usize>| text.get(range)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let days = days_from_civil(y, mo as u32, d as u32);
    let secs = days * 86_400 + h * 3600 + mi * 60 + s;
    u64::try_from(secs)
        .ok()
        .map(|s| UNIX_EPOCH + std::time::Duration::from_secs(s))
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

/// [`rfc3339`] of a time given in seconds since the epoch; a later one than
/// RFC 3339 can write is written as its last second, never a panic.
pub fn rfc3339_of_secs(secs: u64) -> String {
    rfc3339(UNIX_EPOCH + std::time::Duration::from_secs(secs.min(MAX_RFC3339_SECS)))
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (i64::from(m) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Converts days since 1970-01-01 into a (year, month, day) civil date
/// (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_time_past_what_rfc3339_can_write_is_its_last_second() {
        assert_eq!(rfc3339_of_secs(u64::MAX), "9999-12-31T23:59:59Z");
        assert_eq!(rfc3339_of_secs(1e300 as u64), "9999-12-31T23:59:59Z");
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
            assert_eq!(
                rfc3339(UNIX_EPOCH + Duration::from_secs(secs)),
                want,
                "{secs}"
            );
        }
    }
}
