//! The archive of the embedded default (`archive.db`): `message_record` and `history_index`,
//! both keyed `(tenant, conversation_id, seq_bucket, conversation_seq)`, written with plain
//! idempotent inserts (`INSERT OR IGNORE`).

use std::path::Path;

use async_trait::async_trait;
use rusqlite::params;
use tidemark_core::sqlite::{GroupWriter, Priority, ReadPool, open_rw};

use super::{RECORD_COLUMNS, record_from_row};
use crate::error::Result;
use crate::model::{IndexEntry, MessageRecord, SEQ_BUCKET_SIZE};
use crate::ports::Archive;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS message_record (
    tenant TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    seq_bucket INTEGER NOT NULL,
    conversation_seq INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    sender TEXT NOT NULL,
    client_msg_id TEXT NOT NULL,
    body TEXT NOT NULL,
    class INTEGER NOT NULL,
    committed_at INTEGER NOT NULL,
    expires_at INTEGER,
    UNIQUE (tenant, conversation_id, seq_bucket, conversation_seq)
);
CREATE INDEX IF NOT EXISTS message_record_expiry ON message_record (expires_at)
    WHERE expires_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS history_index (
    tenant TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    seq_bucket INTEGER NOT NULL,
    conversation_seq INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    expires_at INTEGER,
    PRIMARY KEY (tenant, conversation_id, seq_bucket, conversation_seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS history_index_expiry ON history_index (expires_at)
    WHERE expires_at IS NOT NULL;
";

/// The embedded archive (see the module docs).
#[derive(Debug)]
pub struct SqliteArchive {
    writer: GroupWriter,
    reads: ReadPool,
}

impl SqliteArchive {
    /// Opens (creating if needed) the archive file at `path`, its writer at normal priority.
    pub fn open(path: &Path) -> Result<Self> {
        Self::open_with_priority(path, Priority::Normal)
    }

    /// Like [`SqliteArchive::open`], the writer thread at `priority`
    /// ([`crate::config::ChatMode::archive_priority`]).
    pub fn open_with_priority(path: &Path, priority: Priority) -> Result<Self> {
        let conn = open_rw(path)?;
        conn.execute_batch(SCHEMA)?;
        let writer = GroupWriter::start_with_priority("chat-archive", conn, 64, priority);
        let reads = ReadPool::open(path, 8)?;
        Ok(Self { writer, reads })
    }
}

fn bucket(seq: u64) -> i64 {
    (seq / SEQ_BUCKET_SIZE) as i64
}

#[async_trait]
impl Archive for SqliteArchive {
    async fn put_records(&self, records: &[MessageRecord]) -> Result<()> {
        let records = records.to_vec();
        self.writer
            .write(move |conn| {
                let mut stmt = conn.prepare_cached(
                    "INSERT OR IGNORE INTO message_record (tenant, conversation_id, seq_bucket,
                         conversation_seq, message_id, sender, client_msg_id, body, class,
                         committed_at, expires_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                )?;
                for r in &records {
                    stmt.execute(params![
                        r.tenant,
                        r.conversation_id,
                        r.seq_bucket() as i64,
                        r.conversation_seq as i64,
                        r.message_id,
                        r.sender,
                        r.client_msg_id,
                        r.body,
                        r.class.code(),
                        r.committed_at_ms,
                        r.expires_at_ms
                    ])?;
                }
                Ok(())
            })
            .await
    }

    async fn put_index(&self, entries: &[IndexEntry]) -> Result<()> {
        let entries = entries.to_vec();
        self.writer
            .write(move |conn| {
                let mut stmt = conn.prepare_cached(
                    "INSERT OR IGNORE INTO history_index (tenant, conversation_id, seq_bucket,
                         conversation_seq, message_id, expires_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )?;
                for e in &entries {
                    stmt.execute(params![
                        e.tenant,
                        e.conversation_id,
                        bucket(e.conversation_seq),
                        e.conversation_seq as i64,
                        e.message_id,
                        e.expires_at_ms
                    ])?;
                }
                Ok(())
            })
            .await
    }

    async fn index_range(
        &self,
        tenant: &str,
        conversation_id: &str,
        lo: u64,
        hi: u64,
        now_ms: i64,
    ) -> Result<Vec<IndexEntry>> {
        let (tenant, cid) = (tenant.to_owned(), conversation_id.to_owned());
        self.reads
            .read(move |conn| {
                let mut stmt = conn.prepare_cached(
                    "SELECT conversation_seq, message_id, expires_at FROM history_index
                     WHERE tenant = ?1 AND conversation_id = ?2 AND seq_bucket BETWEEN ?3 AND ?4
                       AND conversation_seq BETWEEN ?5 AND ?6
                       AND (expires_at IS NULL OR expires_at > ?7)
                     ORDER BY seq_bucket, conversation_seq",
                )?;
                let rows = stmt.query_map(
                    params![
                        tenant,
                        cid,
                        bucket(lo),
                        bucket(hi),
                        lo as i64,
                        hi as i64,
                        now_ms
                    ],
                    |r| {
                        Ok(IndexEntry {
                            tenant: tenant.clone(),
                            conversation_id: cid.clone(),
                            conversation_seq: r.get::<_, i64>(0)? as u64,
                            message_id: r.get(1)?,
                            expires_at_ms: r.get(2)?,
                        })
                    },
                )?;
                Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
            })
            .await
    }

    async fn records(
        &self,
        tenant: &str,
        conversation_id: &str,
        seqs: &[u64],
    ) -> Result<Vec<MessageRecord>> {
        let (tenant, cid, seqs) = (tenant.to_owned(), conversation_id.to_owned(), seqs.to_vec());
        self.reads
            .read(move |conn| {
                let mut stmt = conn.prepare_cached(&format!(
                    "SELECT {RECORD_COLUMNS} FROM message_record
                     WHERE tenant = ?1 AND conversation_id = ?2 AND seq_bucket = ?3
                       AND conversation_seq = ?4"
                ))?;
                let mut out = Vec::with_capacity(seqs.len());
                for s in seqs {
                    let mut rows =
                        stmt.query_map(params![tenant, cid, bucket(s), s as i64], record_from_row)?;
                    if let Some(r) = rows.next() {
                        out.push(r?);
                    }
                }
                Ok(out)
            })
            .await
    }

    async fn earliest_seq(
        &self,
        tenant: &str,
        conversation_id: &str,
        now_ms: i64,
    ) -> Result<Option<u64>> {
        let (tenant, cid) = (tenant.to_owned(), conversation_id.to_owned());
        self.reads
            .read(move |conn| {
                let v: Option<i64> = conn
                    .prepare_cached(
                        "SELECT min(conversation_seq) FROM history_index
                         WHERE tenant = ?1 AND conversation_id = ?2
                           AND (expires_at IS NULL OR expires_at > ?3)",
                    )?
                    .query_row(params![tenant, cid, now_ms], |r| r.get(0))?;
                Ok(v.map(|s| s as u64))
            })
            .await
    }

    async fn purge_expired(&self, now_ms: i64, batch: usize) -> Result<usize> {
        self.writer
            .write(move |conn| {
                // Index entries first, then records without an index entry: never an index
                // entry without its record.
                conn.execute(
                    "DELETE FROM history_index
                     WHERE (tenant, conversation_id, seq_bucket, conversation_seq) IN (
                         SELECT tenant, conversation_id, seq_bucket, conversation_seq
                         FROM history_index
                         WHERE expires_at IS NOT NULL AND expires_at <= ?1 LIMIT ?2)",
                    params![now_ms, batch as i64],
                )?;
                Ok(conn.execute(
                    "DELETE FROM message_record WHERE rowid IN (
                         SELECT r.rowid FROM message_record r
                         WHERE r.expires_at IS NOT NULL AND r.expires_at <= ?1
                           AND NOT EXISTS (SELECT 1 FROM history_index i
                               WHERE i.tenant = r.tenant AND i.conversation_id = r.conversation_id
                                 AND i.seq_bucket = r.seq_bucket
                                 AND i.conversation_seq = r.conversation_seq)
                         LIMIT ?2)",
                    params![now_ms, batch as i64],
                )?)
            })
            .await
    }
}
