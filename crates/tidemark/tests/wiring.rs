//! How the subsystems feed each other, against a real `tidemark serve`: a conversation about a
//! listing counts one `contact` when its first message commits — never again for retries,
//! later messages, other senders or a restart — and an email click on an `/item/<id>` link
//! reaches the same listing's report. Everything is read back through the public report after
//! a rollup.

mod common;

use std::time::{Duration, Instant};

use common::*;
use reqwest::Method;
use serde_json::{Value, json};
use tidemark_core::clock::{Clock, SystemClock};
use tidemark_core::day::Day;

const BROWSER: &str = "Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0";

async fn conversation(
    c: &reqwest::Client,
    s: &TestServer,
    members: &[&str],
    listing: Option<u64>,
) -> String {
    let mut body = json!({ "members": members });
    if let Some(l) = listing {
        body["listing_id"] = json!(l);
    }
    let (st, v) = call(c, Method::POST, &s.url("/v1/conversations"), Some(body)).await;
    assert_eq!(st, 201, "{v}");
    v["conversation_id"].as_str().unwrap().to_owned()
}

/// Rolls up today and returns account 9's report rows.
async fn report_rows(c: &reqwest::Client, s: &TestServer) -> Value {
    let today = Day::of_utc_ms(SystemClock.now_ms());
    let (st, v) = call(
        c,
        Method::POST,
        &s.url(&format!("/v1/rollups/{today}")),
        None,
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let (st, v) = call(
        c,
        Method::GET,
        &s.url(&format!("/v1/accounts/9/report?from={today}&to={today}")),
        None,
    )
    .await;
    assert_eq!(st, 200, "{v}");
    v["rows"].clone()
}

/// Polls the report until it equals `expected` (contacts and clicks are recorded off the
/// request path), failing after 10 s with the last rows seen.
async fn expect_report(c: &reqwest::Client, s: &TestServer, expected: Value) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let rows = report_rows(c, s).await;
        if rows == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "report {rows} never became {expected}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn row(listing_id: i64, kind: &str, total: u64) -> Value {
    json!({"listing_id": listing_id, "kind": kind, "total": total, "uniques_daily_sum": 0})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_messages_about_a_listing_and_email_clicks_reach_its_report() {
    let mut server = TestServer::start(&[]).await;
    let c = client();
    let (st, v) = call(
        &c,
        Method::POST,
        &server.url("/v1/listings"),
        Some(json!([{"listing_id": 501, "account_id": 9}, {"listing_id": 502, "account_id": 9}])),
    )
    .await;
    assert_eq!(st, 200, "{v}");

    // Two buyers contact 501; a conversation about 502 stays empty; one has no listing.
    let a = conversation(&c, &server, &["b1", "s1"], Some(501)).await;
    let b = conversation(&c, &server, &["b2", "s1"], Some(501)).await;
    let _empty = conversation(&c, &server, &["b3", "s1"], Some(502)).await;
    let none = conversation(&c, &server, &["b4", "s1"], None).await;
    assert_eq!(
        send(&c, &server, &a, "b1", "m1", "is it available?")
            .await
            .0,
        201
    );
    assert_eq!(
        send(&c, &server, &a, "b1", "m1", "is it available?")
            .await
            .0,
        200,
        "retry"
    );
    assert_eq!(send(&c, &server, &a, "s1", "r1", "yes").await.0, 201);
    assert_eq!(send(&c, &server, &a, "b1", "m2", "great").await.0, 201);
    assert_eq!(send(&c, &server, &b, "b2", "x1", "price?").await.0, 201);
    assert_eq!(send(&c, &server, &none, "b4", "n1", "hello").await.0, 201);
    expect_report(&c, &server, json!([row(501, "contact", 2)])).await;

    // After a restart the retry is still a duplicate and counts nothing.
    server.terminate();
    server.spawn().await;
    assert_eq!(
        send(&c, &server, &a, "b1", "m1", "is it available?")
            .await
            .0,
        200
    );
    assert_eq!(
        send(&c, &server, &b, "b2", "x2", "still there?").await.0,
        201
    );

    // An email link to the 502 listing page: a browser click counts, a HEAD (bot) does not.
    let (st, v) = call(&c, Method::POST, &server.url("/v1/mailings"), Some(json!({
        "subject": "New for you", "from": "news@shop.example",
        "html": r#"<p><a href="https://shop.example/item/502?utm=nl">see it</a> <a href="https://shop.example/help">help</a></p>"#
    }))).await;
    assert_eq!(st, 201, "{v}");
    let mid = v["mailing_id"].as_str().unwrap().to_owned();
    let (st, v) = call(
        &c,
        Method::POST,
        &server.url(&format!("/v1/mailings/{mid}/render")),
        Some(json!({"recipients": [{"email": "ann@x.com", "fields": {}}]})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let html = v["messages"][0]["html"].as_str().unwrap();
    let prefix = format!("{}/c/", server.base);
    let ids: Vec<&str> = html
        .match_indices(&prefix)
        .map(|(i, _)| &html[i + prefix.len()..i + prefix.len() + 32])
        .collect();
    assert_eq!(ids.len(), 2, "{html}");
    let no_redirects = no_redirects();
    for (method, id) in [
        (Method::GET, ids[0]),
        (Method::HEAD, ids[0]),
        (Method::GET, ids[1]),
    ] {
        let r = no_redirects
            .request(method, server.url(&format!("/c/{id}")))
            .header("user-agent", BROWSER)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 302);
    }
    expect_report(
        &c,
        &server,
        json!([row(501, "contact", 2), row(502, "email_click", 1)]),
    )
    .await;
}
