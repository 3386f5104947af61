//! The three ports of chat (DESIGN.md part A, "Backends"): hot store, outbox, archive.
//!
//! Each is a small trait used as `Arc<dyn …>`. The rules live in shared code
//! ([`crate::commit`], [`crate::archiver`], [`crate::trimmer`], [`crate::reads`]); a backend only
//! stores. The embedded default implements all three on SQLite ([`crate::sqlite`]); production
//! engines (Redis, Kafka protocol, MariaDB) implement the same traits and pass the same
//! conformance suite.

use std::collections::BTreeMap;

use async_trait::async_trait;
use tidemark_core::clock::SharedClock;

use crate::error::Result;
use crate::model::{
    ConversationMeta, HotSlice, HotUnread, IndexEntry, MessageRecord, RecordKey, Reservation,
    SendCommand, SendOutcome,
};

/// The name of the hot store's meta entry behind [`HotStore::hot_window_floor`].
pub(crate) const HOT_WINDOW_FLOOR_KEY: &str = "hot_window_floor";

/// A node's lease on one shard of the hot store ([`HotStore::lease_shard`]): what a fenced
/// step presents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardLease {
    /// The shard (`0..HotStore::shards()`).
    pub shard: u32,
    /// Who holds it (one name per node and process).
    pub holder: String,
    /// The fencing token it was granted with.
    pub token: u64,
    /// How long a successful fenced step extends it, ms.
    pub ttl_ms: u64,
}

/// Commit-path timing knobs passed to the stores (all in ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitParams {
    /// How long `(sender, client_msg_id)` stays deduplicated.
    pub dedup_window_ms: i64,
    /// The hot window: a trim candidate's score is `commit time + hot_window_ms`.
    pub hot_window_ms: i64,
}

/// The hot tier: conversations, seq allocation, client dedup, recent history, floors, the
/// archive watermark.
#[async_trait]
pub trait HotStore: Send + Sync + std::fmt::Debug {
    /// Creates the conversation `conversation_id` (chosen by the caller, who also validated
    /// the members) unless this tenant already has one of that id: `true` if it was created,
    /// `false` if it existed, in which case its members, listing and messages are left as they
    /// are. Either way the memberships of its stored members are there when this returns (a
    /// backend that writes them apart from the conversation rewrites them, idempotent, so that
    /// a retry completes a creation a crash cut short); a caller's other members never get one.
    async fn create_conversation(
        &self,
        tenant: &str,
        conversation_id: &str,
        members: &[String],
        listing_id: Option<u64>,
        now_ms: i64,
    ) -> Result<bool>;

    /// The conversation, or `None` if this tenant has no such conversation.
    async fn conversation(
        &self,
        tenant: &str,
        conversation_id: &str,
    ) -> Result<Option<ConversationMeta>>;

    /// Step 1 of the commit (seed 000 `reserve_and_record`), atomic: client dedup lookup, seq
    /// allocation, record write in state RESERVED. The conversation exists and the sender is a
    /// member (checked by the caller; membership never changes).
    ///
    /// The record's `committed_at` is `now_ms`, or the conversation's latest `committed_at` if
    /// that is later (the HLC receive rule, seed 000 step 3): along a conversation's seqs it
    /// never decreases, whatever the clocks of the nodes that committed them. The caller's
    /// clock observes the time returned.
    async fn reserve(
        &self,
        cmd: SendCommand,
        now_ms: i64,
        params: CommitParams,
    ) -> Result<Reservation>;

    /// Step 3 of the commit (seed 000 `mark_published_and_committed`), atomic per record: mark
    /// COMMITTED, add to the hot history index, register a trim candidate with score
    /// `max(now_ms, clock floor) + hot_window_ms` ([`HotStore::raise_clock_floor`]), and raise
    /// the floor to that commit time. Idempotent: already committed records are left as they
    /// are.
    async fn mark_committed(
        &self,
        keys: &[RecordKey],
        now_ms: i64,
        params: CommitParams,
    ) -> Result<()>;

    /// Records of `lease`'s shard still RESERVED whose reserve time is ≤ `reserved_before_ms`
    /// (for the recovery worker), at most `limit`. Fenced: [`crate::ChatError::LeaseLost`] if
    /// the lease is no longer held (checked in the same atomic step); a successful call renews
    /// it.
    async fn stale_reserved(
        &self,
        lease: &ShardLease,
        reserved_before_ms: i64,
        limit: usize,
    ) -> Result<Vec<MessageRecord>>;

