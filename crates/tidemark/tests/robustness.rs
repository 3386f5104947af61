//! Inputs meant to break the server: every error answer is JSON, events outside the raw
//! window are refused, gzip line protocol is accepted, slow clients are cut off.

mod common;

use std::io::Write;

use common::*;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framework_errors_are_json_too() {
    let server = TestServer::start(&[]).await;
    let c = client();
    for (method, path, status, code) in [
        (
            reqwest::Method::DELETE,
            "/v1/events",
            405,
            "method_not_allowed",
        ),
        (
            reqwest::Method::GET,
            "/v1/conversations/%FF/messages",
            400,
            "bad_request",
        ),
        (reqwest::Method::GET, "/c/%FF", 400, "bad_request"),
    ] {
        let r = c
            .request(method.clone(), server.url(path))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "{method} {path}");
        let v: Value = r.json().await.unwrap_or(Value::Null);
        assert_eq!(v["error"]["code"], code, "{method} {path}: {v}");
    }
}

/// Event times outside the raw window are refused whole with 400 saying why, a millisecond
/// timestamp sent without `precision=ms` with a hint; a gzip body is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_times_are_bounded_and_gzip_is_accepted() {
    let server = TestServer::start(&[]).await;
    let c = client();
    let now = now_ms();
    let write = |precision: &str| server.url(&format!("/api/v2/write?org=o&bucket=b{precision}"));
    let week_ago = (now - 7 * 86_400_000 - 3_700_000).to_string();
    let now_text = now.to_string();
    for (precision, ts, refusal) in [
        (
            "&precision=ms",
            "9223372036854775807",
            "is more than one day after now",
        ),
        (
            "&precision=ms",
            "253402300800000",
            "is more than one day after now",
        ),
        ("&precision=ms", "-1", "is before the raw window"),
        (
            "&precision=ms",
            week_ago.as_str(),
            "raw_retention + lateness (7days 1h) are refused",
        ),
        (
            "",
            now_text.as_str(),
            "Unix milliseconds sent without precision=ms",
        ),
    ] {
        let body = format!("listing_event,event=view listing_id=\"1\" {ts}");
        let r = c
            .post(write(precision))
            .header("authorization", "Token dev-key")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "{ts}");
        let v: Value = r.json().await.unwrap();
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(refusal), "{ts}: {v}");
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(
        format!("listing_event,event=view listing_id=\"48213\",count=1i {now}\n").as_bytes(),
    )
    .unwrap();
    let r = c
        .post(write("&precision=ms"))
        .header("authorization", "Token dev-key")
        .header("content-encoding", "gzip")
        .body(gz.finish().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 204);
    let conn = rusqlite::Connection::open(server.dir.join("events/raw.db")).unwrap();
    let days: Vec<i64> = conn
        .prepare("SELECT day FROM raw_day")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        days,
        vec![now.div_euclid(86_400_000)],
        "only the gzip batch's day was stored"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn templates_and_messages_are_bounded() {
    let server = TestServer::start(&[("TIDEMARK_LINKS__MAX_LINKS_PER_MESSAGE", "3")]).await;
    let c = client();
    let link = r#"<a href="https://ex.com/">x</a>"#;
    let huge = "x".repeat(1024 * 1024 + 1);
    for html in [link.repeat(4), huge] {
        let (st, v) = call(
            &c,
            reqwest::Method::POST,
            &server.url("/v1/mailings"),
            Some(serde_json::json!({"subject": "s", "from": "a@b.example", "html": html})),
        )
        .await;
        assert_eq!(st, 400, "{v}");
    }
    // Merge fields can add links per recipient: that recipient is skipped, the others rendered.
    let (st, v) = call(&c, reqwest::Method::POST, &server.url("/v1/mailings"), Some(serde_json::json!({"subject": "s", "from": "a@b.example", "html": format!("{link}{{{{{{ extra }}}}}}")}))).await;
    assert_eq!(st, 201, "{v}");
    let mid = v["mailing_id"].as_str().unwrap();
    let (st, v) = call(
        &c,
        reqwest::Method::POST,
        &server.url(&format!("/v1/mailings/{mid}/render")),
        Some(serde_json::json!({"recipients": [
            {"email": "a@x.com", "fields": {"extra": ""}},
            {"email": "b@x.com", "fields": {"extra": link.repeat(3)}}
        ]})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["messages"].as_array().unwrap().len(), 1);
    assert_eq!(
        v["skipped"][0]["reason"],
        "too many links (4 > 3 per message)"
    );
}

/// A render whose recipients × the template's links exceed `max_links_per_call` is refused
/// with 400 naming the figures and the key; one at the cap renders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_render_over_the_links_per_call_cap_is_refused_whole() {
    let server = TestServer::start(&[("TIDEMARK_LINKS__MAX_LINKS_PER_CALL", "10")]).await;
    let c = client();
    let html = r#"<a href="https://ex.com/a">a</a> <a href="https://ex.com/b">b</a>"#;
    let (st, v) = call(
        &c,
        reqwest::Method::POST,
        &server.url("/v1/mailings"),
        Some(serde_json::json!({"subject": "s", "from": "a@b.example", "html": html})),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    let mid = v["mailing_id"].as_str().unwrap().to_owned();
    let recipients = |n: usize| {
        (0..n)
            .map(|i| serde_json::json!({"email": format!("r{i}@x.com"), "fields": {}}))
            .collect::<Vec<_>>()
    };
    let render = |n: usize| {
        let (c, url) = (&c, server.url(&format!("/v1/mailings/{mid}/render")));
        async move {
            call(
                c,
                reqwest::Method::POST,
                &url,
                Some(serde_json::json!({"recipients": recipients(n)})),
            )
            .await
        }
    };
    let (st, v) = render(6).await;
    assert_eq!(st, 400, "{v}");
    assert_eq!(
        v["error"]["message"],
        "6 recipients × 2 trackable links = 12 tracked links; at most 10 per call \
         (links.max_links_per_call): split the recipients over several calls"
    );
    let (st, v) = render(5).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["messages"].as_array().unwrap().len(), 5);
}

