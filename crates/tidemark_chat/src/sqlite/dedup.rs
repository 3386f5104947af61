//! Client dedup of the SQLite hot store: `(tenant, conversation, sender, client_msg_id)` →
//! the SEND_ACK of the message it committed, for the dedup window (default 24 h), also after the
//! message was archived and trimmed.
//!
//! Why not one B-tree keyed by the client's key: every SEND would then write one randomly placed
//! page of it, and each such page is a 4 KiB WAL frame per commit plus a checkpoint write. On the
//! project's test machine that page alone moved `tiered` at 10,000 sends/s from p99 ≈ 12–17 ms
//! (switched off) to 25–50 ms. So the entries are kept in commit order
//! instead, where the sends of one group commit share the last page:
//!
//! - `dedup_log` (in `hot.db`; its tables are in [`super::migrations`]): one row per committed key,
//!   appended by the SEND's own transaction (seed 000: the dedup entry is part of the atomic step
//!   that records the message).
//! - [`DedupIndex`], in memory: a hash of the key → the log row's id, for exactly the rows of
//!   the log. Rebuilt from the log when the store opens, and again after any group transaction
//!   of the writer was rolled back ([`DedupIndex::reload`], the writer's rollback hook); in
//!   between, each job changes it together with the rows it writes. The hash is keyed per
//!   process ([`RandomState`]): clients choose the keys. A hit is checked against the log row
//!   (same key — two keys may share a hash — and not expired).
//! - `dedup` (on disk, keyed by the client's key): where the oldest rows of the log move once
//!   the index holds more than `memory_keys` (in batches, by the trimmer's pass: writer jobs
//!   of their own, not part of any SEND's); also what a store written before the log existed
//!   holds. A SEND looks there only while it holds something.
//!
//! Expiry, also in the trimmer's pass ([`purge`]): expired rows leave the front of the log —
//! up to the first row not yet expired; rows are in commit order, and so are their expiries
//! unless the window was changed between runs (a row behind a later-expiring one waits for it,
//! and is never answered meanwhile) — and expired rows leave `dedup`.
//!
//! [`lookup`], [`record`] and [`purge`] run on the writer connection, inside its group
//! transaction, in jobs without a savepoint (`GroupWriter::write_unguarded`) that take the
//! index with [`lock_for_job`]: a job that fails after writing rolls back its whole group, and
//! then the reload makes the index match the log again.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Mutex, MutexGuard};

use rusqlite::types::Type;
use rusqlite::{Connection, OptionalExtension, params};

use crate::error::Result;
use crate::model::{MessageRecord, SendAck, SendCommand};

/// The client's dedup key.
#[derive(Debug, Clone, Copy)]
pub(super) struct DedupKey<'a> {
    pub(super) tenant: &'a str,
    pub(super) conversation_id: &'a str,
    pub(super) sender: &'a str,
    pub(super) client_msg_id: &'a str,
}

impl<'a> DedupKey<'a> {
    fn as_tuple(self) -> (&'a str, &'a str, &'a str, &'a str) {
        (
            self.tenant,
            self.conversation_id,
            self.sender,
            self.client_msg_id,
        )
    }

    pub(super) fn of_send(cmd: &'a SendCommand) -> Self {
        Self {
            tenant: &cmd.tenant,
            conversation_id: &cmd.conversation_id,
            sender: &cmd.sender,
            client_msg_id: &cmd.client_msg_id,
        }
    }

    pub(super) fn of(r: &'a MessageRecord) -> Self {
        Self {
            tenant: &r.tenant,
            conversation_id: &r.conversation_id,
            sender: &r.sender,
            client_msg_id: &r.client_msg_id,
        }
    }
}

/// The in-memory index over `dedup_log`: key hash → log ids (see the module docs). About
/// 20–40 bytes a key (16 bytes a slot, tables at most 7/8 full); a table whose keys fall below a
/// quarter of its slots is shrunk by the next [`purge`].
#[derive(Debug)]
pub(super) struct DedupIndex {
    hasher: RandomState,
    /// The first id of each hash (nearly always the only one).
    first: HashMap<u64, i64>,
    /// Further ids of a hash in `first`: two keys with one hash, or a key committed again
    /// after its entry expired (before the purge dropped the old one).
    more: HashMap<u64, Vec<i64>>,
    /// Ids held (`first` + `more`).
    len: usize,
    /// `dedup` holds entries (a SEND must look there too).
    on_disk: bool,
    /// The last rebuild failed: the maps may miss stored keys, so no job may use them until a
    /// rebuild succeeds ([`DedupIndex::ready`]).
    stale: bool,
    /// Above this many ids the oldest log rows move to `dedup`.
    memory_keys: usize,
}

