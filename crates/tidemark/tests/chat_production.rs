//! Chat on its production engines, end to end through the real `tidemark serve`: a private
//! durable `redis-server` as hot store (`chat.hot`), the machine's MariaDB (a scratch database)
//! as archive (`chat.archive`), and as outbox either the SQLite file a Redis hot store uses
//! without a Kafka URL or a private tansu broker (`chat.outbox`). Messages are sent, archived,
//! trimmed from Redis and read back across both tiers; a frozen broker fails sends with 503.

mod common;

use std::time::{Duration, Instant};

use common::{TestServer, all_messages, call, client, create_conversation, metric, send};
use tidemark_chat::kafka::KafkaOutbox;
use tidemark_chat::mysql::MysqlArchive;
use tidemark_chat::ports::{Archive, HotStore, Outbox};
use tidemark_chat::redis::RedisHot;
use tidemark_chat::testing::{KafkaBroker, RedisServer};
use tidemark_core::mysql::{drop_database, scratch_database, test_server_url};

const TENANT: &str = "demo";

/// History index entries the archive holds for the conversation (seqs 1..=1,000).
async fn archived(archive: &MysqlArchive, cid: &str) -> usize {
    archive
        .index_range(TENANT, cid, 1, 1_000)
        .await
        .unwrap()
        .len()
}

async fn production_server(redis: &RedisServer, mysql: &str, outbox: &str) -> TestServer {
    production_server_with(redis, mysql, outbox, &[]).await
}

async fn production_server_with(
    redis: &RedisServer,
    mysql: &str,
    outbox: &str,
    extra: &[(&str, &str)],
) -> TestServer {
    let mut env = vec![
        ("TIDEMARK_CHAT__HOT", redis.url()),
        ("TIDEMARK_CHAT__ARCHIVE", mysql.to_owned()),
        ("TIDEMARK_CHAT__OUTBOX", outbox.to_owned()),
        ("TIDEMARK_CHAT__HOT_WINDOW", "1s".to_owned()),
        ("TIDEMARK_CHAT__OUTBOX_RECOVERY_WINDOW", "200ms".to_owned()),
        ("TIDEMARK_CHAT__SAFETY_MARGIN", "100ms".to_owned()),
        ("TIDEMARK_CHAT__TRIM_INTERVAL", "100ms".to_owned()),
    ];
    env.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    TestServer::start(&env).await
}

/// How a crash test holds SENDs between reserve and outbox append, and lets them go.
enum Hold<'a> {
    /// The broker is frozen (SIGSTOP): the append waits on it.
    Broker(&'a KafkaBroker),
    /// The `after-reserve` failpoint file of `TEST_FAILPOINT_DIR` (tidemark_chat::failpoint).
    Failpoint(std::path::PathBuf),
}

impl Hold<'_> {
    fn on(&self) {
        match self {
            Hold::Broker(b) => b.pause().unwrap(),
            Hold::Failpoint(dir) => std::fs::write(dir.join("after-reserve"), b"").unwrap(),
        }
    }
    fn off(&self) {
        match self {
            Hold::Broker(b) => b.resume().unwrap(),
            Hold::Failpoint(dir) => std::fs::remove_file(dir.join("after-reserve")).unwrap(),
        }
    }
}

