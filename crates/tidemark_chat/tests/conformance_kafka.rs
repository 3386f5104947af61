//! The outbox conformance suite (`tidemark_chat::conformance::outbox`) on a real
//! Kafka-protocol broker (a private tansu, see `tidemark_chat::testing::KafkaBroker`).

use std::sync::Arc;

use tidemark_chat::ChatError;
use tidemark_chat::conformance;
use tidemark_chat::kafka::KafkaOutbox;
use tidemark_chat::ports::Outbox;
use tidemark_chat::testing::KafkaBroker;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_outbox() {
    let broker = KafkaBroker::start().unwrap();
    let outbox = KafkaOutbox::connect(&broker.url("tidemark.chat.outbox"), 1)
        .await
        .unwrap();
    conformance::outbox(Arc::new(outbox)).await;
}

/// The same suite on a topic of three partitions: each conversation's records in its own
/// partition, offsets and positions apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_outbox_of_three_partitions() {
    let broker = KafkaBroker::start().unwrap();
    let outbox = KafkaOutbox::connect(&broker.url("tidemark.chat.outbox3"), 3)
        .await
        .unwrap();
    assert_eq!(outbox.partitions(), 3);
    conformance::outbox(Arc::new(outbox)).await;
}

/// The partition count is fixed when the topic is created: another count is refused, naming
/// both; and there is no outbox of 0 partitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_partition_count_than_the_topics_is_refused() {
    let broker = KafkaBroker::start().unwrap();
    let url = broker.url("tidemark.chat.fixed");
    KafkaOutbox::connect(&url, 2).await.unwrap();
    let err = KafkaOutbox::connect(&url, 3).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        ChatError::Invalid(
            "outbox topic tidemark.chat.fixed has 2 partitions, chat.outbox_partitions is 3: the \
             count is fixed when the topic is created (a conversation's records must stay in \
             one partition); set chat.outbox_partitions = 2"
                .into()
        )
        .to_string()
    );
    assert!(matches!(
        KafkaOutbox::connect(&url, 0).await,
        Err(ChatError::Invalid(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_url_or_a_down_broker_is_a_clear_error() {
    let err = KafkaOutbox::connect("kafka://127.0.0.1:9092", 1)
        .await
        .unwrap_err();
    assert!(matches!(err, ChatError::Invalid(_)), "{err:?}");
    let err = KafkaOutbox::connect("kafka://127.0.0.1:1/t", 1)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ChatError::Store(e) if e.kind() == tidemark_core::store::ErrorKind::Unavailable && e.backend() == "kafka"),
        "{err:?}"
    );
}
