//! A trimmer pass over a backlog larger than one batch (`trimmer::Trimmer::run_pass`): it runs
//! batches until nothing eligible is left, unless it is cancelled (shutdown), in which case it
//! stops before its next batch, and the next pass goes on where it stopped. (That a token
//! fired during a batch stops the pass after that batch is the unit test of the trimmer's
//! batch loop.)

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
