//! Hot store + outbox on one SQLite file (`hot.db`).
//!
//! Tables (created and migrated in [`super::migrations`]): `conversation` (members, floor F, and
//! `latest_seq` — see [`LATEST_SEQ`]), `member` (read pointers), `message` (hot records; `state` 0
//! = RESERVED, 1 = COMMITTED; committed rows are the hot history index; `trim_score` set on
//! commit), `dedup_log` + `dedup` (client dedup, own expiry, outlives trimming: see
//! [`super::dedup`]), `outbox` (see [`super::outbox`]), `meta` (consumer positions, the archive
//! watermark, the hot window floor: [`crate::trimmer`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};
use tidemark_core::clock::SharedClock;
use tidemark_core::schema::migrate_sqlite;
use tidemark_core::sqlite::{GroupWriter, ReadPool, ReadThread, open_rw_paged};

use super::dedup::{self, DedupIndex, DedupKey};
use super::{RECORD_COLUMNS, record_from_row};
use super::{migrations, outbox};
use crate::error::{ChatError, Result};
use crate::model::{
    ConversationMeta, HotSlice, HotUnread, Membership, MessageRecord, RecordKey, Reservation,
    SendCommand, SendOutcome,
};
use crate::ports::{
    CommitParams, FusedCommit, HOT_WINDOW_FLOOR_KEY, HotStore, ShardLease, partition_key,
    partition_of_key,
};
use crate::trimmer::first_recorded_window;

/// The latest seq of conversation `c`: `max(c.latest_seq, highest seq in message)`. A SEND
/// does not update its conversation row (that would be one more randomly placed B-tree page
/// written per message): the `message` rows of the conversation carry the seqs handed
/// out, and the trimmer raises `c.latest_seq` to every seq it removes, in the same transaction,
/// so the maximum never goes back and a seq is never reused — also after the whole conversation
/// was trimmed (seed 000: dense, never reused `conversation_seq`). The subquery is one seek on
/// the `(tenant, conversation_id, conversation_seq)` index.
const LATEST_SEQ: &str = "max(c.latest_seq, coalesce((SELECT max(m.conversation_seq) FROM message m
     WHERE m.tenant = c.tenant AND m.conversation_id = c.conversation_id), 0))";

/// SQL for the commit time of a conversation's latest message still in the hot tier (NULL if
/// none): a seek on the same index as [`LATEST_SEQ`].
const LATEST_AT: &str = "(SELECT m.committed_at FROM message m
     WHERE m.tenant = c.tenant AND m.conversation_id = c.conversation_id
     ORDER BY m.conversation_seq DESC LIMIT 1)";

const STATE_RESERVED: i64 = 0;
const STATE_COMMITTED: i64 = 1;
const WATERMARK_KEY: &str = "archive_watermark";
/// `meta` key of [`HotStore::archive_identity`].
const ARCHIVE_IDENTITY_KEY: &str = "archive_identity";

/// The page size of a new `hot.db`, bytes (an existing file keeps the page size it was made
/// with, e.g. SQLite's default 4,096).
///
/// Why 1 KiB, not SQLite's 4 KiB: a SEND's row goes at the end of `message` (time order), but
/// its `(tenant, conversation_id, conversation_seq)` key lands in a randomly placed leaf of that
/// index, and every commit writes each page it touched whole, as one WAL frame. In `bench
/// chat` (`hot-only`, 10,000 sends/s, 10,000 conversations) 61 % of the WAL's frames were
/// leaves of that index (87,535 of 143,731 in one WAL, ~1,000 distinct leaves each written
/// ~86 times), i.e. some 4 KiB of log per ~60-byte key. At 1 KiB those frames shrink fourfold:
/// the data disk took 13.0–14.7 instead of 18.4–19.6 KiB per message (`hot-only`, 10k, three
/// interleaved pairs; `tiered` 17.3–18.2 instead of 21.2–23.1) and `hot.db` 1,361 instead of
/// 1,563 B per message (1 KiB bodies: SQLite keeps ~110 bytes of such a row in its leaf, eight
/// to a leaf, and fills one overflow page with the rest, where three rows shared a 4 KiB page
/// with ~600 bytes to spare), at no CPU cost beyond the noise (on tmpfs the server took
/// 1.07–1.10 against 1.04–1.10 cores). The archive keeps 4 KiB pages: at 1 KiB its writer took more
/// CPU.
pub const HOT_PAGE_SIZE: u32 = 1024;

