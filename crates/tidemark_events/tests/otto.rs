//! The real input test of the events subsystem: 20 real shopping sessions of the OTTO dataset
//! (`shared/corpus/events/otto-sample.jsonl`, read in place) go through ingest into the raw
//! tier and the daily rollup; every `(listing, day, kind)` row must equal what this test counts
//! straight from the file, with its own code.
//!
//! Mapping: `aid` → `listing_id`, `session` → `session_id`, `type` clicks/carts/orders →
//! kinds view/click/contact, `page_url` = `/item/<aid>`, `ts` (Unix ms) → `time`, moved by a
//! whole number of days so that the last event falls yesterday (a production raw tier keeps
//! recent days only; whole days keep every same-millisecond collision of the file).
//!
//! Run on the embedded default (SQLite raw tier and rollups) and in production mode (InfluxDB
//! raw tier started by the test, MariaDB rollups in a scratch database).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;
use tidemark_core::day::Day;
use tidemark_core::mysql::{drop_database, scratch_database, test_server_url};
use tidemark_events::rollup::roll_up_day;
use tidemark_events::rollups::{MysqlRollups, RollupStore, SqliteRollups};
use tidemark_events::testing::InfluxServer;
use tidemark_events::{Event, EventsConfig, InfluxRaw, Ingest, RawStore, SqliteRaw};

/// One event of the file, as the file says it.
#[derive(Debug, Clone)]
struct Otto {
    session: i64,
    aid: i64,
    ts: i64,
    kind: &'static str,
}

fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/corpus/events/otto-sample.jsonl")
}

/// The file's events, moved by whole days so that the last one falls yesterday (UTC).
fn read_corpus() -> Vec<Otto> {
    let mut events = read_file();
    let last = events.iter().map(|e| e.ts).max().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let shift = i64::from(Day::of_utc_ms(now).plus(-1).0 - Day::of_utc_ms(last).0) * 86_400_000;
    for e in &mut events {
        e.ts += shift;
    }
    events
}

fn read_file() -> Vec<Otto> {
    let path = corpus();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap();
        let session = v["session"].as_i64().unwrap();
        for e in v["events"].as_array().unwrap() {
            let kind = match e["type"].as_str().unwrap() {
                "clicks" => "view",
                "carts" => "click",
                "orders" => "contact",
                other => panic!("unexpected type {other}"),
            };
            out.push(Otto {
                session,
                aid: e["aid"].as_i64().unwrap(),
                ts: e["ts"].as_i64().unwrap(),
                kind,
            });
        }
    }
    out
}

/// `(listing, day number, kind)` → `(total, uniques)`.
type Counts = BTreeMap<(i64, i32, String), (u64, u64)>;

/// Events and the distinct `(session, page)` pairs seen.
type Tally = (u64, HashSet<(String, String)>);

