//! The mailing store on MariaDB / MySQL: mailings and the suppression list in the same
//! database as the link records, so every node renders, sends and suppresses against one copy
//! (tables of [`crate::migrations::MYSQL`] version 2). Also the id secret's check value, which
//! every node compares with its own at start.

use std::collections::HashSet;

use async_trait::async_trait;
use sqlx::{QueryBuilder, Row};
use tidemark_core::mysql::text_column;

use super::MysqlLinks;
use crate::error::{LinksError, Result};
use crate::model::Mailing;
use crate::stats::{Delivery, StatsHit, StoredStats};
use crate::store::MailingStore;

/// Addresses per `IN (…)` lookup of the suppression list.
const EMAILS_PER_QUERY: usize = 1000;

#[async_trait]
impl MailingStore for MysqlLinks {
    async fn create_mailing(&self, m: Mailing) -> Result<()> {
        sqlx::query(
            "INSERT INTO mailing (tenant, mailing_id, subject, sender, html, created_ms)
             VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(&m.tenant)
        .bind(&m.mailing_id)
        .bind(&m.subject)
        .bind(&m.from)
        .bind(&m.html)
        .bind(m.created_ms)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn mailing(&self, tenant: &str, mailing_id: &str) -> Result<Option<Mailing>> {
        let row = sqlx::query(
            "SELECT subject, sender, html, created_ms FROM mailing
             WHERE tenant = ? AND mailing_id = ?",
        )
        .bind(tenant)
        .bind(mailing_id)
        .fetch_optional(&self.pool)
        .await?;
        let Some(r) = row else { return Ok(None) };
        Ok(Some(Mailing {
            mailing_id: mailing_id.to_owned(),
            tenant: tenant.to_owned(),
            subject: text_column(&r, 0)?,
            from: text_column(&r, 1)?,
            html: text_column(&r, 2)?,
            created_ms: r.try_get(3)?,
        }))
    }

    async fn mailing_by_id(&self, mailing_id: &str) -> Result<Option<Mailing>> {
        let row = sqlx::query(
            "SELECT tenant, subject, sender, html, created_ms FROM mailing WHERE mailing_id = ?",
        )
        .bind(mailing_id)
        .fetch_optional(&self.pool)
        .await?;
        let Some(r) = row else { return Ok(None) };
        Ok(Some(Mailing {
            mailing_id: mailing_id.to_owned(),
            tenant: text_column(&r, 0)?,
            subject: text_column(&r, 1)?,
            from: text_column(&r, 2)?,
            html: text_column(&r, 3)?,
            created_ms: r.try_get(4)?,
        }))
    }

    async fn suppress(&self, tenant: &str, emails: &[String]) -> Result<()> {
        if emails.is_empty() {
            return Ok(());
        }
        let mut tx = self.pool.begin().await?;
        for chunk in emails.chunks(EMAILS_PER_QUERY) {
            let mut q = QueryBuilder::new("INSERT IGNORE INTO suppression (tenant, email) ");
            q.push_values(chunk, |mut b, e| {
                b.push_bind(tenant).push_bind(e.to_lowercase());
            });
            q.build().execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn unsuppress(&self, tenant: &str, email: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM suppression WHERE tenant = ? AND email = ?")
            .bind(tenant)
            .bind(email.to_lowercase())
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn suppressed(&self, tenant: &str, emails: &[String]) -> Result<HashSet<String>> {
        let mut out = HashSet::new();
        for chunk in emails.chunks(EMAILS_PER_QUERY) {
            let mut q = QueryBuilder::new("SELECT email FROM suppression WHERE tenant = ");
            q.push_bind(tenant).push(" AND email IN (");
            let mut list = q.separated(", ");
            for e in chunk {
                list.push_bind(e.to_lowercase());
            }
            q.push(")");
            for r in q.build().fetch_all(&self.pool).await? {
                out.insert(text_column(&r, 0)?);
            }
        }
        Ok(out)
    }

    async fn add_counts(
        &self,
        mailing_id: &str,
        counts: &[(String, i64)],
        links: &[(u32, String)],
    ) -> Result<()> {
        self.add_counts_tx(mailing_id, counts, links).await
    }

    async fn record_deliveries(&self, deliveries: Vec<Delivery>, now_ms: i64) -> Result<()> {
        self.record_deliveries_tx(&deliveries, now_ms).await
    }

    async fn apply_hits(&self, group_id: &str, hits: Vec<StatsHit>, now_ms: i64) -> Result<bool> {
        self.apply_hits_tx(group_id, &hits, now_ms).await
    }

    async fn stats(&self, mailing_id: &str) -> Result<StoredStats> {
        self.stats_of(mailing_id).await
    }
}

impl MysqlLinks {
    /// Records `fingerprint` ([`crate::id::IdCodec::fingerprint`]) as the store's id secret
    /// check if none is recorded yet, and refuses a different one: every node of a deployment
    /// must make and check ids with the same `links.id_secret`.
    pub async fn check_id_secret(&self, fingerprint: &str) -> Result<()> {
        sqlx::query("INSERT IGNORE INTO links_meta (name, value) VALUES ('id_secret', ?)")
            .bind(fingerprint)
            .execute(&self.pool)
            .await?;
        let row = sqlx::query("SELECT value FROM links_meta WHERE name = 'id_secret'")
            .fetch_one(&self.pool)
            .await?;
        let recorded = text_column(&row, 0)?;
        if recorded != fingerprint {
            return Err(LinksError::Invalid(format!(
                "links.id_secret differs from the secret this MariaDB link store was first used \
                 with (check value {recorded}, this node's {fingerprint}): every node must have \
                 the same links.id_secret, or the ids one node makes are refused by the others"
            )));
        }
        Ok(())
    }
}

/// What [`MysqlLinks::take_in_local`] moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TakenIn {
    /// Mailings copied (those already in the shared store are kept as they are).
    pub mailings: usize,
    /// Suppressed addresses copied.
    pub suppressions: usize,
}

impl MysqlLinks {
    /// Moves the mailings and suppression list a node kept in its own `links.db` (`path`)
    /// before its link store was MariaDB into this store, once: copied with `INSERT IGNORE`
    /// in one transaction, then the file is renamed `links.db.moved`, so a later start cannot
    /// bring back an address unsuppressed since. No file: nothing to do.
    pub async fn take_in_local(&self, path: &std::path::Path) -> Result<TakenIn> {
        if !path.exists() {
            return Ok(TakenIn::default());
        }
        let file = path.to_owned();
        let (mailings, suppressions) = tokio::task::spawn_blocking(move || read_local(&file))
            .await
            .map_err(|e| LinksError::Unavailable(format!("reading {}: {e}", path.display())))??;
        let mut tx = self.pool.begin().await?;
        for m in &mailings {
            sqlx::query(
                "INSERT IGNORE INTO mailing (tenant, mailing_id, subject, sender, html, created_ms)
                 VALUES (?, ?, ?, ?, ?, ?)",
            )
            .bind(&m.tenant)
            .bind(&m.mailing_id)
            .bind(&m.subject)
            .bind(&m.from)
            .bind(&m.html)
            .bind(m.created_ms)
            .execute(&mut *tx)
            .await?;
        }
        for (tenant, email) in &suppressions {
            sqlx::query("INSERT IGNORE INTO suppression (tenant, email) VALUES (?, ?)")
                .bind(tenant)
                .bind(email)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        let moved = path.with_extension("db.moved");
        std::fs::rename(path, &moved).map_err(|e| {
            LinksError::Store(
                tidemark_core::store::StoreError::file(path, e).with_context("renaming"),
            )
        })?;
        Ok(TakenIn {
            mailings: mailings.len(),
            suppressions: suppressions.len(),
        })
    }
}

/// A suppressed address: tenant, address.
type Suppression = (String, String);

/// The mailings and suppressed addresses of a local `links.db`. Opened read-write, so that
/// closing it folds its WAL into the file before the file is renamed.
fn read_local(
    path: &std::path::Path,
) -> std::result::Result<(Vec<Mailing>, Vec<Suppression>), rusqlite::Error> {
    let conn = rusqlite::Connection::open(path)?;
    let mailings = conn
        .prepare("SELECT tenant, mailing_id, subject, sender, html, created_ms FROM mailing")?
        .query_map([], |r| {
            Ok(Mailing {
                tenant: r.get(0)?,
                mailing_id: r.get(1)?,
                subject: r.get(2)?,
                from: r.get(3)?,
                html: r.get(4)?,
                created_ms: r.get(5)?,
            })
        })?
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let suppressions = conn
        .prepare("SELECT tenant, email FROM suppression")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<std::result::Result<Vec<_>, _>>()?;
    conn.close().map_err(|(_, e)| e)?;
    Ok((mailings, suppressions))
}
