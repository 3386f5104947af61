//! The live stream's contract, end to end: who may open it, its bounds, its errors, resuming
//! by `Last-Event-ID`, a lagging client dropped without holding up sends, and a graceful stop
//! that ends open streams.

mod common;

use std::time::{Duration, Instant};

use common::{KEY, TestServer, client, create_conversation, metric, send};
use serde_json::Value;
use tidemark_core::user_token::testing::{HS256_SECRET, claims, hs256_key_spec, sign_hs256};

/// Reads a stream until `until` events named `name` arrived (or 10 s passed); the events as
/// `(name, id, data)`.
async fn events(resp: reqwest::Response, name: &str, until: usize) -> Vec<(String, String, Value)> {
    let mut resp = resp;
    let mut out = Vec::new();
    let mut buf = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while out.iter().filter(|(n, _, _)| n == name).count() < until {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(Ok(Some(chunk))) = tokio::time::timeout(left, resp.chunk()).await else {
            break;
        };
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let field = |k: &str| {
                block
                    .lines()
                    .find_map(|l| l.strip_prefix(k))
                    .unwrap_or_default()
                    .to_owned()
            };
            let (n, id, data) = (field("event: "), field("id: "), field("data: "));
            if !n.is_empty() {
                out.push((n, id, serde_json::from_str(&data).unwrap_or(Value::Null)));
            }
        }
    }
    out
}

