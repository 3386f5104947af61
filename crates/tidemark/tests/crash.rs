//! Crash test: a real `tidemark serve` is `kill -9`ed in the middle of concurrent sends and
//! restarted on the same data dir. The checks after the restart are `tidemark_bench::acks`
//! (the crash soak's, `tidemark-bench soak`): every acknowledged message is readable with its
//! seq, id and body, seqs stay dense, retries of acknowledged sends return the original ACK,
//! and a send the kill left unanswered, retried, ends with one seq.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use tidemark_bench::acks::{Api, Ledger, Outcome, Retries, Send};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_messages_survive_kill_9() {
    let mut server = TestServer::start(&[]).await;
    let c = client();
    let mut cids = Vec::new();
    for i in 0..4 {
        cids.push(create_conversation(&c, &server, &[&format!("a{i}"), &format!("b{i}")]).await);
    }
    let mut api = Api {
        client: c.clone(),
        base: server.base.clone(),
        key: KEY.to_owned(),
    };
    let ledger: Arc<Mutex<Ledger>> = Arc::default();
    let mut senders = Vec::new();
    for w in 0..8 {
        let (api, cids, ledger) = (api.clone(), cids.clone(), Arc::clone(&ledger));
        senders.push(tokio::spawn(async move {
            for n in 0.. {
                let i = (w + n) % cids.len();
                let id = format!("w{w}-n{n}");
                let send = Send {
                    cid: cids[i].clone(),
                    sender: format!("{}{i}", if n % 2 == 0 { 'a' } else { 'b' }),
                    body: format!("body {id}"),
                    client_msg_id: id,
                };
                let outcome = api.send(&send).await;
                let acked = matches!(outcome, Outcome::Acked { .. });
                ledger.lock().unwrap().record(send, outcome);
                if !acked {
                    return;
                }
            }
        }));
    }
    // Let load build up (at least 150 acknowledged sends, however slow the machine is), then
    // pull the plug mid-flight.
    let started = std::time::Instant::now();
    let acked = || ledger.lock().unwrap().acked().len();
    while acked() < 150 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "only {} sends acknowledged in 60 s",
            acked()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.kill9();
    for s in senders {
        s.await.unwrap();
    }
    let mut ledger = Arc::try_unwrap(ledger).unwrap().into_inner().unwrap();
    assert!(
        ledger.acked().len() > 100,
        "only {} sends were acknowledged before the kill",
        ledger.acked().len()
    );

    server.spawn().await;
    api.base = server.base.clone();
    let readers: Vec<(String, String)> = cids
        .iter()
        .enumerate()
        .map(|(i, cid)| (cid.clone(), format!("a{i}")))
        .collect();
    let check = ledger.check(&api, &readers, Retries::ALL).await.unwrap();
    assert_eq!(check.violations, Vec::<String>::new());
    assert_eq!(check.acks_checked, ledger.acked().len());
    // New sends continue the dense sequence.
    let (st, v) = send(&c, &server, &cids[0], "a0", "after-restart", "x").await;
    assert_eq!(st, 201);
    let new_seq = v["conversation_seq"].as_u64().unwrap();
    let (latest, msgs) = all_messages(&c, &server, &cids[0], "a0").await;
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
    let (latest, msgs) = all_messages(&c, &server, &cid, "u1").await;
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
    let (latest, msgs) = all_messages(c, server, cid, "u1").await;
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
