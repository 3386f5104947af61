//! RFC 3339 rendering of Unix-millisecond timestamps (UTC, millisecond precision).

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Renders Unix milliseconds as RFC 3339 in UTC, e.g. `2026-11-30T02:45:34.123Z`.
/// Out-of-range values render as the Unix epoch rather than panicking.
pub fn rfc3339_ms(ms: i64) -> String {
    let dt = OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    let dt = dt
        .replace_nanosecond((ms.rem_euclid(1000) as u32) * 1_000_000)
        .unwrap_or(dt);
    dt.format(&Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_utc_with_millis() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_ms(1_795_999_534_123), "2026-11-30T00:45:34.123Z");
    }
}
