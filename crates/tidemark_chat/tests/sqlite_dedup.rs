//! The SQLite hot store's client dedup (`sqlite::dedup`): an append-only log indexed in memory,
//! the oldest keys moved to an on-disk index past the memory bound. Exact answers across the
//! move, a restart and expiry.

use std::path::Path;
use std::sync::Arc;

use tidemark_chat::model::{MessageClass, MessageRecord, SendCommand, SendOutcome};
use tidemark_chat::ports::{CommitParams, FusedCommit, HotStore};
use tidemark_chat::sqlite::SqliteHot;
use tidemark_core::clock::{ManualClock, SharedClock};

const T0: i64 = 1_800_000_000_000;
const WINDOW_MS: i64 = 60_000;

fn params(dedup_window_ms: i64) -> CommitParams {
    CommitParams {
        dedup_window_ms,
        hot_window_ms: 3_600_000,
    }
}

fn cmd(cid: &str, key: &str) -> SendCommand {
    SendCommand {
        tenant: "t1".into(),
        conversation_id: cid.into(),
        sender: "u1".into(),
        client_msg_id: key.into(),
        body: format!("body of {key}"),
        class: MessageClass::Standard,
    }
}

struct Fixture {
    clock: Arc<ManualClock>,
    shared: SharedClock,
}

impl Fixture {
    fn new() -> Self {
        let clock = Arc::new(ManualClock::new(T0));
        let shared: SharedClock = Arc::clone(&clock) as SharedClock;
        Self { clock, shared }
    }

    async fn send(&self, hot: &SqliteHot, cid: &str, key: &str, window: i64) -> SendOutcome {
        hot.commit_fused(cmd(cid, key), &self.shared, params(window), true)
            .await
            .unwrap()
    }

    /// Each of `records` sent again is answered with its original ACK.
    async fn expect_duplicates(
        &self,
        hot: &SqliteHot,
        cid: &str,
        records: &[MessageRecord],
        when: &str,
    ) {
        for r in records {
            assert_eq!(
                self.send(hot, cid, &r.client_msg_id, WINDOW_MS).await,
                SendOutcome::Duplicate(r.ack()),
                "{} {when}",
                r.client_msg_id
            );
        }
    }
}

fn open(path: &Path, memory_keys: usize) -> SqliteHot {
    SqliteHot::open(path, 64)
        .unwrap()
        .with_dedup_memory_keys(memory_keys)
}

/// A new conversation of u1 and u2.
async fn conversation(hot: &SqliteHot) -> String {
    let cid = "c-1".to_string();
    hot.create_conversation("t1", &cid, &["u1".into(), "u2".into()], None, T0)
        .await
        .unwrap();
    cid
}

