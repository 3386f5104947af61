//! The backfill (seed 000; `tidemark_chat::backfill`): an archiver stopped longer than the
//! outbox retention is refused at start, naming the command; the backfill archives the hot
//! history the outbox lost, and then the archiver starts, the archive is dense, and nothing
//! was trimmed before it was archived.

#[macro_use]
mod common;

use std::collections::BTreeMap;

use common::{Harness, small_windows};
use tidemark_chat::ChatError;
use tidemark_chat::archiver::Archiver;
use tidemark_chat::backfill::{BackfillReport, backfill};

on_every_backend!(
    /// Four messages in each of three conversations are archived; three more each are not,
    /// and retention drops them from the outbox.
    #[tokio::test]
    an_archiver_past_retention_is_refused_until_the_backfill_archives_the_hot_history,
    small_windows(),
    past_retention
);

async fn past_retention(h: Harness) {
    let cids = [
        h.conversation(&["alice", "bob"]).await,
        h.conversation(&["alice", "bob"]).await,
        h.conversation(&["alice", "bob"]).await,
    ];
    for (i, cid) in cids.iter().enumerate() {
        for k in 0..4 {
            h.commit(cid, "alice", &format!("a{i}-{k}"), &format!("early {k}"))
                .await;
        }
    }
    h.advance(h.margins_ms());
    assert_eq!(h.archive_all().await, 12);
    for cid in &cids {
        for k in 0..3 {
            h.commit(cid, "bob", &format!("b{k}"), &format!("late {k}"))
                .await;
        }
    }
    // Retention drops the whole log, the nine unarchived records with it.
    let outbox = h.outbox();
    assert_eq!(outbox.truncate(0, 21, i64::MAX, 100).await.unwrap(), 21);
    assert_eq!(outbox.offsets(0).await.unwrap(), (21, 21));

    let refused = Archiver::start(
        0,
        h.outbox(),
        h.archive(),
        h.hot(),
        h.shared_clock(),
        100,
        h.metrics.clone(),
    )
    .await
    .unwrap_err();
    assert!(matches!(
        refused,
        ChatError::PositionOutOfRange {
            partition: 0,
            position: 12,
            low: 21,
            high: 21
        }
    ));
    assert!(
        refused
            .to_string()
            .ends_with("with `tidemark chat backfill`"),
        "{refused}"
    );
    // The trimmer takes only what the watermark covers: the twelve archived.
    h.advance(ms(&h));
    assert_eq!(h.trim().await.trimmed, 12);

    let mut seen = Vec::new();
    let report = backfill(
        h.hot().as_ref(),
        h.outbox().as_ref(),
        h.archive().as_ref(),
        |n| seen.push(n),
    )
    .await
    .unwrap();
    assert_eq!(
        report,
        BackfillReport {
            positions: BTreeMap::from([(0, 21)]),
            records: 9,
            scanned: 9,
        }
    );
    assert_eq!(seen.last(), Some(&9));
    assert_eq!(h.archive().archived_through(0).await.unwrap(), Some(21));

    // Run again: nothing left to do.
    let again = backfill(
        h.hot().as_ref(),
        h.outbox().as_ref(),
        h.archive().as_ref(),
        |_| {},
    )
    .await
    .unwrap();
    assert_eq!(again, BackfillReport::default());

    // The archiver starts; everything leaves the hot tier; history reads whole from the
    // archive, every message with its body.
    let mut archiver = h.archiver().await;
    assert_eq!(archiver.position(), 21);
    assert!(archiver.run_once().await.unwrap().watermark_published);
    assert_eq!(h.archive_and_trim_everything().await, 9);
    assert_eq!(h.hot().hot_len().await.unwrap(), 0);
    for cid in &cids {
        let history = h.full_history(cid).await;
        let bodies: Vec<&str> = history.iter().map(|r| r.body.as_str()).collect();
        assert_eq!(
            bodies,
            [
                "early 0", "early 1", "early 2", "early 3", "late 0", "late 1", "late 2"
            ]
        );
        let seqs: Vec<u64> = history.iter().map(|r| r.conversation_seq).collect();
        assert_eq!(seqs, (1..=7).collect::<Vec<_>>());
    }
}

/// The hot window in ms: after it, a candidate is due by the clock.
fn ms(h: &Harness) -> i64 {
    common::ms(h.cfg.hot_window)
}