fn seqs(evs: &[(String, String, Value)]) -> Vec<u64> {
    evs.iter()
        .filter(|(n, _, _)| n == "message")
        .map(|(_, _, d)| d["conversation_seq"].as_u64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_bounds_tokens_and_errors() {
    let tenants = format!(
        r#"[{{name="demo",key="{KEY}",user_token_key="{}"}}]"#,
        hs256_key_spec()
    );
    let s = TestServer::start(&[
        ("TIDEMARK_TENANTS", &tenants),
        ("TIDEMARK_CHAT__STREAM_MAX_PER_USER", "2"),
    ])
    .await;
    let c = client();
    let ab = create_conversation(&c, &s, &["alice", "bob"]).await;
    let other = create_conversation(&c, &s, &["bob", "carol"]).await;
    for i in 1..=3 {
        send(&c, &s, &ab, "alice", &format!("m{i}"), "hi").await;
    }
    let url = s.url("/v1/users/bob/stream");

    // From the start (v1): the three, then ready.
    let resp = c
        .get(&url)
        .query(&[("since", "v1")])
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let evs = events(resp, "ready", 1).await;
    assert_eq!(seqs(&evs), [1, 2, 3]);
    let position = evs[1].1.clone();
    // Mid-replay from `v1`: the conversations delivered from; once replayed, a watermark
    // (Unix ms) and the conversation, delivered a moment ago.
    assert_eq!(position, format!("v1;{ab}:2"), "{evs:?}");
    let ready = &evs.last().unwrap().1;
    let (watermark, entry) = ready
        .strip_prefix("v2;")
        .and_then(|p| p.split_once(';'))
        .expect("v2;<watermark>;…");
    assert!(watermark.parse::<i64>().is_ok(), "{ready}");
    assert_eq!(entry, format!("{ab}:3"), "{evs:?}");
    // Resumed after seq 2 by Last-Event-ID (which wins over since): seq 3 again, then ready.
    let resp = c
        .get(&url)
        .query(&[("since", "v1")])
        .header("last-event-id", &position)
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    let evs = events(resp, "ready", 1).await;
    assert_eq!(seqs(&evs), [3]);
    // Without a position: live only.
    let resp = c.get(&url).bearer_auth(KEY).send().await.unwrap();
    let live = tokio::spawn(events(resp, "message", 2));
    tokio::time::sleep(Duration::from_millis(300)).await;
    send(&c, &s, &other, "carol", "c1", "hello").await;
    send(&c, &s, &ab, "alice", "m4", "hi").await;
    let evs = live.await.unwrap();
    let got: Vec<(String, u64)> = evs
        .iter()
        .filter(|(n, _, _)| n == "message")
        .map(|(_, _, d)| {
            (
                d["conversation_id"].as_str().unwrap().to_owned(),
                d["conversation_seq"].as_u64().unwrap(),
            )
        })
        .collect();
    // In seq order per conversation; two conversations woken together come in either order.
    let mut got = got;
    got.sort();
    let mut want = vec![(other.clone(), 1), (ab.clone(), 4)];
    want.sort();
    assert_eq!(got, want);

    // Bounds: two streams of bob's open, a third is refused with 429.
    let one = c.get(&url).bearer_auth(KEY).send().await.unwrap();
    let two = c.get(&url).bearer_auth(KEY).send().await.unwrap();
    let third = c.get(&url).bearer_auth(KEY).send().await.unwrap();
    assert_eq!(third.status(), 429);
    let v: Value = third.json().await.unwrap();
    assert_eq!(v["error"]["code"], "too_many_streams", "{v}");
    drop((one, two));

    // Bad positions are 400 with a JSON body.
    for bad in [
        "x",
        "v1;nope:1",
        "v2",
        &format!("v2;-5;{ab}:1"),
        "v2;99999999999999",
    ] {
        let resp = c
            .get(&url)
            .query(&[("since", bad)])
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400, "{bad}");
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["error"]["code"], "bad_request", "{bad}: {v}");
    }

    // A user token streams its own user only, and only its conversations.
    let mut limited = claims("demo", "bob", 600);
    limited["conversations"] = serde_json::json!([other]);
    let limited = sign_hs256(&limited, HS256_SECRET);
    let resp = c
        .get(s.url("/v1/users/alice/stream"))
        .bearer_auth(&limited)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let resp = c
        .get(&url)
        .query(&[("since", "v1")])
        .bearer_auth(&limited)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let evs = events(resp, "ready", 1).await;
    let convs: Vec<&str> = evs
        .iter()
        .filter(|(n, _, _)| n == "message")
        .map(|(_, _, d)| d["conversation_id"].as_str().unwrap())
        .collect();
    assert_eq!(convs, [other.as_str()]);
    assert!(metric(&c, &s, "tidemark_chat_stream_replays_total").await >= 3);
    s.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_takes_nothing_is_dropped_and_sends_go_on() {
    let mut s = TestServer::start(&[
        ("TIDEMARK_CHAT__STREAM_LAG_TIMEOUT", "200ms"),
        ("TIDEMARK_SEND_TIMEOUT", "1s"),
    ])
    .await;
    let c = client();
    let ab = create_conversation(&c, &s, &["alice", "bob"]).await;
    let body = "x".repeat(60_000);
    for i in 0..300 {
        let (st, v) = send(&c, &s, &ab, "alice", &format!("m{i}"), &body).await;
        assert_eq!(st, 201, "{v}");
    }
    // Asks for all 300 (18 MB) and reads none of it.
    let stalled = c
        .get(s.url("/v1/users/bob/stream"))
        .query(&[("since", "v1")])
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(stalled.status(), 200);
    let deadline = Instant::now() + Duration::from_secs(15);
    while metric(&c, &s, "tidemark_chat_stream_dropped_total").await == 0 {
        assert!(
            Instant::now() < deadline,
            "the stalled client was never dropped"
        );
        // Sends are not held up meanwhile.
        let started = Instant::now();
        let (st, _) = send(&c, &s, &ab, "alice", &format!("late-{:?}", started), "hi").await;
        assert_eq!(st, 201);
        assert!(started.elapsed() < Duration::from_secs(2));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(metric(&c, &s, "tidemark_chat_stream_clients").await, 0);

    // A graceful stop neither waits on an open stream nor on the stalled connection, which was
    // dropped rather than left to flush what its client never reads.
    let open = c
        .get(s.url("/v1/users/bob/stream"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(open.status(), 200);
    let started = Instant::now();
    let status = s.terminate();
    assert!(status.success(), "{status:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the stop waited {:?} on the streams",
        started.elapsed()
    );
    drop(stalled);
}

/// Streams take at most three quarters of `max_connections`: the rest still answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_leave_connections_for_other_requests() {
    let s = TestServer::start(&[("TIDEMARK_MAX_CONNECTIONS", "8")]).await;
    let c = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let (mut open, mut held) = (Vec::new(), Vec::new());
    for i in 0..6 {
        let resp = c
            .get(s.url(&format!("/v1/users/u{i}/stream")))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap();
        open.push(resp.status().as_u16());
        held.push(resp);
    }
    assert_eq!(open, [200, 200, 200, 200, 200, 200], "6 of 8 is the bound");
    let seventh = c
        .get(s.url("/v1/users/u7/stream"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(seventh.status(), 503);
    drop(seventh);
    let healthz = tokio::time::timeout(Duration::from_secs(5), c.get(s.url("/healthz")).send())
        .await
        .expect("answered while the streams are open")
        .unwrap();
    assert_eq!(healthz.status(), 200);
    drop(held);
}

/// Two nodes sharing Redis, a Kafka-protocol outbox and MariaDB: a stream on one node gets the
/// SENDs made on the other, woken by the outbox, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_on_one_node_gets_sends_made_on_another() {
    use tidemark_chat::testing::{KafkaBroker, RedisServer};
    use tidemark_core::mysql::{drop_database, scratch_database, test_server_url};
    let redis = RedisServer::start().unwrap();
    let broker = KafkaBroker::start().unwrap();
    let mysql = scratch_database(&test_server_url(), "tm_e2e_stream_nodes")
        .await
        .unwrap();
    let outbox = broker.url("tidemark.chat.outbox");
    let env = [
        ("TIDEMARK_CHAT__HOT", redis.url()),
        ("TIDEMARK_CHAT__ARCHIVE", mysql.clone()),
        ("TIDEMARK_CHAT__OUTBOX", outbox),
        ("TIDEMARK_CHAT__OUTBOX_PARTITIONS", "2".to_owned()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let a = TestServer::start(&env).await;
    let b = TestServer::start(&env).await;
    let c = client();
    let ab = create_conversation(&c, &a, &["alice", "bob"]).await;
    let cb = create_conversation(&c, &a, &["carol", "bob"]).await;
    let resp = c
        .get(b.url("/v1/users/bob/stream"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let stream = tokio::spawn(events(resp, "message", 12));
    // The follower starts at the log's end: give it a look before sending.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for i in 1..=5 {
        send(&c, &a, &ab, "alice", &format!("a{i}"), "from node a").await;
        send(&c, &a, &cb, "carol", &format!("c{i}"), "from node a").await;
    }
    send(&c, &b, &ab, "alice", "b1", "from node b").await;
    send(&c, &a, &ab, "alice", "a6", "from node a").await;
    let evs = stream.await.unwrap();
    let mut got: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    for (n, _, d) in &evs {
        if n == "message" {
            got.entry(d["conversation_id"].as_str().unwrap().to_owned())
                .or_default()
                .push(d["conversation_seq"].as_u64().unwrap());
        }
    }
    assert_eq!(
        got.get(&ab).cloned().unwrap_or_default(),
        [1, 2, 3, 4, 5, 6, 7]
    );
    assert_eq!(got.get(&cb).cloned().unwrap_or_default(), [1, 2, 3, 4, 5]);
    drop((a, b));
    drop_database(&mysql).await.unwrap();
}
