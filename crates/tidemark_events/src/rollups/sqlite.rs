//! The embedded summary tier: `rollups.db` with `listing_daily` and `listings`.
//!
//! Key and index choice, for the report (900 listings × a year ≈ 330,000 rows, p99 ≤ 100 ms):
//! - `listing_daily` is `WITHOUT ROWID`, clustered by its primary key
//!   `(listing_id, event, day)` — the seed's key columns, with `event` before `day`. One
//!   listing's days of one kind in a period are then one contiguous range of the B-tree that
//!   holds the whole rows: one seek, nothing read outside the period however long the history
//!   grows, and the rows arrive already grouped by `(listing, kind)`, so SQLite sums them as
//!   it reads (no sort, and only the sums cross into Rust). With the seed's order
//!   `(listing_id, day, event)` the same seek works, but summing per kind needs a sort of every
//!   row or handing every row to Rust; measured on this machine that was about 1.4× slower.
//!   An index led by `day` would be the wrong way round: a year of every listing of every
//!   account would be scanned to find one account's rows.
//! - `rollup_kinds` lists every kind ever written (a handful of rows); the report walks it to
//!   seek each `(listing, kind)` range, so kinds that left the configuration still report.
//! - `listings` is `WITHOUT ROWID` keyed `(tenant, listing_id)`, with an index
//!   `(tenant, account_id)` that covers the lookup of an account's listings.
//! - `listing_monthly` keyed `(listing_id, event, month)` holds the month sums of
//!   `listing_daily` (as on MariaDB, [`super::monthly`]): each day's replacement adds its
//!   difference to its month's rows in the same transaction, so a year's report reads about 12
//!   rows per listing and kind instead of about 366.
//! - The report: the account's listings from that index, then per listing and part of the
//!   period ([`monthly::report_parts`]: edge days from `listing_daily`, whole months from
//!   `listing_monthly`) one statement `rollup_kinds CROSS JOIN … GROUP BY kind` (a seek per
//!   kind), all inside one read transaction so a rollup committing meanwhile is seen entirely
//!   or not at all. Measured on the 2-core test machine, 900 listings × 366 days: p50 ≈ 30 ms
//!   reading the days alone.
//! - `listing_daily_visitors` and `listing_monthly_visitors` hold each row's visitor sketch,
//!   keyed as the row, apart from the sums so that the report's ranges stay dense
//!   (`sqlite/visitors.rs`, [`crate::visitors`]).
//! - The index `listing_daily (day)` serves only the rollup, which replaces one day and must
//!   find that day's old rows to subtract them from the month and delete the ones no longer
//!   produced.
//!
//! Days are stored as days since 1970-01-01 (UTC), as [`Day`] and the raw catalog do.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};
use tidemark_core::day::Day;
use tidemark_core::schema::migrate_sqlite;
use tidemark_core::sqlite::{GroupWriter, ReadPool, SqliteError, open_rw, opening};
use tidemark_core::store::StoreError;

use super::monthly::{self, Source};
use super::{DailyRow, MonthRow, ReportRow, RollupStore, produced_keys, stale_keys};
use crate::raw_window::{Need, NeedCount};
use crate::usage::{Read, UsageFigures, Written};

mod visitors;

/// Read-side tuning for the report: memory-map the file and keep a larger page cache, so a
/// year of one account's rows is read without a system call per page. Setting a pragma to the
/// value it already has costs nothing.
const READ_TUNING: &str = "PRAGMA mmap_size = 268435456; PRAGMA cache_size = -16384;";

/// The report's sums of one listing (`?1`) per kind over days `?2..=?3` of `listing_daily`,
/// optionally one kind (`?4`), with the daily rows summed: a seek per kind, summed while read
/// (see the module docs).
const REPORT_DAYS: &str = "SELECT k.kind, sum(d.total), sum(d.uniques), count(*)
     FROM rollup_kinds k CROSS JOIN listing_daily d
       ON d.listing_id = ?1 AND d.event = k.kind AND d.day >= ?2 AND d.day <= ?3
     WHERE ?4 IS NULL OR k.kind = ?4
     GROUP BY k.kind";

