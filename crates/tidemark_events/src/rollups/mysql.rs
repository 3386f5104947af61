//! The summary tier on MariaDB / MySQL (`events.rollups = "mysql://…"`; DESIGN.md part C,
//! seed 002's production shape).
//!
//! Tables (InnoDB, created at start if missing):
//! - `listing_daily (listing_id, day, event, total, uniques)`, primary key
//!   `(listing_id, day, event)` as the seed has it: InnoDB clusters rows by it, so one listing's
//!   days of a period are one contiguous range; a secondary index `(day)` serves only the
//!   rollup, which must find a day's old rows to delete those no longer produced.
//! - `listings (tenant, id, account_id)`, primary key `(tenant, id)`, index
//!   `(tenant, account_id, id)` that covers the lookup of an account's listings.
//!
//! Data flow:
//! - [`RollupStore::upsert_day`]: one transaction — multi-row
//!   `INSERT … ON DUPLICATE KEY UPDATE` of every produced row (a re-run overwrites, never
//!   doubles), then the day's existing keys are read (`FOR UPDATE`) and the ones
//!   [`super::stale_keys`] finds no longer produced are deleted.
//! - [`RollupStore::report`]: one statement joining `listings` to `listing_daily`, grouped by
//!   listing and kind: a range read of the clustered key per listing of the account.
//!
//! Days are `DATE` columns, bound as `YYYY-MM-DD` text.

use async_trait::async_trait;
use sqlx::mysql::MySqlPool;
use sqlx::{QueryBuilder, Row};
use tidemark_core::day::UtcDay;
use tidemark_core::mysql::{MysqlError, connect};
use tidemark_core::store::StoreError;

use super::{DailyRow, ReportRow, RollupStore, produced_keys, stale_keys};

const SCHEMA: [&str; 2] = [
    "CREATE TABLE IF NOT EXISTS listing_daily (
        listing_id BIGINT NOT NULL,
        day DATE NOT NULL,
        event VARCHAR(100) NOT NULL,
        total BIGINT UNSIGNED NOT NULL,
        uniques BIGINT UNSIGNED NOT NULL,
        PRIMARY KEY (listing_id, day, event),
        KEY listing_daily_day (day)
    ) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS listings (
        tenant VARCHAR(255) NOT NULL,
        id BIGINT NOT NULL,
        account_id BIGINT NOT NULL,
        PRIMARY KEY (tenant, id),
        KEY listings_account (tenant, account_id, id)
    ) ENGINE=InnoDB",
];

/// Rows per multi-row `INSERT` (5 placeholders each, far below the 65,535 limit).
const ROWS_PER_INSERT: usize = 1_000;

/// The report: per listing of the account and kind, sums over the period (`CAST` keeps the
/// sums `BIGINT UNSIGNED`; `SUM` alone would be `DECIMAL`).
pub const REPORT: &str = "SELECT d.listing_id, d.event,
        CAST(SUM(d.total) AS UNSIGNED) AS total, CAST(SUM(d.uniques) AS UNSIGNED) AS uniques
     FROM listings l
     JOIN listing_daily d ON d.listing_id = l.id AND d.day BETWEEN ? AND ?
     WHERE l.tenant = ? AND l.account_id = ? AND (? IS NULL OR d.event = ?)
     GROUP BY d.listing_id, d.event
     ORDER BY d.listing_id, d.event";

/// The summary tier on MariaDB / MySQL (see the module docs).
#[derive(Debug, Clone)]
pub struct MysqlRollups {
    pool: MySqlPool,
}

impl MysqlRollups {
    /// Connects to `url` (`mysql://user[:password]@host[:port]/database`; the database is
    /// created if missing) with a pool of `max_connections`, and creates the tables.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self, MysqlError> {
        let pool = connect(url, max_connections).await?;
        for ddl in SCHEMA {
            sqlx::query(ddl).execute(&pool).await?;
        }
        Ok(Self { pool })
    }

    /// The pool (for tests that read query plans).
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }
}

