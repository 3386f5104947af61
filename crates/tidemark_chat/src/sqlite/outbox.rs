//! The outbox of the embedded default, in `hot.db` beside the hot store (DESIGN.md part A
//! "Outbox"): offset = rowid − 1.
//!
//! A fused commit ([`crate::ports::FusedCommit`]) stores only the key of its `message` row,
//! written in the same transaction and trimmed only behind the watermark, i.e. after the
//! archiver consumed the entry; records appended through [`crate::ports::Outbox::append`] carry
//! the full JSON envelope.
//!
//! Offsets are never reused, also after retention dropped the whole log: `high` is the
//! newest rowid, or while the log is empty the `outbox_high` entry of `meta` that [`truncate`]
//! leaves when it drops the newest row, and each append takes `high + 1` as its rowid
//! ([`HIGH`]). The table has no `AUTOINCREMENT`, which would keep `high` in `sqlite_sequence`
//! instead: one more page written by every commit (at 5,000 sends/s `tiered`'s hot writer
//! wrote about 40 MB/s more to its WAL than `hot-only`'s; with `AUTOINCREMENT` the outbox's
//! last leaf and `sqlite_sequence` are two pages per group commit, and the WAL took 107–114
//! MB/s against 93–97 without). A file whose outbox has the `AUTOINCREMENT` table gets this
//! one when it is adopted, its `high` carried to `meta` ([`super::migrations`]).

use std::sync::Arc;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};
use tidemark_core::clock::SharedClock;

use super::SqliteHot;
use super::hot::{meta_get, meta_set};
use super::{RECORD_COLUMNS, record_from_row_at};
use crate::error::{ChatError, Result};
use crate::model::MessageRecord;
use crate::ports::Outbox;
use tidemark_core::store::StoreError;

/// The `meta` key of the outbox's `high` while the log is empty, as a literal: [`HIGH_KEY`]
/// for bound parameters, and spliced into [`HIGH`]'s SQL by `concat!` (which takes literals,
/// not consts).
macro_rules! high_key {
    () => {
        "outbox_high"
    };
}

/// The `meta` key of the outbox's `high` while the log is empty.
pub(super) const HIGH_KEY: &str = high_key!();

/// `high`: the newest rowid, or the one [`truncate`] left in `meta` with the log empty
/// (the larger of the two, which is the newest rowid whenever there is one: retention drops
/// only a prefix). The next append takes `HIGH + 1`.
const HIGH: &str = concat!(
    "max(coalesce((SELECT max(rowid) FROM outbox), 0),
     coalesce((SELECT value FROM meta WHERE key = '",
    high_key!(),
    "'), 0))"
);

/// [`crate::ports::Outbox::append`] on `conn`: full envelopes, all appended at `now_ms`.
pub(super) fn append(conn: &Connection, records: &[MessageRecord], now_ms: i64) -> Result<()> {
    let mut stmt = conn.prepare_cached(&format!(
        "INSERT INTO outbox (rowid, appended_at, envelope) VALUES ({HIGH} + 1, ?1, ?2)"
    ))?;
    for r in records {
        let envelope = serde_json::to_vec(r)
            .map_err(|e| StoreError::rejected("sqlite", e).with_context("encoding envelope"))?;
        stmt.execute(params![now_ms, envelope])?;
    }
    Ok(())
}

/// The fused commit's outbox entry: a reference to the `message` row of the same transaction.
pub(super) fn append_ref(conn: &Connection, r: &MessageRecord, now_ms: i64) -> Result<()> {
    conn.prepare_cached(&format!(
        "INSERT INTO outbox (rowid, appended_at, tenant, conversation_id, conversation_seq)
         VALUES ({HIGH} + 1, ?1, ?2, ?3, ?4)"
    ))?
    .execute(params![
        now_ms,
        r.tenant,
        r.conversation_id,
        r.conversation_seq as i64
    ])?;
    Ok(())
}

/// [`crate::ports::Outbox::offsets`] on `conn`: `(low, high)`, read in one statement.
pub(super) fn offsets(conn: &Connection) -> Result<(u64, u64)> {
    let (first, high): (Option<i64>, i64) = conn
        .prepare_cached(&format!("SELECT min(rowid), {HIGH} FROM outbox"))?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let low = first.map_or(high, |l| l - 1);
    Ok((low as u64, high as u64))
}

/// [`crate::ports::Outbox::truncate`] on `conn`: reads at most `max + 1` rows, whatever the
/// size of the log.
///
/// The prefix is found by rowid from the log's first row (offset = rowid − 1): up to `below`,
/// at most `max` rows, and before the first row appended at or after `older_than_ms`. A
/// filter on `appended_at` over the whole range instead (there is no index on it) would read
/// every row of the log on each trimmer pass.
pub(super) fn truncate(
    conn: &Connection,
    below: u64,
    older_than_ms: i64,
    max: usize,
) -> Result<usize> {
    // Two statements: SQLite turns a lone min() or max() into one seek, but scans the table
    // for the pair in one query.
    let first: Option<i64> = conn.query_row("SELECT min(rowid) FROM outbox", [], |r| r.get(0))?;
    let Some(first) = first else {
        return Ok(0);
    };
    // Rowids are offsets + 1: offsets below `below` are rowids up to `below`.
    let max = i64::try_from(max).unwrap_or(i64::MAX);
    let last = (below as i64).min(first.saturating_add(max) - 1);
    if last < first {
        return Ok(0);
    }
    let young: Option<i64> = conn
        .prepare_cached(
            "SELECT rowid FROM outbox WHERE rowid BETWEEN ?1 AND ?2 AND appended_at >= ?3
             ORDER BY rowid LIMIT 1",
        )?
        .query_row(params![first, last, older_than_ms], |r| r.get(0))
        .optional()?;
    let last = young.map_or(last, |y| y - 1);
    if last < first {
        return Ok(0);
    }
    let newest: i64 = conn
        .prepare_cached("SELECT max(rowid) FROM outbox")?
        .query_row([], |r| r.get(0))?;
    if last >= newest {
        // The log becomes empty: keep its `high` for the next append and for `offsets`.
        meta_set(conn, HIGH_KEY, newest)?;
    }
    Ok(conn
        .prepare_cached("DELETE FROM outbox WHERE rowid BETWEEN ?1 AND ?2")?
        .execute(params![first, last])?)
}

/// [`crate::ports::Outbox::fetch`] on `conn`: up to `max` records from offset `from` on.
pub(super) fn fetch(conn: &Connection, from: u64, max: usize) -> Result<Vec<(u64, MessageRecord)>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT o.rowid, o.envelope, m.tenant IS NOT NULL,
             {}
         FROM outbox o LEFT JOIN message m ON m.tenant = o.tenant
             AND m.conversation_id = o.conversation_id
             AND m.conversation_seq = o.conversation_seq
         WHERE o.rowid > ?1 ORDER BY o.rowid LIMIT ?2",
        RECORD_COLUMNS
            .split(", ")
            .map(|c| format!("m.{}", c.trim()))
            .collect::<Vec<_>>()
            .join(", ")
    ))?;
    let mut rows = stmt.query(params![from as i64, max as i64])?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let offset = row.get::<_, i64>(0)? - 1;
        let envelope: Option<Vec<u8>> = row.get(1)?;
        let record = match envelope {
            Some(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| ChatError::Corrupt(format!("outbox offset {offset}: {e}")))?,
            None if row.get::<_, bool>(2)? => record_from_row_at(row, 3)?,
            None => {
                return Err(ChatError::Corrupt(format!(
                    "outbox offset {offset} refers to a message that is no longer in the hot tier"
                )));
            }
        };
        out.push((offset as u64, record));
    }
    Ok(out)
}

