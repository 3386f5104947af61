//! The archiver's batch limits (`archiver::Archiver::run_once`): a batch ends at
//! `archive_batch_max` records, at the byte budget of message bodies, or at the end of the log,
//! and only the last of these lets the archiver pause; the next batch goes on where the last
//! ended, and in the end every record is archived exactly once.

mod common;

use common::{Harness, small_windows};
use tidemark_chat::ChatConfig;

/// `(archived, full, watermark published)` of each `run_once` until one archives nothing.
async fn batches(h: &Harness, bytes_max: usize) -> Vec<(usize, bool, bool)> {
    let mut archiver = h.archiver().await.with_batch_bytes_max(bytes_max);
    let mut out = Vec::new();
    loop {
        let o = archiver.run_once().await.unwrap();
        out.push((o.archived, o.full, o.watermark_published));
        if o.archived == 0 {
            return out;
        }
    }
}

/// 25 messages of 1,000-byte bodies in one conversation; returns its id.
async fn twenty_five_messages(h: &Harness) -> String {
    let cid = h.conversation(&["alice", "bob"]).await;
    let body = "x".repeat(1_000);
    for i in 0..25 {
        h.commit(&cid, "alice", &format!("c-{i}"), &body).await;
    }
    cid
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_ends_at_its_byte_budget_and_the_next_goes_on() {
    let cfg = ChatConfig {
        archive_batch_max: 100,
        ..small_windows()
    };
    Harness::on_every_backend(cfg, |h| async move {
        let cid = twenty_five_messages(&h).await;
        // 10,000 bytes: the tenth body reaches it, so batches of 10, 10, then the 5 left.
        assert_eq!(
            batches(&h, 10_000).await,
            vec![
                (10, true, false),
                (10, true, false),
                (5, false, true),
                (0, false, true)
            ]
        );
        let all: Vec<u64> = (1..=25).collect();
        assert_eq!(h.archived_seqs(&cid).await, (all.clone(), all));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_ends_at_batch_max_records_and_holds_at_least_one_record() {
    let cfg = ChatConfig {
        archive_batch_max: 8,
        ..small_windows()
    };
    Harness::on_every_backend(cfg, |h| async move {
        let cid = twenty_five_messages(&h).await;
        // The record limit ends these batches; the byte budget (1 MiB) is far away.
        assert_eq!(
            batches(&h, 1 << 20).await,
            vec![
                (8, true, false),
                (8, true, false),
                (8, true, false),
                (1, false, true),
                (0, false, true)
            ]
        );
        // A budget smaller than one body still moves one record per batch.
        let more = h.conversation(&["alice", "bob"]).await;
        for i in 0..2 {
            h.commit(&more, "alice", &format!("m-{i}"), "0123456789")
                .await;
        }
        assert_eq!(
            batches(&h, 1).await,
            vec![(1, true, false), (1, true, true), (0, false, true)]
        );
        let all: Vec<u64> = (1..=25).collect();
        assert_eq!(h.archived_seqs(&cid).await, (all.clone(), all));
        assert_eq!(h.archived_seqs(&more).await, (vec![1, 2], vec![1, 2]));
    })
    .await;
}
