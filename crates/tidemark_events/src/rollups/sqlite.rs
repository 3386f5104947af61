//! The embedded summary tier: `rollups.db` with `listing_daily` and `listings`.
//!
//! Key and index choice, for the report (900 listings × a year ≈ 330,000 rows, p99 ≤ 100 ms):
//! - `listing_daily` is `WITHOUT ROWID` with the seed's primary key `(listing_id, day, event)`,
//!   so the table itself is clustered by listing, then day: "one listing, days in a range" is
//!   one contiguous range of the B-tree holding the whole rows (no second lookup, nothing read
//!   outside the range). An index led by `day` would be the wrong way round for a report: a
//!   year of every listing of every account is scanned to find one account's rows.
//! - `listings` is `WITHOUT ROWID` keyed `(tenant, listing_id)`, with an index
//!   `(tenant, account_id)` that covers the report's lookup (it also holds `listing_id`).
//! - The report is a nested loop pinned with `CROSS JOIN`: account index → per listing one
//!   range seek into `listing_daily`. It streams the rows and sums them in Rust: SQLite's
//!   `GROUP BY` over `(listing_id, event)` would sort every row (the rows come in
//!   `(listing_id, day, event)` order) and that sort cost several times the scan.
//! - The index `listing_daily (day)` serves only the rollup, which replaces one day and must
//!   find that day's old rows to delete the ones no longer produced.
//!
//! Days are stored as days since 1970-01-01 (UTC), as [`UtcDay`] and the raw catalog do.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use async_trait::async_trait;
use rusqlite::{Connection, params};
use tidemark_core::day::UtcDay;
use tidemark_core::sqlite::{GroupWriter, ReadPool, SqliteError, open_rw};

