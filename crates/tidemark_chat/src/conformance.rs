//! One conformance suite per port (STYLE.md, object_store's `integration.rs`): each function
//! takes a fresh, empty store and checks the port's contract with exact values. Every backend's
//! tests call these unchanged — SQLite, Redis, the Kafka-protocol outbox and MariaDB
//! (`tests/conformance_*.rs`).
//! They panic (assert) on a violation.

use std::collections::BTreeMap;
use std::sync::Arc;

use tidemark_core::clock::{ManualClock, SharedClock};

use crate::archiver::watermark;
use crate::error::{ChatError, Result};
use crate::model::{
    IndexEntry, MessageClass, MessageRecord, RecordKey, Reservation, SendCommand, SendOutcome,
};
use crate::ports::{
    Archive, CommitParams, FusedCommit, HotStore, Outbox, ShardLease, partition_of,
};

const T0: i64 = 1_800_000_000_000;
const PARAMS: CommitParams = CommitParams {
    dedup_window_ms: 60_000,
    hot_window_ms: 10_000,
};

fn cmd(tenant: &str, cid: &str, sender: &str, key: &str) -> SendCommand {
    SendCommand {
        tenant: tenant.into(),
        conversation_id: cid.into(),
        sender: sender.into(),
        client_msg_id: key.into(),
        body: format!("body of {key}"),
        class: MessageClass::Standard,
    }
}

/// [`HotStore::trim`] over every shard, under leases taken for the suite: at most `batch` in
/// all.
async fn trim_all(hot: &dyn HotStore, cutoff_ms: i64, batch: usize) -> Result<Vec<RecordKey>> {
    let mut out = Vec::new();
    for lease in suite_leases(hot).await? {
        if out.len() >= batch {
            break;
        }
        out.extend(hot.trim(&lease, cutoff_ms, batch - out.len()).await?);
    }
    Ok(out)
}

/// [`HotStore::stale_reserved`] over every shard, under leases taken for the suite: the oldest
/// `limit` in all, by reserve time, then key.
async fn stale_all(
    hot: &dyn HotStore,
    reserved_before_ms: i64,
    limit: usize,
) -> Result<Vec<MessageRecord>> {
    let mut out = Vec::new();
    for lease in suite_leases(hot).await? {
        out.extend(
            hot.stale_reserved(&lease, reserved_before_ms, limit)
                .await?,
        );
    }
    out.sort_by(|a, b| {
        (
            a.committed_at_ms,
            &a.tenant,
            &a.conversation_id,
            a.conversation_seq,
        )
            .cmp(&(
                b.committed_at_ms,
                &b.tenant,
                &b.conversation_id,
                b.conversation_seq,
            ))
    });
    out.truncate(limit);
    Ok(out)
}

/// A lease on every shard for the suite's own holder.
async fn suite_leases(hot: &dyn HotStore) -> Result<Vec<ShardLease>> {
    let mut leases = Vec::new();
    for shard in 0..hot.shards() {
        let token = hot
            .lease_shard(shard, "conformance", 60_000)
            .await?
            .expect("no other holder in the suite");
        leases.push(ShardLease {
            shard,
            holder: "conformance".into(),
            token,
            ttl_ms: 60_000,
        });
    }
    Ok(leases)
}

fn reserved(r: Reservation) -> (MessageRecord, bool) {
    match r {
        Reservation::Reserved { record, fresh } => (record, fresh),
        other => panic!("expected a reservation, got {other:?}"),
    }
}

