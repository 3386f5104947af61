//! The archive of the embedded default (`archive.db`): `message_record`, appended in time
//! order and unique by its time-ordered `message_id` (UUIDv7), and `history_index`, keyed
//! `(tenant, conversation_id, seq_bucket, conversation_seq)`. Both writes are idempotent
//! (`INSERT OR IGNORE`: a replayed batch, or `sync-archive`'s second append, changes nothing);
//! an index entry reaches its record through its `message_id`. An expired ephemeral message
//! loses its record to [`Archive::purge_expired`] and keeps its entry, as a tombstone: a seq of
//! the archive without an entry is a lost one ([`crate::reads::archive_range`]).
//!
//! A batch's index entries are written in key order, in the same transaction as the
//! partition's `archived_through`, so a reader that sees the mark sees every entry below it.
//! Each entry of a batch spread over many conversations dirties a randomly placed leaf of
//! `history_index`; measured against writing the entries first to a log in time order and
//! merging them in large sorted steps, that costs nothing the commit path sees (tiered p99
//! 0.83–0.85× of the log's, five interleaved runs: `docs/benchmarks/README.md`), so the
//! simpler layout stays.
//!
//! In `tiered` mode the archive's writer is a background thread (see
//! [`tidemark_core::sqlite::Priority`]): its batches yield the CPU to the commit path.
//!
//! The tables, and how a file of an earlier layout is brought to them: [`super::migrations`].

use std::path::Path;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};
use tidemark_core::schema::migrate_sqlite;
use tidemark_core::sqlite::{GroupWriter, Priority, ReadPool, open_rw};

use super::migrations;
use super::{RECORD_COLUMNS, record_from_row};
use crate::error::Result;
use crate::model::{IndexEntry, MessageRecord, seq_bucket};
use crate::ports::{ARCHIVED_THROUGH, Archive, partition_key};

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
        Self::open_unnamed(path, priority).map_err(|e| super::opening(path, e))
    }

    fn open_unnamed(path: &Path, priority: Priority) -> Result<Self> {
        let conn = open_rw(path)?;
        migrate_sqlite(&conn, path, &migrations::ARCHIVE)?;
        let writer = GroupWriter::start_with_priority("chat-archive", conn, 64, priority);
        let reads = ReadPool::open(path, 8)?;
        Ok(Self { writer, reads })
    }
}

/// The seq bucket of the keyed tables (`history_index`, `message_record`), as SQLite stores it.
fn bucket(seq: u64) -> i64 {
    seq_bucket(seq) as i64
}

