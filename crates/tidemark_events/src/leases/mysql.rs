//! Per-day leases on MariaDB / MySQL: the table `events_day_lease` of the summary tier's
//! database (made by its migrations, [`crate::rollups`]), one row per day that has had a
//! lease: holder, fencing token, expiry. Expiry is read and set on the database server's clock
//! (`NOW(3)`), the one clock every node shares. A take-over happens in a transaction holding
//! the row (`FOR UPDATE`); a fenced write reads the row in its own transaction with a shared
//! lock ([`check_fence`]), so a take-over waits for the write to commit and a write after a
//! take-over sees it.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::mysql::MySqlPool;
use sqlx::{MySqlConnection, Row};
use tidemark_core::day::Day;
use tidemark_core::store::{ErrorKind, StoreError};

use super::{DayLease, DayLeases};

/// The database server's clock, Unix ms.
const DB_NOW_MS: &str = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)";

/// The leases of one holder (see the module docs).
#[derive(Debug, Clone)]
pub struct MysqlDayLeases {
    pool: MySqlPool,
    holder: String,
    ttl_ms: i64,
}

impl MysqlDayLeases {
    /// Leases in the summary-tier database of `pool` (migrated by
    /// [`crate::rollups::MysqlRollups::connect`]), held for `ttl` under this process's holder
    /// name.
    pub fn new(pool: MySqlPool, ttl: Duration) -> Self {
        Self::with_holder(pool, tidemark_core::lease::holder_name(), ttl)
    }

    /// The same under the holder name `holder` (tests name their nodes).
    pub fn with_holder(pool: MySqlPool, holder: impl Into<String>, ttl: Duration) -> Self {
        Self {
            pool,
            holder: holder.into(),
            ttl_ms: i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX),
        }
    }
}

#[async_trait]
impl DayLeases for MysqlDayLeases {
    async fn acquire(&self, day: Day) -> Result<Option<DayLease>, StoreError> {
        // The row is made outside the deciding transaction: an insert there would take gap
        // locks, on which two nodes taking a new day deadlock.
        sqlx::query(
            "INSERT IGNORE INTO events_day_lease (day, holder, token, expires_ms) VALUES (?, '', 0, 0)",
        )
        .bind(day.0)
        .execute(&self.pool)
        .await?;
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(&format!(
            "SELECT holder, token, expires_ms, {DB_NOW_MS} FROM events_day_lease
             WHERE day = ? FOR UPDATE"
        ))
        .bind(day.0)
        .fetch_one(&mut *tx)
        .await?;
        let holder = tidemark_core::mysql::text_column(&row, 0)?;
        let (token, expires, now): (u64, i64, i64) =
            (row.try_get(1)?, row.try_get(2)?, row.try_get(3)?);
        let ours = holder == self.holder;
        if !ours && expires > now {
            return Ok(None);
        }
        // A lease of ours still running is renewed under its token; any other is taken over
        // under the next one.
        let renewed = ours && expires > now;
        let token = if renewed { token } else { token + 1 };
        sqlx::query(
            "UPDATE events_day_lease SET holder = ?, token = ?, expires_ms = ? WHERE day = ?",
        )
        .bind(&self.holder)
        .bind(token)
        .bind(now.saturating_add(self.ttl_ms))
        .bind(day.0)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Some(DayLease {
            day,
            holder: self.holder.clone(),
            token,
            renewed,
        }))
    }

    async fn holds(&self, lease: &DayLease) -> Result<bool, StoreError> {
        let mut conn = self.pool.acquire().await?;
        Ok(held(&mut conn, lease, "").await?)
    }

    async fn release(&self, lease: &DayLease) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE events_day_lease SET expires_ms = 0 WHERE day = ? AND holder = ? AND token = ?",
        )
        .bind(lease.day.0)
        .bind(&lease.holder)
        .bind(lease.token)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}

/// Whether `lease` is held and unexpired, read with `lock` (`""`, or `LOCK IN SHARE MODE`).
async fn held(
    conn: &mut MySqlConnection,
    lease: &DayLease,
    lock: &str,
) -> Result<bool, sqlx::Error> {
    let row = sqlx::query(&format!(
        "SELECT 1 FROM events_day_lease
         WHERE day = ? AND holder = ? AND token = ? AND expires_ms > {DB_NOW_MS} {lock}"
    ))
    .bind(lease.day.0)
    .bind(&lease.holder)
    .bind(lease.token)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.is_some())
}

/// The fence of a write: inside the write's transaction `conn`, checks that `lease` is still
/// held, and keeps its row locked (shared) until the transaction ends, so no take-over
/// commits in between. Errors: [`ErrorKind::Conflict`] when the lease was lost (the caller
/// rolls back: nothing of its write stays).
pub async fn check_fence(conn: &mut MySqlConnection, lease: &DayLease) -> Result<(), StoreError> {
    if held(conn, lease, "LOCK IN SHARE MODE").await? {
        return Ok(());
    }
    Err(StoreError::new(
        ErrorKind::Conflict,
        "mysql",
        format!(
            "the lease on {} (token {}) was lost to another node: this write is refused",
            lease.day, lease.token
        ),
    ))
}
