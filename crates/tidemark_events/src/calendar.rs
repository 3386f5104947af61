//! The days of the events subsystem (DESIGN.md part C: "days in a named time zone"): UTC by
//! default, or the local days of `events.time_zone`, an IANA name such as `Europe/Sarajevo`.
//!
//! Every day the events subsystem computes goes through one [`Calendar`]: the raw tier's day
//! partitions, the rollups, the lifecycle's closing times, reports, the dashboard and
//! `?day=today`. A local day is as long as its clocks say: a DST day is 23 h or 25 h, and
//! [`Calendar::start_ms`] and [`Calendar::end_ms`] give its real bounds. The zone rules come
//! from the IANA database bundled into the binary (`jiff`), so every node and every machine
//! cuts days at the same instants, whatever its system's tzdata.
//!
//! A store's days are cut in one zone: it is recorded with the summary tier at the first start
//! ([`crate::rollups::RollupStore::recorded_time_zone`]), a node configured with another one
//! is refused ([`agree_time_zone`]), and only `tidemark events move-zone`
//! ([`crate::zone_move`]) changes it.

use jiff::Timestamp;
use jiff::civil::Date;
use jiff::tz::TimeZone;
use tidemark_core::day::Day;
use tidemark_core::store::StoreError;

use crate::raw::RawStore;
use crate::rollups::RollupStore;

/// The name of the default zone.
pub const UTC: &str = "UTC";

/// The days of one time zone: which day an instant falls on, and which instants a day holds.
/// Cheap to clone.
#[derive(Debug, Clone)]
pub struct Calendar {
    /// `None` for UTC (days of exactly 24 h, computed without a zone lookup).
    zone: Option<TimeZone>,
    /// `"UTC"` or the zone's IANA name as the database spells it.
    name: String,
}

/// A `events.time_zone` that names no zone of the IANA database.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "events.time_zone {0:?} is not a time zone of the IANA database (e.g. \"UTC\", \"Europe/Sarajevo\")"
)]
pub struct UnknownZone(pub String);

impl Default for Calendar {
    fn default() -> Self {
        Self::utc()
    }
}

impl Calendar {
    /// UTC days.
    pub fn utc() -> Self {
        Self {
            zone: None,
            name: UTC.to_owned(),
        }
    }

    /// The days of the IANA zone `name` (case-insensitive). `"UTC"` and every name of the
    /// same rules (`Etc/UTC`, `Zulu`, `GMT`, …: offset 0 and never a transition) are UTC.
    ///
    /// # Errors
    /// [`UnknownZone`] when the bundled database has no such zone (an empty name included).
    pub fn named(name: &str) -> Result<Self, UnknownZone> {
        let name = name.trim();
        if name.eq_ignore_ascii_case(UTC) {
            return Ok(Self::utc());
        }
        let zone = jiff::tz::db()
            .get(name)
            .map_err(|_| UnknownZone(name.to_owned()))?;
        let never_moves = zone.following(Timestamp::MIN).next().is_none();
        if never_moves && zone.to_offset(Timestamp::UNIX_EPOCH).seconds() == 0 {
            return Ok(Self::utc());
        }
        let name = zone.iana_name().unwrap_or(name).to_owned();
        Ok(Self {
            zone: Some(zone),
            name,
        })
    }

    /// `"UTC"` or the zone's IANA name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The day that holds the instant `ms` (Unix ms).
    pub fn day_of(&self, ms: i64) -> Day {
        let Some(zone) = &self.zone else {
            return Day::of_utc_ms(ms);
        };
        // The local date of an instant is the UTC date of the instant moved by its offset.
        let offset_ms = Timestamp::from_millisecond(ms)
            .map(|t| i64::from(zone.to_offset(t).seconds()) * 1000)
            .unwrap_or(0);
        Day::of_utc_ms(ms.saturating_add(offset_ms))
    }

    /// The first instant of `day` (Unix ms): local midnight, or the first instant after it
    /// where a DST change skips midnight.
    pub fn start_ms(&self, day: Day) -> i64 {
        let Some(zone) = &self.zone else {
            return day.utc_start_ms();
        };
        Date::new(1970, 1, 1)
            .ok()
            .and_then(|epoch| epoch.checked_add(jiff::Span::new().days(day.0)).ok())
            .and_then(|date| date.to_zoned_datetime(zone.clone()).ok())
            .map_or_else(
                || day.utc_start_ms(),
                |start| start.timestamp().as_millisecond(),
            )
    }

    /// The instant after the last of `day` (Unix ms): the start of the next day.
    pub fn end_ms(&self, day: Day) -> i64 {
        self.start_ms(day.plus(1))
    }
}

/// Agrees `calendar` (`events.time_zone` of this node) with the zone the store's days are cut
/// in, recorded with the summary tier: the first start of an empty store records its zone; a
/// store that holds data from before zones were recorded was cut in UTC. Any other zone is
/// refused ([`tidemark_core::store::ErrorKind::Rejected`], naming both zones), since raw
/// partitions and summaries cut in one zone do not line up with the days of another, and
/// nodes sharing the stores must cut the same days.
pub async fn agree_time_zone(
    calendar: &Calendar,
    raw: &dyn RawStore,
    rollups: &dyn RollupStore,
) -> Result<(), StoreError> {
    let mine = calendar.name();
    let mut recorded = rollups.recorded_time_zone().await?;
    if recorded.is_none() {
        // A store made before zones were recorded that holds data was cut in UTC; an empty
        // one takes this node's zone. Insert-if-absent, then read back: of nodes starting at
        // the same moment with different zones, the first to record wins.
        let empty = raw.days().await?.is_empty() && !rollups.holds_summaries().await?;
        let first = if empty { mine } else { UTC };
        rollups.record_time_zone(first, None).await?;
        recorded = rollups.recorded_time_zone().await?;
        if recorded.as_deref() == Some(mine) {
            tracing::info!(time_zone = mine, "events days recorded in this time zone");
        }
    }
    let recorded_name = recorded.as_deref().unwrap_or(UTC);
    if recorded_name == mine {
        return Ok(());
    }
    if let Some(pending) = crate::zone_move::PendingMove::parse(recorded_name) {
        return Err(StoreError::rejected(
            "config",
            format!(
                "a move of this store's days from {} to {} is under way: run `tidemark events \
                 move-zone --to {}` to finish it; no node starts until then",
                pending.from, pending.to, pending.to
            ),
        ));
    }
    Err(StoreError::rejected(
        "config",
        format!(
            "events.time_zone is {:?}, but this store's days were cut in {recorded_name:?}: its \
             raw partitions and daily summaries end at {recorded_name} midnight. Set \
             events.time_zone = {recorded_name:?}, or start the new zone on empty stores",
            mine
        ),
    ))
}

#[cfg(test)]
mod tests;
