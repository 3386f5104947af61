//! The hot-store conformance suite (`tidemark_chat::conformance::hot_store`) on a private
//! `redis-server` with durable AOF, and the start-up refusal of a Redis that is not durable.

use std::sync::Arc;

use tidemark_chat::ChatError;
use tidemark_chat::conformance;
use tidemark_chat::redis::RedisHot;
use tidemark_chat::testing::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_shard_leases() {
    let server = RedisServer::start().unwrap();
    let hot = RedisHot::connect(&server.url(), 2).await.unwrap();
    conformance::shard_leases(Arc::new(hot), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_archivable_pages() {
    let server = RedisServer::start().unwrap();
    let hot = RedisHot::connect(&server.url(), 2).await.unwrap();
    conformance::archivable_pages(Arc::new(hot)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_hot_store() {
    let server = RedisServer::start().unwrap();
    let hot = RedisHot::connect(&server.url(), 8).await.unwrap();
    assert_eq!(hot.pool_size(), 8);
    conformance::hot_store(Arc::new(hot)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_hot_store_clock() {
    let server = RedisServer::start().unwrap();
    let hot = RedisHot::connect(&server.url(), 2).await.unwrap();
    conformance::hot_store_clock(Arc::new(hot), true).await;
}

/// The machine's Redis on 6379 keeps nothing on disk (SERVICES.md): it must be refused, with
/// the setting and its value named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_without_durable_aof_is_refused() {
    let err = RedisHot::connect("redis://127.0.0.1:6379", 2)
        .await
        .unwrap_err();
    match &err {
        ChatError::NotDurable {
            setting,
            value,
            required,
            ..
        } => assert_eq!(
            (setting.as_str(), value.as_str(), required.as_str()),
            ("appendonly", "no", "yes")
        ),
        other => panic!("expected NotDurable, got {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "refusing the hot store at redis://127.0.0.1:6379: appendonly is \"no\", Tidemark needs \"yes\" (DESIGN.md, Durability)"
    );
}

/// Each of the three settings is checked on its own: a private server that is durable but for
/// one setting is refused, naming that setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_durability_setting_is_checked() {
    for (args, setting, value) in [
        (["--appendfsync", "everysec"], "appendfsync", "everysec"),
        (
            ["--no-appendfsync-on-rewrite", "yes"],
            "no-appendfsync-on-rewrite",
            "yes",
        ),
    ] {
        let server = RedisServer::start_with(&args).unwrap();
        match RedisHot::connect(&server.url(), 1).await.unwrap_err() {
            ChatError::NotDurable {
                setting: s,
                value: v,
                ..
            } => assert_eq!((s.as_str(), v.as_str()), (setting, value)),
            other => panic!("expected NotDurable, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_url_or_a_down_server_is_a_clear_error() {
    let err = RedisHot::connect("http://x", 1).await.unwrap_err();
    assert!(matches!(err, ChatError::Invalid(_)), "{err:?}");
    let err = RedisHot::connect("redis://127.0.0.1:1", 1)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ChatError::Store(e) if e.kind() == tidemark_core::store::ErrorKind::Unavailable && e.backend() == "redis"),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("redis: connecting to redis://127.0.0.1:1: "),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_hot_only_commit() {
    let server = RedisServer::start().unwrap();
    conformance::hot_only_commit(Arc::new(RedisHot::connect(&server.url(), 8).await.unwrap()))
        .await;
}

/// The first start records the key layout's version; a server whose layout a newer build
/// wrote is refused, naming the server and both versions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_of_a_newer_layout_is_refused() {
    use tidemark_chat::redis::keys::LAYOUT_VERSION;

    let server = RedisServer::start().unwrap();
    drop(RedisHot::connect(&server.url(), 1).await.unwrap());
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let recorded: i64 = redis::cmd("HGET")
        .arg("tm:meta")
        .arg("layout_version")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(recorded, LAYOUT_VERSION);
    let _: () = redis::cmd("HSET")
        .arg("tm:meta")
        .arg("layout_version")
        .arg(LAYOUT_VERSION + 1)
        .query_async(&mut conn)
        .await
        .unwrap();
    let err = RedisHot::connect(&server.url(), 1)
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!(
            "redis: redis at {} has key layout version 2, this build knows up to 1: use a newer tidemark",
            server.url()
        )
    );
}

/// A Redis past its `maxmemory` (policy `noeviction`) refuses writes with `OOM command not
/// allowed`: a store error of kind Full, retryable; writes go on once memory is allowed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_out_of_memory_is_full() {
    use tidemark_chat::ports::HotStore;
    use tidemark_core::store::ErrorKind;
    let server = RedisServer::start().unwrap();
    let hot = RedisHot::connect(&server.url(), 1).await.unwrap();
    let mut admin = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let set_maxmemory = |bytes: &'static str| {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(bytes)
            .clone()
    };
    let () = set_maxmemory("1").query_async(&mut admin).await.unwrap();
    let members = vec!["a".to_string(), "b".to_string()];
    let err = hot
        .create_conversation("t", "c1", &members, None, 0)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ChatError::Store(e) if e.kind() == ErrorKind::Full && e.backend() == "redis"),
        "{err:?}"
    );
    assert!(err.is_retryable());
    assert!(
        err.to_string()
            .starts_with("redis: OOM: command not allowed"),
        "{err}"
    );
    let () = set_maxmemory("0").query_async(&mut admin).await.unwrap();
    assert!(
        hot.create_conversation("t", "c1", &members, None, 0)
            .await
            .unwrap()
    );
}
