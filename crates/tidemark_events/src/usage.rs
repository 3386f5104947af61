//! The event-kind audit (seed 002's regret: "about 180 kinds accumulated, unchecked"): which
//! kinds are still written, and still read.
//!
//! Data flow:
//! - [`KindUsage::wrote`]: every batch [`crate::Ingest`] stored adds its events per
//!   `(kind, day of the event)`, with the arrival time ([`crate::Ingest::with_usage`]);
//! - [`KindUsage::read`]: a report, an export or the dashboard notes the kinds it answered
//!   with, and which of them read it;
//! - the raw window's needs ([`crate::raw_window`]): late and refused events by age, and
//!   re-rolls of old days ([`KindUsage::refused`], [`KindUsage::rerolled`]), gathered with
//!   the rest;
//! - all gather in memory and [`KindUsage::flush`] adds them to the summary store
//!   ([`RollupStore::add_kind_usage`], additive, so every node of a deployment adds its own)
//!   every [`FLUSH_EVERY`] ([`KindUsage::run`]) and at a graceful stop; a flush that fails
//!   keeps its figures for the next one;
//! - `GET /v1/events/kinds` ([`audit`]) reads them back: per kind, the last write and read,
//!   the events per day of the raw window, and flags for kinds not written or not read for
//!   the given number of days. A kind no longer declared keeps its history and shows as
//!   `retired`.
//!
//! What a crash loses: the figures gathered since the last flush (at most [`FLUSH_EVERY`]).
//! The audit is a guide for pruning the schema, not an account: the events themselves are
//! unaffected.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;
use tidemark_core::day::Day;
use tidemark_core::store::StoreError;
use tidemark_core::timefmt::rfc3339_ms;
use tokio_util::sync::CancellationToken;
use utoipa::ToSchema;

use crate::calendar::Calendar;
use crate::model::Event;
use crate::raw_window::{self, Need, NeedCount};
use crate::rollups::RollupStore;
use crate::schema::Schema;

/// How often gathered usage is added to the summary store.
pub const FLUSH_EVERY: Duration = Duration::from_secs(10);

/// Events of one kind on one day: how many arrived, and when the last did (Unix ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Written {
    /// Events.
    pub events: u64,
    /// Arrival of the last (Unix ms).
    pub last_ms: i64,
}

/// The last read of one kind: when (Unix ms) and by what (`report`, `export`, `dashboard`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    /// When (Unix ms).
    pub at_ms: i64,
    /// By what.
    pub by: String,
}

/// Usage figures: what [`KindUsage`] gathers and the store keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageFigures {
    /// `(kind, day)` → events written.
    pub written: BTreeMap<(String, Day), Written>,
    /// kind → its last read.
    pub read: BTreeMap<String, Read>,
    /// `(need, age in days)` → how often a day that old was needed ([`crate::raw_window`]).
    pub needs: BTreeMap<(Need, u32), NeedCount>,
}

impl UsageFigures {
    /// Adds `other` (sums events, keeps the later times).
    pub fn merge(&mut self, other: UsageFigures) {
        for (key, w) in other.written {
            let mine = self.written.entry(key).or_default();
            mine.events += w.events;
            mine.last_ms = mine.last_ms.max(w.last_ms);
        }
        for (key, n) in other.needs {
            self.add_need(key, n);
        }
        for (kind, r) in other.read {
            match self.read.get(&kind) {
                Some(mine) if mine.at_ms >= r.at_ms => {}
                _ => {
                    self.read.insert(kind, r);
                }
            }
        }
    }

    /// Adds `n` to the need `key` (counts summed, the earlier first kept).
    fn add_need(&mut self, key: (Need, u32), n: NeedCount) {
        self.needs
            .entry(key)
            .and_modify(|mine| mine.add(n))
            .or_insert(n);
    }

    /// Notes `count` times the need `need` of a day `age` days old, at `now_ms`.
    fn need(&mut self, need: Need, age: u32, count: u64, now_ms: i64) {
        let first_ms = now_ms;
        self.add_need((need, age), NeedCount { count, first_ms });
    }

