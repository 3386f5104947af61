//! The embedded archive's history index, written in time order and merged into its keyed
//! B-tree in large sorted steps (DESIGN principle 3: write in time order).
//!
//! Why: `history_index` is keyed `(tenant, conversation, seq_bucket, seq)`, so an archive batch of
//! a few thousand entries spread over thousands of conversations dirties about one leaf page per
//! entry — a 4 KiB WAL frame and a checkpoint write for some 100 bytes. That random I/O was the gap
//! between `tiered` and `hot-only` (with the archive on tmpfs the two were equal). So the
//! archiver's entries take two steps instead:
//!
//! 1. [`append`]: each batch's entries are appended to `history_index_log` (rows in commit
//!    order; a batch fills a few consecutive pages), and after that commit [`PendingIndex`],
//!    in memory and sorted by key, holds them — readers find them there.
//! 2. A merge, once [`PendingIndex`] holds [`MERGE_ENTRIES`]: [`read_sorted`] reads the log in
//!    key order up to its last row, [`insert_merged`] inserts it into `history_index` in
//!    chunks of [`MERGE_CHUNK`] (`INSERT OR IGNORE`: a replay or a repeated merge is
//!    harmless), and [`delete_merged`] deletes the log up to that row — each a writer job and
//!    a transaction of its own. A conversation's leaf is then
//!    written once per merge instead of once per batch. After the delete committed, the merged
//!    entries leave [`PendingIndex`] as one generation, set aside when the merge began, and are
//!    freed on the archive's background writer (`tiered`; in `sync-archive`, whose writer the
//!    SENDs wait on, on a blocking thread instead).
//!
//! Readers ([`super::SqliteArchive`]) take what they need of [`PendingIndex`] *before* their
//! database snapshot: an entry leaves it only after its merge committed, so a reader that no longer
//! finds it there reads a snapshot that has it in `history_index`; one that finds it in both gets
//! it once. Nothing else deletes the log's rows or the keyed index's entries: an expired ephemeral
//! message's entry stays, as a tombstone (see [`super::SqliteArchive`]). An append that committed
//! before a merge but reaches memory after it leaves an entry that is in both until the next merge:
//! harmless. When the archive opens, [`PendingIndex::load`] reads the log back into memory: about
//! one merge's worth of rows (twice that in `sync-archive`, where the commit path and the archiver
//! both append each entry), more only if merges failed.
//!
//! Records are not part of this: `message_record` is appended in time order already (a rowid
//! table, unique by its time-ordered `message_id`), and an index entry points at its record
//! through that id.

use std::collections::BTreeMap;
use std::collections::btree_map::Range;
use std::iter::{Map, Peekable};

use rusqlite::{Connection, params};

use crate::error::Result;
use crate::model::{IndexEntry, SEQ_BUCKET_SIZE};

/// How many pending entries make the next [`append`]er merge them (about 13 s of a
/// 5,000 msg/s load; some 250 B of memory each, so ~16 MiB). Larger merges write each
/// conversation's leaf page for more entries, and take longer (a few hundred ms of the archive
/// writer's CPU).
///
/// A merge that fails (a full disk, say) is retried after the next batch; meanwhile the log and
/// the memory grow with the archive's input.
pub const MERGE_ENTRIES: usize = 65_536;

/// Entries per transaction of a merge (see [`insert_merged`]).
pub const MERGE_CHUNK: usize = 2_048;

/// The seq bucket of the keyed tables (`history_index`, `message_record`).
pub(super) fn bucket(seq: u64) -> i64 {
    (seq / SEQ_BUCKET_SIZE) as i64
}

type Key = (String, String, u64);