/// Locks `index`. Writer jobs and the rollback hook take it, one at a time on the writer
/// thread (and the store's builder once, at start), so it is never contended. A poisoned lock
/// is taken all the same: none of the index's operations leaves it half-changed.
pub(super) fn lock(index: &Mutex<DedupIndex>) -> MutexGuard<'_, DedupIndex> {
    index
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Locks `index` for a writer job that reads or changes it: fails, before the job writes
/// anything, while the index is stale and cannot be rebuilt ([`DedupIndex::ready`]).
pub(super) fn lock_for_job<'a>(
    index: &'a Mutex<DedupIndex>,
    conn: &Connection,
) -> Result<MutexGuard<'a, DedupIndex>> {
    let mut guard = lock(index);
    guard.ready(conn)?;
    Ok(guard)
}

impl DedupIndex {
    /// An empty index holding at most `memory_keys` ids before [`purge`] moves some to disk.
    pub(super) fn new(memory_keys: usize) -> Self {
        Self {
            hasher: RandomState::new(),
            first: HashMap::new(),
            more: HashMap::new(),
            len: 0,
            on_disk: false,
            stale: false,
            memory_keys: memory_keys.max(1),
        }
    }

    /// The index of `dedup_log` as committed (when the store opens). Indexes every row, also
    /// past `memory_keys` (the bound was lowered, say): the next purges move the excess.
    pub(super) fn load(conn: &Connection, memory_keys: usize) -> Result<Self> {
        let mut index = Self::new(memory_keys);
        index.reload(conn)?;
        Ok(index)
    }

    /// Rebuilds the index from what `conn` sees of `dedup_log` and `dedup`: at open, and on the
    /// writer thread after a rolled-back group (its jobs' index changes are undone with it; a
    /// few seconds for millions of keys, during which no SEND commits — rollbacks come from I/O
    /// errors). If reading fails the index is marked stale and jobs refuse to run on it.
    pub(super) fn reload(&mut self, conn: &Connection) -> Result<()> {
        let mut fresh = Self {
            hasher: self.hasher.clone(),
            ..Self::new(self.memory_keys)
        };
        let read = (|| -> Result<()> {
            let mut stmt = conn.prepare_cached(
                "SELECT id, tenant, conversation_id, sender, client_msg_id FROM dedup_log
                 ORDER BY id",
            )?;
            let mut rows = stmt.query([])?;
            while let Some(row) = rows.next()? {
                let hash = fresh.hash_at(row, 1)?;
                fresh.link(hash, row.get(0)?);
            }
            fresh.on_disk = on_disk(conn)?;
            Ok(())
        })();
        match read {
            Ok(()) => {
                *self = fresh;
                Ok(())
            }
            Err(e) => {
                self.stale = true;
                Err(e)
            }
        }
    }

    /// Fails while the index is stale and cannot be rebuilt (see [`lock_for_job`]).
    fn ready(&mut self, conn: &Connection) -> Result<()> {
        if self.stale {
            self.reload(conn)?;
        }
        Ok(())
    }

    pub(super) fn set_memory_keys(&mut self, memory_keys: usize) {
        self.memory_keys = memory_keys.max(1);
    }

