//! The raw tier (DESIGN.md part C "Raw tier"): events partitioned by day, the days of the
//! store's [`Calendar`] (UTC, or the local days of `events.time_zone`).
//!
//! Embedded default: `raw.db` with one table `raw_YYYYMMDD` per day, created on first use, and
//! a `raw_day` catalog (events per day, last arrival) that the rollup scheduler reads. Their
//! versions: `migrations`. The InfluxDB tier ([`influx`]) keeps the same catalog behind the
//! [`DayCatalog`] port: a local file, or a MariaDB table every node shares ([`catalog`]).

use std::collections::BTreeMap;
use std::path::Path;

use async_trait::async_trait;
use rusqlite::{Connection, params};
use serde::Serialize;
use tidemark_core::day::Day;
use tidemark_core::schema::migrate_sqlite;
use tidemark_core::sqlite::{GroupWriter, ReadPool, SqliteError, open_rw, opening};
use tidemark_core::store::{AsStoreError, StoreError};

use crate::calendar::Calendar;
use crate::model::{Event, fields_flag_bot};
use crate::rollup::{DayAggregate, ROLLUP_CHUNK, RollupRow};

pub mod catalog;
pub mod influx;
mod migrations;

use catalog::Mark;
pub use catalog::mysql::MysqlCatalog;
pub use catalog::{DayCatalog, SqliteCatalog};
pub use influx::{InfluxRaw, InfluxTarget};

/// The catalog entry of one day of the raw tier: how many events it holds, when the last
/// one arrived, and up to which arrival it has been rolled up and archived. A day is
/// *dirty* for a job when events arrived after that job last ran for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DayState {
    /// The day.
    pub day: Day,
    /// Events appended for it (all arrivals).
    pub events: u64,
    /// Arrival time (Unix ms) of the last event appended for it.
    pub last_arrival_ms: i64,
    /// `last_arrival_ms` as seen by the last successful rollup of the day.
    pub rolled_up_arrival_ms: Option<i64>,
    /// `last_arrival_ms` as seen by the last successful archive of the day.
    pub archived_arrival_ms: Option<i64>,
    /// When the day's raw partition was dropped (its raw data is gone).
    pub dropped_ms: Option<i64>,
}

impl DayState {
    /// Rolled up, and no event arrived since.
    pub fn rollup_current(&self) -> bool {
        self.rolled_up_arrival_ms
            .is_some_and(|a| a >= self.last_arrival_ms)
    }
    /// Archived, and no event arrived since.
    pub fn archive_current(&self) -> bool {
        self.archived_arrival_ms
            .is_some_and(|a| a >= self.last_arrival_ms)
    }
}

/// Events per minute and kind, for the live dashboard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MinuteCount {
    /// Start of the minute (Unix ms).
    pub minute_ms: i64,
    /// Event kind.
    pub kind: String,
    /// Events (rows; bots excluded).
    pub count: u64,
}

/// Errors of the raw tier.
#[derive(Debug, thiserror::Error)]
pub enum RawError {
    /// The store failed; nothing was written.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Events for a day whose raw partition was already rolled up, archived and dropped: they
    /// could never be counted, so the batch is refused rather than stranded.
    #[error(
        "events for {0} arrive after that day was rolled up, archived and dropped from the raw tier; they can no longer be counted"
    )]
    DayDropped(Day),
}

impl AsStoreError for RawError {
    fn as_store_error(&self) -> Option<&StoreError> {
        match self {
            RawError::Store(e) => Some(e),
            RawError::DayDropped(_) => None,
        }
    }
    fn as_store_error_mut(&mut self) -> Option<&mut StoreError> {
        match self {
            RawError::Store(e) => Some(e),
            RawError::DayDropped(_) => None,
        }
    }
}

impl From<rusqlite::Error> for RawError {
    fn from(e: rusqlite::Error) -> Self {
        RawError::Store(e.into())
    }
}

impl From<SqliteError> for RawError {
    fn from(e: SqliteError) -> Self {
        RawError::Store(e.into())
    }
}

/// The raw-tier port (DESIGN.md part C "Raw tier").
#[async_trait]
pub trait RawStore: Send + Sync + std::fmt::Debug {
    /// Appends events durably (all or nothing), each into the partition of its day
    /// ([`RawStore::calendar`]), and updates the day catalog. `now_ms` is the arrival time. Refuses the whole batch with
    /// [`RawError::DayDropped`] if any event belongs to a dropped day.
    async fn append(&self, events: Vec<Event>, now_ms: i64) -> Result<(), RawError>;

