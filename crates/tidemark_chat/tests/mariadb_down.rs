//! Fault test: the archive's MariaDB goes down (SIGKILL of a private `mariadbd`)
//! under a Redis hot store. The archiver pauses (its batch fails and stores nothing), archive
//! lag grows, nothing more is trimmed and reads that need the archive fail whole (retryable);
//! once MariaDB is back the archiver catches up and trimming resumes, with no gap in the
//! history.

mod common;

use common::{Harness, ms, seqs, small_windows};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_down_pauses_the_archiver_stops_trimming_and_it_catches_up_without_a_gap() {
    let h = Harness::production_with_private_mariadb(small_windows()).await;
    let cid = h.conversation(&["alice", "bob"]).await;
    for i in 1..=10 {
        h.commit(&cid, "alice", &format!("k{i}"), &format!("m{i}"))
            .await;
    }
    assert_eq!(h.archive_and_trim_everything().await, 10);
    assert_eq!(h.floor(&cid).await, 10);

    let mut archiver = h.archiver().await;
    let first_unarchived = h.now();
    for i in 11..=20 {
        h.commit(&cid, "bob", &format!("k{i}"), &format!("m{i}"))
            .await;
    }
    h.kill_mariadb();

    // The archiver's batch fails (retryable) and its position stays.
    let position = archiver.position();
    let err = archiver.run_once().await.unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert_eq!(archiver.position(), position);

    // Far past the hot window: nothing more is trimmed, the lag grows, the hot tier still reads.
    for step in [1, 2] {
        h.advance(ms(h.cfg.hot_window) + h.margins_ms());
        let pass = h.trimmer().run_once().await;
        assert!(
            pass.is_err(),
            "the archive purge cannot run while MariaDB is down"
        );
        assert_eq!(h.hot().hot_len().await.unwrap(), 10);
        assert_eq!(h.floor(&cid).await, 10);
        assert_eq!(
            h.metrics.archive_lag(0).get(),
            (h.now() - first_unarchived) / 1000,
            "lag after step {step}"
        );
    }
    // A page of hot seqs still needs `earliest_available_seq` from the archive (F > 0): it
    // fails whole with a retryable error rather than answering without it.
    let page = h
        .service
        .history(
            common::TENANT,
            &cid,
            "alice",
            tidemark_chat::reads::Anchor::After(10),
            10,
        )
        .await;
    assert!(matches!(page, Err(ref e) if e.is_retryable()), "{page:?}");

    // Back: the same archiver catches up from its position, then trimming resumes.
    h.restart_mariadb();
    let mut archived = 0;
    loop {
        let out = archiver.run_once().await.expect("archiver after restart");
        archived += out.archived;
        if out.archived == 0 {
            break;
        }
    }
    assert_eq!(archived, 10);
    assert_eq!(h.archive_and_trim_everything().await, 10);
    assert_eq!(h.floor(&cid).await, 20);
    let all: Vec<u64> = (1..=20).collect();
    assert_eq!(h.archived_seqs(&cid).await, (all.clone(), all.clone()));
    let history = h.full_history(&cid).await;
    assert_eq!(seqs(&history), all);
    assert!(
        history
            .iter()
            .all(|r| r.body == format!("m{}", r.conversation_seq))
    );
    assert_eq!(h.trim().await.archive_lag_ms, 0);
}
