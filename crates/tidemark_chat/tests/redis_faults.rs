//! Fault test of the Redis hot store: `kill -9` of redis-server under load, then a
//! restart on the same AOF. No acknowledged message is lost, no seq is reused, and once the
//! recovery worker has finished what the crash left RESERVED the history is dense and holds
//! every client message exactly once.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tidemark_chat::metrics::ChatMetrics;
use tidemark_chat::model::{MessageClass, SendAck, SendCommand};
use tidemark_chat::reads::Anchor;
use tidemark_chat::recovery::Recovery;
use tidemark_chat::service::NewConversation;
use tidemark_chat::testing::RedisServer;
use tidemark_chat::{ChatConfig, ChatService, ChatStores};
use tidemark_core::clock::{SharedClock, SystemClock};

const SENDERS: usize = 8;
const PER_SENDER: usize = 150;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_of_redis_under_load_loses_no_acknowledged_message_and_reuses_no_seq() {
    let mut redis = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = ChatConfig {
        hot: redis.url(),
        ..ChatConfig::default()
    };
    let stores = ChatStores::open(dir.path(), &cfg).await.unwrap();
    let clock: SharedClock = Arc::new(SystemClock);
    let svc = ChatService::new(
        stores.clone(),
        Arc::clone(&clock),
        cfg.clone(),
        ChatMetrics::unregistered(),
    );
    let members: Vec<String> = (0..SENDERS).map(|i| format!("s{i}")).collect();
    let cid = svc
        .create_conversation(
            "t",
            NewConversation {
                members: members.clone(),
                listing_id: None,
                client_conversation_id: None,
                key_owner: None,
            },
        )
        .await
        .unwrap()
        .conversation_id;

    // Each sender sends its messages one after another and retries a failed send with the same
    // client_msg_id until it is acknowledged, as a client would.
    let acked = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for sender in members.clone() {
        let (svc, cid, acked, failures) = (
            svc.clone(),
            cid.clone(),
            Arc::clone(&acked),
            Arc::clone(&failures),
        );
        tasks.push(tokio::spawn(async move {
            let mut acks: Vec<(String, SendAck)> = Vec::new();
            for i in 0..PER_SENDER {
                let key = format!("{sender}-{i}");
                let cmd = SendCommand {
                    tenant: "t".into(),
                    conversation_id: cid.clone(),
                    sender: sender.clone(),
                    client_msg_id: key.clone(),
                    body: format!("body {key}"),
                    class: MessageClass::Standard,
                };
                loop {
                    match svc.send(cmd.clone()).await {
                        Ok(outcome) => {
                            acks.push((key.clone(), outcome.ack()));
                            acked.fetch_add(1, Ordering::SeqCst);
                            break;
                        }
                        Err(e) => {
                            assert!(e.is_retryable(), "{e}");
                            failures.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                }
            }
            acks
        }));
    }

    // kill -9 once a third is acknowledged; restart on the same AOF 300 ms later.
    while acked.load(Ordering::SeqCst) < SENDERS * PER_SENDER / 3 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    redis.kill();
    let acked_before_kill = acked.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.restart().unwrap();

    let mut by_key: BTreeMap<String, SendAck> = BTreeMap::new();
    for t in tasks {
        for (key, ack) in t.await.unwrap() {
            assert!(by_key.insert(key, ack).is_none());
        }
    }
    assert_eq!(by_key.len(), SENDERS * PER_SENDER);
    assert!(failures.load(Ordering::SeqCst) > 0, "the kill was seen");
    assert!(
        acked_before_kill < SENDERS * PER_SENDER,
        "the kill came under load"
    );
    let seqs: HashSet<u64> = by_key.values().map(|a| a.conversation_seq).collect();
    assert_eq!(seqs.len(), by_key.len(), "no seq acknowledged twice");

    // Finish what the crash left RESERVED, then read the whole history back.
    let recovery = Recovery::new(
        Arc::clone(&stores.hot),
        stores.outbox.clone().unwrap(),
        Arc::clone(&clock),
        cfg.commit_params(),
        Duration::ZERO,
        ChatMetrics::unregistered(),
    );
    recovery.run_once().await.unwrap();
    let latest = svc.conversation("t", &cid).await.unwrap().latest_seq;
    let mut history = Vec::new();
    let mut after = 0;
    while after < latest {
        let page = svc
            .history("t", &cid, "s0", Anchor::After(after), 200)
            .await
            .unwrap();
        history.extend(page.messages);
        after += 200;
    }
    let got: Vec<u64> = history.iter().map(|r| r.conversation_seq).collect();
    assert_eq!(got, (1..=latest).collect::<Vec<_>>(), "dense history");
    assert_eq!(
        latest as usize,
        SENDERS * PER_SENDER,
        "every seq belongs to one client message: none was allocated twice for a key"
    );
    for r in &history {
        let ack = &by_key[&r.client_msg_id];
        assert_eq!(
            (r.conversation_seq, &r.message_id, &r.body),
            (
                ack.conversation_seq,
                &ack.message_id,
                &format!("body {}", r.client_msg_id)
            )
        );
    }
}
