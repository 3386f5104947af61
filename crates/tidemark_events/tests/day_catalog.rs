//! The day catalog of the InfluxDB raw tier: its conformance suite on the local SQLite file
//! and on MariaDB (the machine's server, a scratch database per test), and what sharing it
//! gives: two nodes ingesting one day into one InfluxDB get distinct sequence numbers, so no
//! point of one overwrites a point of the other, and both see every day; a node's local
//! catalog is merged in once.

mod common;

use std::sync::Arc;

use common::now_ms;
use tidemark_core::day::Day;
use tidemark_core::mysql::{drop_database, scratch_database, test_server_url};
use tidemark_events::conformance;
use tidemark_events::raw::catalog::Mark;
use tidemark_events::testing::InfluxServer;
use tidemark_events::{DayCatalog, Event, InfluxRaw, MysqlCatalog, RawStore, SqliteCatalog};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_day_catalog() {
    let dir = tempfile::tempdir().unwrap();
    let cat = SqliteCatalog::open(&dir.path().join("catalog.db")).unwrap();
    conformance::day_catalog(Arc::new(cat)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_day_catalog() {
    let url = scratch_database(&test_server_url(), "tm_catalog")
        .await
        .unwrap();
    let cat = Arc::new(MysqlCatalog::connect(&url, 2).await.unwrap());
    conformance::day_catalog(Arc::clone(&cat) as Arc<dyn DayCatalog>).await;
    cat.pool().close().await;
    drop_database(&url).await.unwrap();
}

/// The raw-tier suite on InfluxDB with the shared catalog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn influx_raw_store_on_the_shared_catalog() {
    let server = InfluxServer::start().unwrap();
    let url = scratch_database(&test_server_url(), "tm_catalog_raw")
        .await
        .unwrap();
    let cat = Arc::new(MysqlCatalog::connect(&url, 4).await.unwrap());
    let raw = InfluxRaw::connect_with_catalog(&server.url("tidemark"), Arc::clone(&cat) as _)
        .await
        .unwrap();
    conformance::raw_store(Arc::new(raw)).await;
    cat.pool().close().await;
    drop_database(&url).await.unwrap();
}

/// Two nodes append events of the same kind and millisecond to one day at once: every event
/// is a point of its own in InfluxDB, and the shared catalog counts them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_ingest_one_day_and_no_point_overwrites_another() {
    let server = InfluxServer::start().unwrap();
    let url = scratch_database(&test_server_url(), "tm_catalog_nodes")
        .await
        .unwrap();
    let mut nodes = Vec::new();
    for _ in 0..2 {
        let cat = Arc::new(MysqlCatalog::connect(&url, 4).await.unwrap());
        let raw = InfluxRaw::connect_with_catalog(&server.url("tidemark"), cat)
            .await
            .unwrap();
        nodes.push(Arc::new(raw));
    }
    let t = now_ms();
    let mut jobs = Vec::new();
    for (n, node) in nodes.iter().enumerate() {
        let node = Arc::clone(node);
        jobs.push(tokio::spawn(async move {
            for batch in 0..10 {
                let events: Vec<Event> = (0..50)
                    .map(|i| {
                        let mut e = Event::new("view", t);
                        e.listing_id = Some((n * 1000 + batch * 50 + i) as i64);
                        e
                    })
                    .collect();
                node.append(events, t).await.unwrap();
            }
        }));
    }
    for j in jobs {
        j.await.unwrap();
    }
    let day = Day::of_utc_ms(t);
    for node in &nodes {
        let events = node.day_events(day).await.unwrap();
        assert_eq!(events.len(), 1000, "every event is its own point");
        let mut ids: Vec<i64> = events.iter().filter_map(|e| e.listing_id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 1000);
        let days = node.days().await.unwrap();
        assert_eq!((days.len(), days[0].events), (1, 1000));
    }
    drop_database(&url).await.unwrap();
}

/// A node's local catalog is merged into the shared one once: a day both know sums its
/// events and keeps the earlier mark; the file is renamed and not merged again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_catalog_is_merged_in_once() {
    let url = scratch_database(&test_server_url(), "tm_catalog_merge")
        .await
        .unwrap();
    let shared = MysqlCatalog::connect(&url, 2).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("influx-catalog.db");
    let (d1, d2) = (Day(20_000), Day(20_001));
    {
        let local = SqliteCatalog::open(&path).unwrap();
        local
            .begin_appends(&[(d1, 4), (d2, 1)], 1_000)
            .await
            .unwrap();
        local
            .end_appends(&[(d1, 4), (d2, 1)], true, 1_000)
            .await
            .unwrap();
        local.set_mark(Mark::RolledUp, d1, 1_000).await.unwrap();
    }
    shared.begin_appends(&[(d1, 6)], 3_000).await.unwrap();
    shared.end_appends(&[(d1, 6)], true, 3_000).await.unwrap();
    shared.set_mark(Mark::RolledUp, d1, 3_000).await.unwrap();
    assert_eq!(shared.take_in_local(&path).await.unwrap(), 2);
    assert!(!path.exists() && dir.path().join("influx-catalog.db.moved").exists());
    let days = shared.days().await.unwrap();
    assert_eq!(
        (
            days[0].events,
            days[0].last_arrival_ms,
            days[0].rolled_up_arrival_ms
        ),
        (10, 3_000, Some(1_000))
    );
    assert_eq!((days[1].day, days[1].events), (d2, 1));
    // The next numbers of d1 follow both catalogs' numbers.
    let first = shared.begin_appends(&[(d1, 1)], 4_000).await.unwrap();
    assert_eq!(first[&d1], 6);
    assert_eq!(shared.take_in_local(&path).await.unwrap(), 0);
    shared.pool().close().await;
    drop_database(&url).await.unwrap();
}