/// [`REPORT_DAYS`] over the months starting `?2..=?3` of `listing_monthly`.
const REPORT_MONTHS: &str = "SELECT k.kind, sum(d.total), sum(d.uniques), sum(d.days)
     FROM rollup_kinds k CROSS JOIN listing_monthly d
       ON d.listing_id = ?1 AND d.event = k.kind AND d.month >= ?2 AND d.month <= ?3
     WHERE ?4 IS NULL OR k.kind = ?4
     GROUP BY k.kind";

/// The embedded summary tier (see the module docs).
#[derive(Debug)]
pub struct SqliteRollups {
    writer: GroupWriter,
    reads: ReadPool,
}

impl SqliteRollups {
    /// Opens (creating if needed) the summary tier at `path`.
    ///
    /// # Errors
    /// [`SqliteError::Open`], naming the file.
    pub fn open(path: &Path) -> Result<Self, SqliteError> {
        opening(path, || {
            let conn = open_rw(path)?;
            migrate_sqlite(&conn, path, &super::migrations::SQLITE)?;
            let writer = GroupWriter::start("events-rollups", conn, 64);
            let reads = ReadPool::open(path, 4)?;
            Ok(Self { writer, reads })
        })
    }
}

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn replace_day(conn: &Connection, day: Day, mut rows: Vec<DailyRow>) -> Result<usize, StoreError> {
    // The day as it was: what its month rows must lose, the keys no longer produced, and which
    // rows have their sketch.
    let old: Vec<(i64, String, u64, u64, bool)> = conn
        .prepare_cached(
            "SELECT d.listing_id, d.event, d.total, d.uniques, v.day IS NOT NULL
             FROM listing_daily d LEFT JOIN listing_daily_visitors v
               ON v.listing_id = d.listing_id AND v.event = d.event AND v.day = d.day
             WHERE d.day = ?1",
        )?
        .query_map([day.0], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                to_u64(r.get(2)?),
                to_u64(r.get(3)?),
                r.get(4)?,
            ))
        })?
        .collect::<rusqlite::Result<_>>()?;
    // Listing order: each listing's rows of the day land next to each other in the B-tree.
    rows.sort_by(|a, b| (a.listing_id, &a.kind).cmp(&(b.listing_id, &b.kind)));
    let mut upsert = conn.prepare_cached(
        "INSERT INTO listing_daily (listing_id, day, event, total, uniques)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (listing_id, event, day) DO UPDATE
             SET total = excluded.total, uniques = excluded.uniques
             WHERE total != excluded.total OR uniques != excluded.uniques",
    )?;
    let mut kind = conn.prepare_cached("INSERT OR IGNORE INTO rollup_kinds (kind) VALUES (?1)")?;
    // A row already stored with the same figures is left alone: a re-run over an unchanged
    // day writes nothing, and a late re-roll writes the rows it changed.
    let stored: HashMap<(i64, &str), (u64, u64, bool)> = old
        .iter()
        .map(|(l, k, t, u, v)| ((*l, k.as_str()), (*t, *u, *v)))
        .collect();
    let month = monthly::month_of(day).0;
    let mut last_kind: Option<&str> = None;
    for r in &rows {
        // Unchanged figures: unchanged visitors too (they only grow), unless the sketch is
        // still missing.
        if let Some(&(t, u, has_sketch)) = stored.get(&(r.listing_id, r.kind.as_str()))
            && (t, u) == (r.total, r.uniques)
            && (has_sketch || r.visitors.is_empty())
        {
            continue;
        }
        if last_kind != Some(r.kind.as_str()) {
            kind.execute([&r.kind])?;
            last_kind = Some(r.kind.as_str());
        }
        upsert.execute(params![
            r.listing_id,
            day.0,
            r.kind,
            to_i64(r.total),
            to_i64(r.uniques)
        ])?;
        visitors::keep(conn, r, day, month)?;
    }
    let existing = old.iter().map(|(l, k, _, _, _)| (*l, k.clone()));
    let mut delete = conn.prepare_cached(
        "DELETE FROM listing_daily WHERE listing_id = ?1 AND event = ?3 AND day = ?2",
    )?;
    let stale = stale_keys(existing, &rows);
    for (listing_id, event) in &stale {
        delete.execute(params![listing_id, day.0, event])?;
    }
    // The month rows follow, in the same transaction; a re-run with the same rows changes none.
    let mut add = conn.prepare_cached(
        "INSERT INTO listing_monthly (listing_id, month, event, total, uniques, days)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (listing_id, event, month) DO UPDATE
             SET total = total + excluded.total, uniques = uniques + excluded.uniques,
                 days = days + excluded.days",
    )?;
    let mut empty = conn.prepare_cached(
        "DELETE FROM listing_monthly
         WHERE listing_id = ?1 AND event = ?2 AND month = ?3 AND days <= 0",
    )?;
    let mut emptied = Vec::new();
    for (listing_id, event, total, uniques, days) in monthly::deltas(
        old.iter().map(|(l, k, t, u, _)| (*l, k.as_str(), *t, *u)),
        &rows,
    ) {
        add.execute(params![listing_id, month, event, total, uniques, days])?;
        if days < 0 {
            empty.execute(params![listing_id, event, month])?;
            emptied.push((listing_id, event));
        }
    }
    visitors::forget(conn, day, month, &stale, &emptied)?;
    Ok(produced_keys(&rows).len())
}

