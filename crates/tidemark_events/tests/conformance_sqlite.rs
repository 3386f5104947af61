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

/// Stores that hold events from before zones were recorded were cut in UTC: they record UTC,
/// and refuse another zone, naming both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_stores_from_before_zones_keep_utc() {
    use tidemark_events::calendar::{Calendar, agree_time_zone};
    use tidemark_events::{Event, RawStore};

    let dir = tempfile::tempdir().unwrap();
    let raw = SqliteRaw::open(&dir.path().join("raw.db")).unwrap();
    let rollups = SqliteRollups::open(&dir.path().join("rollups.db")).unwrap();
    raw.append(
        vec![Event::new("view", 1_795_999_534_123)],
        1_795_999_534_123,
    )
    .await
    .unwrap();
    let berlin = Calendar::named("Europe/Berlin").unwrap();
    let err = agree_time_zone(&berlin, &raw, &rollups)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            r#"events.time_zone is "Europe/Berlin", but this store's days were cut in "UTC""#
        ),
        "{err}"
    );
    use tidemark_events::rollups::RollupStore;
    assert_eq!(
        rollups.recorded_time_zone().await.unwrap().as_deref(),
        Some("UTC")
    );
    agree_time_zone(&Calendar::utc(), &raw, &rollups)
        .await
        .unwrap();
}
