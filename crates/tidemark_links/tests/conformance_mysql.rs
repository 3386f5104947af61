//! The link-store conformance suite on MariaDB (the machine's server, `TEST_MYSQL_URL`;
//! a scratch database per test), the mailing-store suite, and the MariaDB-only promises: a
//! lookup touches exactly one partition, rows are compressed, nodes take turns changing
//! partitions, share one id secret, and move their local mailings in.

use std::sync::Arc;

use sqlx::Row;
use tidemark_core::day::Day;
use tidemark_core::mysql::{drop_database, scratch_database, test_server_url};
use tidemark_links::conformance;
use tidemark_links::id::IdCodec;
use tidemark_links::model::{LinkRecord, Lookup, Mailing};
use tidemark_links::mysql::{LOOKUP_SQL, MysqlLinks};
use tidemark_links::rewrite::LinkKind;
use tidemark_links::sqlite::SqliteLinks;
use tidemark_links::store::{LinkStore, MailingStore};

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
async fn mysql_mailing_store() {
    let (url, store) = scratch("tm_mailings").await;
    let store = Arc::new(store);
    conformance::mailing_store(Arc::clone(&store) as Arc<dyn MailingStore>).await;
    store.pool().close().await;
    drop_database(&url).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_stats_store() {
    let (url, store) = scratch("tm_stats").await;
    let store = Arc::new(store);
    conformance::stats_store(Arc::clone(&store) as Arc<dyn MailingStore>).await;
    store.pool().close().await;
    drop_database(&url).await.unwrap();
}

/// Two nodes (two pools on one database) changing partitions at once take turns under the
/// database's partition lock: every statement succeeds and the partitions come out exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_changing_partitions_at_once_take_turns() {
    let (url, a) = scratch("tm_links_ddl").await;
    let b = MysqlLinks::connect(&url, 4).await.unwrap();
    let first = Day::parse("2026-11-01").unwrap();
    let (a, b) = (Arc::new(a), Arc::new(b));
    let mut jobs = Vec::new();
    for round in 0..6 {
        for (node, store) in [(0, Arc::clone(&a)), (1, Arc::clone(&b))] {
            jobs.push(tokio::spawn(async move {
                // Both nodes add the same days, above and below what exists (backfill), and
                // one drops the oldest.
                let days: Vec<Day> = (0..4).map(|i| first.plus(20 - 3 * round + i)).collect();
                store.create_partitions(&days).await?;
                if node == 1 && round == 5 {
                    store.drop_partitions_before(first.plus(6)).await?;
                }
                Ok::<_, tidemark_links::error::LinksError>(())
            }));
        }
    }
    for j in jobs {
        j.await.unwrap().unwrap();
    }
    let left = a.partitions().await.unwrap();
    assert!(left.iter().all(|d| *d >= first.plus(6)), "{left:?}");
    assert_eq!(left.last(), Some(&first.plus(23)));
    // Every day from the lowest kept to the highest has its own partition.
    let lowest = *left.first().unwrap();
    let expected: Vec<Day> = (0..)
        .map(|i| lowest.plus(i))
        .take_while(|d| *d <= first.plus(23))
        .collect();
    assert_eq!(left, expected);
    a.pool().close().await;
    b.pool().close().await;
    drop_database(&url).await.unwrap();
}

/// Two nodes dropping expired partitions at once: each expired day is dropped by exactly one
/// of them (their answers are disjoint and together name every expired day), and what is kept
/// stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_partition_is_dropped_by_two_nodes() {
    let (url, a) = scratch("tm_links_drop").await;
    let b = MysqlLinks::connect(&url, 4).await.unwrap();
    let first = Day::parse("2026-10-01").unwrap();
    let days: Vec<Day> = (0..12).map(|i| first.plus(i)).collect();
    a.create_partitions(&days).await.unwrap();
    let keep_from = first.plus(8);
    let (da, db) = tokio::join!(
        a.drop_partitions_before(keep_from),
        b.drop_partitions_before(keep_from)
    );
    let (da, db) = (da.unwrap(), db.unwrap());
    let mut both: Vec<Day> = da.iter().chain(&db).copied().collect();
    both.sort();
    assert_eq!(
        both,
        days[..8].to_vec(),
        "a dropped {da:?}, b dropped {db:?}"
    );
    assert_eq!(a.partitions().await.unwrap(), days[8..].to_vec());
    a.pool().close().await;
    b.pool().close().await;
    drop_database(&url).await.unwrap();
}