/// The hot-store contract: conversations, reserve/commit with dedup, reads with the floor,
/// trimming, watermark, read pointers, dedup expiry.
pub async fn hot_store(hot: Arc<dyn HotStore>) {
    let members = vec!["u1".to_string(), "u2".to_string()];
    let cid = "c-1".to_string();
    assert!(
        hot.create_conversation("t1", &cid, &members, Some(7), T0)
            .await
            .unwrap()
    );
    let meta = hot
        .conversation("t1", &cid)
        .await
        .unwrap()
        .expect("created");
    assert_eq!(
        (meta.members, meta.listing_id, meta.latest_seq, meta.floor),
        (members.clone(), Some(7), 0, 0)
    );
    assert!(
        hot.conversation("t2", &cid).await.unwrap().is_none(),
        "tenants are apart"
    );

    // Reserve: dense seqs; a retry of a RESERVED send finds the same record.
    let (r1, fresh) = reserved(
        hot.reserve(cmd("t1", &cid, "u1", "k1"), T0, PARAMS)
            .await
            .unwrap(),
    );
    assert!(fresh);
    assert_eq!(
        (r1.conversation_seq, r1.committed_at_ms, r1.body.as_str()),
        (1, T0, "body of k1")
    );
    let (again, fresh) = reserved(
        hot.reserve(cmd("t1", &cid, "u1", "k1"), T0 + 1, PARAMS)
            .await
            .unwrap(),
    );
    assert!(!fresh);
    assert_eq!(again, r1);
    let (r2, _) = reserved(
        hot.reserve(cmd("t1", &cid, "u2", "k1"), T0 + 2, PARAMS)
            .await
            .unwrap(),
    );
    assert_eq!(r2.conversation_seq, 2, "dedup is per sender");
    // Creating an existing id again changes nothing (not the members, not the latest seq) and
    // says so; the same id in another tenant is another conversation.
    let others = vec!["u3".to_string(), "u4".to_string()];
    assert!(
        !hot.create_conversation("t1", &cid, &others, None, T0 + 2)
            .await
            .unwrap()
    );
    let meta = hot.conversation("t1", &cid).await.unwrap().expect("kept");
    assert_eq!(
        (meta.members, meta.listing_id, meta.latest_seq),
        (members.clone(), Some(7), 2)
    );
    assert_eq!(hot.memberships("t1", "u3").await.unwrap(), vec![]);
    assert_eq!(hot.memberships("t1", "u1").await.unwrap().len(), 1);
    assert!(matches!(
        hot.reserve(cmd("t1", "missing", "u1", "k"), T0, PARAMS)
            .await,
        Err(ChatError::UnknownConversation(_))
    ));

    // RESERVED records are invisible to reads and listed as stale after their time.
    let slice = hot.hot_slice("t1", &cid, 1, 10, T0 + 3).await.unwrap();
    assert!(slice.records.is_empty());
    assert_eq!(slice.latest_seq, 2);
    assert_eq!(stale_all(hot.as_ref(), T0 - 1, 10).await.unwrap(), vec![]);
    assert_eq!(
        stale_all(hot.as_ref(), T0 + 2, 10).await.unwrap(),
        vec![r1.clone(), r2.clone()]
    );

    // Commit: visible, deduplicated as committed, no longer stale; idempotent.
    hot.mark_committed(&[r1.key(), r2.key()], T0 + 5, PARAMS)
        .await
        .unwrap();
    hot.mark_committed(&[r1.key()], T0 + 9, PARAMS)
        .await
        .unwrap();
    assert_eq!(
        hot.reserve(cmd("t1", &cid, "u1", "k1"), T0 + 6, PARAMS)
            .await
            .unwrap(),
        Reservation::Committed(r1.ack())
    );
    assert!(
        stale_all(hot.as_ref(), T0 + 100, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        hot.untracked_committed(10).await.unwrap().is_empty(),
        "mark_committed registers trim candidates"
    );
    let slice = hot.hot_slice("t1", &cid, 1, 10, T0 + 6).await.unwrap();
    assert_eq!(slice.records, vec![r1.clone(), r2.clone()]);
    assert_eq!((slice.floor, slice.earliest_seq), (0, Some(1)));
    assert_eq!(
        hot.hot_slice("t1", &cid, 2, 2, T0 + 6)
            .await
            .unwrap()
            .records,
        vec![r2.clone()]
    );

    // Unread and read pointers (never backwards).
    assert_eq!(
        hot.hot_unread("t1", &cid, "u1", 0, T0 + 6)
            .await
            .unwrap()
            .unread_above_floor,
        1
    );
    assert_eq!(
        hot.hot_unread("t1", &cid, "u2", 0, T0 + 6)
            .await
            .unwrap()
            .unread_above_floor,
        1
    );
    assert_eq!(
        hot.hot_unread("t1", &cid, "u1", 2, T0 + 6)
            .await
            .unwrap()
            .unread_above_floor,
        0
    );
    hot.set_read("t1", &cid, "u2", 2).await.unwrap();
    hot.set_read("t1", &cid, "u2", 1).await.unwrap();
    assert_eq!(hot.read_seq("t1", &cid, "u2").await.unwrap(), 2);
    assert_eq!(hot.read_seq("t1", &cid, "u1").await.unwrap(), 0);
    let m = hot.memberships("t1", "u2").await.unwrap();
    assert_eq!(
        (m.len(), m[0].conversation_id.as_str(), m[0].read_seq),
        (1, cid.as_str(), 2)
    );
    assert!(hot.memberships("t2", "u2").await.unwrap().is_empty());

    // The hot window floor is the smallest window ever recorded. The store holds candidates
    // recorded without a floor (oldest score T0 + 10_005), so the first is bounded by them:
    // T0 + 10_005 − (T0 + 6).
    assert_eq!(hot.hot_window_floor(100_000, T0 + 6).await.unwrap(), 9_999);
    assert_eq!(hot.hot_window_floor(100_000, T0 + 6).await.unwrap(), 9_999);
    assert_eq!(hot.hot_window_floor(4_000, T0 + 6).await.unwrap(), 4_000);
    assert_eq!(hot.hot_window_floor(10_000, T0 + 6).await.unwrap(), 4_000);

    // Watermarks are per outbox partition and only move forward; T is their least, none
    // while a partition has none.
    assert_eq!(hot.watermarks().await.unwrap(), BTreeMap::new());
    hot.publish_watermark(0, T0 + 50).await.unwrap();
    hot.publish_watermark(0, T0 + 40).await.unwrap();
    hot.publish_watermark(2, T0 + 30).await.unwrap();
    let published = hot.watermarks().await.unwrap();
    assert_eq!(published, BTreeMap::from([(0, T0 + 50), (2, T0 + 30)]));
    assert_eq!(watermark(&published, 1), Some(T0 + 50));
    assert_eq!(watermark(&published, 3), None, "partition 1 has none");
    hot.publish_watermark(1, T0 + 60).await.unwrap();
    assert_eq!(
        watermark(&hot.watermarks().await.unwrap(), 3),
        Some(T0 + 30)
    );

    // Trim: score = commit time + hot window = T0 + 5 + 10_000.
    assert_eq!(hot.hot_len().await.unwrap(), 2);
    assert!(
        trim_all(hot.as_ref(), T0 + 10_004, 100)
            .await
            .unwrap()
            .is_empty()
    );
    let trimmed = trim_all(hot.as_ref(), T0 + 10_005, 1).await.unwrap();
    assert_eq!(trimmed.len(), 1, "batches are bounded");
    let trimmed2 = trim_all(hot.as_ref(), T0 + 10_005, 100).await.unwrap();
    let mut all: Vec<u64> = trimmed
        .iter()
        .chain(&trimmed2)
        .map(|k| k.conversation_seq)
        .collect();
    all.sort_unstable();
    assert_eq!(all, vec![1, 2]);
    assert_eq!(hot.hot_len().await.unwrap(), 0);
    let meta = hot.conversation("t1", &cid).await.unwrap().unwrap();
    assert_eq!((meta.latest_seq, meta.floor), (2, 2));
    let slice = hot.hot_slice("t1", &cid, 1, 10, T0 + 6).await.unwrap();
    assert_eq!(
        (slice.floor, slice.records.len(), slice.earliest_seq),
        (2, 0, None)
    );

    // Dedup outlives trimming, then expires; seqs are never reused.
    assert_eq!(
        hot.reserve(cmd("t1", &cid, "u1", "k1"), T0 + 20_000, PARAMS)
            .await
            .unwrap(),
        Reservation::Committed(r1.ack())
    );
    assert_eq!(hot.purge_dedup(T0 + 59_999, 100).await.unwrap(), 0);
    assert_eq!(hot.purge_dedup(T0 + 60_002, 100).await.unwrap(), 2);
    let (r3, fresh) = reserved(
        hot.reserve(cmd("t1", &cid, "u1", "k1"), T0 + 60_003, PARAMS)
            .await
            .unwrap(),
    );
    assert!(fresh);
    assert_eq!(r3.conversation_seq, 3);

    // The archive's identity: none until recorded, then the first one recorded for good.
    assert_eq!(hot.archive_identity().await.unwrap(), None);
    hot.record_archive_identity(0x5eed).await.unwrap();
    hot.record_archive_identity(0x0bad).await.unwrap();
    assert_eq!(hot.archive_identity().await.unwrap(), Some(0x5eed));
}

/// The outbox contract: offsets from 0, ordered fetch, consumer positions, retention, and the
/// The `hot-only` commit (no outbox): [`FusedCommit::commit_fused`] without outbox gives dense
/// seqs, answers a retry with the original ACK, makes the record readable at once, registers no
/// trim candidate (nothing may be trimmed that no archive holds) and leaves it untracked until
/// [`HotStore::register_trim_candidates`] — the backfill of a later tiered server.
pub async fn hot_only_commit<S: FusedCommit + HotStore>(store: Arc<S>) {
    let clock = Arc::new(ManualClock::new(T0));
    let shared: SharedClock = Arc::clone(&clock) as SharedClock;
    let members = vec!["u1".to_string(), "u2".to_string()];
    let cid = "c-1".to_string();
    store
        .create_conversation("t1", &cid, &members, None, T0)
        .await
        .unwrap();
    let mut records = Vec::new();
    for key in ["k1", "k2", "k3"] {
        clock.advance(1);
        match store
            .commit_fused(cmd("t1", &cid, "u1", key), &shared, PARAMS, false)
            .await
            .unwrap()
        {
            SendOutcome::Committed(r) => records.push(r),
            other => panic!("a fresh send commits, got {other:?}"),
        }
    }
    let seqs: Vec<u64> = records.iter().map(|r| r.conversation_seq).collect();
    assert_eq!(seqs, [1, 2, 3]);
    assert_eq!(records[1].committed_at_ms, T0 + 2);

    // A retry: the original ACK, no new seq.
    clock.advance(1);
    assert_eq!(
        store
            .commit_fused(cmd("t1", &cid, "u1", "k2"), &shared, PARAMS, false)
            .await
            .unwrap(),
        SendOutcome::Duplicate(records[1].ack())
    );
    let meta = store.conversation("t1", &cid).await.unwrap().unwrap();
    assert_eq!(meta.latest_seq, 3);
    let slice = store.hot_slice("t1", &cid, 1, 10, T0 + 10).await.unwrap();
    assert_eq!(slice.records, records);

    // Nothing to trim, however late; all three wait for a backfill.
    assert!(
        trim_all(store.as_ref(), i64::MAX, 100)
            .await
            .unwrap()
            .is_empty(),
        "hot-only records are never trim candidates"
    );
    let untracked = store.untracked_committed(10).await.unwrap();
    assert_eq!(untracked, records);
    assert_eq!(store.untracked_committed(2).await.unwrap(), records[..2]);
    let keys: Vec<_> = records.iter().map(MessageRecord::key).collect();
    let now = T0 + 100 - PARAMS.hot_window_ms;
    store
        .register_trim_candidates(&keys[..2], now, PARAMS)
        .await
        .unwrap();
    assert_eq!(store.untracked_committed(10).await.unwrap(), records[2..]);
    store
        .register_trim_candidates(&keys[2..], now, PARAMS)
        .await
        .unwrap();
    assert!(store.untracked_committed(10).await.unwrap().is_empty());
    let trimmed = trim_all(store.as_ref(), T0 + 100, 100).await.unwrap();
    assert_eq!(trimmed, keys);
    assert_eq!(store.hot_len().await.unwrap(), 0);
}

/// The hot store's times (DESIGN.md "Many nodes": hybrid logical clocks):
/// - a conversation's `committed_at` never decreases along its seqs, however early the clock of
///   the node that reserves (the store raises it to the conversation's latest);
/// - [`HotStore::clock_high_water`] holds the latest commit time and the watermark;
/// - with `shared` (a store several nodes use: Redis), the clock floor: after
///   [`HotStore::raise_clock_floor`]`(F)`, a commit marked with an earlier `now` is scored from
///   F, and so is a backfilled one; the floor never moves back. A store one process uses
///   (`shared` false: SQLite) ignores the floor, its process's clock being the one the
///   archiver reads.
pub async fn hot_store_clock(hot: Arc<dyn HotStore>, shared: bool) {
    let members = vec!["u1".to_string(), "u2".to_string()];
    assert_eq!(
        hot.clock_high_water().await.unwrap(),
        None,
        "an empty store"
    );
    hot.create_conversation("t1", "c-hlc", &members, None, T0)
        .await
        .unwrap();
    let (r1, _) = reserved(
        hot.reserve(cmd("t1", "c-hlc", "u1", "k1"), T0 + 5_000, PARAMS)
            .await
            .unwrap(),
    );
    assert_eq!(r1.committed_at_ms, T0 + 5_000);
    hot.mark_committed(&[r1.key()], T0 + 5_000, PARAMS)
        .await
        .unwrap();
    // A node 5 s behind: its message is dated at its predecessor's time, not before it.
    let (r2, _) = reserved(
        hot.reserve(cmd("t1", "c-hlc", "u2", "k2"), T0, PARAMS)
            .await
            .unwrap(),
    );
    assert_eq!(
        (r2.conversation_seq, r2.committed_at_ms),
        (2, T0 + 5_000),
        "committed_at never decreases along a conversation"
    );
    // Its dedup entry answers a retry with that same time.
    hot.mark_committed(&[r2.key()], T0, PARAMS).await.unwrap();
    assert_eq!(
        hot.reserve(cmd("t1", "c-hlc", "u2", "k2"), T0 + 1, PARAMS)
            .await
            .unwrap(),
        Reservation::Committed(r2.ack())
    );
    // Later clocks go on as they are.
    let (r3, _) = reserved(
        hot.reserve(cmd("t1", "c-hlc", "u1", "k3"), T0 + 6_000, PARAMS)
            .await
            .unwrap(),
    );
    assert_eq!(r3.committed_at_ms, T0 + 6_000);
    hot.mark_committed(&[r3.key()], T0 + 6_000, PARAMS)
        .await
        .unwrap();
    hot.publish_watermark(0, T0 + 7_000).await.unwrap();
    assert_eq!(hot.clock_high_water().await.unwrap(), Some(T0 + 7_000));

    if !shared {
        hot.raise_clock_floor(T0 + 9_000).await.unwrap();
        assert_eq!(hot.clock_high_water().await.unwrap(), Some(T0 + 7_000));
        return;
    }
    // The clock floor: a commit marked at an earlier `now` is scored from the floor.
    let w = PARAMS.hot_window_ms;
    hot.raise_clock_floor(T0 + 20_000).await.unwrap();
    hot.raise_clock_floor(T0 + 10_000).await.unwrap(); // never moves back
    assert_eq!(hot.clock_high_water().await.unwrap(), Some(T0 + 20_000));
    let (r4, _) = reserved(
        hot.reserve(cmd("t1", "c-hlc", "u1", "k4"), T0 + 6_001, PARAMS)
            .await
            .unwrap(),
    );
    hot.mark_committed(&[r4.key()], T0 + 6_001, PARAMS)
        .await
        .unwrap();
    // r2 (scored T0 + 5,000 + w: its store's floor was 5,000 then) and r1 and r3 go; r4
    // does not, although its `now` was 6,001: it waits for T0 + 20,000 + w.
    let trimmed = trim_all(hot.as_ref(), T0 + 19_999 + w, 100).await.unwrap();
    assert_eq!(trimmed, vec![r1.key(), r2.key(), r3.key()]);
    assert_eq!(
        trim_all(hot.as_ref(), T0 + 19_999 + w, 100).await.unwrap(),
        vec![]
    );
    assert_eq!(
        trim_all(hot.as_ref(), T0 + 20_000 + w, 100).await.unwrap(),
        vec![r4.key()]
    );
}

/// [`HotStore::archivable_page`]: every COMMITTED record with a trim candidate, page by page,
/// once each; RESERVED records are not; one trimmed between two pages is skipped and nothing
/// else is.
pub async fn archivable_pages(hot: Arc<dyn HotStore>) {
    let members = vec!["u1".to_string(), "u2".to_string()];
    let mut committed = Vec::new();
    for c in 0..3 {
        let cid = format!("c-page-{c}");
        hot.create_conversation("t1", &cid, &members, None, T0)
            .await
            .unwrap();
        for k in 0..4 {
            let (r, _) = reserved(
                hot.reserve(cmd("t1", &cid, "u1", &format!("k{k}")), T0 + k, PARAMS)
                    .await
                    .unwrap(),
            );
            if (c, k) == (2, 3) {
                continue; // stays RESERVED
            }
            hot.mark_committed(&[r.key()], T0 + 10 * c as i64 + k, PARAMS)
                .await
                .unwrap();
            committed.push(r);
        }
    }
    let key = |r: &MessageRecord| (r.conversation_id.clone(), r.conversation_seq);
    let mut all = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let (page, next) = hot.archivable_page(cursor, 2).await.unwrap();
        assert!(page.len() <= 2);
        all.extend(page);
        pages += 1;
        match next {
            Some(c) => cursor = Some(c),
            None => break,
        }
        assert!(pages < 1_000, "pages end");
    }
    all.sort_by_key(key);
    committed.sort_by_key(key);
    assert_eq!(
        all, committed,
        "every committed record once, the RESERVED one not"
    );

    // Trimming between two pages skips the trimmed records and nothing else.
    let (first, cursor) = hot.archivable_page(None, 3).await.unwrap();
    assert_eq!(first.len(), 3);
    let trimmed = trim_all(hot.as_ref(), T0 + 1 + PARAMS.hot_window_ms, 100)
        .await
        .unwrap();
    assert_eq!(trimmed.len(), 2, "the first two messages of c-page-0");
    let mut rest = Vec::new();
    let mut cursor = cursor;
    while let Some(c) = cursor {
        let (page, next) = hot.archivable_page(Some(c), 3).await.unwrap();
        rest.extend(page);
        cursor = next;
    }
    let mut seen: Vec<_> = first.iter().chain(&rest).map(key).collect();
    seen.sort();
    seen.dedup();
    let mut expected: Vec<_> = committed.iter().map(key).collect();
    expected.sort();
    assert!(
        expected.iter().all(|k| seen.contains(k)
            || trimmed
                .iter()
                .any(|t| (t.conversation_id.clone(), t.conversation_seq) == *k)),
        "a record not trimmed is on some page"
    );
    assert_eq!(
        rest.iter().filter(|r| trimmed.contains(&r.key())).count(),
        0
    );
}

