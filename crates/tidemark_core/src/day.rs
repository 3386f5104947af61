//! Calendar days: the partition unit of link records and raw events (DESIGN.md principle 4:
//! retention drops whole time partitions). A [`Day`] is a date; which instants it holds is
//! a matter of time zone. Links keep UTC days ([`Day::of_utc_ms`]); the events subsystem
//! keeps the days of its configured zone (`tidemark_events::calendar`).

use std::fmt;

use time::{Date, Month};

/// Milliseconds in one UTC day.
pub const DAY_MS: i64 = 86_400_000;

/// A calendar date, stored as days since 1970-01-01 (may be negative).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Day(pub i32);

/// A string that is not a `YYYY-MM-DD` day.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a day of the form YYYY-MM-DD")]
pub struct BadDay(pub String);

impl Day {
    /// The UTC day that contains `ms` (Unix milliseconds).
    pub fn of_utc_ms(ms: i64) -> Self {
        Day(ms.div_euclid(DAY_MS) as i32)
    }

    /// Unix milliseconds of 00:00:00.000 UTC of this day.
    pub fn utc_start_ms(self) -> i64 {
        i64::from(self.0) * DAY_MS
    }

    /// The day `n` days later (or earlier for negative `n`).
    pub fn plus(self, n: i32) -> Self {
        Day(self.0 + n)
    }

    /// `YYYYMMDD`, for partition names (`links_20261130`).
    pub fn compact(self) -> String {
        self.to_string().replace('-', "")
    }

    fn date(self) -> Date {
        Date::from_julian_day(self.0 + 2_440_588).unwrap_or(Date::MIN)
    }

    /// Parses `YYYY-MM-DD`.
    pub fn parse(s: &str) -> Result<Self, BadDay> {
        let bad = || BadDay(s.to_owned());
        let parts: Vec<&str> = s.split('-').collect();
        let [y, m, d] = parts.as_slice() else {
            return Err(bad());
        };
        if y.len() != 4 || m.len() != 2 || d.len() != 2 {
            return Err(bad());
        }
        let y: i32 = y.parse().map_err(|_| bad())?;
        let m: u8 = m.parse().map_err(|_| bad())?;
        let d: u8 = d.parse().map_err(|_| bad())?;
        let month = Month::try_from(m).map_err(|_| bad())?;
        let date = Date::from_calendar_date(y, month, d).map_err(|_| bad())?;
        Ok(Day(date.to_julian_day() - 2_440_588))
    }
}

impl fmt::Display for Day {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.date();
        write!(
            f,
            "{:04}-{:02}-{:02}",
            d.year(),
            u8::from(d.month()),
            d.day()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_round_trip() {
        assert_eq!(Day::of_utc_ms(0).to_string(), "1970-01-01");
        assert_eq!(Day::of_utc_ms(-1).to_string(), "1969-12-31");
        // 2026-11-30T00:45:34.123Z
        let d = Day::of_utc_ms(1_795_999_534_123);
        assert_eq!(d.to_string(), "2026-11-30");
        assert_eq!(d.compact(), "20261130");
        assert_eq!(Day::parse("2026-11-30"), Ok(d));
        assert_eq!(d.utc_start_ms(), 1_795_996_800_000);
        assert_eq!(d.plus(1).to_string(), "2026-12-01");
        assert_eq!(Day::parse("2024-02-29").unwrap().to_string(), "2024-02-29");
        for bad in ["2026-13-01", "2023-02-29", "20261130", "2026-1-01", "x"] {
            assert!(Day::parse(bad).is_err(), "{bad}");
        }
    }
}
