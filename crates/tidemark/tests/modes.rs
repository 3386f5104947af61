//! The three chat modes of DESIGN.md part A, end to end: `tiered` archives asynchronously,
//! `hot-only` archives nothing (and reads only the archive an earlier tiered run left),
//! `sync-archive` has every message in the archive by the time its ACK arrives.

mod common;

use std::time::{Duration, Instant};

use common::*;

fn archived_count(dir: &std::path::Path) -> Option<i64> {
    let path = dir.join("chat").join("archive.db");
    if !path.exists() {
        return None;
    }
    let conn =
        rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    Some(
        conn.query_row("SELECT count(*) FROM history_index", [], |r| r.get(0))
            .unwrap(),
    )
}

async fn send_three(server: &TestServer) {
    let c = client();
    let cid = create_conversation(&c, server, &["u1", "u2"]).await;
    for i in 1..=3 {
        let (st, v) = send(&c, server, &cid, "u1", &format!("m{i}"), "hi").await;
        assert_eq!(st, 201, "{v}");
        assert_eq!(v["conversation_seq"], i);
    }
    let (latest, msgs) = all_messages(&c, server, &cid, "u1").await;
    assert_eq!((latest, msgs.len()), (3, 3));
}

#[tokio::test]
async fn sync_archive_has_every_message_at_ack_time() {
    let server = TestServer::start(&[
        ("TIDEMARK_CHAT__MODE", "sync-archive"),
        ("TIDEMARK_CHAT__ARCHIVE_IDLE", "1h"),
    ])
    .await;
    send_three(&server).await;
    assert_eq!(archived_count(&server.dir), Some(3));
}

#[tokio::test]
async fn hot_only_has_no_archive() {
    let server = TestServer::start(&[("TIDEMARK_CHAT__MODE", "hot-only")]).await;
    send_three(&server).await;
    assert_eq!(archived_count(&server.dir), None);
}

