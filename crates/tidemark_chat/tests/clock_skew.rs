//! Nodes whose clocks disagree share one hot store (Redis), one outbox (Kafka protocol) and one
//! archive (DESIGN.md "Many nodes": hybrid logical clocks; seed 000, step 3).
//!
//! Three committing nodes run 5 s behind, on time and 5 s ahead; midway the on-time node's wall
//! clock steps back 10 s. The archiver runs on the node 5 s ahead, so its watermark T is 5 s
//! ahead of real time; the trimmer runs there too, with no margins, so nothing but the clock
//! rules stands between a late-dated message and a trim. After the last watermark the slow node
//! commits more: those messages lie beyond the archiver's H0 and must stay hot.
//!
//! Checked: every acknowledged message is in the hot tier or the archive (nothing was trimmed
//! unarchived), with its original seq and id; `committed_at` never decreases along a
//! conversation's seqs; and once the archiver drains the outbox the archive holds everything.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tidemark_chat::archiver::Archiver;
use tidemark_chat::commit::staged_commit;
use tidemark_chat::config::ChatConfig;
use tidemark_chat::kafka::KafkaOutbox;
use tidemark_chat::metrics::ChatMetrics;
use tidemark_chat::model::{MessageClass, MessageRecord, SendCommand, SendOutcome};
use tidemark_chat::ports::{Archive, CommitParams, HotStore, Outbox};
use tidemark_chat::redis::RedisHot;
use tidemark_chat::sqlite::SqliteArchive;
use tidemark_chat::testing::{KafkaBroker, RedisServer};
use tidemark_chat::trimmer::Trimmer;
use tidemark_core::clock::{Clock, ManualClock, SharedClock};
use tidemark_core::hlc::HybridClock;

const START_MS: i64 = 1_800_000_000_000;
const CONVERSATIONS: usize = 8;

/// A node's wall clock: the shared real time plus the node's skew, which a test may change.
#[derive(Debug)]
struct SkewedClock {
    real: Arc<ManualClock>,
    skew_ms: AtomicI64,
}

impl Clock for SkewedClock {
    fn now_ms(&self) -> i64 {
        self.real.now_ms() + self.skew_ms.load(Ordering::SeqCst)
    }
}

struct Node {
    wall: Arc<SkewedClock>,
    clock: SharedClock,
}

fn node(real: &Arc<ManualClock>, skew_ms: i64) -> Node {
    let wall = Arc::new(SkewedClock {
        real: Arc::clone(real),
        skew_ms: AtomicI64::new(skew_ms),
    });
    let clock: SharedClock = Arc::new(HybridClock::new(Arc::clone(&wall) as SharedClock));
    Node { wall, clock }
}

fn cfg() -> ChatConfig {
    ChatConfig {
        hot_window: Duration::from_secs(1),
        outbox_recovery_window: Duration::ZERO,
        safety_margin: Duration::ZERO,
        trim_batch: 1_000,
        ..ChatConfig::default()
    }
}

struct Cluster {
    _redis: RedisServer,
    _broker: KafkaBroker,
    _dir: tempfile::TempDir,
    hot: Arc<dyn HotStore>,
    outbox: Arc<dyn Outbox>,
    archive: Arc<dyn Archive>,
    params: CommitParams,
    acked: Vec<MessageRecord>,
}

impl Cluster {
    async fn send(&mut self, node: &Node, i: usize) {
        let cmd = SendCommand {
            tenant: "t".into(),
            conversation_id: format!("c{}", i % CONVERSATIONS),
            sender: "u1".into(),
            client_msg_id: format!("k{i}"),
            body: format!("message {i}"),
            class: MessageClass::Standard,
        };
        let outcome = staged_commit(
            self.hot.as_ref(),
            self.outbox.as_ref(),
            &node.clock,
            self.params,
            cmd,
        )
        .await
        .expect("commit");
        match outcome {
            SendOutcome::Committed(record) => self.acked.push(record),
            other => panic!("a fresh send commits, got {other:?}"),
        }
    }

