//! The summary tier (DESIGN.md part C "Daily rollup" and "Report", seed 002): `listing_daily`
//! holds one row per `(listing_id, day, kind)` with the day's `total` and `uniques`, and
//! `listings` maps each listing to its account, per tenant. Long-range questions (the yearly
//! report per account) read only these two tables, never raw events.
//!
//! [`RollupStore::upsert_day`] is the only writer of `listing_daily`, and it replaces one day
//! whole: a re-run overwrites (the seed's `INSERT … ON DUPLICATE KEY UPDATE`) and never doubles,
//! and rows of that day that the new run no longer produces are deleted in the same
//! transaction.
//!
//! Embedded default: [`SqliteRollups`] (`data/events/rollups.db`). Production engine:
//! [`MysqlRollups`] (MariaDB / MySQL, `events.rollups = "mysql://…"`). Both replace a day the
//! same way — upsert every produced row, then delete the day's rows [`stale_keys`] finds no
//! longer produced, in one transaction, adding the day's difference to its month's row of
//! `listing_monthly`, and each row's visitor sketch with its month's union
//! ([`crate::visitors`]) — and differ only in their SQL (the sketches' in `sqlite/visitors.rs`
//! and `mysql/visitors.rs`). The month plan both follow (the deltas of a day, the parts of a
//! report and of period uniques): `monthly`. The versions of both schemas: `migrations`.

mod migrations;
mod monthly;
mod mysql;
mod sqlite;

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use serde::Serialize;
use tidemark_core::day::Day;
use tidemark_core::store::StoreError;

use crate::leases::{DayLease, DayLeases, ProcessLeases};
use crate::schema::Schema;
use crate::usage::UsageFigures;

pub use mysql::{MysqlRollups, report_part_sql as mysql_report_part_sql};
pub use sqlite::SqliteRollups;

/// One row of `listing_daily` for a given day: a listing's `total` and `uniques` of one kind.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct DailyRow {
    /// The listing.
    pub listing_id: i64,
    /// The event kind (`view`, `click`, …).
    pub kind: String,
    /// Events of that kind for the listing on the day (one event = one row; bots excluded).
    pub total: u64,
    /// Distinct `(session_id, page_url)` among those events that carry a session.
    pub uniques: u64,
    /// Those visitors as a sketch ([`crate::visitors`]: DataSketches' compact HLL form), for
    /// period uniques. Empty: not known (a row written without one); a store keeps no sketch
    /// for it, and [`RollupStore::day_rows`] leaves sketches out.
    #[serde(skip)]
    pub visitors: Vec<u8>,
}

/// One row of an account report: a listing's sums of one kind over the period.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, utoipa::ToSchema)]
pub struct ReportRow {
    /// The listing.
    #[schema(minimum = 0)]
    pub listing_id: i64,
    /// The event kind.
    pub kind: String,
    /// Sum of the daily totals.
    pub total: u64,
    /// Sum of the daily uniques. Named honestly: a visitor who came back on two days counts
    /// twice, so this is not the number of distinct visitors of the period.
    pub uniques_daily_sum: u64,
    /// Asked for (`uniques_period=true`): the distinct visitors (`session_id`, `page_url`) of
    /// the whole period, from the days' visitor sketches: exact up to about 1,500, within
    /// about 2 % above; `null` when a day of the period was rolled up before sketches were
    /// kept. Left out when not asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>, nullable)]
    pub uniques_period: Option<PeriodUniques>,
}

/// The distinct visitors of a period ([`crate::visitors`]): a number, or `null` when not known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct PeriodUniques(pub Option<u64>);

/// One row of a monthly export: a listing's sums of one kind over one month (of days of `events.time_zone`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, utoipa::ToSchema)]
pub struct MonthRow {
    /// The listing.
    #[schema(minimum = 0)]
    pub listing_id: i64,
    /// The month, `YYYY-MM`.
    #[schema(pattern = r"^\d{4}-\d{2}$")]
    pub month: String,
    /// The event kind.
    pub kind: String,
    /// Sum of the month's daily totals.
    pub total: u64,
    /// Sum of the month's daily uniques (a visitor of two days counts twice).
    pub uniques_daily_sum: u64,
}

