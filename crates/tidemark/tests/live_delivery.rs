//! Live delivery's property, end to end through the real `tidemark serve`: random sends over 20
//! conversations of 10 users, with random read-pointer moves; each user's client connects,
//! drops and resumes from its last event id at random points, the trimmer moves F under it,
//! and the server is killed (`kill -9`) and restarted in the middle. At the end every client
//! has received, per conversation, exactly seqs 1..=latest in order, each the message its SEND
//! was acknowledged with: no gap, no duplicate. On the embedded default and on Redis + Kafka +
//! MariaDB.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{KEY, TestServer, call, client, create_conversation, metric};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::Method;
use serde_json::{Value, json};
use tidemark_chat::testing::{KafkaBroker, RedisServer};
use tidemark_core::mysql::{drop_database, scratch_database, test_server_url};
use tokio::task::JoinHandle;

const USERS: usize = 10;
const CONVERSATIONS: usize = 20;
const SENDS: usize = 300;

/// What one user's client received over all its connections.
#[derive(Debug, Default)]
struct Received {
    /// Per conversation, the `(seq, message_id)` of each message event, in arrival order.
    messages: BTreeMap<String, Vec<(u64, String)>>,
    /// The id of the last event (the position to resume from).
    last_id: String,
}

/// Reads one connection's events into `log` until the server ends it or the task is aborted.
async fn follow(url: String, since: String, log: Arc<Mutex<Received>>) {
    let resp = reqwest::Client::new()
        .get(url)
        .query(&[("since", since)])
        .bearer_auth(KEY)
        .send()
        .await;
    let Ok(mut resp) = resp else { return };
    if resp.status() != 200 {
        return;
    }
    let mut buf = String::new();
    while let Ok(Some(chunk)) = resp.chunk().await {
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let (mut name, mut id, mut data) = ("", None, "");
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    name = v;
                } else if let Some(v) = line.strip_prefix("id: ") {
                    id = Some(v);
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data = v;
                }
            }
            let mut log = log.lock().unwrap();
            if name == "message" {
                let v: Value = serde_json::from_str(data).unwrap();
                log.messages
                    .entry(v["conversation_id"].as_str().unwrap().to_owned())
                    .or_default()
                    .push((
                        v["conversation_seq"].as_u64().unwrap(),
                        v["message_id"].as_str().unwrap().to_owned(),
                    ));
            }
            assert_ne!(name, "reload", "nothing was deleted: {data}");
            if let Some(id) = id {
                log.last_id = id.to_owned();
            }
        }
    }
}

struct Client {
    user: String,
    log: Arc<Mutex<Received>>,
    task: Option<JoinHandle<()>>,
}

impl Client {
    fn connect(&mut self, s: &TestServer) {
        let since = {
            let log = self.log.lock().unwrap();
            if log.last_id.is_empty() {
                "v1".to_owned()
            } else {
                log.last_id.clone()
            }
        };
        let url = s.url(&format!("/v1/users/{}/stream", self.user));
        self.task = Some(tokio::spawn(follow(url, since, Arc::clone(&self.log))));
    }

    fn drop_connection(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }

    fn connected(&self) -> bool {
        self.task.as_ref().is_some_and(|t| !t.is_finished())
    }
}