    /// The days this store is partitioned by. Every day the events subsystem computes about
    /// the store's events (rollups, closing times, `today`) is a day of this calendar.
    fn calendar(&self) -> &Calendar;

    /// Up to `limit` events of `day` after the cursor `after` (0 to start), in the backend's
    /// stable order (SQLite: arrival; InfluxDB: time), and the cursor to continue from (`None`
    /// when the day is exhausted). The cursor is opaque to callers.
    async fn read_chunk(
        &self,
        day: Day,
        after: i64,
        limit: usize,
    ) -> Result<(Vec<Event>, Option<i64>), StoreError>;

    /// Every day in the catalog, ascending.
    async fn days(&self) -> Result<Vec<DayState>, StoreError>;

    /// Records that the day was rolled up as of arrival `arrival_ms`.
    async fn mark_rolled_up(&self, day: Day, arrival_ms: i64) -> Result<(), StoreError>;

    /// Records that the day was archived as of arrival `arrival_ms`.
    async fn mark_archived(&self, day: Day, arrival_ms: i64) -> Result<(), StoreError>;

    /// Drops the day's partition whole and marks it dropped at `now_ms` — but only if, at that
    /// instant (atomically with appends), the day is still rolled up and archived up to its last
    /// arrival (DESIGN principle 2). Returns whether it was dropped.
    async fn drop_day(&self, day: Day, now_ms: i64) -> Result<bool, StoreError>;

    /// Removes every day: its events and its catalog entry, dropped days included (a zone move
    /// re-cutting the tier, [`crate::zone_move`]; never while events are ingested).
    async fn clear(&self) -> Result<(), StoreError>;

    /// Enters `days` in the catalog as given (their marks and when they were dropped),
    /// replacing any entry of theirs, without events: the days of a re-cut tier that live only
    /// in the archive ([`crate::zone_move`]), so that late events for them are refused and
    /// reads of them say the raw data is gone, as for any dropped day.
    async fn record_dropped(&self, days: &[DayState]) -> Result<(), StoreError>;

    /// Non-bot events per minute and kind with `since_ms ≤ time < until_ms`.
    async fn counts_per_minute(
        &self,
        since_ms: i64,
        until_ms: i64,
    ) -> Result<Vec<MinuteCount>, StoreError>;

    /// The `limit` listings with most non-bot events on `day`: `(listing_id, events)`.
    async fn top_listings(&self, day: Day, limit: usize) -> Result<Vec<(i64, u64)>, StoreError>;

    /// Bytes on disk of each day held, ascending (the raw-window report,
    /// [`crate::raw_window`]): SQLite counts the pages of each day's table (`dbstat`), InfluxDB
    /// sums the `diskBytes` of the shards of each day. A day without its own storage is left
    /// out.
    async fn day_bytes(&self) -> Result<Vec<(Day, u64)>, StoreError>;

    /// When the store itself removes `day`, whatever Tidemark decides (Unix ms): InfluxDB's
    /// retention policy does. `None` (the default) for stores that keep a day until
    /// [`RawStore::drop_day`]. The lifecycle alerts a day before (DESIGN principle 2).
    fn expires_at_ms(&self, day: Day) -> Option<i64> {
        let _ = day;
        None
    }

    /// Feeds every event of `day` to `agg` (the daily rollup's aggregation,
    /// [`crate::rollup`]) and hands it back. The default reads [`RawStore::read_chunk`] by
    /// chunks of [`ROLLUP_CHUNK`] events; a backend that can lend its rows without copying
    /// them into [`Event`]s overrides it.
    async fn fold_day(&self, day: Day, mut agg: DayAggregate) -> Result<DayAggregate, StoreError> {
        let mut cursor = Some(0);
        while let Some(after) = cursor {
            let (chunk, next) = self.read_chunk(day, after, ROLLUP_CHUNK).await?;
            for e in &chunk {
                agg.add(RollupRow::of(e));
            }
            cursor = next;
        }
        Ok(agg)
    }

    /// All events of one day, in arrival order (reads every chunk; for tests and tools).
    async fn day_events(&self, day: Day) -> Result<Vec<Event>, StoreError> {
        let mut out = Vec::new();
        let mut cursor = Some(0);
        while let Some(after) = cursor {
            let (chunk, next) = self.read_chunk(day, after, 10_000).await?;
            out.extend(chunk);
            cursor = next;
        }
        Ok(out)
    }
}

/// The embedded raw tier.
#[derive(Debug)]
pub struct SqliteRaw {
    writer: GroupWriter,
    reads: ReadPool,
    calendar: Calendar,
}

fn table(day: Day) -> String {
    format!("raw_{}", day.compact())
}