#[async_trait]
impl RollupStore for SqliteRollups {
    async fn upsert_day(&self, day: Day, rows: Vec<DailyRow>) -> Result<usize, StoreError> {
        self.writer
            .write(move |conn| replace_day(conn, day, rows))
            .await
    }

    async fn recorded_time_zone(&self) -> Result<Option<String>, StoreError> {
        self.reads
            .read(|conn| {
                Ok(conn
                    .query_row(
                        "SELECT value FROM events_meta WHERE name = 'time_zone'",
                        [],
                        |r| r.get(0),
                    )
                    .optional()?)
            })
            .await
    }

    async fn record_time_zone(
        &self,
        name: &str,
        replacing: Option<&str>,
    ) -> Result<(), StoreError> {
        let (name, replacing) = (name.to_owned(), replacing.map(str::to_owned));
        self.writer
            .write(move |conn| {
                match replacing {
                    None => conn.execute(
                        "INSERT OR IGNORE INTO events_meta (name, value) VALUES ('time_zone', ?1)",
                        [name],
                    )?,
                    Some(old) => conn.execute(
                        "UPDATE events_meta SET value = ?1 WHERE name = 'time_zone' AND value = ?2",
                        [name, old],
                    )?,
                };
                Ok::<_, StoreError>(())
            })
            .await
    }

    async fn holds_summaries(&self) -> Result<bool, StoreError> {
        self.reads
            .read(|conn| {
                Ok(
                    conn.query_row("SELECT EXISTS (SELECT 1 FROM listing_daily)", [], |r| {
                        r.get(0)
                    })?,
                )
            })
            .await
    }

