//! The archive conformance suite (`tidemark_chat::conformance::archive`) on the real MariaDB
//! (`TEST_MYSQL_URL`, default root@127.0.0.1:3306), one scratch database per test.

use std::sync::Arc;

use sqlx::Row;
use tidemark_chat::conformance;
use tidemark_chat::model::{MessageClass, MessageRecord, SendCommand};
use tidemark_chat::mysql::MysqlArchive;
use tidemark_chat::ports::Archive;
use tidemark_core::mysql::{drop_database, scratch_database, test_server_url};

async fn scratch() -> (String, MysqlArchive) {
    let url = scratch_database(&test_server_url(), "tm_chat_archive")
        .await
        .unwrap();
    let archive = MysqlArchive::connect(&url, 4).await.unwrap();
    (url, archive)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_archive() {
    let (url, archive) = scratch().await;
    conformance::archive(Arc::new(archive.clone())).await;
    archive.pool().close().await;
    drop_database(&url).await.unwrap();
}

fn record(seq: u64) -> MessageRecord {
    SendCommand {
        tenant: "t1".into(),
        conversation_id: "c1".into(),
        sender: "u1".into(),
        client_msg_id: format!("k{seq}"),
        body: format!("body {seq}"),
        class: MessageClass::Standard,
    }
    .into_record(seq, 1_800_000_000_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_larger_than_one_insert_land_whole_and_stay_idempotent() {
    let (url, archive) = scratch().await;
    let recs: Vec<MessageRecord> = (1..=1_234).map(record).collect();
    archive.put_records(&recs).await.unwrap();
    let index: Vec<_> = recs.iter().map(MessageRecord::index_entry).collect();
    archive.put_index(&index, None).await.unwrap();
    archive.put_records(&recs[100..700]).await.unwrap();
    let count = |table: &'static str| {
        let pool = archive.pool().clone();
        async move {
            sqlx::query(&format!("SELECT COUNT(*) FROM {table}"))
                .fetch_one(&pool)
                .await
                .unwrap()
                .get::<i64, _>(0)
        }
    };
    assert_eq!(
        (count("message_record").await, count("history_index").await),
        (1_234, 1_234)
    );
    let got = archive.index_range("t1", "c1", 990, 2_010).await.unwrap();
    assert_eq!(got.len(), 1_234 - 989);
    assert_eq!(
        (
            got[0].conversation_seq,
            got.last().unwrap().conversation_seq
        ),
        (990, 1_234)
    );
    let mut found = archive
        .records("t1", "c1", &[1, 999, 1_000, 1_234])
        .await
        .unwrap();
    found.sort_by_key(|r| r.conversation_seq);
    assert_eq!(
        found,
        vec![
            recs[0].clone(),
            recs[998].clone(),
            recs[999].clone(),
            recs[1_233].clone()
        ]
    );
    assert_eq!(archive.records("t1", "c1", &[]).await.unwrap(), vec![]);
    archive.pool().close().await;
    drop_database(&url).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_url_or_a_down_server_is_a_clear_error() {
    let err = MysqlArchive::connect("mysql://root@127.0.0.1/bad-name", 1)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("must name a database"), "{err}");
    let err = MysqlArchive::connect("mysql://root@127.0.0.1:1/tidemark", 1)
        .await
        .unwrap_err();
    assert!(err.to_string().starts_with("mysql: "), "{err}");
    assert!(err.is_retryable(), "{err}");
}

/// A `history_index` made before versions were recorded, with the expiry index a purge of
/// entries used, is adopted at connect: the index is dropped, the rows kept, version 1
/// recorded, and a second connect finds nothing to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_index_made_before_versions_loses_its_expiry_index_at_connect() {
    let url = scratch_database(&test_server_url(), "tm_chat_archive")
        .await
        .unwrap();
    let pool = tidemark_core::mysql::connect(&url, 2).await.unwrap();
    sqlx::query(
        "CREATE TABLE history_index (
            tenant VARCHAR(128) NOT NULL, conversation_id VARCHAR(128) NOT NULL,
            seq_bucket BIGINT UNSIGNED NOT NULL, conversation_seq BIGINT UNSIGNED NOT NULL,
            message_id VARCHAR(64) NOT NULL, expires_at BIGINT NULL,
            PRIMARY KEY (tenant, conversation_id, seq_bucket, conversation_seq),
            KEY history_index_expiry (expires_at)
        ) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("INSERT INTO history_index VALUES ('t1', 'c1', 0, 1, 'm-1', NULL)")
        .execute(&pool)
        .await
        .unwrap();
    let indexes = || async {
        sqlx::query(
            "SELECT DISTINCT index_name FROM information_schema.statistics
             WHERE table_schema = DATABASE() AND table_name = 'history_index'",
        )
        .fetch_all(&pool)
        .await
        .unwrap()
        .iter()
        .map(|r| String::from_utf8(r.get::<Vec<u8>, _>(0)).unwrap())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect::<Vec<_>>()
    };
    assert_eq!(indexes().await, vec!["PRIMARY", "history_index_expiry"]);
    for _ in 0..2 {
        let archive = MysqlArchive::with_pool(pool.clone()).await.unwrap();
        assert_eq!(indexes().await, vec!["PRIMARY"]);
        let entries = archive.index_range("t1", "c1", 1, 1).await.unwrap();
        assert_eq!(entries.len(), 1);
        assert_ne!(archive.identity().await.unwrap(), 0);
        assert_eq!(schema_version(&pool).await, Some(1));
    }
    pool.close().await;
    drop_database(&url).await.unwrap();
}

async fn schema_version(pool: &sqlx::MySqlPool) -> Option<i64> {
    sqlx::query_scalar("SELECT version FROM tidemark_schema_version WHERE store = 'chat_archive'")
        .fetch_optional(pool)
        .await
        .unwrap()
}

/// An archive database a newer build migrated is refused at connect, naming the database and
/// both versions, and left as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archive_of_a_newer_build_is_refused() {
    let (url, archive) = scratch().await;
    let pool = archive.pool().clone();
    assert_eq!(schema_version(&pool).await, Some(1));
    sqlx::query("UPDATE tidemark_schema_version SET version = 2 WHERE store = 'chat_archive'")
        .execute(&pool)
        .await
        .unwrap();
    let err = MysqlArchive::connect(&url, 2)
        .await
        .unwrap_err()
        .to_string();
    let database = url.rsplit('/').next().unwrap();
    assert!(
        err.contains(&format!(
            "database {database} has chat_archive schema version 2, this build knows up to 1: use a newer tidemark"
        )),
        "{err}"
    );
    assert_eq!(schema_version(&pool).await, Some(2));
    pool.close().await;
    drop_database(&url).await.unwrap();
}
