//! The raw tier's day catalog, `raw_day`, in a SQLite file: one row per day with the events
//! appended, the last arrival, the rollup and archive marks and when the day was dropped. The
//! rollup scheduler and the lifecycle read it; every raw backend keeps it the same way, with
//! these functions, so the rules (marks never move back; a day is dropped only when rolled up
//! and archived up to its last arrival and no append is in flight) are written once.
//!
//! - [`super::SqliteRaw`] keeps it in `raw.db`, next to the day tables, and updates it in the
//!   same transaction as the events.
//! - [`super::InfluxRaw`] keeps it behind the [`DayCatalog`] port, which brackets each write
//!   to InfluxDB: [`SqliteCatalog`], a local file with these functions, for one node, or
//!   `MysqlCatalog` ([`mysql`]), a table in the summary tier's MariaDB database with the same
//!   columns and rules, which every node shares, so any node ingests and the lifecycle sees
//!   every day.
//!
//! The table, and how a catalog of an earlier layout is brought to it: [`super::migrations`].

use std::collections::HashMap;
use std::path::Path;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};
use tidemark_core::day::Day;
use tidemark_core::schema::migrate_sqlite;
use tidemark_core::sqlite::{GroupWriter, ReadPool, open_rw, opening};
use tidemark_core::store::StoreError;

use super::{DayState, RawError};

pub mod mysql;

/// The day catalog of a raw tier whose server has no transactions (InfluxDB): the rules of
/// this module, each call one atomic step.
#[async_trait]
pub trait DayCatalog: Send + Sync + std::fmt::Debug {
    /// Step (1) of an append: refuses the whole batch if a day of it was dropped
    /// ([`RawError::DayDropped`]), else counts each day's `n` events as pending (arrival
    /// `now_ms`) and reserves their sequence numbers; returns each day's first number.
    async fn begin_appends(
        &self,
        counts: &[(Day, i64)],
        now_ms: i64,
    ) -> Result<HashMap<Day, i64>, RawError>;
    /// Step (3): the pending events count (`stored`), or are released.
    async fn end_appends(
        &self,
        counts: &[(Day, i64)],
        stored: bool,
        now_ms: i64,
    ) -> Result<(), StoreError>;
    /// Whether `day` was dropped.
    async fn is_dropped(&self, day: Day) -> Result<bool, StoreError>;
    /// Every day, ascending.
    async fn days(&self) -> Result<Vec<DayState>, StoreError>;
    /// Moves a mark of `day` forward to `arrival_ms` (never back).
    async fn set_mark(&self, mark: Mark, day: Day, arrival_ms: i64) -> Result<(), StoreError>;
    /// [`mark_dropped_if_current`], in one step.
    async fn mark_dropped_if_current(&self, day: Day, now_ms: i64) -> Result<bool, StoreError>;
    /// Forgets every day (a zone move re-cutting the tier, [`crate::zone_move`]).
    async fn clear(&self) -> Result<(), StoreError>;
    /// [`record_dropped`], in one step.
    async fn record_dropped(&self, days: &[DayState]) -> Result<(), StoreError>;
}

/// The catalog in a local SQLite file, one node's (group-committed writes, pooled reads).
#[derive(Debug)]
pub struct SqliteCatalog {
    writer: GroupWriter,
    reads: ReadPool,
}

impl SqliteCatalog {
    /// Opens (creating if missing) the catalog file at `path`, at its known version.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let (writer, reads) = opening(path, || {
            let conn = open_rw(path)?;
            migrate_sqlite(&conn, path, &super::migrations::RAW)?;
            let writer = GroupWriter::start("events-influx-catalog", conn, 64);
            Ok((writer, ReadPool::open(path, 4)?))
        })?;
        Ok(Self { writer, reads })
    }
}

#[async_trait]
impl DayCatalog for SqliteCatalog {
    async fn begin_appends(
        &self,
        counts: &[(Day, i64)],
        now_ms: i64,
    ) -> Result<HashMap<Day, i64>, RawError> {
        let counts = counts.to_vec();
        self.writer
            .write(move |conn| {
                for (day, _) in &counts {
                    if dropped_ms(conn, *day)?.is_some() {
                        return Err(RawError::DayDropped(*day));
                    }
                }
                let mut out = HashMap::new();
                for (day, n) in &counts {
                    out.insert(*day, begin_append(conn, *day, *n, now_ms)?);
                }
                Ok(out)
            })
            .await
    }

    async fn end_appends(
        &self,
        counts: &[(Day, i64)],
        stored: bool,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let counts = counts.to_vec();
        self.writer
            .write(move |conn| {
                for (day, n) in &counts {
                    if stored {
                        finish_append(conn, *day, *n, now_ms)?;
                    } else {
                        abort_append(conn, *day, *n, now_ms)?;
                    }
                }
                Ok::<_, StoreError>(())
            })
            .await
    }

    async fn is_dropped(&self, day: Day) -> Result<bool, StoreError> {
        self.reads
            .read(move |conn| Ok::<_, StoreError>(dropped_ms(conn, day)?.is_some()))
            .await
    }

