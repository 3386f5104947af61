//! Archiver fault injection (DESIGN.md part A, "Archiver"): the archive port is
//! wrapped in `testing::FaultyArchive`, one write of a batch fails, and the archiver must store
//! nothing (neither its position nor the watermark T), replay the batch, and end with every
//! record archived exactly once — never showing an index entry without its record.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{Harness, START_MS, TENANT, ms, seqs, small_windows};
use tidemark_chat::ChatError;
use tidemark_chat::archiver::ARCHIVER_CONSUMER;
use tidemark_chat::model::{MessageClass, SendOutcome};
use tidemark_chat::testing::FaultyArchive;

/// Three records per archiver batch, so one batch is one group of three sends.
async fn harness() -> Harness {
    Harness::with_faulty_archive(tidemark_chat::ChatConfig {
        archive_batch_max: 3,
        ..small_windows()
    })
    .await
}

fn faulty(h: &Harness) -> &FaultyArchive {
    h.faulty.as_deref().expect("harness with a faulty archive")
}

/// Sends `n` messages from alice, with client ids `c-<from>` ...; returns nothing (the seqs are
/// checked through the archive and the reads).
async fn send_many(h: &Harness, cid: &str, from: usize, n: usize) {
    for i in from..from + n {
        h.commit(cid, "alice", &format!("c-{i}"), &format!("body {i}"))
            .await;
    }
}

/// Checks, through the archive port, that every visible index entry of `1..=hi` has its record.
async fn assert_index_has_records(h: &Harness, cid: &str, hi: u64) {
    let archive = h.archive();
    let index = archive.index_range(TENANT, cid, 1, hi).await.unwrap();
    let wanted: Vec<u64> = index.iter().map(|e| e.conversation_seq).collect();
    let mut found: Vec<u64> = archive
        .records(TENANT, cid, &wanted)
        .await
        .unwrap()
        .iter()
        .map(|r| r.conversation_seq)
        .collect();
    found.sort_unstable();
    assert_eq!(found, wanted, "every index entry has its record");
    assert_eq!(h.orphan_index_entries().await, 0);
}

/// Seqs 1..=3 archived at T1 = START + 2 s; seqs 4..=6 committed at START + 3 s.
/// Returns `(archiver, conversation id, T1)`.
async fn first_batch_archived_second_pending(
    h: &Harness,
) -> (tidemark_chat::archiver::Archiver, String, i64) {
    let cid = h.conversation(&["alice", "bob"]).await;
    send_many(h, &cid, 1, 3).await;
    h.advance(2_000);
    let t1 = h.now();
    let mut archiver = h.archiver().await;
    let out = archiver.run_once().await.unwrap();
    assert_eq!((out.archived, out.watermark_published), (3, true));
    assert_eq!(h.watermark().await, Some(t1));
    assert_eq!(
        h.outbox().position(ARCHIVER_CONSUMER, 0).await.unwrap(),
        Some(3)
    );
    h.advance(1_000);
    send_many(h, &cid, 4, 3).await;
    h.advance(2_000);
    (archiver, cid, t1)
}

/// A failed `put_records` stores nothing: position and watermark stay, the archive holds
/// nothing of the batch; the trimmer, still bound by the old T, only trims what T covers; the
/// replay then archives the batch, each record exactly once, and publishes the new T.
#[tokio::test]
async fn failed_record_write_stores_nothing_and_the_batch_is_replayed_once() {
    let h = harness().await;
    let (mut archiver, cid, t1) = first_batch_archived_second_pending(&h).await;

    faulty(&h).fail_next_records(1);
    let err = archiver.run_once().await.unwrap_err();
    assert!(
        matches!(&err, ChatError::Store(e) if e.is_retryable() && e.to_string().contains("injected put_records failure")),
        "{err:?}"
    );
    assert_eq!(archiver.position(), 3);
    assert_eq!(
        h.outbox().position(ARCHIVER_CONSUMER, 0).await.unwrap(),
        Some(3)
    );
    assert_eq!(h.watermark().await, Some(t1));
    assert_eq!(h.archived_seqs(&cid).await, (vec![1, 2, 3], vec![1, 2, 3]));
    assert_index_has_records(&h, &cid, 6).await;

    // A stalled archiver stops deletion: far past the hot window, the trimmer removes exactly
    // the records T1 covers (committed at START ≤ T1 − 1.5 s), not the unarchived 4..=6.
    h.advance(ms(h.cfg.hot_window));
    assert_eq!(h.trim().await.trimmed, 3);
    assert_eq!(h.floor(&cid).await, 3);
    assert_eq!(h.hot_seqs(&cid).await, vec![4, 5, 6]);
    assert_eq!(seqs(&h.full_history(&cid).await), vec![1, 2, 3, 4, 5, 6]);

    // The replay archives the batch and publishes T for it.
    let t2 = h.now();
    let out = archiver.run_once().await.unwrap();
    assert_eq!((out.archived, out.watermark_published), (3, true));
    assert_eq!(archiver.position(), 6);
    assert_eq!(
        h.outbox().position(ARCHIVER_CONSUMER, 0).await.unwrap(),
        Some(6)
    );
    assert_eq!(h.watermark().await, Some(t2));
    let out = archiver.run_once().await.unwrap();
    assert_eq!(out.archived, 0);

    let all: Vec<u64> = (1..=6).collect();
    assert_eq!(h.archived_seqs(&cid).await, (all.clone(), all.clone()));
    assert_eq!(h.archive_row_counts().await, (6, 6));
    assert_index_has_records(&h, &cid, 6).await;
    let f = faulty(&h);
    // put_records: batch 1, the failed try, the replay (and none for the empty run).
    assert_eq!(f.record_writes.load(Ordering::SeqCst), 3);
    assert_eq!(f.index_writes.load(Ordering::SeqCst), 2);
    assert_eq!(h.metrics.archived_total(), 6);

    // Now everything can leave the hot tier; reads are unchanged.
    h.advance(ms(h.cfg.hot_window));
    assert_eq!(h.trim().await.trimmed, 3);
    assert_eq!(h.floor(&cid).await, 6);
    let history = h.full_history(&cid).await;
    assert_eq!(seqs(&history), all);
    assert_eq!(history[4].body, "body 5");
}

