//! The chat HTTP contract (DESIGN.md part A) against a real `tidemark serve`, and bad input:
//! every bad input gets its 4xx with a JSON error body and changes nothing.

mod common;

use common::*;
use reqwest::Method;
use serde_json::{Value, json};

fn error_code(v: &Value) -> &str {
    v["error"]["code"]
        .as_str()
        .unwrap_or("<no JSON error body>")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_and_bad_inputs() {
    let server = TestServer::start(&[]).await;
    let c = client();
    let cid = create_conversation(&c, &server, &["u1", "u2"]).await;
    let msgs_url = server.url(&format!("/v1/conversations/{cid}/messages"));

    // The happy path, with exact shapes.
    let (st, ack) = send(&c, &server, &cid, "u1", "m1", "hello").await;
    assert_eq!(st, 201);
    assert_eq!(ack["conversation_seq"], 1);
    assert!(ack["committed_at"].as_str().unwrap().ends_with('Z'));
    let (st, again) = send(&c, &server, &cid, "u1", "m1", "hello").await;
    assert_eq!(
        (st, &again),
        (200, &ack),
        "a retry returns the identical body"
    );
    let (st, _) = send(&c, &server, &cid, "u2", "m1", "same key, other sender").await;
    assert_eq!(st, 201, "dedup is per (sender, client_msg_id)");

    // Bad inputs: each gets its status and code, and nothing is written.
    let big = "x".repeat(64 * 1024 + 1);
    let cases: Vec<(Method, String, Option<Value>, u16, &str)> = vec![
        (
            Method::POST,
            msgs_url.clone(),
            Some(json!({"client_msg_id": "b1", "sender": "u3", "body": "hi"})),
            403,
            "forbidden",
        ),
        // A body must be an object: serde would fill the fields from an array by position.
        (
            Method::POST,
            msgs_url.clone(),
            Some(json!(["arr-1", "u1", "text", null])),
            422,
            "unprocessable_entity",
        ),
        (
            Method::POST,
            server.url("/v1/conversations"),
            Some(json!([["u1", "u9"], 5])),
            422,
            "unprocessable_entity",
        ),
        (
            Method::PUT,
            server.url(&format!("/v1/conversations/{cid}/read")),
            Some(json!(["u2", 1])),
            422,
            "unprocessable_entity",
        ),
        (
            Method::POST,
            msgs_url.clone(),
            Some(json!({"client_msg_id": "b2", "sender": "u1"})),
            422,
            "unprocessable_entity",
        ),
        (
            Method::POST,
            msgs_url.clone(),
            Some(json!({"client_msg_id": "", "sender": "u1", "body": "hi"})),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            msgs_url.clone(),
            Some(json!({"client_msg_id": "b3", "sender": "u1", "body": ""})),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            msgs_url.clone(),
            Some(json!({"client_msg_id": "b4", "sender": "u1", "body": big})),
            413,
            "payload_too_large",
        ),
        (
            Method::POST,
            msgs_url.clone(),
            Some(json!({"client_msg_id": "b5", "sender": "u1", "body": "hi", "class": "forever"})),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            msgs_url.clone(),
            Some(json!({"client_msg_id": "b6", "sender": "u1", "body": "hi", "extra": 1})),
            422,
            "unprocessable_entity",
        ),
        (
            Method::POST,
            server.url("/v1/conversations/nope/messages"),
            Some(json!({"client_msg_id": "b7", "sender": "u1", "body": "hi"})),
            404,
            "not_found",
        ),
        (
            Method::POST,
            server.url("/v1/conversations"),
            Some(json!({"members": ["solo"]})),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            server.url("/v1/conversations"),
            Some(json!({"members": ["a", "a"]})),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            server.url("/v1/conversations"),
            Some(json!({"members": ["a", ""]})),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            server.url("/v1/conversations"),
            Some(json!({"members": "a,b"})),
            422,
            "unprocessable_entity",
        ),
        // Ids a request creates: no control character, no whitespace at either end.
        (
            Method::POST,
            server.url("/v1/conversations"),
            Some(json!({"members": ["a", "b\u{7}c"]})),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            server.url("/v1/conversations"),
            Some(json!({"members": ["a", " b"]})),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            server.url("/v1/conversations"),
            Some(json!({"members": ["a\u{a0}", "b"]})),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            msgs_url.clone(),
            Some(json!({"client_msg_id": "b8\n", "sender": "u1", "body": "hi"})),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            msgs_url.clone(),
            Some(json!({"client_msg_id": "b\u{0}", "sender": "u1", "body": "hi"})),
            400,
            "bad_request",
        ),
        (
            Method::GET,
            format!("{msgs_url}?user=u1&limit=0"),
            None,
            400,
            "bad_request",
        ),
        (
            Method::GET,
            format!("{msgs_url}?user=u1&limit=201"),
            None,
            400,
            "bad_request",
        ),
        (
            Method::GET,
            format!("{msgs_url}?user=u1&limit=ten"),
            None,
            400,
            "bad_request",
        ),
        (
            Method::GET,
            format!("{msgs_url}?user=u1&before=5&after=1"),
            None,
            400,
            "bad_request",
        ),
        // Every read names its reader, a member: the tenant key alone reads nothing.
        (
            Method::GET,
            format!("{msgs_url}?limit=5"),
            None,
            400,
            "bad_request",
        ),
        (
            Method::GET,
            format!("{msgs_url}?user=u3"),
            None,
            403,
            "forbidden",
        ),
        (
            Method::GET,
            format!("{msgs_url}?user=%20u1"),
            None,
            400,
            "bad_request",
        ),
        (
            Method::GET,
            server.url("/v1/conversations/nope/messages?user=u1"),
            None,
            404,
            "not_found",
        ),
        (
            Method::PUT,
            server.url(&format!("/v1/conversations/{cid}/read")),
            Some(json!({"user": "u2", "seq": 99})),
            400,
            "bad_request",
        ),
        (
            Method::PUT,
            server.url(&format!("/v1/conversations/{cid}/read")),
            Some(json!({"user": "u3", "seq": 1})),
            403,
            "forbidden",
        ),
        // Ids beyond i64 are refused: a listing id stored wrapped to a negative number would
        // fail its contact event; seqs are i64 in every store.
        (
            Method::POST,
            server.url("/v1/conversations"),
            Some(json!({"members": ["a", "b"], "listing_id": 9_223_372_036_854_775_808_u64})),
            400,
            "bad_request",
        ),
        (
            Method::GET,
            server.url(&format!(
                "/v1/conversations/{cid}/messages?user=u1&before=9223372036854775808"
            )),
            None,
            400,
            "bad_request",
        ),
        (
            Method::GET,
            server.url(&format!(
                "/v1/conversations/{cid}/messages?user=u1&after=18446744073709551615"
            )),
            None,
            400,
            "bad_request",
        ),
        (
            Method::GET,
            server.url("/v1/nothing-here"),
            None,
            404,
            "not_found",
        ),
    ];
    for (method, url, body, status, code) in cases {
        let (st, v) = call(&c, method.clone(), &url, body.clone()).await;
        assert_eq!(st, status, "{method} {url} {body:?} → {v}");
        assert_eq!(error_code(&v), code, "{method} {url} {body:?} → {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    // A history read without its reader says which parameter is missing; one by a non-member
    // gets no message.
    let (_, v) = call(&c, Method::GET, &format!("{msgs_url}?limit=5"), None).await;
    assert_eq!(
        v["error"]["message"],
        "user is required: the reader of the history, a member of the conversation"
    );
    let (_, v) = call(&c, Method::GET, &format!("{msgs_url}?user=u3"), None).await;
    assert_eq!(v.as_object().map(|o| o.len()), Some(1), "{v}");
    // Malformed JSON and a wrong content type.
    let resp = c
        .post(&msgs_url)
        .bearer_auth(KEY)
        .header("content-type", "application/json")
        .body("{\"client_msg_id\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    assert_eq!(
        error_code(&resp.json::<Value>().await.unwrap()),
        "bad_request"
    );
    let resp = c
        .post(&msgs_url)
        .bearer_auth(KEY)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 415);
    assert_eq!(
        error_code(&resp.json::<Value>().await.unwrap()),
        "unsupported_media_type"
    );
    // Chat bodies are read as sent: a compressed one is refused, not parsed as JSON, whichever
    // line of the header says so.
    for lines in [&["gzip"][..], &["identity, br"], &["identity", "gzip"]] {
        let mut req = c
            .post(&msgs_url)
            .bearer_auth(KEY)
            .header("content-type", "application/json");
        for line in lines {
            req = req.header("content-encoding", *line);
        }
        let body = r#"{"client_msg_id": "gz", "sender": "u1", "body": "labelled gzip"}"#;
        let resp = req.body(body).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 415, "{lines:?}");
        assert_eq!(
            error_code(&resp.json::<Value>().await.unwrap()),
            "unsupported_media_type"
        );
    }
    // An error quotes what was wrong, at most 1 KiB of it: a 400,000-byte field name.
    let field = "f".repeat(400_000);
    let body = json!({"client_msg_id": "long", "sender": "u1", "body": "hi", field: 1});
    let (st, v) = call(&c, Method::POST, &msgs_url, Some(body)).await;
    let message = v["error"]["message"].as_str().unwrap();
    assert_eq!((st, error_code(&v)), (422, "unprocessable_entity"));
    assert!(
        message.len() <= 1024 + '…'.len_utf8() && message.ends_with('…'),
        "{} bytes",
        message.len()
    );
    // No key, wrong key.
    let resp = c.get(&msgs_url).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    assert_eq!(
        error_code(&resp.json::<Value>().await.unwrap()),
        "unauthorized"
    );
    let resp = c.get(&msgs_url).bearer_auth("wrong").send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    let not_ascii = reqwest::header::HeaderValue::from_bytes(b"Bearer dev-key\xff").unwrap();
    let resp = c
        .get(&msgs_url)
        .header("authorization", not_ascii)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    let v = resp.json::<Value>().await.unwrap();
    assert_eq!(
        v["error"]["message"], "the Authorization header is not visible ASCII",
        "not told the header is missing: it is there"
    );
    // An unknown conversation's id is repeated in the error, at most its first 128 bytes.
    let long_cid = "é".repeat(1_000);
    let url = server.url(&format!("/v1/conversations/{long_cid}/messages?user=u1"));
    let (st, v) = call(&c, Method::GET, &url, None).await;
    let message = v["error"]["message"].as_str().unwrap();
    assert_eq!(st, 404, "{v}");
    assert_eq!(
        message,
        format!("unknown conversation {}…", "é".repeat(64)),
        "cut at a char boundary"
    );

    // Nothing of the above was written: still exactly the two good messages, no new conversation.
    let (latest, msgs) = all_messages(&c, &server, &cid, "u1").await;
    assert_eq!(latest, 2);
    let bodies: Vec<&str> = msgs.iter().map(|m| m["body"].as_str().unwrap()).collect();
    assert_eq!(bodies, ["hello", "same key, other sender"]);
    for user in ["u1", "a", "solo"] {
        let (st, v) = call(
            &c,
            Method::GET,
            &server.url(&format!("/v1/users/{user}/conversations")),
            None,
        )
        .await;
        assert_eq!(st, 200);
        let expected = if user == "u1" { 1 } else { 0 };
        assert_eq!(
            v["conversations"].as_array().unwrap().len(),
            expected,
            "{user}: {v}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paging_read_pointer_and_unread() {
    let server = TestServer::start(&[]).await;
    let c = client();
    let cid = create_conversation(&c, &server, &["buyer", "seller"]).await;
    for i in 1..=120 {
        let sender = if i % 3 == 0 { "buyer" } else { "seller" };
        let (st, v) = send(
            &c,
            &server,
            &cid,
            sender,
            &format!("m{i}"),
            &format!("text {i}"),
        )
        .await;
        assert_eq!(st, 201);
        assert_eq!(v["conversation_seq"], i);
    }
    let url = |q: &str| server.url(&format!("/v1/conversations/{cid}/messages?user=buyer&{q}"));
    let (_, newest) = call(&c, Method::GET, &url("limit=10"), None).await;
    let seqs: Vec<u64> = newest["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["conversation_seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (111..=120).collect::<Vec<_>>());
    assert_eq!(newest["earliest_available_seq"], 1);
    assert_eq!(newest["latest_seq"], 120);
    let (_, before) = call(&c, Method::GET, &url("before=11&limit=5"), None).await;
    let seqs: Vec<u64> = before["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["conversation_seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [6, 7, 8, 9, 10]);
    let (_, after) = call(&c, Method::GET, &url("after=117&limit=50"), None).await;
    let seqs: Vec<u64> = after["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["conversation_seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [118, 119, 120]);

    // Unread excludes the user's own messages: buyer sent 40 (every third), seller 80.
    let unread = |user: &'static str| {
        let (c, server) = (c.clone(), &server);
        async move {
            let (st, v) = call(
                &c,
                Method::GET,
                &server.url(&format!("/v1/users/{user}/conversations")),
                None,
            )
            .await;
            assert_eq!(st, 200);
            assert_eq!(v["conversations"][0]["latest_seq"], 120);
            v["conversations"][0]["unread"].as_u64().unwrap()
        }
    };
    assert_eq!(unread("buyer").await, 80);
    assert_eq!(unread("seller").await, 40);
    let (st, _) = call(
        &c,
        Method::PUT,
        &server.url(&format!("/v1/conversations/{cid}/read")),
        Some(json!({"user": "buyer", "seq": 60})),
    )
    .await;
    assert_eq!(st, 204);
    // Seqs 61..=120 not by buyer: 60 − 20 = 40.
    assert_eq!(unread("buyer").await, 40);
    // The pointer never moves backwards.
    let (st, _) = call(
        &c,
        Method::PUT,
        &server.url(&format!("/v1/conversations/{cid}/read")),
        Some(json!({"user": "buyer", "seq": 10})),
    )
    .await;
    assert_eq!(st, 204);
    assert_eq!(unread("buyer").await, 40);
}

#[tokio::test]
async fn ops_endpoints() {
    let server = TestServer::start(&[]).await;
    let c = client();
    assert_eq!(
        c.get(server.url("/healthz"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    assert_eq!(
        c.get(server.url("/readyz"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    let cid = create_conversation(&c, &server, &["u1", "u2"]).await;
    send(&c, &server, &cid, "u1", "m", "x").await;
    let text = metrics_text(&c, &server).await;
    assert!(text.contains("tidemark_chat_sends_total 1"), "{text}");
    assert!(text.contains("tidemark_chat_archive_lag_seconds"));
}

/// The request limit follows `chat.max_body_bytes`, also above 2 MiB, and leaves room for a
/// body that JSON spells six bytes per byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_body_limit_is_the_configured_one_whatever_its_size() {
    let c = client();
    let send_len = async |server: &TestServer, cid: &str, id: &str, body: String| {
        let url = server.url(&format!("/v1/conversations/{cid}/messages"));
        let body = json!({"client_msg_id": id, "sender": "u1", "body": body});
        call(&c, Method::POST, &url, Some(body)).await
    };

    let server = TestServer::start(&[("TIDEMARK_CHAT__MAX_BODY_BYTES", "3000000")]).await;
    let cid = create_conversation(&c, &server, &["u1", "u2"]).await;
    let (st, ack) = send_len(&server, &cid, "big", "y".repeat(2_500_000)).await;
    assert_eq!(st, 201, "{ack}");
    let (st, err) = send_len(&server, &cid, "over", "y".repeat(3_000_001)).await;
    assert_eq!((st, error_code(&err)), (413, "payload_too_large"));
    let (_, messages) = all_messages(&c, &server, &cid, "u1").await;
    let bodies: Vec<usize> = messages
        .iter()
        .map(|m| m["body"].as_str().unwrap().len())
        .collect();
    assert_eq!(bodies, vec![2_500_000], "the one accepted message, whole");

    // The default 64 KiB: a body of control characters is 384 KiB of JSON, and fits.
    let server = TestServer::start(&[]).await;
    let cid = create_conversation(&c, &server, &["u1", "u2"]).await;
    let (st, ack) = send_len(&server, &cid, "ctl", "\u{1}".repeat(64 * 1024)).await;
    assert_eq!(st, 201, "{ack}");
    let (st, err) = send_len(&server, &cid, "fat", "\u{1}".repeat(64 * 1024 + 1)).await;
    assert_eq!((st, error_code(&err)), (413, "payload_too_large"));
}

/// A history page is cut at `chat.page_bytes_max` bytes of message JSON, keeping the messages
/// nearest its anchor, and says so; a client that pages on from the first (or last) message
/// it got reads every message exactly once (uncut, 200 bodies of 64 KiB of control characters
/// would make one 79 MB answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_page_is_cut_at_its_byte_budget_and_paging_goes_on_from_the_cut() {
    let server = TestServer::start(&[("TIDEMARK_CHAT__PAGE_BYTES_MAX", "20000")]).await;
    let c = client();
    let cid = create_conversation(&c, &server, &["u1", "u2"]).await;
    // 30 messages of 3,000 control characters: 18,000 bytes of JSON each, one per page; and
    // 30 short ones, which share pages.
    for i in 1..=60 {
        let body = if i % 2 == 0 {
            "\u{7}".repeat(3000)
        } else {
            format!("short {i}")
        };
        let (st, v) = send(&c, &server, &cid, "u1", &format!("m{i}"), &body).await;
        assert_eq!(st, 201, "{v}");
    }
    let page = async |query: String| {
        let url = server.url(&format!("/v1/conversations/{cid}/messages?user=u1&{query}"));
        let (st, v) = call(&c, Method::GET, &url, None).await;
        assert_eq!(st, 200, "{v}");
        let seqs: Vec<u64> = v["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["conversation_seq"].as_u64().unwrap())
            .collect();
        (
            seqs,
            v["truncated"].as_bool().unwrap(),
            v["latest_seq"].clone(),
        )
    };

    let (newest, truncated, latest) = page("limit=10".into()).await;
    assert_eq!((newest, truncated, latest), (vec![59, 60], true, json!(60)));
    let (oldest, truncated, _) = page("after=0&limit=10".into()).await;
    assert_eq!((oldest, truncated), (vec![1, 2, 3], true));
    let (small, truncated, _) = page("before=4&limit=3".into()).await;
    assert_eq!((small, truncated), (vec![1, 2, 3], false), "within budget");

    // Back from the newest, each page from its first message; forward from 0, from its last.
    let mut back = Vec::new();
    let mut query = "limit=200".to_owned();
    loop {
        let (mut seqs, _, _) = page(query).await;
        let Some(&first) = seqs.first() else { break };
        seqs.extend(back);
        back = seqs;
        query = format!("before={first}&limit=200");
    }
    let mut forward = Vec::new();
    let mut after = 0;
    loop {
        let (seqs, _, _) = page(format!("after={after}&limit=200")).await;
        let Some(&last) = seqs.last() else { break };
        forward.extend(seqs);
        after = last;
    }
    let all: Vec<u64> = (1..=60).collect();
    assert_eq!((back, forward), (all.clone(), all));
}

/// A request whose `Content-Length` is over the limit is refused at once with a JSON 413,
/// before its body is read (else a declared 100 MB and a silent client would hold the request
/// until the 60 s body timeout). The chat, links and analytics routes alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_content_length_is_refused_before_the_body_is_read() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let server = TestServer::start(&[]).await;
    let addr = server.base.trim_start_matches("http://").to_owned();
    for path in [
        "/v1/conversations",
        "/v1/mailings",
        "/v1/listings",
        "/v1/conversations/x/messages",
    ] {
        let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {KEY}\r\n\
             Content-Type: application/json\r\nContent-Length: 100000000\r\n\r\n{{"
        );
        conn.write_all(head.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        // The server answers without waiting for the body, then closes the connection.
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            conn.read_to_end(&mut answer),
        )
        .await;
        assert!(read.is_ok(), "{path}: no answer within 10 s");
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 413"), "{path}: {answer}");
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
        let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
        assert_eq!(error_code(&v), "payload_too_large", "{path}: {answer}");
    }
}

/// A user's conversations come in pages in conversation id order: `limit` (default 200, at
/// most 1,000) and `after`, the page's `next_after`, so that a user in thousands of
/// conversations does not get them all, each with its unread count, in one answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_conversations_come_in_pages() {
    let server = TestServer::start(&[]).await;
    let c = client();
    let mut cids = Vec::new();
    for i in 0..5 {
        let cid = create_conversation(&c, &server, &["pat", &format!("other{i}")]).await;
        send(&c, &server, &cid, &format!("other{i}"), "m", "hi").await;
        cids.push(cid);
    }
    cids.sort();
    let list = async |query: &str| {
        let url = server.url(&format!("/v1/users/pat/conversations?{query}"));
        call(&c, Method::GET, &url, None).await
    };

    let (st, all) = list("").await;
    assert_eq!(st, 200, "{all}");
    assert_eq!(all["next_after"], Value::Null);
    let ids = |v: &Value| -> Vec<String> {
        v["conversations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["conversation_id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(ids(&all), cids, "every conversation, in id order");
    assert!(
        all["conversations"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["unread"] == 1 && c["latest_seq"] == 1)
    );

    let mut paged = Vec::new();
    let mut query = "limit=2".to_owned();
    let mut pages = 0;
    loop {
        let (st, page) = list(&query).await;
        assert_eq!(st, 200, "{page}");
        pages += 1;
        paged.extend(ids(&page));
        match page["next_after"].as_str() {
            Some(next) => query = format!("limit=2&after={next}"),
            None => break,
        }
    }
    assert_eq!((paged, pages), (cids.clone(), 3));

    let (_, past) = list(&format!("after={}", cids[4])).await;
    assert_eq!((ids(&past).len(), &past["next_after"]), (0, &Value::Null));
    for bad in ["limit=0", "limit=1001", "limit=x", "cursor=1"] {
        let (st, v) = list(bad).await;
        assert_eq!((st, error_code(&v)), (400, "bad_request"), "{bad}: {v}");
    }

    // `after` is a conversation id as a page spells it: anything else is refused and says so
    // (`after=garbage` must not get 200 and an empty list). A well-formed id that names no
    // conversation is a cursor like any other.
    let refused = |shown: &str| {
        format!(
            "after {shown} is not a conversation id: give a page's next_after, a UUID in \
             lowercase hex with hyphens (8-4-4-4-12)"
        )
    };
    let upper = cids[0].to_uppercase();
    let simple = cids[0].replace('-', "");
    for (query, shown) in [
        ("after=garbage".to_owned(), r#""garbage""#.to_owned()),
        ("after=".to_owned(), r#""""#.to_owned()),
        (format!("after={upper}"), format!("{upper:?}")),
        (format!("after={simple}&limit=2"), format!("{simple:?}")),
    ] {
        let (st, v) = list(&query).await;
        assert_eq!((st, error_code(&v)), (400, "bad_request"), "{query}: {v}");
        assert_eq!(v["error"]["message"], refused(&shown), "{query}");
    }
    let (st, from_nil) = list("after=00000000-0000-0000-0000-000000000000").await;
    assert_eq!((st, ids(&from_nil)), (200, cids.clone()), "{from_nil}");
    let (st, from_max) = list("after=ffffffff-ffff-ffff-ffff-ffffffffffff").await;
    assert_eq!((st, ids(&from_max).len()), (200, 0), "{from_max}");
}

/// An id that is empty, blank or has whitespace (or an invisible character) at either end is
/// refused with a 400 that names the field and says which, whether the request creates it (a
/// member, a `client_msg_id`) or only looks it up (a sender, a reader, a user): ids are
/// compared byte for byte, so `" u1"` can never match the member `"u1"` (accepted, `" buyer1"`
/// would get 403 "not a member", and `/v1/users/%20u1` an empty list; `"  "` is blank, not
/// empty).
/// Nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blank_ids_and_ids_with_whitespace_at_either_end_are_refused_naming_the_field() {
    let server = TestServer::start(&[]).await;
    let c = client();
    let cid = create_conversation(&c, &server, &["u1", "u2"]).await;
    let msgs_url = server.url(&format!("/v1/conversations/{cid}/messages"));
    let read_url = server.url(&format!("/v1/conversations/{cid}/read"));
    let (st, _) = send(&c, &server, &cid, "u1", "m1", "hello").await;
    assert_eq!(st, 201);
    let edge = |what: &str, id: &str| {
        format!(
            "{what} {id:?} starts or ends with whitespace or an invisible character (ids are \
             compared byte for byte)"
        )
    };
    let blank = |what: &str, id: &str| {
        format!("{what} must not be blank: {id:?} is only whitespace or invisible characters")
    };
    let cases: Vec<(Method, String, Option<Value>, String)> = vec![
        (
            Method::POST,
            msgs_url.clone(),
            Some(json!({"client_msg_id": "w1", "sender": " u1", "body": "hi"})),
            edge("sender", " u1"),
        ),
        (
            Method::POST,
            msgs_url.clone(),
            Some(json!({"client_msg_id": "w2", "sender": "u1\t", "body": "hi"})),
            edge("sender", "u1\t"),
        ),
        (
            Method::POST,
            msgs_url.clone(),
            Some(json!({"client_msg_id": "w3", "sender": "   ", "body": "hi"})),
            blank("sender", "   "),
        ),
        (
            Method::POST,
            msgs_url.clone(),
            Some(json!({"client_msg_id": " ", "sender": "u1", "body": "hi"})),
            blank("client_msg_id", " "),
        ),
        (
            Method::POST,
            msgs_url.clone(),
            Some(json!({"client_msg_id": "", "sender": "u1", "body": "hi"})),
            "client_msg_id must not be empty".to_owned(),
        ),
        (
            Method::PUT,
            read_url.clone(),
            Some(json!({"user": "u2 ", "seq": 1})),
            edge("user", "u2 "),
        ),
        (
            Method::PUT,
            read_url.clone(),
            Some(json!({"user": "\u{200b}", "seq": 1})),
            blank("user", "\u{200b}"),
        ),
        (
            Method::GET,
            server.url("/v1/users/%20u1/conversations"),
            None,
            edge("user", " u1"),
        ),
        (
            Method::GET,
            server.url("/v1/users/%20%20/conversations"),
            None,
            blank("user", "  "),
        ),
        (
            Method::POST,
            server.url("/v1/conversations"),
            Some(json!({"members": ["a", "\t"]})),
            blank("member", "\t"),
        ),
        (
            Method::POST,
            server.url("/v1/conversations"),
            Some(json!({"members": [" buyer1", "seller7"]})),
            edge("member", " buyer1"),
        ),
        (
            Method::POST,
            server.url("/v1/conversations"),
            Some(json!({"members": ["a", "b"], "client_conversation_id": " k"})),
            edge("client_conversation_id", " k"),
        ),
    ];
    for (method, url, body, message) in cases {
        let (st, v) = call(&c, method.clone(), &url, body.clone()).await;
        assert_eq!(
            (st, error_code(&v)),
            (400, "bad_request"),
            "{method} {url} {body:?} → {v}"
        );
        assert_eq!(v["error"]["message"], message, "{method} {url} {body:?}");
    }

    // Nothing was written: the one message, u2's read pointer where it was, no conversation
    // of the refused members.
    let (latest, msgs) = all_messages(&c, &server, &cid, "u1").await;
    assert_eq!((latest, msgs.len()), (1, 1));
    let (st, v) = call(
        &c,
        Method::GET,
        &server.url("/v1/users/u2/conversations"),
        None,
    )
    .await;
    assert_eq!(
        (st, &v["conversations"][0]["unread"]),
        (200, &json!(1)),
        "{v}"
    );
    for user in ["a", "seller7"] {
        let url = server.url(&format!("/v1/users/{user}/conversations"));
        let (st, v) = call(&c, Method::GET, &url, None).await;
        assert_eq!((st, &v["conversations"]), (200, &json!([])), "{user}: {v}");
    }
}

/// A conversation created with a `client_conversation_id` is created once: a retry (also
/// concurrent, also after a restart) gets the same id back with 200, and the same key with
/// other members or another listing is refused with 409, writing nothing (before, a client
/// that retried a timed-out create made two conversations).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_created_with_a_key_is_created_once() {
    let mut server = TestServer::start(&[]).await;
    let c = client();
    let create = async |server: &TestServer, body: Value| {
        call(
            &c,
            Method::POST,
            &server.url("/v1/conversations"),
            Some(body),
        )
        .await
    };
    let listed = async |server: &TestServer, user: &str| {
        let url = server.url(&format!("/v1/users/{user}/conversations"));
        let (st, v) = call(&c, Method::GET, &url, None).await;
        assert_eq!(st, 200, "{v}");
        v["conversations"].as_array().unwrap().len()
    };
    let ask =
        json!({"members": ["buyer", "seller"], "listing_id": 5, "client_conversation_id": "k-1"});

    let (st, first) = create(&server, ask.clone()).await;
    assert_eq!(st, 201, "{first}");
    let cid = first["conversation_id"].as_str().unwrap().to_owned();
    let (st, again) = create(&server, ask.clone()).await;
    assert_eq!((st, &again), (200, &first));
    let reordered =
        json!({"members": ["seller", "buyer"], "listing_id": 5, "client_conversation_id": "k-1"});
    assert_eq!(create(&server, reordered).await, (200, first.clone()));

    // A retry after the conversation has messages leaves them and its seq as they are.
    send(&c, &server, &cid, "buyer", "m1", "is it still for sale?").await;
    assert_eq!(create(&server, ask.clone()).await, (200, first.clone()));
    let (st, page) = call(
        &c,
        Method::GET,
        &server.url(&format!("/v1/conversations/{cid}/messages?user=buyer")),
        None,
    )
    .await;
    assert_eq!(
        (
            st,
            page["latest_seq"].as_u64(),
            page["messages"].as_array().map(Vec::len)
        ),
        (200, Some(1), Some(1))
    );

    // The key with other members or another listing: 409, nothing written.
    for (other, what) in [
        (
            json!({"members": ["buyer", "mallory"], "listing_id": 5, "client_conversation_id": "k-1"}),
            "members",
        ),
        (
            json!({"members": ["buyer", "seller"], "listing_id": 6, "client_conversation_id": "k-1"}),
            "listing",
        ),
        (
            json!({"members": ["buyer", "seller"], "client_conversation_id": "k-1"}),
            "no listing",
        ),
    ] {
        let (st, v) = create(&server, other).await;
        assert_eq!(
            (st, error_code(&v)),
            (409, "idempotency_key_reused"),
            "{what}: {v}"
        );
    }
    assert_eq!(listed(&server, "mallory").await, 0);
    assert_eq!(listed(&server, "buyer").await, 1);

    // Bad keys: 400, nothing created.
    let long = "k".repeat(129);
    for bad in [
        "",
        " k",
        "k ",
        "k\n",
        "k\u{7}",
        long.as_str(),
        "\u{200b}",
        "k\u{200b}",
        "\u{feff}k",
    ] {
        let body = json!({"members": ["eve", "seller"], "client_conversation_id": bad});
        let (st, v) = create(&server, body).await;
        assert_eq!((st, error_code(&v)), (400, "bad_request"), "{bad:?}: {v}");
    }
    assert_eq!(listed(&server, "eve").await, 0);

    // Without a key every request creates another conversation.
    let plain = json!({"members": ["buyer", "seller"], "listing_id": 5});
    let (st1, a) = create(&server, plain.clone()).await;
    let (st2, b) = create(&server, plain).await;
    assert_eq!((st1, st2), (201, 201));
    assert_ne!(a["conversation_id"], b["conversation_id"]);
    assert_eq!(listed(&server, "buyer").await, 3);

    // Eight concurrent requests with a new key: one creates, the others find it.
    let racing = json!({"members": ["r1", "r2"], "client_conversation_id": "k-2"});
    let answers = futures::future::join_all((0..8).map(|_| create(&server, racing.clone()))).await;
    let mut statuses: Vec<u16> = answers.iter().map(|(st, _)| *st).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 200, 200, 200, 200, 200, 201]);
    assert!(
        answers
            .iter()
            .all(|(_, v)| v["conversation_id"] == answers[0].1["conversation_id"])
    );
    assert_eq!(listed(&server, "r1").await, 1);

    // The key holds after a restart.
    assert!(server.terminate().success());
    server.spawn().await;
    assert_eq!(create(&server, ask).await, (200, first));
}
