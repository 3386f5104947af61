//! An outbox of three partitions (Kafka protocol) between a Redis hot store and an archive
//! (DESIGN.md "Many nodes": outbox partitions). Each partition has its own archiver, position
//! and watermark; the trimmer's T is the least of them, so a stalled partition holds every
//! trim back, and its lag shows in `tidemark_chat_archive_lag_seconds{partition}`.

use std::sync::Arc;
use std::time::Duration;

use tidemark_chat::archiver::{ARCHIVER_CONSUMER, Archiver};
use tidemark_chat::commit::staged_commit;
use tidemark_chat::config::ChatConfig;
use tidemark_chat::kafka::KafkaOutbox;
use tidemark_chat::metrics::ChatMetrics;
use tidemark_chat::model::{MessageClass, SendCommand, SendOutcome};
use tidemark_chat::ports::{Archive, HotStore, Outbox, partition_of};
use tidemark_chat::redis::RedisHot;
use tidemark_chat::sqlite::SqliteArchive;
use tidemark_chat::testing::{KafkaBroker, RedisServer};
use tidemark_chat::trimmer::Trimmer;
use tidemark_core::clock::{ManualClock, SharedClock};

const START_MS: i64 = 1_800_000_000_000;
const PARTITIONS: u32 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_partition_is_archived_on_its_own_and_a_stalled_one_holds_trimming_back() {
    let redis = RedisServer::start().unwrap();
    let broker = KafkaBroker::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let hot: Arc<dyn HotStore> = Arc::new(RedisHot::connect(&redis.url(), 4).await.unwrap());
    let outbox: Arc<dyn Outbox> = Arc::new(
        KafkaOutbox::connect(&broker.url("partitions"), PARTITIONS)
            .await
            .unwrap(),
    );
    let archive: Arc<dyn Archive> =
        Arc::new(SqliteArchive::open(&dir.path().join("archive.db")).unwrap());
    let wall = Arc::new(ManualClock::new(START_MS));
    let clock: SharedClock = Arc::clone(&wall) as SharedClock;
    let cfg = ChatConfig {
        hot_window: Duration::from_secs(1),
        outbox_recovery_window: Duration::ZERO,
        safety_margin: Duration::ZERO,
        ..ChatConfig::default()
    };
    let params = cfg.commit_params();
    hot.hot_window_floor(params.hot_window_ms, START_MS)
        .await
        .unwrap();

    // Six conversations, two messages each; every partition gets some.
    let cids: Vec<String> = (0..6).map(|i| format!("c{i}")).collect();
    let mut per_partition = [0u64; PARTITIONS as usize];
    for cid in &cids {
        let members = ["u1".to_string(), "u2".to_string()];
        hot.create_conversation("t", cid, &members, None, START_MS)
            .await
            .unwrap();
        for k in 0..2 {
            let cmd = SendCommand {
                tenant: "t".into(),
                conversation_id: cid.clone(),
                sender: "u1".into(),
                client_msg_id: format!("k{k}"),
                body: format!("{cid} {k}"),
                class: MessageClass::Standard,
            };
            let outcome = staged_commit(hot.as_ref(), outbox.as_ref(), &clock, params, cmd)
                .await
                .unwrap();
            assert!(matches!(outcome, SendOutcome::Committed(_)));
            per_partition[partition_of("t", cid, PARTITIONS) as usize] += 1;
        }
    }
    assert!(per_partition.iter().all(|n| *n > 0), "{per_partition:?}");
    for p in 0..PARTITIONS {
        assert_eq!(
            outbox.offsets(p).await.unwrap(),
            (0, per_partition[p as usize]),
            "partition {p} holds its conversations' records"
        );
    }

    let metrics = ChatMetrics::unregistered();
    let trimmer = Trimmer::new(
        Arc::clone(&hot),
        Some(Arc::clone(&outbox)),
        Some(Arc::clone(&archive)),
        Arc::clone(&clock),
        cfg,
        metrics.clone(),
    );
    let mut archivers = Vec::new();
    for p in 0..PARTITIONS {
        archivers.push(
            Archiver::start(
                p,
                Arc::clone(&outbox),
                Arc::clone(&archive),
                Arc::clone(&hot),
                Arc::clone(&clock),
                500,
                metrics.clone(),
            )
            .await
            .unwrap(),
        );
    }

    // Partitions 0 and 1 archive; partition 2 stalls. Its lag grows, T stays unset and
    // nothing is trimmed, however late.
    wall.advance(5_000);
    for archiver in &mut archivers[..2] {
        let out = archiver.run_once().await.unwrap();
        assert_eq!(
            out.archived as u64,
            per_partition[archiver.partition() as usize]
        );
        assert!(out.watermark_published);
        assert_eq!(
            outbox
                .position(ARCHIVER_CONSUMER, archiver.partition())
                .await
                .unwrap(),
            Some(per_partition[archiver.partition() as usize])
        );
    }
    let published = hot.watermarks().await.unwrap();
    assert_eq!(published.keys().copied().collect::<Vec<_>>(), vec![0, 1]);
    wall.advance(5_000);
    let out = trimmer.run_once().await.unwrap();
    assert_eq!(
        out.trimmed, 0,
        "a partition without a watermark holds trimming back"
    );
    assert_eq!(out.archive_lag_ms, 10_000);
    assert_eq!(metrics.archive_lag(2).get(), 10);
    assert_eq!(
        (metrics.archive_lag(0).get(), metrics.archive_lag(1).get()),
        (0, 0)
    );
    assert_eq!(hot.hot_len().await.unwrap(), 12);

    // Partition 2 catches up: T is the least watermark, and everything behind it goes.
    let out = archivers[2].run_once().await.unwrap();
    assert_eq!(out.archived as u64, per_partition[2]);
    let t = tidemark_chat::archiver::watermark(&hot.watermarks().await.unwrap(), PARTITIONS);
    assert_eq!(t, Some(START_MS + 5_000));
    wall.advance(2_000);
    let out = trimmer.run_once().await.unwrap();
    assert_eq!((out.trimmed, out.archive_lag_ms), (12, 0));
    assert_eq!(metrics.watermark_ms.get(), START_MS + 5_000);
    for cid in &cids {
        let entries = archive.index_range("t", cid, 1, 2).await.unwrap();
        assert_eq!(entries.len(), 2, "{cid} is archived whole");
    }
}
