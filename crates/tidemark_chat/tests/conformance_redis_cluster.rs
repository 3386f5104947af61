//! The hot-store conformance suites (`tidemark_chat::conformance`) on a Redis Cluster of three
//! masters (DESIGN.md "Backends": Redis Cluster, keys hash-tagged per shard), unchanged; and
//! the start-up refusal of a cluster with one master that is not durable, naming that master.

use std::sync::Arc;

use tidemark_chat::ChatError;
use tidemark_chat::conformance;
use tidemark_chat::redis::RedisHot;
use tidemark_chat::testing::RedisCluster;

/// Each suite on a cluster of its own: the suites start from an empty store.
async fn hot(cluster: &RedisCluster) -> Arc<RedisHot> {
    Arc::new(RedisHot::connect(&cluster.url(), 4).await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_hot_store() {
    let cluster = RedisCluster::start().unwrap();
    conformance::hot_store(hot(&cluster).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_hot_store_clock() {
    let cluster = RedisCluster::start().unwrap();
    conformance::hot_store_clock(hot(&cluster).await, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_archivable_pages() {
    let cluster = RedisCluster::start().unwrap();
    conformance::archivable_pages(hot(&cluster).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_shard_leases() {
    let cluster = RedisCluster::start().unwrap();
    conformance::shard_leases(hot(&cluster).await, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_master_without_appendfsync_always_is_refused_naming_it() {
    let cluster = RedisCluster::start().unwrap();
    assert!(
        cluster
            .cli_on(1, &["config", "set", "appendfsync", "everysec"])
            .contains("OK")
    );
    match RedisHot::connect(&cluster.url(), 1).await.unwrap_err() {
        ChatError::NotDurable {
            url,
            setting,
            value,
            required,
        } => assert_eq!(
            (url, setting.as_str(), value.as_str(), required.as_str()),
            (cluster.node_url(1), "appendfsync", "everysec", "always")
        ),
        other => panic!("expected NotDurable, got {other:?}"),
    }
}
