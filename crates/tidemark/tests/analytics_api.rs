//! The summary tier over HTTP against a real `tidemark serve`: events in through
//! `POST /v1/events`, listings mapped to accounts, rollups on demand, the account report with
//! exact rows; bad input is a 4xx JSON error that changes nothing; a day without raw events is
//! refused with 409. The streamed exports (report as CSV, month sums as JSON and CSV) over
//! more listings than one page. Then `tidemark rollup --day` offline on the same data dir.

mod common;

use std::process::Command;

use common::*;
use reqwest::Method;
use serde_json::{Value, json};
use tidemark_core::clock::{Clock, SystemClock};
use tidemark_core::day::Day;

const OTHER_KEY: &str = "other-key";

async fn call_as(
    c: &reqwest::Client,
    key: &str,
    method: Method,
    url: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = c.request(method, url).bearer_auth(key);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn ev(time: i64, kind: &str, listing: Option<i64>, session: Option<&str>) -> Value {
    let mut e = json!({ "time": time, "kind": kind });
    if let Some(l) = listing {
        e["listing_id"] = json!(l);
        e["page_url"] = json!(format!("/item/{l}"));
    }
    if let Some(s) = session {
        e["session_id"] = json!(s);
    }
    e
}

fn report_row(listing_id: i64, kind: &str, total: u64, uniques_daily_sum: u64) -> Value {
    json!({ "listing_id": listing_id, "kind": kind, "total": total, "uniques_daily_sum": uniques_daily_sum })
}

async fn report(c: &reqwest::Client, s: &TestServer, query: &str) -> (u16, Value) {
    call(
        c,
        Method::GET,
        &s.url(&format!("/v1/accounts/7/report?{query}")),
        None,
    )
    .await
}

fn assert_bad(st: u16, v: &Value, needle: &str) {
    assert!((400..500).contains(&st), "{st} {v}");
    let msg = v["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains(needle), "{needle:?} not in {v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_rollups_and_the_account_report() {
    listings_rollups_and_the_account_report_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_rollups_and_the_account_report_on_influxdb_and_mariadb() {
    listings_rollups_and_the_account_report_in(Mode::Production).await;
}

async fn listings_rollups_and_the_account_report_in(mode: Mode) {
    let server = TestServer::start_in(
        mode,
        &[(
            "TIDEMARK_TENANTS",
            r#"[{name="demo",key="dev-key"},{name="other",key="other-key"}]"#,
        )],
    )
    .await;
    let c = client();
    let today = Day::of_utc_ms(SystemClock.now_ms());
    let yesterday = today.plus(-1);
    let y = yesterday.utc_start_ms() + 10 * 3_600_000;
    let t = today.utc_start_ms() + 1_000;

    let batch = json!([
        ev(y, "view", Some(101), Some("s1")),
        ev(y, "view", Some(101), Some("s1")), // same ms, same everything: two events
        ev(y + 60_000, "view", Some(101), Some("s2")),
        ev(y, "click", Some(101), Some("s1")),
        ev(y, "view", Some(102), Some("s3")),
        ev(y, "view", Some(103), Some("s1")), // another account's listing
        ev(y, "email_click", None, None),     // no listing: not rolled up
        ev(t, "view", Some(101), Some("s9")),
    ]);
    let mut bot = ev(y, "view", Some(101), Some("s4"));
    bot["bot"] = json!(true);
    let mut batch = batch.as_array().unwrap().clone();
    batch.push(bot);
    let (st, v) = call(
        &c,
        Method::POST,
        &server.url("/v1/events"),
        Some(Value::Array(batch)),
    )
    .await;
    assert_eq!((st, &v), (202, &json!({"accepted": 9})));

    let r = c
        .put(server.url("/v1/listings/101"))
        .bearer_auth(KEY)
        .json(&json!({"account_id": 7}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 204);
    let (st, v) = call(
        &c,
        Method::POST,
        &server.url("/v1/listings"),
        Some(json!([{"listing_id": 102, "account_id": 7}, {"listing_id": 103, "account_id": 8}])),
    )
    .await;
    assert_eq!((st, &v), (200, &json!({"upserted": 2})));

    let range = format!("from={yesterday}&to={today}");
    // Nothing rolled up yet: the report reads listing_daily only.
    let (st, v) = report(&c, &server, &range).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v,
        json!({"account_id": 7, "from": yesterday.to_string(), "to": today.to_string(), "rows": [], "time_zone": "UTC"})
    );

    let (st, v) = call(
        &c,
        Method::POST,
        &server.url(&format!("/v1/rollups/{yesterday}")),
        None,
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["day"], yesterday.to_string());
    assert_eq!(
        (
            &v["events_read"],
            &v["bots_skipped"],
            &v["without_listing_skipped"],
            &v["rows_written"]
        ),
        (&json!(8), &json!(1), &json!(1), &json!(4))
    );
    let (st, v) = call(
        &c,
        Method::POST,
        &server.url(&format!("/v1/rollups/{today}")),
        None,
    )
    .await;
    assert_eq!((st, &v["rows_written"]), (200, &json!(1)), "{v}");

    let expected = json!([
        report_row(101, "click", 1, 1),
        report_row(101, "view", 4, 3),
        report_row(102, "view", 1, 1),
    ]);
    let (st, v) = report(&c, &server, &range).await;
    assert_eq!((st, &v["rows"]), (200, &expected), "{v}");
    let (st, v) = report(&c, &server, &format!("{range}&kind=view")).await;
    assert_eq!(
        (st, &v["rows"]),
        (
            200,
            &json!([report_row(101, "view", 4, 3), report_row(102, "view", 1, 1)])
        )
    );
    let (st, v) = report(&c, &server, &format!("from={today}&to={today}")).await;
    assert_eq!(
        (st, &v["rows"]),
        (200, &json!([report_row(101, "view", 1, 1)]))
    );
    // The analytics are the first tenant's: the other tenant can neither read nor feed them.
    for (method, path, body) in [
        (Method::GET, format!("/v1/accounts/7/report?{range}"), None),
        (Method::GET, format!("/v1/events/top?day={yesterday}"), None),
        (Method::GET, "/v1/events/recent?minutes=5".to_owned(), None),
        (Method::POST, format!("/v1/rollups/{yesterday}"), None),
        (
            Method::PUT,
            "/v1/listings/101".to_owned(),
            Some(json!({"account_id": 8})),
        ),
        (
            Method::POST,
            "/v1/events".to_owned(),
            Some(json!([ev(y + 5, "view", Some(101), Some("s9"))])),
        ),
    ] {
        let (st, v) = call_as(&c, OTHER_KEY, method.clone(), &server.url(&path), body).await;
        assert_eq!(st, 403, "{method} {path}: {v}");
        assert_eq!(v["error"]["code"], "forbidden", "{v}");
    }
    assert_eq!(report(&c, &server, &range).await.1["rows"], expected);

    // A re-run overwrites, never doubles.
    let (st, _) = call(
        &c,
        Method::POST,
        &server.url(&format!("/v1/rollups/{yesterday}")),
        None,
    )
    .await;
    assert_eq!(st, 200);
    assert_eq!(report(&c, &server, &range).await.1["rows"], expected);

    // Bad input: 4xx JSON, nothing changed.
    let put = |path: &str, body: Value| c.put(server.url(path)).bearer_auth(KEY).json(&body).send();
    let r = put("/v1/listings/abc", json!({"account_id": 8}))
        .await
        .unwrap();
    let st = r.status().as_u16();
    assert_bad(
        st,
        &r.json().await.unwrap(),
        "listing id must be an integer",
    );
    // Listing ids are non-negative, as in events: -5 is not stored.
    let r = put("/v1/listings/-5", json!({"account_id": 8}))
        .await
        .unwrap();
    let st = r.status().as_u16();
    assert_eq!(st, 400);
    assert_bad(
        st,
        &r.json().await.unwrap(),
        "listing id must be non-negative",
    );
    let (st, v) = call(
        &c,
        Method::POST,
        &server.url("/v1/listings"),
        Some(json!([{"listing_id": 102, "account_id": 8}, {"listing_id": -1, "account_id": 8}])),
    )
    .await;
    assert_eq!(st, 400, "{v}");
    assert_bad(st, &v, "listing_id must be non-negative");
    // So are account ids: -7 is neither stored nor reported on.
    let r = put("/v1/listings/101", json!({"account_id": -7}))
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert_bad(
        400,
        &r.json().await.unwrap(),
        "account_id must be non-negative",
    );
    let (st, v) = call(
        &c,
        Method::POST,
        &server.url("/v1/listings"),
        Some(json!([{"listing_id": 102, "account_id": -8}])),
    )
    .await;
    assert_bad(st, &v, "account_id must be non-negative");
    let (st, v) = report(&c, &server, &range).await;
    assert_eq!(st, 200, "{v}");
    let (st, v) = call(
        &c,
        Method::GET,
        &server.url(&format!("/v1/accounts/-7/report?{range}")),
        None,
    )
    .await;
    assert_bad(st, &v, "account id must be non-negative");
    let r = put("/v1/listings/101", json!({"account_id": "eight"}))
        .await
        .unwrap();
    let st = r.status().as_u16();
    assert_bad(st, &r.json().await.unwrap(), "account_id");
    let (st, v) = call(
        &c,
        Method::POST,
        &server.url("/v1/listings"),
        Some(json!([{"listing_id": 101, "account_id": 8}, {"listing_id": "x", "account_id": 8}])),
    )
    .await;
    assert_bad(st, &v, "listing_id");
    for (query, needle) in [
        (format!("from=2026-02-30&to={today}"), "`from`"),
        (format!("from={yesterday}"), "missing `to`"),
        (format!("from={today}&to={yesterday}"), "is after"),
        (
            format!("from={}&to={today}", today.plus(-366)),
            "spans 367 days",
        ),
        (
            format!("{range}&kind=purchase"),
            "undeclared value \"purchase\"",
        ),
    ] {
        let (st, v) = report(&c, &server, &query).await;
        assert_eq!(st, 400, "{query}: {v}");
        assert_eq!(v["error"]["code"], "bad_request");
        assert_bad(st, &v, needle);
    }
    let (st, v) = call(
        &c,
        Method::GET,
        &server.url(&format!("/v1/accounts/seven/report?{range}")),
        None,
    )
    .await;
    assert_bad(st, &v, "account id must be an integer");
    let (st, v) = report(
        &c,
        &server,
        &format!("from={}&to={today}", today.plus(-365)),
    )
    .await;
    assert_eq!(st, 200, "366 days is allowed: {v}");
    let (st, v) = call(
        &c,
        Method::POST,
        &server.url("/v1/rollups/2026-13-01"),
        None,
    )
    .await;
    assert_eq!(
        (st, &v["error"]["code"]),
        (400, &json!("bad_request")),
        "{v}"
    );
    // A day without raw events: refused, nothing written.
    let empty = today.plus(-30);
    let (st, v) = call(
        &c,
        Method::POST,
        &server.url(&format!("/v1/rollups/{empty}")),
        None,
    )
    .await;
    assert_eq!((st, &v["error"]["code"]), (404, &json!("no_events")), "{v}");
    assert_eq!(
        v["error"]["message"],
        format!(
            "the raw tier has no event of {empty}; nothing rolled up, existing totals are kept"
        )
    );
    // A day in the future says so, not "gone".
    let future = today.plus(40);
    let (st, v) = call(
        &c,
        Method::POST,
        &server.url(&format!("/v1/rollups/{future}")),
        None,
    )
    .await;
    assert_eq!((st, &v["error"]["code"]), (404, &json!("no_events")), "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("(a day in the future)"),
        "{v}"
    );
    let r = c
        .get(server.url(&format!("/v1/accounts/7/report?{range}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401, "a key is required");
    assert_eq!(
        report(&c, &server, &range).await.1["rows"],
        expected,
        "nothing changed"
    );

    // A late event for yesterday changes its totals on the next rollup.
    let (st, _) = call(
        &c,
        Method::POST,
        &server.url("/v1/events"),
        Some(json!([ev(y + 5, "view", Some(102), Some("s5"))])),
    )
    .await;
    assert_eq!(st, 202);
    let (st, _) = call(
        &c,
        Method::POST,
        &server.url(&format!("/v1/rollups/{yesterday}")),
        None,
    )
    .await;
    assert_eq!(st, 200);
    let expected = json!([
        report_row(101, "click", 1, 1),
        report_row(101, "view", 4, 3),
        report_row(102, "view", 2, 2),
    ]);
    assert_eq!(report(&c, &server, &range).await.1["rows"], expected);

    // The same rollup offline, on the same data dir, while the server runs.
    let cli = |day: String| {
        Command::new(env!("CARGO_BIN_EXE_tidemark"))
            .args(["rollup", "--day", &day, "--data-dir"])
            .arg(&server.dir)
            .env("RUST_LOG", "warn")
            .env_remove("TIDEMARK_CONFIG")
            .envs(server.env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap()
    };
    let out = cli(yesterday.to_string());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.trim(),
        format!(
            "rolled up {yesterday}: 9 events read (1 bots and 1 without a listing left out), 4 rows in listing_daily"
        )
    );
    let out = cli(empty.to_string());
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("the raw tier has no event of {empty}")),
        "{stderr}"
    );
    let out = cli("yesterday".into());
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a day of the form YYYY-MM-DD"));
    assert_eq!(
        report(&c, &server, &range).await.1["rows"],
        expected,
        "the CLI rewrote the same rows"
    );
    if let Some(e) = &server.engines {
        // The rows are where the configuration put them.
        assert_eq!(
            Engines::mysql_count(&e.rollups_db, "listing_daily").await,
            5
        );
        assert_eq!(Engines::mysql_count(&e.rollups_db, "listings").await, 3);
        assert_eq!(e.influx_points().await, 10, "nine events, then a late one");
        assert!(!server.dir.join("events/raw.db").exists());
        assert!(!server.dir.join("events/rollups.db").exists());
    }

    // Distinct visitors of the period: s1 comes back to listing 101 today, so the daily sum
    // counts s1 twice and the period once.
    let (st, _) = call(
        &c,
        Method::POST,
        &server.url("/v1/events"),
        Some(json!([ev(t + 1_000, "view", Some(101), Some("s1"))])),
    )
    .await;
    assert_eq!(st, 202);
    let (st, v) = call(
        &c,
        Method::POST,
        &server.url(&format!("/v1/rollups/{today}")),
        None,
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let with_period = |l, k, total, daily_sum, period: u64| {
        let mut r = report_row(l, k, total, daily_sum);
        r["uniques_period"] = json!(period);
        r
    };
    let (st, v) = report(&c, &server, &format!("{range}&uniques_period=true")).await;
    assert_eq!(
        (st, &v["rows"]),
        (
            200,
            &json!([
                with_period(101, "click", 1, 1, 1),
                with_period(101, "view", 5, 4, 3),
                with_period(102, "view", 2, 2, 2),
            ])
        ),
        "{v}"
    );
    let (st, v) = report(&c, &server, &format!("{range}&uniques_period=false")).await;
    assert_eq!((st, &v["rows"][1]), (200, &report_row(101, "view", 5, 4)));
    let r = c
        .get(server.url(&format!(
            "/v1/accounts/7/report?{range}&kind=view&uniques_period=true&format=csv"
        )))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        r.text().await.unwrap(),
        "listing_id,kind,total,uniques_daily_sum,uniques_period\n101,view,5,4,3\n102,view,2,2,2\n"
    );
    let (st, v) = report(&c, &server, &format!("{range}&uniques_period=yes")).await;
    assert_bad(st, &v, "uniques_period");
    server.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exports_stream_every_listing_of_the_account() {
    exports_stream_every_listing_of_the_account_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exports_stream_every_listing_of_the_account_on_influxdb_and_mariadb() {
    exports_stream_every_listing_of_the_account_in(Mode::Production).await;
}

/// GET with the dev key; returns (status, content type, content disposition, body).
async fn get_text(c: &reqwest::Client, url: &str) -> (u16, String, String, String) {
    let r = c.get(url).bearer_auth(KEY).send().await.unwrap();
    let header = |h: &str| {
        r.headers()
            .get(h)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    let (ct, cd) = (header("content-type"), header("content-disposition"));
    (r.status().as_u16(), ct, cd, r.text().await.unwrap())
}

async fn exports_stream_every_listing_of_the_account_in(mode: Mode) {
    let server = TestServer::start_in(mode, &[]).await;
    let c = client();
    let yesterday = Day::of_utc_ms(SystemClock.now_ms()).plus(-1);
    let at = yesterday.utc_start_ms() + 3_600_000;
    // 1,200 listings of account 7 (more than two pages of 500), 1 to 3 views each, and one
    // click on every tenth; listing 5,000 is another account's.
    let listings: Vec<i64> = (1..=1_200).map(|i| i * 3).collect();
    let mut events = Vec::new();
    let mut expected = Vec::new();
    for (i, &l) in listings.iter().enumerate() {
        let views = i as u64 % 3 + 1;
        for v in 0..views {
            events.push(ev(at + v as i64, "view", Some(l), Some("s1")));
        }
        if i % 10 == 0 {
            events.push(ev(at, "click", Some(l), Some("s2")));
            expected.push((l, "click", 1));
        }
        expected.push((l, "view", views));
    }
    events.push(ev(at, "view", Some(5_000), Some("s1")));
    let (st, v) = call(
        &c,
        Method::POST,
        &server.url("/v1/events"),
        Some(Value::Array(events)),
    )
    .await;
    assert_eq!(st, 202, "{v}");
    let mut pairs: Vec<Value> = listings
        .iter()
        .map(|l| json!({"listing_id": l, "account_id": 7}))
        .collect();
    pairs.push(json!({"listing_id": 5_000, "account_id": 8}));
    let (st, v) = call(
        &c,
        Method::POST,
        &server.url("/v1/listings"),
        Some(Value::Array(pairs)),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let (st, v) = call(
        &c,
        Method::POST,
        &server.url(&format!("/v1/rollups/{yesterday}")),
        None,
    )
    .await;
    assert_eq!(st, 200, "{v}");

    // The report as CSV: a download, the JSON report's rows exactly, in its order.
    let base = server.url("/v1/accounts/7");
    let range = format!("from={yesterday}&to={yesterday}");
    let (st, ct, cd, csv) = get_text(&c, &format!("{base}/report?{range}&format=csv")).await;
    assert_eq!((st, ct.as_str()), (200, "text/csv; charset=utf-8"), "{csv}");
    assert_eq!(
        cd,
        format!("attachment; filename=\"account-7-{yesterday}-{yesterday}.csv\"")
    );
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("listing_id,kind,total,uniques_daily_sum")
    );
    let rows: Vec<String> = lines.map(str::to_owned).collect();
    let want: Vec<String> = expected
        .iter()
        .map(|(l, k, n)| format!("{l},{k},{n},1"))
        .collect();
    assert_eq!(rows.len(), want.len());
    assert_eq!(rows, want);
    let (st, v) = report(&c, &server, &range).await;
    assert_eq!(st, 200);
    assert_eq!(v["rows"].as_array().unwrap().len(), want.len());
    // An account without rows: the header row alone.
    let empty = server.url("/v1/accounts/999");
    for (query, header) in [
        (
            format!("report?{range}&format=csv"),
            "listing_id,kind,total,uniques_daily_sum\n",
        ),
        (
            format!("report?{range}&format=csv&uniques_period=true"),
            "listing_id,kind,total,uniques_daily_sum,uniques_period\n",
        ),
        (
            format!(
                "months?from={}&to={}&format=csv",
                &yesterday.to_string()[..7],
                &yesterday.to_string()[..7]
            ),
            "listing_id,month,kind,total,uniques_daily_sum\n",
        ),
    ] {
        let (st, _, _, csv) = get_text(&c, &format!("{empty}/{query}")).await;
        assert_eq!((st, csv.as_str()), (200, header), "{query}");
    }

    // The month sums, streamed as JSON and as CSV: the same rows.
    let month = &yesterday.to_string()[..7];
    let (st, ct, _, body) = get_text(&c, &format!("{base}/months?from={month}&to={month}")).await;
    assert_eq!((st, ct.as_str()), (200, "application/json"), "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (&v["account_id"], &v["from"], &v["to"]),
        (&json!(7), &json!(month), &json!(month))
    );
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), expected.len());
    for (row, (l, k, n)) in rows.iter().zip(&expected) {
        assert_eq!(
            row,
            &json!({"listing_id": l, "month": month, "kind": k, "total": n, "uniques_daily_sum": 1})
        );
    }
    let (st, _, cd, csv) = get_text(
        &c,
        &format!("{base}/months?from={month}&to={month}&format=csv&kind=click"),
    )
    .await;
    assert_eq!(st, 200);
    assert!(
        cd.contains(&format!("account-7-months-{month}-{month}.csv")),
        "{cd}"
    );
    let clicks: Vec<&str> = csv.lines().collect();
    assert_eq!(clicks[0], "listing_id,month,kind,total,uniques_daily_sum");
    assert_eq!(clicks.len(), 1 + 120);
    assert_eq!(clicks[1], format!("3,{month},click,1,1"));
    // An account without listings: an empty list; bad input: a 400 naming it.
    let (st, _, _, body) = get_text(
        &c,
        &server.url(&format!("/v1/accounts/99/months?from={month}&to={month}")),
    )
    .await;
    assert_eq!(
        (st, body),
        (
            200,
            format!(r#"{{"account_id":99,"from":"{month}","to":"{month}","rows":[]}}"#)
        )
    );
    for (query, needle) in [
        (
            format!("from={month}&to={month}&format=xml"),
            "`format` must be json or csv",
        ),
        (
            "from=2026-13&to=2026-12".to_owned(),
            "`from` must be a month YYYY-MM",
        ),
        (
            "from=2026-1&to=2026-12".to_owned(),
            "`from` must be a month YYYY-MM",
        ),
        ("from=2026-05&to=2026-04".to_owned(), "is after `to`"),
        ("from=2010-01&to=2026-12".to_owned(), "at most 120"),
        (format!("from={month}&to={month}&kind=nope"), "nope"),
        (format!("to={month}"), "missing `from`"),
    ] {
        let (st, v) = call(&c, Method::GET, &format!("{base}/months?{query}"), None).await;
        assert_bad(st, &v, needle);
    }
    let (st, v) = report(&c, &server, &format!("{range}&format=pdf")).await;
    assert_bad(st, &v, "`format` must be json or csv");
    server.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_kind_audit() {
    the_event_kind_audit_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_kind_audit_on_influxdb_and_mariadb() {
    the_event_kind_audit_in(Mode::Production).await;
}

/// Kinds written and read show when, how much per day and by what; a declared kind never
/// written nor read is flagged both ways.
async fn the_event_kind_audit_in(mode: Mode) {
    let server = TestServer::start_in(mode, &[]).await;
    let c = client();
    let today = Day::of_utc_ms(SystemClock.now_ms());
    let yesterday = today.plus(-1);
    let y = yesterday.utc_start_ms() + 3_600_000;
    let t = SystemClock.now_ms() - 1_000;
    let batch = json!([
        ev(y, "view", Some(101), Some("s1")),
        ev(y + 1, "view", Some(101), Some("s2")),
        ev(t, "view", Some(101), Some("s3")),
        ev(y, "contact", Some(101), Some("s1")),
    ]);
    let (st, v) = call(&c, Method::POST, &server.url("/v1/events"), Some(batch)).await;
    assert_eq!(st, 202, "{v}");
    let r = c
        .put(server.url("/v1/listings/101"))
        .bearer_auth(KEY)
        .json(&json!({"account_id": 7}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 204);
    let (st, v) = call(
        &c,
        Method::POST,
        &server.url(&format!("/v1/rollups/{yesterday}")),
        None,
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let (st, v) = report(
        &c,
        &server,
        &format!("from={yesterday}&to={yesterday}&kind=view"),
    )
    .await;
    assert_eq!((st, v["rows"].as_array().unwrap().len()), (200, 1), "{v}");

    let (st, v) = call(&c, Method::GET, &server.url("/v1/events/kinds"), None).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["stale_days"], 30);
    assert_eq!(v["raw_window_from"], today.plus(-7).to_string());
    let kind = |name: &str| -> Value {
        v["kinds"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["kind"] == name)
            .unwrap_or_else(|| panic!("no {name} in {v}"))
            .clone()
    };
    let view = kind("view");
    assert_eq!(view["status"], "declared");
    assert_eq!(
        view["events_per_day"],
        json!([{"day": yesterday.to_string(), "events": 2}, {"day": today.to_string(), "events": 1}])
    );
    assert!(
        view["last_written"]
            .as_str()
            .unwrap()
            .starts_with(&today.to_string()[..4])
    );
    assert_eq!(
        (
            &view["last_read_by"],
            &view["not_written"],
            &view["not_read"]
        ),
        (&json!("report"), &json!(false), &json!(false))
    );
    let contact = kind("contact");
    assert_eq!(
        contact["events_per_day"],
        json!([{"day": yesterday.to_string(), "events": 1}])
    );
    assert_eq!(
        (
            &contact["last_read"],
            &contact["not_read"],
            &contact["not_written"]
        ),
        (&Value::Null, &json!(true), &json!(false))
    );
    let click = kind("click");
    assert_eq!(
        (
            &click["last_written"],
            &click["not_written"],
            &click["events_per_day"]
        ),
        (&Value::Null, &json!(true), &json!([]))
    );
    for bad in ["0", "3661", "x"] {
        let (st, v) = call(
            &c,
            Method::GET,
            &server.url(&format!("/v1/events/kinds?stale_days={bad}")),
            None,
        )
        .await;
        assert_eq!(st, 400, "{bad}: {v}");
    }
    server.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_answers_503_while_influxdb_is_down_and_acknowledges_nothing_unstored() {
    let mut server = TestServer::start_in(Mode::Production, &[]).await;
    let c = client();
    let t = SystemClock.now_ms() - 60_000;
    let batch = |n: i64| json!([ev(t + n, "view", Some(5), Some("s1"))]);
    let (st, _) = call(&c, Method::POST, &server.url("/v1/events"), Some(batch(0))).await;
    assert_eq!(st, 202);
    server.engines.as_mut().unwrap().influx.stop();
    let (st, v) = call(&c, Method::POST, &server.url("/v1/events"), Some(batch(1))).await;
    assert_eq!(st, 503, "{v}");
    assert_eq!(v["error"]["code"], "unavailable", "{v}");
    server.engines.as_mut().unwrap().influx.restart().unwrap();
    let (st, _) = call(&c, Method::POST, &server.url("/v1/events"), Some(batch(2))).await;
    assert_eq!(st, 202);
    assert_eq!(server.engines.as_ref().unwrap().influx_points().await, 2);
    server.cleanup().await;
}

/// A line that the line-protocol parser refuses is a 400 naming its line and what is wrong,
/// on both InfluxDB write routes, and nothing of its batch is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_protocol_line_the_parser_refuses_is_a_400_naming_it() {
    let server = TestServer::start(&[]).await;
    let c = client();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let good = format!("listing_event,event=view listing_id=\"7\",count=1i {now}");
    let bad = format!("listing_event,event=view listing_id=\"8\",count=1i {now}x");
    for route in [
        "/api/v2/write?org=o&bucket=b&precision=ms",
        "/write?db=d&precision=ms",
    ] {
        let r = c
            .post(server.url(route))
            .header("authorization", format!("Token {KEY}"))
            .body(format!("# two points\n{good}\n{bad}\n"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "{route}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], "bad_request", "{v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(
            msg.ends_with(&format!(
                "nothing stored: line 3: unable to parse '{bad}': invalid timestamp \"{now}x\""
            )),
            "{msg}"
        );
    }
    // The good point alone is stored: the refused batches left nothing behind.
    let r = c
        .post(server.url("/api/v2/write?org=o&bucket=b&precision=ms"))
        .header("authorization", format!("Token {KEY}"))
        .body(good.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 204);
    let conn = rusqlite::Connection::open(server.dir.join("events/raw.db")).unwrap();
    let listings: Vec<i64> = conn
        .prepare(&format!(
            "SELECT listing_id FROM raw_{}",
            tidemark_core::day::Day::of_utc_ms(now)
                .to_string()
                .replace('-', "")
        ))
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(listings, vec![7]);
    server.cleanup().await;
}

/// An unknown query parameter is refused with 400 naming it on every analytics route that
/// takes a query; the InfluxDB write endpoint accepts what InfluxDB clients send besides
/// `precision` and refuses anything else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_query_parameters_are_refused() {
    let server = TestServer::start(&[]).await;
    let c = client();
    let today = Day::of_utc_ms(SystemClock.now_ms()).to_string();
    for path in [
        format!("/v1/accounts/7/report?from={today}&to={today}&kinds=view"),
        "/v1/events/top?day=today&limit=3&sort=asc".to_owned(),
        "/v1/events/recent?minutes=5&window=5".to_owned(),
    ] {
        let (st, v) = call(&c, Method::GET, &server.url(&path), None).await;
        assert_eq!(st, 400, "{path}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("unknown field"),
            "{path}: {v}"
        );
    }
    let line = format!(
        "listing_event,event=view listing_id=\"1\" {}",
        SystemClock.now_ms()
    );
    for (query, status) in [
        ("org=o&orgID=1&bucket=b&precision=ms&consistency=one", 204),
        ("db=d&rp=r&u=x&p=y&precision=ms", 204),
        ("precision=ms&shard=2", 400),
    ] {
        let r = c
            .post(server.url(&format!("/api/v2/write?{query}")))
            .header("authorization", "Token dev-key")
            .body(line.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "{query}");
    }
}