/// Every listing id (listing ids are non-negative).
pub const ALL_LISTINGS: std::ops::RangeInclusive<i64> = 0..=i64::MAX;

/// The summary-tier port: `listing_daily` and the listing → account map.
#[async_trait]
pub trait RollupStore: Send + Sync + std::fmt::Debug {
    /// Replaces the rows of `day` with `rows`, in one transaction: every row is upserted
    /// (a re-run overwrites, never doubles) and rows of `day` not in `rows` are deleted.
    /// `rows` must not hold two rows of the same `(listing_id, kind)`.
    /// Returns the number of rows written.
    async fn upsert_day(&self, day: Day, rows: Vec<DailyRow>) -> Result<usize, StoreError>;

    /// The per-day leases that fence this store's writes ([`crate::leases`]), held for `ttl`:
    /// where the store is shared (MariaDB) they are in it, shared by every node; a store one
    /// process owns (SQLite) takes that process's own ([`ProcessLeases`]).
    fn day_leases(&self, ttl: std::time::Duration) -> Arc<dyn DayLeases> {
        Arc::new(ProcessLeases::new(ttl))
    }

    /// Agrees `schema` (`events.schema` of this node) with the other nodes sharing this store
    /// at start: the first records it; a node whose schema [extends](Schema::extends) the
    /// recorded one records its own (nodes move to a new schema one at a time); any other is
    /// refused ([`tidemark_core::store::ErrorKind::Rejected`], naming `events.schema` and what
    /// it lacks), since its nodes would take in and count different events. A store one
    /// process owns has no other node to agree with.
    async fn agree_schema(&self, schema: &Schema) -> Result<(), StoreError> {
        let _ = schema;
        Ok(())
    }

    /// The time zone this store's days are cut in ([`crate::calendar`]), as last recorded by
    /// [`RollupStore::record_time_zone`]; `None` when none was (a store made before zones
    /// were recorded holds UTC days).
    async fn recorded_time_zone(&self) -> Result<Option<String>, StoreError>;

    /// Records `name` (`"UTC"` or an IANA name) as the zone of this store's days if the
    /// recorded zone is still `replacing` (`None`: none recorded yet), atomically (a
    /// compare-and-set: of nodes starting at once with different zones, one records its own
    /// and the others read it back).
    async fn record_time_zone(&self, name: &str, replacing: Option<&str>)
    -> Result<(), StoreError>;

    /// Whether the store holds any daily summary row.
    async fn holds_summaries(&self) -> Result<bool, StoreError>;

    /// [`RollupStore::upsert_day`] under `lease` ([`crate::leases`]): a store that several
    /// nodes share checks in the write's own transaction that the lease is still held, and
    /// refuses the whole write otherwise ([`tidemark_core::store::ErrorKind::Conflict`]), so a
    /// node that lost its lease mid-rollup never replaces a newer summary. A store only one
    /// process can open (SQLite) has no other node to fence off: its process's own leases
    /// already keep its tasks apart, and this is `upsert_day`.
    async fn upsert_day_fenced(
        &self,
        day: Day,
        rows: Vec<DailyRow>,
        lease: &DayLease,
    ) -> Result<usize, StoreError> {
        let _ = lease;
        self.upsert_day(day, rows).await
    }

    /// Sets the account of each `(listing_id, account_id)` for `tenant` (insert or move), all
    /// or nothing; a later pair for the same listing wins. Returns the number of pairs applied.
    async fn put_listings(&self, tenant: &str, pairs: &[(i64, i64)]) -> Result<usize, StoreError>;

    /// The listing ids of `account_id` (as mapped by `tenant`) above `after`, ascending, at
    /// most `limit`: the pages an export walks, so it never holds a whole account at once.
    async fn account_listings(
        &self,
        tenant: &str,
        account_id: i64,
        after: i64,
        limit: usize,
    ) -> Result<Vec<i64>, StoreError>;

