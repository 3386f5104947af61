//! The outbox conformance suite (`tidemark_chat::conformance::outbox`) on a real
//! Kafka-protocol broker (a private tansu, see `tidemark_chat::testing::KafkaBroker`).

use std::sync::Arc;

use tidemark_chat::ChatError;
use tidemark_chat::conformance;
use tidemark_chat::kafka::KafkaOutbox;
use tidemark_chat::testing::KafkaBroker;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_outbox() {
    let broker = KafkaBroker::start().unwrap();
    let outbox = KafkaOutbox::connect(&broker.url("tidemark.chat.outbox"))
        .await
        .unwrap();
    conformance::outbox(Arc::new(outbox)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_url_or_a_down_broker_is_a_clear_error() {
    let err = KafkaOutbox::connect("kafka://127.0.0.1:9092")
        .await
        .unwrap_err();
    assert!(matches!(err, ChatError::Invalid(_)), "{err:?}");
    let err = KafkaOutbox::connect("kafka://127.0.0.1:1/t")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ChatError::Store(e) if e.kind() == tidemark_core::store::ErrorKind::Unavailable && e.backend() == "kafka"),
        "{err:?}"
    );
}
