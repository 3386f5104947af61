//! The visitor sketches in `rollups.db` ([`crate::visitors`]): `listing_daily_visitors` and
//! `listing_monthly_visitors`, keyed as the rows they belong to, written in the day's
//! replacement transaction and read for period uniques.

use rusqlite::{Connection, OptionalExtension, params};
use tidemark_core::day::Day;
use tidemark_core::store::StoreError;

use crate::rollups::DailyRow;
use crate::rollups::monthly::{Source, visitor_parts};
use crate::visitors::{PeriodUnions, month_after};

/// The sketches of one part of a period: per listing of `?1`'s account `?2` with an id in
/// `?5..=?6`, kind (optionally only `?7`) and day in `?3..=?4` of `listing_daily`, the row's
/// sketch or NULL: the account's listings, then a seek per listing and kind, as the report.
const PERIOD_DAYS: &str = "SELECT d.listing_id, d.event, v.sketch
     FROM listings l CROSS JOIN rollup_kinds k CROSS JOIN listing_daily d
       ON d.listing_id = l.listing_id AND d.event = k.kind AND d.day BETWEEN ?3 AND ?4
     LEFT JOIN listing_daily_visitors v
       ON v.listing_id = d.listing_id AND v.event = d.event AND v.day = d.day
     WHERE l.tenant = ?1 AND l.account_id = ?2 AND l.listing_id BETWEEN ?5 AND ?6
       AND (?7 IS NULL OR k.kind = ?7)";

/// [`PERIOD_DAYS`] over the months starting `?3..=?4` of `listing_monthly`.
const PERIOD_MONTHS: &str = "SELECT d.listing_id, d.event, v.sketch
     FROM listings l CROSS JOIN rollup_kinds k CROSS JOIN listing_monthly d
       ON d.listing_id = l.listing_id AND d.event = k.kind AND d.month BETWEEN ?3 AND ?4
     LEFT JOIN listing_monthly_visitors v
       ON v.listing_id = d.listing_id AND v.event = d.event AND v.month = d.month
     WHERE l.tenant = ?1 AND l.account_id = ?2 AND l.listing_id BETWEEN ?5 AND ?6
       AND (?7 IS NULL OR k.kind = ?7)";

/// Stores `r`'s sketch (or forgets the day's, when `r` has none) and brings its month's
/// sketch up to date ([`month_after`]). Runs before the month sums take the day's
/// difference: the month row's `days` is still the count before this day's replacement.
pub(super) fn keep(
    conn: &Connection,
    r: &DailyRow,
    day: Day,
    month: i32,
) -> Result<(), StoreError> {
    let key = params![r.listing_id, r.kind, day.0];
    let month_key = params![r.listing_id, r.kind, month];
    let mut forget_month = conn.prepare_cached(
        "DELETE FROM listing_monthly_visitors WHERE listing_id = ?1 AND event = ?2 AND month = ?3",
    )?;
    if r.visitors.is_empty() {
        conn.prepare_cached(
            "DELETE FROM listing_daily_visitors WHERE listing_id = ?1 AND event = ?2 AND day = ?3",
        )?
        .execute(key)?;
        forget_month.execute(month_key)?;
        return Ok(());
    }
    conn.prepare_cached(
        "INSERT INTO listing_daily_visitors (listing_id, event, day, sketch) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (listing_id, event, day) DO UPDATE SET sketch = excluded.sketch",
    )?
    .execute(params![r.listing_id, r.kind, day.0, r.visitors])?;
    let was: Option<(i64, Option<Vec<u8>>)> = conn
        .prepare_cached(
            "SELECT m.days, v.sketch FROM listing_monthly m LEFT JOIN listing_monthly_visitors v
               ON v.listing_id = m.listing_id AND v.event = m.event AND v.month = m.month
             WHERE m.listing_id = ?1 AND m.event = ?2 AND m.month = ?3",
        )?
        .query_row(month_key, |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    match month_after(was.as_ref().map(|(d, v)| (*d, v.as_deref())), &r.visitors)? {
        Some(sketch) => {
            conn.prepare_cached(
                "INSERT INTO listing_monthly_visitors (listing_id, event, month, sketch)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (listing_id, event, month) DO UPDATE SET sketch = excluded.sketch",
            )?
            .execute(params![r.listing_id, r.kind, month, sketch])?;
        }
        None => {
            forget_month.execute(month_key)?;
        }
    }
    Ok(())
}

/// Forgets the sketches of the daily rows `stale` deleted from `day`, and of the month rows
/// `emptied` deleted from `month`.
pub(super) fn forget(
    conn: &Connection,
    day: Day,
    month: i32,
    stale: &[(i64, String)],
    emptied: &[(i64, String)],
) -> Result<(), StoreError> {
    let mut daily = conn.prepare_cached(
        "DELETE FROM listing_daily_visitors WHERE listing_id = ?1 AND event = ?2 AND day = ?3",
    )?;
    for (listing_id, event) in stale {
        daily.execute(params![listing_id, event, day.0])?;
    }
    let mut monthly = conn.prepare_cached(
        "DELETE FROM listing_monthly_visitors WHERE listing_id = ?1 AND event = ?2 AND month = ?3",
    )?;
    for (listing_id, event) in emptied {
        monthly.execute(params![listing_id, event, month])?;
    }
    Ok(())
}

/// [`crate::rollups::RollupStore::period_uniques`] in the read transaction `conn`: the
/// sketches of the period's parts, unioned per listing and kind.
pub(super) fn period_uniques(
    conn: &Connection,
    tenant: &str,
    account_id: i64,
    (from, to): (Day, Day),
    kind: Option<String>,
    listings: std::ops::RangeInclusive<i64>,
) -> Result<Vec<(i64, String, Option<u64>)>, StoreError> {
    let mut unions = PeriodUnions::default();
    for (source, a, b) in visitor_parts(from, to) {
        let mut stmt = conn.prepare_cached(match source {
            Source::Daily => PERIOD_DAYS,
            Source::Monthly => PERIOD_MONTHS,
        })?;
        let mut rows = stmt.query(params![
            tenant,
            account_id,
            a.0,
            b.0,
            listings.start(),
            listings.end(),
            kind
        ])?;
        while let Some(r) = rows.next()? {
            let sketch: Option<Vec<u8>> = r.get(2)?;
            unions.add(r.get(0)?, r.get(1)?, sketch.as_deref())?;
        }
    }
    Ok(unions.estimates())
}