    async fn put_listings(&self, tenant: &str, pairs: &[(i64, i64)]) -> Result<usize, StoreError> {
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
                Ok::<_, StoreError>(pairs.len())
            })
            .await
    }

    async fn account_listings(
        &self,
        tenant: &str,
        account_id: i64,
        after: i64,
        limit: usize,
    ) -> Result<Vec<i64>, StoreError> {
        let tenant = tenant.to_owned();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.reads
            .read(move |conn| {
                Ok(conn
                    .prepare_cached(
                        "SELECT listing_id FROM listings
                         WHERE tenant = ?1 AND account_id = ?2 AND listing_id > ?3
                         ORDER BY listing_id LIMIT ?4",
                    )?
                    .query_map(params![tenant, account_id, after, limit], |r| r.get(0))?
                    .collect::<rusqlite::Result<_>>()?)
            })
            .await
    }

    async fn months_range(
        &self,
        tenant: &str,
        account_id: i64,
        from_month: Day,
        to_month: Day,
        kind: Option<&str>,
        listings: std::ops::RangeInclusive<i64>,
    ) -> Result<Vec<MonthRow>, StoreError> {
        let tenant = tenant.to_owned();
        let kind = kind.map(str::to_owned);
        self.reads
            .read(move |conn| {
                conn.execute_batch(READ_TUNING)?;
                let mut stmt = conn.prepare_cached(
                    "SELECT l.listing_id, d.month, d.event, d.total, d.uniques
                     FROM listings l JOIN listing_monthly d
                       ON d.listing_id = l.listing_id AND d.month BETWEEN ?3 AND ?4
                     WHERE l.tenant = ?1 AND l.account_id = ?2 AND l.listing_id BETWEEN ?5 AND ?6
                       AND (?7 IS NULL OR d.event = ?7)
                     ORDER BY l.listing_id, d.month, d.event",
                )?;
                let rows = stmt.query_map(
                    params![
                        tenant,
                        account_id,
                        from_month.0,
                        to_month.0,
                        listings.start(),
                        listings.end(),
                        kind
                    ],
                    |r| {
                        Ok(MonthRow {
                            listing_id: r.get(0)?,
                            month: monthly::month_name(Day(r.get(1)?)),
                            kind: r.get(2)?,
                            total: to_u64(r.get(3)?),
                            uniques_daily_sum: to_u64(r.get(4)?),
                        })
                    },
                )?;
                Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
            })
            .await
    }

    async fn report_range(
        &self,
        tenant: &str,
        account_id: i64,
        from: Day,
        to: Day,
        kind: Option<&str>,
        listings: std::ops::RangeInclusive<i64>,
    ) -> Result<Vec<ReportRow>, StoreError> {
        let tenant = tenant.to_owned();
        let kind = kind.map(str::to_owned);
        self.reads
            .read(move |conn| {
                conn.execute_batch(READ_TUNING)?;
                let tx = conn.unchecked_transaction()?;
                let listings: Vec<i64> = tx
                    .prepare_cached(
                        "SELECT listing_id FROM listings WHERE tenant = ?1 AND account_id = ?2
                         AND listing_id BETWEEN ?3 AND ?4 ORDER BY listing_id",
                    )?
                    .query_map(
                        params![tenant, account_id, listings.start(), listings.end()],
                        |r| r.get(0),
                    )?
                    .collect::<rusqlite::Result<_>>()?;
                let parts = monthly::report_parts(from, to);
                let mut days = tx.prepare_cached(REPORT_DAYS)?;
                let mut months = tx.prepare_cached(REPORT_MONTHS)?;
                let mut out = Vec::new();
                // Per kind of one listing: total, uniques and daily rows, summed over the parts.
                let mut sums: BTreeMap<String, [i64; 3]> = BTreeMap::new();
                for listing_id in listings {
                    for p in &parts {
                        let stmt = match p.source {
                            Source::Daily => &mut days,
                            Source::Monthly => &mut months,
                        };
                        let mut rows = stmt.query(params![listing_id, p.from.0, p.to.0, kind])?;
                        while let Some(r) = rows.next()? {
                            let s = sums.entry(r.get(0)?).or_default();
                            for (i, v) in s.iter_mut().enumerate() {
                                *v += i64::from(p.sign) * r.get::<_, i64>(i + 1)?;
                            }
                        }
                    }
                    // A kind whose daily rows in the period add up to none is left out, as
                    // when the days alone are read.
                    out.extend(
                        std::mem::take(&mut sums)
                            .into_iter()
                            .filter(|(_, s)| s[2] > 0)
                            .map(|(kind, [total, uniques, _])| ReportRow {
                                listing_id,
                                kind,
                                total: to_u64(total),
                                uniques_daily_sum: to_u64(uniques),
                                uniques_period: None,
                            }),
                    );
                }
                out.sort();
                Ok(out)
            })
            .await
    }

    async fn period_uniques(
        &self,
        tenant: &str,
        account_id: i64,
        from: Day,
        to: Day,
        kind: Option<&str>,
        listings: std::ops::RangeInclusive<i64>,
    ) -> Result<Vec<(i64, String, Option<u64>)>, StoreError> {
        let tenant = tenant.to_owned();
        let kind = kind.map(str::to_owned);
        self.reads
            .read(move |conn| {
                conn.execute_batch(READ_TUNING)?;
                let tx = conn.unchecked_transaction()?;
                visitors::period_uniques(&tx, &tenant, account_id, (from, to), kind, listings)
            })
            .await
    }

    async fn add_kind_usage(&self, figures: &UsageFigures) -> Result<(), StoreError> {
        let figures = figures.clone();
        self.writer
            .write(move |conn| {
                let mut w = conn.prepare_cached(
                    "INSERT INTO kind_written (kind, day, events, last_ms) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (kind, day) DO UPDATE SET events = events + excluded.events,
                     last_ms = max(last_ms, excluded.last_ms)",
                )?;
                for ((kind, day), n) in &figures.written {
                    w.execute(params![kind, day.0, to_i64(n.events), n.last_ms])?;
                }
                let mut r = conn.prepare_cached(
                    "INSERT INTO kind_read (kind, at_ms, reader) VALUES (?1, ?2, ?3)
                     ON CONFLICT (kind) DO UPDATE SET at_ms = excluded.at_ms,
                     reader = excluded.reader WHERE excluded.at_ms >= at_ms",
                )?;
                for (kind, read) in &figures.read {
                    r.execute(params![kind, read.at_ms, read.by])?;
                }
                let mut n = conn.prepare_cached(
                    "INSERT INTO raw_window_needs (need, age, count, first_ms) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (need, age) DO UPDATE SET count = count + excluded.count,
                     first_ms = min(first_ms, excluded.first_ms)",
                )?;
                for ((need, age), c) in &figures.needs {
                    n.execute(params![need.as_str(), age, to_i64(c.count), c.first_ms])?;
                }
                Ok::<_, StoreError>(())
            })
            .await
    }

    async fn kind_usage(&self) -> Result<UsageFigures, StoreError> {
        self.reads
            .read(|conn| {
                let mut out = UsageFigures::default();
                let mut w =
                    conn.prepare_cached("SELECT kind, day, events, last_ms FROM kind_written")?;
                let rows = w.query_map([], |r| {
                    Ok((
                        (r.get::<_, String>(0)?, Day(r.get(1)?)),
                        Written {
                            events: to_u64(r.get(2)?),
                            last_ms: r.get(3)?,
                        },
                    ))
                })?;
                for row in rows {
                    let (key, w) = row?;
                    out.written.insert(key, w);
                }
                let mut r = conn.prepare_cached("SELECT kind, at_ms, reader FROM kind_read")?;
                let rows = r.query_map([], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        Read {
                            at_ms: r.get(1)?,
                            by: r.get(2)?,
                        },
                    ))
                })?;
                for row in rows {
                    let (kind, read) = row?;
                    out.read.insert(kind, read);
                }
                let mut n =
                    conn.prepare_cached("SELECT need, age, count, first_ms FROM raw_window_needs")?;
                let rows = n.query_map([], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, u32>(1)?,
                        NeedCount {
                            count: to_u64(r.get(2)?),
                            first_ms: r.get(3)?,
                        },
                    ))
                })?;
                for row in rows {
                    let (need, age, c) = row?;
                    // A need this build does not know (a newer node's) is left out.
                    if let Some(need) = Need::parse(&need) {
                        out.needs.insert((need, age), c);
                    }
                }
                Ok(out)
            })
            .await
    }

    async fn day_rows(&self, day: Day) -> Result<Vec<DailyRow>, StoreError> {
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
                        visitors: Vec::new(),
                    })
                })?;
                Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
            })
            .await
    }
}

#[cfg(test)]
mod tests;