    /// Ids held.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    fn hash(&self, key: DedupKey<'_>) -> u64 {
        self.hasher.hash_one(key.as_tuple())
    }

    /// The hash of the key stored in columns `base..base + 4` of `row` (tenant, conversation_id,
    /// sender, client_msg_id).
    fn hash_at(&self, row: &rusqlite::Row<'_>, base: usize) -> rusqlite::Result<u64> {
        let text = |i: usize| {
            row.get_ref(base + i)?.as_str().map_err(|e| {
                rusqlite::Error::FromSqlConversionFailure(base + i, Type::Text, Box::new(e))
            })
        };
        Ok(self.hash(DedupKey {
            tenant: text(0)?,
            conversation_id: text(1)?,
            sender: text(2)?,
            client_msg_id: text(3)?,
        }))
    }

    fn link(&mut self, hash: u64, id: i64) {
        if let Some(&held) = self.first.get(&hash) {
            if held == id {
                return;
            }
            let more = self.more.entry(hash).or_default();
            if more.contains(&id) {
                return;
            }
            more.push(id);
        } else {
            self.first.insert(hash, id);
        }
        self.len += 1;
    }

    /// Drops `(hash, id)` if held: together with the deletion of its log row.
    fn unlink_one(&mut self, hash: u64, id: i64) {
        if self.first.get(&hash) == Some(&id) {
            match self.more.get_mut(&hash) {
                Some(more) => {
                    let next = more.remove(0);
                    if more.is_empty() {
                        self.more.remove(&hash);
                    }
                    self.first.insert(hash, next);
                }
                None => {
                    self.first.remove(&hash);
                }
            }
            self.len -= 1;
        } else if let Some(more) = self.more.get_mut(&hash)
            && let Some(at) = more.iter().position(|&held| held == id)
        {
            more.remove(at);
            if more.is_empty() {
                self.more.remove(&hash);
            }
            self.len -= 1;
        }
    }

    #[cfg(test)]
    fn unlink(&mut self, removed: &[(u64, i64)]) {
        for &(hash, id) in removed {
            self.unlink_one(hash, id);
        }
    }

    /// Gives memory back after the index shrank to under a quarter of its slots (to twice
    /// what it holds, so that the next inserts do not grow it straight back).
    fn shrink_if_sparse(&mut self) {
        if self.first.len() < self.first.capacity() / 4 {
            self.first.shrink_to(self.first.len() * 2);
        }
        if self.more.len() < self.more.capacity() / 4 {
            self.more.shrink_to(self.more.len() * 2);
        }
    }

    fn candidates(&self, hash: u64) -> Vec<i64> {
        let mut ids: Vec<i64> = self.first.get(&hash).copied().into_iter().collect();
        if let Some(more) = self.more.get(&hash) {
            ids.extend_from_slice(more);
        }
        ids
    }
}

/// The SEND_ACK of `key` if it was committed and has not expired at `now_ms`.
pub(super) fn lookup(
    conn: &Connection,
    index: &DedupIndex,
    key: DedupKey<'_>,
    now_ms: i64,
) -> Result<Option<SendAck>> {
    let hash = index.hash(key);
    for id in index.candidates(hash) {
        // No answer: another key with the same hash, or this key expired (a purge drops it).
        let log_row = "SELECT conversation_seq, message_id, committed_at FROM dedup_log
             WHERE tenant = ?1 AND conversation_id = ?2 AND sender = ?3 AND client_msg_id = ?4
               AND expires_at > ?5 AND id = ?6";
        if let Some(ack) = find_ack(conn, log_row, key, now_ms, Some(id))? {
            return Ok(Some(ack));
        }
    }
    if !index.on_disk {
        return Ok(None);
    }
    let on_disk = "SELECT conversation_seq, message_id, committed_at FROM dedup
         WHERE tenant = ?1 AND conversation_id = ?2 AND sender = ?3 AND client_msg_id = ?4
           AND expires_at > ?5";
    find_ack(conn, on_disk, key, now_ms, None)
}

/// The ACK that `sql` selects for `key`, unexpired at `now_ms` (and the log row `id`, if any).
fn find_ack(
    conn: &Connection,
    sql: &str,
    key: DedupKey<'_>,
    now_ms: i64,
    id: Option<i64>,
) -> Result<Option<SendAck>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let (t, c, s, m) = key.as_tuple();
    let ack = |r: &rusqlite::Row<'_>| {
        Ok(SendAck {
            conversation_seq: r.get::<_, i64>(0)? as u64,
            message_id: r.get(1)?,
            committed_at_ms: r.get(2)?,
        })
    };
    Ok(match id {
        Some(id) => stmt.query_row(params![t, c, s, m, now_ms, id], ack),
        None => stmt.query_row(params![t, c, s, m, now_ms], ack),
    }
    .optional()?)
}

