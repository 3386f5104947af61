//! The events port conformance suites (`tidemark_events::conformance`) on the embedded SQLite
//! backends.

use std::sync::Arc;

use tidemark_events::conformance;
use tidemark_events::raw::SqliteRaw;
use tidemark_events::rollups::SqliteRollups;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_rollup_store() {
    let dir = tempfile::tempdir().unwrap();
    conformance::rollup_store(Arc::new(
        SqliteRollups::open(&dir.path().join("rollups.db")).unwrap(),
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_period_uniques() {
    let dir = tempfile::tempdir().unwrap();
    conformance::period_uniques(Arc::new(
        SqliteRollups::open(&dir.path().join("rollups.db")).unwrap(),
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_raw_store() {
    let dir = tempfile::tempdir().unwrap();
    conformance::raw_store(Arc::new(
        SqliteRaw::open(&dir.path().join("raw.db")).unwrap(),
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_local_days() {
    let dir = tempfile::tempdir().unwrap();
    let berlin = tidemark_events::calendar::Calendar::named("Europe/Berlin").unwrap();
    conformance::local_days(
        Arc::new(
            SqliteRaw::open(&dir.path().join("raw.db"))
                .unwrap()
                .with_calendar(berlin),
        ),
        Arc::new(SqliteRollups::open(&dir.path().join("rollups.db")).unwrap()),
    )
    .await;
}