/// Text read from a `utf8mb4_bin` column: the driver hands it over as bytes (binary
/// collation), so it is checked here, with a clear error instead of a panic.
fn text(bytes: Vec<u8>) -> Result<String, StoreError> {
    String::from_utf8(bytes).map_err(|e| StoreError::Rejected {
        backend: "mysql",
        message: format!("an event kind is not UTF-8: {e}"),
    })
}

#[async_trait]
impl RollupStore for MysqlRollups {
    async fn upsert_day(&self, day: UtcDay, mut rows: Vec<DailyRow>) -> Result<usize, StoreError> {
        // Key order: the rows of one listing land next to each other in the clustered index.
        rows.sort_by(|a, b| (a.listing_id, &a.kind).cmp(&(b.listing_id, &b.kind)));
        let day_text = day.to_string();
        let mut tx = self.pool.begin().await?;
        for chunk in rows.chunks(ROWS_PER_INSERT) {
            let mut q = QueryBuilder::new(
                "INSERT INTO listing_daily (listing_id, day, event, total, uniques) ",
            );
            q.push_values(chunk, |mut b, r| {
                b.push_bind(r.listing_id)
                    .push_bind(&day_text)
                    .push_bind(&r.kind)
                    .push_bind(r.total)
                    .push_bind(r.uniques);
            });
            q.push(" ON DUPLICATE KEY UPDATE total = VALUES(total), uniques = VALUES(uniques)");
            q.build().execute(&mut *tx).await?;
        }
        let existing: Vec<(i64, Vec<u8>)> =
            sqlx::query_as("SELECT listing_id, event FROM listing_daily WHERE day = ? FOR UPDATE")
                .bind(&day_text)
                .fetch_all(&mut *tx)
                .await?;
        let existing = existing
            .into_iter()
            .map(|(l, k)| Ok((l, text(k)?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        for (listing_id, event) in stale_keys(existing, &rows) {
            sqlx::query("DELETE FROM listing_daily WHERE listing_id = ? AND day = ? AND event = ?")
                .bind(listing_id)
                .bind(&day_text)
                .bind(event)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(produced_keys(&rows).len())
    }

    async fn put_listings(&self, tenant: &str, pairs: &[(i64, i64)]) -> Result<usize, StoreError> {
        let mut tx = self.pool.begin().await?;
        // One statement per pair, in order, so a later pair for the same listing wins.
        for (listing_id, account_id) in pairs {
            sqlx::query(
                "INSERT INTO listings (tenant, id, account_id) VALUES (?, ?, ?)
                 ON DUPLICATE KEY UPDATE account_id = VALUES(account_id)",
            )
            .bind(tenant)
            .bind(listing_id)
            .bind(account_id)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(pairs.len())
    }

    async fn report(
        &self,
        tenant: &str,
        account_id: i64,
        from: UtcDay,
        to: UtcDay,
        kind: Option<&str>,
    ) -> Result<Vec<ReportRow>, StoreError> {
        let rows = sqlx::query(REPORT)
            .bind(from.to_string())
            .bind(to.to_string())
            .bind(tenant)
            .bind(account_id)
            .bind(kind)
            .bind(kind)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                Ok(ReportRow {
                    listing_id: r.try_get(0)?,
                    kind: text(r.try_get(1)?)?,
                    total: r.try_get(2)?,
                    uniques_daily_sum: r.try_get(3)?,
                })
            })
            .collect()
    }

    async fn day_rows(&self, day: UtcDay) -> Result<Vec<DailyRow>, StoreError> {
        let rows: Vec<(i64, Vec<u8>, u64, u64)> = sqlx::query_as(
            "SELECT listing_id, event, total, uniques FROM listing_daily WHERE day = ?
             ORDER BY listing_id, event",
        )
        .bind(day.to_string())
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|(listing_id, kind, total, uniques)| {
                Ok(DailyRow {
                    listing_id,
                    kind: text(kind)?,
                    total,
                    uniques,
                })
            })
            .collect()
    }
}