/// Records the key of committed (or reserved) `r`, deduplicated until `expires_at_ms`.
pub(super) fn record(
    conn: &Connection,
    index: &mut DedupIndex,
    r: &MessageRecord,
    expires_at_ms: i64,
) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO dedup_log (tenant, conversation_id, sender, client_msg_id,
             conversation_seq, message_id, committed_at, expires_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        r.tenant,
        r.conversation_id,
        r.sender,
        r.client_msg_id,
        r.conversation_seq as i64,
        r.message_id,
        r.committed_at_ms,
        expires_at_ms
    ])?;
    let hash = index.hash(DedupKey::of(r));
    index.link(hash, conn.last_insert_rowid());
    Ok(())
}

/// One upkeep step of at most `batch` entries; returns how many it dropped or moved. First
/// drops expired entries (the log's front, then `dedup`), then, with what is left of `batch`,
/// moves the oldest log rows to `dedup` while the index holds more than its `memory_keys`.
pub(super) fn purge(
    conn: &Connection,
    index: &mut DedupIndex,
    now_ms: i64,
    batch: usize,
) -> Result<usize> {
    let batch = batch.min(i64::MAX as usize);
    let expired = log_front(conn, index, batch, Some(now_ms))?;
    remove_log_rows(conn, index, &expired)?;
    let mut done = expired.len();
    if index.on_disk {
        done += conn.execute(
            "DELETE FROM dedup
             WHERE (tenant, conversation_id, sender, client_msg_id) IN (
                 SELECT tenant, conversation_id, sender, client_msg_id FROM dedup
                 WHERE expires_at <= ?1 LIMIT ?2)",
            params![now_ms, (batch - done) as i64],
        )?;
    }
    let over = index.len().saturating_sub(index.memory_keys);
    let room = batch - done;
    if over > 0 && room > 0 {
        let spill = log_front(conn, index, over.min(room), None)?;
        let mut insert = conn.prepare_cached(
            "INSERT OR REPLACE INTO dedup (tenant, conversation_id, sender, client_msg_id,
                 conversation_seq, message_id, committed_at, expires_at)
             SELECT tenant, conversation_id, sender, client_msg_id, conversation_seq, message_id,
                 committed_at, expires_at
             FROM dedup_log WHERE id = ?1",
        )?;
        for row in &spill {
            insert.execute([row.id])?;
        }
        remove_log_rows(conn, index, &spill)?;
        done += spill.len();
    }
    index.on_disk = on_disk(conn)?;
    index.shrink_if_sparse();
    Ok(done)
}

/// Whether `dedup` holds any entry.
fn on_disk(conn: &Connection) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM dedup)")?
        .query_row([], |r| r.get(0))?)
}

/// A log row as [`purge`] sees it.
struct FrontRow {
    id: i64,
    hash: u64,
}

/// The first `n` rows of the log, oldest first; with `expired_at`, only those up to the first
/// row that has not expired by then.
fn log_front(
    conn: &Connection,
    index: &DedupIndex,
    n: usize,
    expired_at: Option<i64>,
) -> Result<Vec<FrontRow>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, tenant, conversation_id, sender, client_msg_id, expires_at FROM dedup_log
         ORDER BY id LIMIT ?1",
    )?;
    let mut rows = stmt.query([n as i64])?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let expires_at: i64 = row.get(5)?;
        if expired_at.is_some_and(|at| expires_at > at) {
            break;
        }
        out.push(FrontRow {
            id: row.get(0)?,
            hash: index.hash_at(row, 1)?,
        });
    }
    Ok(out)
}