/// Shard leases with fencing tokens (DESIGN.md "Many nodes"). With `shared` (a store several
/// nodes use: Redis): one holder per shard at a time, renewed by its holder, a greater token
/// for every new holder; after it expires another takes it, and then a trim or a RESERVED read
/// under the old lease is refused with nothing done ([`ChatError::LeaseLost`]); a released
/// lease is free at once. A store one process uses (SQLite) grants every lease of its one shard.
pub async fn shard_leases(hot: Arc<dyn HotStore>, shared: bool) {
    let lease = |shard: u32, holder: &str, token: u64, ttl_ms: u64| ShardLease {
        shard,
        holder: holder.into(),
        token,
        ttl_ms,
    };
    if !shared {
        assert_eq!(hot.shards(), 1);
        assert_eq!(hot.lease_shard(0, "a", 100).await.unwrap(), Some(1));
        assert_eq!(hot.lease_shard(0, "b", 100).await.unwrap(), Some(1));
        assert!(matches!(
            hot.lease_shard(1, "a", 100).await,
            Err(ChatError::Invalid(_))
        ));
        return;
    }
    let shards = hot.shards();
    assert!(shards > 1);
    let t1 = hot
        .lease_shard(3, "a", 60_000)
        .await
        .unwrap()
        .expect("free");
    assert_eq!(
        hot.lease_shard(3, "b", 60_000).await.unwrap(),
        None,
        "a holds it"
    );
    assert_eq!(
        hot.lease_shard(3, "a", 60_000).await.unwrap(),
        Some(t1),
        "renewed"
    );
    hot.release_shard(&lease(3, "b", t1, 0)).await.unwrap(); // not b's: nothing
    assert_eq!(hot.lease_shard(3, "b", 60_000).await.unwrap(), None);
    hot.release_shard(&lease(3, "a", t1, 0)).await.unwrap();
    let t2 = hot
        .lease_shard(3, "b", 60_000)
        .await
        .unwrap()
        .expect("released");
    assert!(t2 > t1, "a new holder's token is greater");

    // A record to trim, and one left RESERVED; node a holds every shard for 200 ms.
    let members = vec!["u1".to_string(), "u2".to_string()];
    hot.create_conversation("t1", "c-lease", &members, None, T0)
        .await
        .unwrap();
    let (r1, _) = reserved(
        hot.reserve(cmd("t1", "c-lease", "u1", "k1"), T0, PARAMS)
            .await
            .unwrap(),
    );
    hot.mark_committed(&[r1.key()], T0, PARAMS).await.unwrap();
    reserved(
        hot.reserve(cmd("t1", "c-lease", "u1", "k2"), T0, PARAMS)
            .await
            .unwrap(),
    );
    let mut a = Vec::new();
    for shard in 0..shards {
        if shard == 3 {
            continue; // b's
        }
        let token = hot
            .lease_shard(shard, "a", 200)
            .await
            .unwrap()
            .expect("free");
        a.push(lease(shard, "a", token, 200));
    }
    // a pauses past its lease; b takes the shards.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let mut b = Vec::new();
    for shard in 0..shards {
        let token = hot
            .lease_shard(shard, "b", 60_000)
            .await
            .unwrap()
            .expect("expired");
        b.push(lease(shard, "b", token, 60_000));
    }
    let cutoff = T0 + PARAMS.hot_window_ms;
    for l in &a {
        assert!(matches!(
            hot.trim(l, cutoff, 100).await,
            Err(ChatError::LeaseLost { shard }) if shard == l.shard
        ));
        assert!(matches!(
            hot.stale_reserved(l, T0, 100).await,
            Err(ChatError::LeaseLost { .. })
        ));
    }
    assert_eq!(
        hot.hot_len().await.unwrap(),
        2,
        "a's fenced steps did nothing"
    );
    let mut trimmed = Vec::new();
    let mut stale = Vec::new();
    for l in &b {
        trimmed.extend(hot.trim(l, cutoff, 100).await.unwrap());
        stale.extend(hot.stale_reserved(l, T0, 100).await.unwrap());
    }
    assert_eq!(trimmed, vec![r1.key()]);
    assert_eq!(stale.len(), 1);
}

