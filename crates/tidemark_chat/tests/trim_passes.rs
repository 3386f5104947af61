//! A trimmer pass over a backlog larger than one batch (`trimmer::Trimmer::run_pass`): it runs
//! batches until nothing eligible is left, unless it is cancelled (shutdown), in which case it
//! stops before its next batch, and the next pass goes on where it stopped. (That a token
//! fired during a batch stops the pass after that batch is the unit test of the trimmer's
//! batch loop.) And the trim rule's watermark bound across a change of the hot window.

mod common;

use common::{Harness, ms, small_windows};
use tidemark_chat::ChatConfig;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_pass_stops_between_batches_and_the_next_goes_on() {
    let cfg = ChatConfig {
        trim_batch: 2,
        ..small_windows()
    };
    Harness::on_every_backend(cfg, |h| async move {
        let cid = h.conversation(&["alice", "bob"]).await;
        for i in 0..7 {
            h.commit(&cid, "alice", &format!("c-{i}"), "hello").await;
        }
        h.advance(h.margins_ms());
        h.archive_all().await;
        h.advance(ms(h.cfg.hot_window));

        let cancelled = CancellationToken::new();
        cancelled.cancel();
        let stopped = h.trimmer().run_pass(&cancelled).await.unwrap();
        assert!(stopped.stopped, "a cancelled pass says it stopped early");
        assert_eq!(
            stopped.trimmed, 0,
            "a pass cancelled before it began trims nothing"
        );
        assert_eq!(h.hot_seqs(&cid).await, (1..=7).collect::<Vec<u64>>());
        assert_eq!(h.floor(&cid).await, 0);

        // Seven eligible, batches of two: the pass runs four batches, the last one short.
        let done = h.trim().await;
        assert!(!done.stopped);
        assert_eq!(done.trimmed, 7);
        assert_eq!(h.hot_seqs(&cid).await, Vec::<u64>::new());
        assert_eq!(h.floor(&cid).await, 7);
    })
    .await;
}

/// The hot window raised across a restart while the archiver lags: a message committed after
/// the watermark T under the old, smaller window (so not archived) must stay hot however long
/// it waits, and leaves only once archived. The watermark bound takes the smallest window the
/// store's candidates were scored with (`trimmer` module docs); with today's window in it, the
/// unarchived message was trimmed once it outlived the old window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raised_hot_window_never_trims_an_unarchived_message() {
    Harness::on_every_backend(small_windows(), |mut h| async move {
        let cid = h.conversation(&["alice", "bob"]).await;
        h.commit(&cid, "alice", "archived", "one").await;
        h.advance(h.margins_ms());
        h.archive_all().await; // T = now: seq 1 is archived
        h.advance(1);
        h.commit(&cid, "alice", "unarchived", "two").await; // after T; the archiver stalls
        assert_eq!(h.archived_seqs(&cid).await.0, vec![1]);

        let old_window = ms(h.cfg.hot_window); // 10 s
        h.cfg.hot_window *= 10; // 100 s
        let h = h.restart().await;
        h.advance(2 * old_window);
        assert_eq!(
            h.trim().await.trimmed,
            1,
            "seq 1: archived, scored with 10 s"
        );
        h.advance(10 * ms(h.cfg.hot_window));
        assert_eq!(h.trim().await.trimmed, 0);
        assert_eq!(
            h.hot_seqs(&cid).await,
            vec![2],
            "the unarchived message stays, however old"
        );
        assert_eq!(h.floor(&cid).await, 1);

        h.archive_all().await;
        assert_eq!(h.trim().await.trimmed, 1, "archived, it leaves");
        assert_eq!(h.hot_seqs(&cid).await, Vec::<u64>::new());
        assert_eq!(h.floor(&cid).await, 2);
        assert_eq!(
            h.full_history(&cid)
                .await
                .iter()
                .map(|r| r.body.as_str())
                .collect::<Vec<_>>(),
            ["one", "two"]
        );
    })
    .await;
}
