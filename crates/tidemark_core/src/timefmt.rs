//! RFC 3339 rendering of Unix-millisecond timestamps (UTC, millisecond precision).

use time::OffsetDateTime;
use time::format_description::FormatItem;
use time::macros::format_description;

/// `2026-11-30T02:45:34.120Z`: always three fractional digits, so that timestamps of one
/// width sort as strings do and parse alike (`time`'s RFC 3339 format trims trailing zeros,
/// giving `…34.12Z` beside `…34.123Z` and `…34Z`).
const RFC3339_MS: &[FormatItem<'static>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");

/// Renders Unix milliseconds as RFC 3339 in UTC with exactly three fractional digits, e.g.
/// `2026-11-30T02:45:34.120Z`. Out-of-range values render as the Unix epoch rather than
/// panicking.
pub fn rfc3339_ms(ms: i64) -> String {
    let dt = OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    dt.format(RFC3339_MS)
        .unwrap_or_else(|_| "1970-01-01T00:00:00.000Z".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_utc_with_millis() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(1_795_999_534_123), "2026-11-30T00:45:34.123Z");
        assert_eq!(rfc3339_ms(1_795_999_534_120), "2026-11-30T00:45:34.120Z");
        assert_eq!(rfc3339_ms(1_795_999_534_000), "2026-11-30T00:45:34.000Z");
        assert_eq!(rfc3339_ms(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(
            rfc3339_ms(i64::MAX),
            "1970-01-01T00:00:00.000Z",
            "out of range"
        );
    }
}