/// A JSON object that repeats a key is refused with 400 naming the key, on a typed body (a
/// SEND), inside a map (a recipient's fields) and in an event, in an array or one per line;
/// nothing is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_json_keys_are_refused_on_every_route() {
    let server = TestServer::start(&[]).await;
    let c = client();
    let cid = create_conversation(&c, &server, &["u1", "u2"]).await;
    let (st, v) = call(
        &c,
        reqwest::Method::POST,
        &server.url("/v1/mailings"),
        Some(
            serde_json::json!({"subject": "s", "from": "a@b.example", "html": "<p>{{ name }}</p>"}),
        ),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    let mid = v["mailing_id"].as_str().unwrap().to_owned();
    let now = now_ms();
    let cases = [
        (
            format!("/v1/conversations/{cid}/messages"),
            r#"{"client_msg_id": "d1", "sender": "u1", "body": "a", "body": "b"}"#.to_owned(),
            "duplicate key \"body\"",
        ),
        (
            format!("/v1/mailings/{mid}/render"),
            r#"{"recipients": [{"email": "r@x.com", "fields": {"name": "A", "name": "B"}}]}"#
                .to_owned(),
            "duplicate key \"name\"",
        ),
        (
            "/v1/events".to_owned(),
            format!(r#"[{{"time": {now}, "kind": "view", "kind": "click", "listing_id": 1}}]"#),
            "duplicate key \"kind\"",
        ),
        (
            "/v1/events".to_owned(),
            format!(r#"{{"time": {now}, "kind": "view", "listing_id": 1, "listing_id": 2}}"#),
            "duplicate key \"listing_id\"",
        ),
    ];
    for (path, body, named) in cases {
        let r = c
            .post(server.url(&path))
            .bearer_auth(KEY)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "{path} {body}");
        let v: Value = r.json().await.unwrap();
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(named), "{path}: {v}");
    }
    let (latest, _) = all_messages(&c, &server, &cid, "u1").await;
    assert_eq!(latest, 0);
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A client that never finishes its headers (slow loris) is cut off after the header read
/// timeout, and the server keeps answering others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_finishes_its_headers_is_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = TestServer::start(&[("TIDEMARK_HEADER_READ_TIMEOUT", "1s")]).await;
    let addr = server.base.trim_start_matches("http://").to_owned();
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        slow.read_to_end(&mut buf),
    )
    .await;
    assert!(read.is_ok(), "the connection was not closed within 5 s");
    assert!(
        buf.is_empty() || buf.starts_with(b"HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&buf)
    );
    let r = client().get(server.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
}

/// Clients that send complete headers and then trickle their body (one byte every 200 ms)
/// are answered 408 `request_timeout` in JSON and cut off at the body read deadline, all of
/// them, while a SEND on another connection answers at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_trickle_their_bodies_are_cut_off_at_the_body_deadline() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = TestServer::start(&[("TIDEMARK_BODY_READ_TIMEOUT", "2s")]).await;
    let c = client();
    let cid = create_conversation(&c, &server, &["u1", "u2"]).await;
    let addr = server.base.trim_start_matches("http://").to_owned();
    let path = format!("/v1/conversations/{cid}/messages");
    let started = std::time::Instant::now();
    let mut slow = Vec::new();
    for i in 0..50 {
        let (addr, path) = (addr.clone(), path.clone());
        slow.push(tokio::spawn(async move {
            let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
            let body = format!(r#"{{"client_msg_id":"slow-{i}","sender":"u1","body":"hi"}}"#);
            let head = format!(
                "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer dev-key\r\n\
                 Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            conn.write_all(head.as_bytes()).await.unwrap();
            let (mut read, mut write) = conn.into_split();
            let trickle = tokio::spawn(async move {
                for byte in body.as_bytes() {
                    if write.write_all(&[*byte]).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
            });
            let mut answer = Vec::new();
            let closed = tokio::time::timeout(
                std::time::Duration::from_secs(10),
                read.read_to_end(&mut answer),
            )
            .await;
            trickle.abort();
            (
                closed.is_ok(),
                String::from_utf8_lossy(&answer).into_owned(),
            )
        }));
    }
    // Meanwhile a SEND answers.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let sent = std::time::Instant::now();
    let (st, v) = send(&c, &server, &cid, "u2", "fast", "hello").await;
    assert_eq!(st, 201, "{v}");
    assert!(sent.elapsed() < std::time::Duration::from_secs(1));
    for conn in slow {
        let (closed, answer) = conn.await.unwrap();
        assert!(closed, "a trickling connection was still open after 10 s");
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(
            answer.contains(
                r#"{"error":{"code":"request_timeout","message":"the request body did not arrive within 2s"}}"#
            ),
            "{answer}"
        );
    }
    // Cut at the deadline (2 s), not after the whole body (over 10 s at this pace).
    assert!(started.elapsed() < std::time::Duration::from_secs(8));
    // None of the trickled messages was committed.
    let (latest, all) = all_messages(&c, &server, &cid, "u1").await;
    assert_eq!((latest, all.len()), (1, 1));
}

/// With `max_connections` open (idle clients that never send a request), a further
/// connection waits in the listen backlog, unanswered; it is served as soon as one closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_max_connections_wait_until_one_closes() {
    let server = TestServer::start(&[("TIDEMARK_MAX_CONNECTIONS", "3")]).await;
    let addr = server.base.trim_start_matches("http://").to_owned();
    // The test harness's readiness probe has closed its connection by now; give the server a
    // moment to see it go.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let c = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(1))
        .build()
        .unwrap();
    let waited = c.get(server.url("/healthz")).send().await;
    assert!(
        waited.is_err(),
        "a fourth connection was served: {waited:?}"
    );
    drop(idle.pop());
    let r = c.get(server.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
}

/// `max_connections = 0` is refused at start, naming the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connections_of_zero_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("TIDEMARK_MAX_CONNECTIONS".to_owned(), "0".to_owned())];
    let stderr = TestServer::refused_start(dir.path(), &env);
    assert!(
        stderr.contains("max_connections must be at least 1"),
        "{stderr}"
    );
}

/// With `metrics_key` set, `/metrics` answers only that key: no key or a tenant's key is 401
/// in JSON; `/healthz` stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_ask_for_the_metrics_key_when_one_is_set() {
    let server = TestServer::start(&[("TIDEMARK_METRICS_KEY", "scrape-s3cret")]).await;
    let c = client();
    for auth in [None, Some("Bearer dev-key"), Some("Bearer scrape-s3cre")] {
        let mut req = c.get(server.url("/metrics"));
        if let Some(auth) = auth {
            req = req.header("authorization", auth);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status().as_u16(), 401, "{auth:?}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(
            v,
            serde_json::json!({"error": {"code": "unauthorized",
                "message": "GET /metrics needs `Authorization: Bearer <metrics_key>`"}})
        );
    }
    let r = c
        .get(server.url("/metrics"))
        .header("authorization", "Bearer scrape-s3cret")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(
        r.text()
            .await
            .unwrap()
            .contains("tidemark_chat_sends_total")
    );
    let r = c.get(server.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_server_on_the_same_data_dir_refuses_to_start() {
    let server = TestServer::start(&[]).await;
    // The lock is the directory's own: no file in it can be deleted to get past it, and another
    // spelling of the path (here a symlink) is the same directory.
    let other_name = tempfile::tempdir().unwrap();
    let link = other_name.path().join("same-data");
    std::os::unix::fs::symlink(&server.dir, &link).unwrap();
    for dir in [server.dir.clone(), link] {
        let stderr = TestServer::refused_start(&dir, &[]);
        assert!(
            stderr.contains("another `tidemark serve` is using the data directory"),
            "{stderr}"
        );
    }
    // The first one still serves.
    let (st, _) = call(
        &client(),
        reqwest::Method::GET,
        &server.url("/readyz"),
        None,
    )
    .await;
    assert_eq!(st, 200);
}

/// The data directory's free space is watched: filled from outside to under
/// `min_free_disk_mb` (1 MiB here), `/readyz` answers 503 `storage_full` naming the data disk
/// within seconds, with no write having failed; freed, it is ready again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_reports_a_data_disk_below_its_free_space_floor_before_any_write_fails() {
    let server = TestServer::start_on_small_disk(24 << 20).await;
    let c = client();
    // Filled to the last byte, then 512 KiB given back: writes still succeed, but the free
    // space is under the floor.
    let filler = server.inside("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    let chunk = vec![0x5A_u8; 64 << 10];
    while f.write(&chunk).is_ok_and(|n| n > 0) {}
    let len = f.metadata().unwrap().len();
    f.set_len(len - (512 << 10)).unwrap();
    drop(f);
    let readyz = || async {
        let (st, v) = call(&c, reqwest::Method::GET, &server.url("/readyz"), None).await;
        (
            st,
            v["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        )
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let (st, why) = loop {
        let (st, why) = readyz().await;
        if st == 503 || std::time::Instant::now() > deadline {
            break (st, why);
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!(st, 503, "{why}");
    assert!(
        why.starts_with("storage full, no write has succeeded since: data disk: ")
            && why.contains("MiB free, below min_free_disk_mb (1 MiB)"),
        "{why}"
    );
    std::fs::remove_file(&filler).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while readyz().await.0 != 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "not ready after space came back"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// A real full disk (a 24 MiB tmpfs, filled from outside): a SEND answers 503
/// `storage_full` naming `hot.db`, with `Retry-After`; `/readyz` answers 503 `storage_full`
/// while the disk is full, though reads still work; once space is freed the next SEND
/// commits and `/readyz` is ready again, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_answers_storage_full_and_readyz_says_so_until_space_is_back() {
    let server = TestServer::start_on_small_disk(24 << 20).await;
    let c = client();
    let cid = create_conversation(&c, &server, &["u1", "u2"]).await;
    let (st, _) = send(&c, &server, &cid, "u1", "before", "fits").await;
    assert_eq!(st, 201);

    // Fill the disk to the last byte.
    let filler = server.inside("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    let chunk = vec![0xA5_u8; 64 << 10];
    let full = loop {
        match f.write(&chunk) {
            Ok(0) => break std::io::Error::from(std::io::ErrorKind::StorageFull),
            Ok(_) => {}
            Err(e) => break e,
        }
    };
    assert_eq!(full.kind(), std::io::ErrorKind::StorageFull, "{full}");
    drop(f);

    let body = "x".repeat(32 << 10);
    let mut refused = None;
    for i in 0..200 {
        let r = c
            .post(server.url(&format!("/v1/conversations/{cid}/messages")))
            .bearer_auth(KEY)
            .json(&serde_json::json!({"client_msg_id": format!("m{i}"), "sender": "u1", "body": body}))
            .send()
            .await
            .unwrap();
        if r.status().as_u16() != 201 {
            refused = Some(r);
            break;
        }
    }
    let refused = refused.expect("every SEND committed on a full disk");
    assert_eq!(refused.status().as_u16(), 503);
    assert_eq!(refused.headers()["retry-after"], "10");
    let v: Value = refused.json().await.unwrap();
    assert_eq!(v["error"]["code"], "storage_full", "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    let hot = server.dir.join("chat").join("hot.db");
    assert!(
        message.starts_with(&format!("sqlite {}: ", hot.display()))
            && message.contains("database or disk is full"),
        "{message}"
    );

    let (st, v) = call(&c, reqwest::Method::GET, &server.url("/readyz"), None).await;
    assert_eq!(
        (st, &v["error"]["code"]),
        (503, &Value::from("storage_full")),
        "{v}"
    );
    let why = v["error"]["message"].as_str().unwrap();
    // The archiver may have met the full disk too, and is then named first.
    assert!(
        why.starts_with("storage full, no write has succeeded since: ")
            && why.contains("chat hot store: sqlite "),
        "{why}"
    );
    let (st, _) = call(
        &c,
        reqwest::Method::GET,
        &server.url(&format!("/v1/conversations/{cid}/messages?user=u1&limit=5")),
        None,
    )
    .await;
    assert_eq!(st, 200, "reads go on on a full disk");

    std::fs::remove_file(&filler).unwrap();
    let (st, v) = send(&c, &server, &cid, "u1", "after", "space is back").await;
    assert_eq!(st, 201, "{v}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (st, v) = call(&c, reqwest::Method::GET, &server.url("/readyz"), None).await;
        if st == 200 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "still not ready: {v}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
