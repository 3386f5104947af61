//! The day catalog on MariaDB / MySQL: the table `raw_day` with the columns and rules of the
//! SQLite catalog ([`super`]), in the summary tier's database, shared by every node of an
//! InfluxDB raw tier. Each step that decides is one transaction; the rows of a batch's days
//! are locked in ascending day order (`SELECT … FOR UPDATE`), so two nodes appending to the
//! same days serialise on them instead of deadlocking, and the drop decision stays atomic with
//! appends.
//!
//! A node that kept a local catalog before (`influx-catalog.db`) has it merged in at its first
//! start on MariaDB ([`MysqlCatalog::take_in_local`]).

use std::collections::HashMap;
use std::path::Path;

use async_trait::async_trait;
use sqlx::mysql::MySqlPool;
use sqlx::{MySqlConnection, Row};
use tidemark_core::day::Day;
use tidemark_core::mysql::{MysqlError, connect};
use tidemark_core::schema::{MysqlUp, Step, Versions, migrate_mysql};
use tidemark_core::store::StoreError;

use super::{DayCatalog, Mark, PENDING_EXPIRES_MS};
use crate::raw::{DayState, RawError};

/// The catalog's versions (its row in `tidemark_schema_version` is `events_raw_catalog`):
/// - version 1: `raw_day`.
static MYSQL: Versions<MysqlUp> = Versions {
    store: "events_raw_catalog",
    marks: &["raw_day"],
    migrations: &[Step {
        what: "raw_day catalog",
        up: MysqlUp::Sql(&["CREATE TABLE IF NOT EXISTS raw_day (
                day INT NOT NULL PRIMARY KEY,
                events BIGINT NOT NULL,
                last_arrival_ms BIGINT NOT NULL,
                rolled_up_arrival_ms BIGINT NULL,
                archived_arrival_ms BIGINT NULL,
                dropped_ms BIGINT NULL,
                pending BIGINT NOT NULL DEFAULT 0,
                pending_since_ms BIGINT NULL,
                next_seq BIGINT NOT NULL DEFAULT 0
            ) ENGINE=InnoDB"]),
    }],
    adopt: &[],
};

/// The shared day catalog (see the module docs).
#[derive(Debug)]
pub struct MysqlCatalog {
    pool: MySqlPool,
}

impl MysqlCatalog {
    /// Connects to `url` (`mysql://…/database`, created if missing) with a pool of
    /// `max_connections` and brings the catalog to its version (a newer one is refused).
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self, MysqlError> {
        let pool = connect(url, max_connections).await?;
        migrate_mysql(&pool, &MYSQL).await?;
        Ok(Self { pool })
    }

    /// The pool (for tests).
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    /// Merges the days of a node's local catalog file at `path` into this one, once, then
    /// renames the file `influx-catalog.db.moved`; returns the days merged (0 without a file).
    /// A day both know gets the sum of their events, the later arrival and next number, the
    /// earlier of each mark (a day only one of them saw rolled up is rolled up again) and a
    /// drop if either dropped it; appends in flight in the file are dead (its process
    /// stopped) and are not carried over.
    pub async fn take_in_local(&self, path: &Path) -> Result<usize, StoreError> {
        if !path.exists() {
            return Ok(0);
        }
        let file = path.to_owned();
        let days =
            tokio::task::spawn_blocking(move || -> Result<Vec<(DayState, i64)>, StoreError> {
                let conn = rusqlite::Connection::open(&file)?;
                let states = super::days(&conn)?;
                let mut out = Vec::with_capacity(states.len());
                for s in states {
                    let next: i64 = conn.query_row(
                        "SELECT next_seq FROM raw_day WHERE day = ?1",
                        [s.day.0],
                        |r| r.get(0),
                    )?;
                    out.push((s, next));
                }
                conn.close().map_err(|(_, e)| e)?;
                Ok(out)
            })
            .await
            .map_err(|e| StoreError::unavailable("sqlite", e.to_string()))??;
        let mut tx = self.pool.begin().await?;
        for (s, next_seq) in &days {
            let query = sqlx::query(
                "INSERT INTO raw_day (day, events, last_arrival_ms, rolled_up_arrival_ms,
                     archived_arrival_ms, dropped_ms, next_seq)
                 VALUES (?, ?, ?, ?, ?, ?, ?)
                 ON DUPLICATE KEY UPDATE
                     events = events + VALUES(events),
                     last_arrival_ms = GREATEST(last_arrival_ms, VALUES(last_arrival_ms)),
                     rolled_up_arrival_ms = IF(rolled_up_arrival_ms IS NULL
                         OR VALUES(rolled_up_arrival_ms) IS NULL, NULL,
                         LEAST(rolled_up_arrival_ms, VALUES(rolled_up_arrival_ms))),
                     archived_arrival_ms = IF(archived_arrival_ms IS NULL
                         OR VALUES(archived_arrival_ms) IS NULL, NULL,
                         LEAST(archived_arrival_ms, VALUES(archived_arrival_ms))),
                     dropped_ms = COALESCE(dropped_ms, VALUES(dropped_ms)),
                     next_seq = GREATEST(next_seq, VALUES(next_seq))",
            );
            bind_state(query, s)
                .bind(next_seq)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        std::fs::rename(path, path.with_extension("db.moved"))
            .map_err(|e| StoreError::file(path, e).with_context("renaming"))?;
        Ok(days.len())
    }
}

/// `query` with a day's catalog entry bound to its next six parameters: day, events, last
/// arrival, the two marks and when it was dropped.
fn bind_state<'q>(
    query: sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments>,
    s: &DayState,
) -> sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments> {
    query
        .bind(s.day.0)
        .bind(i64::try_from(s.events).unwrap_or(i64::MAX))
        .bind(s.last_arrival_ms)
        .bind(s.rolled_up_arrival_ms)
        .bind(s.archived_arrival_ms)
        .bind(s.dropped_ms)
}