    async fn days(&self) -> Result<Vec<DayState>, StoreError> {
        self.reads.read(|conn| Ok(days(conn)?)).await
    }

    async fn set_mark(&self, mark: Mark, day: Day, arrival_ms: i64) -> Result<(), StoreError> {
        self.writer
            .write(move |conn| Ok::<_, StoreError>(set_mark(conn, mark, day, arrival_ms)?))
            .await
    }

    async fn mark_dropped_if_current(&self, day: Day, now_ms: i64) -> Result<bool, StoreError> {
        self.writer
            .write(move |conn| Ok::<_, StoreError>(mark_dropped_if_current(conn, day, now_ms)?))
            .await
    }

    async fn clear(&self) -> Result<(), StoreError> {
        self.writer
            .write(|conn| Ok::<_, StoreError>(clear(conn)?))
            .await
    }

    async fn record_dropped(&self, days: &[DayState]) -> Result<(), StoreError> {
        let days = days.to_vec();
        self.writer
            .write(move |conn| Ok::<_, StoreError>(record_dropped(conn, &days)?))
            .await
    }
}

/// Enters `days` as the catalog had them (events, last arrival, marks, when dropped),
/// replacing any entry of theirs: days of a re-cut tier whose events live only in the archive,
/// so that late events for them are refused as for any dropped day ([`crate::zone_move`]).
pub(crate) fn record_dropped(conn: &Connection, days: &[DayState]) -> rusqlite::Result<()> {
    let mut stmt = conn.prepare_cached(
        "INSERT OR REPLACE INTO raw_day (day, events, last_arrival_ms, rolled_up_arrival_ms,
             archived_arrival_ms, dropped_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    for s in days {
        stmt.execute(params![
            s.day.0,
            i64::try_from(s.events).unwrap_or(i64::MAX),
            s.last_arrival_ms,
            s.rolled_up_arrival_ms,
            s.archived_arrival_ms,
            s.dropped_ms
        ])?;
    }
    Ok(())
}

/// Forgets every day of the catalog.
pub(crate) fn clear(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute("DELETE FROM raw_day", []).map(drop)
}

/// When the day was dropped, if it was.
pub(crate) fn dropped_ms(conn: &Connection, day: Day) -> rusqlite::Result<Option<i64>> {
    Ok(conn
        .prepare_cached("SELECT dropped_ms FROM raw_day WHERE day = ?1")?
        .query_row([day.0], |r| r.get(0))
        .optional()?
        .flatten())
}

/// Counts `n` events appended to `day` at `now_ms` (the embedded store, in the transaction
/// that stores them).
pub(crate) fn add_events(conn: &Connection, day: Day, n: i64, now_ms: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO raw_day (day, events, last_arrival_ms) VALUES (?1, ?2, ?3)
         ON CONFLICT (day) DO UPDATE SET events = events + excluded.events,
             last_arrival_ms = max(last_arrival_ms, excluded.last_arrival_ms)",
    )?
    .execute(params![day.0, n, now_ms])?;
    Ok(())
}

/// Before `n` events of `day` are written to an external server: the day is created in the
/// catalog if new (arrival `now_ms`), the events are counted as pending (so the day cannot be
/// dropped meanwhile), and a range of `n` sequence numbers is reserved; returns its first
/// number. The caller has checked, in the same transaction, that the day is not dropped.
pub(crate) fn begin_append(
    conn: &Connection,
    day: Day,
    n: i64,
    now_ms: i64,
) -> rusqlite::Result<i64> {
    conn.prepare_cached(
        "INSERT INTO raw_day (day, events, last_arrival_ms) VALUES (?1, 0, ?2)
         ON CONFLICT (day) DO NOTHING",
    )?
    .execute(params![day.0, now_ms])?;
    let first: i64 = conn
        .prepare_cached("SELECT next_seq FROM raw_day WHERE day = ?1")?
        .query_row([day.0], |r| r.get(0))?;
    conn.prepare_cached(
        "UPDATE raw_day SET pending = pending + ?2, next_seq = next_seq + ?2,
             pending_since_ms = max(coalesce(pending_since_ms, ?3), ?3)
         WHERE day = ?1",
    )?
    .execute(params![day.0, n, now_ms])?;
    Ok(first)
}

/// After the `n` pending events of `day` were stored: they count, and the day's last arrival
/// moves to `now_ms`, at least 1 ms past the previous one, so a rollup or archive that ran
/// while they were being written — and may have missed some — sees the day as dirty.
pub(crate) fn finish_append(
    conn: &Connection,
    day: Day,
    n: i64,
    now_ms: i64,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE raw_day SET pending = max(pending - ?2, 0), events = events + ?2,
             last_arrival_ms = CASE WHEN events = 0 THEN ?3
                                    ELSE max(last_arrival_ms + 1, ?3) END
         WHERE day = ?1",
    )?
    .execute(params![day.0, n, now_ms])?;
    Ok(())
}