/// Independent counts: per (aid, day number, kind): events, and distinct (session, page).
fn expected(events: &[Otto]) -> Counts {
    let mut m: HashMap<(i64, i32, &str), Tally> = HashMap::new();
    for e in events {
        let day = (e.ts / 86_400_000) as i32; // all timestamps are after 1970
        let b = m.entry((e.aid, day, e.kind)).or_default();
        b.0 += 1;
        b.1.insert((e.session.to_string(), format!("/item/{}", e.aid)));
    }
    m.into_iter()
        .map(|((aid, day, kind), (n, seen))| ((aid, day, kind.to_owned()), (n, seen.len() as u64)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otto_sessions_roll_up_to_the_counts_of_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let raw = Arc::new(SqliteRaw::open(&dir.path().join("raw.db")).unwrap());
    let rollups = SqliteRollups::open(&dir.path().join("rollups.db")).unwrap();
    otto_roundtrip(raw, &rollups).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otto_sessions_roll_up_to_the_counts_of_the_file_on_influxdb_and_mariadb() {
    let server = InfluxServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    // The sample spans 29 days: a retention policy long enough to hold them.
    let raw = Arc::new(
        InfluxRaw::connect(
            &format!("{}?retention=60d", server.url("otto")),
            &dir.path().join("catalog.db"),
        )
        .await
        .unwrap(),
    );
    let url = scratch_database(&test_server_url(), "tm_otto")
        .await
        .unwrap();
    let rollups = MysqlRollups::connect(&url, 4).await.unwrap();
    otto_roundtrip(raw, &rollups).await;
    rollups.pool().close().await;
    drop_database(&url).await.unwrap();
}

async fn otto_roundtrip(raw: Arc<dyn RawStore>, rollups: &dyn RollupStore) {
    let events = read_corpus();
    assert_eq!(events.len(), 862, "the sample as published");

    // Events of one session that share a millisecond: a time-series store keyed by
    // (series, timestamp) would keep one of them. Every one must be counted.
    let mut same_ms: HashMap<(i64, i64), Vec<&Otto>> = HashMap::new();
    for e in &events {
        same_ms.entry((e.session, e.ts)).or_default().push(e);
    }
    let shared: Vec<&Vec<&Otto>> = same_ms.values().filter(|v| v.len() > 1).collect();
    assert_eq!(
        shared.len(),
        4,
        "groups of same-session events sharing a timestamp"
    );
    assert_eq!(shared.iter().map(|v| v.len()).sum::<usize>(), 9);
    // Among them, events with identical tags (same kind): the same series and timestamp.
    assert!(
        shared
            .iter()
            .any(|v| v.iter().filter(|e| e.kind == v[0].kind).count() > 1),
        "the file has same-kind events sharing a millisecond"
    );

    // The file's events are of 2022: a raw window long enough to take them in.
    let cfg = EventsConfig {
        raw_retention: std::time::Duration::from_secs(3650 * 86_400),
        ..EventsConfig::default()
    };
    let ingest = Ingest::new(Arc::clone(&raw), cfg);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let mapped: Vec<Event> = events
        .iter()
        .map(|o| {
            let mut e = Event::new(o.kind, o.ts);
            e.listing_id = Some(o.aid);
            e.session_id = Some(o.session.to_string());
            e.page_url = Some(format!("/item/{}", o.aid));
            e
        })
        .collect();
    assert_eq!(ingest.record(mapped, now).await.unwrap(), 862);

    let days = raw.days().await.unwrap();
    assert_eq!(days.len(), 29, "2022-07-31 … 2022-08-28 in the file");
    assert_eq!(days.iter().map(|d| d.events).sum::<u64>(), 862);

    let mut got = Counts::new();
    let mut read = 0;
    for d in &days {
        let out = roll_up_day(&*raw, rollups, d.day, now + 1).await.unwrap();
        assert_eq!(out.events_read, d.events);
        assert_eq!((out.bots_skipped, out.without_listing_skipped), (0, 0));
        read += out.events_read;
        let rows = rollups.day_rows(d.day).await.unwrap();
        assert_eq!(out.rows_written, rows.len());
        for r in rows {
            let prev = got.insert((r.listing_id, d.day.0, r.kind), (r.total, r.uniques));
            assert!(prev.is_none());
        }
    }
    assert_eq!(read, 862);

    let want = expected(&events);
    assert_eq!(got.len(), want.len());
    assert_eq!(got, want);
    assert_eq!(got.values().map(|v| v.0).sum::<u64>(), 862);

    // The same-millisecond events each count in their row's total.
    for group in shared {
        for e in group {
            let day = Day::of_utc_ms(e.ts).0;
            let n = events
                .iter()
                .filter(|o| o.aid == e.aid && o.kind == e.kind && (o.ts / 86_400_000) as i32 == day)
                .count() as u64;
            assert_eq!(got[&(e.aid, day, e.kind.to_owned())].0, n);
        }
    }

    // A second rollup of every day changes nothing.
    let mut again = Counts::new();
    for d in &days {
        roll_up_day(&*raw, rollups, d.day, now + 2).await.unwrap();
        for r in rollups.day_rows(d.day).await.unwrap() {
            again.insert((r.listing_id, d.day.0, r.kind), (r.total, r.uniques));
        }
    }
    assert_eq!(again, want);

    // Period uniques over the whole sample: a session that came back to an item on another
    // day counts once. Every listing is account 1's.
    let mut aids: Vec<i64> = events.iter().map(|e| e.aid).collect();
    aids.sort_unstable();
    aids.dedup();
    let pairs: Vec<(i64, i64)> = aids.iter().map(|&a| (a, 1)).collect();
    rollups.put_listings("otto", &pairs).await.unwrap();
    let (first, last) = (days[0].day, days[days.len() - 1].day);
    let got = rollups
        .period_uniques("otto", 1, first, last, None, 0..=i64::MAX)
        .await
        .unwrap();
    let mut exact: BTreeMap<(i64, &str), HashSet<i64>> = BTreeMap::new();
    for e in &events {
        exact.entry((e.aid, e.kind)).or_default().insert(e.session);
    }
    let want: Vec<(i64, String, Option<u64>)> = exact
        .iter()
        .map(|((aid, kind), sessions)| (*aid, (*kind).to_owned(), Some(sessions.len() as u64)))
        .collect();
    assert_eq!(got, want);
    // Some visitor came back on another day: the daily sum overcounts, the period does not.
    let daily_sum: u64 = again.values().map(|v| v.1).sum();
    let period: u64 = want.iter().map(|w| w.2.unwrap()).sum();
    assert!(period < daily_sum, "{period} < {daily_sum}");
}