fn committed(outcome: SendOutcome) -> MessageRecord {
    match outcome {
        SendOutcome::Committed(r) => r,
        other => panic!("a fresh key commits, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_moved_to_disk_and_reloaded_after_a_restart_still_answer_with_their_ack() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hot.db");
    let f = Fixture::new();
    let hot = open(&path, 3);
    let cid = conversation(&hot).await;
    let mut records = Vec::new();
    for i in 0..10 {
        f.clock.advance(1);
        records.push(committed(
            f.send(&hot, &cid, &format!("k{i}"), WINDOW_MS).await,
        ));
    }

    // Ten keys, three kept in memory: seven move to disk (oldest first), in batches of 4.
    assert_eq!(hot.purge_dedup(T0 + 100, 4).await.unwrap(), 4);
    assert_eq!(hot.purge_dedup(T0 + 100, 4).await.unwrap(), 3);
    assert_eq!(hot.purge_dedup(T0 + 100, 4).await.unwrap(), 0);
    f.expect_duplicates(&hot, &cid, &records, "after the move")
        .await;

    // A crash (the store is never closed; its writer thread is left behind, idle) and a new
    // process: the memory index is rebuilt from the log, the moved keys are still on disk.
    std::mem::forget(hot);
    let hot = open(&path, 3);
    f.expect_duplicates(&hot, &cid, &records, "after the restart")
        .await;

    // Expiry drops both places (3 in the log, 7 on disk); a key after it is a new message.
    assert_eq!(hot.purge_dedup(T0 + WINDOW_MS + 10, 100).await.unwrap(), 10);
    f.clock.set(T0 + WINDOW_MS + 20);
    let again = committed(f.send(&hot, &cid, "k0", WINDOW_MS).await);
    assert_eq!(again.conversation_seq, 11);
    assert_eq!(
        f.send(&hot, &cid, "k0", WINDOW_MS).await,
        SendOutcome::Duplicate(again.ack())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_key_behind_a_later_expiring_one_is_not_answered() {
    let dir = tempfile::tempdir().unwrap();
    let f = Fixture::new();
    let hot = open(&dir.path().join("hot.db"), 100);
    let cid = conversation(&hot).await;
    // The window shrank between the two sends (a config change across a restart).
    let long = committed(f.send(&hot, &cid, "long", 60_000).await);
    let short = committed(f.send(&hot, &cid, "short", 10_000).await);

    // At T0 + 20 s the log's front (`long`) has not expired, so nothing leaves the log yet...
    f.clock.set(T0 + 20_000);
    assert_eq!(hot.purge_dedup(T0 + 20_000, 100).await.unwrap(), 0);
    // ...but `short`, expired and still stored, is not a duplicate any more: a new message.
    let short_again = committed(f.send(&hot, &cid, "short", 10_000).await);
    assert_eq!(
        (short.conversation_seq, short_again.conversation_seq),
        (2, 3)
    );
    assert_eq!(
        f.send(&hot, &cid, "short", 10_000).await,
        SendOutcome::Duplicate(short_again.ack())
    );
    assert_eq!(
        f.send(&hot, &cid, "long", 60_000).await,
        SendOutcome::Duplicate(long.ack())
    );
    // Once the front expires, all three go (the second `short` expired at T0 + 30 s).
    f.clock.set(T0 + 60_001);
    assert_eq!(hot.purge_dedup(T0 + 60_001, 100).await.unwrap(), 3);
    let third = committed(f.send(&hot, &cid, "short", 10_000).await);
    assert_eq!(third.conversation_seq, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_sent_concurrently_commits_once() {
    let dir = tempfile::tempdir().unwrap();
    let f = Arc::new(Fixture::new());
    let hot = Arc::new(open(&dir.path().join("hot.db"), 100));
    let cid = conversation(&hot).await;
    let sends = (0..16).map(|_| {
        let (hot, f, cid) = (Arc::clone(&hot), Arc::clone(&f), cid.clone());
        tokio::spawn(async move { f.send(&hot, &cid, "same", WINDOW_MS).await })
    });
    let mut outcomes = Vec::new();
    for s in sends {
        outcomes.push(s.await.unwrap());
    }
    let first: Vec<&MessageRecord> = outcomes
        .iter()
        .filter_map(|o| match o {
            SendOutcome::Committed(r) => Some(r),
            SendOutcome::Duplicate(_) => None,
        })
        .collect();
    assert_eq!(first.len(), 1, "{outcomes:?}");
    let ack = first[0].ack();
    assert_eq!(ack.conversation_seq, 1);
    let duplicates = outcomes
        .iter()
        .filter(|o| **o == SendOutcome::Duplicate(ack.clone()))
        .count();
    assert_eq!(duplicates, 15);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_keys_leave_memory_before_the_bound_is_measured() {
    let dir = tempfile::tempdir().unwrap();
    let f = Fixture::new();
    let hot = open(&dir.path().join("hot.db"), 5);
    let cid = conversation(&hot).await;
    for i in 0..3 {
        committed(f.send(&hot, &cid, &format!("short{i}"), 1_000).await);
    }
    let mut kept = Vec::new();
    for i in 0..5 {
        kept.push(committed(
            f.send(&hot, &cid, &format!("long{i}"), 60_000).await,
        ));
    }
    // Three expire; the five left fit the bound, so none moves to disk.
    assert_eq!(hot.purge_dedup(T0 + 2_000, 100).await.unwrap(), 3);
    assert_eq!(hot.purge_dedup(T0 + 2_000, 100).await.unwrap(), 0);
    f.clock.set(T0 + 2_000);
    f.expect_duplicates(&hot, &cid, &kept, "within their window")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upkeep_in_steps_of_one_expires_the_log_moves_the_excess_and_expires_disk() {
    let dir = tempfile::tempdir().unwrap();
    let f = Fixture::new();
    let hot = open(&dir.path().join("hot.db"), 1);
    let cid = conversation(&hot).await;
    let a = committed(f.send(&hot, &cid, "a", 1_000).await);
    let b = committed(f.send(&hot, &cid, "b", 60_000).await);
    let c = committed(f.send(&hot, &cid, "c", 60_000).await);
    // Nothing expired at T0 + 10: one step moves `a`, the next `b` (one key left in memory).
    assert_eq!(hot.purge_dedup(T0 + 10, 1).await.unwrap(), 1);
    assert_eq!(hot.purge_dedup(T0 + 10, 1).await.unwrap(), 1);
    assert_eq!(hot.purge_dedup(T0 + 10, 1).await.unwrap(), 0);
    assert_eq!(
        f.send(&hot, &cid, "a", 1_000).await,
        SendOutcome::Duplicate(a.ack())
    );
    // At T0 + 2 s `a` (on disk) has expired, `c` (the log's front) has not.
    assert_eq!(hot.purge_dedup(T0 + 2_000, 1).await.unwrap(), 1);
    assert_eq!(hot.purge_dedup(T0 + 2_000, 1).await.unwrap(), 0);
    f.clock.set(T0 + 2_000);
    assert_eq!(
        committed(f.send(&hot, &cid, "a", 1_000).await).conversation_seq,
        4
    );
    f.expect_duplicates(&hot, &cid, &[b, c], "within their window")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_from_before_the_log_answers_from_its_dedup_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hot.db");
    let f = Fixture::new();
    let hot = open(&path, 100);
    let cid = conversation(&hot).await;
    drop(hot);
    // An entry as the previous layout wrote it: only in `dedup`.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute(
            "INSERT INTO dedup (tenant, conversation_id, sender, client_msg_id, conversation_seq,
                 message_id, committed_at, expires_at)
             VALUES ('t1', ?1, 'u1', 'old', 7, 'm-old', ?2, ?3)",
            rusqlite::params![cid, T0 - 5, T0 + WINDOW_MS],
        )
        .unwrap();
    let hot = open(&path, 100);
    match f.send(&hot, &cid, "old", WINDOW_MS).await {
        SendOutcome::Duplicate(ack) => assert_eq!(
            (
                ack.conversation_seq,
                ack.message_id.as_str(),
                ack.committed_at_ms
            ),
            (7, "m-old", T0 - 5)
        ),
        other => panic!("the old entry answers, got {other:?}"),
    }
    // Once it expires the table is empty and a SEND no longer looks there.
    assert_eq!(hot.purge_dedup(T0 + WINDOW_MS, 100).await.unwrap(), 1);
    f.clock.set(T0 + WINDOW_MS);
    assert!(matches!(
        f.send(&hot, &cid, "old", WINDOW_MS).await,
        SendOutcome::Committed(_)
    ));
}
