//! The commit path on the embedded SQLite stores and on Redis + MariaDB (DESIGN.md part A,
//! "Commit path" and "Durability"): idempotent retries and dense, never reused seqs.

#[macro_use]
mod common;

use std::collections::{HashMap, HashSet};

use common::{Harness, TENANT, command, committed, duplicate, seqs, small_windows};
use tidemark_chat::model::{MessageClass, SendAck};

on_every_backend!(
    /// Test 1. A retry with the same `(sender, client_msg_id)` returns the original ACK (same seq,
    /// same message id, same commit time) and writes nothing — while the message is hot, after it
    /// was archived and trimmed (the dedup entry outlives trimming), and after a restart.
    #[tokio::test]
    retry_returns_the_original_ack_hot_trimmed_and_after_restart,
    small_windows(),
    retry_returns_the_original_ack_hot_trimmed_and_after_restart_on
);

async fn retry_returns_the_original_ack_hot_trimmed_and_after_restart_on(h: Harness) {
    let cid = h.conversation(&["alice", "bob"]).await;

    let first = h.commit(&cid, "alice", "m-1", "hello").await;
    assert_eq!(first.conversation_seq, 1);
    assert_eq!(first.committed_at_ms, common::START_MS);
    h.advance(250);
    let second = h.commit(&cid, "alice", "m-2", "are you there?").await;
    assert_eq!(second.conversation_seq, 2);
    // The same client_msg_id from another sender is another message.
    let bobs = h.commit(&cid, "bob", "m-1", "yes").await;
    assert_eq!(bobs.conversation_seq, 3);

    // While hot: same ACK, even with a different body, and nothing is written.
    h.advance(250);
    let expected: SendAck = first.ack();
    assert_eq!(
        duplicate(h.send(&cid, "alice", "m-1", "hello").await),
        expected
    );
    assert_eq!(
        duplicate(h.send(&cid, "alice", "m-1", "edited").await),
        expected
    );
    assert_eq!(h.hot().hot_len().await.unwrap(), 3);
    assert_eq!(h.outbox().offsets(0).await.unwrap(), (0, 3));
    assert_eq!(seqs(&h.full_history(&cid).await), vec![1, 2, 3]);

    // After archive + trim: the message is only in the archive, the retry still dedups.
    assert_eq!(h.archive_and_trim_everything().await, 3);
    assert_eq!(h.floor(&cid).await, 3);
    assert_eq!(h.hot().hot_len().await.unwrap(), 0);
    assert_eq!(
        duplicate(h.send(&cid, "alice", "m-1", "hello").await),
        expected
    );
    assert_eq!(
        duplicate(h.send(&cid, "alice", "m-2", "are you there?").await),
        second.ack()
    );
    assert_eq!(
        h.service
            .conversation(TENANT, &cid)
            .await
            .unwrap()
            .latest_seq,
        3
    );
    assert_eq!(h.hot().hot_len().await.unwrap(), 0);
    assert_eq!(h.outbox().offsets(0).await.unwrap().1, 3);

    // After a restart on the same files: still the same ACKs, and the next seq is 4.
    let h = h.restart().await;
    assert_eq!(
        duplicate(h.send(&cid, "alice", "m-1", "hello").await),
        expected
    );
    assert_eq!(
        duplicate(h.send(&cid, "bob", "m-1", "yes").await),
        bobs.ack()
    );
    let fourth = h.commit(&cid, "alice", "m-3", "new").await;
    assert_eq!(fourth.conversation_seq, 4);
    let history = h.full_history(&cid).await;
    assert_eq!(seqs(&history), vec![1, 2, 3, 4]);
    assert_eq!(history[0], first);
    assert_eq!(history[1], second);
    assert_eq!(history[2], bobs);
    assert_eq!(history[3], fourth);
}

on_every_backend!(
    /// Test 2. Eight concurrent senders into one conversation get seqs exactly `1..=400` (no gap,
    /// no reuse, each sender's own seqs increasing), the history matches the ACKs; once the whole
    /// conversation is archived and trimmed (F = 400, hot tier empty) and the stores are reopened,
    /// the next message gets 401.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    concurrent_senders_get_dense_seqs_never_reused_after_trim_and_restart,
    small_windows(),
    concurrent_senders_get_dense_seqs_never_reused_after_trim_and_restart_on
);