    fn is_empty(&self) -> bool {
        self.written.is_empty() && self.read.is_empty() && self.needs.is_empty()
    }
}

/// The usage this node gathers (see the module docs). Cheap to clone: one shared buffer.
#[derive(Debug, Clone)]
pub struct KindUsage {
    store: Arc<dyn RollupStore>,
    pending: Arc<Mutex<UsageFigures>>,
    calendar: Calendar,
}

impl KindUsage {
    /// Usage added to `store` at each flush, events counted by the days of `calendar` (the
    /// raw tier's).
    pub fn new(store: Arc<dyn RollupStore>, calendar: Calendar) -> Self {
        Self {
            store,
            pending: Arc::default(),
            calendar,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, UsageFigures> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Events of a batch per `(kind, day of the event)`: taken before the batch is handed
    /// to the raw tier, noted with [`KindUsage::wrote`] once it is stored.
    pub fn per_kind_and_day(&self, events: &[Event]) -> Vec<((String, Day), u64)> {
        let mut per: BTreeMap<(&str, Day), u64> = BTreeMap::new();
        for e in events {
            *per.entry((e.kind.as_str(), self.calendar.day_of(e.time_ms)))
                .or_default() += 1;
        }
        per.into_iter()
            .map(|((k, d), n)| ((k.to_owned(), d), n))
            .collect()
    }

    /// Notes a stored batch ([`KindUsage::per_kind_and_day`]), which arrived at `now_ms`; its
    /// events of past days are late ([`Need::Late`]).
    pub fn wrote(&self, per: Vec<((String, Day), u64)>, now_ms: i64) {
        let mut p = self.lock();
        for (key, n) in per {
            if let Some(age) = raw_window::age(&self.calendar, key.1, now_ms) {
                p.need(Need::Late, age, n, now_ms);
            }
            let w = p.written.entry(key).or_default();
            w.events += n;
            w.last_ms = w.last_ms.max(now_ms);
        }
    }

    /// Notes events refused at `now_ms` as older than the raw window, by their days
    /// ([`Need::TooOld`]).
    pub fn refused(&self, days: impl IntoIterator<Item = Day>, now_ms: i64) {
        let mut p = self.lock();
        for day in days {
            if let Some(age) = raw_window::age(&self.calendar, day, now_ms) {
                p.need(Need::TooOld, age, 1, now_ms);
            }
        }
    }

    /// Notes that `day`, rolled up before, was rolled up again at `now_ms` ([`Need::Reroll`]).
    pub fn rerolled(&self, day: Day, now_ms: i64) {
        if let Some(age) = raw_window::age(&self.calendar, day, now_ms) {
            self.lock().need(Need::Reroll, age, 1, now_ms);
        }
    }

    /// Notes that `by` (`report`, `export`, `dashboard`) answered with `kinds` at `now_ms`.
    pub fn read<'a>(&self, kinds: impl IntoIterator<Item = &'a str>, by: &str, now_ms: i64) {
        let kinds: BTreeSet<&str> = kinds.into_iter().collect();
        let mut p = self.lock();
        for kind in kinds {
            p.read.insert(
                kind.to_owned(),
                Read {
                    at_ms: now_ms,
                    by: by.to_owned(),
                },
            );
        }
    }

    /// Adds what was gathered to the store; on failure keeps it for the next flush.
    ///
    /// # Errors
    /// The store's.
    pub async fn flush(&self) -> Result<(), StoreError> {
        let figures = std::mem::take(&mut *self.lock());
        if figures.is_empty() {
            return Ok(());
        }
        if let Err(e) = self.store.add_kind_usage(&figures).await {
            self.lock().merge(figures);
            return Err(e);
        }
        Ok(())
    }

    /// Flushes every [`FLUSH_EVERY`] until `cancel`, then once more.
    pub async fn run(self, cancel: CancellationToken) {
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                () = tokio::time::sleep(FLUSH_EVERY) => {}
            }
            if let Err(error) = self.flush().await {
                tracing::warn!(%error, "event-kind usage kept for the next flush");
            }
        }
        if let Err(error) = self.flush().await {
            tracing::warn!(%error, "event-kind usage of the last seconds lost at stop");
        }
    }

    /// The store the figures go to.
    pub fn store(&self) -> &Arc<dyn RollupStore> {
        &self.store
    }
}

