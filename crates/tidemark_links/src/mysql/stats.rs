//! The campaign-statistics summary on MariaDB / MySQL (tables of
//! [`crate::migrations::MYSQL`] version 3), shared by every node; the counting rules are
//! [`crate::stats`]'s. Each call is one transaction. Rows are written in key order (counters,
//! uniques and hours sorted), so two nodes applying groups at once wait on each other rather
//! than deadlock; a deadlock or a lost connection fails the call, and the hit writer tries
//! the group again under the same group id, which is applied once.

use std::collections::{BTreeMap, HashSet};

use sqlx::{MySql, QueryBuilder, Row, Transaction};
use tidemark_core::mysql::text_column;

use super::MysqlLinks;
use crate::error::Result;
use crate::stats::{
    DELIVERIES_KEPT_MS, Delivery, HIT_GROUPS_KEPT_MS, StatsHit, StoredStats, recipient_key, tally,
    tally_deliveries,
};

/// Rows per multi-row statement.
const ROWS_PER_STATEMENT: usize = 500;

/// Adds counters: `(mailing, name)` → amount, in key order.
async fn add(
    tx: &mut Transaction<'_, MySql>,
    counts: &BTreeMap<(String, String), i64>,
) -> Result<()> {
    let rows: Vec<_> = counts.iter().filter(|(_, n)| **n != 0).collect();
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        let mut q = QueryBuilder::new("INSERT INTO mailing_count (mailing_id, name, n) ");
        q.push_values(chunk, |mut b, ((m, name), n)| {
            b.push_bind(m).push_bind(name).push_bind(**n);
        });
        q.push(" ON DUPLICATE KEY UPDATE n = n + VALUES(n)");
        q.build().execute(&mut **tx).await?;
    }
    Ok(())
}