/// Deletes `rows` (a front of the log) and their ids in the index.
fn remove_log_rows(conn: &Connection, index: &mut DedupIndex, rows: &[FrontRow]) -> Result<()> {
    let Some(last) = rows.last() else {
        return Ok(());
    };
    conn.prepare_cached("DELETE FROM dedup_log WHERE id <= ?1")?
        .execute([last.id])?;
    for row in rows {
        index.unlink_one(row.hash, row.id);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::MessageClass;

    const T0: i64 = 1_800_000_000_000;

    fn store() -> (Connection, DedupIndex) {
        let conn = super::super::migrations::in_memory(&super::super::migrations::HOT);
        let index = DedupIndex::load(&conn, 100).unwrap();
        (conn, index)
    }

    fn message(key: &str, seq: u64) -> MessageRecord {
        MessageRecord {
            tenant: "t".into(),
            conversation_id: "c".into(),
            conversation_seq: seq,
            message_id: format!("m{seq}"),
            sender: "u".into(),
            client_msg_id: key.into(),
            body: "b".into(),
            class: MessageClass::Standard,
            committed_at_ms: T0,
            expires_at_ms: None,
        }
    }

    fn find(conn: &Connection, index: &DedupIndex, r: &MessageRecord) -> Option<SendAck> {
        lookup(conn, index, DedupKey::of(r), T0 + 1).unwrap()
    }

    #[test]
    fn colliding_hashes_keep_every_id_and_unlink_exactly_one() {
        let mut index = DedupIndex::new(10);
        index.link(7, 1);
        index.link(7, 2);
        index.link(7, 3);
        index.link(7, 2); // already held
        index.link(8, 4);
        assert_eq!(index.len(), 4);
        assert_eq!(index.candidates(7), vec![1, 2, 3]);
        index.unlink(&[(7, 1)]);
        assert_eq!(index.candidates(7), vec![2, 3]);
        index.unlink(&[(7, 3), (7, 99), (9, 4)]); // not held: no change
        assert_eq!(index.candidates(7), vec![2]);
        assert_eq!(index.candidates(8), vec![4]);
        assert_eq!(index.len(), 2);
        index.unlink(&[(7, 2), (8, 4)]);
        assert!(index.candidates(7).is_empty() && index.candidates(8).is_empty());
        assert_eq!(index.len(), 0);
        assert!(index.first.is_empty() && index.more.is_empty());
    }

    #[test]
    fn a_key_sharing_another_keys_hash_answers_neither_for_the_other() {
        let (conn, mut index) = store();
        let (k1, k2) = (message("k1", 1), message("k2", 2));
        record(&conn, &mut index, &k2, T0 + 60_000).unwrap();
        // As if k1 hashed like k2: its lookup reaches k2's row.
        let k2_id = index.candidates(index.hash(DedupKey::of(&k2)))[0];
        let k1_hash = index.hash(DedupKey::of(&k1));
        index.link(k1_hash, k2_id);
        assert_eq!(find(&conn, &index, &k1), None);
        assert_eq!(find(&conn, &index, &k2), Some(k2.ack()));
        record(&conn, &mut index, &k1, T0 + 60_000).unwrap();
        assert_eq!(find(&conn, &index, &k1), Some(k1.ack()));
        assert_eq!(find(&conn, &index, &k2), Some(k2.ack()));
    }

    #[test]
    fn an_index_that_could_not_be_rebuilt_refuses_jobs_until_it_is() {
        let (conn, mut index) = store();
        let k1 = message("k1", 1);
        record(&conn, &mut index, &k1, T0 + 60_000).unwrap();
        conn.execute_batch("ALTER TABLE dedup_log RENAME TO hidden")
            .unwrap();
        assert!(index.reload(&conn).is_err());
        assert!(index.ready(&conn).is_err(), "stale: no job may use it");
        conn.execute_batch("ALTER TABLE hidden RENAME TO dedup_log")
            .unwrap();
        index.ready(&conn).unwrap();
        assert_eq!(find(&conn, &index, &k1), Some(k1.ack()));
        assert_eq!(index.len(), 1);
    }

    #[test]
    fn a_reload_after_a_rollback_forgets_the_rolled_back_keys() {
        let (conn, mut index) = store();
        let (k1, k2) = (message("k1", 1), message("k2", 2));
        conn.execute_batch("BEGIN").unwrap();
        record(&conn, &mut index, &k1, T0 + 60_000).unwrap();
        conn.execute_batch("ROLLBACK").unwrap();
        index.reload(&conn).unwrap();
        assert_eq!(index.len(), 0);
        // k2 gets the id k1 had; k1 is not answered from it.
        record(&conn, &mut index, &k2, T0 + 60_000).unwrap();
        assert_eq!(find(&conn, &index, &k1), None);
        assert_eq!(find(&conn, &index, &k2), Some(k2.ack()));
        assert_eq!(index.len(), 1);
    }
}
