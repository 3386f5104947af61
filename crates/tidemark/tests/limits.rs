//! Bounds on what one request may ask: its head (URI length, header count), its query (none
//! on routes that take none) and the size of a render's answer, which streams past a bound.

mod common;

use common::*;
use serde_json::{Value, json};

/// A long URI and too many headers are answered 414 / 431 in the JSON error shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_heads_get_json_errors() {
    let server = TestServer::start(&[]).await;
    let c = client();
    let long = format!("/v1/conversations/{}/messages", "c".repeat(20_000));
    let r = c
        .get(server.url(&long))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 414);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "uri_too_long");
    assert_eq!(
        v["error"]["message"],
        format!("the URI is {} bytes long; at most 8192", long.len())
    );
    let mut req = c.get(server.url("/healthz"));
    for i in 0..200 {
        req = req.header(format!("x-h{i}"), "1");
    }
    let r = req.send().await.unwrap();
    assert_eq!(r.status().as_u16(), 431);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "request_header_fields_too_large");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .ends_with("headers; at most 100"),
        "{v}"
    );
    // At the limits, a request is served.
    let r = c.get(server.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
}

/// Routes that take no query parameters refuse any, naming them, before doing anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_without_parameters_refuse_a_query() {
    let server = TestServer::start(&[]).await;
    let c = client();
    let cid = create_conversation(&c, &server, &["u1", "u2"]).await;
    for (path, body) in [
        (
            format!("/v1/conversations/{cid}/messages?dry_run=1&x"),
            json!({"client_msg_id": "q1", "sender": "u1", "body": "hi"}),
        ),
        (
            "/v1/conversations?dry_run=1&x".to_owned(),
            json!({"members": ["u1", "u3"]}),
        ),
        (
            "/v1/suppressions?dry_run=1&x".to_owned(),
            json!({"emails": ["a@x.com"]}),
        ),
    ] {
        let (st, v) = call(&c, reqwest::Method::POST, &server.url(&path), Some(body)).await;
        assert_eq!(st, 400, "{path}: {v}");
        assert_eq!(
            v["error"]["message"], "this route takes no query parameters; got: dry_run, x",
            "{path}"
        );
    }
    let (latest, _) = all_messages(&c, &server, &cid, "u1").await;
    assert_eq!(latest, 0);
}

/// A render too large to answer whole is refused in JSON and streams as NDJSON: one line per
/// message, then `done` with the counts; every streamed message's links redirect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_render_streams_as_ndjson() {
    let server = TestServer::start(&[]).await;
    let c = client();
    // 20 KB of template: 4,000 recipients make about 80 MB of messages.
    let html = format!(
        r#"<p>{{{{ name }}}}</p><a href="https://shop.example/item/1">item</a><p>{}</p>"#,
        "x".repeat(20_000)
    );
    let (st, v) = call(
        &c,
        reqwest::Method::POST,
        &server.url("/v1/mailings"),
        Some(json!({"subject": "s", "from": "a@b.example", "html": html})),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    let mid = v["mailing_id"].as_str().unwrap().to_owned();
    let recipients: Vec<Value> = (0..4000)
        .map(|i| json!({"email": format!("r{i}@x.com"), "fields": {"name": format!("R{i}")}}))
        .chain([json!({"email": "missing@x.com", "fields": {}})])
        .collect();
    let url = server.url(&format!("/v1/mailings/{mid}/render"));
    let body = json!({ "recipients": recipients });
    let (st, v) = call(&c, reqwest::Method::POST, &url, Some(body.clone())).await;
    assert_eq!(st, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("stream the render (Accept: application/x-ndjson)"),
        "{v}"
    );
    let r = c
        .post(&url)
        .bearer_auth(KEY)
        .header("accept", "application/x-ndjson")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.headers()["content-type"], "application/x-ndjson");
    let text = r.text().await.unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4002);
    assert_eq!(lines[0]["message"]["email"], "r0@x.com");
    assert!(
        lines[0]["message"]["html"]
            .as_str()
            .unwrap()
            .contains("<p>R0</p>")
    );
    let skipped: Vec<&Value> = lines.iter().filter_map(|l| l.get("skipped")).collect();
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0]["email"], "missing@x.com");
    assert_eq!(
        lines.last().unwrap(),
        &json!({"done": {"messages": 4000, "skipped": 1}})
    );
    // The last recipient's link was stored before its line was written.
    let html = lines[3999]["message"]["html"].as_str().unwrap();
    assert!(html.contains("<p>R3999</p>"));
    let start = html.find("/c/").unwrap();
    let link = &html[start..start + 35];
    let no_redirect = no_redirects();
    let r = no_redirect.get(server.url(link)).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 302, "{link}");
    assert_eq!(r.headers()["location"], "https://shop.example/item/1");
}