impl MysqlLinks {
    pub(super) async fn add_counts_tx(
        &self,
        mailing: &str,
        counts: &[(String, i64)],
        links: &[(u32, String)],
    ) -> Result<()> {
        let mut sums = BTreeMap::new();
        for (name, n) in counts {
            *sums.entry((mailing.to_owned(), name.clone())).or_default() += n;
        }
        let mut tx = self.pool.begin().await?;
        for chunk in links.chunks(ROWS_PER_STATEMENT) {
            let mut q =
                QueryBuilder::new("INSERT IGNORE INTO mailing_link (mailing_id, position, url) ");
            q.push_values(chunk, |mut b, (p, url)| {
                b.push_bind(mailing).push_bind(*p).push_bind(url);
            });
            q.build().execute(&mut *tx).await?;
        }
        add(&mut tx, &sums).await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn record_deliveries_tx(
        &self,
        deliveries: &[Delivery],
        now_ms: i64,
    ) -> Result<()> {
        let t = tally_deliveries(deliveries);
        let kept: Vec<_> = t.delivered_at.iter().collect();
        let mut tx = self.pool.begin().await?;
        for chunk in kept.chunks(ROWS_PER_STATEMENT) {
            let mut q =
                QueryBuilder::new("INSERT INTO mailing_delivery (mailing_id, email, at_ms) ");
            q.push_values(chunk, |mut b, ((m, e), at)| {
                b.push_bind(m).push_bind(e).push_bind(**at);
            });
            q.push(" ON DUPLICATE KEY UPDATE at_ms = VALUES(at_ms)");
            q.build().execute(&mut *tx).await?;
        }
        add(&mut tx, &t.counts).await?;
        sqlx::query("DELETE FROM mailing_delivery WHERE at_ms < ?")
            .bind(now_ms - DELIVERIES_KEPT_MS)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn apply_hits_tx(
        &self,
        group_id: &str,
        hits: &[StatsHit],
        now_ms: i64,
    ) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        let fresh = sqlx::query("INSERT IGNORE INTO hit_group (group_id, at_ms) VALUES (?, ?)")
            .bind(group_id)
            .bind(now_ms)
            .execute(&mut *tx)
            .await?
            .rows_affected()
            == 1;
        if !fresh {
            return Ok(false);
        }
        sqlx::query("DELETE FROM hit_group WHERE at_ms < ?")
            .bind(now_ms - HIT_GROUPS_KEPT_MS)
            .execute(&mut *tx)
            .await?;
        let delivered = self.delivery_times(&mut tx, hits).await?;
        let mut t = tally(hits, |m, e| {
            delivered.get(&(m.to_owned(), e.to_owned())).copied()
        });
        let fresh = self.seen.filter(&mut t);
        for ((mailing, what), emails) in &t.uniques {
            let mut new = 0;
            for chunk in emails.chunks(ROWS_PER_STATEMENT) {
                let mut q = QueryBuilder::new(
                    "INSERT IGNORE INTO mailing_unique (mailing_id, what, email) ",
                );
                q.push_values(chunk, |mut b, e| {
                    b.push_bind(mailing).push_bind(what.code()).push_bind(e);
                });
                new += q.build().execute(&mut *tx).await?.rows_affected() as i64;
            }
            *t.counts
                .entry((mailing.clone(), what.counter()))
                .or_default() += new;
        }
        add(&mut tx, &t.counts).await?;
        let hours: Vec<_> = t.hours.iter().collect();
        for chunk in hours.chunks(ROWS_PER_STATEMENT) {
            let mut q =
                QueryBuilder::new("INSERT INTO mailing_hour (mailing_id, hour_ms, opens, clicks) ");
            q.push_values(chunk, |mut b, ((m, at), (opens, clicks))| {
                b.push_bind(m)
                    .push_bind(*at)
                    .push_bind(*opens)
                    .push_bind(*clicks);
            });
            q.push(" ON DUPLICATE KEY UPDATE opens = opens + VALUES(opens), clicks = clicks + VALUES(clicks)");
            q.build().execute(&mut *tx).await?;
        }
        tx.commit().await?;
        self.seen.remember(fresh);
        Ok(true)
    }

    /// The kept delivery times of the recipients of the group's opens.
    async fn delivery_times(
        &self,
        tx: &mut Transaction<'_, MySql>,
        hits: &[StatsHit],
    ) -> Result<BTreeMap<(String, String), i64>> {
        let wanted: HashSet<(String, String)> = hits
            .iter()
            .filter(|h| h.kind == crate::stats::HitKind::Open)
            .map(|h| (h.mailing_id.clone(), recipient_key(&h.email)))
            .collect();
        let wanted: Vec<_> = wanted.into_iter().collect();
        let mut out = BTreeMap::new();
        for chunk in wanted.chunks(ROWS_PER_STATEMENT) {
            let mut q = QueryBuilder::new(
                "SELECT mailing_id, email, at_ms FROM mailing_delivery WHERE (mailing_id, email) IN (",
            );
            let mut list = q.separated(", ");
            for (m, e) in chunk {
                list.push("(")
                    .push_bind_unseparated(m)
                    .push_unseparated(", ")
                    .push_bind_unseparated(e)
                    .push_unseparated(")");
            }
            q.push(")");
            for r in q.build().fetch_all(&mut **tx).await? {
                out.insert((text_column(&r, 0)?, text_column(&r, 1)?), r.try_get(2)?);
            }
        }
        Ok(out)
    }

    pub(super) async fn stats_of(&self, mailing: &str) -> Result<StoredStats> {
        let mut counts = BTreeMap::new();
        for r in sqlx::query("SELECT name, n FROM mailing_count WHERE mailing_id = ?")
            .bind(mailing)
            .fetch_all(&self.pool)
            .await?
        {
            counts.insert(text_column(&r, 0)?, r.try_get(1)?);
        }
        let mut hours = Vec::new();
        for r in sqlx::query(
            "SELECT hour_ms, opens, clicks FROM mailing_hour WHERE mailing_id = ? ORDER BY hour_ms",
        )
        .bind(mailing)
        .fetch_all(&self.pool)
        .await?
        {
            hours.push((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?));
        }
        let mut links = Vec::new();
        for r in sqlx::query(
            "SELECT position, url FROM mailing_link WHERE mailing_id = ? ORDER BY position",
        )
        .bind(mailing)
        .fetch_all(&self.pool)
        .await?
        {
            links.push((r.try_get(0)?, text_column(&r, 1)?));
        }
        Ok(StoredStats {
            counts,
            links,
            hours,
        })
    }
}