/// The first node records its id secret's check value; a node with another secret is
/// refused, naming `links.id_secret`; the same secret passes on any node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_another_id_secret_is_refused() {
    let (url, a) = scratch("tm_links_secret").await;
    let b = MysqlLinks::connect(&url, 2).await.unwrap();
    let ours = IdCodec::new([7; 16]).fingerprint();
    a.check_id_secret(&ours).await.unwrap();
    b.check_id_secret(&ours).await.unwrap();
    let theirs = IdCodec::new([8; 16]).fingerprint();
    assert_ne!(ours, theirs);
    let err = b.check_id_secret(&theirs).await.unwrap_err().to_string();
    assert!(
        err.starts_with("links.id_secret differs from the secret this MariaDB link store"),
        "{err}"
    );
    a.pool().close().await;
    b.pool().close().await;
    drop_database(&url).await.unwrap();
}

/// A node's local mailings and suppression list move into the MariaDB store once: the file
/// is renamed, and what it held reads back through the shared store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_mailings_move_into_the_shared_store_once() {
    let (url, shared) = scratch("tm_links_take_in").await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("links.db");
    let mailing = Mailing {
        mailing_id: "m-local".into(),
        tenant: "acme".into(),
        subject: "s".into(),
        from: "a@b.example".into(),
        html: "<p>local</p>".into(),
        created_ms: 1_795_999_534_123,
    };
    {
        let local = SqliteLinks::open(&path).unwrap();
        local.create_mailing(mailing.clone()).await.unwrap();
        local
            .suppress("acme", &["gone@x.example".into()])
            .await
            .unwrap();
    }
    let taken = shared.take_in_local(&path).await.unwrap();
    assert_eq!((taken.mailings, taken.suppressions), (1, 1));
    assert!(!path.exists() && dir.path().join("links.db.moved").exists());
    assert_eq!(
        shared.mailing("acme", "m-local").await.unwrap(),
        Some(mailing)
    );
    let hit = shared
        .suppressed("acme", &["gone@x.example".into()])
        .await
        .unwrap();
    assert_eq!(hit.len(), 1);
    // Unsuppressed on the shared store, it stays so: nothing is taken in a second time.
    assert!(shared.unsuppress("acme", "gone@x.example").await.unwrap());
    assert_eq!(
        shared.take_in_local(&path).await.unwrap(),
        Default::default()
    );
    assert!(
        shared
            .suppressed("acme", &["gone@x.example".into()])
            .await
            .unwrap()
            .is_empty()
    );
    shared.pool().close().await;
    drop_database(&url).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_reads_exactly_the_partition_of_its_ids_day() {
    let (url, store) = scratch("tm_links_plan").await;
    let codec = IdCodec::new([1; 16]);
    let first = Day::parse("2026-11-25").unwrap();
    let days: Vec<Day> = (0..5).map(|i| first.plus(i)).collect();
    store.create_partitions(&days).await.unwrap();
    let mut records = Vec::new();
    for (i, day) in days.iter().enumerate() {
        for j in 0..50 {
            let id = codec.generate(day.utc_start_ms() + 1_000 * j);
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
    assert_eq!(schema_version(&store).await, Some(4));
    sqlx::query("UPDATE tidemark_schema_version SET version = 5 WHERE store = 'links'")
        .execute(store.pool())
        .await
        .unwrap();
    let err = MysqlLinks::connect(&url, 2).await.unwrap_err().to_string();
    let database = url.rsplit('/').next().unwrap();
    assert_eq!(
        err,
        format!(
            "mysql: database {database} has links schema version 5, this build knows up to 4: use a newer tidemark"
        )
    );
    store.pool().close().await;
    drop_database(&url).await.unwrap();
}