/// Hot store and outbox of the embedded default (see the module docs).
#[derive(Debug)]
pub struct SqliteHot {
    pub(super) writer: GroupWriter,
    pub(super) reads: ReadPool,
    /// The archiver's outbox reads ([`crate::ports::Outbox::fetch`]), on a background thread
    /// of their own.
    pub(super) outbox_reads: ReadThread,
    /// Client dedup's in-memory index, used by writer jobs only (see [`super::dedup`]).
    dedup: Arc<Mutex<DedupIndex>>,
}

impl SqliteHot {
    /// Opens (creating if needed) `path`; `max_batch` bounds how many sends share one commit.
    /// Reads the client dedup entries of the window into memory (see [`super::dedup`]: a few
    /// seconds for millions of entries).
    pub fn open(path: &Path, max_batch: usize) -> Result<Self> {
        Self::open_unnamed(path, max_batch).map_err(|e| super::opening(path, e))
    }

    fn open_unnamed(path: &Path, max_batch: usize) -> Result<Self> {
        let conn = open_rw_paged(path, HOT_PAGE_SIZE)?;
        migrate_sqlite(&conn, path, &migrations::HOT)?;
        let dedup = Arc::new(Mutex::new(DedupIndex::load(
            &conn,
            crate::config::DEFAULT_DEDUP_MEMORY_KEYS,
        )?));
        let index = Arc::clone(&dedup);
        let reload = move |conn: &Connection| {
            if let Err(error) = dedup::lock(&index).reload(conn) {
                // Marked stale: every job that needs it fails before writing until a rebuild
                // succeeds (`DedupIndex::ready`).
                tracing::error!(%error, "could not rebuild the dedup index after a rollback");
            }
        };
        let writer =
            GroupWriter::start_with_rollback_hook("chat-hot", conn, max_batch, Box::new(reload));
        let reads = ReadPool::open(path, 8)?;
        let outbox_reads = ReadThread::open(path, "outbox")?;
        Ok(Self {
            writer,
            reads,
            outbox_reads,
            dedup,
        })
    }

    /// Bounds the client dedup keys held in memory (default
    /// [`crate::config::DEFAULT_DEDUP_MEMORY_KEYS`]); past it the oldest move to an on-disk
    /// index during the trimmer's pass.
    #[must_use]
    pub fn with_dedup_memory_keys(self, keys: usize) -> Self {
        dedup::lock(&self.dedup).set_memory_keys(keys);
        self
    }

    /// Stops the writer after the queued commits (used at shutdown).
    pub fn close(&mut self) {
        self.writer.shutdown();
    }
}

/// Allocates the next seq: [`LATEST_SEQ`] + 1. Runs on the writer, so no other allocation
/// comes between it and the insert of the message row that records it. Returns the next seq of
/// a conversation, and the commit time of its latest message still in the
/// hot tier (0 if none): a new message is dated no earlier ([`HotStore::reserve`]). Both come
/// from seeks on the `(tenant, conversation_id, conversation_seq)` index. A conversation whose
/// hot messages were all trimmed has nothing later than the watermark, which the clock
/// observed at start ([`HotStore::clock_high_water`]).
fn allocate_seq(conn: &Connection, tenant: &str, conversation_id: &str) -> Result<(u64, i64)> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {LATEST_SEQ} + 1, coalesce({LATEST_AT}, 0) FROM conversation c
         WHERE c.tenant = ?1 AND c.conversation_id = ?2"
    ))?;
    stmt.query_row(params![tenant, conversation_id], |r| {
        Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)?))
    })
    .optional()?
    .ok_or_else(|| ChatError::UnknownConversation(conversation_id.to_owned()))
}

