//! The whole product on three `tidemark serve` nodes (role `all`) sharing one set of
//! production engines (DESIGN.md "Many nodes"): a Redis Cluster of three masters as the chat
//! hot store, a Kafka-protocol outbox of three partitions, MariaDB for the chat archive, the
//! link store and the rollups (with the raw day catalog and the day leases), InfluxDB for raw
//! events and an S3-compatible server for the raw archive.
//!
//! 1. The three nodes start at once (they race on the schemas and the link partitions).
//! 2. One marketplace day of `tidemark demo` is spread over them (`--server` three times): every
//!    figure of its summary is what `common::demo_figures` computes from the inputs.
//! 3. One node is killed (`kill -9`) and restarted: the day's report read through every node, a
//!    rollup run again, the archived messages and the stored links are unchanged.
//! 4. Yesterday's events arrive through all three nodes; the nodes then restart with
//!    `lateness = 0s` and a short `raw_retention`, so their lifecycles race for that day: it is
//!    rolled up once, archived once (one object in the bucket) and dropped once, and its report
//!    holds exact totals and uniques.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::demo_figures::{assert_demo_summary, corpus, otto, otto_events};
use common::{Engines, KEY, TestServer, call, client, metric};
use serde_json::{Value, json};
use tidemark_chat::testing::{KafkaBroker, RedisCluster};
use tidemark_core::day::{DAY_MS, Day};
use tidemark_core::mysql::{drop_database, scratch_database, test_server_url};
use tidemark_events::testing::S3Server;