#[tokio::test]
async fn tiered_archives_in_the_background() {
    let server = TestServer::start(&[]).await;
    send_three(&server).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while archived_count(&server.dir) != Some(3) {
        assert!(
            Instant::now() < deadline,
            "archiver did not catch up: {:?}",
            archived_count(&server.dir)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn hot_state(dir: &std::path::Path) -> (i64, i64) {
    let conn = rusqlite::Connection::open_with_flags(
        dir.join("chat").join("hot.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let hot: i64 = conn
        .query_row("SELECT count(*) FROM message", [], |r| r.get(0))
        .unwrap();
    let floor: i64 = conn
        .query_row("SELECT max(floor) FROM conversation", [], |r| r.get(0))
        .unwrap();
    (hot, floor)
}

/// A hot window of 1 s and margins of 100 ms: the real workers archive and trim within a
/// second or two.
const TRIM_SOON: [(&str, &str); 4] = [
    ("TIDEMARK_CHAT__HOT_WINDOW", "1s"),
    ("TIDEMARK_CHAT__OUTBOX_RECOVERY_WINDOW", "100ms"),
    ("TIDEMARK_CHAT__SAFETY_MARGIN", "100ms"),
    ("TIDEMARK_CHAT__TRIM_INTERVAL", "100ms"),
];

/// Waits (up to 15 s) until the one conversation's `messages` are all trimmed: none hot, the
/// floor at the last.
async fn wait_trimmed(dir: &std::path::Path, messages: i64) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while hot_state(dir) != (0, messages) {
        assert!(
            Instant::now() < deadline,
            "not trimmed: {:?}",
            hot_state(dir)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// With a short hot window the real workers archive and trim everything; history, retries
/// and seq allocation keep working from the archive, also across a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiered_trims_behind_the_watermark_and_reads_from_the_archive() {
    let mut server = TestServer::start(&TRIM_SOON).await;
    let c = client();
    let cid = create_conversation(&c, &server, &["u1", "u2"]).await;
    let mut acks = Vec::new();
    for i in 1..=50 {
        let (st, v) = send(
            &c,
            &server,
            &cid,
            if i % 2 == 0 { "u1" } else { "u2" },
            &format!("m{i}"),
            &format!("b{i}"),
        )
        .await;
        assert_eq!(st, 201);
        acks.push(v);
    }
    wait_trimmed(&server.dir, 50).await;
    let (latest, msgs) = all_messages(&c, &server, &cid, "u1").await;
    assert_eq!(latest, 50);
    let bodies: Vec<String> = msgs
        .iter()
        .map(|m| m["body"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        bodies,
        (1..=50).map(|i| format!("b{i}")).collect::<Vec<_>>()
    );
    let (st, v) = send(&c, &server, &cid, "u2", "m1", "again").await;
    assert_eq!(
        (st, &v),
        (200, &acks[0]),
        "retry after archive + trim returns the original ACK"
    );
    let (st, v) = call(
        &c,
        reqwest::Method::GET,
        &server.url("/v1/users/u1/conversations"),
        None,
    )
    .await;
    assert_eq!(st, 200);
    assert_eq!(
        v["conversations"][0]["unread"], 25,
        "unread from the archive: u2's 25 messages"
    );

    server.kill9();
    server.spawn().await;
    let (st, v) = send(&c, &server, &cid, "u2", "m1", "again").await;
    assert_eq!((st, &v), (200, &acks[0]), "retry after a restart");
    let (st, v) = send(&c, &server, &cid, "u1", "m51", "b51").await;
    assert_eq!(st, 201);
    assert_eq!(
        v["conversation_seq"], 51,
        "seqs are never reused after a full trim"
    );
}

/// History written in `hot-only` mode (no outbox, no trim candidates) is backfilled into the
/// outbox when the data dir is restarted in `tiered` mode, then archived and trimmed like any
/// other: nothing goes missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_from_hot_only_to_tiered_backfills_before_trimming() {
    let mut server = TestServer::start(&[("TIDEMARK_CHAT__MODE", "hot-only")]).await;
    let c = client();
    let cid = create_conversation(&c, &server, &["u1", "u2"]).await;
    for i in 1..=5 {
        assert_eq!(
            send(
                &c,
                &server,
                &cid,
                "u1",
                &format!("h{i}"),
                &format!("hot-only {i}")
            )
            .await
            .0,
            201
        );
    }
    assert!(server.terminate().success());
    server.env = [
        ("TIDEMARK_CHAT__MODE", "tiered"),
        ("TIDEMARK_CHAT__HOT_WINDOW", "1s"),
        ("TIDEMARK_CHAT__OUTBOX_RECOVERY_WINDOW", "100ms"),
        ("TIDEMARK_CHAT__SAFETY_MARGIN", "100ms"),
        ("TIDEMARK_CHAT__TRIM_INTERVAL", "100ms"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    server.spawn().await;
    for i in 6..=8 {
        assert_eq!(
            send(
                &c,
                &server,
                &cid,
                "u2",
                &format!("t{i}"),
                &format!("tiered {i}")
            )
            .await
            .0,
            201
        );
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while hot_state(&server.dir) != (0, 8) {
        assert!(
            Instant::now() < deadline,
            "not trimmed: {:?}",
            hot_state(&server.dir)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(archived_count(&server.dir), Some(8));
    let (latest, msgs) = all_messages(&c, &server, &cid, "u1").await;
    assert_eq!(latest, 8);
    let seqs: Vec<u64> = msgs
        .iter()
        .map(|m| m["conversation_seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=8).collect::<Vec<_>>());
    assert_eq!(msgs[0]["body"], "hot-only 1");
}

/// A tiered server's data dir with one conversation whose 10 messages (bodies `b1`..`b10`, from
/// `u2`) were all trimmed into the archive, the server stopped; with a client and the
/// conversation's id.
async fn ten_messages_trimmed_and_stopped() -> (TestServer, reqwest::Client, String) {
    let mut server = TestServer::start(&TRIM_SOON).await;
    let c = client();
    let cid = create_conversation(&c, &server, &["u1", "u2"]).await;
    send_each(&c, &server, &cid, 1..=10).await;
    wait_trimmed(&server.dir, 10).await;
    assert!(server.terminate().success());
    (server, c, cid)
}

/// A tiered data dir whose history was trimmed into the archive, restarted `hot-only`, still
/// reads that history and counts it unread: the archive is not written in `hot-only`, but it is
/// read (a read below a floor must not answer 500 `corrupt_history`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trimmed_tiered_data_dir_restarted_hot_only_still_reads_its_archive() {
    let (mut server, c, cid) = ten_messages_trimmed_and_stopped().await;

    server
        .env
        .push(("TIDEMARK_CHAT__MODE".into(), "hot-only".into()));
    server.spawn().await;
    let (st, v) = send(&c, &server, &cid, "u2", "m11", "b11").await;
    assert_eq!(
        (st, &v["conversation_seq"]),
        (201, &serde_json::json!(11)),
        "{v}"
    );
    let (latest, msgs) = all_messages(&c, &server, &cid, "u1").await;
    let bodies: Vec<&str> = msgs.iter().map(|m| m["body"].as_str().unwrap()).collect();
    let expected: Vec<String> = (1..=11).map(|i| format!("b{i}")).collect();
    assert_eq!(
        (latest, bodies),
        (11, expected.iter().map(String::as_str).collect())
    );
    let (st, v) = call(
        &c,
        reqwest::Method::GET,
        &server.url("/v1/users/u1/conversations"),
        None,
    )
    .await;
    assert_eq!(
        (st, &v["conversations"][0]["unread"]),
        (200, &serde_json::json!(11)),
        "{v}"
    );
    assert_eq!(
        hot_state(&server.dir),
        (1, 10),
        "hot-only trims nothing more"
    );
}

/// The hot tier records its archive's identity: with `archive.db` moved away, a tiered server
/// (which would make a new, empty one) and a hot-only one (which would read none) both refuse
/// to start, saying so; with the file back, all of the history reads again. Started, both
/// would say ready at `/readyz` and answer reads below the floor with 200 and holes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_replaced_archive_is_refused_at_startup() {
    let (mut server, c, cid) = ten_messages_trimmed_and_stopped().await;

    let chat = server.dir.join("chat");
    let aside = tempfile::tempdir().unwrap();
    // The file with its log, as an operator moves it (a log must never meet another database).
    let move_archive = |from: &std::path::Path, to: &std::path::Path| {
        for name in ["archive.db", "archive.db-wal", "archive.db-shm"] {
            if from.join(name).exists() {
                std::fs::rename(from.join(name), to.join(name)).unwrap();
            }
        }
    };
    move_archive(&chat, aside.path());
    let stderr = TestServer::refused_start(&server.dir, &server.env);
    assert!(
        stderr.contains("refusing to start: the hot tier's history is archived in archive")
            && stderr.contains("archive.db is archive")
            && stderr.contains("put back the archive it was archived into"),
        "{stderr}"
    );
    // The refused start left no new, empty archive.db behind; without any, hot-only is
    // refused too.
    assert!(!chat.join("archive.db").exists());
    let mut hot_only = server.env.clone();
    hot_only.push(("TIDEMARK_CHAT__MODE".into(), "hot-only".into()));
    let stderr = TestServer::refused_start(&server.dir, &hot_only);
    assert!(stderr.contains("but there is none at"), "{stderr}");

    move_archive(aside.path(), &chat);
    server.spawn().await;
    let (latest, msgs) = all_messages(&c, &server, &cid, "u1").await;
    let seqs: Vec<u64> = msgs
        .iter()
        .map(|m| m["conversation_seq"].as_u64().unwrap())
        .collect();
    assert_eq!((latest, seqs), (10, (1..=10).collect::<Vec<_>>()));
}

/// `/metrics` measures the archive's backlog and lag when it is scraped (here with the archiver
/// and the trimmer asleep for an hour after their first round, the gauges' last pass saw
/// nothing), and counts every answer by route template and status: a scrape must not show
/// backlog 0 and lag 0 while records wait, and 4xx answers are counted too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_as_of_the_scrape_and_count_every_answer() {
    let server = TestServer::start(&[
        ("TIDEMARK_CHAT__ARCHIVE_IDLE", "1h"),
        ("TIDEMARK_CHAT__TRIM_INTERVAL", "1h"),
    ])
    .await;
    let c = client();
    let cid = create_conversation(&c, &server, &["u1", "u2"]).await;
    for i in 1..=3 {
        let (st, v) = send(&c, &server, &cid, "u1", &format!("m{i}"), "b").await;
        assert_eq!(st, 201, "{v}");
    }
    let (st, _) = send(&c, &server, &cid, "stranger", "m9", "b").await;
    assert_eq!(st, 403);
    assert_eq!(metric(&c, &server, "tidemark_chat_outbox_backlog").await, 3);
    let text = metrics_text(&c, &server).await;
    let count = |method: &str, route: &str, status: u16| -> u64 {
        let series = format!(
            "tidemark_http_responses_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} "
        );
        text.lines()
            .find_map(|l| l.strip_prefix(&series)?.parse().ok())
            .unwrap_or(0)
    };
    let messages = "/v1/conversations/{cid}/messages";
    assert_eq!(count("POST", messages, 201), 3, "{text}");
    assert_eq!(count("POST", messages, 403), 1, "{text}");
    assert_eq!(count("POST", "/v1/conversations", 201), 1, "{text}");
}

/// How far `dir`'s archive says the archiver's batches reached (an outbox offset).
fn archived_through(dir: &std::path::Path) -> Option<i64> {
    let conn = rusqlite::Connection::open_with_flags(
        dir.join("chat").join("archive.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    conn.query_row(
        "SELECT value FROM archive_meta WHERE key = 'archived_through'",
        [],
        |r| r.get(0),
    )
    .ok()
}

/// Waits (up to 15 s) until `dir`'s archive indexes the `n` messages of one conversation and
/// says so (they are the outbox's first `n` records).
async fn wait_archived(dir: &std::path::Path, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while (archived_count(dir), archived_through(dir)) != (Some(n), Some(n)) {
        assert!(
            Instant::now() < deadline,
            "archived: {:?}, through {:?}",
            archived_count(dir),
            archived_through(dir)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends `m<i>` / `b<i>` from u2 for each `i` of `range`, each answered 201.
async fn send_each(
    c: &reqwest::Client,
    s: &TestServer,
    cid: &str,
    range: std::ops::RangeInclusive<u32>,
) {
    for i in range {
        let (st, v) = send(c, s, cid, "u2", &format!("m{i}"), &format!("b{i}")).await;
        assert_eq!(st, 201, "{v}");
    }
}

/// Waits until a data dir's first `n` messages are through (archived, or trimmed).
type Settled =
    fn(&std::path::Path, i64) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + '_>>;

/// Runs `env`'s server through 5 messages, copies its archive (`VACUUM INTO`), sends 5 more,
/// waits until `settled` says they are through, stops it and puts the older copy back.
async fn archive_restored_from_an_older_copy(
    env: &[(&str, &str)],
    settled: Settled,
) -> (TestServer, reqwest::Client, String) {
    let mut server = TestServer::start(env).await;
    let c = client();
    let cid = create_conversation(&c, &server, &["u1", "u2"]).await;
    send_each(&c, &server, &cid, 1..=5).await;
    settled(&server.dir, 5).await;
    let chat = server.dir.join("chat");
    let copy = tempfile::tempdir().unwrap();
    let older = copy.path().join("archive.db");
    rusqlite::Connection::open(chat.join("archive.db"))
        .unwrap()
        .execute("VACUUM INTO ?1", [older.to_str().unwrap()])
        .unwrap();
    send_each(&c, &server, &cid, 6..=10).await;
    settled(&server.dir, 10).await;
    assert!(server.terminate().success());
    for log in ["archive.db-wal", "archive.db-shm"] {
        let _ = std::fs::remove_file(chat.join(log));
    }
    std::fs::copy(&older, chat.join("archive.db")).unwrap();
    (server, c, cid)
}

/// An archive put back from an older copy of itself (same identity, without what was archived
/// since) is caught up from the outbox while the hot tier still holds those messages, and
/// refused when they were trimmed (they are then only in a newer copy). Started, the server
/// would answer the pages of the newer history with 200 and nothing, for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archive_restored_from_an_older_copy_is_caught_up_or_refused() {
    let (mut server, c, cid) =
        archive_restored_from_an_older_copy(&[], |dir, n| Box::pin(wait_archived(dir, n))).await;
    assert!(archived_count(&server.dir) < Some(10));
    server.spawn().await;
    wait_archived(&server.dir, 10).await;
    let (latest, msgs) = all_messages(&c, &server, &cid, "u1").await;
    assert_eq!((latest, msgs.len()), (10, 10));
    assert!(server.terminate().success());

    let (server, _, _) =
        archive_restored_from_an_older_copy(&TRIM_SOON, |dir, n| Box::pin(wait_trimmed(dir, n)))
            .await;
    let stderr = TestServer::refused_start(&server.dir, &server.env);
    assert!(
        stderr.contains("(restored from an older copy?)")
            && stderr.contains("restore a newer copy of the archive"),
        "{stderr}"
    );
}

/// A hot tier put back from an older copy, or deleted, beside the archive its later history
/// went to is refused at startup (`check_archive`): it would hand out the archived seqs again,
/// and a retry of an acknowledged message would commit anew. Started, its SENDs would take
/// seq 6 again and the archive would hold two records of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_tier_older_than_the_archive_is_refused_at_startup() {
    let mut server = TestServer::start(&[]).await;
    let c = client();
    let cid = create_conversation(&c, &server, &["u1", "u2"]).await;
    send_each(&c, &server, &cid, 1..=5).await;
    wait_archived(&server.dir, 5).await;
    assert!(server.terminate().success());
    let chat = server.dir.join("chat");
    let copy = tempfile::tempdir().unwrap();
    let older = copy.path().join("hot.db");
    std::fs::copy(chat.join("hot.db"), &older).unwrap();

    server.spawn().await;
    send_each(&c, &server, &cid, 6..=10).await;
    wait_archived(&server.dir, 10).await;
    assert!(server.terminate().success());
    let put_back = |from: Option<&std::path::Path>| {
        for file in ["hot.db", "hot.db-wal", "hot.db-shm"] {
            let _ = std::fs::remove_file(chat.join(file));
        }
        if let Some(from) = from {
            std::fs::copy(from, chat.join("hot.db")).unwrap();
        }
    };

    put_back(Some(&older));
    let stderr = TestServer::refused_start(&server.dir, &server.env);
    assert!(
        stderr.contains("holds outbox partition 0 through offset 10, but it ends at offset 5"),
        "{stderr}"
    );
    put_back(None);
    let stderr = TestServer::refused_start(&server.dir, &server.env);
    assert!(
        stderr.contains("holds outbox partition 0 through offset 10, but it ends at offset 0"),
        "{stderr}"
    );
    // The refused start left no new, empty hot tier behind (the older copy goes back alone).
    assert!(!chat.join("hot.db").exists());
    assert!(!chat.join("hot.db-wal").exists());
}

/// Seed 000's backfill tool: an archiver whose position lies outside the outbox (a log
/// recreated, or one whose retention passed the archiver) is refused at start, naming
/// `tidemark chat backfill`; the command archives the hot history and sets the position to the
/// start of the log, and the server then starts and reads every message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_position_outside_the_outbox_is_refused_until_chat_backfill() {
    let mut server = TestServer::start(&[]).await;
    let c = client();
    let cid = create_conversation(&c, &server, &["u1", "u2"]).await;
    send_each(&c, &server, &cid, 1..=5).await;
    wait_archived(&server.dir, 5).await;
    assert!(server.terminate().success());
    // The log keeps its last record only, and the stored position is the start of the
    // log: a position outside [4, 5].
    let hot = rusqlite::Connection::open(server.dir.join("chat").join("hot.db")).unwrap();
    hot.execute(
        "DELETE FROM outbox WHERE rowid < (SELECT max(rowid) FROM outbox)",
        [],
    )
    .unwrap();
    hot.execute(
        "UPDATE meta SET value = 0 WHERE key = 'position:archiver'",
        [],
    )
    .unwrap();
    drop(hot);
    let stderr = TestServer::refused_start(&server.dir, &server.env);
    assert!(
        stderr.contains(
            "stored position 0 is outside outbox partition 0's range [4, 5]; archive what the outbox no longer holds with `tidemark chat backfill`"
        ),
        "{stderr}"
    );

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tidemark"))
        .args(["chat", "backfill", "--data-dir"])
        .arg(&server.dir)
        .envs(server.env.iter().map(|(k, v)| (k, v)))
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout,
        "archived 5 hot records (of 5 looked at) that the outbox no longer held\n\
         outbox partition 0: archiver position set to 4, the start of its log\n\
         `tidemark serve` now starts its archivers from there\n"
    );

    server.spawn().await;
    let (latest, msgs) = all_messages(&c, &server, &cid, "u1").await;
    assert_eq!((latest, msgs.len()), (5, 5));
    server.cleanup().await;
}