/// SEND with retries across a restart (same `client_msg_id`: the retry gets the first ACK).
async fn send_acked(
    c: &reqwest::Client,
    base: &str,
    cid: &str,
    sender: &str,
    id: &str,
) -> (u64, String) {
    let url = format!("{base}/v1/conversations/{cid}/messages");
    let body = json!({"client_msg_id": id, "sender": sender, "body": format!("m {id}")});
    for _ in 0..200 {
        let resp = c.post(&url).bearer_auth(KEY).json(&body).send().await;
        if let Ok(resp) = resp
            && resp.status().is_success()
        {
            let v: Value = resp.json().await.unwrap();
            return (
                v["conversation_seq"].as_u64().unwrap(),
                v["message_id"].as_str().unwrap().to_owned(),
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("SEND {id} never acknowledged");
}

async fn delivery_property(s: &mut TestServer, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let c = client();
    let users: Vec<String> = (0..USERS).map(|i| format!("u{i}")).collect();
    let mut convs: Vec<(String, Vec<String>)> = Vec::new();
    for _ in 0..CONVERSATIONS {
        let a = rng.random_range(0..USERS);
        let b = (a + rng.random_range(1..USERS)) % USERS;
        let members = vec![users[a].clone(), users[b].clone()];
        let refs: Vec<&str> = members.iter().map(String::as_str).collect();
        convs.push((create_conversation(&c, s, &refs).await, members));
    }
    let mut clients: Vec<Client> = users
        .iter()
        .map(|u| Client {
            user: u.clone(),
            log: Arc::default(),
            task: None,
        })
        .collect();
    // Per conversation: seq → message id of its ACK.
    let mut acked: HashMap<String, BTreeMap<u64, String>> = HashMap::new();
    let restart_at = SENDS / 2;
    for i in 0..SENDS {
        if i == restart_at {
            s.kill9();
            s.spawn().await;
        }
        // Clients come and go; some stay away past a trim (hot_window 1 s).
        for cl in clients.iter_mut() {
            let roll = rng.random_range(0..100);
            if cl.connected() && roll < 4 {
                cl.drop_connection();
            } else if !cl.connected() && roll < 25 {
                cl.connect(s);
            }
        }
        // A few concurrent SENDs, to the same conversation now and then.
        let batch = rng.random_range(1..=3);
        let mut sends = Vec::new();
        for k in 0..batch {
            let (cid, members) = &convs[rng.random_range(0..CONVERSATIONS)];
            let sender = members[rng.random_range(0..2)].clone();
            let (cid, c, id, base) = (cid.clone(), c.clone(), format!("{i}-{k}"), s.base.clone());
            sends.push(async move {
                let ack = send_acked(&c, &base, &cid, &sender, &id).await;
                (cid, ack)
            });
        }
        for (cid, (seq, mid)) in futures::future::join_all(sends).await {
            acked.entry(cid).or_default().insert(seq, mid);
        }
        if rng.random_range(0..10) == 0 {
            let (cid, members) = &convs[rng.random_range(0..CONVERSATIONS)];
            if let Some((&seq, _)) = acked.get(cid).and_then(|m| m.last_key_value()) {
                let url = s.url(&format!("/v1/conversations/{cid}/read"));
                let (st, v) = call(
                    &c,
                    Method::PUT,
                    &url,
                    Some(json!({"user": members[0], "seq": seq})),
                )
                .await;
                assert!(st == 204 || st == 503, "{st} {v}");
            }
        }
        if i % 50 == 49 {
            tokio::time::sleep(Duration::from_millis(400)).await;
        }
    }
    // F moves under the clients (the counter restarts with the process: this one's trims).
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric(&c, s, "tidemark_chat_trimmed_total").await == 0 {
        assert!(Instant::now() < deadline, "F never moved");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Everyone reconnects and catches up.
    for cl in clients.iter_mut() {
        if !cl.connected() {
            cl.connect(s);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut missing = Vec::new();
        for cl in &clients {
            let log = cl.log.lock().unwrap();
            for (cid, members) in &convs {
                if !members.contains(&cl.user) {
                    continue;
                }
                let want = acked.get(cid).map_or(0, BTreeMap::len);
                let got = log.messages.get(cid).map_or(0, Vec::len);
                if got < want {
                    missing.push(format!("{} {cid}: {got}/{want}", cl.user));
                }
            }
        }
        if missing.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "seed {seed}: not delivered: {missing:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for cl in clients.iter_mut() {
        cl.drop_connection();
        let log = cl.log.lock().unwrap();
        for (cid, members) in &convs {
            let expected: Vec<(u64, String)> = if members.contains(&cl.user) {
                acked
                    .get(cid)
                    .map(|m| m.iter().map(|(s, id)| (*s, id.clone())).collect())
                    .unwrap_or_default()
            } else {
                Vec::new()
            };
            let got = log.messages.get(cid).cloned().unwrap_or_default();
            assert_eq!(
                got, expected,
                "seed {seed}: user {} conversation {cid}",
                cl.user
            );
            if let Some((latest, _)) = expected.last() {
                assert_eq!(*latest as usize, expected.len(), "seqs are dense");
            }
        }
    }
}

/// Fast trimming, so that F moves under the clients.
const FAST_TRIM: [(&str, &str); 4] = [
    ("TIDEMARK_CHAT__HOT_WINDOW", "1s"),
    ("TIDEMARK_CHAT__SAFETY_MARGIN", "100ms"),
    ("TIDEMARK_CHAT__TRIM_INTERVAL", "100ms"),
    ("TIDEMARK_CHAT__OUTBOX_RECOVERY_WINDOW", "500ms"),
];

fn seed() -> u64 {
    std::env::var("TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_client_gets_every_message_once_in_order_on_the_embedded_default() {
    let seed = seed();
    eprintln!("TEST_SEED={seed}");
    let mut s = TestServer::start(&FAST_TRIM).await;
    delivery_property(&mut s, seed).await;
    s.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_client_gets_every_message_once_in_order_on_redis_kafka_and_mariadb() {
    let seed = seed();
    eprintln!("TEST_SEED={seed}");
    let redis = RedisServer::start().unwrap();
    let broker = KafkaBroker::start().unwrap();
    let mysql = scratch_database(&test_server_url(), "tm_e2e_delivery")
        .await
        .unwrap();
    let mut env: Vec<(&str, String)> = vec![
        ("TIDEMARK_CHAT__HOT", redis.url()),
        ("TIDEMARK_CHAT__ARCHIVE", mysql.clone()),
        ("TIDEMARK_CHAT__OUTBOX", broker.url("tidemark.chat.outbox")),
    ];
    env.extend(FAST_TRIM.iter().map(|(k, v)| (*k, (*v).to_owned())));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut s = TestServer::start(&env).await;
    delivery_property(&mut s, seed).await;
    s.cleanup().await;
    drop_database(&mysql).await.unwrap();
}