    /// Committed, unexpired records with `lo ≤ seq ≤ hi` and `seq > F`, read atomically with
    /// F, the latest seq and how many seqs of the range the tier holds ([`HotSlice::held`]).
    async fn hot_slice(
        &self,
        tenant: &str,
        conversation_id: &str,
        lo: u64,
        hi: u64,
        now_ms: i64,
    ) -> Result<HotSlice>;

    /// Unread messages above `max(read_seq, F)` not sent by `user`, read atomically with F
    /// and how many seqs above `max(read_seq, F)` the tier holds ([`HotUnread::held`]).
    async fn hot_unread(
        &self,
        tenant: &str,
        conversation_id: &str,
        user: &str,
        read_seq: u64,
        now_ms: i64,
    ) -> Result<HotUnread>;

    /// Sets `user`'s read pointer (it never moves backwards).
    async fn set_read(
        &self,
        tenant: &str,
        conversation_id: &str,
        user: &str,
        seq: u64,
    ) -> Result<()>;

    /// The user's read pointer in a conversation (0 if never set).
    async fn read_seq(&self, tenant: &str, conversation_id: &str, user: &str) -> Result<u64>;

    /// Every conversation the user is a member of, with the read pointer.
    async fn memberships(&self, tenant: &str, user: &str) -> Result<Vec<super::model::Membership>>;

    /// The published archive watermark of each outbox partition that has one: partition →
    /// `T_p` (Unix ms). The trimmer's T is the least over all partitions
    /// ([`crate::archiver::watermark`]).
    async fn watermarks(&self) -> Result<BTreeMap<u32, i64>>;

    /// Publishes `T_p` of outbox `partition`; it never moves backwards.
    async fn publish_watermark(&self, partition: u32, t_ms: i64) -> Result<()>;

    /// Records that trim candidates are scored with `hot_window_ms` from now on and returns the
    /// smallest hot window ever recorded in this store (ms), this one included: it never grows.
    /// The trimmer's watermark bound rests on it ([`crate::trimmer::trim_cutoff`]), so a window
    /// must be recorded before the first candidate is scored with it;
    /// [`crate::service::ChatService`] records its own before its first SEND and before its
    /// workers start. The first call in a store that already holds candidates (scored by a
    /// build that recorded no windows) records
    /// [`crate::trimmer::first_recorded_window`] instead, from the oldest candidate's score and
    /// `now_ms`. Idempotent.
    async fn hot_window_floor(&self, hot_window_ms: i64, now_ms: i64) -> Result<i64>;

    /// Deletes up to `batch` trim candidates of `lease`'s shard with score ≤ `cutoff_ms` from
    /// the hot tier and raises each conversation's floor F to the highest trimmed seq. Returns
    /// the records trimmed (their keys). Fenced: [`crate::ChatError::LeaseLost`], with nothing
    /// deleted, if the lease is no longer held (checked in the same atomic step, so a worker
    /// paused past its lease cannot trim); a successful call renews it.
    async fn trim(
        &self,
        lease: &ShardLease,
        cutoff_ms: i64,
        batch: usize,
    ) -> Result<Vec<RecordKey>>;

    /// The shards the hot tier's trimming and recovery are split into, each worked by one
    /// node at a time under a lease (Redis: the [`crate::redis::keys::SHARDS`] hash tags;
    /// SQLite: one).
    fn shards(&self) -> u32;

    /// Takes or renews `holder`'s lease on `shard` for `ttl_ms` (ms): its fencing token if
    /// `holder` holds it now, `None` while another holder's lease runs. A new holder gets a
    /// token greater than every earlier holder's (DESIGN.md "Many nodes": leases with fencing
    /// tokens; a store one process uses always grants it).
    async fn lease_shard(&self, shard: u32, holder: &str, ttl_ms: u64) -> Result<Option<u64>>;

    /// Gives the lease up if it is still `lease` (a node that stops), so that another node
    /// takes the shard at once rather than after the lease time.
    async fn release_shard(&self, lease: &ShardLease) -> Result<()>;

