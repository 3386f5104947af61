//! Campaign statistics over HTTP against a real `tidemark serve`: renders, a send delivered
//! to `.eml`, opens and clicks of people, a bot and image proxies, read back from
//! `GET /v1/mailings/{mid}/stats` on the embedded store and on MariaDB.

mod common;

use std::time::{Duration, Instant};

use common::*;
use reqwest::Method;
use serde_json::{Value, json};

const BROWSER: &str = "Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0";
const GMAIL_PROXY: &str =
    "Mozilla/5.0 (Windows NT 5.1; rv:11.0) Gecko Firefox/11.0 (via ggpht.com GoogleImageProxy)";

async fn hit(s: &TestServer, path: &str, method: Method, ua: &str) {
    let r = no_redirects()
        .request(method, s.url(path))
        .header("user-agent", ua)
        .send()
        .await
        .unwrap();
    assert!(
        [200, 302].contains(&r.status().as_u16()),
        "{path}: {}",
        r.status()
    );
}

/// Reads the statistics until `done` holds of them (hits and deliveries are counted in the
/// background, within milliseconds), or fails after 15 s with the last answer.
async fn stats_when(
    c: &reqwest::Client,
    s: &TestServer,
    mid: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (st, v) = call(
            c,
            Method::GET,
            &s.url(&format!("/v1/mailings/{mid}/stats")),
            None,
        )
        .await;
        assert_eq!(st, 200, "{v}");
        if done(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "statistics never settled: {v:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn campaign_statistics() {
    campaign_statistics_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn campaign_statistics_on_mariadb_and_influxdb() {
    campaign_statistics_in(Mode::Production).await;
}

async fn campaign_statistics_in(mode: Mode) {
    let server = TestServer::start_in(mode, &[]).await;
    let c = client();
    let html = concat!(
        "<html><body><p>Hi {{ first_name }}</p>",
        r#"<a href="https://shop.example/item/7">see</a>"#,
        r#"<a href="https://shop.example/?u={{ first_name }}">you</a>"#,
        "</body></html>"
    );
    let (st, v) = call(
        &c,
        Method::POST,
        &server.url("/v1/mailings"),
        Some(json!({"subject": "Deals", "from": "news@shop.example", "html": html})),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    let mid = v["mailing_id"].as_str().unwrap().to_owned();
    let path = |p: &str| server.url(&format!("/v1/mailings/{mid}/{p}"));

    // Nothing yet: zeros, no links, no ratio.
    let (st, v) = call(&c, Method::GET, &path("stats"), None).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["recipients"], json!({"rendered": 0, "skipped": {}}));
    assert_eq!(v["click_to_open"], Value::Null);
    assert_eq!(v["links"], json!([]));

    let (st, _) = call(
        &c,
        Method::POST,
        &server.url("/v1/suppressions"),
        Some(json!({"emails": ["cem@x.com"]})),
    )
    .await;
    assert_eq!(st, 200);
    let (st, v) = call(
        &c,
        Method::POST,
        &path("render"),
        Some(json!({"recipients": [
            {"email": "ann@x.com", "fields": {"first_name": "Ann"}},
            {"email": "bob@x.com", "fields": {"first_name": "Bob"}},
            {"email": "cem@x.com", "fields": {"first_name": "Cem"}},
            {"email": "dan@x.com", "fields": {}}
        ]})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let (ann, ann_pixel) = tracking_ids(v["messages"][0]["html"].as_str().unwrap(), &server.base);
    let (bob, _) = tracking_ids(v["messages"][1]["html"].as_str().unwrap(), &server.base);

    // Eve's message is sent and delivered (an .eml file); her mail app's proxy fetches the
    // pixel at once: a machine open.
    let (st, v) = call(
        &c,
        Method::POST,
        &path("send"),
        Some(json!({"recipients": [
            {"email": "Eve@X.com", "fields": {"first_name": "Eve"}}
        ]})),
    )
    .await;
    assert_eq!(st, 202, "{v}");
    stats_when(&c, &server, &mid, |v| v["sending"]["delivered"] == 1).await;
    let dir = server.dir.join("mail-out").join(&mid);
    let eml = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let eml = std::fs::read(eml).unwrap();
    let eml = mail_parser::MessageParser::default().parse(&eml).unwrap();
    let (_, eve_pixel) = tracking_ids(&eml.body_html(0).unwrap(), &server.base);
    hit(&server, &format!("/o/{eve_pixel}"), Method::GET, BROWSER).await;

    // Ann opens, clicks the first link twice and the second once; a scanner probes her first
    // link with HEAD; Bob clicks without an open (his client blocks images); Gmail's image
    // proxy fetches Ann's pixel again: a machine open.
    hit(&server, &format!("/o/{ann_pixel}"), Method::GET, BROWSER).await;
    hit(&server, &format!("/c/{}", ann[0]), Method::GET, BROWSER).await;
    hit(&server, &format!("/c/{}", ann[0]), Method::GET, BROWSER).await;
    hit(&server, &format!("/c/{}", ann[1]), Method::GET, BROWSER).await;
    hit(&server, &format!("/c/{}", ann[0]), Method::HEAD, BROWSER).await;
    hit(&server, &format!("/c/{}", bob[0]), Method::GET, BROWSER).await;
    hit(
        &server,
        &format!("/o/{ann_pixel}"),
        Method::GET,
        GMAIL_PROXY,
    )
    .await;

    let v = stats_when(&c, &server, &mid, |v| {
        v["bot_hits"] == 1 && v["clicks"]["total"] == 4 && v["opens"]["machine"] == 2
    })
    .await;
    assert_eq!(v["mailing_id"], mid);
    assert_eq!(
        v["recipients"],
        json!({"rendered": 3, "skipped": {"suppressed": 1, "render_failed": 1}})
    );
    assert_eq!(
        v["sending"],
        json!({"handed": 1, "delivered": 1, "failed": 0})
    );
    assert_eq!(v["opens"], json!({"total": 1, "unique": 2, "machine": 2}));
    assert_eq!(v["clicks"], json!({"total": 4, "unique": 2}));
    assert_eq!(v["click_to_open"], json!(1.0));
    assert_eq!(v["unsubscribed"], 0);
    assert_eq!(
        v["links"],
        json!([
            {"position": 0, "url": "https://shop.example/item/7", "clicks": 3, "unique_clicks": 2},
            {"position": 1, "url": "https://shop.example/?u=Ann", "clicks": 1, "unique_clicks": 1}
        ])
    );
    let timeline = v["timeline"].as_array().unwrap();
    let sum = |k: &str| timeline.iter().map(|h| h[k].as_u64().unwrap()).sum::<u64>();
    assert_eq!((sum("opens"), sum("clicks")), (1, 4));
    assert!(
        timeline
            .iter()
            .all(|h| h["hour"].as_str().unwrap().ends_with(":00:00.000Z"))
    );

    // Eve unsubscribes with one click: her message names Tidemark's link beside the
    // sender's mailto. A GET only asks; a POST (twice) unsubscribes her once.
    let unsub = eml
        .header_raw("List-Unsubscribe")
        .unwrap()
        .replace(['\r', '\n'], "");
    let link = format!("{}/u/{eve_pixel}", server.base);
    assert!(unsub.contains(&format!("<{link}>")), "{unsub}");
    assert!(
        unsub.contains("<mailto:news@shop.example?subject=unsubscribe>"),
        "{unsub}"
    );
    let r = c.get(&link).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let page = r.text().await.unwrap();
    assert!(
        page.contains("<form method=\"post\">") && page.contains("Eve@X.com"),
        "{page}"
    );
    assert_eq!(
        stats_when(&c, &server, &mid, |_| true).await["unsubscribed"],
        0
    );
    for _ in 0..2 {
        let r = c
            .post(&link)
            .header("content-type", "application/x-www-form-urlencoded")
            .body("List-Unsubscribe=One-Click")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        assert!(
            r.text()
                .await
                .unwrap()
                .contains("will get no more mail from news@shop.example")
        );
    }
    assert_eq!(
        stats_when(&c, &server, &mid, |_| true).await["unsubscribed"],
        1
    );
    let (st, v) = call(
        &c,
        Method::POST,
        &path("render"),
        Some(json!({"recipients": [
            {"email": "eve@x.com", "fields": {"first_name": "Eve"}}
        ]})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v["skipped"],
        json!([{"email": "eve@x.com", "reason": "suppressed"}])
    );
    // A link's id, a forged id, nonsense: a page each, never an error dump.
    for (id, status) in [
        (ann[0].as_str(), 404),
        ("0".repeat(32).as_str(), 404),
        ("x", 404),
    ] {
        let r = c
            .post(server.url(&format!("/u/{id}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "{id}");
        let ct = r.headers()["content-type"].to_str().unwrap().to_owned();
        let body = r.text().await.unwrap();
        assert!(ct.starts_with("text/html"), "{id}: {ct} {body}");
        assert!(body.contains("not valid"), "{id}: {body}");
    }

    // Another tenant's view, and a mailing that does not exist.
    let (st, v) = call(
        &c,
        Method::GET,
        &server.url("/v1/mailings/0193a1b2-0000-7000-8000-000000000009/stats"),
        None,
    )
    .await;
    assert_eq!(st, 404, "{v}");
    assert_eq!(v["error"]["code"], "not_found", "{v}");
    server.cleanup().await;
}

/// A graceful stop right after a send: the messages the pool still delivers while it drains
/// are counted before the stores close, so after a restart every handed message is delivered
/// or failed in the statistics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_made_while_stopping_are_counted() {
    let mut server = TestServer::start(&[("TIDEMARK_LINKS__MAIL__CONNECTIONS", "1")]).await;
    let c = client();
    let (st, v) = call(&c, Method::POST, &server.url("/v1/mailings"), Some(json!({"subject": "Deals", "from": "news@shop.example", "html": "<p>Hi <a href=\"https://shop.example/\">x</a></p>"}))).await;
    assert_eq!(st, 201, "{v}");
    let mid = v["mailing_id"].as_str().unwrap().to_owned();
    let recipients: Vec<Value> = (0..300)
        .map(|i| json!({"email": format!("r{i}@x.example"), "fields": {}}))
        .collect();
    let (st, v) = call(
        &c,
        Method::POST,
        &server.url(&format!("/v1/mailings/{mid}/send")),
        Some(json!({"recipients": recipients})),
    )
    .await;
    assert_eq!((st, &v["queued"]), (202, &json!(300)), "{v}");
    assert!(server.terminate().success());
    server.spawn().await;
    let (st, v) = call(
        &c,
        Method::GET,
        &server.url(&format!("/v1/mailings/{mid}/stats")),
        None,
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v["sending"],
        json!({"handed": 300, "delivered": 300, "failed": 0})
    );
    server.cleanup().await;
}
