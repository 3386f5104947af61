//! Chat on three `tidemark serve` nodes sharing one set of production engines (DESIGN.md "Many
//! nodes"): two `api` nodes and one `all` node, a Redis Cluster of three masters as hot store,
//! a Kafka-protocol outbox of three partitions and a MariaDB archive (links and events on MariaDB and InfluxDB, as a
//! split role requires).
//!
//! Senders spread over the nodes while a reader pages through another; mid-load one `api`
//! node is killed (`kill -9`) and restarted, then the `all` node — the one holding every
//! partition and every shard lease — likewise. Checked afterwards: every acknowledged message
//! is in history with its seq and id, read through any node; retries answer the original ACK;
//! no seq is reused and history is dense; every partition is archived to its end and the hot
//! tier trimmed behind the watermark; every shard lease is held by the live `all` node.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use common::{Engines, KEY, TestServer, all_messages, client, create_conversation};
use serde_json::{Value, json};
use tidemark_chat::kafka::KafkaOutbox;
use tidemark_chat::ports::{HotStore, Outbox};
use tidemark_chat::redis::RedisHot;
use tidemark_chat::testing::{KafkaBroker, RedisCluster};
use tidemark_core::mysql::{drop_database, scratch_database, test_server_url};

const SENDERS: usize = 4;
const PER_SENDER: usize = 60;
const CONVERSATIONS: usize = 6;

/// The nodes' base URLs, as the senders see them (a restarted node gets a new port).
type Bases = Arc<RwLock<Vec<String>>>;