    /// Per listing of `account_id` (as mapped by `tenant`) whose id is in `listings`, and
    /// kind: sums of `listing_daily` over `from..=to`, optionally only `kind`; ordered by
    /// listing and kind. Reads only the summaries and `listings`.
    async fn report_range(
        &self,
        tenant: &str,
        account_id: i64,
        from: Day,
        to: Day,
        kind: Option<&str>,
        listings: std::ops::RangeInclusive<i64>,
    ) -> Result<Vec<ReportRow>, StoreError>;

    /// [`RollupStore::report_range`] over every listing of the account.
    async fn report(
        &self,
        tenant: &str,
        account_id: i64,
        from: Day,
        to: Day,
        kind: Option<&str>,
    ) -> Result<Vec<ReportRow>, StoreError> {
        self.report_range(tenant, account_id, from, to, kind, ALL_LISTINGS)
            .await
    }

    /// Per listing of `account_id` (as mapped by `tenant`) whose id is in `listings`, month
    /// (first days `from_month..=to_month`) and kind: the month's sums, from `listing_monthly`
    /// only; ordered by listing, month and kind; optionally only `kind`.
    async fn months_range(
        &self,
        tenant: &str,
        account_id: i64,
        from_month: Day,
        to_month: Day,
        kind: Option<&str>,
        listings: std::ops::RangeInclusive<i64>,
    ) -> Result<Vec<MonthRow>, StoreError>;

    /// Per listing of `account_id` (as mapped by `tenant`) whose id is in `listings`, and kind:
    /// the distinct visitors over `from..=to` ([`crate::visitors`]), from the sketches of the
    /// edge days in `listing_daily` and of the whole months in `listing_monthly`
    /// (`monthly::split`), unioned by [`crate::visitors::PeriodUnions`]; `None` where a part has no sketch.
    /// Ordered by listing and kind; optionally only `kind`. Reads only the summaries.
    async fn period_uniques(
        &self,
        tenant: &str,
        account_id: i64,
        from: Day,
        to: Day,
        kind: Option<&str>,
        listings: std::ops::RangeInclusive<i64>,
    ) -> Result<Vec<(i64, String, Option<u64>)>, StoreError>;

    /// Every row of `day` without its sketch, ordered by listing and kind (for tests and
    /// tools).
    async fn day_rows(&self, day: Day) -> Result<Vec<DailyRow>, StoreError>;

    /// Adds event-kind usage ([`crate::usage`]) in one transaction: events per `(kind, day)`
    /// summed, the later arrival and the later read kept, so every node adds its own.
    async fn add_kind_usage(&self, figures: &UsageFigures) -> Result<(), StoreError>;

    /// All event-kind usage kept.
    async fn kind_usage(&self) -> Result<UsageFigures, StoreError>;
}

/// Sets each report row's `uniques_period` from `estimates` ([`RollupStore::period_uniques`]
/// of the same period and listings); a row without one is not known (`null`).
pub fn with_period_uniques(rows: &mut [ReportRow], estimates: Vec<(i64, String, Option<u64>)>) {
    let by_key: std::collections::HashMap<(i64, String), Option<u64>> =
        estimates.into_iter().map(|(l, k, e)| ((l, k), e)).collect();
    for r in rows {
        let known = by_key
            .get(&(r.listing_id, r.kind.clone()))
            .copied()
            .flatten();
        r.uniques_period = Some(PeriodUniques(known));
    }
}

/// The `(listing_id, kind)` keys of a day's `existing` rows that a new run's `rows` no longer
/// produce: what [`RollupStore::upsert_day`] deletes after upserting `rows`, so the day holds
/// exactly the new run. Shared by every backend.
pub fn stale_keys(
    existing: impl IntoIterator<Item = (i64, String)>,
    rows: &[DailyRow],
) -> Vec<(i64, String)> {
    let produced = produced_keys(rows);
    existing
        .into_iter()
        .filter(|(l, k)| !produced.contains(&(*l, k.as_str())))
        .collect()
}

/// The distinct `(listing_id, kind)` keys of `rows`: the rows a day holds after
/// [`RollupStore::upsert_day`] (its return value is their number).
pub fn produced_keys(rows: &[DailyRow]) -> HashSet<(i64, &str)> {
    rows.iter()
        .map(|r| (r.listing_id, r.kind.as_str()))
        .collect()
}