/// Inserts `entries` into `history_index` in key order (neighbouring entries of one
/// conversation then share their leaf's write); an entry already there is kept.
fn insert_index(conn: &Connection, entries: &mut [IndexEntry]) -> Result<()> {
    entries.sort_unstable_by(|a, b| {
        (&a.tenant, &a.conversation_id, a.conversation_seq).cmp(&(
            &b.tenant,
            &b.conversation_id,
            b.conversation_seq,
        ))
    });
    let mut stmt = conn.prepare_cached(
        "INSERT OR IGNORE INTO history_index (tenant, conversation_id, seq_bucket,
             conversation_seq, message_id, expires_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    for e in entries.iter() {
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

    async fn put_index(&self, entries: &[IndexEntry], through: Option<(u32, u64)>) -> Result<()> {
        let mut entries = entries.to_vec();
        self.writer
            .write(move |conn| {
                insert_index(conn, &mut entries)?;
                if let Some((partition, through)) = through {
                    conn.prepare_cached(
                        "INSERT INTO archive_meta (key, value) VALUES (?1, ?2)
                         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    )?
                    .execute(params![
                        partition_key(ARCHIVED_THROUGH, partition),
                        through as i64
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
    ) -> Result<Vec<IndexEntry>> {
        let (tenant, cid) = (tenant.to_owned(), conversation_id.to_owned());
        self.reads
            .read(move |conn| {
                let mut stmt = conn.prepare_cached(
                    "SELECT conversation_seq, message_id, expires_at FROM history_index
                     WHERE tenant = ?1 AND conversation_id = ?2 AND seq_bucket BETWEEN ?3 AND ?4
                       AND conversation_seq BETWEEN ?5 AND ?6
                     ORDER BY seq_bucket, conversation_seq",
                )?;
                let rows = stmt.query_map(
                    params![tenant, cid, bucket(lo), bucket(hi), lo as i64, hi as i64],
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
                Ok(rows.collect::<rusqlite::Result<_>>()?)
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
                let mut by_key = conn.prepare_cached(&format!(
                    "SELECT {RECORD_COLUMNS} FROM message_record WHERE message_id = (
                         SELECT message_id FROM history_index
                         WHERE tenant = ?1 AND conversation_id = ?2 AND seq_bucket = ?3
                           AND conversation_seq = ?4)"
                ))?;
                let mut out = Vec::with_capacity(seqs.len());
                for s in seqs {
                    let mut rows = by_key
                        .query_map(params![tenant, cid, bucket(s), s as i64], record_from_row)?;
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

    async fn archived_through(&self, partition: u32) -> Result<Option<u64>> {
        let key = partition_key(ARCHIVED_THROUGH, partition);
        self.reads
            .read(move |conn| {
                Ok(conn
                    .query_row(
                        "SELECT value FROM archive_meta WHERE key = ?1",
                        [key],
                        |r| r.get::<_, i64>(0),
                    )
                    .optional()?
                    .map(|v| v as u64))
            })
            .await
    }

    async fn identity(&self) -> Result<i64> {
        self.reads
            .read(|conn| {
                Ok(conn.query_row(
                    "SELECT value FROM archive_meta WHERE key = 'identity'",
                    [],
                    |r| r.get(0),
                )?)
            })
            .await
    }

    async fn purge_expired(&self, now_ms: i64, batch: usize) -> Result<usize> {
        // Records only: the index entries stay as tombstones (see `Archive::index_range`).
        self.writer
            .write(move |conn| -> Result<usize> {
                Ok(conn
                    .prepare_cached(
                        "DELETE FROM message_record WHERE rowid IN (
                             SELECT rowid FROM message_record
                             WHERE expires_at IS NOT NULL AND expires_at <= ?1 LIMIT ?2)",
                    )?
                    .execute(params![now_ms, batch as i64])?)
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(cid: &str, seq: u64, class: crate::model::MessageClass) -> MessageRecord {
        crate::model::SendCommand {
            tenant: "t".into(),
            conversation_id: cid.into(),
            sender: "u1".into(),
            client_msg_id: format!("k-{cid}-{seq}"),
            body: format!("body {seq}"),
            class,
        }
        .into_record(seq, T0)
    }

    const T0: i64 = 1_800_000_000_000;

    /// The unexpired indexed seqs at `now_ms`, and how many of their records there are.
    async fn archive_seqs(archive: &SqliteArchive, cid: &str, now_ms: i64) -> (Vec<u64>, usize) {
        let index = archive.index_range("t", cid, 1, 1_000).await.unwrap();
        let seqs: Vec<u64> = index
            .iter()
            .filter(|e| !e.is_expired(now_ms))
            .map(|e| e.conversation_seq)
            .collect();
        let records = archive.records("t", cid, &seqs).await.unwrap();
        (seqs, records.len())
    }

    fn index_rows(path: &Path) -> i64 {
        rusqlite::Connection::open(path)
            .unwrap()
            .query_row("SELECT count(*) FROM history_index", [], |r| r.get(0))
            .unwrap()
    }

    #[tokio::test]
    async fn entries_are_read_the_same_before_and_after_a_reopen_and_a_replay_is_ignored() {
        use crate::model::MessageClass::Standard;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.db");
        let archive = SqliteArchive::open(&path).unwrap();
        // Out of key order and over two conversations, as an archive batch comes.
        let recs = vec![
            record("d", 1, Standard),
            record("c", 2, Standard),
            record("c", 1, Standard),
            record("c", 3, Standard),
        ];
        archive.put_records(&recs).await.unwrap();
        let index: Vec<IndexEntry> = recs.iter().map(MessageRecord::index_entry).collect();
        archive.put_index(&index, Some((0, 4))).await.unwrap();
        assert_eq!(index_rows(&path), 4);
        assert_eq!(archive_seqs(&archive, "c", T0).await, (vec![1, 2, 3], 3));
        assert_eq!(archive_seqs(&archive, "d", T0).await, (vec![1], 1));
        assert_eq!(archive.earliest_seq("t", "c", T0).await.unwrap(), Some(1));
        assert_eq!(archive.archived_through(0).await.unwrap(), Some(4));
        assert_eq!(archive.archived_through(1).await.unwrap(), None);

        drop(archive);
        let archive = SqliteArchive::open(&path).unwrap();
        assert_eq!(archive_seqs(&archive, "c", T0).await, (vec![1, 2, 3], 3));

        // A replayed batch changes nothing; the mark goes on.
        archive.put_records(&recs).await.unwrap();
        archive.put_index(&index, Some((0, 5))).await.unwrap();
        assert_eq!(index_rows(&path), 4);
        assert_eq!(archive_seqs(&archive, "c", T0).await, (vec![1, 2, 3], 3));
        assert_eq!(archive.archived_through(0).await.unwrap(), Some(5));
    }

    #[tokio::test]
    async fn a_purge_takes_an_expired_record_and_leaves_its_entry_as_a_tombstone() {
        use crate::model::MessageClass::{Ephemeral24h, Standard};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.db");
        let archive = SqliteArchive::open(&path).unwrap();
        let recs = vec![record("c", 1, Standard), record("c", 2, Ephemeral24h)];
        archive.put_records(&recs).await.unwrap();
        let index: Vec<IndexEntry> = recs.iter().map(MessageRecord::index_entry).collect();
        archive.put_index(&index, None).await.unwrap();
        let expiry = recs[1].expires_at_ms.unwrap();
        assert_eq!(
            archive_seqs(&archive, "c", expiry - 1).await,
            (vec![1, 2], 2)
        );
        assert_eq!(archive_seqs(&archive, "c", expiry).await, (vec![1], 1));
        assert_eq!(
            archive.earliest_seq("t", "c", expiry).await.unwrap(),
            Some(1)
        );
        assert_eq!(archive.purge_expired(expiry - 1, 100).await.unwrap(), 0);
        assert_eq!(archive.purge_expired(expiry, 100).await.unwrap(), 1);
        assert!(archive.records("t", "c", &[2]).await.unwrap().is_empty());
        // Both entries stay: seq 2's is a tombstone.
        let index = archive.index_range("t", "c", 1, 2).await.unwrap();
        assert_eq!((index.len(), index[1].expires_at_ms), (2, Some(expiry)));
    }

    /// An `archive.db` made before versions were recorded (records unique by their key) is
    /// adopted at open, brought to the current version, keeps what it holds, and takes new
    /// entries.
    #[tokio::test]
    async fn an_unversioned_file_is_adopted_and_goes_on() {
        use crate::model::MessageClass::Standard;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.db");
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE message_record (
                     tenant TEXT NOT NULL, conversation_id TEXT NOT NULL,
                     seq_bucket INTEGER NOT NULL, conversation_seq INTEGER NOT NULL,
                     message_id TEXT NOT NULL, sender TEXT NOT NULL,
                     client_msg_id TEXT NOT NULL, body TEXT NOT NULL, class INTEGER NOT NULL,
                     committed_at INTEGER NOT NULL, expires_at INTEGER,
                     UNIQUE (tenant, conversation_id, seq_bucket, conversation_seq));
                 CREATE TABLE history_index (
                     tenant TEXT NOT NULL, conversation_id TEXT NOT NULL,
                     seq_bucket INTEGER NOT NULL, conversation_seq INTEGER NOT NULL,
                     message_id TEXT NOT NULL, expires_at INTEGER,
                     PRIMARY KEY (tenant, conversation_id, seq_bucket, conversation_seq)
                 ) WITHOUT ROWID;
                 INSERT INTO message_record VALUES
                     ('t', 'c', 0, 1, 'old-1', 'u1', 'k1', 'old body', 0, 5, NULL);
                 INSERT INTO history_index VALUES ('t', 'c', 0, 1, 'old-1', NULL);",
            )
            .unwrap();
        }
        let archive = SqliteArchive::open(&path).unwrap();
        let recs = vec![record("c", 2, Standard), record("c", 3, Standard)];
        archive.put_records(&recs).await.unwrap();
        let index: Vec<IndexEntry> = recs.iter().map(MessageRecord::index_entry).collect();
        archive.put_index(&index, None).await.unwrap();
        assert_eq!(archive_seqs(&archive, "c", T0).await, (vec![1, 2, 3], 3));
        assert_eq!(
            archive.records("t", "c", &[1]).await.unwrap()[0].body,
            "old body"
        );
        assert_eq!(index_rows(&path), 3);
        let version: i64 = rusqlite::Connection::open(&path)
            .unwrap()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, 2);
    }
}
