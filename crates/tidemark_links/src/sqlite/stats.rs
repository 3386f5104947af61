//! The campaign-statistics summary in `links.db` (tables of [`crate::migrations::SQLITE`]
//! version 2); the counting rules are [`crate::stats`]'s, this module only writes and reads
//! what they compute. Every function runs inside one job of the store's group writer (or on a
//! read connection), so a group of hits is applied whole or not at all.

use rusqlite::{Connection, OptionalExtension, params};

use crate::error::Result;
use crate::stats::{
    DELIVERIES_KEPT_MS, Delivery, HIT_GROUPS_KEPT_MS, SeenUniques, StatsHit, StoredStats, Tally,
    tally, tally_deliveries,
};

/// Adds `n` to one counter.
fn add(conn: &Connection, mailing: &str, name: &str, n: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO mailing_count (mailing_id, name, n) VALUES (?1, ?2, ?3)
         ON CONFLICT (mailing_id, name) DO UPDATE SET n = n + excluded.n",
    )?
    .execute(params![mailing, name, n])?;
    Ok(())
}

/// Adds counters of one mailing and keeps the link URLs it has none for.
pub(super) fn add_counts(
    conn: &Connection,
    mailing: &str,
    counts: &[(String, i64)],
    links: &[(u32, String)],
) -> Result<()> {
    for (name, n) in counts {
        add(conn, mailing, name, *n)?;
    }
    let mut link = conn.prepare_cached(
        "INSERT OR IGNORE INTO mailing_link (mailing_id, position, url) VALUES (?1, ?2, ?3)",
    )?;
    for (position, url) in links {
        link.execute(params![mailing, position, url])?;
    }
    Ok(())
}

/// Counts outcomes, keeps the delivered recipients' times, and forgets those past
/// [`DELIVERIES_KEPT_MS`].
pub(super) fn record_deliveries(
    conn: &Connection,
    deliveries: &[Delivery],
    now_ms: i64,
) -> Result<()> {
    let t = tally_deliveries(deliveries);
    let mut keep = conn.prepare_cached(
        "INSERT OR REPLACE INTO mailing_delivery (mailing_id, email, at_ms) VALUES (?1, ?2, ?3)",
    )?;
    for ((mailing, email), at) in &t.delivered_at {
        keep.execute(params![mailing, email, at])?;
    }
    for ((mailing, name), n) in &t.counts {
        add(conn, mailing, name, *n)?;
    }
    conn.prepare_cached("DELETE FROM mailing_delivery WHERE at_ms < ?1")?
        .execute([now_ms - DELIVERIES_KEPT_MS])?;
    Ok(())
}

/// Applies one group of hits unless `group_id` was applied already; returns whether it was
/// applied now, and the unique keys to remember in `seen` once the group is committed.
pub(super) fn apply_hits(
    conn: &Connection,
    group_id: &str,
    hits: &[StatsHit],
    now_ms: i64,
    seen: &SeenUniques,
) -> Result<(bool, Vec<u128>)> {
    let fresh = conn
        .prepare_cached("INSERT OR IGNORE INTO hit_group (group_id, at_ms) VALUES (?1, ?2)")?
        .execute(params![group_id, now_ms])?
        == 1;
    if !fresh {
        return Ok((false, Vec::new()));
    }
    conn.prepare_cached("DELETE FROM hit_group WHERE at_ms < ?1")?
        .execute([now_ms - HIT_GROUPS_KEPT_MS])?;
    let mut delivery = conn.prepare_cached(
        "SELECT at_ms FROM mailing_delivery WHERE mailing_id = ?1 AND email = ?2",
    )?;
    let mut t = tally(hits, |m, e| {
        delivery
            .query_row(params![m, e], |r| r.get(0))
            .optional()
            .ok()
            .flatten()
    });
    let keys = seen.filter(&mut t);
    write_tally(conn, &t)?;
    Ok((true, keys))
}

fn write_tally(conn: &Connection, t: &Tally) -> Result<()> {
    let mut seen = conn.prepare_cached(
        "INSERT OR IGNORE INTO mailing_unique (mailing_id, what, email) VALUES (?1, ?2, ?3)",
    )?;
    for ((mailing, what), emails) in &t.uniques {
        let mut new = 0;
        for e in emails {
            new += seen.execute(params![mailing, what.code(), e])? as i64;
        }
        if new > 0 {
            add(conn, mailing, &what.counter(), new)?;
        }
    }
    for ((mailing, name), n) in &t.counts {
        add(conn, mailing, name, *n)?;
    }
    let mut hour = conn.prepare_cached(
        "INSERT INTO mailing_hour (mailing_id, hour_ms, opens, clicks) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (mailing_id, hour_ms)
         DO UPDATE SET opens = opens + excluded.opens, clicks = clicks + excluded.clicks",
    )?;
    for ((mailing, at), (opens, clicks)) in &t.hours {
        hour.execute(params![mailing, at, opens, clicks])?;
    }
    Ok(())
}

/// The summary of one mailing.
pub(super) fn stats(conn: &Connection, mailing: &str) -> Result<StoredStats> {
    let counts = conn
        .prepare_cached("SELECT name, n FROM mailing_count WHERE mailing_id = ?1")?
        .query_map([mailing], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let hours = conn
        .prepare_cached(
            "SELECT hour_ms, opens, clicks FROM mailing_hour WHERE mailing_id = ?1
             ORDER BY hour_ms",
        )?
        .query_map([mailing], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let links = conn
        .prepare_cached(
            "SELECT position, url FROM mailing_link WHERE mailing_id = ?1 ORDER BY position",
        )?
        .query_map([mailing], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(StoredStats {
        counts,
        links,
        hours,
    })
}