/// The [`Outbox`] port of the embedded store: these functions, each on the writer (appends,
/// positions, the watermark snapshot, truncation) or a read connection.
/// The embedded outbox has partition 0 only.
fn only_partition(partition: u32) -> Result<()> {
    if partition == 0 {
        Ok(())
    } else {
        Err(ChatError::Invalid(format!(
            "the embedded outbox has one partition (0), not {partition}"
        )))
    }
}

#[async_trait]
impl Outbox for SqliteHot {
    /// One: the log is a table of one file, written in commit order by its one writer.
    fn partitions(&self) -> u32 {
        1
    }

    /// The one partition: one process owns the file (the data directory's lock).
    async fn owned_partitions(&self) -> Result<Vec<u32>> {
        Ok(vec![0])
    }

    async fn append(&self, records: &[MessageRecord]) -> Result<()> {
        let records = records.to_vec();
        let now = records.first().map_or(0, |r| r.committed_at_ms);
        self.writer
            .write(move |conn| append(conn, &records, now))
            .await
    }

    async fn offsets(&self, partition: u32) -> Result<(u64, u64)> {
        only_partition(partition)?;
        self.reads.read(offsets).await
    }

    async fn watermark_snapshot(&self, partition: u32, clock: &SharedClock) -> Result<(i64, u64)> {
        only_partition(partition)?;
        // Runs on the writer, serialised with commits: every commit job before it is visible
        // to it (same connection), every commit job after it reads a later clock.
        let clock = Arc::clone(clock);
        self.writer
            .write(move |conn| {
                let t0 = clock.now_ms();
                let (_, h0) = offsets(conn)?;
                Ok((t0, h0))
            })
            .await
    }

    async fn fetch(
        &self,
        partition: u32,
        from: u64,
        max: usize,
    ) -> Result<Vec<(u64, MessageRecord)>> {
        only_partition(partition)?;
        // Background priority: the archiver may lag, the SENDs sharing the cores may not.
        self.outbox_reads
            .read(move |conn| fetch(conn, from, max))
            .await
    }

    async fn position(&self, consumer: &str, partition: u32) -> Result<Option<u64>> {
        only_partition(partition)?;
        let key = format!("position:{consumer}");
        self.reads
            .read(move |conn| Ok(meta_get(conn, &key)?.map(|p| p as u64)))
            .await
    }

    async fn store_position(&self, consumer: &str, partition: u32, position: u64) -> Result<()> {
        only_partition(partition)?;
        let key = format!("position:{consumer}");
        self.writer
            .write(move |conn| meta_set(conn, &key, position as i64))
            .await
    }

