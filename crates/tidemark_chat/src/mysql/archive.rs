//! `message_record` and `history_index` on MariaDB / MySQL, both keyed
//! `(tenant, conversation_id, seq_bucket, conversation_seq)` (seed 000: bounded partitions per
//! conversation; `seq_bucket = seq / 1000`).
//!
//! Data flow: the archiver calls [`Archive::put_records`] with a batch, then
//! [`Archive::put_index`] with its entries (seed 000: index after record). Each call is split into
//! multi-row `INSERT … ON DUPLICATE KEY UPDATE <no-op>` statements of at most [`ROWS_PER_INSERT`]
//! rows, run concurrently on the pool: re-writing a row is a no-op, while any other error (a
//! too-long value under strict mode, the server down) still fails the call — unlike
//! `INSERT IGNORE`, which would turn those into warnings. Ephemeral rows carry `expires_at`;
//! reads hide them from that instant on and [`Archive::purge_expired`] deletes their records in
//! batches. Their index entries stay, as tombstones: a seq without one is a lost one
//! ([`crate::reads::archive_range`]).

use async_trait::async_trait;
use futures::future::try_join_all;
use sqlx::mysql::{MySqlPool, MySqlRow};
use sqlx::{QueryBuilder, Row};
use tidemark_core::mysql::text_column;

use tidemark_core::schema::migrate_mysql;

use crate::error::{ChatError, Result};
use crate::model::{IndexEntry, MessageClass, MessageRecord, seq_bucket};
use crate::ports::{ARCHIVED_THROUGH, Archive, partition_key};

/// Rows per multi-row insert (11 placeholders each, well under the 65,535 limit).
const ROWS_PER_INSERT: usize = 500;

const RECORD_COLUMNS: &str = "tenant, conversation_id, conversation_seq, message_id, sender, \
     client_msg_id, body, class, committed_at, expires_at";

/// The MariaDB / MySQL archive (see the module docs).
#[derive(Debug, Clone)]
pub struct MysqlArchive {
    pool: MySqlPool,
}

impl MysqlArchive {
    /// Connects to `url` (`mysql://user[:password]@host[:port]/database`; the database is created
    /// if missing) with at most `max_connections`, and creates or migrates the tables. Errors:
    /// [`ChatError::Invalid`] for a bad URL, [`ChatError::Store`] if the server is down.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self> {
        let pool = tidemark_core::mysql::connect(url, max_connections).await?;
        Self::with_pool(pool).await
    }

    /// Uses an open pool; creates or migrates the tables ([`super::migrations`]).
    ///
    /// # Errors
    /// As [`MysqlArchive::connect`]; an archive of a newer build is refused
    /// ([`tidemark_core::mysql::MysqlError::SchemaTooNew`], as a [`ChatError::Store`] that is not
    /// retryable).
    pub async fn with_pool(pool: MySqlPool) -> Result<Self> {
        migrate_mysql(&pool, &super::migrations::ARCHIVE).await?;
        Ok(Self { pool })
    }

    /// The pool (for tests that look behind the port's back).
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }
}

fn record_from_row(row: &MySqlRow) -> Result<MessageRecord> {
    Ok(MessageRecord {
        tenant: text_column(row, 0)?,
        conversation_id: text_column(row, 1)?,
        conversation_seq: row.try_get(2)?,
        message_id: text_column(row, 3)?,
        sender: text_column(row, 4)?,
        client_msg_id: text_column(row, 5)?,
        body: text_column(row, 6)?,
        class: MessageClass::from_code(i64::from(row.try_get::<i8, _>(7)?)),
        committed_at_ms: row.try_get(8)?,
        expires_at_ms: row.try_get(9)?,
    })
}

impl MysqlArchive {
    async fn insert_records(&self, chunk: &[MessageRecord]) -> Result<()> {
        let mut q = QueryBuilder::new(
            "INSERT INTO message_record (tenant, conversation_id, seq_bucket, conversation_seq, \
             message_id, sender, client_msg_id, body, class, committed_at, expires_at) ",
        );
        q.push_values(chunk, |mut b, r| {
            b.push_bind(&r.tenant)
                .push_bind(&r.conversation_id)
                .push_bind(r.seq_bucket())
                .push_bind(r.conversation_seq)
                .push_bind(&r.message_id)
                .push_bind(&r.sender)
                .push_bind(&r.client_msg_id)
                .push_bind(&r.body)
                .push_bind(r.class.code() as i8)
                .push_bind(r.committed_at_ms)
                .push_bind(r.expires_at_ms);
        });
        q.push(" ON DUPLICATE KEY UPDATE conversation_seq = conversation_seq");
        q.build().execute(&self.pool).await?;
        Ok(())
    }

    async fn insert_index(&self, chunk: &[IndexEntry]) -> Result<()> {
        let mut q = QueryBuilder::new(
            "INSERT INTO history_index (tenant, conversation_id, seq_bucket, conversation_seq, \
             message_id, expires_at) ",
        );
        q.push_values(chunk, |mut b, e| {
            b.push_bind(&e.tenant)
                .push_bind(&e.conversation_id)
                .push_bind(seq_bucket(e.conversation_seq))
                .push_bind(e.conversation_seq)
                .push_bind(&e.message_id)
                .push_bind(e.expires_at_ms);
        });
        q.push(" ON DUPLICATE KEY UPDATE conversation_seq = conversation_seq");
        q.build().execute(&self.pool).await?;
        Ok(())
    }
}

