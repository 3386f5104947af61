//! The port conformance suites (`tidemark_chat::conformance`) on the embedded SQLite backends.

use std::sync::Arc;

use tidemark_chat::conformance;
use tidemark_chat::sqlite::{SqliteArchive, SqliteHot};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_shard_leases() {
    let dir = tempfile::tempdir().unwrap();
    conformance::shard_leases(
        Arc::new(SqliteHot::open(&dir.path().join("hot.db"), 64).unwrap()),
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_archivable_pages() {
    let dir = tempfile::tempdir().unwrap();
    conformance::archivable_pages(Arc::new(
        SqliteHot::open(&dir.path().join("hot.db"), 64).unwrap(),
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_hot_store() {
    let dir = tempfile::tempdir().unwrap();
    conformance::hot_store(Arc::new(
        SqliteHot::open(&dir.path().join("hot.db"), 64).unwrap(),
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_hot_store_clock() {
    let dir = tempfile::tempdir().unwrap();
    conformance::hot_store_clock(
        Arc::new(SqliteHot::open(&dir.path().join("hot.db"), 64).unwrap()),
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_outbox() {
    let dir = tempfile::tempdir().unwrap();
    conformance::outbox(Arc::new(
        SqliteHot::open(&dir.path().join("hot.db"), 64).unwrap(),
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_archive() {
    let dir = tempfile::tempdir().unwrap();
    conformance::archive(Arc::new(
        SqliteArchive::open(&dir.path().join("archive.db")).unwrap(),
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_hot_only_commit() {
    let dir = tempfile::tempdir().unwrap();
    conformance::hot_only_commit(Arc::new(
        SqliteHot::open(&dir.path().join("hot.db"), 64).unwrap(),
    ))
    .await;
}