use super::{DailyRow, ReportRow, RollupStore};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS listing_daily (
    listing_id INTEGER NOT NULL,
    day INTEGER NOT NULL,
    event TEXT NOT NULL,
    total INTEGER NOT NULL,
    uniques INTEGER NOT NULL,
    PRIMARY KEY (listing_id, day, event)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS listing_daily_day ON listing_daily (day);
CREATE TABLE IF NOT EXISTS listings (
    tenant TEXT NOT NULL,
    listing_id INTEGER NOT NULL,
    account_id INTEGER NOT NULL,
    PRIMARY KEY (tenant, listing_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS listings_account ON listings (tenant, account_id);
";

/// Read-side tuning for the report: memory-map the file and keep a larger page cache, so a
/// year of one account's rows is read without a system call per page. Setting a pragma to the
/// value it already has costs nothing.
const READ_TUNING: &str = "PRAGMA mmap_size = 268435456; PRAGMA cache_size = -16384;";

/// The embedded summary tier (see the module docs).
#[derive(Debug)]
pub struct SqliteRollups {
    writer: GroupWriter,
    reads: ReadPool,
}

impl SqliteRollups {
    /// Opens (creating if needed) the summary tier at `path`.
    pub fn open(path: &Path) -> Result<Self, SqliteError> {
        let conn = open_rw(path)?;
        conn.execute_batch(SCHEMA)?;
        let writer = GroupWriter::start("events-rollups", conn, 64);
        let reads = ReadPool::open(path, 4)?;
        Ok(Self { writer, reads })
    }
}

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn replace_day(
    conn: &Connection,
    day: UtcDay,
    mut rows: Vec<DailyRow>,
) -> Result<usize, SqliteError> {
    // Listing order: each listing's rows of the day land next to each other in the B-tree.
    rows.sort_by(|a, b| (a.listing_id, &a.kind).cmp(&(b.listing_id, &b.kind)));
    let mut upsert = conn.prepare_cached(
        "INSERT INTO listing_daily (listing_id, day, event, total, uniques)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (listing_id, day, event) DO UPDATE
             SET total = excluded.total, uniques = excluded.uniques
             WHERE total != excluded.total OR uniques != excluded.uniques",
    )?;
    for r in &rows {
        upsert.execute(params![
            r.listing_id,
            day.0,
            r.kind,
            to_i64(r.total),
            to_i64(r.uniques)
        ])?;
    }
    let produced: HashSet<(i64, &str)> = rows
        .iter()
        .map(|r| (r.listing_id, r.kind.as_str()))
        .collect();
    let mut existing =
        conn.prepare_cached("SELECT listing_id, event FROM listing_daily WHERE day = ?1")?;
    let stale: Vec<(i64, String)> = existing
        .query_map([day.0], |r| Ok((r.get(0)?, r.get(1)?)))?
        .filter(|row| {
            row.as_ref().map_or(true, |(l, k): &(i64, String)| {
                !produced.contains(&(*l, k.as_str()))
            })
        })
        .collect::<rusqlite::Result<_>>()?;
    let mut delete = conn.prepare_cached(
        "DELETE FROM listing_daily WHERE listing_id = ?1 AND day = ?2 AND event = ?3",
    )?;
    for (listing_id, event) in &stale {
        delete.execute(params![listing_id, day.0, event])?;
    }
    Ok(produced.len())
}

#[async_trait]
impl RollupStore for SqliteRollups {
    async fn upsert_day(&self, day: UtcDay, rows: Vec<DailyRow>) -> Result<usize, SqliteError> {
        self.writer
            .write(move |conn| replace_day(conn, day, rows))
            .await
    }

    async fn put_listings(&self, tenant: &str, pairs: &[(i64, i64)]) -> Result<usize, SqliteError> {
        let tenant = tenant.to_owned();
        let pairs = pairs.to_vec();
        self.writer
            .write(move |conn| {
                let mut stmt = conn.prepare_cached(
                    "INSERT INTO listings (tenant, listing_id, account_id) VALUES (?1, ?2, ?3)
                     ON CONFLICT (tenant, listing_id) DO UPDATE SET account_id = excluded.account_id",
                )?;
                for (listing_id, account_id) in &pairs {
                    stmt.execute(params![tenant, listing_id, account_id])?;
                }
                Ok::<_, SqliteError>(pairs.len())
            })
            .await
    }

    async fn report(
        &self,
        tenant: &str,
        account_id: i64,
        from: UtcDay,
        to: UtcDay,
        kind: Option<&str>,
    ) -> Result<Vec<ReportRow>, SqliteError> {
        let tenant = tenant.to_owned();
        let kind = kind.map(str::to_owned);
        self.reads
            .read(move |conn| {
                conn.execute_batch(READ_TUNING)?;
                let mut stmt = conn.prepare_cached(
                    "SELECT d.listing_id, d.event, d.total, d.uniques
                     FROM listings l CROSS JOIN listing_daily d ON d.listing_id = l.listing_id
                     WHERE l.tenant = ?1 AND l.account_id = ?2
                       AND d.day >= ?3 AND d.day <= ?4
                       AND (?5 IS NULL OR d.event = ?5)",
                )?;
                let mut rows = stmt.query(params![tenant, account_id, from.0, to.0, kind])?;
                // Kinds are a small closed set: sum under (listing, kind number) and name the
                // kinds once, instead of allocating a string per row.
                let mut kinds: Vec<String> = Vec::new();
                let mut sums: HashMap<(i64, usize), (u64, u64)> = HashMap::new();
                while let Some(r) = rows.next()? {
                    let event = r.get_ref(1)?.as_str().map_err(rusqlite::Error::from)?;
                    let k = match kinds.iter().position(|k| k == event) {
                        Some(k) => k,
                        None => {
                            kinds.push(event.to_owned());
                            kinds.len() - 1
                        }
                    };
                    let s = sums.entry((r.get(0)?, k)).or_default();
                    s.0 += to_u64(r.get(2)?);
                    s.1 += to_u64(r.get(3)?);
                }
                let mut out: Vec<ReportRow> = sums
                    .into_iter()
                    .map(|((listing_id, k), (total, uniques))| ReportRow {
                        listing_id,
                        kind: kinds[k].clone(),
                        total,
                        uniques_daily_sum: uniques,
                    })
                    .collect();
                out.sort();
                Ok(out)
            })
            .await
    }

    async fn day_rows(&self, day: UtcDay) -> Result<Vec<DailyRow>, SqliteError> {
        self.reads
            .read(move |conn| {
                let mut stmt = conn.prepare_cached(
                    "SELECT listing_id, event, total, uniques FROM listing_daily WHERE day = ?1
                     ORDER BY listing_id, event",
                )?;
                let rows = stmt.query_map([day.0], |r| {
                    Ok(DailyRow {
                        listing_id: r.get(0)?,
                        kind: r.get(1)?,
                        total: to_u64(r.get(2)?),
                        uniques: to_u64(r.get(3)?),
                    })
                })?;
                Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
            })
            .await
    }
}

#[cfg(test)]
mod tests;