    /// Client-dedup upkeep, at most `batch` entries: drops entries older than the dedup window
    /// (and a store that indexes keys in memory may move its oldest to disk); returns how many
    /// entries it dropped or moved — `batch` means "call again".
    async fn purge_dedup(&self, now_ms: i64, batch: usize) -> Result<usize>;

    /// Committed records that have no trim candidate (written in `hot-only` mode, so never
    /// sent to the outbox), at most `limit`.
    async fn untracked_committed(&self, limit: usize) -> Result<Vec<MessageRecord>>;

    /// Registers trim candidates for committed records that have none, scored as
    /// [`HotStore::mark_committed`] scores them: `max(now_ms, clock floor) + hot_window_ms`.
    async fn register_trim_candidates(
        &self,
        keys: &[RecordKey],
        now_ms: i64,
        params: CommitParams,
    ) -> Result<()>;

    /// Raises the clock floor to `t_ms` (Unix ms; it never moves back): every trim candidate
    /// scored after this returns, by any node, is scored from a commit time ≥ `t_ms`.
    ///
    /// The archiver raises it to its `T0` before it reads the outbox's `H0`
    /// ([`crate::archiver`]): a message whose outbox append completed after that read is marked
    /// committed later still, so it cannot score below `T0` — not even on a node whose clock
    /// lags the archiver's — and the watermark `T0` cannot let it be trimmed unarchived
    /// (DESIGN.md "Many nodes": hybrid logical clocks). A store that only one process uses
    /// (SQLite) does nothing: that process's commits and its archiver read one
    /// [`tidemark_core::hlc::HybridClock`], which never goes back.
    async fn raise_clock_floor(&self, t_ms: i64) -> Result<()>;

    /// The highest time the store holds (Unix ms): the watermark, the latest commit times and
    /// clock floors; `None` if it holds none. A node's clock observes it before the node's first
    /// commit ([`crate::service::ChatService`]), so times never go back across a restart, even
    /// one with the wall clock stepped back.
    async fn clock_high_water(&self) -> Result<Option<i64>>;

    /// One page of the COMMITTED records that have a trim candidate — the hot history the
    /// outbox carried, which a backfill copies into the archive ([`crate::backfill`]) — in an
    /// order that stays stable while the store changes: `cursor` `None` for the first page,
    /// then the cursor each page returns, until it returns `None`. A page holds at most
    /// `limit` records (it may hold fewer, even none, before the last). Records trimmed
    /// meanwhile are skipped (they were archived first); records committed meanwhile may be
    /// missed (the outbox still holds them).
    async fn archivable_page(
        &self,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<(Vec<MessageRecord>, Option<String>)>;

    /// Number of messages currently held in the hot tier.
    async fn hot_len(&self) -> Result<u64>;

    /// The [`Archive::identity`] of the archive this hot tier's history is archived into, once
    /// recorded ([`crate::stores::check_archive`]).
    async fn archive_identity(&self) -> Result<Option<i64>>;

    /// Records `id` as [`HotStore::archive_identity`] unless one is recorded already.
    async fn record_archive_identity(&self, id: i64) -> Result<()>;
}

/// A store that holds the hot tier and the outbox together and can run all three commit steps
/// as one transaction (the embedded default; DESIGN.md: "all of this is one transaction").
#[async_trait]
pub trait FusedCommit: Send + Sync + std::fmt::Debug {
    /// Dedup lookup, seq allocation, record write, outbox append (if `with_outbox`), COMMITTED,
    /// hot index and trim candidate, in one durable transaction. The commit time is read from
    /// `clock` inside the transaction, so that [`Outbox::watermark_snapshot`] taken in the same
    /// serial order stays exact.
    async fn commit_fused(
        &self,
        cmd: SendCommand,
        clock: &SharedClock,
        params: CommitParams,
        with_outbox: bool,
    ) -> Result<SendOutcome>;
}

/// The outbox: a durable, replayable log of committed envelopes (canonical records), in
/// `partitions()` partitions. A conversation's records all go to one partition
/// ([`partition_of`]), in the order they were appended. Offsets are per partition and start at
/// 0; `low` is a partition's earliest retained offset, `high` the next one to be written. Every
/// call that names a partition fails with [`crate::ChatError::Invalid`] for one ≥ P.
#[async_trait]
pub trait Outbox: Send + Sync + std::fmt::Debug {
    /// The number of partitions P (≥ 1), fixed for the life of the log (`chat.outbox_partitions`
    /// when a broker's topic is created; the embedded outbox has one).
    fn partitions(&self) -> u32;

