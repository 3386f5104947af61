//! The raw tier (DESIGN.md part C "Raw tier"): events partitioned by UTC day.
//!
//! Embedded default: `raw.db` with one table `raw_YYYYMMDD` per day, created on first use, and
//! a `raw_day` catalog (events per day, last arrival) that the rollup scheduler reads.

use std::collections::BTreeMap;
use std::path::Path;

use async_trait::async_trait;
use rusqlite::{Connection, params};
use tidemark_core::day::UtcDay;
use tidemark_core::sqlite::{GroupWriter, ReadPool, SqliteError, open_rw};

use crate::model::Event;

/// The raw-tier port.
#[async_trait]
pub trait RawStore: Send + Sync + std::fmt::Debug {
    /// Appends events durably (all or nothing). `now_ms` is the arrival time.
    async fn append(&self, events: Vec<Event>, now_ms: i64) -> Result<(), SqliteError>;

    /// All events of one day, in arrival order.
    async fn day_events(&self, day: UtcDay) -> Result<Vec<Event>, SqliteError>;
}

/// The embedded raw tier.
#[derive(Debug)]
pub struct SqliteRaw {
    writer: GroupWriter,
    reads: ReadPool,
}

const CATALOG: &str = "
CREATE TABLE IF NOT EXISTS raw_day (
    day INTEGER PRIMARY KEY,
    events INTEGER NOT NULL,
    last_arrival_ms INTEGER NOT NULL
);
";

fn table(day: UtcDay) -> String {
    format!("raw_{}", day.compact())
}

fn ensure_day(conn: &Connection, day: UtcDay) -> rusqlite::Result<()> {
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
    pub fn open(path: &Path) -> Result<Self, SqliteError> {
        let conn = open_rw(path)?;
        conn.execute_batch(CATALOG)?;
        let writer = GroupWriter::start("events-raw", conn, 256);
        let reads = ReadPool::open(path, 4)?;
        Ok(Self { writer, reads })
    }
}

#[async_trait]
impl RawStore for SqliteRaw {
    async fn append(&self, events: Vec<Event>, now_ms: i64) -> Result<(), SqliteError> {
        self.writer
            .write(move |conn| {
                let mut per_day: BTreeMap<UtcDay, i64> = BTreeMap::new();
                for e in &events {
                    let day = UtcDay::of_ms(e.time_ms);
                    if !per_day.contains_key(&day) {
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
                let mut cat = conn.prepare_cached(
                    "INSERT INTO raw_day (day, events, last_arrival_ms) VALUES (?1, ?2, ?3)
                     ON CONFLICT (day) DO UPDATE SET events = events + excluded.events,
                         last_arrival_ms = max(last_arrival_ms, excluded.last_arrival_ms)",
                )?;
                for (day, n) in per_day {
                    cat.execute(params![day.0, n, now_ms])?;
                }
                Ok::<_, SqliteError>(())
            })
            .await
    }

    async fn day_events(&self, day: UtcDay) -> Result<Vec<Event>, SqliteError> {
        self.reads
            .read(move |conn| {
                let exists: bool = conn.query_row(
                    "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = ?1",
                    [table(day)],
                    |r| r.get(0),
                )?;
                if !exists {
                    return Ok(Vec::new());
                }
                let mut stmt = conn.prepare(&format!(
                    "SELECT time_ms, kind, listing_id, user_id, device_id, session_id, page_url,
                         count, fields FROM {} ORDER BY seq",
                    table(day)
                ))?;
                let rows = stmt.query_map([], |r| {
                    let fields: String = r.get(8)?;
                    Ok(Event {
                        time_ms: r.get(0)?,
                        kind: r.get(1)?,
                        listing_id: r.get(2)?,
                        user_id: r.get(3)?,
                        device_id: r.get(4)?,
                        session_id: r.get(5)?,
                        page_url: r.get(6)?,
                        count: r.get(7)?,
                        fields: serde_json::from_str(&fields).unwrap_or_default(),
                    })
                })?;
                Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
            })
            .await
    }
}