#[async_trait]
impl Archive for MysqlArchive {
    async fn put_records(&self, records: &[MessageRecord]) -> Result<()> {
        try_join_all(
            records
                .chunks(ROWS_PER_INSERT)
                .map(|c| self.insert_records(c)),
        )
        .await?;
        Ok(())
    }

    async fn put_index(&self, entries: &[IndexEntry], through: Option<(u32, u64)>) -> Result<()> {
        try_join_all(
            entries
                .chunks(ROWS_PER_INSERT)
                .map(|c| self.insert_index(c)),
        )
        .await?;
        // After every entry is in: `through` promises them.
        if let Some((partition, through)) = through {
            sqlx::query(
                "INSERT INTO archive_meta (name, value) VALUES (?, ?)
                 ON DUPLICATE KEY UPDATE value = VALUES(value)",
            )
            .bind(partition_key(ARCHIVED_THROUGH, partition))
            .bind(through as i64)
            .execute(&self.pool)
            .await?;
        }
        Ok(())
    }

    async fn index_range(
        &self,
        tenant: &str,
        conversation_id: &str,
        lo: u64,
        hi: u64,
    ) -> Result<Vec<IndexEntry>> {
        let rows = sqlx::query(
            "SELECT conversation_seq, message_id, expires_at FROM history_index
             WHERE tenant = ? AND conversation_id = ? AND seq_bucket BETWEEN ? AND ?
               AND conversation_seq BETWEEN ? AND ?
             ORDER BY seq_bucket, conversation_seq",
        )
        .bind(tenant)
        .bind(conversation_id)
        .bind(seq_bucket(lo))
        .bind(seq_bucket(hi))
        .bind(lo)
        .bind(hi)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(IndexEntry {
                    tenant: tenant.to_owned(),
                    conversation_id: conversation_id.to_owned(),
                    conversation_seq: r.try_get(0)?,
                    message_id: text_column(r, 1)?,
                    expires_at_ms: r.try_get(2)?,
                })
            })
            .collect()
    }

    async fn records(
        &self,
        tenant: &str,
        conversation_id: &str,
        seqs: &[u64],
    ) -> Result<Vec<MessageRecord>> {
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        let mut buckets: Vec<u64> = seqs.iter().map(|&s| seq_bucket(s)).collect();
        buckets.sort_unstable();
        buckets.dedup();
        // The bucket is a function of the seq, so `bucket IN … AND seq IN …` selects exactly
        // the asked seqs while letting the primary key narrow by bucket first.
        let mut q = QueryBuilder::new(format!("SELECT {RECORD_COLUMNS} FROM message_record "));
        q.push("WHERE tenant = ")
            .push_bind(tenant)
            .push(" AND conversation_id = ")
            .push_bind(conversation_id)
            .push(" AND seq_bucket IN (");
        let mut sep = q.separated(", ");
        for b in &buckets {
            sep.push_bind(*b);
        }
        q.push(") AND conversation_seq IN (");
        let mut sep = q.separated(", ");
        for s in seqs {
            sep.push_bind(*s);
        }
        q.push(")");
        let rows = q.build().fetch_all(&self.pool).await?;
        rows.iter().map(record_from_row).collect()
    }

    async fn earliest_seq(
        &self,
        tenant: &str,
        conversation_id: &str,
        now_ms: i64,
    ) -> Result<Option<u64>> {
        let row = sqlx::query(
            "SELECT conversation_seq FROM history_index
             WHERE tenant = ? AND conversation_id = ? AND (expires_at IS NULL OR expires_at > ?)
             ORDER BY seq_bucket, conversation_seq LIMIT 1",
        )
        .bind(tenant)
        .bind(conversation_id)
        .bind(now_ms)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| r.try_get::<u64, _>(0).map_err(ChatError::from))
            .transpose()
    }

    async fn archived_through(&self, partition: u32) -> Result<Option<u64>> {
        let row = sqlx::query("SELECT value FROM archive_meta WHERE name = ?")
            .bind(partition_key(ARCHIVED_THROUGH, partition))
            .fetch_optional(&self.pool)
            .await?;
        Ok(row
            .map(|r| r.try_get::<i64, _>(0))
            .transpose()?
            .map(|v| v as u64))
    }

    async fn identity(&self) -> Result<i64> {
        let row = sqlx::query("SELECT value FROM archive_meta WHERE name = 'identity'")
            .fetch_one(&self.pool)
            .await?;
        Ok(row.try_get::<i64, _>(0)?)
    }

    async fn purge_expired(&self, now_ms: i64, batch: usize) -> Result<usize> {
        // Records only: the index entries stay as tombstones (see `Archive::index_range`).
        let done = sqlx::query(
            "DELETE FROM message_record
             WHERE expires_at IS NOT NULL AND expires_at <= ? LIMIT ?",
        )
        .bind(now_ms)
        .bind(batch as u64)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() as usize)
    }
}