/// 300 messages (alice the odd seqs, bob the even ones) are acknowledged, archived to MariaDB
/// and trimmed from Redis; one more stays hot; the history and bob's unread count span both
/// tiers with exact values. Returns the conversation id.
async fn send_archive_trim_and_read_back(
    c: &reqwest::Client,
    server: &TestServer,
    redis: &RedisServer,
    mysql: &str,
) -> String {
    let cid = create_conversation(c, server, &["alice", "bob"]).await;

    for i in 1..=300u64 {
        let sender = if i % 2 == 1 { "alice" } else { "bob" };
        let (st, ack) = send(c, server, &cid, sender, &format!("k{i}"), &format!("m{i}")).await;
        assert_eq!(
            (st, ack["conversation_seq"].as_u64()),
            (201, Some(i)),
            "{ack}"
        );
    }
    let (st, retry) = send(c, server, &cid, "alice", "k5", "m5").await;
    assert_eq!((st, retry["conversation_seq"].as_u64()), (200, Some(5)));

    // Archived to MariaDB, then trimmed from Redis behind the watermark.
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric(c, server, "tidemark_chat_trimmed_total").await < 300 {
        assert!(
            Instant::now() < deadline,
            "not all 300 messages were trimmed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let hot = RedisHot::connect(&redis.url(), 1).await.unwrap();
    assert_eq!(hot.hot_len().await.unwrap(), 0);
    let meta = hot.conversation(TENANT, &cid).await.unwrap().unwrap();
    assert_eq!((meta.latest_seq, meta.floor), (300, 300));
    let archive = MysqlArchive::connect(mysql, 1).await.unwrap();
    assert_eq!(archived(&archive, &cid).await, 300);
    // The outbox may hold duplicates (a send still RESERVED after the 200 ms recovery window of
    // this test is published again by the recovery worker); the archive holds each seq once.
    assert!(metric(c, server, "tidemark_chat_archived_records_total").await >= 300);

    // One more message stays hot; a read spans both tiers.
    let (st, ack) = send(c, server, &cid, "alice", "k301", "m301").await;
    assert_eq!((st, ack["conversation_seq"].as_u64()), (201, Some(301)));
    let (latest, all) = all_messages(c, server, &cid, "alice").await;
    assert_eq!(latest, 301);
    let got: Vec<(u64, String)> = all
        .iter()
        .map(|m| {
            (
                m["conversation_seq"].as_u64().unwrap(),
                m["body"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let want: Vec<(u64, String)> = (1..=301).map(|i| (i, format!("m{i}"))).collect();
    assert_eq!(got, want);
    let (st, convs) = call(
        c,
        reqwest::Method::GET,
        &server.url("/v1/users/bob/conversations"),
        None,
    )
    .await;
    assert_eq!(st, 200);
    assert_eq!(
        (
            convs["conversations"][0]["latest_seq"].as_u64(),
            convs["conversations"][0]["unread"].as_u64()
        ),
        (Some(301), Some(151)),
        "alice's 150 archived messages and 1 hot one"
    );

    archive.pool().close().await;
    cid
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_hot_and_mariadb_archive_send_archive_trim_and_read_back_across_tiers() {
    let redis = RedisServer::start().unwrap();
    let mysql = scratch_database(&test_server_url(), "tm_e2e_chat")
        .await
        .unwrap();
    let server = production_server(&redis, &mysql, "sqlite").await;
    send_archive_trim_and_read_back(&client(), &server, &redis, &mysql).await;
    drop(server);
    drop_database(&mysql).await.unwrap();
}

/// The full production shape: Redis + Kafka protocol (tansu) + MariaDB. Then the broker
/// freezes: a SEND fails with 503 within the 5 s produce timeout and is not acknowledged; once
/// the broker is back the retry is answered with its seq and new sends commit again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_kafka_and_mariadb_end_to_end_and_a_frozen_broker_fails_sends_with_503() {
    let redis = RedisServer::start().unwrap();
    let broker = KafkaBroker::start().unwrap();
    let mysql = scratch_database(&test_server_url(), "tm_e2e_chat_kafka")
        .await
        .unwrap();
    let server = production_server(&redis, &mysql, &broker.url("tidemark.chat.outbox")).await;
    let c = client();
    let cid = send_archive_trim_and_read_back(&c, &server, &redis, &mysql).await;

    broker.pause().unwrap();
    let started = Instant::now();
    let (st, body) = send(&c, &server, &cid, "bob", "k-down", "while down").await;
    let took = started.elapsed();
    assert_eq!(st, 503, "{body}");
    assert!(took < Duration::from_secs(8), "failed fast: {took:?}");
    broker.resume().unwrap();
    // A client retries a 503 with the same client_msg_id until it is answered.
    let mut tries = 0;
    let retry = loop {
        let (st, retry) = send(&c, &server, &cid, "bob", "k-down", "while down").await;
        if st == 200 || st == 201 {
            break retry;
        }
        tries += 1;
        assert!(st == 503 && tries < 10, "{st} {retry}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(retry["conversation_seq"].as_u64(), Some(302));
    let (st, next) = send(&c, &server, &cid, "alice", "k-after", "after").await;
    assert_eq!((st, next["conversation_seq"].as_u64()), (201, Some(303)));
    let (latest, all) = all_messages(&c, &server, &cid, "alice").await;
    assert_eq!((latest, all.len()), (303, 303));
    drop(server);
    drop_database(&mysql).await.unwrap();
}

/// `hot-only` on Redis alone (one script per commit, no outbox, no archive): sends commit with
/// dense seqs and a retry gets its original ACK. The same data dir and Redis then restart in
/// `tiered` mode: the history written hot-only is backfilled into the outbox, archived to
/// MariaDB and only then trimmed, and reads still return all of it; the next send continues the
/// seqs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_only_on_redis_then_tiered_backfills_archives_and_trims_that_history() {
    let redis = RedisServer::start().unwrap();
    let mut server = TestServer::start(&[
        ("TIDEMARK_CHAT__HOT", redis.url().as_str()),
        ("TIDEMARK_CHAT__MODE", "hot-only"),
    ])
    .await;
    let c = client();
    let cid = create_conversation(&c, &server, &["alice", "bob"]).await;
    for i in 1..=20u64 {
        let (st, ack) = send(
            &c,
            &server,
            &cid,
            "alice",
            &format!("k{i}"),
            &format!("m{i}"),
        )
        .await;
        assert_eq!(
            (st, ack["conversation_seq"].as_u64()),
            (201, Some(i)),
            "{ack}"
        );
    }
    let (st, retry) = send(&c, &server, &cid, "alice", "k7", "m7").await;
    assert_eq!((st, retry["conversation_seq"].as_u64()), (200, Some(7)));
    let hot = RedisHot::connect(&redis.url(), 1).await.unwrap();
    assert_eq!(
        hot.held_seqs(TENANT, &cid).await.unwrap(),
        (1..=20).collect::<Vec<u64>>()
    );
    assert_eq!(hot.untracked_committed(100).await.unwrap().len(), 20);
    assert!(server.terminate().success());

    let mysql = scratch_database(&test_server_url(), "tm_e2e_chat_hot_only")
        .await
        .unwrap();
    server.env = vec![
        ("TIDEMARK_CHAT__HOT".into(), redis.url()),
        ("TIDEMARK_CHAT__ARCHIVE".into(), mysql.clone()),
        ("TIDEMARK_CHAT__HOT_WINDOW".into(), "1s".into()),
        (
            "TIDEMARK_CHAT__OUTBOX_RECOVERY_WINDOW".into(),
            "200ms".into(),
        ),
        ("TIDEMARK_CHAT__SAFETY_MARGIN".into(), "100ms".into()),
        ("TIDEMARK_CHAT__TRIM_INTERVAL".into(), "100ms".into()),
    ];
    server.spawn().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric(&c, &server, "tidemark_chat_trimmed_total").await < 20 {
        assert!(
            Instant::now() < deadline,
            "the hot-only history was not trimmed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(hot.untracked_committed(100).await.unwrap().is_empty());
    assert_eq!(hot.hot_len().await.unwrap(), 0);
    let archive = MysqlArchive::connect(&mysql, 1).await.unwrap();
    assert_eq!(archived(&archive, &cid).await, 20);
    let (st, ack) = send(&c, &server, &cid, "bob", "k21", "m21").await;
    assert_eq!((st, ack["conversation_seq"].as_u64()), (201, Some(21)));
    let (latest, all) = all_messages(&c, &server, &cid, "alice").await;
    let bodies: Vec<&str> = all.iter().map(|m| m["body"].as_str().unwrap()).collect();
    let want: Vec<String> = (1..=21).map(|i| format!("m{i}")).collect();
    assert_eq!(
        (latest, bodies),
        (21, want.iter().map(String::as_str).collect())
    );
    archive.pool().close().await;
    drop(server);
    drop_database(&mysql).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_without_durable_aof_stops_the_server_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let stderr = TestServer::refused_start(
        dir.path(),
        &[("TIDEMARK_CHAT__HOT".into(), "redis://127.0.0.1:6379".into())],
    );
    assert!(
        stderr.contains("appendonly is \"no\", Tidemark needs \"yes\""),
        "{stderr}"
    );
}

/// `kill -9` of tidemark between reserve and outbox append: the broker is frozen, so three
/// sends reserve their seqs in Redis and then wait on the produce; tidemark is killed, the broker
/// thawed and tidemark started again on the same stores. The recovery worker publishes the
/// RESERVED records (any that reached the broker before the kill are in the outbox twice,
/// which is harmless): every message is committed and archived exactly once, and the clients'
/// retries get the recovered seqs.
///
/// What it needs of the broker and of the outbox reader: records of a restarted producer are
/// written (tansu 0.6's idempotent producer acknowledged them without appending them, so the
/// tests run it with `?idempotence=false`); every record of a multi-record batch is kept (the
/// recovery worker appends seqs 6..=8 in one call; tansu's memory storage kept one offset of
/// such a batch, its SQLite engine, which the tests use, keeps them all); and a fetch that
/// starts inside a batch returns exactly the asked offsets (`tests/kafka_restart.rs` in tidemark_chat).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_tidemark_between_reserve_and_outbox_append_is_recovered_exactly_once() {
    let redis = RedisServer::start().unwrap();
    let broker = KafkaBroker::start().unwrap();
    let mysql = scratch_database(&test_server_url(), "tm_e2e_chat_crash")
        .await
        .unwrap();
    let outbox = broker.url("tidemark.chat.outbox");
    let server = production_server(&redis, &mysql, &outbox).await;
    recovered_exactly_once(server, &redis, &mysql, Hold::Broker(&broker), Some(&outbox)).await;
}

/// The same crash with the outbox a Redis hot store uses without a broker (its SQLite file),
/// held by the `after-reserve` failpoint: no broker defect can get in the way, so this one
/// always runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_between_reserve_and_outbox_append_on_the_sqlite_outbox_is_recovered_exactly_once() {
    kill_9_at_the_failpoint(None).await;
}

/// The same crash with the Kafka-protocol outbox (tansu): the failpoint holds the SENDs before
/// any produce request leaves, so the broker sees only the restarted process's appends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_between_reserve_and_outbox_append_on_the_kafka_outbox_is_recovered_exactly_once() {
    let broker = KafkaBroker::start().unwrap();
    kill_9_at_the_failpoint(Some(&broker)).await;
}

/// Redis hot store, MariaDB archive and the SQLite outbox file (`broker` None) or the broker's
/// topic; the `after-reserve` failpoint (`TEST_FAILPOINT_DIR`) holds three SENDs, tidemark is
/// killed and restarted, and [`recovered_exactly_once`] checks the outcome.
async fn kill_9_at_the_failpoint(broker: Option<&KafkaBroker>) {
    let redis = RedisServer::start().unwrap();
    let mysql = scratch_database(&test_server_url(), "tm_e2e_chat_crash_fp")
        .await
        .unwrap();
    let failpoints = tempfile::tempdir().unwrap();
    let outbox = broker.map_or_else(|| "sqlite".to_owned(), |b| b.url("tidemark.chat.outbox"));
    let server = production_server_with(
        &redis,
        &mysql,
        &outbox,
        &[("TEST_FAILPOINT_DIR", failpoints.path().to_str().unwrap())],
    )
    .await;
    let hold = Hold::Failpoint(failpoints.path().to_path_buf());
    let kafka = broker.is_some().then_some(outbox.as_str());
    recovered_exactly_once(server, &redis, &mysql, hold, kafka).await;
}

/// Five messages, then three SENDs held between reserve and append, `kill -9`, release,
/// restart: recovery commits seqs 6..=8, everything is archived exactly once, and the clients'
/// retries get the recovered seqs. `kafka` names the outbox to show when it stalls.
async fn recovered_exactly_once(
    mut server: TestServer,
    redis: &RedisServer,
    mysql: &str,
    hold: Hold<'_>,
    kafka: Option<&str>,
) {
    let c = client();
    let cid = create_conversation(&c, &server, &["alice", "bob"]).await;
    for i in 1..=5u64 {
        let (st, ack) = send(&c, &server, &cid, "alice", &format!("k{i}"), "before").await;
        assert_eq!((st, ack["conversation_seq"].as_u64()), (201, Some(i)));
    }

    hold.on();
    let mut in_flight = Vec::new();
    for key in ["ka", "kb", "kc"] {
        let (c, url, cid) = (c.clone(), server.url(""), cid.clone());
        in_flight.push(tokio::spawn(async move {
            c.post(format!("{url}/v1/conversations/{cid}/messages"))
                .bearer_auth(common::KEY)
                .json(&serde_json::json!({"client_msg_id": key, "sender": "bob", "body": key}))
                .send()
                .await
                .ok()
                .map(|r| r.status().as_u16())
        }));
    }
    let hot = RedisHot::connect(&redis.url(), 1).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while hot
        .conversation(TENANT, &cid)
        .await
        .unwrap()
        .unwrap()
        .latest_seq
        < 8
    {
        assert!(Instant::now() < deadline, "the three sends did not reserve");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        hot.held_seqs(TENANT, &cid).await.unwrap(),
        (1..=8).collect::<Vec<u64>>()
    );
    // 6..=8 are reserved, not committed: the crash lands in the window recovery exists for.
    let mut reserved: Vec<u64> = hot
        .reserved_records(i64::MAX, 10)
        .await
        .unwrap()
        .iter()
        .map(|r| r.conversation_seq)
        .collect();
    reserved.sort_unstable();
    assert_eq!(reserved, vec![6, 7, 8]);
    server.kill9();
    for t in in_flight {
        assert_eq!(
            t.await.unwrap(),
            None,
            "a held SEND was answered before the kill"
        );
    }
    // Thaw the broker and let it finish what the dead process had sent before tidemark comes
    // back (tansu 0.6 with in-memory storage was seen to lose records when two producers
    // appended at once).
    hold.off();
    tokio::time::sleep(Duration::from_secs(1)).await;
    server.spawn().await;

    // Recovery (window 200 ms) commits 6..=8; the archiver archives everything once. The
    // records the dead process had handed the broker may reach the archive before recovery
    // commits them in the hot tier, so both are waited for.
    let archive = MysqlArchive::connect(mysql, 1).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while archived(&archive, &cid).await < 8
        || !hot.reserved_records(i64::MAX, 10).await.unwrap().is_empty()
    {
        if Instant::now() >= deadline {
            // Say where it stalled: the outbox, the archiver's position, the hot tier.
            let (offsets, position, log) = match kafka {
                Some(url) => {
                    let outbox = KafkaOutbox::connect(url, 1).await.unwrap();
                    let log: Vec<(u64, u64)> = outbox
                        .fetch(0, 0, 100)
                        .await
                        .unwrap_or_default()
                        .iter()
                        .map(|(o, r)| (*o, r.conversation_seq))
                        .collect();
                    (
                        format!("{:?}", outbox.offsets(0).await),
                        format!("{:?}", outbox.position("archiver", 0).await),
                        log,
                    )
                }
                None => ("(sqlite)".into(), "(sqlite)".into(), Vec::new()),
            };
            panic!(
                "recovered messages were not archived: outbox {offsets} log {log:?} archiver at {position}; \
                 archive {:?}; hot {:?}",
                archive
                    .index_range(TENANT, &cid, 1, 100)
                    .await
                    .map(|v| v.len()),
                hot.held_seqs(TENANT, &cid).await,
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (latest, all) = all_messages(&c, &server, &cid, "alice").await;
    let got: Vec<u64> = all
        .iter()
        .map(|m| m["conversation_seq"].as_u64().unwrap())
        .collect();
    assert_eq!((latest, got), (8, (1..=8).collect::<Vec<u64>>()));
    let mut recovered: Vec<(String, u64)> = Vec::new();
    for key in ["ka", "kb", "kc"] {
        let (st, ack) = send(&c, &server, &cid, "bob", key, key).await;
        assert_eq!(st, 200, "{ack}");
        recovered.push((key.to_owned(), ack["conversation_seq"].as_u64().unwrap()));
    }
    let mut seqs: Vec<u64> = recovered.iter().map(|(_, s)| *s).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, vec![6, 7, 8]);
    for (key, seq) in &recovered {
        assert_eq!(all[*seq as usize - 1]["body"].as_str(), Some(key.as_str()));
    }
    assert_eq!(archived(&archive, &cid).await, 8);
    drop(server);
    archive.pool().close().await;
    drop_database(mysql).await.unwrap();
}
