//! The archive of the embedded default (`archive.db`): `message_record`, appended in time
//! order and unique by its time-ordered `message_id` (UUIDv7), and the history index keyed
//! `(tenant, conversation_id, seq_bucket, conversation_seq)`, written first in time order to
//! `history_index_log` and merged into `history_index` in large sorted steps
//! ([`super::index_log`]). Both writes are idempotent (`INSERT OR IGNORE`); an index entry
//! reaches its record through its `message_id`. An expired ephemeral message loses its record
//! to [`Archive::purge_expired`] and keeps its entry, as a tombstone: a seq of the archive
//! without an entry is a lost one ([`crate::reads::archive_range`]).
//!
//! In `tiered` mode the archive's writer is a background thread (see
//! [`tidemark_core::sqlite::Priority`]): its batches yield the CPU to the commit path.
//!
//! The tables, and how a file of an earlier layout is brought to them: [`super::migrations`].
//!
//! In `sync-archive` (the commit path writes the archive), the SEND whose entry makes
//! the log reach [`MERGE_ENTRIES`] waits for the merge, and the SENDs behind it for the
//! archive's writer: a latency spike every 65,536 sends, in the mode kept only to measure
//! against.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};
use tidemark_core::schema::migrate_sqlite;
use tidemark_core::sqlite::{GroupWriter, Priority, ReadPool, open_rw};

use super::index_log::{self, MERGE_CHUNK, MERGE_ENTRIES, PendingIndex, bucket};
use super::migrations;
use super::{RECORD_COLUMNS, record_from_row};
use crate::error::Result;
use crate::model::{IndexEntry, MessageRecord};
use crate::ports::{ARCHIVED_THROUGH, Archive, partition_key};

/// The embedded archive (see the module docs).
#[derive(Debug)]
pub struct SqliteArchive {
    writer: GroupWriter,
    reads: ReadPool,
    /// The writer is a background one (`tiered`), not one a SEND waits on.
    background: bool,
    /// The entries of `history_index_log`, for readers ([`super::index_log`]).
    pending: Arc<Mutex<PendingIndex>>,
    /// Pending entries that make the next `put_index` merge the log.
    merge_entries: usize,
    /// A merge is queued or running (`sync-archive` has concurrent `put_index` calls).
    merging: AtomicBool,
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
        let pending = Arc::new(Mutex::new(PendingIndex::load(&conn)?));
        let writer = GroupWriter::start_with_priority("chat-archive", conn, 64, priority);
        let reads = ReadPool::open(path, 8)?;
        Ok(Self {
            writer,
            reads,
            background: priority == Priority::Background,
            pending,
            merge_entries: MERGE_ENTRIES,
            merging: AtomicBool::new(false),
        })
    }

    /// Merges the index log once it holds `entries` pending entries (default
    /// [`MERGE_ENTRIES`]; at least 1). Tests use a few, to merge often. With the `testing`
    /// feature only.
    #[cfg(feature = "testing")]
    #[must_use]
    pub fn with_merge_entries(mut self, entries: usize) -> Self {
        self.merge_entries = entries.max(1);
        self
    }

    fn pending(&self) -> MutexGuard<'_, PendingIndex> {
        lock(&self.pending)
    }

    /// Merges the index log into `history_index` (see [`super::index_log`]: a read of the log
    /// in key order, chunks of [`MERGE_CHUNK`] entries, then the log's delete, each a writer
    /// job) and then drops the merged entries from memory; returns the last log row merged.
    /// Logs each merge at `info`: its entries, its wall time and that of the steps around its
    /// chunks (the sorted read, the log's delete, freeing the merged entries), all in ms, to
    /// lay beside latency (`bench chat --server-logs`).
    pub async fn merge_index_log(&self) -> Result<Option<i64>> {
        let started = Instant::now();
        // Before the read: every entry in memory now has its row among those it reads.
        self.pending().begin_merge();
        let Some((last, sorted)) = self.writer.write(index_log::read_sorted).await? else {
            return Ok(None);
        };
        let entries = sorted.len();
        let read_ms = started.elapsed().as_millis() as u64;
        let sorted = Arc::new(sorted);
        for start in (0..sorted.len()).step_by(MERGE_CHUNK) {
            let sorted = Arc::clone(&sorted);
            self.writer
                .write(move |conn| {
                    let end = (start + MERGE_CHUNK).min(sorted.len());
                    index_log::insert_merged(conn, &sorted[start..end])
                })
                .await?;
        }
        let inserted = Instant::now();
        self.writer
            .write(move |conn| index_log::delete_merged(conn, last))
            .await?;
        let deleted = Instant::now();
        // After the delete's commit (an entry leaves memory only once its merge committed,
        // module docs), the merge's generation leaves the index at once, and is freed (see
        // `Merged::free`) on the archive's writer when it is a background one (`tiered`), else
        // on a blocking thread, off the writer the SENDs wait on (`sync-archive`).
        let merged = self.pending().merged(last);
        let dropped = merged.len();
        let sorted = Arc::try_unwrap(sorted).unwrap_or_default();
        if self.background {
            let free = move |_: &Connection| -> Result<()> {
                merged.free(sorted);
                Ok(())
            };
            if let Err(error) = self.writer.write_unguarded(free).await {
                // The entries were freed (by the job, or where it was dropped); the error is
                // its group's, e.g. a neighbouring job's failed commit.
                tracing::warn!(%error, "the archive's writer reported an error after the merge's cleanup");
            }
        } else {
            let free = move || merged.free(sorted);
            if let Err(error) = tokio::task::spawn_blocking(free).await {
                tracing::warn!(%error, "freeing the merged index entries failed");
            }
        }
        tracing::info!(
            entries,
            dropped,
            ms = started.elapsed().as_millis() as u64,
            read_ms,
            delete_ms = (deleted - inserted).as_millis() as u64,
            free_ms = deleted.elapsed().as_millis() as u64,
            "merged the archive's index log"
        );
        Ok(Some(last))
    }
}

