//! The raw-tier conformance suite (`tidemark_events::conformance::raw_store`) on a real
//! InfluxDB 1.x, started by the test on a free loopback port with a temp directory
//! (`tidemark_events::testing::InfluxServer`), and the InfluxDB-only promises: cardinality stays
//! the number of kinds, the retention policy exists, InfluxDB down means nothing acknowledged.

mod common;

use std::sync::Arc;

use common::now_ms;
use tidemark_core::day::Day;
use tidemark_core::store::ErrorKind;
use tidemark_events::conformance;
use tidemark_events::raw::influx::RETENTION_POLICY;
use tidemark_events::testing::InfluxServer;
use tidemark_events::{Event, InfluxRaw, RawError, RawStore};

async fn influx_query(server: &InfluxServer, db: &str, q: &str) -> serde_json::Value {
    let out = tokio::process::Command::new("curl")
        .args(["-sfG", &format!("http://127.0.0.1:{}/query", server.port)])
        .args(["--data-urlencode", &format!("db={db}")])
        .args(["--data-urlencode", &format!("q={q}")])
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The row of Tidemark's retention policy in `SHOW RETENTION POLICIES` of `db`: name,
/// duration, shard group duration, replicas, default.
async fn our_retention_policy(server: &InfluxServer, db: &str) -> serde_json::Value {
    let v = influx_query(server, db, "SHOW RETENTION POLICIES").await;
    let rps = v["results"][0]["series"][0]["values"].as_array().unwrap();
    rps.iter()
        .find(|r| r[0] == RETENTION_POLICY)
        .unwrap_or_else(|| panic!("{v}"))
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn influx_raw_store() {
    let server = InfluxServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let raw = InfluxRaw::connect(&server.url("tidemark"), &dir.path().join("catalog.db"))
        .await
        .unwrap();
    conformance::raw_store(Arc::new(raw)).await;
}

/// A server that answers at most 3 rows per query (`max-row-limit`) still gives every event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn influx_raw_store_behind_a_row_limit() {
    let server = InfluxServer::start_with_max_row_limit(3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let raw = InfluxRaw::connect(&server.url("tidemark"), &dir.path().join("catalog.db"))
        .await
        .unwrap();
    conformance::raw_store(Arc::new(raw)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn series_cardinality_is_the_number_of_kinds_and_retention_is_seven_days() {
    let server = InfluxServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let raw = InfluxRaw::connect(&server.url("tidemark"), &dir.path().join("catalog.db"))
        .await
        .unwrap();
    let t = now_ms() - 3_600_000;
    let events: Vec<Event> = (0..2_000)
        .map(|i| {
            let mut e = Event::new(if i % 3 == 0 { "click" } else { "view" }, t + i / 4);
            e.listing_id = Some(i);
            e.user_id = Some(format!("u{i}"));
            e.device_id = Some(format!("d{i}"));
            e.session_id = Some(format!("s{i}"));
            e.page_url = Some(format!("/item/{i}"));
            e
        })
        .collect();
    raw.append(events, t + 1_000).await.unwrap();
    assert_eq!(
        raw.day_events(Day::of_utc_ms(t)).await.unwrap().len(),
        2_000
    );
    // InfluxDB removes the day by itself 7 days after its end: the lifecycle watches that.
    let day = Day::of_utc_ms(t);
    assert_eq!(
        raw.expires_at_ms(day),
        Some(day.plus(8).utc_start_ms()),
        "the end of the day + 7 days"
    );
    // One series per kind, whatever the identifiers (seed 002).
    let v = influx_query(&server, "tidemark", "SHOW SERIES").await;
    let series = v["results"][0]["series"][0]["values"].clone();
    assert_eq!(
        series,
        serde_json::json!([["listing_event,event=click"], ["listing_event,event=view"]]),
        "{v}"
    );
    // The retention policy: 7 days, day shards, the default.
    let ours = our_retention_policy(&server, "tidemark").await;
    assert_eq!(
        (ours[1].as_str(), ours[2].as_str(), ours[4].as_bool()),
        (Some("168h0m0s"), Some("24h0m0s"), Some(true))
    );
}

/// A raw retention under two days gets hour shards (InfluxDB's own rule for such a policy; it
/// refuses a policy shorter than its shards), and a day then starts to expire with its first
/// hour's shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retention_under_two_days_starts_with_hour_shards() {
    let server = InfluxServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let raw = InfluxRaw::connect(
        &format!("{}?retention=12h", server.url("short")),
        &dir.path().join("catalog.db"),
    )
    .await
    .unwrap();
    let ours = our_retention_policy(&server, "short").await;
    assert_eq!(
        (ours[1].as_str(), ours[2].as_str()),
        (Some("12h0m0s"), Some("1h0m0s"))
    );
    let day = Day::of_utc_ms(now_ms());
    assert_eq!(
        raw.expires_at_ms(day),
        Some(day.utc_start_ms() + 13 * 3_600_000),
        "the day's first hour + 12 h"
    );
    // An event whose hour shard has expired is refused, even though its day has not ended
    // that long ago: InfluxDB would drop it from the batch.
    let t = now_ms() - 13 * 3_600_000;
    let err = raw
        .append(vec![Event::new("view", t)], now_ms())
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("older than the raw tier's retention"),
        "{err}"
    );
    raw.append(vec![Event::new("view", now_ms() - 3_600_000)], now_ms())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn influx_down_means_nothing_acknowledged_and_it_recovers() {
    let mut server = InfluxServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let raw = InfluxRaw::connect(&server.url("tm"), &dir.path().join("catalog.db"))
        .await
        .unwrap();
    let t = now_ms() - 60_000;
    let day = Day::of_utc_ms(t);
    raw.append(vec![Event::new("view", t)], 1).await.unwrap();

    server.stop();
    let err = raw
        .append(vec![Event::new("view", t + 1)], 2)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RawError::Store(e) if e.kind() == ErrorKind::Unavailable && e.is_retryable()),
        "{err:?}"
    );
    let state = raw.days().await.unwrap()[0];
    assert_eq!(state.events, 1, "the failed batch is not counted");
    assert!(
        state.last_arrival_ms > 1,
        "but the day is dirty for the jobs"
    );
    assert!(
        !raw.drop_day(day, 3).await.unwrap(),
        "never rolled up: kept"
    );

    server.restart().unwrap();
    raw.append(vec![Event::new("click", t + 2)], 4)
        .await
        .unwrap();
    let events = raw.day_events(day).await.unwrap();
    assert_eq!(
        events
            .iter()
            .map(|e| (e.kind.as_str(), e.time_ms))
            .collect::<Vec<_>>(),
        vec![("view", t), ("click", t + 2)]
    );
    assert_eq!(raw.days().await.unwrap()[0].events, 2);

    // Events past the retention policy would be dropped by InfluxDB (and the rest of their
    // request kept): the whole batch is refused before anything is written.
    let old = t - 30 * 86_400_000;
    let err = raw
        .append(vec![Event::new("view", t + 3), Event::new("view", old)], 5)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("older than the raw tier's retention"),
        "{err}"
    );
    assert_eq!(raw.day_events(day).await.unwrap().len(), 2);
    assert_eq!(
        raw.days().await.unwrap().len(),
        1,
        "no catalog entry for the old day"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_fails_at_start_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = InfluxRaw::connect(
        &format!("influxdb://127.0.0.1:{port}/tm"),
        &dir.path().join("c.db"),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    let err = InfluxRaw::connect("influxdb://127.0.0.1/bad-db", &dir.path().join("c.db"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("database"), "{err}");
}

/// Local days on the production shape: InfluxDB's shards are UTC days, so a Berlin day spans
/// two of them; its day catalog and summaries are in MariaDB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn influx_local_days_with_mariadb_summaries() {
    use tidemark_core::mysql::{drop_database, scratch_database, test_server_url};
    use tidemark_events::MysqlCatalog;
    use tidemark_events::calendar::Calendar;
    use tidemark_events::rollups::MysqlRollups;

    let server = InfluxServer::start().unwrap();
    let url = scratch_database(&test_server_url(), "tm_local_days")
        .await
        .unwrap();
    let rollups = MysqlRollups::connect(&url, 4).await.unwrap();
    let catalog = Arc::new(MysqlCatalog::connect(&url, 4).await.unwrap());
    // A retention long enough to keep 2024's events.
    let raw = InfluxRaw::connect_with_catalog(
        &format!("{}?retention=20000d", server.url("tidemark")),
        catalog,
    )
    .await
    .unwrap()
    .with_calendar(Calendar::named("Europe/Berlin").unwrap());
    conformance::local_days(Arc::new(raw), Arc::new(rollups.clone())).await;
    // The dropped day's points are gone from InfluxDB (a delete by time range: no shard lies
    // within a Berlin day), its neighbours' are not.
    let count = |from: &'static str, to: &'static str| {
        let server = &server;
        async move {
            let q = format!(
                "SELECT count(\"seq\") FROM \"{RETENTION_POLICY}\".\"listing_event\" \
                 WHERE time >= '{from}' AND time < '{to}'"
            );
            let v = influx_query(server, "tidemark", &q).await;
            v["results"][0]["series"][0]["values"][0][1]
                .as_u64()
                .unwrap_or(0)
        }
    };
    assert_eq!(
        count("2024-10-26T22:00:00Z", "2024-10-27T23:00:00Z").await,
        0
    );
    assert_eq!(
        count("2024-10-26T00:00:00Z", "2024-10-26T22:00:00Z").await,
        2
    );
    assert_eq!(
        count("2024-10-27T23:00:00Z", "2024-10-29T00:00:00Z").await,
        3
    );
    rollups.pool().close().await;
    drop_database(&url).await.unwrap();
}