/// After a failed write of `n` pending events of `day`: they no longer hold the day. The last
/// arrival moves forward as in [`finish_append`], since some of them may have been stored (a
/// partial write) and a later rollup must see them.
pub(crate) fn abort_append(
    conn: &Connection,
    day: Day,
    n: i64,
    now_ms: i64,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE raw_day SET pending = max(pending - ?2, 0),
             last_arrival_ms = max(last_arrival_ms + 1, ?3)
         WHERE day = ?1",
    )?
    .execute(params![day.0, n, now_ms])?;
    Ok(())
}

/// Every day, ascending.
pub(crate) fn days(conn: &Connection) -> rusqlite::Result<Vec<DayState>> {
    let mut stmt = conn.prepare_cached(
        "SELECT day, events, last_arrival_ms, rolled_up_arrival_ms, archived_arrival_ms,
             dropped_ms FROM raw_day ORDER BY day",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(DayState {
            day: Day(r.get(0)?),
            events: r.get::<_, i64>(1)? as u64,
            last_arrival_ms: r.get(2)?,
            rolled_up_arrival_ms: r.get(3)?,
            archived_arrival_ms: r.get(4)?,
            dropped_ms: r.get(5)?,
        })
    })?;
    rows.collect()
}

/// A job's mark on a day: done as of an arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// `rolled_up_arrival_ms`.
    RolledUp,
    /// `archived_arrival_ms`.
    Archived,
}

/// Moves a mark forward to `arrival_ms` (never back).
pub(crate) fn set_mark(
    conn: &Connection,
    mark: Mark,
    day: Day,
    arrival_ms: i64,
) -> rusqlite::Result<()> {
    let column = match mark {
        Mark::RolledUp => "rolled_up_arrival_ms",
        Mark::Archived => "archived_arrival_ms",
    };
    conn.prepare_cached(&format!(
        "UPDATE raw_day SET {column} = max(coalesce({column}, ?2), ?2) WHERE day = ?1"
    ))?
    .execute(params![day.0, arrival_ms])?;
    Ok(())
}

/// How long an append may stay in flight before it is taken for dead (its process stopped
/// between beginning and finishing it). Far above the longest write: InfluxDB requests time out
/// after 30 s and are tried 4 times.
pub(crate) const PENDING_EXPIRES_MS: i64 = 10 * 60 * 1000;

/// Marks the day dropped at `now_ms` if, at this instant, it is rolled up and archived up to
/// its last arrival and no append is in flight (appends begun more than
/// [`PENDING_EXPIRES_MS`] ago are dead; DESIGN principle 2); returns whether it did. The
/// caller then removes the day's data.
pub(crate) fn mark_dropped_if_current(
    conn: &Connection,
    day: Day,
    now_ms: i64,
) -> rusqlite::Result<bool> {
    Ok(conn.execute(
        "UPDATE raw_day SET dropped_ms = ?2 WHERE day = ?1 AND dropped_ms IS NULL
           AND (pending = 0 OR pending_since_ms < ?2 - ?3)
           AND rolled_up_arrival_ms >= last_arrival_ms
           AND archived_arrival_ms >= last_arrival_ms",
        params![day.0, now_ms, PENDING_EXPIRES_MS],
    )? == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_append_in_flight_holds_the_day_until_it_is_taken_for_dead() {
        let conn = super::super::migrations::in_memory();
        let day = Day(20_000);
        assert_eq!(begin_append(&conn, day, 3, 1_000).unwrap(), 0);
        finish_append(&conn, day, 3, 1_000).unwrap();
        assert_eq!(
            begin_append(&conn, day, 2, 2_000).unwrap(),
            3,
            "numbers go on"
        );
        set_mark(&conn, Mark::RolledUp, day, 5_000).unwrap();
        set_mark(&conn, Mark::Archived, day, 5_000).unwrap();
        assert!(
            !mark_dropped_if_current(&conn, day, 6_000).unwrap(),
            "in flight"
        );
        // The process died: after the expiry the day may go.
        assert!(mark_dropped_if_current(&conn, day, 2_001 + PENDING_EXPIRES_MS).unwrap());
        let s = days(&conn).unwrap()[0];
        assert_eq!((s.events, s.last_arrival_ms), (3, 1_000));
    }

    #[test]
    fn a_finished_or_failed_append_makes_the_day_dirty() {
        let conn = super::super::migrations::in_memory();
        let day = Day(20_000);
        begin_append(&conn, day, 1, 1_000).unwrap();
        finish_append(&conn, day, 1, 1_000).unwrap();
        set_mark(&conn, Mark::RolledUp, day, 1_000).unwrap();
        begin_append(&conn, day, 1, 1_000).unwrap();
        abort_append(&conn, day, 1, 1_000).unwrap();
        let s = days(&conn).unwrap()[0];
        assert_eq!((s.events, s.last_arrival_ms), (1, 1_001));
        assert!(!s.rollup_current());
    }
}
