//! Crash test: a real `tidemark serve` is `kill -9`ed in the middle of concurrent sends and
//! restarted on the same data dir: every acknowledged message is readable with its seq and id,
//! seqs stay dense, and retries of acknowledged sends return the original ACK.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use tokio::sync::Mutex;

#[derive(Debug, Clone)]
struct Acked {
    cid: String,
    sender: String,
    client_msg_id: String,
    seq: u64,
    message_id: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_messages_survive_kill_9() {
    let mut server = TestServer::start(&[]).await;
    let c = client();
    let mut cids = Vec::new();
    for i in 0..4 {
        cids.push(create_conversation(&c, &server, &[&format!("a{i}"), &format!("b{i}")]).await);
    }
    let acked: Arc<Mutex<Vec<Acked>>> = Arc::default();
    let base = server.base.clone();
    let mut senders = Vec::new();
    for w in 0..8 {
        let (c, cids, acked, base) = (c.clone(), cids.clone(), Arc::clone(&acked), base.clone());
        senders.push(tokio::spawn(async move {
            for n in 0.. {
                let i = (w + n) % cids.len();
                let sender = if n % 2 == 0 { format!("a{i}") } else { format!("b{i}") };
                let id = format!("w{w}-n{n}");
                let resp = c
                    .post(format!("{base}/v1/conversations/{}/messages", cids[i]))
                    .bearer_auth(KEY)
                    .json(&serde_json::json!({"client_msg_id": id, "sender": sender, "body": format!("body {id}")}))
                    .send()
                    .await;
                let Ok(resp) = resp else { return };
                if resp.status().as_u16() != 201 {
                    return;
                }
                let Ok(v) = resp.json::<serde_json::Value>().await else { return };
                acked.lock().await.push(Acked {
                    cid: cids[i].clone(),
                    sender,
                    client_msg_id: id,
                    seq: v["conversation_seq"].as_u64().unwrap(),
                    message_id: v["message_id"].as_str().unwrap().to_owned(),
                });
            }
        }));
    }
    // Let load build up (at least 150 acknowledged sends, however slow the machine is), then
    // pull the plug mid-flight.
    let started = std::time::Instant::now();
    while acked.lock().await.len() < 150 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "only {} sends acknowledged in 60 s",
            acked.lock().await.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.kill9();
    for s in senders {
        s.await.unwrap();
    }
    let acked = acked.lock().await.clone();
    assert!(
        acked.len() > 100,
        "only {} sends were acknowledged before the kill",
        acked.len()
    );

    server.spawn().await;
    let mut by_conv: BTreeMap<String, BTreeMap<u64, String>> = BTreeMap::new();
    for a in &acked {
        let prev = by_conv
            .entry(a.cid.clone())
            .or_default()
            .insert(a.seq, a.message_id.clone());
        assert!(
            prev.is_none(),
            "seq {} acknowledged twice in {}",
            a.seq,
            a.cid
        );
    }
    for cid in &cids {
        let (latest, msgs) = all_messages(&c, &server, cid).await;
        let seqs: Vec<u64> = msgs
            .iter()
            .map(|m| m["conversation_seq"].as_u64().unwrap())
            .collect();
        assert_eq!(
            seqs,
            (1..=latest).collect::<Vec<_>>(),
            "seqs of {cid} are dense"
        );
        let stored: BTreeMap<u64, String> = msgs
            .iter()
            .map(|m| {
                (
                    m["conversation_seq"].as_u64().unwrap(),
                    m["message_id"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        for (seq, id) in by_conv.get(cid).cloned().unwrap_or_default() {
            assert_eq!(
                stored.get(&seq),
                Some(&id),
                "acknowledged seq {seq} of {cid} is readable"
            );
        }
    }
    // A retry of an acknowledged send after the crash returns the original ACK.
    for a in acked.iter().step_by(37) {
        let (st, v) = send(&c, &server, &a.cid, &a.sender, &a.client_msg_id, "retry").await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["conversation_seq"].as_u64(), Some(a.seq));
        assert_eq!(v["message_id"].as_str(), Some(a.message_id.as_str()));
    }
    // New sends continue the dense sequence.
    let (st, v) = send(&c, &server, &cids[0], "a0", "after-restart", "x").await;
    assert_eq!(st, 201);
    let new_seq = v["conversation_seq"].as_u64().unwrap();
    let (latest, msgs) = all_messages(&c, &server, &cids[0]).await;
    assert_eq!(latest, new_seq);
    assert_eq!(msgs.len() as u64, new_seq);
}

#[tokio::test]
async fn sigterm_shuts_down_cleanly() {
    let mut server = TestServer::start(&[]).await;
    let c = client();
    let cid = create_conversation(&c, &server, &["u1", "u2"]).await;
    let (st, _) = send(&c, &server, &cid, "u1", "m1", "hello").await;
    assert_eq!(st, 201);
    let status = server.terminate();
    assert!(status.success(), "exit status {status}");
    server.spawn().await;
    let (latest, msgs) = all_messages(&c, &server, &cid).await;
    assert_eq!((latest, msgs.len()), (1, 1));
    assert_eq!(msgs[0]["body"], "hello");
}

/// A server holding one message ("hello", seq 1) in a new conversation of u1 and u2, a client
/// of it, and that conversation's id.
async fn serving_one_message() -> (TestServer, reqwest::Client, String) {
    let server = TestServer::start(&[]).await;
    let c = client();
    let cid = create_conversation(&c, &server, &["u1", "u2"]).await;
    let (st, _) = send(&c, &server, &cid, "u1", "m1", "hello").await;
    assert_eq!(st, 201);
    (server, c, cid)
}

/// A connection to `server` that sent `request` and then nothing more.
async fn stalled_client(server: &TestServer, request: &[u8]) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let addr = server.url("").trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    stream
}

/// After a stop: the hot store was closed (its WAL truncated), and a restart reads the one
/// message of [`serving_one_message`].
async fn assert_stopped_cleanly(server: &mut TestServer, c: &reqwest::Client, cid: &str) {
    let wal = server.dir.join("chat").join("hot.db-wal");
    let wal_len = std::fs::metadata(&wal).map_or(0, |m| m.len());
    assert_eq!(wal_len, 0, "the hot store was closed (its WAL truncated)");
    server.spawn().await;
    let (latest, msgs) = all_messages(c, server, cid).await;
    assert_eq!((latest, msgs.len()), (1, 1));
}

/// SIGHUP stops the server gracefully too (its default action ended it at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_stops_the_server_gracefully() {
    let (mut server, c, cid) = serving_one_message().await;
    server.signal("HUP");
    assert!(server.wait().success());
    assert_stopped_cleanly(&mut server, &c, &cid).await;
}

/// A client that stopped halfway through its request holds a graceful stop up for at most the
/// drain timeout (10 s), not its header or body timeouts (30 s / 60 s), and the stop still ends
/// with the stores closed: the WAL truncated, the history there on restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_client_holds_a_graceful_stop_up_for_the_drain_timeout_at_most() {
    let (mut server, c, cid) = serving_one_message().await;
    let half_headers = stalled_client(&server, b"GET /healthz HTTP/1.1\r\nHost: x\r\n").await;
    let head = format!(
        "POST /v1/conversations/{cid}/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\
         content-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"client_msg_id\""
    );
    let short_body = stalled_client(&server, head.as_bytes()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let started = std::time::Instant::now();
    let status = server.terminate();
    let took = started.elapsed();
    assert!(status.success(), "exit status {status}");
    assert!(
        took < Duration::from_secs(20),
        "the stop took {took:?} with a stalled client"
    );
    drop((half_headers, short_body));
    assert_stopped_cleanly(&mut server, &c, &cid).await;
}

/// A second SIGTERM during the drain (an operator's second Ctrl-C) cuts a stalled client at
/// once instead of after the drain timeout, and the stop still closes the stores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_ends_the_drain_at_once() {
    let (mut server, c, cid) = serving_one_message().await;
    let half_headers = stalled_client(&server, b"GET /healthz HTTP/1.1\r\n").await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let started = std::time::Instant::now();
    server.sigterm();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let status = server.terminate(); // the second SIGTERM
    let took = started.elapsed();
    assert!(status.success(), "exit status {status}");
    assert!(took < Duration::from_secs(5), "the stop took {took:?}");
    drop(half_headers);
    assert_stopped_cleanly(&mut server, &c, &cid).await;
}

/// The default key is refused off loopback, and the refusal is one line on stderr and exit
/// code 1, never a stack trace, whatever `RUST_BACKTRACE` says (also with
/// `RUST_BACKTRACE=1`).
#[test]
fn default_key_is_refused_off_loopback() {
    let tmp = tempfile::tempdir().unwrap();
    for backtrace in [None, Some("1"), Some("full")] {
        let mut serve = std::process::Command::new(env!("CARGO_BIN_EXE_tidemark"));
        serve
            .args(["serve", "--listen", "0.0.0.0:0", "--data-dir"])
            .arg(tmp.path())
            .env_remove("RUST_BACKTRACE")
            .env_remove("RUST_LIB_BACKTRACE");
        if let Some(b) = backtrace {
            serve.env("RUST_BACKTRACE", b);
        }
        let out = serve.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{backtrace:?}, stderr: {err}");
        assert_eq!(
            err,
            "Error: refusing to start: tenant \"demo\" uses the default key \"dev-key\" while \
             listening on 0.0.0.0:0, which is not loopback; set a real key\n",
            "{backtrace:?}"
        );
    }
}

/// A server that cannot start says what it could not do and with what (not a bare `File
/// exists (os error 17)` or `Address already in use (os error 98)`), and a configuration error
/// once (not again as its own cause).
#[test]
fn startup_errors_name_what_failed() {
    let tmp = tempfile::tempdir().unwrap();
    let serve = |args: &[&str], env: &[(&str, &str)]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tidemark"))
            .arg("serve")
            .args(args)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let err = serve(
        &[
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            file.to_str().unwrap(),
        ],
        &[],
    );
    assert!(
        err.contains(&format!("creating the data directory {}", file.display())),
        "stderr: {err}"
    );

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tmp.path().join("data");
    let err = serve(
        &["--listen", &addr, "--data-dir", dir.to_str().unwrap()],
        &[],
    );
    assert!(
        err.contains(&format!("listening on {addr}")),
        "stderr: {err}"
    );

    let err = serve(
        &[
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            dir.to_str().unwrap(),
        ],
        &[("TIDEMARK_CHAT__TRIM_BATCH", "many")],
    );
    assert_eq!(err.matches("many").count(), 1, "stderr: {err}");
}