/// watermark snapshot.
pub async fn outbox(outbox: Arc<dyn Outbox>) {
    // Conversation c1's partition; every call below names it.
    let partitions = outbox.partitions();
    let p = partition_of("t1", "c1", partitions);
    assert_eq!(outbox.offsets(p).await.unwrap(), (0, 0));
    assert_eq!(outbox.position("archiver", p).await.unwrap(), None);
    let recs: Vec<MessageRecord> = (1..=3)
        .map(|s| cmd("t1", "c1", "u1", &format!("k{s}")).into_record(s, T0 + s as i64))
        .collect();
    outbox.append(&recs[..2]).await.unwrap();
    outbox.append(&recs[2..]).await.unwrap();
    outbox.append(&recs[..1]).await.unwrap(); // duplicates are allowed
    assert_eq!(outbox.offsets(p).await.unwrap(), (0, 4));
    let all = outbox.fetch(p, 0, 10).await.unwrap();
    let offsets: Vec<u64> = all.iter().map(|(o, _)| *o).collect();
    assert_eq!(offsets, vec![0, 1, 2, 3]);
    assert_eq!(all[1].1, recs[1]);
    assert_eq!(all[3].1, recs[0]);
    assert_eq!(
        outbox.fetch(p, 2, 1).await.unwrap(),
        vec![(2, recs[2].clone())]
    );
    assert!(outbox.fetch(p, 4, 10).await.unwrap().is_empty());

    outbox.store_position("archiver", p, 3).await.unwrap();
    outbox.store_position("other", p, 1).await.unwrap();
    assert_eq!(outbox.position("archiver", p).await.unwrap(), Some(3));
    assert_eq!(outbox.position("other", p).await.unwrap(), Some(1));

    let clock: SharedClock = Arc::new(ManualClock::new(T0 + 500));
    assert_eq!(
        outbox.watermark_snapshot(p, &clock).await.unwrap(),
        (T0 + 500, 4)
    );

    // Retention drops a prefix: records below the bound and old enough, at most `max` a call.
    assert_eq!(outbox.truncate(p, 3, T0, 10).await.unwrap(), 0);
    assert_eq!(outbox.truncate(p, 3, T0 + 1_000, 1).await.unwrap(), 1);
    assert_eq!(outbox.offsets(p).await.unwrap(), (1, 4));
    assert_eq!(outbox.truncate(p, 2, T0 + 1_000, 10).await.unwrap(), 1);
    assert_eq!(outbox.offsets(p).await.unwrap(), (2, 4));
    assert_eq!(
        outbox
            .fetch(p, 0, 10)
            .await
            .unwrap()
            .first()
            .map(|(o, _)| *o),
        Some(2)
    );
    // Offset 3 (appended at T0 + 1) is old enough, but offset 2 before it (T0 + 3) is not:
    // the prefix stops there.
    outbox.store_position("archiver", p, 4).await.unwrap();
    assert_eq!(outbox.truncate(p, 4, T0 + 2, 10).await.unwrap(), 0);
    assert_eq!(outbox.truncate(p, 4, T0 + 4, 10).await.unwrap(), 2);
    assert_eq!(outbox.offsets(p).await.unwrap(), (4, 4));
    // The whole log was dropped: the next record still takes the next offset, never a used one.
    outbox.append(&recs[1..2]).await.unwrap();
    assert_eq!(outbox.offsets(p).await.unwrap(), (4, 5));
    assert_eq!(
        outbox.fetch(p, 0, 10).await.unwrap(),
        vec![(4, recs[1].clone())]
    );

    // Partitions are apart: a conversation of another partition takes that partition's
    // offsets and leaves these as they are. No partition past the last.
    if partitions > 1 {
        let (other_cid, q) = (0..)
            .map(|i| format!("c{i}"))
            .map(|c| {
                let q = partition_of("t1", &c, partitions);
                (c, q)
            })
            .find(|(_, q)| *q != p)
            .expect("another partition");
        let other = cmd("t1", &other_cid, "u1", "k").into_record(1, T0 + 10);
        assert_eq!(outbox.offsets(q).await.unwrap(), (0, 0));
        outbox.append(std::slice::from_ref(&other)).await.unwrap();
        assert_eq!(outbox.offsets(q).await.unwrap(), (0, 1));
        assert_eq!(outbox.fetch(q, 0, 10).await.unwrap(), vec![(0, other)]);
        assert_eq!(outbox.offsets(p).await.unwrap(), (4, 5));
        assert_eq!(outbox.position("archiver", q).await.unwrap(), None);
    }
    assert!(matches!(
        outbox.offsets(partitions).await,
        Err(ChatError::Invalid(_))
    ));
}

