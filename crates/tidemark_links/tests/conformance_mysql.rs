//! The link-store conformance suite on MariaDB (the machine's server, `TEST_MYSQL_URL`;
//! a scratch database per test), and the MariaDB-only promises: a lookup touches exactly one
//! partition, rows are compressed.

use std::sync::Arc;

use sqlx::Row;
use tidemark_core::day::UtcDay;
use tidemark_core::mysql::{drop_database, scratch_database, test_server_url};
use tidemark_links::conformance;
use tidemark_links::id::IdCodec;
use tidemark_links::model::{LinkRecord, Lookup};
use tidemark_links::mysql::{LOOKUP_SQL, MysqlLinks};
use tidemark_links::rewrite::LinkKind;
use tidemark_links::store::LinkStore;

async fn scratch(prefix: &str) -> (String, MysqlLinks) {
    let url = scratch_database(&test_server_url(), prefix).await.unwrap();
    let store = MysqlLinks::connect(&url, 4).await.unwrap();
    (url, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_link_store() {
    let (url, store) = scratch("tm_links").await;
    let store = Arc::new(store);
    conformance::link_store(Arc::clone(&store) as Arc<dyn LinkStore>).await;
    store.pool().close().await;
    drop_database(&url).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_reads_exactly_the_partition_of_its_ids_day() {
    let (url, store) = scratch("tm_links_plan").await;
    let codec = IdCodec::new([1; 16]);
    let first = UtcDay::parse("2026-11-25").unwrap();
    let days: Vec<UtcDay> = (0..5).map(|i| first.plus(i)).collect();
    store.create_partitions(&days).await.unwrap();
    let mut records = Vec::new();
    for (i, day) in days.iter().enumerate() {
        for j in 0..50 {
            let id = codec.generate(day.start_ms() + 1_000 * j);
            records.push(LinkRecord {
                link_id: id.as_str().to_owned(),
                url: format!("https://shop.example/item/{i}{j}"),
                email: format!("r{j}@example.com"),
                mailing_id: "m1".into(),
                position: Some(j as u32),
                kind: LinkKind::Link,
                created_ms: id.created_ms(),
            });
        }
    }
    store.insert(records.clone()).await.unwrap();
    let target = &records[2 * 50 + 7];
    let id = codec.parse(&target.link_id).unwrap();
    assert_eq!(id.day(), days[2]);
    assert_eq!(
        store.lookup(&id, first).await.unwrap(),
        Lookup::Found(target.clone())
    );

    let plan = sqlx::query(&format!("EXPLAIN PARTITIONS {LOOKUP_SQL}"))
        .bind(id.day().to_string())
        .bind(id.as_str())
        .fetch_one(store.pool())
        .await
        .unwrap();
    let partitions: Option<String> = plan.try_get("partitions").unwrap();
    let key: Option<String> = plan.try_get("key").unwrap();
    assert_eq!(partitions.as_deref(), Some("p20261127"), "one partition");
    assert_eq!(key.as_deref(), Some("link_day"), "one unique-key read");

    // The table is compressed, partitioned by range, one partition per day.
    let row = sqlx::query(
        "SELECT ROW_FORMAT, CREATE_OPTIONS FROM information_schema.TABLES
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'links'",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    let format: String = row.try_get(0).unwrap();
    let options: String = row.try_get(1).unwrap();
    assert_eq!(format, "Compressed");
    assert!(options.contains("partitioned"), "{options}");
    assert_eq!(store.partitions().await.unwrap(), days);
    store.pool().close().await;
    drop_database(&url).await.unwrap();
}

async fn schema_version(store: &MysqlLinks) -> Option<i64> {
    sqlx::query_scalar("SELECT version FROM tidemark_schema_version WHERE store = 'links'")
        .fetch_optional(store.pool())
        .await
        .unwrap()
}

/// The store records its version at connect, and a database a newer build migrated is
/// refused, naming it and both versions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_of_a_newer_build_is_refused() {
    let (url, store) = scratch("tm_links_schema").await;
    assert_eq!(schema_version(&store).await, Some(1));
    sqlx::query("UPDATE tidemark_schema_version SET version = 4 WHERE store = 'links'")
        .execute(store.pool())
        .await
        .unwrap();
    let err = MysqlLinks::connect(&url, 2).await.unwrap_err().to_string();
    let database = url.rsplit('/').next().unwrap();
    assert_eq!(
        err,
        format!(
            "mysql: database {database} has links schema version 4, this build knows up to 1: use a newer tidemark"
        )
    );
    store.pool().close().await;
    drop_database(&url).await.unwrap();
}
