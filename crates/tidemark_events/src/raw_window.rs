//! The raw-window report (seed 002's regret: "check whether anyone needs more than 7 raw
//! days, and what 30 would cost"): what the raw tier holds per day, how often data older than
//! `k` days was needed, and what a longer `raw_retention` would cost on disk.
//!
//! Data flow:
//! - **Needs**, noted by [`crate::usage::KindUsage`] with the kind audit's figures and added to
//!   the summary store with them (additive, every node its own; `raw_window_needs`):
//!   - [`Need::Late`]: stored events that arrived `k` days after their day;
//!   - [`Need::TooOld`]: events refused as older than the raw window (`raw_retention +
//!     lateness`), by the age they had;
//!   - [`Need::Reroll`]: rollups of a day that had been rolled up before (late events made
//!     it dirty, or an operator asked), by the day's age then.
//!
//!   Ages are whole days (of `events.time_zone`, [`crate::calendar`]) between the event's (or the rolled-up) day and the arrival's
//!   (or the rollup's); ages above [`MAX_AGE`] are counted as [`MAX_AGE`] + 1.
//! - **Bytes** per day, from the raw tier itself ([`crate::RawStore::day_bytes`]: SQLite's
//!   `dbstat` pages of each day's table; InfluxDB's `diskBytes` of each day's shards).
//! - `GET /v1/events/raw-window` ([`report`]) joins both with the day catalog: per `k` in
//!   `1..=30` how many events and re-rolls needed a day at least `k` days old, the bytes and
//!   events per day now held, and the bytes a window of `k` days would hold at the mean of the
//!   closed days held.

use std::collections::BTreeMap;

use serde::Serialize;
use tidemark_core::day::Day;
use tidemark_core::timefmt::rfc3339_ms;
use utoipa::ToSchema;

use crate::calendar::Calendar;
use crate::raw::DayState;

/// The largest age counted on its own, in days; older ones are counted together.
pub const MAX_AGE: u32 = 30;

/// Why data of an older day was needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Need {
    /// A stored event that arrived after its day.
    Late,
    /// An event refused as older than the raw window.
    TooOld,
    /// A day rolled up again.
    Reroll,
}

impl Need {
    /// The name stored in `raw_window_needs.need`.
    pub fn as_str(self) -> &'static str {
        match self {
            Need::Late => "late",
            Need::TooOld => "too_old",
            Need::Reroll => "reroll",
        }
    }

    /// The need named `s` ([`Need::as_str`]), if any.
    pub fn parse(s: &str) -> Option<Self> {
        [Need::Late, Need::TooOld, Need::Reroll]
            .into_iter()
            .find(|n| n.as_str() == s)
    }
}

/// How many times one need of one age arose, and when first (Unix ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeedCount {
    /// Times (events, or rollups).
    pub count: u64,
    /// The first, Unix ms.
    pub first_ms: i64,
}

impl NeedCount {
    /// Adds `other`: counts summed, the earlier first kept.
    pub fn add(&mut self, other: NeedCount) {
        self.count += other.count;
        self.first_ms = self.first_ms.min(other.first_ms);
    }
}

/// The age of `day` at `now_ms`, in whole days of `calendar` (today's date minus the day's),
/// clamped to `MAX_AGE + 1`; `None` for a day that is not in the past.
pub fn age(calendar: &Calendar, day: Day, now_ms: i64) -> Option<u32> {
    let days = calendar.day_of(now_ms).0 - day.0;
    u32::try_from(days)
        .ok()
        .filter(|d| *d >= 1)
        .map(|d| d.min(MAX_AGE + 1))
}

/// One raw day now held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct RawDay {
    /// The day, `YYYY-MM-DD`.
    pub day: String,
    /// Events appended for it.
    pub events: u64,
    /// Bytes it takes in the raw tier.
    pub bytes: u64,
}