fn insert_message(
    conn: &Connection,
    r: &MessageRecord,
    state: i64,
    trim_score: Option<i64>,
) -> Result<()> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO message (tenant, conversation_id, conversation_seq, message_id, sender,
             client_msg_id, body, class, committed_at, expires_at, state, trim_score)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    )?;
    stmt.execute(params![
        r.tenant,
        r.conversation_id,
        r.conversation_seq as i64,
        r.message_id,
        r.sender,
        r.client_msg_id,
        r.body,
        r.class.code(),
        r.committed_at_ms,
        r.expires_at_ms,
        state,
        trim_score
    ])?;
    Ok(())
}

pub(super) fn meta_get(conn: &Connection, key: &str) -> Result<Option<i64>> {
    Ok(conn
        .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
        .optional()?)
}

/// Sets `meta`'s `key` to `value` (consumer positions, the outbox's `high` while it is empty).
pub(super) fn meta_set(conn: &Connection, key: &str, value: i64) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO meta (key, value) VALUES (?1, ?2)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )?
    .execute(params![key, value])?;
    Ok(())
}

#[async_trait]
impl FusedCommit for SqliteHot {
    async fn commit_fused(
        &self,
        cmd: SendCommand,
        clock: &SharedClock,
        params: CommitParams,
        with_outbox: bool,
    ) -> Result<SendOutcome> {
        let clock = Arc::clone(clock);
        let index = Arc::clone(&self.dedup);
        // Unguarded (no savepoint): every early answer (duplicate, unknown conversation) comes
        // before the first write; what could fail later dooms the group transaction anyway.
        self.writer
            .write_unguarded(move |conn| {
                let now = clock.now_ms();
                let mut index = dedup::lock_for_job(&index, conn)?;
                if let Some(ack) = dedup::lookup(conn, &index, DedupKey::of_send(&cmd), now)? {
                    return Ok(SendOutcome::Duplicate(ack));
                }
                let (seq, latest_at) = allocate_seq(conn, &cmd.tenant, &cmd.conversation_id)?;
                let now = if latest_at > now {
                    clock.observe(latest_at);
                    latest_at
                } else {
                    now
                };
                let record = cmd.into_record(seq, now);
                // Without an outbox (hot-only mode) nothing will ever be archived, so no trim
                // candidate is registered: history stays hot, and a later switch to tiered
                // mode can never trim a message that was not archived.
                let trim_score = with_outbox.then_some(now + params.hot_window_ms);
                insert_message(conn, &record, STATE_COMMITTED, trim_score)?;
                dedup::record(conn, &mut index, &record, now + params.dedup_window_ms)?;
                if with_outbox {
                    outbox::append_ref(conn, &record, now)?;
                }
                Ok(SendOutcome::Committed(record))
            })
            .await
    }
}