/// A failed `put_index` after a successful `put_records` also stores nothing: the batch's
/// records are in the archive but none of its index entries (never the other way round);
/// a freshly started archiver resumes from the stored position and completes the batch with
/// the records written once.
#[tokio::test]
async fn failed_index_write_leaves_records_without_index_and_is_replayed_once() {
    let h = harness().await;
    let (mut archiver, cid, t1) = first_batch_archived_second_pending(&h).await;

    faulty(&h).fail_next_index(1);
    let err = archiver.run_once().await.unwrap_err();
    assert!(
        matches!(&err, ChatError::Store(e) if e.is_retryable() && e.to_string().contains("injected put_index failure")),
        "{err:?}"
    );
    assert_eq!(archiver.position(), 3);
    assert_eq!(
        h.outbox().position(ARCHIVER_CONSUMER, 0).await.unwrap(),
        Some(3)
    );
    assert_eq!(h.watermark().await, Some(t1));
    assert_eq!(
        h.archived_seqs(&cid).await,
        (vec![1, 2, 3, 4, 5, 6], vec![1, 2, 3])
    );
    assert_index_has_records(&h, &cid, 6).await;
    // Reads are complete: 4..=6 are still hot.
    assert_eq!(seqs(&h.full_history(&cid).await), vec![1, 2, 3, 4, 5, 6]);

    // An archiver restarted now replays from the stored position 3.
    drop(archiver);
    let mut archiver = h.archiver().await;
    assert_eq!(archiver.position(), 3);
    let t2 = h.now();
    let out = archiver.run_once().await.unwrap();
    assert_eq!((out.archived, out.watermark_published), (3, true));
    assert_eq!(
        h.outbox().position(ARCHIVER_CONSUMER, 0).await.unwrap(),
        Some(6)
    );
    assert_eq!(h.watermark().await, Some(t2));

    let all: Vec<u64> = (1..=6).collect();
    assert_eq!(h.archived_seqs(&cid).await, (all.clone(), all.clone()));
    assert_eq!(h.archive_row_counts().await, (6, 6));
    assert_index_has_records(&h, &cid, 6).await;
    let f = faulty(&h);
    assert_eq!(f.record_writes.load(Ordering::SeqCst), 3);
    assert_eq!(f.index_writes.load(Ordering::SeqCst), 3);

    assert_eq!(h.archive_and_trim_everything().await, 6);
    assert_eq!(h.floor(&cid).await, 6);
    assert_eq!(seqs(&h.full_history(&cid).await), all);
}

/// A failure on the very first batch leaves no stored position and no watermark at all, so
/// nothing can be trimmed however far the clock moves; the replay starts again at offset 0.
#[tokio::test]
async fn failed_first_batch_publishes_no_watermark_and_blocks_all_trimming() {
    let h = harness().await;
    let cid = h.conversation(&["alice", "bob"]).await;
    send_many(&h, &cid, 1, 5).await;
    h.advance(2_000);

    let mut archiver = h.archiver().await;
    faulty(&h).fail_next_records(1);
    assert!(archiver.run_once().await.is_err());
    assert_eq!(archiver.position(), 0);
    assert_eq!(
        h.outbox().position(ARCHIVER_CONSUMER, 0).await.unwrap(),
        None
    );
    assert_eq!(h.watermark().await, None);
    assert_eq!(h.archive_row_counts().await, (0, 0));

    h.advance(ms(Duration::from_secs(3600)));
    let out = h.trim().await;
    assert_eq!(out.trimmed, 0);
    assert_eq!(out.archive_lag_ms, 3_600_000 + 2_000);
    assert_eq!(h.hot().hot_len().await.unwrap(), 5);

    // Batches of 3: the first run archives 1..=3 and must not publish T (not caught up).
    let out = archiver.run_once().await.unwrap();
    assert_eq!((out.archived, out.watermark_published), (3, false));
    assert_eq!(h.watermark().await, None);
    let t = h.now();
    let out = archiver.run_once().await.unwrap();
    assert_eq!((out.archived, out.watermark_published), (2, true));
    assert_eq!(h.watermark().await, Some(t));
    assert_eq!(h.archive_row_counts().await, (5, 5));
    assert_eq!(h.archived_seqs(&cid).await.0, vec![1, 2, 3, 4, 5]);
    assert_eq!(START_MS + 2_000 + 3_600_000, t);
}

