//! The visitor sketches on MariaDB / MySQL ([`crate::visitors`]): `listing_daily_visitors`
//! and `listing_monthly_visitors`, keyed as the rows they belong to, written in the day's
//! replacement transaction and read for period uniques.

use std::collections::HashMap;

use sqlx::mysql::{MySqlConnection, MySqlPool};
use sqlx::{QueryBuilder, Row};
use tidemark_core::day::Day;
use tidemark_core::store::StoreError;

use super::text;
use crate::rollups::DailyRow;
use crate::rollups::monthly::{Source, visitor_parts};
use crate::visitors::{PeriodUnions, month_after};

/// Sketches per multi-row statement: at most about 8 KiB each, so a statement stays far below
/// the server's packet limit (16 MiB by default).
const SKETCHES_PER_STATEMENT: usize = 100;

/// A month row as it was: the daily rows it counted and its sketch, if any.
type MonthWas = (i64, Option<Vec<u8>>);

/// Stores the sketches of a day's replacement `rows` (a row without one forgets the day's)
/// and brings their month's up to date ([`month_after`]). Runs in the replacement's
/// transaction, before the month sums take the day's difference, so that a month row's
/// `days` is still the count before this day. The month rows read are locked.
pub(super) async fn keep(
    tx: &mut MySqlConnection,
    day: &str,
    month: &str,
    rows: &[DailyRow],
) -> Result<(), StoreError> {
    let (with, without): (Vec<&DailyRow>, Vec<&DailyRow>) =
        rows.iter().partition(|r| !r.visitors.is_empty());
    for r in &without {
        sqlx::query(
            "DELETE FROM listing_daily_visitors WHERE listing_id = ? AND day = ? AND event = ?",
        )
        .bind(r.listing_id)
        .bind(day)
        .bind(&r.kind)
        .execute(&mut *tx)
        .await?;
    }
    // The months as they were, for the day's listings.
    let mut was: HashMap<(i64, String), MonthWas> = HashMap::new();
    for chunk in with.chunks(1_000) {
        let mut q = QueryBuilder::new(
            "SELECT m.listing_id, m.event, m.days, v.sketch FROM listing_monthly m
             LEFT JOIN listing_monthly_visitors v
               ON v.listing_id = m.listing_id AND v.month = m.month AND v.event = m.event
             WHERE m.month = ",
        );
        q.push_bind(month).push(" AND m.listing_id IN (");
        let mut ids = q.separated(", ");
        for r in chunk {
            ids.push_bind(r.listing_id);
        }
        q.push(") FOR UPDATE");
        for row in q.build().fetch_all(&mut *tx).await? {
            let key = (row.try_get(0)?, text(row.try_get(1)?)?);
            was.insert(key, (i64::from(row.try_get::<i32, _>(2)?), row.try_get(3)?));
        }
    }
    // A month with a day of unknown visitors is unknown: rows without a sketch, and months
    // that counted such a day before ([`month_after`]).
    let mut months = Vec::with_capacity(with.len());
    let mut unknown = without;
    for r in &with {
        let old = was.get(&(r.listing_id, r.kind.clone()));
        match month_after(old.map(|(d, v)| (*d, v.as_deref())), &r.visitors)? {
            Some(sketch) => months.push((r.listing_id, &r.kind, sketch)),
            None => unknown.push(*r),
        }
    }
    for chunk in with.chunks(SKETCHES_PER_STATEMENT) {
        let mut q = QueryBuilder::new(
            "INSERT INTO listing_daily_visitors (listing_id, day, event, sketch) ",
        );
        q.push_values(chunk, |mut b, r| {
            b.push_bind(r.listing_id)
                .push_bind(day)
                .push_bind(&r.kind)
                .push_bind(&r.visitors);
        });
        q.push(" ON DUPLICATE KEY UPDATE sketch = VALUES(sketch)");
        q.build().execute(&mut *tx).await?;
    }
    for chunk in months.chunks(SKETCHES_PER_STATEMENT) {
        let mut q = QueryBuilder::new(
            "INSERT INTO listing_monthly_visitors (listing_id, month, event, sketch) ",
        );
        q.push_values(chunk, |mut b, (l, k, sketch)| {
            b.push_bind(*l)
                .push_bind(month)
                .push_bind(*k)
                .push_bind(sketch);
        });
        q.push(" ON DUPLICATE KEY UPDATE sketch = VALUES(sketch)");
        q.build().execute(&mut *tx).await?;
    }
    for r in unknown {
        sqlx::query(
            "DELETE FROM listing_monthly_visitors WHERE listing_id = ? AND month = ? AND event = ?",
        )
        .bind(r.listing_id)
        .bind(month)
        .bind(&r.kind)
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}

/// Forgets the sketches of the daily rows `stale` deleted from `day`, and of month rows of
/// `month` that no longer exist.
pub(super) async fn forget(
    tx: &mut MySqlConnection,
    day: &str,
    month: &str,
    stale: &[(i64, String)],
) -> Result<(), StoreError> {
    for (listing_id, event) in stale {
        sqlx::query(
            "DELETE FROM listing_daily_visitors WHERE listing_id = ? AND day = ? AND event = ?",
        )
        .bind(listing_id)
        .bind(day)
        .bind(event)
        .execute(&mut *tx)
        .await?;
    }
    sqlx::query(
        "DELETE v FROM listing_monthly_visitors v LEFT JOIN listing_monthly m
           ON m.listing_id = v.listing_id AND m.month = v.month AND m.event = v.event
         WHERE v.month = ? AND m.listing_id IS NULL",
    )
    .bind(month)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// [`crate::rollups::RollupStore::period_uniques`]: the sketches of the period's parts, read
/// in one consistent snapshot and unioned per listing and kind.
pub(super) async fn period_uniques(
    pool: &MySqlPool,
    tenant: &str,
    account_id: i64,
    (from, to): (Day, Day),
    kind: Option<&str>,
    listings: std::ops::RangeInclusive<i64>,
) -> Result<Vec<(i64, String, Option<u64>)>, StoreError> {
    let mut unions = PeriodUnions::default();
    // One transaction: one snapshot of every part (REPEATABLE READ).
    let mut tx = pool.begin().await?;
    for (source, a, b) in visitor_parts(from, to) {
        let (table, column) = match source {
            Source::Daily => ("listing_daily", "day"),
            Source::Monthly => ("listing_monthly", "month"),
        };
        let sql = format!(
            "SELECT d.listing_id, d.event, v.sketch
             FROM listings l JOIN {table} d ON d.listing_id = l.id AND d.{column} BETWEEN ? AND ?
             LEFT JOIN {table}_visitors v
               ON v.listing_id = d.listing_id AND v.{column} = d.{column} AND v.event = d.event
             WHERE l.tenant = ? AND l.account_id = ? AND l.id BETWEEN ? AND ?{}",
            if kind.is_some() {
                " AND d.event = ?"
            } else {
                ""
            }
        );
        let mut q = sqlx::query(&sql)
            .bind(a.to_string())
            .bind(b.to_string())
            .bind(tenant)
            .bind(account_id)
            .bind(*listings.start())
            .bind(*listings.end());
        if let Some(k) = kind {
            q = q.bind(k);
        }
        for row in q.fetch_all(&mut *tx).await? {
            let sketch: Option<Vec<u8>> = row.try_get(2)?;
            unions.add(row.try_get(0)?, text(row.try_get(1)?)?, sketch.as_deref())?;
        }
    }
    tx.commit().await?;
    Ok(unions.estimates())
}