/// A generation's entries of one conversation as `(seq, entry)`.
type BySeq<'a> = Map<Range<'a, Key, Pending>, fn((&'a Key, &'a Pending)) -> (u64, &'a Pending)>;

#[derive(Debug, Clone, PartialEq)]
struct Pending {
    /// The log row that holds the entry.
    log_id: i64,
    message_id: String,
    expires_at_ms: Option<i64>,
}

impl Pending {
    fn live(&self, now_ms: i64) -> bool {
        !crate::model::expired_at(self.expires_at_ms, now_ms)
    }

    /// Of two entries of one key, the one whose log row is later: a replayed entry's later
    /// row stands for it (the merge deletes up to a row id).
    fn later<'a>(&'a self, other: &'a Self) -> &'a Self {
        if other.log_id > self.log_id {
            other
        } else {
            self
        }
    }
}

/// `rows` widened to hold `log_id` (the bounds of [`PendingIndex`]'s `entries`).
fn widen(rows: Option<(i64, i64)>, log_id: i64) -> Option<(i64, i64)> {
    Some(rows.map_or((log_id, log_id), |(lo, hi)| {
        (lo.min(log_id), hi.max(log_id))
    }))
}

/// The log's entries in memory, sorted by `(tenant, conversation, seq)` (see the module docs).
///
/// Two generations, so that a merge's entries leave memory without a pass over the map under
/// the lock (as a rule; see [`PendingIndex::merged`]): [`PendingIndex::begin_merge`] moves
/// every entry into `merging` before the merge reads the log, and [`PendingIndex::merged`]
/// hands that generation back whole once the merge's delete committed, for the caller to free
/// off the commit path ([`Merged::free`]). Taking a merge's entries out of one map under its
/// lock held up the SENDs answered meanwhile: at 10,000 sends/s, nearly all SENDs over 10 ms
/// came at merges' ends.
#[derive(Debug)]
pub(super) struct PendingIndex {
    /// Entries added since the last merge began.
    entries: BTreeMap<Key, Pending>,
    /// The entries taken by the last [`PendingIndex::begin_merge`] (committed before that
    /// merge read the log, so at or below the row it reads up to), until a merge commits
    /// them; a failed merge leaves them to the next.
    merging: BTreeMap<Key, Pending>,
    /// The lowest and highest log rows in `entries` (or a wider range; `None` when empty):
    /// an entry at or below a merge's last row reaches `entries` only through an append that
    /// committed before the merge's read but reached memory after it (`sync-archive`).
    entries_rows: Option<(i64, i64)>,
    /// The highest log row in `merging` (or a higher one; `i64::MIN` when empty).
    merging_last: i64,
}

/// A merge's entries, out of [`PendingIndex`]: dropping this frees them.
#[derive(Debug)]
#[must_use = "the merged entries are returned to be dropped elsewhere"]
pub(super) struct Merged(BTreeMap<Key, Pending>);

impl Merged {
    /// How many entries left memory.
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    /// Frees the entries, and `rows` (the merge's sorted copy of the log): 40–70 ms of CPU
    /// for ~65,000 of each, which the caller runs off the commit path.
    pub(super) fn free(self, rows: Vec<LogRow>) {
        drop(self.0);
        drop(rows);
    }
}

impl Default for PendingIndex {
    fn default() -> Self {
        Self {
            entries: BTreeMap::new(),
            merging: BTreeMap::new(),
            entries_rows: None,
            merging_last: i64::MIN,
        }
    }
}

impl PendingIndex {
    /// Reads every row of the log (the archive's open).
    pub(super) fn load(conn: &Connection) -> Result<Self> {
        let mut index = Self::default();
        let mut stmt = conn.prepare(
            "SELECT id, tenant, conversation_id, conversation_seq, message_id, expires_at
             FROM history_index_log ORDER BY id",
        )?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let key = (r.get(1)?, r.get(2)?, r.get::<_, i64>(3)? as u64);
            index.put(key, r.get(0)?, r.get(4)?, r.get(5)?);
        }
        Ok(index)
    }

    fn put(&mut self, key: Key, log_id: i64, message_id: String, expires_at_ms: Option<i64>) {
        let pending = Pending {
            log_id,
            message_id,
            expires_at_ms,
        };
        // A replayed entry's later row stands for it: the merge deletes up to a row id, and
        // must not leave an entry behind whose row is gone.
        if self.merging.get(&key).is_some_and(|p| p.log_id > log_id) {
            return;
        }
        match self.entries.get_mut(&key) {
            Some(p) if p.log_id > log_id => return,
            Some(p) => *p = pending,
            None => {
                self.entries.insert(key, pending);
            }
        }
        self.entries_rows = widen(self.entries_rows, log_id);
    }

    /// Adds entries committed to the log as rows `log_ids` (same order), after that commit.
    pub(super) fn insert(&mut self, entries: &[IndexEntry], log_ids: &[i64]) {
        for (e, &id) in entries.iter().zip(log_ids) {
            let key = (
                e.tenant.clone(),
                e.conversation_id.clone(),
                e.conversation_seq,
            );
            self.put(key, id, e.message_id.clone(), e.expires_at_ms);
        }
    }

    /// How many entries are pending (both generations).
    pub(super) fn len(&self) -> usize {
        self.entries.len() + self.merging.len()
    }

    /// The entry of `key`: the later row's if both generations hold it.
    fn get(&self, key: &Key) -> Option<&Pending> {
        match (self.entries.get(key), self.merging.get(key)) {
            (Some(a), Some(b)) => Some(a.later(b)),
            (a, b) => a.or(b),
        }
    }

    /// The conversation's entries with `lo ≤ seq ≤ hi`, ascending: the two generations'
    /// ranges merged as they are walked (a reader stops early; nothing is copied under the
    /// lock), the later row where both hold a seq.
    fn conversation(
        &self,
        tenant: &str,
        conversation_id: &str,
        lo: u64,
        hi: u64,
    ) -> impl Iterator<Item = (u64, &Pending)> {
        fn seq_of<'a>((key, pending): (&'a Key, &'a Pending)) -> (u64, &'a Pending) {
            (key.2, pending)
        }
        fn by_seq(range: Range<'_, Key, Pending>) -> Peekable<BySeq<'_>> {
            range.map(seq_of as fn(_) -> _).peekable()
        }
        let mut ranges = (lo <= hi).then(|| {
            let bounds = (tenant.to_owned(), conversation_id.to_owned(), lo)
                ..=(tenant.to_owned(), conversation_id.to_owned(), hi);
            (
                by_seq(self.merging.range(bounds.clone())),
                by_seq(self.entries.range(bounds)),
            )
        });
        std::iter::from_fn(move || {
            let (older, newer) = ranges.as_mut()?;
            match (older.peek(), newer.peek()) {
                (Some(&(a, _)), Some(&(b, _))) if a < b => older.next(),
                (Some(&(a, _)), Some(&(b, _))) if a > b => newer.next(),
                (Some(_), Some(_)) => {
                    let (seq, p) = older.next()?;
                    let (_, q) = newer.next()?;
                    Some((seq, q.later(p)))
                }
                (Some(_), None) => older.next(),
                (None, _) => newer.next(),
            }
        })
    }

    /// The pending entries with `lo ≤ seq ≤ hi`, ascending (expired ones too: tombstones).
    pub(super) fn range(
        &self,
        tenant: &str,
        conversation_id: &str,
        lo: u64,
        hi: u64,
    ) -> Vec<IndexEntry> {
        self.conversation(tenant, conversation_id, lo, hi)
            .map(|(seq, p)| IndexEntry {
                tenant: tenant.to_owned(),
                conversation_id: conversation_id.to_owned(),
                conversation_seq: seq,
                message_id: p.message_id.clone(),
                expires_at_ms: p.expires_at_ms,
            })
            .collect()
    }

    /// The message ids of the pending entries among `seqs`.
    pub(super) fn message_ids(
        &self,
        tenant: &str,
        conversation_id: &str,
        seqs: &[u64],
    ) -> BTreeMap<u64, String> {
        let mut key = (tenant.to_owned(), conversation_id.to_owned(), 0);
        seqs.iter()
            .filter_map(|&seq| {
                key.2 = seq;
                self.get(&key).map(|p| (seq, p.message_id.clone()))
            })
            .collect()
    }

    /// The lowest unexpired pending seq of the conversation.
    pub(super) fn earliest(&self, tenant: &str, conversation_id: &str, now_ms: i64) -> Option<u64> {
        self.conversation(tenant, conversation_id, 0, u64::MAX)
            .find(|(_, p)| p.live(now_ms))
            .map(|(seq, _)| seq)
    }

    /// Before a merge reads the log: every entry in memory joins the merge's generation (each
    /// was committed before that read, so its row is among those the merge reads). A merge
    /// that failed left its generation here; the next one takes it over with the new entries.
    pub(super) fn begin_merge(&mut self) {
        let entries = std::mem::take(&mut self.entries);
        if let Some((_, hi)) = self.entries_rows.take() {
            self.merging_last = self.merging_last.max(hi);
        }
        if self.merging.is_empty() {
            self.merging = entries;
        } else {
            // After a failed merge. `put` kept each key's later row in `entries`, so it
            // replaces the merging one; one insert each (`append` would rebuild both trees).
            for (key, pending) in entries {
                self.merging.insert(key, pending);
            }
        }
    }

    /// After the commit of a merge's delete of the log up to row `last`: the merged entries
    /// leave memory, returned whole for the caller to drop (freeing ~65,000 entries is tens
    /// of ms of CPU: not under the lock, not at the SENDs' priority). No pass over `merging`
    /// unless it may hold a row above `last`, none over `entries` unless it may hold one at
    /// or below (a late append in `sync-archive`, or no merge begun).
    pub(super) fn merged(&mut self, last: i64) -> Merged {
        let mut merged = std::mem::take(&mut self.merging);
        if self.merging_last > last {
            self.merging = merged.extract_if(.., |_, p| p.log_id > last).collect();
        } else {
            self.merging_last = i64::MIN;
        }
        if self.entries_rows.is_some_and(|(lo, _)| lo <= last) {
            merged.extend(self.entries.extract_if(.., |_, p| p.log_id <= last));
            self.entries_rows = self.entries.values().map(|p| p.log_id).fold(None, widen);
        }
        Merged(merged)
    }
}