/// What was needed at least `k` days back, and what a window of `k` days would hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct AtLeast {
    /// `k`, in days.
    pub days: u32,
    /// Events stored when their day was at least `k` days old.
    pub late_events: u64,
    /// Events refused (older than the raw window) when their day was at least `k` days
    /// old.
    pub refused_events: u64,
    /// Rollups of a day rolled up before, run when the day was at least `k` days old
    /// (today's date minus the day's).
    pub rerolls: u64,
    /// Bytes a raw window of `k` days would hold at the mean of the closed days held.
    pub window_bytes: u64,
}

/// `GET /v1/events/raw-window`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct RawWindowReport {
    /// The zone of the days (`events.time_zone`: `UTC` or an IANA name).
    pub time_zone: String,
    /// `events.raw_retention`, in days (rounded up).
    pub raw_retention_days: u64,
    /// The raw days held, oldest first (dropped ones left out).
    pub days: Vec<RawDay>,
    /// Mean bytes of a closed day held (today left out); 0 without one.
    pub bytes_per_day: u64,
    /// Bytes a 30-day raw window would hold at that mean.
    pub window_30_days_bytes: u64,
    /// The first need counted, RFC 3339; `null` if none yet.
    pub counted_since: Option<String>,
    /// For `k` = 1 to 30 days.
    pub at_least: Vec<AtLeast>,
    /// Needs older than 30 days: late and refused events, re-rolls.
    pub beyond_30_days: Beyond,
}

/// Needs of days older than 30 days.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct Beyond {
    /// Late events stored.
    pub late_events: u64,
    /// Events refused.
    pub refused_events: u64,
    /// Re-rolls.
    pub rerolls: u64,
}

/// The report of the raw days `days` (the catalog), their `bytes`, and the `needs` kept, at
/// `now_ms` (today a day of `calendar`), for a `raw_retention` of `retention_days`.
pub fn report(
    calendar: &Calendar,
    days: &[DayState],
    bytes: &[(Day, u64)],
    needs: &BTreeMap<(Need, u32), NeedCount>,
    retention_days: u64,
    now_ms: i64,
) -> RawWindowReport {
    let bytes: BTreeMap<Day, u64> = bytes.iter().copied().collect();
    let held: Vec<RawDay> = days
        .iter()
        .filter(|d| d.dropped_ms.is_none())
        .map(|d| RawDay {
            day: d.day.to_string(),
            events: d.events,
            bytes: bytes.get(&d.day).copied().unwrap_or(0),
        })
        .collect();
    let today = calendar.day_of(now_ms);
    let closed: Vec<u64> = days
        .iter()
        .filter(|d| d.dropped_ms.is_none() && d.day < today)
        .map(|d| bytes.get(&d.day).copied().unwrap_or(0))
        .collect();
    let bytes_per_day = if closed.is_empty() {
        0
    } else {
        closed.iter().sum::<u64>() / closed.len() as u64
    };
    let at_least_of = |need: Need, k: u32| -> u64 {
        needs
            .range((need, k)..=(need, u32::MAX))
            .map(|(_, c)| c.count)
            .sum()
    };
    RawWindowReport {
        time_zone: calendar.name().to_owned(),
        raw_retention_days: retention_days,
        days: held,
        bytes_per_day,
        window_30_days_bytes: bytes_per_day * 30,
        counted_since: needs.values().map(|c| c.first_ms).min().map(rfc3339_ms),
        at_least: (1..=MAX_AGE)
            .map(|k| AtLeast {
                days: k,
                late_events: at_least_of(Need::Late, k),
                refused_events: at_least_of(Need::TooOld, k),
                rerolls: at_least_of(Need::Reroll, k),
                window_bytes: bytes_per_day * u64::from(k),
            })
            .collect(),
        beyond_30_days: Beyond {
            late_events: at_least_of(Need::Late, MAX_AGE + 1),
            refused_events: at_least_of(Need::TooOld, MAX_AGE + 1),
            rerolls: at_least_of(Need::Reroll, MAX_AGE + 1),
        },
    }
}

#[cfg(test)]
mod tests;