    /// Every acknowledged message, read back from wherever it is: the hot tier, else the
    /// archive. Panics naming the first one in neither.
    async fn read_back(&self, now_ms: i64) -> BTreeMap<String, Vec<MessageRecord>> {
        let mut by_conversation: BTreeMap<String, Vec<MessageRecord>> = BTreeMap::new();
        for c in 0..CONVERSATIONS {
            let cid = format!("c{c}");
            let meta = self.hot.conversation("t", &cid).await.unwrap().unwrap();
            let latest = meta.latest_seq;
            let hot = self
                .hot
                .hot_slice("t", &cid, 1, latest, now_ms)
                .await
                .unwrap();
            let mut records = hot.records;
            let seqs: Vec<u64> = (1..=latest)
                .filter(|s| !records.iter().any(|r| r.conversation_seq == *s))
                .collect();
            records.extend(self.archive.records("t", &cid, &seqs).await.unwrap());
            records.sort_by_key(|r| r.conversation_seq);
            by_conversation.insert(cid, records);
        }
        for ack in &self.acked {
            let found = by_conversation[&ack.conversation_id]
                .iter()
                .find(|r| r.conversation_seq == ack.conversation_seq);
            assert_eq!(
                found,
                Some(ack),
                "message {} of {} is in neither the hot tier nor the archive",
                ack.conversation_seq,
                ack.conversation_id
            );
        }
        by_conversation
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skewed_and_stepped_back_clocks_neither_trim_unarchived_nor_date_backwards() {
    let redis = RedisServer::start().unwrap();
    let broker = KafkaBroker::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let hot: Arc<dyn HotStore> = Arc::new(RedisHot::connect(&redis.url(), 4).await.unwrap());
    let outbox: Arc<dyn Outbox> =
        Arc::new(KafkaOutbox::connect(&broker.url("skew"), 1).await.unwrap());
    let archive: Arc<dyn Archive> =
        Arc::new(SqliteArchive::open(&dir.path().join("archive.db")).unwrap());
    let cfg = cfg();
    let mut cluster = Cluster {
        _redis: redis,
        _broker: broker,
        _dir: dir,
        hot: Arc::clone(&hot),
        outbox: Arc::clone(&outbox),
        archive: Arc::clone(&archive),
        params: cfg.commit_params(),
        acked: Vec::new(),
    };

    let real = Arc::new(ManualClock::new(START_MS));
    let (slow, on_time, fast) = (node(&real, -5_000), node(&real, 0), node(&real, 5_000));
    hot.hot_window_floor(1_000, fast.clock.now_ms())
        .await
        .unwrap();
    for c in 0..CONVERSATIONS {
        let members = ["u1".to_string(), "u2".to_string()];
        hot.create_conversation("t", &format!("c{c}"), &members, None, START_MS)
            .await
            .unwrap();
    }
    let metrics = ChatMetrics::unregistered();
    let mut archiver = Archiver::start(
        0,
        Arc::clone(&outbox),
        Arc::clone(&archive),
        Arc::clone(&hot),
        Arc::clone(&fast.clock),
        500,
        metrics.clone(),
    )
    .await
    .unwrap();
    let trimmer = Trimmer::new(
        Arc::clone(&hot),
        Some(Arc::clone(&outbox)),
        Some(Arc::clone(&archive)),
        Arc::clone(&fast.clock),
        cfg,
        metrics,
    );

    // The load: each message through the next node, 20 ms apart; the archiver and the trimmer
    // every 15 messages.
    let nodes = [&slow, &on_time, &fast];
    let mut trimmed = 0;
    for i in 0..120 {
        if i == 60 {
            on_time.wall.skew_ms.fetch_sub(10_000, Ordering::SeqCst);
        }
        cluster.send(nodes[i % 3], i).await;
        real.advance(20);
        if i % 15 == 14 {
            archiver.run_once().await.unwrap();
            trimmed += trimmer.run_once().await.unwrap().trimmed;
        }
    }
    // The last watermark, then more from the slow node: beyond H0, not archived.
    assert!(archiver.run_once().await.unwrap().watermark_published);
    for i in 120..135 {
        cluster.send(&slow, i).await;
        real.advance(20);
    }
    real.advance(2_000);
    trimmed += trimmer.run_once().await.unwrap().trimmed;
    assert!(trimmed > 0, "the trimmer trimmed behind the watermark");

    let history = cluster.read_back(fast.clock.now_ms()).await;
    for (cid, records) in &history {
        let seqs: Vec<u64> = records.iter().map(|r| r.conversation_seq).collect();
        assert_eq!(
            seqs,
            (1..=seqs.len() as u64).collect::<Vec<_>>(),
            "{cid} is dense"
        );
        for pair in records.windows(2) {
            assert!(
                pair[0].committed_at_ms <= pair[1].committed_at_ms,
                "{cid}: seq {} at {} ms, seq {} at {} ms",
                pair[0].conversation_seq,
                pair[0].committed_at_ms,
                pair[1].conversation_seq,
                pair[1].committed_at_ms
            );
        }
    }

    // Drained, the archive holds every message.
    while archiver.run_once().await.unwrap().archived > 0 {}
    for ack in &cluster.acked {
        let got = archive
            .records(&ack.tenant, &ack.conversation_id, &[ack.conversation_seq])
            .await
            .unwrap();
        assert_eq!(got, vec![ack.clone()]);
    }
    assert_eq!(cluster.acked.len(), 135);
}