    async fn truncate(
        &self,
        partition: u32,
        below: u64,
        older_than_ms: i64,
        max: usize,
    ) -> Result<usize> {
        only_partition(partition)?;
        self.writer
            .write(move |conn| truncate(conn, below, older_than_ms, max))
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    /// A fresh `hot.db` schema in memory.
    fn hot_db() -> Connection {
        super::super::migrations::in_memory(&super::super::migrations::HOT)
    }

    /// An outbox of `n` rows, the first `old` appended at 1,000 ms and the rest at 5,000 ms.
    fn outbox_of(n: i64, old: i64) -> Connection {
        let conn = hot_db();
        let mut insert = conn
            .prepare("INSERT INTO outbox (appended_at, tenant) VALUES (?1, 't')")
            .unwrap();
        for i in 0..n {
            insert
                .execute([if i < old { 1_000 } else { 5_000 }])
                .unwrap();
        }
        drop(insert);
        conn
    }

    /// Runs `f` on `conn` and counts the SQLite VM instructions it took.
    fn counting<T>(conn: &Connection, f: impl FnOnce(&Connection) -> Result<T>) -> (T, u64) {
        let ops = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&ops);
        conn.progress_handler(
            1,
            Some(move || {
                counter.fetch_add(1, Ordering::Relaxed);
                false
            }),
        );
        let out = f(conn).unwrap();
        conn.progress_handler(1, None::<fn() -> bool>);
        (out, ops.load(Ordering::Relaxed))
    }

    /// Runs `truncate` and counts the SQLite VM instructions it took.
    fn truncate_counting(conn: &Connection, below: u64, older: i64, max: usize) -> (usize, u64) {
        counting(conn, |c| truncate(c, below, older, max))
    }

    /// `offsets` runs on the hot writer before every archiver batch (the watermark snapshot):
    /// two seeks, not a pass over the log (`min(rowid), max(rowid)` in one query would be one).
    #[test]
    fn offsets_seek_the_ends_of_the_log() {
        let conn = outbox_of(50_000, 0);
        let ((low, high), ops) = counting(&conn, offsets);
        assert_eq!((low, high), (0, 50_000));
        assert!(ops < 200, "{ops} VM instructions for the offsets");
    }

    #[test]
    fn outbox_retention_reads_the_prefix_not_the_log() {
        let conn = outbox_of(50_000, 300);
        // Nothing old enough: a look at the first row (34 instructions), not a pass over the
        // 50,000 rows (the filter over the whole range this replaced took 250,019).
        let (deleted, ops) = truncate_counting(&conn, 50_000, 500, 1_000);
        assert_eq!(deleted, 0);
        assert!(ops < 200, "{ops} VM instructions to delete nothing");
        // 300 old rows: bounded by `max` per call, then by the first young row.
        let (deleted, ops_200) = truncate_counting(&conn, 50_000, 2_000, 200);
        assert_eq!(deleted, 200);
        assert!(ops_200 < 200 * 20, "{ops_200} VM instructions for 200 rows");
        let (deleted, _) = truncate_counting(&conn, 50_000, 2_000, 200);
        assert_eq!(deleted, 100);
        assert_eq!(truncate_counting(&conn, 50_000, 2_000, 200).0, 0);
        // `below` bounds the prefix too (offsets below 310 = rowids up to 310).
        assert_eq!(truncate_counting(&conn, 310, 9_000, 1_000).0, 10);
        let first: i64 = conn
            .query_row("SELECT min(rowid) FROM outbox", [], |r| r.get(0))
            .unwrap();
        assert_eq!(first, 311);
    }

    fn record(seq: u64) -> MessageRecord {
        MessageRecord::sample(seq, "hi")
    }

    /// The offsets of the records in the log, ascending.
    fn logged(conn: &Connection) -> Vec<u64> {
        fetch(conn, 0, 100)
            .unwrap()
            .iter()
            .map(|(o, _)| *o)
            .collect()
    }

    #[test]
    fn offsets_are_not_reused_after_retention_dropped_the_whole_log() {
        let conn = hot_db();
        assert_eq!(offsets(&conn).unwrap(), (0, 0));
        append(&conn, &[record(1), record(2), record(3)], 1_000).unwrap();
        assert_eq!(offsets(&conn).unwrap(), (0, 3));
        assert_eq!(truncate(&conn, 3, 9_000, 100).unwrap(), 3);
        assert_eq!(offsets(&conn).unwrap(), (3, 3));
        // The next append takes offset 3, not 0 (a plain rowid table would hand out rowid 1).
        append(&conn, &[record(4)], 2_000).unwrap();
        assert_eq!(offsets(&conn).unwrap(), (3, 4));
        assert_eq!(logged(&conn), vec![3]);
        assert_eq!(fetch(&conn, 3, 10).unwrap()[0].1.conversation_seq, 4);
        // Once the log has rows again, `high` is the newest's.
        append(&conn, &[record(5)], 2_000).unwrap();
        assert_eq!(offsets(&conn).unwrap(), (3, 5));
    }
}