/// The day of a table named by [`table`]; `None` for any other name.
fn day_of_table(name: &str) -> Option<Day> {
    let d = name.strip_prefix("raw_")?;
    if d.len() != 8 || !d.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Day::parse(&format!("{}-{}-{}", &d[..4], &d[4..6], &d[6..])).ok()
}

fn ensure_day(conn: &Connection, day: Day) -> rusqlite::Result<()> {
    conn.execute_batch(&format!(
        "CREATE TABLE IF NOT EXISTS {} (
            seq INTEGER PRIMARY KEY,
            time_ms INTEGER NOT NULL,
            kind TEXT NOT NULL,
            listing_id INTEGER,
            user_id TEXT,
            device_id TEXT,
            session_id TEXT,
            page_url TEXT,
            count INTEGER NOT NULL,
            fields TEXT NOT NULL
        )",
        table(day)
    ))
}

impl SqliteRaw {
    /// Opens (creating if needed) the raw tier at `path`.
    ///
    /// # Errors
    /// [`SqliteError::Open`], naming the file.
    pub fn open(path: &Path) -> Result<Self, SqliteError> {
        opening(path, || {
            let conn = open_rw(path)?;
            migrate_sqlite(&conn, path, &migrations::RAW)?;
            let writer = GroupWriter::start("events-raw", conn, 256);
            let reads = ReadPool::open(path, 4)?;
            Ok(Self {
                writer,
                reads,
                calendar: Calendar::utc(),
            })
        })
    }

    /// This store with its days cut in `calendar` (UTC unless set): set before the first
    /// append, and kept (see [`crate::calendar::agree_time_zone`]).
    #[must_use]
    pub fn with_calendar(mut self, calendar: Calendar) -> Self {
        self.calendar = calendar;
        self
    }
}