/// One kind in the audit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct KindAudit {
    /// The kind.
    pub kind: String,
    /// `declared` (in `events.schema.kinds`) or `retired` (written or read once, no longer
    /// declared: its history stays readable).
    pub status: String,
    /// Arrival of its last event, RFC 3339; `null` if none was ever recorded.
    pub last_written: Option<String>,
    /// Its events per day of the event, over the raw window, oldest first (days without
    /// any left out).
    pub events_per_day: Vec<DayEvents>,
    /// Its last read by a report, an export or the dashboard, RFC 3339; `null` if never.
    pub last_read: Option<String>,
    /// What read it last: `report`, `export` or `dashboard`.
    pub last_read_by: Option<String>,
    /// No event for `stale_days` (or never).
    pub not_written: bool,
    /// Not read for `stale_days` (or never).
    pub not_read: bool,
}

/// Events of one day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct DayEvents {
    /// The day, `YYYY-MM-DD`.
    pub day: String,
    /// Events.
    pub events: u64,
}

/// `GET /v1/events/kinds`: every declared kind, then every retired one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct KindsAudit {
    /// The days after which a kind not written or not read is flagged.
    pub stale_days: u32,
    /// First day of the raw window, `YYYY-MM-DD`.
    pub raw_window_from: String,
    /// The kinds: declared ones in declaration order, then retired ones by name.
    pub kinds: Vec<KindAudit>,
    /// The zone of the days (`events.time_zone`: `UTC` or an IANA name).
    pub time_zone: String,
}

/// The audit of `figures` (since `raw_from`, a day of `calendar`) against `schema` at
/// `now_ms`.
pub fn audit(
    calendar: &Calendar,
    schema: &Schema,
    figures: &UsageFigures,
    raw_from: Day,
    stale_days: u32,
    now_ms: i64,
) -> KindsAudit {
    let stale_before = now_ms - i64::from(stale_days) * 86_400_000;
    let seen: BTreeSet<&str> = figures
        .written
        .keys()
        .map(|(k, _)| k.as_str())
        .chain(figures.read.keys().map(String::as_str))
        .collect();
    let declared = schema.kinds.iter().map(String::as_str);
    let retired = seen
        .into_iter()
        .filter(|k| !schema.kinds.iter().any(|d| d == k));
    let kinds = declared
        .map(|k| (k, "declared"))
        .chain(retired.map(|k| (k, "retired")))
        .map(|(kind, status)| {
            let written: Vec<(Day, Written)> = figures
                .written
                .iter()
                .filter(|((k, _), _)| k == kind)
                .map(|((_, d), w)| (*d, *w))
                .collect();
            let last_written = written.iter().map(|(_, w)| w.last_ms).max();
            let read = figures.read.get(kind);
            KindAudit {
                kind: kind.to_owned(),
                status: status.to_owned(),
                last_written: last_written.map(rfc3339_ms),
                events_per_day: written
                    .iter()
                    .filter(|(d, _)| *d >= raw_from)
                    .map(|(d, w)| DayEvents {
                        day: d.to_string(),
                        events: w.events,
                    })
                    .collect(),
                last_read: read.map(|r| rfc3339_ms(r.at_ms)),
                last_read_by: read.map(|r| r.by.clone()),
                not_written: last_written.is_none_or(|t| t < stale_before),
                not_read: read.is_none_or(|r| r.at_ms < stale_before),
            }
        })
        .collect();
    KindsAudit {
        stale_days,
        raw_window_from: raw_from.to_string(),
        kinds,
        time_zone: calendar.name().to_owned(),
    }
}

#[cfg(test)]
mod tests;
