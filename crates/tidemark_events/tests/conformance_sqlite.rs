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

/// A store of the embedded backends in `dir`, as a zone move works on it.
fn zone_store(dir: &std::path::Path) -> conformance::ZoneStore {
    use tidemark_core::store::StoreError;
    use tidemark_events::RawStore;

    let raw_path = dir.join("raw.db");
    conformance::ZoneStore {
        rollups: Arc::new(SqliteRollups::open(&dir.join("rollups.db")).unwrap()),
        archive: tidemark_events::archive::RawArchive::open(None, &dir.join("archive")).unwrap(),
        open_raw: Arc::new(move |calendar| {
            let path = raw_path.clone();
            Box::pin(async move {
                let raw = SqliteRaw::open(&path).map_err(StoreError::from)?;
                Ok(Arc::new(raw.with_calendar(calendar)) as Arc<dyn RawStore>)
            })
        }),
        scratch: dir.join("zone-move.db"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_zone_move() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    conformance::zone_move(zone_store(a.path()), zone_store(b.path()), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_zone_move_cut_short_and_resumed() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    conformance::zone_move(zone_store(a.path()), zone_store(b.path()), true).await;
}

/// A move under way is finished before another starts; past its stage it needs its scratch,
/// the only whole copy of the re-cut events, and says so rather than emptying the archive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_refuses_what_it_cannot_finish() {
    use tidemark_events::calendar::Calendar;
    use tidemark_events::zone_move::{MoveError, MoveStores, move_zone};

    let dir = tempfile::tempdir().unwrap();
    let store = zone_store(dir.path());
    let stores = MoveStores {
        rollups: store.rollups.as_ref(),
        archive: &store.archive,
        scratch: &store.scratch,
    };
    let pending = "move:UTC:Europe/Berlin:archive";
    store.rollups.record_time_zone(pending, None).await.unwrap();
    let open = |c| (store.open_raw)(c);
    let sarajevo = Calendar::named("Europe/Sarajevo").unwrap();
    let err = move_zone(stores, &sarajevo, &open, 0).await.unwrap_err();
    assert!(
        matches!(&err, MoveError::Refused(m) if m.contains("from UTC to Europe/Berlin is under way")),
        "{err}"
    );
    let berlin = Calendar::named("Europe/Berlin").unwrap();
    let err = move_zone(stores, &berlin, &open, 0).await.unwrap_err();
    assert!(
        matches!(&err, MoveError::Refused(m) if m.contains("zone-move.db is gone")),
        "{err}"
    );
    assert!(!store.scratch.exists());
    assert_eq!(
        store.rollups.recorded_time_zone().await.unwrap().as_deref(),
        Some(pending)
    );
}

/// A dropped day whose archive object is missing stops the move at its stage, naming the
/// object; nothing is re-cut, and the move can be abandoned there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_archive_object_stops_the_move_and_it_can_be_abandoned() {
    use tidemark_events::Event;
    use tidemark_events::calendar::{Calendar, agree_time_zone};
    use tidemark_events::zone_move::{MoveError, MoveStores, move_zone};

    let dir = tempfile::tempdir().unwrap();
    let store = zone_store(dir.path());
    let utc = Calendar::utc();
    let raw = (store.open_raw)(utc.clone()).await.unwrap();
    agree_time_zone(&utc, raw.as_ref(), store.rollups.as_ref())
        .await
        .unwrap();
    // 2024-05-01 and 2024-05-02, 10:00 UTC; the first day dropped.
    let (d1, d2) = (1_714_557_600_000, 1_714_644_000_000);
    raw.append(vec![Event::new("view", d1), Event::new("view", d2)], d2)
        .await
        .unwrap();
    let days: Vec<_> = raw.days().await.unwrap().iter().map(|s| s.day).collect();
    for &day in &days {
        tidemark_events::rollup::roll_up_day(raw.as_ref(), store.rollups.as_ref(), day, d2)
            .await
            .unwrap();
        store.archive.archive_day(raw.as_ref(), day).await.unwrap();
    }
    assert!(raw.drop_day(days[0], d2).await.unwrap());
    drop(raw);
    store.archive.delete_day(days[0]).await.unwrap();

    let stores = MoveStores {
        rollups: store.rollups.as_ref(),
        archive: &store.archive,
        scratch: &store.scratch,
    };
    let open = |c| (store.open_raw)(c);
    let berlin = Calendar::named("Europe/Berlin").unwrap();
    let err = move_zone(stores, &berlin, &open, d2).await.unwrap_err();
    assert!(
        matches!(&err, MoveError::Refused(m)
            if m.contains("day 2024-05-01 (1 events)") && m.contains("day=2024-05-01/events.parquet")),
        "{err}"
    );
    let err = move_zone(stores, &Calendar::named("Asia/Tokyo").unwrap(), &open, d2)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("or abandon it with --to UTC"),
        "{err}"
    );
    let report = move_zone(stores, &utc, &open, d2).await.unwrap();
    assert!(report.abandoned, "{report:?}");
    assert_eq!(
        store.rollups.recorded_time_zone().await.unwrap().as_deref(),
        Some("UTC")
    );
    let raw = (store.open_raw)(utc.clone()).await.unwrap();
    agree_time_zone(&utc, raw.as_ref(), store.rollups.as_ref())
        .await
        .unwrap();
    assert_eq!(
        raw.day_events(days[1]).await.unwrap().len(),
        1,
        "nothing re-cut"
    );
}