#[async_trait]
impl RawStore for SqliteRaw {
    async fn append(&self, events: Vec<Event>, now_ms: i64) -> Result<(), RawError> {
        let calendar = self.calendar.clone();
        self.writer
            .write(move |conn| {
                let mut per_day: BTreeMap<Day, i64> = BTreeMap::new();
                for e in &events {
                    let day = calendar.day_of(e.time_ms);
                    if !per_day.contains_key(&day) {
                        let dropped = catalog::dropped_ms(conn, day)?;
                        if dropped.is_some() {
                            return Err(RawError::DayDropped(day));
                        }
                        ensure_day(conn, day)?;
                    }
                    *per_day.entry(day).or_default() += 1;
                    let mut stmt = conn.prepare_cached(&format!(
                        "INSERT INTO {} (time_ms, kind, listing_id, user_id, device_id, session_id,
                             page_url, count, fields) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                        table(day)
                    ))?;
                    stmt.execute(params![
                        e.time_ms,
                        e.kind,
                        e.listing_id,
                        e.user_id,
                        e.device_id,
                        e.session_id,
                        e.page_url,
                        e.count,
                        serde_json::Value::Object(e.fields.clone()).to_string()
                    ])?;
                }
                for (day, n) in per_day {
                    catalog::add_events(conn, day, n, now_ms)?;
                }
                Ok::<_, RawError>(())
            })
            .await
    }

    fn calendar(&self) -> &Calendar {
        &self.calendar
    }

    async fn read_chunk(
        &self,
        day: Day,
        after: i64,
        limit: usize,
    ) -> Result<(Vec<Event>, Option<i64>), StoreError> {
        self.reads
            .read(move |conn| {
                if !table_exists(conn, day)? {
                    return Ok((Vec::new(), None));
                }
                let mut stmt = conn.prepare_cached(&format!(
                    "SELECT seq, time_ms, kind, listing_id, user_id, device_id, session_id, page_url,
                         count, fields FROM {} WHERE seq > ?1 ORDER BY seq LIMIT ?2",
                    table(day)
                ))?;
                let mut last = None;
                let rows = stmt.query_map(params![after, limit as i64], |r| {
                    let fields: String = r.get(9)?;
                    Ok((
                        r.get::<_, i64>(0)?,
                        Event {
                            time_ms: r.get(1)?,
                            kind: r.get(2)?,
                            listing_id: r.get(3)?,
                            user_id: r.get(4)?,
                            device_id: r.get(5)?,
                            session_id: r.get(6)?,
                            page_url: r.get(7)?,
                            count: r.get(8)?,
                            fields: serde_json::from_str(&fields).unwrap_or_default(),
                        },
                    ))
                })?;
                let mut out = Vec::with_capacity(limit);
                for row in rows {
                    let (seq, e) = row?;
                    last = Some(seq);
                    out.push(e);
                }
                let next = if out.len() == limit { last } else { None };
                Ok((out, next))
            })
            .await
    }

    async fn fold_day(&self, day: Day, mut agg: DayAggregate) -> Result<DayAggregate, StoreError> {
        // The day's seq range is split between readers that step their part at once, each on
        // its own pooled connection, and their aggregations are merged. Rows are only ever
        // appended (seq grows), so a part reads the same rows whatever snapshot it gets; a day
        // dropped meanwhile reads short, which the rollup refuses.
        let range = self
            .reads
            .read(move |conn| {
                if !table_exists(conn, day)? {
                    return Ok(None);
                }
                let sql = format!("SELECT min(seq), max(seq) FROM {}", table(day));
                let (lo, hi) = conn.query_row(&sql, [], |r| {
                    Ok((r.get::<_, Option<i64>>(0)?, r.get::<_, Option<i64>>(1)?))
                })?;
                Ok::<_, StoreError>(lo.zip(hi))
            })
            .await?;
        let Some((lo, hi)) = range else {
            return Ok(agg);
        };
        let parts = split_seqs(lo, hi, FOLD_READERS);
        let folds = parts
            .into_iter()
            .map(|(from, to)| self.fold_seqs(day, from, to));
        for part in futures::future::try_join_all(folds).await? {
            agg.merge(part);
        }
        Ok(agg)
    }

    async fn days(&self) -> Result<Vec<DayState>, StoreError> {
        self.reads.read(|conn| Ok(catalog::days(conn)?)).await
    }

    async fn mark_rolled_up(&self, day: Day, arrival_ms: i64) -> Result<(), StoreError> {
        self.set_mark(Mark::RolledUp, day, arrival_ms).await
    }

    async fn mark_archived(&self, day: Day, arrival_ms: i64) -> Result<(), StoreError> {
        self.set_mark(Mark::Archived, day, arrival_ms).await
    }

    async fn drop_day(&self, day: Day, now_ms: i64) -> Result<bool, StoreError> {
        self.writer
            .write(move |conn| {
                // Serialised with appends on the writer: an event that arrived after the last
                // rollup or archive makes the day not current, and it is kept.
                let marked = catalog::mark_dropped_if_current(conn, day, now_ms)?;
                if marked {
                    conn.execute_batch(&format!("DROP TABLE IF EXISTS {}", table(day)))?;
                }
                Ok::<_, StoreError>(marked)
            })
            .await
    }

    async fn clear(&self) -> Result<(), StoreError> {
        self.writer
            .write(|conn| {
                // One transaction: the writer's group commit.
                let tables: Vec<String> = conn
                    .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")?
                    .query_map([], |r| r.get::<_, String>(0))?
                    .collect::<rusqlite::Result<_>>()?;
                for name in tables.iter().filter(|n| day_of_table(n).is_some()) {
                    conn.execute_batch(&format!("DROP TABLE {name}"))?;
                }
                catalog::clear(conn)?;
                Ok::<_, StoreError>(())
            })
            .await
    }

    async fn record_dropped(&self, days: &[DayState]) -> Result<(), StoreError> {
        let days = days.to_vec();
        self.writer
            .write(move |conn| Ok::<_, StoreError>(catalog::record_dropped(conn, &days)?))
            .await
    }

    async fn counts_per_minute(
        &self,
        since_ms: i64,
        until_ms: i64,
    ) -> Result<Vec<MinuteCount>, StoreError> {
        let calendar = self.calendar.clone();
        self.reads
            .read(move |conn| {
                let mut out = Vec::new();
                let mut day = calendar.day_of(since_ms);
                while calendar.start_ms(day) < until_ms {
                    if table_exists(conn, day)? {
                        let mut stmt = conn.prepare_cached(&format!(
                            "SELECT (time_ms / 60000) * 60000 AS minute, kind, count(*) FROM {}
                             WHERE time_ms >= ?1 AND time_ms < ?2
                               AND coalesce(json_extract(fields, '$.bot'), 0) = 0
                             GROUP BY minute, kind ORDER BY minute, kind",
                            table(day)
                        ))?;
                        let rows = stmt.query_map(params![since_ms, until_ms], |r| {
                            Ok(MinuteCount {
                                minute_ms: r.get(0)?,
                                kind: r.get(1)?,
                                count: r.get::<_, i64>(2)? as u64,
                            })
                        })?;
                        for row in rows {
                            out.push(row?);
                        }
                    }
                    day = day.plus(1);
                }
                Ok(out)
            })
            .await
    }

    async fn day_bytes(&self) -> Result<Vec<(Day, u64)>, StoreError> {
        self.reads
            .read(|conn| {
                // `dbstat` walks every page; `aggregate` sums each table's in SQLite itself.
                let mut stmt = conn.prepare(
                    "SELECT name, pgsize FROM dbstat WHERE aggregate = TRUE AND name GLOB 'raw_*'",
                )?;
                let rows =
                    stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
                let mut out = Vec::new();
                for row in rows {
                    let (name, bytes) = row?;
                    if let Some(day) = day_of_table(&name) {
                        out.push((day, u64::try_from(bytes).unwrap_or(0)));
                    }
                }
                out.sort_unstable();
                Ok(out)
            })
            .await
    }

    async fn top_listings(&self, day: Day, limit: usize) -> Result<Vec<(i64, u64)>, StoreError> {
        self.reads
            .read(move |conn| {
                if !table_exists(conn, day)? {
                    return Ok(Vec::new());
                }
                let mut stmt = conn.prepare_cached(&format!(
                    "SELECT listing_id, count(*) AS n FROM {} WHERE listing_id IS NOT NULL
                       AND coalesce(json_extract(fields, '$.bot'), 0) = 0
                     GROUP BY listing_id ORDER BY n DESC, listing_id LIMIT ?1",
                    table(day)
                ))?;
                let rows = stmt.query_map([limit as i64], |r| {
                    Ok((r.get(0)?, r.get::<_, i64>(1)? as u64))
                })?;
                Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
            })
            .await
    }
}

