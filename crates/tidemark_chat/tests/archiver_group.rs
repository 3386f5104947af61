//! Archivers of several nodes share the outbox's partitions through the broker's consumer group
//! (DESIGN.md "Many nodes"): each node archives the partitions it is assigned, a node that
//! leaves hands its partitions to the others, and a node that lost a partition cannot store a
//! position for it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tidemark_chat::ChatError;
use tidemark_chat::archiver::ARCHIVER_CONSUMER;
use tidemark_chat::archivers::Archivers;
use tidemark_chat::commit::staged_commit;
use tidemark_chat::config::ChatConfig;
use tidemark_chat::kafka::KafkaOutbox;
use tidemark_chat::metrics::ChatMetrics;
use tidemark_chat::model::{MessageClass, SendCommand};
use tidemark_chat::ports::{Archive, HotStore, Outbox};
use tidemark_chat::redis::RedisHot;
use tidemark_chat::sqlite::SqliteArchive;
use tidemark_chat::testing::{KafkaBroker, RedisServer};
use tidemark_core::clock::{SharedClock, SystemClock};
use tidemark_core::health::StoreHealth;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

const PARTITIONS: u32 = 3;

struct Node {
    outbox: Arc<dyn Outbox>,
    cancel: CancellationToken,
    tasks: JoinSet<()>,
}

impl Node {
    async fn start(url: &str, hot: &Arc<dyn HotStore>, archive: &Arc<dyn Archive>) -> Self {
        let outbox: Arc<dyn Outbox> =
            Arc::new(KafkaOutbox::connect(url, PARTITIONS).await.unwrap());
        let (cancel, mut tasks) = (CancellationToken::new(), JoinSet::new());
        Archivers::new(
            Arc::clone(&outbox),
            Arc::clone(archive),
            Arc::clone(hot),
            Arc::new(SystemClock) as SharedClock,
            500,
            Duration::from_millis(50),
            ChatMetrics::unregistered(),
            StoreHealth::default(),
        )
        .spawn(&mut tasks, &cancel)
        .await
        .unwrap();
        Self {
            outbox,
            cancel,
            tasks,
        }
    }

    async fn stop(mut self) {
        self.cancel.cancel();
        while self.tasks.join_next().await.is_some() {}
    }
}

/// Waits (up to 30 s) until `check` holds.
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check().await {
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn send(hot: &Arc<dyn HotStore>, outbox: &Arc<dyn Outbox>, from: usize, to: usize) {
    let params = ChatConfig::default().commit_params();
    let clock: SharedClock = Arc::new(SystemClock);
    for i in from..to {
        let cmd = SendCommand {
            tenant: "t".into(),
            conversation_id: format!("c{}", i % 6),
            sender: "u1".into(),
            client_msg_id: format!("k{i}"),
            body: format!("message {i}"),
            class: MessageClass::Standard,
        };
        staged_commit(hot.as_ref(), outbox.as_ref(), &clock, params, cmd)
            .await
            .unwrap();
    }
}

async fn archived(archive: &Arc<dyn Archive>) -> usize {
    let mut n = 0;
    for c in 0..6 {
        n += archive
            .index_range("t", &format!("c{c}"), 1, 1_000)
            .await
            .unwrap()
            .len();
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archivers_share_partitions_through_the_group_and_take_over_from_a_node_that_leaves() {
    let redis = RedisServer::start().unwrap();
    let broker = KafkaBroker::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = broker.url("group");
    let hot: Arc<dyn HotStore> = Arc::new(RedisHot::connect(&redis.url(), 4).await.unwrap());
    let archive: Arc<dyn Archive> =
        Arc::new(SqliteArchive::open(&dir.path().join("archive.db")).unwrap());
    for c in 0..6 {
        let members = ["u1".to_string(), "u2".to_string()];
        hot.create_conversation("t", &format!("c{c}"), &members, None, 0)
            .await
            .unwrap();
    }

    // Node a alone owns every partition.
    let a = Node::start(&url, &hot, &archive).await;
    assert_eq!(a.outbox.owned_partitions().await.unwrap(), vec![0, 1, 2]);

    // Node b joins: the group splits the partitions between the two, none twice.
    let b = Node::start(&url, &hot, &archive).await;
    eventually("the partitions split between a and b", async || {
        let (pa, pb) = (
            a.outbox.owned_partitions().await.unwrap(),
            b.outbox.owned_partitions().await.unwrap(),
        );
        let mut all: Vec<u32> = pa.iter().chain(&pb).copied().collect();
        all.sort_unstable();
        !pa.is_empty() && !pb.is_empty() && all == [0, 1, 2]
    })
    .await;
    send(&hot, &a.outbox, 0, 30).await;
    eventually("both nodes archive all 30", async || {
        archived(&archive).await == 30
    })
    .await;

    // A node that holds a partition of b's cannot store a position for it: fenced.
    let of_b = b.outbox.owned_partitions().await.unwrap()[0];
    assert!(matches!(
        a.outbox.store_position(ARCHIVER_CONSUMER, of_b, 0).await,
        Err(ChatError::PartitionLost { partition }) if partition == of_b
    ));

    // b leaves: a takes its partitions and archives what comes next in them.
    b.stop().await;
    eventually("a owns every partition again", async || {
        a.outbox.owned_partitions().await.unwrap() == [0, 1, 2]
    })
    .await;
    send(&hot, &a.outbox, 30, 60).await;
    eventually("a archives all 60", async || archived(&archive).await == 60).await;
    for p in 0..PARTITIONS {
        let (_, high) = a.outbox.offsets(p).await.unwrap();
        eventually(
            "every position reaches the end of its partition",
            async || a.outbox.position(ARCHIVER_CONSUMER, p).await.unwrap() == Some(high),
        )
        .await;
    }
    a.stop().await;
}
