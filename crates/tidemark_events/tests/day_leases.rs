//! Per-day leases (`tidemark_events::leases`): the contract on one process's leases and on
//! MariaDB's, the fence of the summary write, and two nodes' lifecycles over one set of
//! production stores working each day once.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use common::now_ms;
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use tidemark_core::ManualClock;
use tidemark_core::clock::SharedClock;
use tidemark_core::day::Day;
use tidemark_core::mysql::{drop_database, scratch_database, test_server_url};
use tidemark_core::store::ErrorKind;
use tidemark_events::archive::RawArchive;
use tidemark_events::conformance;
use tidemark_events::leases::mysql::MysqlDayLeases;
use tidemark_events::leases::{DayLeases, ProcessLeases};
use tidemark_events::lifecycle::Lifecycle;
use tidemark_events::metrics::EventsMetrics;
use tidemark_events::rollup::RollupService;
use tidemark_events::rollups::{DailyRow, MysqlRollups, RollupStore};
use tidemark_events::testing::InfluxServer;
use tidemark_events::{Event, EventsConfig, InfluxRaw, MysqlCatalog, RawStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_day_leases() {
    let ttl = Duration::from_millis(500);
    let a = ProcessLeases::new(ttl);
    let b = a.as_holder("b", ttl);
    conformance::day_leases(Arc::new(a), Arc::new(b), ttl).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_day_leases() {
    let url = scratch_database(&test_server_url(), "tm_leases")
        .await
        .unwrap();
    let rollups = MysqlRollups::connect(&url, 2).await.unwrap();
    let ttl = Duration::from_millis(1_000);
    let a = MysqlDayLeases::with_holder(rollups.pool().clone(), "node-a", ttl);
    let b = MysqlDayLeases::with_holder(rollups.pool().clone(), "node-b", ttl);
    conformance::day_leases(Arc::new(a), Arc::new(b), ttl).await;
    drop_database(&url).await.unwrap();
}

fn row(listing_id: i64, total: u64) -> DailyRow {
    DailyRow {
        listing_id,
        kind: "view".into(),
        total,
        uniques: 1,
        visitors: Vec::new(),
    }
}

/// A node whose lease ran out and was taken over writes its summary late: the write is
/// refused whole, and the new holder's summary stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summary_write_after_the_lease_was_lost_is_refused_whole() {
    let url = scratch_database(&test_server_url(), "tm_leases_fence")
        .await
        .unwrap();
    let rollups = MysqlRollups::connect(&url, 2).await.unwrap();
    let ttl = Duration::from_millis(800);
    let a = MysqlDayLeases::with_holder(rollups.pool().clone(), "node-a", ttl);
    let b = MysqlDayLeases::with_holder(rollups.pool().clone(), "node-b", ttl);
    let day = Day(20_000);
    let lease_a = a.acquire(day).await.unwrap().unwrap();
    rollups
        .upsert_day_fenced(day, vec![row(1, 5)], &lease_a)
        .await
        .unwrap();
    // Node a pauses past its lease; node b takes the day and rolls it up.
    tokio::time::sleep(ttl + Duration::from_millis(300)).await;
    let lease_b = b.acquire(day).await.unwrap().expect("expired: b takes it");
    assert_eq!(lease_b.token, lease_a.token + 1);
    rollups
        .upsert_day_fenced(day, vec![row(1, 7), row(2, 1)], &lease_b)
        .await
        .unwrap();
    // Node a wakes and writes what it computed before.
    let err = rollups
        .upsert_day_fenced(day, vec![row(1, 5), row(3, 9)], &lease_a)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    assert!(
        err.to_string().contains("was lost to another node"),
        "{err}"
    );
    assert_eq!(
        rollups.day_rows(day).await.unwrap(),
        vec![row(1, 7), row(2, 1)]
    );
    drop_database(&url).await.unwrap();
}

/// Two nodes' lifecycles run their passes at once over one InfluxDB raw tier, one shared day
/// catalog, one MariaDB summary tier and one archive: every day is rolled up and archived by
/// exactly one of them, with exact totals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_lifecycles_work_each_day_once() {
    let influx = InfluxServer::start().unwrap();
    let url = scratch_database(&test_server_url(), "tm_leases_nodes")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let now = now_ms();
    let days: Vec<Day> = (2..6).map(|i| Day::of_utc_ms(now).plus(-i)).collect();
    let clock: SharedClock = Arc::new(ManualClock::new(now));
    let cfg = EventsConfig::default();
    let mut nodes = Vec::new();
    for name in ["node-a", "node-b"] {
        let catalog = Arc::new(MysqlCatalog::connect(&url, 2).await.unwrap());
        let raw: Arc<dyn RawStore> = Arc::new(
            InfluxRaw::connect_with_catalog(
                &format!("{}?retention=3650d", influx.url("nodes")),
                catalog,
            )
            .await
            .unwrap(),
        );
        let rollups = MysqlRollups::connect(&url, 2).await.unwrap();
        let leases =
            MysqlDayLeases::with_holder(rollups.pool().clone(), name, Duration::from_secs(60));
        let service = RollupService::new(Arc::clone(&raw), Arc::new(rollups), Arc::clone(&clock))
            .with_leases(Arc::new(leases));
        let local: Arc<dyn ObjectStore> =
            Arc::new(LocalFileSystem::new_with_prefix(dir.path()).unwrap());
        let archive = RawArchive::new(local, ObjectPath::default());
        nodes.push((
            raw,
            Lifecycle::new(service, archive, &cfg, EventsMetrics::unregistered()),
        ));
    }
    // Day i: i + 1 views of listing 1, from node a and node b in turn.
    for (i, day) in days.iter().enumerate() {
        let events: Vec<Event> = (0..=i)
            .map(|k| {
                let mut e = Event::new("view", day.utc_start_ms() + 1_000 * k as i64);
                e.listing_id = Some(1);
                e
            })
            .collect();
        nodes[i % 2].0.append(events, now - 60_000).await.unwrap();
    }
    let (ra, rb) = tokio::join!(nodes[0].1.run_once(), nodes[1].1.run_once());
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    let set = |v: &[Day]| v.iter().copied().collect::<BTreeSet<_>>();
    for (what, a, b) in [
        ("rolled up", &ra.rolled_up, &rb.rolled_up),
        ("archived", &ra.archived, &rb.archived),
    ] {
        assert!(set(a).is_disjoint(&set(b)), "{what} by both: {a:?} {b:?}");
        let all: BTreeSet<Day> = set(a).union(&set(b)).copied().collect();
        assert_eq!(all, set(&days), "{what}: {a:?} + {b:?}");
    }
    assert!(
        ra.failures.is_empty() && rb.failures.is_empty(),
        "{ra:?} {rb:?}"
    );
    let check = MysqlRollups::connect(&url, 1).await.unwrap();
    for (i, day) in days.iter().enumerate() {
        assert_eq!(
            check.day_rows(*day).await.unwrap(),
            vec![DailyRow {
                listing_id: 1,
                kind: "view".into(),
                total: i as u64 + 1,
                uniques: 0,
                visitors: Vec::new(),
            }]
        );
    }
    // A second pass of either finds nothing to do.
    let again = nodes[1].1.run_once().await.unwrap();
    assert!(
        again.rolled_up.is_empty() && again.archived.is_empty(),
        "{again:?}"
    );
    drop_database(&url).await.unwrap();
}
