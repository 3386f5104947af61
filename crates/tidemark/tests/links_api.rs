//! Links (DESIGN.md part B) over HTTP against a real `tidemark serve`: mailings, render with
//! merge fields and rewriting, suppressions, sending to `.eml`, the redirector, and bad input
//! that stores and sends nothing.

mod common;

use std::time::{Duration, Instant};

use common::*;
use reqwest::Method;
use serde_json::{Value, json};

const BROWSER: &str = "Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0";

async fn mailing(c: &reqwest::Client, s: &TestServer, html: &str) -> String {
    let (st, v) = call(c, Method::POST, &s.url("/v1/mailings"), Some(json!({"subject": "Deals for {{ first_name }}", "from": "news@shop.example", "html": html}))).await;
    assert_eq!(st, 201, "{v}");
    v["mailing_id"].as_str().unwrap().to_owned()
}

async fn location(s: &TestServer, id: &str, method: Method, query: &str) -> (u16, Vec<u8>) {
    let r = no_redirects()
        .request(method, s.url(&format!("/c/{id}{query}")))
        .header("user-agent", BROWSER)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (
        status,
        r.headers()
            .get("location")
            .map(|l| l.as_bytes().to_vec())
            .unwrap_or_default(),
    )
}

async fn link_records(s: &TestServer) -> i64 {
    if let Some(e) = &s.engines {
        return Engines::mysql_count(&e.links_db, "links").await;
    }
    let conn = rusqlite::Connection::open(s.dir.join("links/links.db")).unwrap();
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'links_%'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    tables
        .iter()
        .map(|t| {
            conn.query_row(&format!("SELECT count(*) FROM {t}"), [], |r| {
                r.get::<_, i64>(0)
            })
            .unwrap()
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn render_rewrite_and_redirect() {
    render_rewrite_and_redirect_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn render_rewrite_and_redirect_on_mariadb_and_influxdb() {
    render_rewrite_and_redirect_in(Mode::Production).await;
}

async fn render_rewrite_and_redirect_in(mode: Mode) {
    let server = TestServer::start_in(mode, &[]).await;
    let c = client();
    let html = concat!(
        "<html><body><p>Hi {{ first_name }}</p>",
        r#"<a href="https://ex.com/c?d={{ day }}&amp;t={{ t }}">when</a>"#,
        r#"<a href="https://ex.com/caf%C3%A9">café</a>"#,
        r#"<a href="https://ex.com/p#farbe=grün">p</a>"#,
        r#"<a href="mailto:help@shop.example">help</a>"#,
        "</body></html>"
    );
    let mid = mailing(&c, &server, html).await;
    let (st, v) = call(&c, Method::POST, &server.url(&format!("/v1/mailings/{mid}/render")), Some(json!({"recipients": [
        {"email": "ann@x.com", "fields": {"first_name": "<script>alert(1)</script>", "day": "Fri", "t": "6pm"}},
        {"email": "bob@x.com", "fields": {"first_name": "Bob", "day": "Sat"}}
    ]}))).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v["skipped"],
        json!([{"email": "bob@x.com", "reason": "missing field t"}])
    );
    let msg = &v["messages"][0];
    assert_eq!(msg["email"], "ann@x.com");
    assert_eq!(
        msg["subject"], "Deals for <script>alert(1)</script>",
        "the subject is plain text"
    );
    let out = msg["html"].as_str().unwrap();
    assert!(
        out.contains("<p>Hi &lt;script&gt;alert(1)&lt;/script&gt;</p>"),
        "{out}"
    );
    assert!(out.contains(r#"<a href="mailto:help@shop.example">help</a>"#));
    let (ids, pixel) = tracking_ids(out, &server.base);
    assert_eq!(ids.len(), 3);

    // Redirects are byte for byte; the query string of the request never matters.
    assert_eq!(
        location(&server, &ids[0], Method::GET, "").await,
        (302, b"https://ex.com/c?d=Fri&t=6pm".to_vec())
    );
    assert_eq!(
        location(&server, &ids[1], Method::GET, "?url=https://evil.example").await,
        (302, b"https://ex.com/caf%C3%A9".to_vec())
    );
    assert_eq!(
        location(&server, &ids[2], Method::HEAD, "").await,
        (302, "https://ex.com/p#farbe=grün".as_bytes().to_vec())
    );
    let r = c
        .get(server.url(&format!("/o/{pixel}")))
        .header("user-agent", BROWSER)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.headers()["content-type"], "image/gif");
    assert!(
        r.headers()["cache-control"]
            .to_str()
            .unwrap()
            .contains("no-store")
    );
    assert_eq!(r.bytes().await.unwrap().len(), 43);
    // Malformed and unknown ids.
    assert_eq!(location(&server, "not-an-id", Method::GET, "").await.0, 404);
    let mut forged = ids[0].clone().into_bytes();
    forged[12] = if forged[12] == b'a' { b'b' } else { b'a' };
    assert_eq!(
        location(
            &server,
            std::str::from_utf8(&forged).unwrap(),
            Method::GET,
            ""
        )
        .await
        .0,
        404
    );

    // Two clicks and one open counted; the HEAD request is bot traffic.
    let metrics = metrics_text(&c, &server).await;
    for line in [
        "tidemark_links_clicks_total 2",
        "tidemark_links_opens_total 1",
        "tidemark_links_bot_hits_total 1",
        "tidemark_links_records_stored_total 4",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    if let Some(e) = &server.engines {
        // The records are in MariaDB's day partitions.
        assert_eq!(Engines::mysql_count(&e.links_db, "links").await, 4);
    }
    server.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suppressions_and_sending_to_eml_files() {
    suppressions_and_sending_to_eml_files_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suppressions_and_sending_to_eml_files_on_mariadb_and_influxdb() {
    suppressions_and_sending_to_eml_files_in(Mode::Production).await;
}

async fn suppressions_and_sending_to_eml_files_in(mode: Mode) {
    let server = TestServer::start_in(mode, &[]).await;
    let c = client();
    let mid = mailing(&c, &server, r#"<html><body>Hi {{ first_name }} <a href="https://shop.example/item/7">see</a></body></html>"#).await;
    let (st, v) = call(
        &c,
        Method::POST,
        &server.url("/v1/suppressions"),
        Some(json!({"emails": ["Bob@X.com"]})),
    )
    .await;
    assert_eq!((st, v), (200, json!({"suppressed": 1})));
    let body = json!({"recipients": [
        {"email": "ann@x.com", "fields": {"first_name": "Ann", "unsubscribe_url": "https://shop.example/unsubscribe?u=ann"}},
        {"email": "bob@x.com", "fields": {"first_name": "Bob"}}
    ]});
    let (st, v) = call(
        &c,
        Method::POST,
        &server.url(&format!("/v1/mailings/{mid}/send")),
        Some(body.clone()),
    )
    .await;
    assert_eq!(st, 202, "{v}");
    assert_eq!(
        v,
        json!({"queued": 1, "skipped": [{"email": "bob@x.com", "reason": "suppressed"}]})
    );

    let dir = server.dir.join("mail-out").join(&mid);
    let deadline = Instant::now() + Duration::from_secs(10);
    let file = loop {
        if let Some(f) = std::fs::read_dir(&dir)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
        {
            break f.path();
        }
        assert!(
            Instant::now() < deadline,
            "no .eml written under {}",
            dir.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let eml = std::fs::read_to_string(&file).unwrap();
    assert!(eml.contains("To: ann@x.com"), "{eml}");
    assert!(eml.contains("Subject: Deals for Ann"), "{eml}");
    // The header may be folded over several lines (RFC 5322 §2.2.3): unfold it.
    let start = eml
        .find("List-Unsubscribe:")
        .expect("List-Unsubscribe header");
    let mut unsub = String::new();
    for (i, line) in eml[start..].lines().enumerate() {
        if i > 0 && !line.starts_with([' ', '\t']) {
            break;
        }
        unsub.push_str(line.trim_start());
    }
    assert!(
        unsub.contains("<mailto:news@shop.example?subject=unsubscribe>"),
        "{unsub}"
    );
    assert!(
        unsub.contains("<https://shop.example/unsubscribe?u=ann>"),
        "never rewritten: {unsub}"
    );
    assert!(!unsub.contains("/c/"));

    // Removing the suppression lets Bob through again.
    let r = c
        .delete(server.url("/v1/suppressions/bob@x.com"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 204);
    let r = c
        .delete(server.url("/v1/suppressions/bob@x.com"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    let (st, v) = call(
        &c,
        Method::POST,
        &server.url(&format!("/v1/mailings/{mid}/render")),
        Some(body),
    )
    .await;
    assert_eq!(st, 200);
    assert_eq!(v["messages"].as_array().unwrap().len(), 2);
    server.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_stores_and_sends_nothing() {
    bad_input_stores_and_sends_nothing_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_stores_and_sends_nothing_on_mariadb_and_influxdb() {
    bad_input_stores_and_sends_nothing_in(Mode::Production).await;
}

async fn bad_input_stores_and_sends_nothing_in(mode: Mode) {
    let server = TestServer::start_in(mode, &[]).await;
    let c = client();
    let mid = mailing(
        &c,
        &server,
        r#"<a href="https://ex.com/">{{ first_name }}</a>"#,
    )
    .await;
    let before = link_records(&server).await;
    let render = server.url(&format!("/v1/mailings/{mid}/render"));
    let send = server.url(&format!("/v1/mailings/{mid}/send"));
    let many: Vec<Value> = (0..10_001)
        .map(|i| json!({"email": format!("u{i}@x.com"), "fields": {"first_name": "x"}}))
        .collect();
    let cases: Vec<(String, Value, u16, &str)> = vec![
        (
            render.clone(),
            json!({"recipients": []}),
            400,
            "bad_request",
        ),
        (send.clone(), json!({"recipients": []}), 400, "bad_request"),
        (
            render.clone(),
            json!({"recipients": many}),
            400,
            "bad_request",
        ),
        (
            render.clone(),
            json!({"recipients": [{"email": "ok@x.com", "fields": {"first_name": "a"}}, {"email": "not an address"}]}),
            400,
            "bad_request",
        ),
        (
            send.clone(),
            json!({"recipients": [{"email": "@x.com"}]}),
            400,
            "bad_request",
        ),
        (
            server.url("/v1/mailings/nope/render"),
            json!({"recipients": [{"email": "a@x.com"}]}),
            404,
            "not_found",
        ),
        (
            server.url("/v1/mailings"),
            json!({"subject": "s", "from": "news@shop.example", "html": "<p>{{#if x}}</p>"}),
            400,
            "bad_request",
        ),
        (
            server.url("/v1/mailings"),
            json!({"subject": "s", "from": "not-an-address", "html": "<p>x</p>"}),
            400,
            "bad_request",
        ),
        (
            server.url("/v1/mailings"),
            json!({"subject": "s", "from": "news@shop.example", "html": ""}),
            400,
            "bad_request",
        ),
        (
            server.url("/v1/suppressions"),
            json!({"emails": ["nope"]}),
            400,
            "bad_request",
        ),
    ];
    for (url, body, status, code) in cases {
        let (st, v) = call(&c, Method::POST, &url, Some(body)).await;
        assert_eq!(st, status, "{url} → {v}");
        assert_eq!(v["error"]["code"], code, "{url} → {v}");
    }
    // A template that is not valid UTF-8 (raw bytes inside the JSON string).
    let mut raw = br#"{"subject": "s", "from": "news@shop.example", "html": "<p>"#.to_vec();
    raw.extend_from_slice(&[0xff, 0xfe]);
    raw.extend_from_slice(br#"</p>"}"#);
    let r = c
        .post(server.url("/v1/mailings"))
        .bearer_auth(KEY)
        .header("content-type", "application/json")
        .body(raw)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["code"],
        "bad_request"
    );

    assert_eq!(link_records(&server).await, before, "no link record stored");
    assert!(
        !server.dir.join("mail-out").exists()
            || std::fs::read_dir(server.dir.join("mail-out"))
                .unwrap()
                .next()
                .is_none(),
        "nothing sent"
    );
    server.cleanup().await;
}

/// The redirector answers before the click's event is fsynced; a clean shutdown (SIGTERM)
/// still writes every click it answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clicks_answered_before_shutdown_are_recorded() {
    clicks_answered_before_shutdown_are_recorded_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clicks_answered_before_shutdown_are_recorded_on_mariadb_and_influxdb() {
    clicks_answered_before_shutdown_are_recorded_in(Mode::Production).await;
}

async fn clicks_answered_before_shutdown_are_recorded_in(mode: Mode) {
    let mut server = TestServer::start_in(mode, &[]).await;
    let c = client();
    let mid = mailing(
        &c,
        &server,
        r#"<body><a href="https://shop.example/item/5">x</a></body>"#,
    )
    .await;
    let (_, v) = call(
        &c,
        Method::POST,
        &server.url(&format!("/v1/mailings/{mid}/render")),
        Some(json!({"recipients": [{"email": "a@x.com", "fields": {"first_name": "A"}}]})),
    )
    .await;
    let (ids, _) = tracking_ids(v["messages"][0]["html"].as_str().unwrap(), &server.base);
    for _ in 0..50 {
        assert_eq!(location(&server, &ids[0], Method::GET, "").await.0, 302);
    }
    assert!(server.terminate().success());
    // The raw tier's day catalog: in raw.db, or in the MariaDB rollups database in
    // production mode.
    let n: i64 = match &server.engines {
        None => rusqlite::Connection::open(server.dir.join("events/raw.db"))
            .unwrap()
            .query_row("SELECT sum(events) FROM raw_day", [], |r| r.get(0))
            .unwrap(),
        Some(e) => {
            let pool = tidemark_core::mysql::connect(&e.rollups_db, 1)
                .await
                .unwrap();
            let (n,): (i64,) = sqlx::query_as("SELECT CAST(SUM(events) AS SIGNED) FROM raw_day")
                .fetch_one(&pool)
                .await
                .unwrap();
            pool.close().await;
            n
        }
    };
    assert_eq!(n, 50);
    if let Some(e) = &server.engines {
        assert_eq!(e.influx_points().await, 50);
    }
    server.cleanup().await;
}