/// Appends `entries` to the log (a writer job); returns their row ids, same order.
pub(super) fn append(conn: &Connection, entries: &[IndexEntry]) -> Result<Vec<i64>> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO history_index_log (tenant, conversation_id, conversation_seq, message_id,
             expires_at)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    let mut ids = Vec::with_capacity(entries.len());
    for e in entries {
        stmt.execute(params![
            e.tenant,
            e.conversation_id,
            e.conversation_seq as i64,
            e.message_id,
            e.expires_at_ms
        ])?;
        ids.push(conn.last_insert_rowid());
    }
    Ok(ids)
}

/// A log row: its id and its entry.
pub(super) type LogRow = (i64, IndexEntry);

/// A merge's first step (a writer job, so that it sees every row the writer committed): the
/// log's rows in key order, and its last row id; `None` if the log is empty.
pub(super) fn read_sorted(conn: &Connection) -> Result<Option<(i64, Vec<LogRow>)>> {
    let last: Option<i64> =
        conn.query_row("SELECT max(id) FROM history_index_log", [], |r| r.get(0))?;
    let Some(last) = last else {
        return Ok(None);
    };
    let mut select = conn.prepare_cached(
        "SELECT id, tenant, conversation_id, conversation_seq, message_id, expires_at
         FROM history_index_log WHERE id <= ?1
         ORDER BY tenant, conversation_id, conversation_seq",
    )?;
    let sorted = select
        .query_map([last], |r| {
            Ok((
                r.get(0)?,
                IndexEntry {
                    tenant: r.get(1)?,
                    conversation_id: r.get(2)?,
                    conversation_seq: r.get::<_, i64>(3)? as u64,
                    message_id: r.get(4)?,
                    expires_at_ms: r.get(5)?,
                },
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(Some((last, sorted)))
}

/// A merge's middle steps: inserts one chunk of the sorted log into `history_index` (a writer
/// job). The chunks follow key order, so each leaf page is written in about one of them: the
/// merge's page writes are those of one sorted pass, in transactions of [`MERGE_CHUNK`]
/// entries instead of one burst.
pub(super) fn insert_merged(conn: &Connection, chunk: &[LogRow]) -> Result<()> {
    let mut insert = conn.prepare_cached(
        "INSERT OR IGNORE INTO history_index (tenant, conversation_id, seq_bucket,
             conversation_seq, message_id, expires_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    for (_, e) in chunk {
        insert.execute(params![
            e.tenant,
            e.conversation_id,
            bucket(e.conversation_seq),
            e.conversation_seq as i64,
            e.message_id,
            e.expires_at_ms,
        ])?;
    }
    Ok(())
}

/// A merge's last step, once every chunk is in `history_index`: deletes the log up to `last`
/// (a writer job). A merge cut short before it leaves the log whole, and the next merge inserts
/// it again (`INSERT OR IGNORE`).
pub(super) fn delete_merged(conn: &Connection, last: i64) -> Result<()> {
    conn.prepare_cached("DELETE FROM history_index_log WHERE id <= ?1")?
        .execute([last])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(cid: &str, seq: u64, expires_at_ms: Option<i64>) -> IndexEntry {
        IndexEntry {
            tenant: "t".into(),
            conversation_id: cid.into(),
            conversation_seq: seq,
            message_id: format!("m-{cid}-{seq}"),
            expires_at_ms,
        }
    }

    #[test]
    fn ranges_are_per_conversation_ascending_and_keep_expired_entries() {
        let mut p = PendingIndex::default();
        let es = [
            entry("b", 3, None),
            entry("a", 9, None),
            entry("b", 1, Some(100)),
            entry("b", 2, None),
            entry("c", 1, None),
        ];
        p.insert(&es, &[1, 2, 3, 4, 5]);
        let seqs = |v: Vec<IndexEntry>| v.iter().map(|e| e.conversation_seq).collect::<Vec<_>>();
        // Seq b/1 expires at 100; its entry is a tombstone from then on, still in the range.
        assert_eq!(seqs(p.range("t", "b", 1, 3)), vec![1, 2, 3]);
        assert_eq!(p.range("t", "b", 1, 1)[0].expires_at_ms, Some(100));
        assert_eq!(seqs(p.range("t", "b", 2, 9)), vec![2, 3]);
        assert_eq!(seqs(p.range("t", "b", 3, 1)), Vec::<u64>::new());
        assert_eq!(seqs(p.range("u", "b", 1, 3)), Vec::<u64>::new());
        assert_eq!(p.earliest("t", "b", 99), Some(1));
        assert_eq!(p.earliest("t", "b", 100), Some(2));
        assert_eq!(p.earliest("t", "zz", 0), None);
        let ids = p.message_ids("t", "b", &[3, 1, 7]);
        assert_eq!(
            ids.into_iter().collect::<Vec<_>>(),
            vec![(1, "m-b-1".to_owned()), (3, "m-b-3".to_owned())]
        );
    }

    #[test]
    fn a_merge_drops_only_entries_at_or_below_its_last_row() {
        // No merge begun: the entries at or below the last row are found by a pass.
        let mut p = PendingIndex::default();
        p.insert(&[entry("a", 1, None), entry("a", 2, None)], &[1, 2]);
        // A replay of seq 1 after the merge took its snapshot: its later row keeps it pending.
        p.insert(&[entry("a", 1, None), entry("a", 3, None)], &[3, 4]);
        // An older row arriving late does not take the place of the newer one.
        p.insert(&[entry("a", 1, None)], &[1]);
        assert_eq!(p.merged(2).len(), 1, "seq 2's row");
        assert_eq!(p.len(), 2);
        assert_eq!(
            p.range("t", "a", 0, 9)
                .iter()
                .map(|e| e.conversation_seq)
                .collect::<Vec<_>>(),
            vec![1, 3]
        );
        assert_eq!(p.merged(4).len(), 2);
        assert_eq!(p.len(), 0);
    }

    /// The entry of `seq` in conversation "a" with the message id `id`.
    fn tagged(seq: u64, id: &str) -> IndexEntry {
        IndexEntry {
            message_id: id.into(),
            ..entry("a", seq, None)
        }
    }

    #[test]
    fn a_merge_takes_its_generation_whole_and_readers_see_both_meanwhile() {
        let mut p = PendingIndex::default();
        p.insert(&[tagged(1, "first"), tagged(2, "first")], &[1, 2]);
        p.begin_merge();
        // The merge reads the log up to row 3: row 3 committed before that read but reaches
        // memory after the generation was taken (a late append, `sync-archive`).
        p.insert(&[tagged(3, "late")], &[3]);
        // Rows after the read: a replay of seq 1 (its later row stands for it) and seq 4.
        p.insert(&[tagged(1, "replay"), tagged(4, "after")], &[4, 5]);
        // An older row of seq 4 arriving late does not take the place of the newer one.
        p.insert(&[tagged(4, "older")], &[2]);
        let ids = |p: &PendingIndex| -> Vec<(u64, String)> {
            p.range("t", "a", 0, 9)
                .into_iter()
                .map(|e| (e.conversation_seq, e.message_id))
                .collect()
        };
        let during = vec![
            (1, "replay".to_owned()),
            (2, "first".to_owned()),
            (3, "late".to_owned()),
            (4, "after".to_owned()),
        ];
        assert_eq!(ids(&p), during);
        assert_eq!(p.message_ids("t", "a", &[1, 2])[&1], "replay");
        assert_eq!(p.earliest("t", "a", 0), Some(1));
        assert_eq!(p.range("t", "a", 2, 3).len(), 2);
        assert_eq!(p.range("t", "a", 3, 2).len(), 0);
        assert_eq!(
            p.len(),
            5,
            "seq 1 in both generations until the merge commits"
        );

        // Rows 1-3 merged: the generation (seqs 1 and 2) and the late row 3 leave memory.
        assert_eq!(p.merged(3).len(), 3);
        assert_eq!(
            ids(&p),
            vec![(1, "replay".to_owned()), (4, "after".to_owned())]
        );
        // The next merge takes the rest.
        p.begin_merge();
        assert_eq!(p.merged(5).len(), 2);
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn a_failed_merge_leaves_its_generation_to_the_next_one() {
        let mut p = PendingIndex::default();
        p.insert(&[tagged(1, "first"), tagged(2, "first")], &[1, 2]);
        p.begin_merge();
        // The merge failed before its delete; a replay of seq 2 and a new seq 3 arrive.
        p.insert(&[tagged(2, "replay"), tagged(3, "new")], &[3, 4]);
        p.begin_merge();
        assert_eq!(p.len(), 3, "the replay took the place of seq 2's first row");
        assert_eq!(p.message_ids("t", "a", &[2])[&2], "replay");
        // A merge up to row 3 only (row 4 committed after its read): seq 3 stays.
        assert_eq!(p.merged(3).len(), 2);
        assert_eq!(p.range("t", "a", 0, 9).len(), 1);
        assert_eq!(p.merged(4).len(), 1);
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn the_earliest_live_seq_is_found_across_generations() {
        let mut p = PendingIndex::default();
        p.insert(&[entry("a", 1, Some(10)), entry("a", 4, None)], &[1, 2]);
        p.begin_merge();
        p.insert(&[entry("a", 2, Some(10)), entry("a", 3, None)], &[3, 4]);
        assert_eq!(p.earliest("t", "a", 0), Some(1));
        assert_eq!(
            p.earliest("t", "a", 10),
            Some(3),
            "seqs 1 and 2 expired at 10"
        );
        assert_eq!(p.earliest("t", "b", 0), None);
    }

    /// An in-memory archive database (the keyed `history_index` and the log's tables).
    fn merge_db() -> Connection {
        super::super::migrations::in_memory(&super::super::migrations::ARCHIVE)
    }

    #[test]
    fn a_merge_moves_its_rows_into_the_keyed_index_in_key_order_and_reload_reads_what_is_left() {
        let conn = merge_db();
        assert!(read_sorted(&conn).unwrap().is_none());
        let first = [
            entry("b", 2, None),
            entry("a", 1, None),
            entry("b", 1, None),
        ];
        assert_eq!(append(&conn, &first).unwrap(), vec![1, 2, 3]);
        assert_eq!(PendingIndex::load(&conn).unwrap().len(), 3);
        // Seq a/1 is already merged (a merge cut short before its delete): ignored.
        conn.execute(
            "INSERT INTO history_index VALUES ('t', 'a', 0, 1, 'm-a-1', NULL)",
            [],
        )
        .unwrap();
        let (last, sorted) = read_sorted(&conn).unwrap().unwrap();
        assert_eq!(last, 3);
        let keys: Vec<(i64, &str, u64)> = sorted
            .iter()
            .map(|(id, e)| (*id, e.conversation_id.as_str(), e.conversation_seq))
            .collect();
        assert_eq!(keys, vec![(2, "a", 1), (3, "b", 1), (1, "b", 2)]);
        // A row appended while the chunks go in is not the merge's: it stays in the log.
        append(&conn, &[entry("c", 9, None)]).unwrap();
        for chunk in sorted.chunks(2) {
            insert_merged(&conn, chunk).unwrap();
        }
        delete_merged(&conn, last).unwrap();
        let count = |table: &str| -> i64 {
            conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
                .unwrap()
        };
        assert_eq!((count("history_index"), count("history_index_log")), (3, 1));
        assert_eq!(count("history_index_all"), 4);
        let (last, _) = read_sorted(&conn).unwrap().unwrap();
        assert_eq!(last, 4);
        delete_merged(&conn, last).unwrap();
        // Row ids go on after the log was emptied: a merge's bound never covers later rows.
        assert_eq!(append(&conn, &[entry("c", 1, None)]).unwrap(), vec![5]);
        let reloaded = PendingIndex::load(&conn).unwrap();
        assert_eq!(reloaded.range("t", "c", 1, 1).len(), 1);
        assert_eq!(reloaded.len(), 1);
    }
}