#[async_trait]
impl HotStore for SqliteHot {
    async fn create_conversation(
        &self,
        tenant: &str,
        conversation_id: &str,
        members: &[String],
        listing_id: Option<u64>,
        now_ms: i64,
    ) -> Result<bool> {
        let (tenant, cid, members) = (
            tenant.to_owned(),
            conversation_id.to_owned(),
            members.to_vec(),
        );
        let members_json = serde_json::to_string(&members)
            .map_err(|e| ChatError::Invalid(format!("members: {e}")))?;
        self.writer
            .write(move |conn| {
                let created = conn.execute(
                    "INSERT OR IGNORE INTO conversation
                         (tenant, conversation_id, members, listing_id, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![
                        tenant,
                        cid,
                        members_json,
                        listing_id.map(|l| l as i64),
                        now_ms
                    ],
                )? == 1;
                // One transaction: an existing conversation has all its memberships already.
                if created {
                    let mut stmt = conn.prepare_cached(
                        "INSERT INTO member (tenant, user, conversation_id) VALUES (?1, ?2, ?3)",
                    )?;
                    for m in &members {
                        stmt.execute(params![tenant, m, cid])?;
                    }
                }
                Ok::<_, ChatError>(created)
            })
            .await
    }

    async fn conversation(
        &self,
        tenant: &str,
        conversation_id: &str,
    ) -> Result<Option<ConversationMeta>> {
        let (tenant, cid) = (tenant.to_owned(), conversation_id.to_owned());
        self.reads
            .read(move |conn| {
                let row = conn
                    .prepare_cached(&format!(
                        "SELECT c.members, c.listing_id, {LATEST_SEQ}, c.floor, {LATEST_AT}
                         FROM conversation c WHERE c.tenant = ?1 AND c.conversation_id = ?2"
                    ))?
                    .query_row(params![tenant, cid], |r| {
                        Ok((
                            r.get::<_, String>(0)?,
                            r.get::<_, Option<i64>>(1)?,
                            r.get::<_, i64>(2)?,
                            r.get::<_, i64>(3)?,
                            r.get::<_, Option<i64>>(4)?,
                        ))
                    })
                    .optional()?;
                let Some((members, listing_id, latest, floor, latest_at)) = row else {
                    return Ok(None);
                };
                let members: Vec<String> = serde_json::from_str(&members)
                    .map_err(|e| ChatError::Corrupt(format!("members of {cid}: {e}")))?;
                Ok(Some(ConversationMeta {
                    conversation_id: cid,
                    members,
                    listing_id: listing_id.map(|l| l as u64),
                    latest_seq: latest as u64,
                    latest_at_ms: latest_at,
                    floor: floor as u64,
                }))
            })
            .await
    }

    async fn reserve(
        &self,
        cmd: SendCommand,
        now_ms: i64,
        params: CommitParams,
    ) -> Result<Reservation> {
        let index = Arc::clone(&self.dedup);
        // Unguarded, like the fused commit: the early answers come before any write, and a
        // failure after writing rolls back the group (the dedup index is reloaded then).
        self.writer
            .write_unguarded(move |conn| {
                let mut index = dedup::lock_for_job(&index, conn)?;
                if let Some(ack) = dedup::lookup(conn, &index, DedupKey::of_send(&cmd), now_ms)? {
                    let pending = conn
                        .prepare_cached(&format!(
                            "SELECT {RECORD_COLUMNS} FROM message WHERE tenant = ?1
                             AND conversation_id = ?2 AND conversation_seq = ?3 AND state = ?4"
                        ))?
                        .query_row(
                            params![
                                cmd.tenant,
                                cmd.conversation_id,
                                ack.conversation_seq as i64,
                                STATE_RESERVED
                            ],
                            record_from_row,
                        )
                        .optional()?;
                    return Ok(match pending {
                        Some(record) => Reservation::Reserved {
                            record,
                            fresh: false,
                        },
                        None => Reservation::Committed(ack),
                    });
                }
                let (seq, latest_at) = allocate_seq(conn, &cmd.tenant, &cmd.conversation_id)?;
                let record = cmd.into_record(seq, now_ms.max(latest_at));
                insert_message(conn, &record, STATE_RESERVED, None)?;
                dedup::record(conn, &mut index, &record, now_ms + params.dedup_window_ms)?;
                Ok(Reservation::Reserved {
                    record,
                    fresh: true,
                })
            })
            .await
    }

    async fn mark_committed(
        &self,
        keys: &[RecordKey],
        now_ms: i64,
        params: CommitParams,
    ) -> Result<()> {
        let keys = keys.to_vec();
        self.writer
            .write(move |conn| {
                let mut stmt = conn.prepare_cached(
                    "UPDATE message SET state = ?1, trim_score = ?2
                     WHERE tenant = ?3 AND conversation_id = ?4 AND conversation_seq = ?5
                       AND state = ?6",
                )?;
                for k in &keys {
                    stmt.execute(params![
                        STATE_COMMITTED,
                        now_ms + params.hot_window_ms,
                        k.tenant,
                        k.conversation_id,
                        k.conversation_seq as i64,
                        STATE_RESERVED
                    ])?;
                }
                Ok(())
            })
            .await
    }

    async fn stale_reserved(
        &self,
        lease: &ShardLease,
        reserved_before_ms: i64,
        limit: usize,
    ) -> Result<Vec<MessageRecord>> {
        only_shard(lease.shard)?;
        self.reads
            .read(move |conn| {
                let mut stmt = conn.prepare_cached(&format!(
                    "SELECT {RECORD_COLUMNS} FROM message
                     WHERE state = {STATE_RESERVED} AND committed_at <= ?1
                     ORDER BY committed_at LIMIT ?2"
                ))?;
                let rows =
                    stmt.query_map(params![reserved_before_ms, limit as i64], record_from_row)?;
                Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
            })
            .await
    }

    async fn hot_slice(
        &self,
        tenant: &str,
        conversation_id: &str,
        lo: u64,
        hi: u64,
        now_ms: i64,
    ) -> Result<HotSlice> {
        let (tenant, cid) = (tenant.to_owned(), conversation_id.to_owned());
        self.reads
            .read(move |conn| {
                let tx = conn.unchecked_transaction()?;
                let (floor, latest) = floor_and_latest(&tx, &tenant, &cid)?;
                let lo = lo.max(floor + 1);
                let mut stmt = tx.prepare_cached(&format!(
                    "SELECT {RECORD_COLUMNS} FROM message
                     WHERE tenant = ?1 AND conversation_id = ?2
                       AND conversation_seq BETWEEN ?3 AND ?4 AND state = {STATE_COMMITTED}
                       AND (expires_at IS NULL OR expires_at > ?5)
                     ORDER BY conversation_seq"
                ))?;
                let records = stmt
                    .query_map(
                        params![tenant, cid, lo as i64, hi as i64, now_ms],
                        record_from_row,
                    )?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                let earliest: Option<i64> = tx
                    .prepare_cached(&format!(
                        "SELECT min(conversation_seq) FROM message
                         WHERE tenant = ?1 AND conversation_id = ?2 AND conversation_seq > ?3
                           AND state = {STATE_COMMITTED}
                           AND (expires_at IS NULL OR expires_at > ?4)"
                    ))?
                    .query_row(params![tenant, cid, floor as i64, now_ms], |r| r.get(0))?;
                let held = held_rows(&tx, &tenant, &cid, lo, hi.min(latest))?;
                Ok(HotSlice {
                    floor,
                    latest_seq: latest,
                    records,
                    earliest_seq: earliest.map(|s| s as u64),
                    held,
                })
            })
            .await
    }

    async fn hot_unread(
        &self,
        tenant: &str,
        conversation_id: &str,
        user: &str,
        read_seq: u64,
        now_ms: i64,
    ) -> Result<HotUnread> {
        let (tenant, cid, user) = (
            tenant.to_owned(),
            conversation_id.to_owned(),
            user.to_owned(),
        );
        self.reads
            .read(move |conn| {
                let tx = conn.unchecked_transaction()?;
                let (floor, latest) = floor_and_latest(&tx, &tenant, &cid)?;
                let from = read_seq.max(floor);
                // One pass over the rows above `from` (none lie above `latest`): all of them
                // are held, the committed, unexpired ones of others are unread.
                let (held, unread): (i64, i64) = tx
                    .prepare_cached(&format!(
                        "SELECT count(*), coalesce(sum(state = {STATE_COMMITTED} AND sender <> ?4
                                 AND (expires_at IS NULL OR expires_at > ?5)), 0)
                         FROM message
                         WHERE tenant = ?1 AND conversation_id = ?2 AND conversation_seq > ?3"
                    ))?
                    .query_row(params![tenant, cid, from as i64, user, now_ms], |r| {
                        Ok((r.get(0)?, r.get(1)?))
                    })?;
                Ok(HotUnread {
                    floor,
                    latest_seq: latest,
                    unread_above_floor: unread as u64,
                    held: held as u64,
                })
            })
            .await
    }

    async fn set_read(
        &self,
        tenant: &str,
        conversation_id: &str,
        user: &str,
        seq: u64,
    ) -> Result<()> {
        let (tenant, cid, user) = (
            tenant.to_owned(),
            conversation_id.to_owned(),
            user.to_owned(),
        );
        self.writer
            .write(move |conn| {
                conn.execute(
                    "UPDATE member SET read_seq = max(read_seq, ?1)
                     WHERE tenant = ?2 AND user = ?3 AND conversation_id = ?4",
                    params![seq as i64, tenant, user, cid],
                )?;
                Ok(())
            })
            .await
    }

    async fn read_seq(&self, tenant: &str, conversation_id: &str, user: &str) -> Result<u64> {
        let (tenant, cid, user) = (
            tenant.to_owned(),
            conversation_id.to_owned(),
            user.to_owned(),
        );
        self.reads
            .read(move |conn| {
                let v: Option<i64> = conn
                    .prepare_cached(
                        "SELECT read_seq FROM member WHERE tenant = ?1 AND user = ?2 AND conversation_id = ?3",
                    )?
                    .query_row(params![tenant, user, cid], |r| r.get(0))
                    .optional()?;
                Ok(v.unwrap_or(0) as u64)
            })
            .await
    }

    async fn memberships(&self, tenant: &str, user: &str) -> Result<Vec<Membership>> {
        let (tenant, user) = (tenant.to_owned(), user.to_owned());
        self.reads
            .read(move |conn| {
                let mut stmt = conn.prepare_cached(
                    "SELECT conversation_id, read_seq FROM member WHERE tenant = ?1 AND user = ?2
                     ORDER BY conversation_id",
                )?;
                let rows = stmt.query_map(params![tenant, user], |r| {
                    Ok(Membership {
                        conversation_id: r.get(0)?,
                        read_seq: r.get::<_, i64>(1)? as u64,
                    })
                })?;
                Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
            })
            .await
    }

    async fn watermarks(&self) -> Result<BTreeMap<u32, i64>> {
        self.reads
            .read(|conn| {
                let mut stmt = conn.prepare_cached(
                    "SELECT key, value FROM meta WHERE key = ?1 OR key LIKE ?1 || ':%'",
                )?;
                let rows = stmt.query_map([WATERMARK_KEY], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
                })?;
                let mut out = BTreeMap::new();
                for row in rows {
                    let (key, t) = row?;
                    if let Some(p) = partition_of_key(WATERMARK_KEY, &key) {
                        out.insert(p, t);
                    }
                }
                Ok(out)
            })
            .await
    }

    /// Nothing to do: one process uses the file, and its clock never goes back (see the port).
    async fn raise_clock_floor(&self, _t_ms: i64) -> Result<()> {
        Ok(())
    }

    /// The watermark, or the commit time of the newest `message` row if later: rows are
    /// appended in commit order (rowid), and a trimmed message's time is behind the watermark.
    async fn clock_high_water(&self) -> Result<Option<i64>> {
        self.reads
            .read(|conn| {
                let newest: Option<i64> = conn
                    .prepare_cached("SELECT committed_at FROM message ORDER BY rowid DESC LIMIT 1")?
                    .query_row([], |r| r.get(0))
                    .optional()?;
                let watermark: Option<i64> = conn
                    .prepare_cached(
                        "SELECT max(value) FROM meta WHERE key = ?1 OR key LIKE ?1 || ':%'",
                    )?
                    .query_row([WATERMARK_KEY], |r| r.get(0))?;
                Ok(newest.max(watermark))
            })
            .await
    }

    async fn archive_identity(&self) -> Result<Option<i64>> {
        self.reads
            .read(|conn| meta_get(conn, ARCHIVE_IDENTITY_KEY))
            .await
    }

    async fn record_archive_identity(&self, id: i64) -> Result<()> {
        self.writer
            .write(move |conn| {
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO NOTHING",
                    params![ARCHIVE_IDENTITY_KEY, id],
                )?;
                Ok(())
            })
            .await
    }

    async fn publish_watermark(&self, partition: u32, t_ms: i64) -> Result<()> {
        let key = partition_key(WATERMARK_KEY, partition);
        self.writer
            .write(move |conn| {
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES (?1, ?2)
                     ON CONFLICT (key) DO UPDATE SET value = max(value, excluded.value)",
                    params![key, t_ms],
                )?;
                Ok(())
            })
            .await
    }

    async fn hot_window_floor(&self, hot_window_ms: i64, now_ms: i64) -> Result<i64> {
        self.writer
            .write(move |conn| {
                // On the writer, so nothing records a window between this read and the write.
                let recorded = meta_get(conn, HOT_WINDOW_FLOOR_KEY)?;
                let floor = match recorded {
                    Some(recorded) => recorded.min(hot_window_ms),
                    None => {
                        let oldest: Option<i64> = conn.query_row(
                            "SELECT min(trim_score) FROM message WHERE trim_score IS NOT NULL",
                            [],
                            |r| r.get(0),
                        )?;
                        first_recorded_window(hot_window_ms, oldest, now_ms)
                    }
                };
                // Written only when it moved (no page written otherwise).
                if recorded != Some(floor) {
                    meta_set(conn, HOT_WINDOW_FLOOR_KEY, floor)?;
                }
                Ok(floor)
            })
            .await
    }

    async fn trim(
        &self,
        lease: &ShardLease,
        cutoff_ms: i64,
        batch: usize,
    ) -> Result<Vec<RecordKey>> {
        only_shard(lease.shard)?;
        self.writer
            .write(move |conn| {
                let keys = conn
                    .prepare_cached(
                        "SELECT tenant, conversation_id, conversation_seq FROM message
                         WHERE trim_score IS NOT NULL AND trim_score <= ?1
                         ORDER BY trim_score LIMIT ?2",
                    )?
                    .query_map(params![cutoff_ms, batch as i64], |r| {
                        Ok(RecordKey {
                            tenant: r.get(0)?,
                            conversation_id: r.get(1)?,
                            conversation_seq: r.get::<_, i64>(2)? as u64,
                        })
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                let mut delete = conn.prepare_cached(
                    "DELETE FROM message
                     WHERE tenant = ?1 AND conversation_id = ?2 AND conversation_seq = ?3",
                )?;
                // F and the seq high-water mark rise together (see LATEST_SEQ).
                let mut raise = conn.prepare_cached(
                    "UPDATE conversation SET floor = max(floor, ?3), latest_seq = max(latest_seq, ?3)
                     WHERE tenant = ?1 AND conversation_id = ?2",
                )?;
                for k in &keys {
                    let p = params![k.tenant, k.conversation_id, k.conversation_seq as i64];
                    delete.execute(p)?;
                    raise.execute(p)?;
                }
                Ok(keys)
            })
            .await
    }

    /// One: the file is one process's (the data directory's lock).
    fn shards(&self) -> u32 {
        1
    }

    /// Always granted, token 1: one process uses the file.
    async fn lease_shard(&self, shard: u32, _holder: &str, _ttl_ms: u64) -> Result<Option<u64>> {
        only_shard(shard)?;
        Ok(Some(1))
    }

    async fn release_shard(&self, lease: &ShardLease) -> Result<()> {
        only_shard(lease.shard)
    }

    async fn purge_dedup(&self, now_ms: i64, batch: usize) -> Result<usize> {
        let index = Arc::clone(&self.dedup);
        // Unguarded: should it fail after writing, its group rolls back and the writer's
        // rollback hook reloads the index (see `super::dedup`).
        self.writer
            .write_unguarded(move |conn| {
                let mut index = dedup::lock_for_job(&index, conn)?;
                dedup::purge(conn, &mut index, now_ms, batch)
            })
            .await
    }

    async fn untracked_committed(&self, limit: usize) -> Result<Vec<MessageRecord>> {
        self.reads
            .read(move |conn| {
                let mut stmt = conn.prepare_cached(&format!(
                    "SELECT {RECORD_COLUMNS} FROM message
                     WHERE state = {STATE_COMMITTED} AND trim_score IS NULL LIMIT ?1"
                ))?;
                let rows = stmt.query_map([limit as i64], record_from_row)?;
                Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
            })
            .await
    }

    async fn register_trim_candidates(
        &self,
        keys: &[RecordKey],
        now_ms: i64,
        params: CommitParams,
    ) -> Result<()> {
        let keys = keys.to_vec();
        let score_ms = now_ms + params.hot_window_ms;
        self.writer
            .write(move |conn| {
                let mut stmt = conn.prepare_cached(
                    "UPDATE message SET trim_score = ?1
                     WHERE tenant = ?2 AND conversation_id = ?3 AND conversation_seq = ?4
                       AND state = ?5 AND trim_score IS NULL",
                )?;
                for k in &keys {
                    stmt.execute(params![
                        score_ms,
                        k.tenant,
                        k.conversation_id,
                        k.conversation_seq as i64,
                        STATE_COMMITTED
                    ])?;
                }
                Ok(())
            })
            .await
    }

    /// In commit order (rowid); the cursor is the last rowid.
    async fn archivable_page(
        &self,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<(Vec<MessageRecord>, Option<String>)> {
        let after: i64 = match &cursor {
            None => 0,
            Some(c) => c
                .parse()
                .map_err(|_| ChatError::Invalid(format!("bad backfill cursor {c:?}")))?,
        };
        let limit = limit.max(1);
        self.reads
            .read(move |conn| {
                let mut stmt = conn.prepare_cached(&format!(
                    "SELECT rowid, {RECORD_COLUMNS} FROM message
                     WHERE rowid > ?1 AND state = ?2 AND trim_score IS NOT NULL
                     ORDER BY rowid LIMIT ?3"
                ))?;
                let mut last = after;
                let mut records = Vec::new();
                let rows = stmt.query_map(params![after, STATE_COMMITTED, limit as i64], |r| {
                    Ok((r.get::<_, i64>(0)?, super::record_from_row_at(r, 1)?))
                })?;
                for row in rows {
                    let (rowid, record) = row?;
                    last = rowid;
                    records.push(record);
                }
                let next = (records.len() == limit).then(|| last.to_string());
                Ok((records, next))
            })
            .await
    }

    async fn hot_len(&self) -> Result<u64> {
        self.reads
            .read(|conn| {
                let n: i64 = conn.query_row("SELECT count(*) FROM message", [], |r| r.get(0))?;
                Ok(n as u64)
            })
            .await
    }
}

/// How many rows (any state, expired ones too) the hot tier holds with `lo ≤ seq ≤ hi`: one
/// seek and a walk of the `(tenant, conversation_id, conversation_seq)` key.
fn held_rows(conn: &Connection, tenant: &str, cid: &str, lo: u64, hi: u64) -> Result<u64> {
    if lo > hi {
        return Ok(0);
    }
    let n: i64 = conn
        .prepare_cached(
            "SELECT count(*) FROM message
             WHERE tenant = ?1 AND conversation_id = ?2 AND conversation_seq BETWEEN ?3 AND ?4",
        )?
        .query_row(params![tenant, cid, lo as i64, hi as i64], |r| r.get(0))?;
    Ok(n as u64)
}

fn floor_and_latest(conn: &Connection, tenant: &str, cid: &str) -> Result<(u64, u64)> {
    conn.prepare_cached(&format!(
        "SELECT c.floor, {LATEST_SEQ} FROM conversation c
         WHERE c.tenant = ?1 AND c.conversation_id = ?2"
    ))?
    .query_row(params![tenant, cid], |r| {
        Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64))
    })
    .optional()?
    .ok_or_else(|| ChatError::UnknownConversation(cid.to_owned()))
}

/// The embedded hot store has shard 0 only.
fn only_shard(shard: u32) -> Result<()> {
    if shard == 0 {
        Ok(())
    } else {
        Err(ChatError::Invalid(format!(
            "the embedded hot store has one shard (0), not {shard}"
        )))
    }
}