    /// The partitions this node's archivers own now, ascending (DESIGN.md "Many nodes"): on a
    /// Kafka-protocol broker, those the archivers' consumer group assigns this node (joining it
    /// on the first call, which waits for the first assignment), every one where one process
    /// owns the log (the embedded outbox). From then on the archiver's position is stored
    /// only for a partition the node still owns: [`crate::ChatError::PartitionLost`]
    /// otherwise.
    async fn owned_partitions(&self) -> Result<Vec<u32>>;

    /// Appends envelopes, each to its conversation's partition; returns once they are
    /// durable. Duplicates are allowed.
    async fn append(&self, records: &[MessageRecord]) -> Result<()>;

    /// `(low, high)` of `partition`.
    async fn offsets(&self, partition: u32) -> Result<(u64, u64)>;

    /// A `(T0, H0)` pair of `partition` for the watermark rule: every record of it whose commit
    /// completed before `T0` (Unix ms, read from `clock`) has an offset below `H0`.
    async fn watermark_snapshot(&self, partition: u32, clock: &SharedClock) -> Result<(i64, u64)>;

    /// Up to `max` records of `partition` from offset `from` on, with their offsets, ascending.
    async fn fetch(
        &self,
        partition: u32,
        from: u64,
        max: usize,
    ) -> Result<Vec<(u64, MessageRecord)>>;

    /// The consumer's stored position in `partition` (next offset to read), if any.
    async fn position(&self, consumer: &str, partition: u32) -> Result<Option<u64>>;

    /// Stores the consumer's position in `partition`.
    async fn store_position(&self, consumer: &str, partition: u32, position: u64) -> Result<()>;

    /// Retention: drops a prefix of `partition` — the records from `low` on that lie below `below`
    /// and were appended before `older_than_ms` (Unix ms), stopping at the first that was not,
    /// and at most `max` of them; returns how many. The cost is bounded by `max`, not by the
    /// size of the log: the trimmer calls it every pass, and a day's outbox holds hundreds of
    /// millions of records. Never called with `below` past the archiver's stored
    /// position.
    async fn truncate(
        &self,
        partition: u32,
        below: u64,
        older_than_ms: i64,
        max: usize,
    ) -> Result<usize>;
}

/// The archive: message records and the history index, keyed
/// `(tenant, conversation, seq_bucket, conversation_seq)` (the embedded backend keeps records
/// in time order, unique by their time-ordered `message_id`, which a replay carries unchanged).
/// All writes are plain idempotent inserts; re-writing the same record is harmless.
#[async_trait]
pub trait Archive: Send + Sync + std::fmt::Debug {
    /// Writes message records (idempotent).
    async fn put_records(&self, records: &[MessageRecord]) -> Result<()>;

    /// Writes history-index entries (idempotent). Callers write the records first. `through`
    /// `(partition, offset)`: the archiver's batch reaches that offset of that outbox
    /// partition, recorded with the entries (on SQLite in their transaction) as
    /// [`Archive::archived_through`]; `None` for the writes of `sync-archive`'s SENDs, which
    /// are no batch of the outbox.
    async fn put_index(&self, entries: &[IndexEntry], through: Option<(u32, u64)>) -> Result<()>;

    /// Index entries with `lo ≤ seq ≤ hi`, ascending, expired ones included: an ephemeral
    /// message's entry outlives its record as a tombstone (its `expires_at_ms` says it
    /// expired), so that the archived seqs stay dense and a reader tells an expired message
    /// from a lost one ([`crate::reads::archive_range`]; DESIGN.md part A "Reads": any missing
    /// record in a needed range fails the whole request).
    async fn index_range(
        &self,
        tenant: &str,
        conversation_id: &str,
        lo: u64,
        hi: u64,
    ) -> Result<Vec<IndexEntry>>;

    /// The records with these seqs that exist (any order; missing ones are simply absent).
    /// Callers ask for seqs they read from [`Archive::index_range`]: a backend may find a
    /// record through its index entry (the embedded one does, by `message_id`).
    async fn records(
        &self,
        tenant: &str,
        conversation_id: &str,
        seqs: &[u64],
    ) -> Result<Vec<MessageRecord>>;

