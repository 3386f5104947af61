//! Node roles end to end through the real `tidemark serve`: `--role api` and `--role workers`
//! refuse the embedded stores before listening, naming every embedded key; and two nodes on
//! one set of production engines (chat: a private Redis, a tansu broker and a MariaDB scratch
//! archive; links and events: MariaDB and InfluxDB) split the work: the `api` node takes the
//! SENDs and answers reads but never archives or trims, the `workers` node archives and trims
//! them and answers only `/healthz`, `/readyz` and `/metrics`.

mod common;

use std::net::TcpListener;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{Engines, TestServer, all_messages, call, client, create_conversation, metric, send};
use serde_json::json;
use tidemark_chat::mysql::MysqlArchive;
use tidemark_chat::ports::{Archive, HotStore};
use tidemark_chat::redis::RedisHot;
use tidemark_chat::testing::{KafkaBroker, RedisServer};
use tidemark_core::mysql::{drop_database, scratch_database, test_server_url};

const TENANT: &str = "demo";

/// What the refusal says after `role "<role>" ...` for the given keys and their URL forms.
fn refusal(role: &str, keys: &[(&str, &str)]) -> String {
    let names: Vec<&str> = keys.iter().map(|(k, _)| *k).collect();
    let sets: Vec<String> = keys.iter().map(|(k, v)| format!("{k} = \"{v}\"")).collect();
    format!(
        "Error: refusing to start: role \"{role}\" shares its stores with other nodes, but the embedded SQLite store, which only one process can use, is named by {}; set {} (see docs/configuration.md, \"Roles\"), or run one process with role \"all\"\n",
        names.join(", "),
        sets.join(", ")
    )
}

const MYSQL_FORM: &str = "mysql://user:password@host:port/database";

