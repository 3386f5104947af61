//! The Kafka-protocol outbox after a restart (a second `KafkaOutbox` on the same topic): it
//! reads on from the position the first stored, and a fetch that starts inside a record batch
//! (two records appended in one call share a batch) returns exactly the asked offsets — tansu
//! 0.6 answers such a fetch with the next batch, which a reader must never take for the next
//! offset.

use tidemark_chat::kafka::KafkaOutbox;
use tidemark_chat::model::{MessageClass, MessageRecord, SendCommand};
use tidemark_chat::ports::Outbox;
use tidemark_chat::testing::KafkaBroker;

fn rec(s: u64) -> MessageRecord {
    SendCommand {
        tenant: "t".into(),
        conversation_id: "c".into(),
        sender: "u".into(),
        client_msg_id: format!("k{s}"),
        body: format!("b{s}"),
        class: MessageClass::Standard,
    }
    .into_record(s, 1_800_000_000_000 + s as i64)
}

fn seqs(batch: &[(u64, MessageRecord)]) -> Vec<(u64, u64)> {
    batch
        .iter()
        .map(|(o, r)| (*o, r.conversation_seq))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_outbox_reads_on_from_the_stored_position_also_inside_a_batch() {
    let broker = KafkaBroker::start().unwrap();
    let url = broker.url("restart");
    let first = KafkaOutbox::connect(&url, 1).await.unwrap();
    for s in 1..=6 {
        first.append(&[rec(s)]).await.unwrap();
    }
    assert_eq!(
        seqs(&first.fetch(0, 0, 100).await.unwrap()),
        (0..6).map(|o| (o, o + 1)).collect::<Vec<_>>()
    );
    first.store_position("archiver", 0, 6).await.unwrap();
    drop(first);

    let second = KafkaOutbox::connect(&url, 1).await.unwrap();
    second.append(&[rec(8), rec(7)]).await.unwrap();
    second.append(&[rec(6)]).await.unwrap();
    assert_eq!(second.offsets(0).await.unwrap(), (0, 9));
    assert_eq!(second.position("archiver", 0).await.unwrap(), Some(6));
    assert_eq!(
        seqs(&second.fetch(0, 6, 100).await.unwrap()),
        vec![(6, 8), (7, 7), (8, 6)]
    );
    assert_eq!(seqs(&second.fetch(0, 7, 1).await.unwrap()), vec![(7, 7)]);
    assert_eq!(seqs(&second.fetch(0, 8, 5).await.unwrap()), vec![(8, 6)]);
    assert_eq!(
        seqs(&second.fetch(0, 6, 2).await.unwrap()),
        vec![(6, 8), (7, 7)]
    );
}

/// Several records appended in one call, by the first producer and by a second one, all land
/// in the log at consecutive offsets (a broker that kept one offset of a batch and let the next
/// overwrite the rest would lose acknowledged messages once the trimmer passed them; see
/// `tidemark_chat::kafka::new_producer`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_appended_in_one_call_all_land_in_the_log() {
    let broker = KafkaBroker::start().unwrap();
    let url = broker.url("batches");
    let first = KafkaOutbox::connect(&url, 1).await.unwrap();
    for s in 1..=5 {
        first.append(&[rec(s)]).await.unwrap();
    }
    first.append(&[rec(6), rec(7), rec(8)]).await.unwrap();
    assert_eq!(first.offsets(0).await.unwrap(), (0, 8));
    let second = KafkaOutbox::connect(&url, 1).await.unwrap();
    second.append(&[rec(9), rec(10), rec(11)]).await.unwrap();
    assert_eq!(second.offsets(0).await.unwrap(), (0, 11));
    assert_eq!(
        seqs(&second.fetch(0, 0, 100).await.unwrap()),
        (1..=11).map(|s| (s - 1, s)).collect::<Vec<_>>()
    );
}

/// What the broker acknowledged outlives a `kill -9` of the broker: records appended singly
/// and in batches, and a stored position; appends go on at the next offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_records_and_positions_outlive_a_kill_9_of_the_broker() {
    let mut broker = KafkaBroker::start().unwrap();
    let url = broker.url("durable");
    let outbox = KafkaOutbox::connect(&url, 1).await.unwrap();
    outbox.append(&[rec(1)]).await.unwrap();
    outbox.append(&[rec(2), rec(3), rec(4)]).await.unwrap();
    outbox.store_position("archiver", 0, 2).await.unwrap();
    drop(outbox);

    broker.restart().unwrap();
    let outbox = KafkaOutbox::connect(&url, 1).await.unwrap();
    assert_eq!(outbox.offsets(0).await.unwrap(), (0, 4));
    assert_eq!(outbox.position("archiver", 0).await.unwrap(), Some(2));
    outbox.append(&[rec(5), rec(6)]).await.unwrap();
    assert_eq!(
        seqs(&outbox.fetch(0, 0, 100).await.unwrap()),
        (1..=6).map(|s| (s - 1, s)).collect::<Vec<_>>()
    );
}