/// `sync-archive`: a SEND whose archive write fails after its commit answers `NotArchived`
/// with its seq (not a bare "unavailable": the message is committed and readable); it counts as
/// sent; a retry with the same client id writes the archive and gets the original ACK, and the
/// archive then holds the message once (never a 503 for a message that was stored).
#[tokio::test]
async fn sync_archive_answers_not_archived_for_a_committed_message_and_the_retry_archives_it() {
    let h = Harness::with_faulty_archive(tidemark_chat::ChatConfig {
        mode: tidemark_chat::ChatMode::SyncArchive,
        ..small_windows()
    })
    .await;
    let cid = h.conversation(&["alice", "bob"]).await;
    h.commit(&cid, "alice", "c-1", "first").await;
    assert_eq!(h.archived_seqs(&cid).await, (vec![1], vec![1]));

    let fail_records = FaultyArchive::fail_next_records as fn(&FaultyArchive, usize);
    for (seq, fail) in [(2, fail_records), (3, FaultyArchive::fail_next_index)] {
        fail(faulty(&h), 1);
        let client_id = format!("c-{seq}");
        let cmd = common::command(&cid, "alice", &client_id, "again", MessageClass::Standard);
        let err = h.service.send(cmd).await.unwrap_err();
        let ChatError::NotArchived {
            conversation_seq,
            ref message_id,
            ..
        } = err
        else {
            panic!("{err:?}");
        };
        let message_id = message_id.clone();
        assert_eq!(conversation_seq, seq, "{err}");
        assert!(err.to_string().contains("injected"), "{err}");
        assert!(err.is_retryable());
        let api = tidemark_core::http::ApiError::from(err);
        assert_eq!((api.status.as_u16(), api.code), (503, "not_archived"));
        // `/readyz` hears of it until a commit succeeds.
        let health = h.service.commit_health().check().unwrap_err();
        assert!(health.contains("injected"), "{health}");
        // Committed all the same: readable, counted as sent, its seq taken.
        assert_eq!(h.hot_seqs(&cid).await, (1..=seq).collect::<Vec<_>>());
        assert_eq!(h.metrics.sends.get(), seq);
        // The retry archives it and answers the original ACK.
        let retry = h.send(&cid, "alice", &client_id, "again").await;
        let SendOutcome::Duplicate(ack) = retry else {
            panic!("{retry:?}");
        };
        assert_eq!((ack.conversation_seq, ack.message_id), (seq, message_id));
        assert!(
            h.service.commit_health().check().is_err(),
            "a retry commits nothing: /readyz still hears of the failure"
        );
        let archived: Vec<u64> = (1..=seq).collect();
        assert_eq!(h.archived_seqs(&cid).await, (archived.clone(), archived));
    }
    assert_eq!(h.archive_row_counts().await, (3, 3));
    assert_eq!(h.metrics.sends.get(), 3);

    // A retry of an archived message only reads the archive: it answers its ACK even while the
    // archive's writes fail, and writes nothing. The next new message meets the failure.
    let f = faulty(&h);
    let writes = (
        f.record_writes.load(Ordering::SeqCst),
        f.index_writes.load(Ordering::SeqCst),
    );
    f.fail_next_records(1);
    let retry = h.send(&cid, "alice", "c-1", "first").await;
    assert!(
        matches!(&retry, SendOutcome::Duplicate(ack) if ack.conversation_seq == 1),
        "{retry:?}"
    );
    assert_eq!(
        (
            f.record_writes.load(Ordering::SeqCst),
            f.index_writes.load(Ordering::SeqCst)
        ),
        writes
    );
    let cmd = common::command(&cid, "alice", "c-4", "later", MessageClass::Standard);
    let err = h.service.send(cmd).await.unwrap_err();
    assert!(
        matches!(
            err,
            ChatError::NotArchived {
                conversation_seq: 4,
                ..
            }
        ),
        "{err:?}"
    );
    // A new message committed and archived clears it.
    h.commit(&cid, "alice", "c-5", "works").await;
    assert_eq!(h.service.commit_health().check(), Ok(()));
}