/// Makes sure the rows of `counts`' days exist (arrival `now_ms`), each in a statement of its
/// own: an insert inside the locking transaction would take gap locks, on which two nodes
/// appending to a new day deadlock.
async fn create_days(
    pool: &MySqlPool,
    counts: &[(Day, i64)],
    now_ms: i64,
) -> Result<(), sqlx::Error> {
    for (day, _) in counts {
        sqlx::query("INSERT IGNORE INTO raw_day (day, events, last_arrival_ms) VALUES (?, 0, ?)")
            .bind(day.0)
            .bind(now_ms)
            .execute(pool)
            .await?;
    }
    Ok(())
}

/// Locks the rows of `counts`' days, in ascending order (two nodes locking the same days
/// queue instead of deadlocking); returns each day's `(dropped_ms, next_seq)`.
async fn lock_days(
    conn: &mut MySqlConnection,
    counts: &[(Day, i64)],
) -> Result<Vec<(Option<i64>, i64)>, sqlx::Error> {
    let mut out = Vec::with_capacity(counts.len());
    for (day, _) in counts {
        let row = sqlx::query("SELECT dropped_ms, next_seq FROM raw_day WHERE day = ? FOR UPDATE")
            .bind(day.0)
            .fetch_one(&mut *conn)
            .await?;
        out.push((row.try_get(0)?, row.try_get(1)?));
    }
    Ok(out)
}