/// Sends `key` until a node acknowledges it, starting at node `first` and moving on to the
/// next whenever one does not answer; returns the ACK.
async fn send_somewhere(
    c: &reqwest::Client,
    bases: &Bases,
    first: usize,
    cid: &str,
    key: &str,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    for attempt in first.. {
        assert!(Instant::now() < deadline, "{key} was never acknowledged");
        let base = {
            let bases = bases.read().unwrap();
            bases[attempt % bases.len()].clone()
        };
        let sent = c
            .post(format!("{base}/v1/conversations/{cid}/messages"))
            .bearer_auth(KEY)
            .json(
                &json!({ "client_msg_id": key, "sender": "alice", "body": format!("body {key}") }),
            )
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        if let Ok(resp) = sent
            && matches!(resp.status().as_u16(), 200 | 201)
        {
            return resp.json().await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    unreachable!()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_keep_every_message_through_kill_9_of_any_node() {
    let redis = RedisCluster::start().unwrap();
    let broker = KafkaBroker::start().unwrap();
    let outbox_url = broker.url("tidemark.chat.cluster");
    let archive_db = scratch_database(&test_server_url(), "tm_e2e_cluster_chat")
        .await
        .unwrap();
    let engines = Engines::start().await;
    let mut shared: Vec<(String, String)> = engines.env();
    shared.extend(
        [
            ("TIDEMARK_CHAT__HOT", redis.url()),
            ("TIDEMARK_CHAT__OUTBOX", outbox_url.clone()),
            ("TIDEMARK_CHAT__OUTBOX_PARTITIONS", "3".into()),
            ("TIDEMARK_CHAT__ARCHIVE", archive_db.clone()),
            ("TIDEMARK_CHAT__HOT_WINDOW", "1s".into()),
            ("TIDEMARK_CHAT__OUTBOX_RECOVERY_WINDOW", "200ms".into()),
            ("TIDEMARK_CHAT__SAFETY_MARGIN", "100ms".into()),
            ("TIDEMARK_CHAT__TRIM_INTERVAL", "100ms".into()),
            ("TIDEMARK_CHAT__ARCHIVE_IDLE", "50ms".into()),
            ("TIDEMARK_CHAT__SHARD_LEASE", "2s".into()),
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
    let mut all = start("all").await;
    let mut api1 = start("api").await;
    let api2 = start("api").await;
    let bases: Bases = Arc::new(RwLock::new(vec![
        api1.base.clone(),
        api2.base.clone(),
        all.base.clone(),
    ]));
    let c = client();
    let mut cids = Vec::new();
    for _ in 0..CONVERSATIONS {
        cids.push(create_conversation(&c, &api2, &["alice", "bob"]).await);
    }

    // The load: each sender its own keys, spread over the nodes and conversations.
    let mut senders = Vec::new();
    for s in 0..SENDERS {
        let (c, bases, cids) = (c.clone(), Arc::clone(&bases), cids.clone());
        senders.push(tokio::spawn(async move {
            let mut acks = Vec::new();
            for i in 0..PER_SENDER {
                let cid = &cids[(s + i) % CONVERSATIONS];
                let key = format!("s{s}-{i}");
                let ack = send_somewhere(&c, &bases, s + i, cid, &key).await;
                acks.push((cid.clone(), key, ack));
            }
            acks
        }));
    }
    // A reader pages every conversation meanwhile, through the second api node.
    let reader = {
        let (c, base, cids) = (c.clone(), api2.base.clone(), cids.clone());
        tokio::spawn(async move {
            let mut pages = 0;
            for _ in 0..20 {
                for cid in &cids {
                    let r = c
                        .get(format!(
                            "{base}/v1/conversations/{cid}/messages?user=alice&limit=50"
                        ))
                        .bearer_auth(KEY)
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(r.status().as_u16(), 200, "a read during the load");
                    pages += 1;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            pages
        })
    };

    tokio::time::sleep(Duration::from_millis(800)).await;
    api1.kill9();
    api1.spawn().await;
    bases.write().unwrap()[0] = api1.base.clone();
    tokio::time::sleep(Duration::from_millis(800)).await;
    // The `all` node holds every partition (the api nodes run no archiver) and every shard.
    all.kill9();
    all.spawn().await;
    bases.write().unwrap()[2] = all.base.clone();

    let mut acks = Vec::new();
    for s in senders {
        acks.extend(s.await.unwrap());
    }
    assert_eq!(acks.len(), SENDERS * PER_SENDER);
    assert_eq!(reader.await.unwrap(), 20 * CONVERSATIONS);

    // Archived to the end of every partition, and trimmed.
    let hot = RedisHot::connect(&redis.url(), 1).await.unwrap();
    let outbox = KafkaOutbox::connect(&outbox_url, 3).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut archived = true;
        for p in 0..3 {
            let (_, high) = outbox.offsets(p).await.unwrap();
            // A partition no conversation hashed to has no position, and needs none.
            archived &= outbox.position("archiver", p).await.unwrap().unwrap_or(0) == high;
        }
        if archived && hot.hot_len().await.unwrap() == 0 {
            break;
        }
        if Instant::now() >= deadline {
            let mut ends = Vec::new();
            for p in 0..3 {
                ends.push((
                    outbox.offsets(p).await.unwrap(),
                    outbox.position("archiver", p).await.unwrap(),
                ));
            }
            panic!(
                "not archived and trimmed: hot {:?}, partitions (low, high) and positions {ends:?}",
                hot.hot_len().await
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Every ACK is in history with its seq and id, read through a node of its own; no seq is
    // given twice; history is dense; the floor reached the end.
    let mut by_cid: HashMap<String, BTreeMap<u64, (String, String)>> = HashMap::new();
    for (cid, key, ack) in &acks {
        let seq = ack["conversation_seq"].as_u64().unwrap();
        let id = ack["message_id"].as_str().unwrap().to_owned();
        let before = by_cid
            .entry(cid.clone())
            .or_default()
            .insert(seq, (key.clone(), id));
        assert!(before.is_none(), "seq {seq} of {cid} acknowledged twice");
    }
    let nodes = [&api1, &api2, &all];
    for (i, cid) in cids.iter().enumerate() {
        let node = nodes[i % nodes.len()];
        let (latest, messages) = all_messages(&c, node, cid, "alice").await;
        let got: BTreeMap<u64, (String, String)> = messages
            .iter()
            .map(|m| {
                let key = m["body"]
                    .as_str()
                    .unwrap()
                    .trim_start_matches("body ")
                    .to_owned();
                (
                    m["conversation_seq"].as_u64().unwrap(),
                    (key, m["message_id"].as_str().unwrap().to_owned()),
                )
            })
            .collect();
        assert_eq!(got, by_cid[cid], "{cid} read through {}", node.base);
        assert_eq!(latest, got.len() as u64, "{cid} is dense");
        let meta = hot.conversation("demo", cid).await.unwrap().unwrap();
        assert_eq!(meta.floor, latest, "{cid} trimmed to its end");
    }
    // Retries answer the original ACK, through any node.
    for (n, (cid, key, ack)) in acks.iter().step_by(37).enumerate() {
        let retry = send_somewhere(&c, &bases, n, cid, key).await;
        assert_eq!(
            (&retry["conversation_seq"], &retry["message_id"]),
            (&ack["conversation_seq"], &ack["message_id"])
        );
    }
    // Every shard lease is held by the live `all` node (its holder name carries its pid).
    let pid = format!("-{}-", all.child.as_ref().unwrap().id());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let holders = hot.lease_holders().await.unwrap();
        let stray: Vec<_> = holders
            .iter()
            .enumerate()
            .filter(|(_, h)| !h.as_deref().is_some_and(|h| h.contains(&pid)))
            .collect();
        if stray.is_empty() {
            assert_eq!(holders.len() as u32, hot.shards());
            break;
        }
        assert!(
            Instant::now() < deadline,
            "leases not the live node's: {stray:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    drop((api1, api2, all));
    drop_database(&archive_db).await.unwrap();
    drop_database(&engines.links_db).await.unwrap();
    drop_database(&engines.rollups_db).await.unwrap();
}