async fn concurrent_senders_get_dense_seqs_never_reused_after_trim_and_restart_on(h: Harness) {
    const SENDERS: usize = 8;
    const PER_SENDER: usize = 50;
    const N: u64 = (SENDERS * PER_SENDER) as u64;

    let members: Vec<String> = (0..SENDERS).map(|i| format!("s{i}")).collect();
    let member_refs: Vec<&str> = members.iter().map(String::as_str).collect();
    let cid = h.conversation(&member_refs).await;

    let mut tasks = Vec::new();
    for sender in members.clone() {
        let service = h.service.clone();
        let cid = cid.clone();
        tasks.push(tokio::spawn(async move {
            let mut acks = Vec::new();
            for i in 0..PER_SENDER {
                let cmid = format!("{sender}-{i}");
                let body = format!("body of {cmid}");
                let cmd = command(&cid, &sender, &cmid, &body, MessageClass::Standard);
                let outcome = service.send(cmd).await.expect("send");
                acks.push((cmid, committed(outcome).ack()));
            }
            (sender, acks)
        }));
    }
    let mut by_seq: HashMap<u64, (String, String, SendAck)> = HashMap::new();
    for task in tasks {
        let (sender, acks) = task.await.expect("sender task");
        let own: Vec<u64> = acks.iter().map(|(_, a)| a.conversation_seq).collect();
        assert!(
            own.windows(2).all(|w| w[0] < w[1]),
            "{sender}'s sequential sends got increasing seqs: {own:?}"
        );
        for (cmid, ack) in acks {
            let previous = by_seq.insert(ack.conversation_seq, (sender.clone(), cmid, ack));
            assert!(previous.is_none(), "a seq was handed out twice");
        }
    }
    let mut all: Vec<u64> = by_seq.keys().copied().collect();
    all.sort_unstable();
    assert_eq!(all, (1..=N).collect::<Vec<_>>());
    let ids: HashSet<&str> = by_seq
        .values()
        .map(|(_, _, a)| a.message_id.as_str())
        .collect();
    assert_eq!(ids.len(), N as usize);
    assert_eq!(
        h.service
            .conversation(TENANT, &cid)
            .await
            .unwrap()
            .latest_seq,
        N
    );

    // The stored history is exactly what was acknowledged.
    let history = h.full_history(&cid).await;
    assert_eq!(seqs(&history), (1..=N).collect::<Vec<_>>());
    for r in &history {
        let (sender, cmid, ack) = &by_seq[&r.conversation_seq];
        assert_eq!(
            (&r.sender, &r.client_msg_id, &r.message_id),
            (sender, cmid, &ack.message_id)
        );
        assert_eq!(r.body, format!("body of {cmid}"));
    }

    // Archive and trim the whole conversation.
    assert_eq!(h.archive_and_trim_everything().await, N as usize);
    assert_eq!(h.floor(&cid).await, N);
    assert_eq!(h.hot().hot_len().await.unwrap(), 0);
    let (records, index) = h.archived_seqs(&cid).await;
    assert_eq!(records, (1..=N).collect::<Vec<_>>());
    assert_eq!(index, (1..=N).collect::<Vec<_>>());

    // Restart: the seq counter survives a fully trimmed conversation.
    let h = h.restart().await;
    let next = h.commit(&cid, "s3", "after-restart", "hi again").await;
    assert_eq!(next.conversation_seq, N + 1);
    let history = h.full_history(&cid).await;
    assert_eq!(seqs(&history), (1..=N + 1).collect::<Vec<_>>());
    assert_eq!(history[N as usize], next);
    // And an old retry still answers its original ACK.
    let (sender, cmid, ack) = &by_seq[&17];
    assert_eq!(
        duplicate(h.send(&cid, sender, cmid, "retry").await),
        ack.clone()
    );
}

on_every_backend!(
    /// The latest seq across trims: with part of the history trimmed it is still the newest hot
    /// message's seq, once everything is trimmed it is F, and the next SEND continues after it
    /// (the embedded store keeps no per-SEND counter row; the trimmer raises the high-water
    /// mark as it removes messages).
    #[tokio::test]
    latest_seq_holds_across_partial_and_full_trims,
    small_windows(),
    latest_seq_holds_across_partial_and_full_trims_on
);

async fn latest_seq_holds_across_partial_and_full_trims_on(h: Harness) {
    let cid = h.conversation(&["alice", "bob"]).await;
    let latest = || async { h.service.conversation(TENANT, &cid).await.unwrap() };
    assert_eq!(latest().await.latest_seq, 0);
    for i in 1..=3 {
        h.commit(&cid, "alice", &format!("a{i}"), "x").await;
    }
    assert_eq!(h.archive_and_trim_everything().await, 3);
    let after_first_trim = latest().await;
    assert_eq!(
        (after_first_trim.floor, after_first_trim.latest_seq),
        (3, 3)
    );
    assert_eq!(h.commit(&cid, "bob", "b4", "y").await.conversation_seq, 4);
    assert_eq!(h.commit(&cid, "bob", "b5", "y").await.conversation_seq, 5);
    let hot = latest().await;
    assert_eq!((hot.floor, hot.latest_seq), (3, 5));
    assert_eq!(h.archive_and_trim_everything().await, 2);
    let trimmed = latest().await;
    assert_eq!((trimmed.floor, trimmed.latest_seq), (5, 5));
    assert_eq!(h.commit(&cid, "alice", "a6", "z").await.conversation_seq, 6);
    assert_eq!(seqs(&h.full_history(&cid).await), vec![1, 2, 3, 4, 5, 6]);
}

on_every_backend!(
    /// A node restarted with its wall clock a minute behind dates nothing before what the
    /// store already holds (DESIGN.md "Many nodes": HLC, persisted so that it never goes back):
    /// its first commits take the watermark's time, in a new conversation and in an old one.
    #[tokio::test]
    a_restart_with_the_clock_stepped_back_dates_nothing_before_the_store,
    small_windows(),
    a_restart_with_the_clock_stepped_back_dates_nothing_before_the_store_on
);

async fn a_restart_with_the_clock_stepped_back_dates_nothing_before_the_store_on(h: Harness) {
    let cid = h.conversation(&["alice", "bob"]).await;
    let first = h.commit(&cid, "alice", "m-1", "hello").await;
    assert_eq!(first.committed_at_ms, common::START_MS);
    h.advance(h.margins_ms());
    h.archive_all().await;
    let watermark = h.watermark().await.expect("published");
    assert_eq!(watermark, common::START_MS + h.margins_ms());

    let h = h.restart().await;
    h.clock.set(common::START_MS - 60_000);
    let other = h.conversation(&["carol", "dave"]).await;
    let fresh = h.commit(&other, "carol", "m-1", "hi").await;
    assert_eq!(fresh.committed_at_ms, watermark);
    let next = h.commit(&cid, "bob", "m-2", "back again").await;
    assert_eq!(
        (next.conversation_seq, next.committed_at_ms),
        (2, watermark)
    );
}
