//! The raw-window report over HTTP against a real `tidemark serve`, on the embedded default
//! and on InfluxDB + MariaDB: late events by age, an event refused as older than the window, a
//! day rolled up again after a late event, and the raw days held with their bytes.

mod common;

use common::*;
use reqwest::Method;
use serde_json::{Value, json};
use tidemark_core::clock::{Clock, SystemClock};
use tidemark_core::day::Day;

fn ev(time: i64, session: &str) -> Value {
    json!({"time": time, "kind": "view", "listing_id": 5, "session_id": session})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_raw_window_report() {
    the_raw_window_report_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_raw_window_report_on_influxdb_and_mariadb() {
    the_raw_window_report_in(Mode::Production).await;
}

async fn the_raw_window_report_in(mode: Mode) {
    let server = TestServer::start_in(mode, &[]).await;
    let c = client();
    let now = SystemClock.now_ms();
    let today = Day::of_utc_ms(now);
    let at = |days_ago: i32| today.plus(-days_ago).utc_start_ms() + 3_600_000;
    let post = |events: Value| {
        let (c, url) = (c.clone(), server.url("/v1/events"));
        async move { call(&c, Method::POST, &url, Some(events)).await }
    };
    // Today's, then late ones: 2 a day late, 2 three days late.
    let (st, v) = post(json!([
        ev(now - 1_000, "a"),
        ev(at(1), "b"),
        ev(at(1), "c"),
        ev(at(3), "d"),
        ev(at(3), "e")
    ]))
    .await;
    assert_eq!(st, 202, "{v}");
    // Ten days back is outside the window (7 days + 1 h): refused, counted as needed.
    let (st, v) = post(json!([ev(at(10), "f")])).await;
    assert_eq!(st, 400, "{v}");
    // The day three days back rolled up, then a late event, then rolled up again.
    let three = today.plus(-3);
    let roll = |day: Day| {
        let (c, url) = (c.clone(), server.url(&format!("/v1/rollups/{day}")));
        async move { call(&c, Method::POST, &url, None).await }
    };
    assert_eq!(roll(three).await.0, 200);
    assert_eq!(post(json!([ev(at(3) + 5, "g")])).await.0, 202);
    assert_eq!(roll(three).await.0, 200);
    // Yesterday rolled up once: no re-roll.
    assert_eq!(roll(today.plus(-1)).await.0, 200);

    let (st, v) = call(&c, Method::GET, &server.url("/v1/events/raw-window"), None).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["raw_retention_days"], 7);
    let days = v["days"].as_array().unwrap();
    let held: Vec<(String, u64)> = days
        .iter()
        .map(|d| {
            (
                d["day"].as_str().unwrap().to_owned(),
                d["events"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        held,
        vec![
            (three.to_string(), 3),
            (today.plus(-1).to_string(), 2),
            (today.to_string(), 1)
        ]
    );
    assert!(days.iter().all(|d| d["bytes"].as_u64().unwrap() > 0), "{v}");
    let per_day = v["bytes_per_day"].as_u64().unwrap();
    let closed = [&days[0], &days[1]].map(|d| d["bytes"].as_u64().unwrap());
    assert_eq!(per_day, (closed[0] + closed[1]) / 2);
    assert_eq!(v["window_30_days_bytes"].as_u64().unwrap(), per_day * 30);
    assert!(
        v["counted_since"]
            .as_str()
            .unwrap()
            .starts_with(&today.to_string()[..4])
    );
    let at_least = v["at_least"].as_array().unwrap();
    assert_eq!(at_least.len(), 30);
    let row = |k: usize| {
        let r = &at_least[k - 1];
        assert_eq!(r["days"], k);
        assert_eq!(r["window_bytes"].as_u64().unwrap(), per_day * k as u64);
        (
            r["late_events"].as_u64().unwrap(),
            r["refused_events"].as_u64().unwrap(),
            r["rerolls"].as_u64().unwrap(),
        )
    };
    assert_eq!(row(1), (5, 1, 1));
    assert_eq!(row(2), (3, 1, 1));
    assert_eq!(row(3), (3, 1, 1));
    assert_eq!(row(4), (0, 1, 0));
    assert_eq!(row(10), (0, 1, 0));
    assert_eq!(row(11), (0, 0, 0));
    assert_eq!(
        v["beyond_30_days"],
        json!({"late_events": 0, "refused_events": 0, "rerolls": 0})
    );

    // Behind the API key; no parameters.
    let r = c
        .get(server.url("/v1/events/raw-window"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let (st, v) = call(
        &c,
        Method::GET,
        &server.url("/v1/events/raw-window?days=30"),
        None,
    )
    .await;
    assert_eq!(st, 400, "{v}");
    server.cleanup().await;
}