const RECIPIENTS: usize = 200;
const CONVERSATIONS: usize = 60;
const BUCKET: &str = "tidemark-archive";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_run_one_marketplace_day_with_exact_figures() {
    let redis = RedisCluster::start().unwrap();
    let broker = KafkaBroker::start().unwrap();
    let s3 = S3Server::start().unwrap();
    s3.create_bucket(BUCKET).unwrap();
    let archive_db = scratch_database(&test_server_url(), "tm_e2e_cluster")
        .await
        .unwrap();
    let engines = Engines::start().await;
    let mut env: Vec<(String, String)> = engines.env();
    env.retain(|(k, _)| k != "TIDEMARK_EVENTS__RAW");
    env.extend(
        [
            ("TIDEMARK_ROLE", "all".to_owned()),
            ("TIDEMARK_CHAT__HOT", redis.url()),
            ("TIDEMARK_CHAT__OUTBOX", broker.url("tidemark.chat.whole")),
            ("TIDEMARK_CHAT__OUTBOX_PARTITIONS", "3".into()),
            ("TIDEMARK_CHAT__ARCHIVE", archive_db.clone()),
            ("TIDEMARK_CHAT__HOT_WINDOW", "1s".into()),
            ("TIDEMARK_CHAT__ARCHIVE_IDLE", "50ms".into()),
            ("TIDEMARK_CHAT__TRIM_INTERVAL", "100ms".into()),
            ("TIDEMARK_CHAT__SHARD_LEASE", "2s".into()),
            ("TIDEMARK_EVENTS__ARCHIVE_URL", format!("s3://{BUCKET}/raw")),
            // Yesterday stays open until the lifecycle phase below.
            ("TIDEMARK_EVENTS__LATENESS", "48h".into()),
            // InfluxDB keeps points a week whatever `raw_retention` the lifecycle phase sets:
            // the nodes, not InfluxDB's retention, are to drop yesterday.
            (
                "TIDEMARK_EVENTS__RAW",
                format!("{}?retention=7d", engines.influx.url("tidemark")),
            ),
            ("TIDEMARK_EVENTS__LIFECYCLE_INTERVAL", "200ms".into()),
        ]
        .map(|(k, v)| (k.to_owned(), v)),
    );
    env.extend(s3.options().into_iter().map(|(k, v)| (k.to_uppercase(), v)));
    let start = || {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        async move { TestServer::start(&env).await }
    };
    let (a, b, c) = tokio::join!(start(), start(), start());
    let mut nodes = [a, b, c];

    // 2. The demo day over the three nodes.
    let out = tempfile::tempdir().unwrap();
    let json_path = out.path().join("summary.json");
    let mut demo = std::process::Command::new(env!("CARGO_BIN_EXE_tidemark"));
    demo.args(["demo", "--key", KEY, "--corpus"])
        .arg(corpus())
        .args(["--recipients", &RECIPIENTS.to_string()])
        .args(["--conversations", &CONVERSATIONS.to_string()])
        .arg("--json")
        .arg(&json_path)
        .env("RUST_LOG", "warn");
    for n in &nodes {
        demo.args(["--server", &n.base]);
    }
    let run = tokio::task::spawn_blocking(move || demo.output().unwrap())
        .await
        .unwrap();
    assert!(
        run.status.success(),
        "demo failed: {}\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let summary: Value = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    assert_demo_summary(&summary, RECIPIENTS, CONVERSATIONS);
    let today = summary["day"].as_str().unwrap().to_owned();
    let messages = summary["chat"]["messages_committed"].as_i64().unwrap();
    let links = summary["links"]["links_stored"].as_i64().unwrap();
    let stored = || async {
        (
            Engines::mysql_count(&archive_db, "message_record").await,
            Engines::mysql_count(&engines.links_db, "links").await,
        )
    };
    assert_eq!(
        stored().await,
        (messages, links),
        "archived messages, links"
    );

    // 3. kill -9 of one node mid-day, then a restart: nothing of the day changes.
    nodes[1].kill9();
    nodes[1].spawn().await;
    let http = client();
    let rolled = call(
        &http,
        reqwest::Method::POST,
        &nodes[1].url(&format!("/v1/rollups/{today}")),
        None,
    )
    .await;
    assert_eq!(rolled.0, 200, "{}", rolled.1);
    for account in summary["accounts"].as_array().unwrap() {
        let id = account["account_id"].as_u64().unwrap();
        for node in &nodes {
            assert_eq!(
                report_rows(&http, node, id, &today).await,
                sorted_rows(account["rows"].as_array().unwrap()),
                "account {id} through {}",
                node.base
            );
        }
    }
    assert_eq!(stored().await, (messages, links), "after the restart");

    // 4. Yesterday's events through the three nodes, then the lifecycles race for the day.
    let yesterday = Day::of_utc_ms(Day::parse(&today).unwrap().utc_start_ms() - DAY_MS);
    let (events, expected) = yesterday_events(yesterday);
    for (i, chunk) in events.chunks(100).enumerate() {
        let node = &nodes[i % nodes.len()];
        let r = http
            .post(node.url("/v1/events"))
            .bearer_auth(KEY)
            .json(&json!(chunk))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    }
    for node in &mut nodes {
        assert!(node.terminate().success());
        node.env.retain(|(k, _)| k != "TIDEMARK_EVENTS__LATENESS");
        node.env.extend(
            [
                ("TIDEMARK_EVENTS__LATENESS", "0s"),
                ("TIDEMARK_EVENTS__RAW_RETENTION", "3s"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned())),
        );
    }
    let [a, b, c] = &mut nodes;
    tokio::join!(a.spawn(), b.spawn(), c.spawn());
    let day = wait_dropped(&engines.rollups_db, yesterday).await;
    assert_eq!(day.events, events.len() as i64);

    let mut jobs = [0u64; 3];
    for node in &nodes {
        for (j, name) in [
            "tidemark_events_days_rolled_up_total",
            "tidemark_events_days_archived_total",
            "tidemark_events_days_dropped_total",
        ]
        .iter()
        .enumerate()
        {
            jobs[j] += metric(&http, node, name).await;
        }
    }
    assert_eq!(
        jobs,
        [1, 1, 1],
        "rolled up, archived, dropped over the nodes"
    );
    assert_eq!(
        s3_keys(&http, &s3).await,
        1,
        "one archive object for the one closed day"
    );

    let yday = yesterday.to_string();
    for account in summary["accounts"].as_array().unwrap() {
        let id = account["account_id"].as_u64().unwrap();
        let owned: BTreeSet<i64> = account_listings(id);
        let want: Vec<Value> = expected
            .iter()
            .filter(|((l, _), _)| owned.contains(l))
            .map(|((l, kind), (total, uniques))| {
                json!({"listing_id": l, "kind": kind, "total": total, "uniques_daily_sum": uniques})
            })
            .collect();
        for node in &nodes {
            assert_eq!(
                report_rows(&http, node, id, &yday).await,
                sorted_rows(&want),
                "account {id}, {yday}, through {}",
                node.base
            );
        }
        assert_eq!(
            report_rows(&http, &nodes[0], id, &today).await,
            sorted_rows(account["rows"].as_array().unwrap()),
            "account {id}, {today}, after the lifecycle"
        );
    }

    drop(nodes);
    drop_database(&archive_db).await.unwrap();
    drop_database(&engines.links_db).await.unwrap();
    drop_database(&engines.rollups_db).await.unwrap();
}

/// Account `id`'s report rows for `day`, in (listing, kind) order.
async fn report_rows(http: &reqwest::Client, node: &TestServer, id: u64, day: &str) -> Vec<Value> {
    let (status, v) = call(
        http,
        reqwest::Method::GET,
        &node.url(&format!("/v1/accounts/{id}/report?from={day}&to={day}")),
        None,
    )
    .await;
    assert_eq!(status, 200, "{v}");
    sorted_rows(v["rows"].as_array().unwrap())
}

fn sorted_rows(rows: &[Value]) -> Vec<Value> {
    let mut rows: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({"listing_id": r["listing_id"], "kind": r["kind"], "total": r["total"],
                   "uniques_daily_sum": r["uniques_daily_sum"]})
        })
        .collect();
    rows.sort_by_key(|r| (r["listing_id"].as_i64(), r["kind"].to_string()));
    rows
}