/// The archive contract: idempotent writes, index ranges across buckets, record lookup,
/// ephemeral expiry and purge.
pub async fn archive(archive: Arc<dyn Archive>) {
    // An identity from the start, non-zero, the same at every look.
    let identity = archive.identity().await.unwrap();
    assert_ne!(identity, 0);
    assert_eq!(archive.identity().await.unwrap(), identity);
    // How far the archiver's batches reached: nothing yet, then the last recorded.
    assert_eq!(archive.archived_through(0).await.unwrap(), None);
    archive.put_index(&[], Some((0, 7))).await.unwrap();
    archive.put_index(&[], Some((0, 9))).await.unwrap();
    archive.put_index(&[], Some((2, 4))).await.unwrap();
    assert_eq!(archive.archived_through(0).await.unwrap(), Some(9));
    assert_eq!(archive.archived_through(1).await.unwrap(), None);
    assert_eq!(archive.archived_through(2).await.unwrap(), Some(4));
    let rec = |seq: u64, class: MessageClass| {
        let mut c = cmd("t1", "c1", "u1", &format!("k{seq}"));
        c.class = class;
        c.into_record(seq, T0)
    };
    let recs: Vec<MessageRecord> = [998, 999, 1000, 1001]
        .into_iter()
        .map(|s| rec(s, MessageClass::Standard))
        .chain([rec(1002, MessageClass::Ephemeral24h)])
        .collect();
    archive.put_records(&recs).await.unwrap();
    // A record without its index entry is not visible through the index.
    assert!(
        archive
            .index_range("t1", "c1", 1, 2000)
            .await
            .unwrap()
            .is_empty()
    );
    let index: Vec<IndexEntry> = recs.iter().map(MessageRecord::index_entry).collect();
    archive.put_index(&index, None).await.unwrap();
    archive.put_records(&recs).await.unwrap();
    archive.put_index(&index, None).await.unwrap();
    let got = archive.index_range("t1", "c1", 999, 1002).await.unwrap();
    assert_eq!(
        got,
        index[1..].to_vec(),
        "ascending across seq buckets, no duplicates"
    );
    assert!(
        archive
            .index_range("t2", "c1", 1, 2000)
            .await
            .unwrap()
            .is_empty()
    );
    let mut found = archive.records("t1", "c1", &[1001, 998, 5]).await.unwrap();
    found.sort_by_key(|r| r.conversation_seq);
    assert_eq!(found, vec![recs[0].clone(), recs[3].clone()]);
    assert_eq!(
        archive.earliest_seq("t1", "c1", T0).await.unwrap(),
        Some(998)
    );
    assert_eq!(archive.earliest_seq("t1", "zz", T0).await.unwrap(), None);

    // The ephemeral message's entry says when it expires; the purge takes its record then, and
    // leaves the entry as a tombstone (readers tell an expired seq from a lost one by it).
    let expiry = T0 + crate::model::EPHEMERAL_TTL_MS;
    let entry_1002 = || async {
        let got = archive.index_range("t1", "c1", 1002, 1002).await.unwrap();
        assert_eq!(got.len(), 1);
        got[0].clone()
    };
    assert_eq!(entry_1002().await.expires_at_ms, Some(expiry));
    assert!(!entry_1002().await.is_expired(expiry - 1));
    assert!(entry_1002().await.is_expired(expiry));
    assert_eq!(archive.purge_expired(expiry - 1, 100).await.unwrap(), 0);
    assert_eq!(archive.purge_expired(expiry, 100).await.unwrap(), 1);
    assert_eq!(entry_1002().await, index[4]);
    assert_eq!(
        archive.index_range("t1", "c1", 1, 2000).await.unwrap(),
        index[..].to_vec()
    );
    assert!(
        archive
            .records("t1", "c1", &[1002])
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        archive
            .records("t1", "c1", &[998, 999, 1000, 1001])
            .await
            .unwrap()
            .len(),
        4
    );
}