fn lock(pending: &Mutex<PendingIndex>) -> MutexGuard<'_, PendingIndex> {
    // The index is changed only after commits, in steps that cannot panic halfway.
    pending.lock().unwrap_or_else(|e| e.into_inner())
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
        let owned = entries.to_vec();
        let ids = self
            .writer
            .write(move |conn| {
                let ids = index_log::append(conn, &owned)?;
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
                Ok::<_, crate::error::ChatError>(ids)
            })
            .await?;
        // A call dropped while its job runs (a `sync-archive` SEND whose client went away)
        // leaves its entries in the log but not in memory until the next open; the archiver,
        // which every watermark waits for, finishes its calls, so a trimmed message's entry is
        // always in memory or merged.
        let due = {
            let mut pending = self.pending();
            pending.insert(entries, &ids);
            pending.len() >= self.merge_entries
        };
        if due && !self.merging.swap(true, Ordering::AcqRel) {
            // Cleared however this future ends: a SEND's future in `sync-archive` is dropped
            // when its client goes away.
            let _merging = ClearOnDrop(&self.merging);
            // The entries are durable and readable already: a failed merge is retried by the
            // next batch, never reported as this one's failure.
            if let Err(error) = self.merge_index_log().await {
                tracing::warn!(%error, "merging the archive's index log failed; retried later");
            }
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
        // Pending entries first, then the snapshot (see the `index_log` module docs).
        let pending = self.pending().range(tenant, conversation_id, lo, hi);
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
                let mut by_seq = BTreeMap::new();
                for entry in rows.chain(pending.into_iter().map(Ok)) {
                    let entry = entry?;
                    by_seq.insert(entry.conversation_seq, entry);
                }
                Ok(by_seq.into_values().collect())
            })
            .await
    }

    async fn records(
        &self,
        tenant: &str,
        conversation_id: &str,
        seqs: &[u64],
    ) -> Result<Vec<MessageRecord>> {
        let pending = self.pending().message_ids(tenant, conversation_id, seqs);
        let (tenant, cid, seqs) = (tenant.to_owned(), conversation_id.to_owned(), seqs.to_vec());
        self.reads
            .read(move |conn| {
                let mut by_id = conn.prepare_cached(&format!(
                    "SELECT {RECORD_COLUMNS} FROM message_record WHERE message_id = ?1"
                ))?;
                let mut by_key = conn.prepare_cached(&format!(
                    "SELECT {RECORD_COLUMNS} FROM message_record WHERE message_id = (
                         SELECT message_id FROM history_index
                         WHERE tenant = ?1 AND conversation_id = ?2 AND seq_bucket = ?3
                           AND conversation_seq = ?4)"
                ))?;
                let mut out = Vec::with_capacity(seqs.len());
                for s in seqs {
                    let mut rows = match pending.get(&s) {
                        Some(id) => by_id.query_map([id], record_from_row)?,
                        None => by_key.query_map(
                            params![tenant, cid, bucket(s), s as i64],
                            record_from_row,
                        )?,
                    };
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
        let pending = self.pending().earliest(tenant, conversation_id, now_ms);
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
                Ok(v.map(|s| s as u64).into_iter().chain(pending).min())
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

/// Clears its flag when dropped.
struct ClearOnDrop<'a>(&'a AtomicBool);

impl Drop for ClearOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
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

    fn log_rows(path: &Path) -> (i64, i64) {
        let conn = rusqlite::Connection::open(path).unwrap();
        let count = |t: &str| -> i64 {
            conn.query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))
                .unwrap()
        };
        (count("history_index_log"), count("history_index"))
    }

    #[tokio::test]
    async fn entries_are_read_the_same_pending_merged_and_after_a_reopen() {
        use crate::model::MessageClass::Standard;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.db");
        let archive = SqliteArchive::open(&path).unwrap().with_merge_entries(4);
        let recs: Vec<MessageRecord> = (1..=3).map(|s| record("c", s, Standard)).collect();
        archive.put_records(&recs).await.unwrap();
        let index: Vec<IndexEntry> = recs.iter().map(MessageRecord::index_entry).collect();
        archive.put_index(&index, None).await.unwrap();
        // Three pending entries, below the merge size: all in the log, readable from memory.
        assert_eq!(log_rows(&path), (3, 0));
        assert_eq!(archive_seqs(&archive, "c", T0).await, (vec![1, 2, 3], 3));
        assert_eq!(archive.earliest_seq("t", "c", T0).await.unwrap(), Some(1));

        // A reopen reads the log back.
        drop(archive);
        let archive = SqliteArchive::open(&path).unwrap().with_merge_entries(4);
        assert_eq!(archive_seqs(&archive, "c", T0).await, (vec![1, 2, 3], 3));

        // The fourth entry makes the batch merge: the log is empty, the keyed index holds all.
        let more = vec![record("c", 4, Standard), record("d", 1, Standard)];
        archive.put_records(&more).await.unwrap();
        let entries: Vec<IndexEntry> = more.iter().map(MessageRecord::index_entry).collect();
        archive.put_index(&entries, None).await.unwrap();
        assert_eq!(log_rows(&path), (0, 5));
        assert_eq!(archive.pending().len(), 0);
        assert_eq!(archive_seqs(&archive, "c", T0).await, (vec![1, 2, 3, 4], 4));
        assert_eq!(archive_seqs(&archive, "d", T0).await, (vec![1], 1));
        assert_eq!(archive.earliest_seq("t", "c", T0).await.unwrap(), Some(1));

        // A replay of merged entries is pending again and read once.
        archive.put_records(&recs).await.unwrap();
        archive.put_index(&index, None).await.unwrap();
        assert_eq!(log_rows(&path), (3, 5));
        assert_eq!(archive_seqs(&archive, "c", T0).await, (vec![1, 2, 3, 4], 4));
        assert_eq!(archive.merge_index_log().await.unwrap(), Some(8));
        assert_eq!(log_rows(&path), (0, 5));
        assert_eq!(archive.merge_index_log().await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_purge_takes_an_expired_record_and_leaves_its_pending_entry_as_a_tombstone() {
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
        assert_eq!(archive.purge_expired(expiry - 1, 100).await.unwrap(), 0);
        assert_eq!(archive.purge_expired(expiry, 100).await.unwrap(), 1);
        assert!(archive.records("t", "c", &[2]).await.unwrap().is_empty());
        // Both entries stay, pending and after a merge: seq 2's is a tombstone.
        assert_eq!((log_rows(&path), archive.pending().len()), ((2, 0), 2));
        let tombstone = |index: Vec<IndexEntry>| (index.len(), index[1].expires_at_ms);
        let index = archive.index_range("t", "c", 1, 2).await.unwrap();
        assert_eq!(tombstone(index), (2, Some(expiry)));
        archive.merge_index_log().await.unwrap();
        assert_eq!(log_rows(&path), (0, 2));
        let index = archive.index_range("t", "c", 1, 2).await.unwrap();
        assert_eq!(tombstone(index), (2, Some(expiry)));
    }

    /// An `archive.db` of the layout before the index log (records unique by their key, no
    /// log, no version) is adopted at open, keeps what it holds, and takes new entries.
    #[tokio::test]
    async fn a_file_of_the_layout_before_the_index_log_is_adopted_and_goes_on() {
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
        let archive = SqliteArchive::open(&path).unwrap().with_merge_entries(2);
        let recs = vec![record("c", 2, Standard), record("c", 3, Standard)];
        archive.put_records(&recs).await.unwrap();
        let index: Vec<IndexEntry> = recs.iter().map(MessageRecord::index_entry).collect();
        archive.put_index(&index, None).await.unwrap();
        assert_eq!(archive_seqs(&archive, "c", T0).await, (vec![1, 2, 3], 3));
        assert_eq!(
            archive.records("t", "c", &[1]).await.unwrap()[0].body,
            "old body"
        );
        assert_eq!(log_rows(&path), (0, 3));
        let version: i64 = rusqlite::Connection::open(&path)
            .unwrap()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, 1);
    }
}
