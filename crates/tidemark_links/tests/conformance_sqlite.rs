//! The link-store conformance suite (`tidemark_links::conformance`) on the embedded SQLite
//! store.

use std::sync::Arc;

use tidemark_links::conformance;
use tidemark_links::sqlite::SqliteLinks;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_link_store() {
    let dir = tempfile::tempdir().unwrap();
    conformance::link_store(Arc::new(
        SqliteLinks::open(&dir.path().join("links.db")).unwrap(),
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_mailing_store() {
    let dir = tempfile::tempdir().unwrap();
    conformance::mailing_store(Arc::new(
        SqliteLinks::open(&dir.path().join("links.db")).unwrap(),
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_stats_store() {
    let dir = tempfile::tempdir().unwrap();
    conformance::stats_store(Arc::new(
        SqliteLinks::open(&dir.path().join("links.db")).unwrap(),
    ))
    .await;
}