#[async_trait]
impl DayCatalog for MysqlCatalog {
    async fn begin_appends(
        &self,
        counts: &[(Day, i64)],
        now_ms: i64,
    ) -> Result<HashMap<Day, i64>, RawError> {
        let mut counts = counts.to_vec();
        counts.sort();
        // A dropped day stays dropped: seen here, the batch is refused before any row is made.
        for (day, _) in &counts {
            if self.is_dropped(*day).await? {
                return Err(RawError::DayDropped(*day));
            }
        }
        create_days(&self.pool, &counts, now_ms)
            .await
            .map_err(StoreError::from)?;
        let mut tx = self.pool.begin().await.map_err(StoreError::from)?;
        let locked = lock_days(&mut tx, &counts)
            .await
            .map_err(StoreError::from)?;
        // Dropped since the check above: refused, holding none of the batch's days.
        if let Some(((day, _), _)) = counts.iter().zip(&locked).find(|(_, l)| l.0.is_some()) {
            return Err(RawError::DayDropped(*day));
        }
        let mut first = HashMap::new();
        for ((day, n), (_, next_seq)) in counts.iter().zip(locked) {
            sqlx::query(
                "UPDATE raw_day SET pending = pending + ?, next_seq = next_seq + ?,
                     pending_since_ms = GREATEST(COALESCE(pending_since_ms, ?), ?)
                 WHERE day = ?",
            )
            .bind(n)
            .bind(n)
            .bind(now_ms)
            .bind(now_ms)
            .bind(day.0)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::from)?;
            first.insert(*day, next_seq);
        }
        tx.commit().await.map_err(StoreError::from)?;
        Ok(first)
    }

    async fn end_appends(
        &self,
        counts: &[(Day, i64)],
        stored: bool,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let mut counts = counts.to_vec();
        counts.sort();
        // As the SQLite catalog's `finish_append` / `abort_append`: the last arrival moves at
        // least 1 ms past the previous one, so a rollup or archive that ran meanwhile is dirty.
        // MariaDB assigns left to right, each seeing the ones before: `last_arrival_ms` reads
        // `events` before it is counted up.
        let sql = if stored {
            "UPDATE raw_day SET pending = GREATEST(pending - ?, 0),
                 last_arrival_ms = IF(events = 0, ?, GREATEST(last_arrival_ms + 1, ?)),
                 events = events + ?
             WHERE day = ?"
        } else {
            "UPDATE raw_day SET pending = GREATEST(pending - ?, 0),
                 last_arrival_ms = GREATEST(last_arrival_ms + 1, ?)
             WHERE day = ?"
        };
        let mut tx = self.pool.begin().await?;
        for (day, n) in &counts {
            let q = sqlx::query(sql).bind(n).bind(now_ms);
            let q = if stored { q.bind(now_ms).bind(n) } else { q };
            q.bind(day.0).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn is_dropped(&self, day: Day) -> Result<bool, StoreError> {
        let row = sqlx::query("SELECT dropped_ms FROM raw_day WHERE day = ?")
            .bind(day.0)
            .fetch_optional(&self.pool)
            .await?;
        Ok(match row {
            Some(r) => r.try_get::<Option<i64>, _>(0)?.is_some(),
            None => false,
        })
    }

    async fn days(&self) -> Result<Vec<DayState>, StoreError> {
        let rows = sqlx::query(
            "SELECT day, events, last_arrival_ms, rolled_up_arrival_ms, archived_arrival_ms,
                 dropped_ms FROM raw_day ORDER BY day",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            out.push(DayState {
                day: Day(r.try_get(0)?),
                events: u64::try_from(r.try_get::<i64, _>(1)?).unwrap_or(0),
                last_arrival_ms: r.try_get(2)?,
                rolled_up_arrival_ms: r.try_get(3)?,
                archived_arrival_ms: r.try_get(4)?,
                dropped_ms: r.try_get(5)?,
            });
        }
        Ok(out)
    }

    async fn set_mark(&self, mark: Mark, day: Day, arrival_ms: i64) -> Result<(), StoreError> {
        let column = match mark {
            Mark::RolledUp => "rolled_up_arrival_ms",
            Mark::Archived => "archived_arrival_ms",
        };
        sqlx::query(&format!(
            "UPDATE raw_day SET {column} = GREATEST(COALESCE({column}, ?), ?) WHERE day = ?"
        ))
        .bind(arrival_ms)
        .bind(arrival_ms)
        .bind(day.0)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn mark_dropped_if_current(&self, day: Day, now_ms: i64) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE raw_day SET dropped_ms = ? WHERE day = ? AND dropped_ms IS NULL
               AND (pending = 0 OR pending_since_ms < ? - ?)
               AND rolled_up_arrival_ms >= last_arrival_ms
               AND archived_arrival_ms >= last_arrival_ms",
        )
        .bind(now_ms)
        .bind(day.0)
        .bind(now_ms)
        .bind(PENDING_EXPIRES_MS)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn clear(&self) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM raw_day")
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn record_dropped(&self, days: &[DayState]) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        for s in days {
            let query = sqlx::query(
                "REPLACE INTO raw_day (day, events, last_arrival_ms, rolled_up_arrival_ms,
                     archived_arrival_ms, dropped_ms) VALUES (?, ?, ?, ?, ?, ?)",
            );
            bind_state(query, s).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }
}