/// The listings of account `id` (1..=3): the demo gives the i-th listing (ascending) to
/// account `i % 3 + 1`.
fn account_listings(id: u64) -> BTreeSet<i64> {
    let (listings, _, _) = otto();
    listings
        .iter()
        .enumerate()
        .filter(|(i, _)| (*i as u64) % 3 + 1 == id)
        .map(|(_, l)| *l)
        .collect()
}

/// What a day's rollup holds: `(listing, kind)` → (total, distinct sessions).
type Rollup = BTreeMap<(i64, String), (u64, u64)>;

/// A `raw_day` row: day, events, rolled-up / archived arrival, dropped at (ms).
type CatalogRow = (i32, i64, Option<i64>, Option<i64>, Option<i64>);

/// The OTTO sample's events spread over `day` (JSON bodies for `POST /v1/events`), and what
/// their rollup must hold: `(listing, kind)` → (total, distinct sessions).
fn yesterday_events(day: Day) -> (Vec<Value>, Rollup) {
    let raw = otto_events();
    let lo = raw.iter().map(|e| e.0).min().unwrap();
    let span = (raw.iter().map(|e| e.0).max().unwrap() - lo).max(1) as i128;
    let mut expected: BTreeMap<(i64, String), (u64, BTreeSet<i64>)> = BTreeMap::new();
    let events = raw
        .iter()
        .map(|&(ts, listing, kind, session)| {
            let entry = expected.entry((listing, kind.to_owned())).or_default();
            entry.0 += 1;
            entry.1.insert(session);
            let at = day.utc_start_ms() + ((ts - lo) as i128 * (DAY_MS - 1) as i128 / span) as i64;
            json!({"time": at, "kind": kind, "listing_id": listing,
                   "session_id": format!("y-{session}"), "page_url": format!("/item/{listing}")})
        })
        .collect();
    let expected = expected
        .into_iter()
        .map(|(k, (total, sessions))| (k, (total, sessions.len() as u64)))
        .collect();
    (events, expected)
}

/// One row of the MariaDB day catalog.
struct CatalogDay {
    events: i64,
}

/// Waits (up to 60 s) until `day` is marked dropped in the day catalog, rolled up and archived
/// first.
async fn wait_dropped(rollups_db: &str, day: Day) -> CatalogDay {
    let pool = tidemark_core::mysql::connect(rollups_db, 1).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let rows: Vec<CatalogRow> = sqlx::query_as(
            "SELECT day, events, rolled_up_arrival_ms, archived_arrival_ms, dropped_ms \
             FROM raw_day",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        if let Some((_, events, rolled, archived, Some(_))) = rows.iter().find(|r| r.0 == day.0) {
            assert!(
                rolled.is_some() && archived.is_some(),
                "dropped before its jobs"
            );
            pool.close().await;
            return CatalogDay { events: *events };
        }
        assert!(
            Instant::now() < deadline,
            "{day} not dropped within 60 s: catalog {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The number of objects in the archive bucket.
async fn s3_keys(http: &reqwest::Client, s3: &S3Server) -> usize {
    let body = http
        .get(format!("{}/{BUCKET}?list-type=2", s3.endpoint()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    body.matches("<Key>").count()
}