/// Runs `tidemark serve` with `args` and `env` on a port this test holds bound, so a server
/// that got as far as listening would fail with "address in use" instead: the refusal must come
/// first. Returns the exit code and stderr; the data directory must not have been made.
fn refused_start(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let out = TestServer::command(&data, port, &env)
        .args(args)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(!data.exists(), "refused before the data directory is made");
    drop(held);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn api_and_workers_roles_refuse_the_embedded_stores_naming_every_key() {
    let all_embedded = [
        ("chat.hot", "redis://host:port"),
        ("chat.outbox", "kafka://host:port/topic"),
        ("chat.archive", MYSQL_FORM),
        ("links.store", MYSQL_FORM),
        ("events.raw", "influxdb://host:port/database"),
        ("events.rollups", MYSQL_FORM),
    ];
    let (code, stderr) = refused_start(&["--role", "api"], &[]);
    assert_eq!((code, stderr), (Some(1), refusal("api", &all_embedded)));
    let (code, stderr) = refused_start(&["--role", "workers"], &[]);
    assert_eq!((code, stderr), (Some(1), refusal("workers", &all_embedded)));

    // The role may come from the environment (one config for every node); the flag wins.
    let (code, stderr) = refused_start(&[], &[("TIDEMARK_ROLE", "workers")]);
    assert_eq!((code, stderr), (Some(1), refusal("workers", &all_embedded)));
    let (code, stderr) = refused_start(&["--role", "api"], &[("TIDEMARK_ROLE", "all")]);
    assert_eq!((code, stderr), (Some(1), refusal("api", &all_embedded)));

    // Chat on production engines (not reached: the refusal comes before any store is opened),
    // links and events embedded: only their keys are named.
    let chat_shared = [
        ("TIDEMARK_CHAT__HOT", "redis://127.0.0.1:1"),
        ("TIDEMARK_CHAT__OUTBOX", "kafka://127.0.0.1:1/outbox"),
        ("TIDEMARK_CHAT__ARCHIVE", "mysql://root@127.0.0.1:1/archive"),
    ];
    let (code, stderr) = refused_start(&["--role", "workers"], &chat_shared);
    assert_eq!(
        (code, stderr),
        (Some(1), refusal("workers", &all_embedded[3..]))
    );
    let mut links_embedded = chat_shared.to_vec();
    links_embedded.push(("TIDEMARK_EVENTS__RAW", "influxdb://127.0.0.1:1/tidemark"));
    links_embedded.push((
        "TIDEMARK_EVENTS__ROLLUPS",
        "mysql://root@127.0.0.1:1/rollups",
    ));
    let (code, stderr) = refused_start(&["--role", "api"], &links_embedded);
    assert_eq!(
        (code, stderr),
        (
            Some(1),
            format!(
                "Error: refusing to start: role \"api\" shares its stores with other nodes, but the embedded SQLite store, which only one process can use, is named by links.store; set links.store = \"{MYSQL_FORM}\" (see docs/configuration.md, \"Roles\"), or run one process with role \"all\"\n"
            )
        )
    );
    // hot-only uses no outbox and no archive: with Redis, only links and events are named.
    let hot_only = [
        ("TIDEMARK_CHAT__MODE", "hot-only"),
        ("TIDEMARK_CHAT__HOT", "redis://127.0.0.1:1"),
    ];
    let (code, stderr) = refused_start(&["--role", "api"], &hot_only);
    assert_eq!(
        (code, stderr),
        (Some(1), refusal("api", &all_embedded[3..]))
    );
}

/// History index entries the archive holds for the conversation (seqs 1..=1,000).
async fn archived(archive: &MysqlArchive, cid: &str) -> usize {
    archive
        .index_range(TENANT, cid, 1, 1_000)
        .await
        .unwrap()
        .len()
}

/// The value of `name` on a node's `/metrics`, which must carry it (an absent counter is not
/// a zero one).
async fn exported(c: &reqwest::Client, node: &TestServer, name: &str) -> u64 {
    let text = common::metrics_text(c, node).await;
    assert!(
        text.lines()
            .any(|l| l.starts_with(&format!("{name} ")) || l.starts_with(&format!("{name}{{"))),
        "{name} is not on {}/metrics",
        node.base
    );
    metric(c, node, name).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_node_and_a_workers_node_share_one_set_of_engines() {
    let redis = RedisServer::start().unwrap();
    let broker = KafkaBroker::start().unwrap();
    let archive_db = scratch_database(&test_server_url(), "tm_e2e_roles_chat")
        .await
        .unwrap();
    let engines = Engines::start().await;
    // One configuration for both nodes; only the role differs.
    let mut shared: Vec<(String, String)> = engines.env();
    shared.extend(
        [
            ("TIDEMARK_CHAT__HOT", redis.url()),
            ("TIDEMARK_CHAT__OUTBOX", broker.url("tidemark.chat.outbox")),
            ("TIDEMARK_CHAT__ARCHIVE", archive_db.clone()),
            ("TIDEMARK_CHAT__HOT_WINDOW", "1s".into()),
            ("TIDEMARK_CHAT__OUTBOX_RECOVERY_WINDOW", "200ms".into()),
            ("TIDEMARK_CHAT__SAFETY_MARGIN", "100ms".into()),
            ("TIDEMARK_CHAT__TRIM_INTERVAL", "100ms".into()),
            ("TIDEMARK_CHAT__ARCHIVE_IDLE", "50ms".into()),
        ]
        .map(|(k, v)| (k.to_owned(), v)),
    );
    let start = |role: &'static str| {
        let mut env = shared.clone();
        env.push(("TIDEMARK_ROLE".into(), role.into()));
        async move {
            let env: Vec<(&str, &str)> =
                env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            TestServer::start(&env).await
        }
    };
    let api = start("api").await;
    let c = client();

    // The api node alone: SENDs are acknowledged, nothing is archived or trimmed.
    let cid = create_conversation(&c, &api, &["alice", "bob"]).await;
    for i in 1..=200u64 {
        let sender = if i % 2 == 1 { "alice" } else { "bob" };
        let (st, ack) = send(&c, &api, &cid, sender, &format!("k{i}"), &format!("m{i}")).await;
        assert_eq!(
            (st, ack["conversation_seq"].as_u64()),
            (201, Some(i)),
            "{ack}"
        );
    }
    // Well past the 1 s hot window and many archiver pauses, had there been an archiver.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let archive = MysqlArchive::connect(&archive_db, 1).await.unwrap();
    assert_eq!(
        archived(&archive, &cid).await,
        0,
        "an api node never archives"
    );
    let hot = RedisHot::connect(&redis.url(), 1).await.unwrap();
    assert_eq!(hot.hot_len().await.unwrap(), 200, "an api node never trims");

    // The workers node archives and trims what the api node committed, and more as it comes.
    let workers = start("workers").await;
    for i in 201..=300u64 {
        let (st, ack) = send(&c, &api, &cid, "alice", &format!("k{i}"), &format!("m{i}")).await;
        assert_eq!((st, ack["conversation_seq"].as_u64()), (201, Some(i)));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric(&c, &workers, "tidemark_chat_trimmed_total").await < 300 {
        assert!(
            Instant::now() < deadline,
            "the workers node did not trim all 300 messages"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(archived(&archive, &cid).await, 300);
    assert_eq!(hot.hot_len().await.unwrap(), 0);
    let meta = hot.conversation(TENANT, &cid).await.unwrap().unwrap();
    assert_eq!((meta.latest_seq, meta.floor), (300, 300));

    // Who did what, by each node's own counters.
    assert_eq!(exported(&c, &api, "tidemark_chat_sends_total").await, 300);
    assert_eq!(exported(&c, &api, "tidemark_chat_recovered_total").await, 0);
    // Per partition and per shard: the api node has no series of either.
    for name in [
        "tidemark_chat_archived_records_total",
        "tidemark_chat_trimmed_total",
    ] {
        assert_eq!(metric(&c, &api, name).await, 0, "{name} on the api node");
    }
    assert!(exported(&c, &workers, "tidemark_chat_trimmed_total").await >= 300);
    assert_eq!(exported(&c, &workers, "tidemark_chat_sends_total").await, 0);
    assert!(exported(&c, &workers, "tidemark_chat_archived_records_total").await >= 300);

    // Reads through the api node span the archive (everything is trimmed) with every message.
    let (latest, all) = all_messages(&c, &api, &cid, "alice").await;
    let got: Vec<(u64, &str)> = all
        .iter()
        .map(|m| {
            (
                m["conversation_seq"].as_u64().unwrap(),
                m["body"].as_str().unwrap(),
            )
        })
        .collect();
    let bodies: Vec<String> = (1..=300).map(|i| format!("m{i}")).collect();
    let want: Vec<(u64, &str)> = (1..=300).zip(bodies.iter().map(String::as_str)).collect();
    assert_eq!((latest, got), (300, want));
    // A retry after trimming still gets its original ACK.
    let (st, retry) = send(&c, &api, &cid, "alice", "k5", "m5").await;
    assert_eq!((st, retry["conversation_seq"].as_u64()), (200, Some(5)));

    // The workers node answers the operational endpoints only.
    let healthz = c.get(workers.url("/healthz")).send().await.unwrap();
    assert_eq!(
        (healthz.status().as_u16(), healthz.text().await.unwrap()),
        (200, "ok\n".to_owned())
    );
    let readyz = c.get(workers.url("/readyz")).send().await.unwrap();
    assert_eq!(readyz.status().as_u16(), 200);
    let not_found = json!({ "error": { "code": "not_found", "message": "no such route" } });
    for (method, path) in [
        (reqwest::Method::GET, "/v1/conversations".to_owned()),
        (reqwest::Method::POST, "/v1/conversations".to_owned()),
        (
            reqwest::Method::GET,
            format!("/v1/conversations/{cid}/messages"),
        ),
        (reqwest::Method::GET, "/v1/openapi.json".to_owned()),
        (reqwest::Method::GET, "/dashboard".to_owned()),
    ] {
        let body = (method == reqwest::Method::POST).then(|| json!({ "members": ["a", "b"] }));
        let (st, v) = call(&c, method.clone(), &workers.url(&path), body).await;
        assert_eq!((st, v), (404, not_found.clone()), "{method} {path}");
    }

    archive.pool().close().await;
    drop(workers);
    drop(api);
    drop_database(&archive_db).await.unwrap();
    drop_database(&engines.links_db).await.unwrap();
    drop_database(&engines.rollups_db).await.unwrap();
}