    /// Lowest unexpired indexed seq of the conversation.
    async fn earliest_seq(
        &self,
        tenant: &str,
        conversation_id: &str,
        now_ms: i64,
    ) -> Result<Option<u64>>;

    /// Deletes up to `batch` records of ephemeral messages expired at `now_ms`; returns how
    /// many. Their index entries stay, as tombstones (see [`Archive::index_range`]). The
    /// trimmer passes a time [`crate::trimmer::EXPIRED_RECORD_GRACE`] back, so that a read
    /// that found an entry unexpired just before its expiry still finds its record.
    async fn purge_expired(&self, now_ms: i64, batch: usize) -> Result<usize>;

    /// The archive's identity: a random non-zero number it was given with its tables, the same
    /// for as long as it exists. The hot tier records it, so that a missing or replaced archive
    /// is refused at startup instead of reading as holes in history
    /// ([`crate::stores::check_archive`]).
    async fn identity(&self) -> Result<i64>;

    /// How far the archive holds every record and index entry of outbox `partition`: the last
    /// `through` given to [`Archive::put_index`] for it; `None` before its first batch
    /// (or in an archive that does not record it). Less than the archiver's stored position
    /// only in an archive restored from an older copy of itself
    /// ([`crate::archiver::resume_behind_archive`]).
    async fn archived_through(&self, partition: u32) -> Result<Option<u64>>;
}

/// A fresh [`Archive::identity`]: 63 random bits of a UUID v7, never 0.
pub fn fresh_archive_identity() -> i64 {
    (uuid::Uuid::now_v7().as_u64_pair().1 >> 1) as i64 | 1
}

/// The archive meta key of [`Archive::archived_through`] (per partition: [`partition_key`]).
pub const ARCHIVED_THROUGH: &str = "archived_through";

/// The name under which a per-partition value is stored (a meta key or field): `base` for
/// partition 0 — the name it had when the outbox had one partition — and `base:<partition>`
/// for the others.
pub fn partition_key(base: &str, partition: u32) -> String {
    if partition == 0 {
        base.to_owned()
    } else {
        format!("{base}:{partition}")
    }
}

/// The partition a name made by [`partition_key`] from `base` stands for; `None` for any
/// other name.
pub fn partition_of_key(base: &str, key: &str) -> Option<u32> {
    match key.strip_prefix(base)? {
        "" => Some(0),
        rest => rest.strip_prefix(':')?.parse().ok().filter(|p| *p != 0),
    }
}

/// The outbox partition of a conversation among `partitions` (≥ 1): FNV-1a (64 bit) of
/// `"<len(tenant)>:<tenant><len(cid)>:<cid>"` (byte lengths, so any tenant and id split back
/// unambiguously) modulo `partitions`. Stable across builds and backends: a conversation's
/// records stay in order in one partition for the life of the log.
pub fn partition_of(tenant: &str, conversation_id: &str, partitions: u32) -> u32 {
    let name = format!(
        "{}:{tenant}{}:{conversation_id}",
        tenant.len(),
        conversation_id.len()
    );
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % u64::from(partitions.max(1))) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_partition_names_round_trip() {
        assert_eq!(partition_key("watermark", 0), "watermark");
        assert_eq!(partition_key("watermark", 7), "watermark:7");
        for p in [0, 1, 7, 4_000_000_000] {
            assert_eq!(
                partition_of_key("watermark", &partition_key("watermark", p)),
                Some(p)
            );
        }
        for other in [
            "watermarks",
            "watermark:",
            "watermark:x",
            "watermark:0",
            "wm:1",
        ] {
            assert_eq!(partition_of_key("watermark", other), None, "{other}");
        }
    }

    #[test]
    fn a_conversation_keeps_its_partition() {
        assert_eq!(partition_of("t", "c", 1), 0);
        let spread: Vec<u32> = (0..12)
            .map(|i| partition_of("demo", &format!("c{i}"), 3))
            .collect();
        assert_eq!(spread, [0, 2, 2, 1, 2, 1, 1, 0, 2, 1, 1, 0]);
        // The name is length-prefixed: ("ab", "c") and ("a", "bc") are two conversations.
        assert_ne!(
            partition_of("ab", "c", 1_000_003),
            partition_of("a", "bc", 1_000_003)
        );
    }
}