fn table_exists(conn: &Connection, day: Day) -> rusqlite::Result<bool> {
    conn.prepare_cached(
        "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = ?1",
    )?
    .query_row([table(day)], |r| r.get(0))
}

/// Readers of one day's rollup at once ([`SqliteRaw::fold_day`]): one per core of a small
/// server; the pool holds more.
const FOLD_READERS: i64 = 2;

/// `lo..=hi` cut into at most `n` consecutive, non-empty ranges of about equal size.
fn split_seqs(lo: i64, hi: i64, n: i64) -> Vec<(i64, i64)> {
    let len = hi - lo + 1;
    let n = n.clamp(1, len.max(1));
    (0..n)
        .map(|i| (lo + len * i / n, lo + len * (i + 1) / n - 1))
        .collect()
}

impl SqliteRaw {
    /// The events of `day` with `from <= seq <= to` fed to a new aggregation, in one
    /// statement: each row is lent as it is stepped through, nothing copied but the strings
    /// the aggregation keeps.
    async fn fold_seqs(&self, day: Day, from: i64, to: i64) -> Result<DayAggregate, StoreError> {
        self.reads
            .read(move |conn| {
                let mut agg = DayAggregate::default();
                if !table_exists(conn, day)? {
                    return Ok(agg);
                }
                let mut stmt = conn.prepare_cached(&format!(
                    "SELECT kind, listing_id, session_id, page_url, fields FROM {}
                     WHERE seq BETWEEN ?1 AND ?2 ORDER BY seq",
                    table(day)
                ))?;
                let mut rows = stmt.query([from, to])?;
                while let Some(r) = rows.next()? {
                    let text = |i: usize| -> rusqlite::Result<&str> { Ok(r.get_ref(i)?.as_str()?) };
                    let text_or_null = |i: usize| -> rusqlite::Result<Option<&str>> {
                        Ok(r.get_ref(i)?.as_str_or_null()?)
                    };
                    agg.add(RollupRow {
                        kind: text(0)?,
                        listing_id: r.get(1)?,
                        session_id: text_or_null(2)?,
                        page_url: text_or_null(3)?,
                        bot: fields_flag_bot(text(4)?),
                    });
                }
                Ok(agg)
            })
            .await
    }

    async fn set_mark(&self, mark: Mark, day: Day, arrival_ms: i64) -> Result<(), StoreError> {
        self.writer
            .write(move |conn| Ok::<_, StoreError>(catalog::set_mark(conn, mark, day, arrival_ms)?))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::split_seqs;

    #[test]
    fn the_seq_range_is_cut_into_adjacent_parts_of_about_equal_size() {
        assert_eq!(split_seqs(1, 10, 2), vec![(1, 5), (6, 10)]);
        assert_eq!(split_seqs(1, 11, 2), vec![(1, 5), (6, 11)]);
        assert_eq!(split_seqs(4, 4, 2), vec![(4, 4)]);
        assert_eq!(split_seqs(1, 3, 4), vec![(1, 1), (2, 2), (3, 3)]);
        assert_eq!(split_seqs(7, 9, 1), vec![(7, 9)]);
    }
}
