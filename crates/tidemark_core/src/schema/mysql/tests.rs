use sqlx::mysql::MySqlPool;

use super::super::Step;
use super::*;
use crate::mysql::{connect, drop_database, scratch_database, test_server_url};

/// Version 1 creates `t`; adoption adds `t.b` where missing; version 2 creates `u` with one
/// row (not repeatable: a second run would fail on the existing table).
static VERSIONS: Versions<MysqlUp> = Versions {
    store: "test_store",
    marks: &["t"],
    migrations: &[
        Step {
            what: "create t",
            up: MysqlUp::Sql(&["CREATE TABLE IF NOT EXISTS t (a INT, b INT) ENGINE = InnoDB"]),
        },
        Step {
            what: "create u",
            up: MysqlUp::Sql(&[
                "CREATE TABLE u (x INT) ENGINE = InnoDB",
                "INSERT INTO u VALUES (1)",
            ]),
        },
    ],
    adopt: &[Step {
        what: "add t.b",
        up: MysqlUp::Run(add_b),
    }],
};

fn add_b(conn: &mut MySqlConnection) -> MysqlFuture<'_> {
    Box::pin(async move {
        if columns(conn, "t").await.iter().all(|c| c != "b") {
            sqlx::query("ALTER TABLE t ADD COLUMN b INT NOT NULL DEFAULT 7")
                .execute(&mut *conn)
                .await?;
        }
        Ok(())
    })
}

async fn columns(conn: &mut MySqlConnection, table: &str) -> Vec<String> {
    let rows: Vec<(String,)> = sqlx::query_as(
        "SELECT CAST(COLUMN_NAME AS CHAR) FROM information_schema.COLUMNS
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
    )
    .bind(table)
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    rows.into_iter().map(|(c,)| c).collect()
}

async fn scratch() -> (String, MySqlPool) {
    let url = scratch_database(&test_server_url(), "tm_schema")
        .await
        .unwrap();
    let pool = connect(&url, 4).await.unwrap();
    (url, pool)
}

async fn version(pool: &MySqlPool, store: &str) -> Option<i64> {
    sqlx::query_as::<_, (i64,)>("SELECT version FROM tidemark_schema_version WHERE store = ?")
        .bind(store)
        .fetch_optional(pool)
        .await
        .unwrap()
        .map(|(v,)| v)
}

async fn done(url: String, pool: MySqlPool) {
    pool.close().await;
    drop_database(&url).await.unwrap();
}

#[tokio::test]
async fn a_new_database_gets_every_migration_recorded_once() {
    let (url, pool) = scratch().await;
    migrate_mysql(&pool, &VERSIONS).await.unwrap();
    assert_eq!(version(&pool, "test_store").await, Some(2));
    let mut conn = pool.acquire().await.unwrap();
    assert_eq!(columns(&mut conn, "t").await, ["a", "b"]);
    drop(conn);
    // Again: nothing runs (migration 2 would fail on the table it made).
    migrate_mysql(&pool, &VERSIONS).await.unwrap();
    done(url, pool).await;
}

#[tokio::test]
async fn a_database_made_before_versions_is_adopted_with_its_rows() {
    let (url, pool) = scratch().await;
    sqlx::query("CREATE TABLE t (a INT) ENGINE = InnoDB")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("INSERT INTO t VALUES (1), (2)")
        .execute(&pool)
        .await
        .unwrap();
    migrate_mysql(&pool, &VERSIONS).await.unwrap();
    assert_eq!(version(&pool, "test_store").await, Some(2));
    let rows: Vec<(i32, i32)> = sqlx::query_as("SELECT a, b FROM t ORDER BY a")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(rows, [(1, 7), (2, 7)]);
    done(url, pool).await;
}

#[tokio::test]
async fn a_store_of_a_newer_build_is_refused_naming_the_database_and_both_versions() {
    let (url, pool) = scratch().await;
    migrate_mysql(&pool, &VERSIONS).await.unwrap();
    sqlx::query("UPDATE tidemark_schema_version SET version = 5 WHERE store = 'test_store'")
        .execute(&pool)
        .await
        .unwrap();
    let err = migrate_mysql(&pool, &VERSIONS).await.unwrap_err();
    let database = url.rsplit('/').next().unwrap();
    assert_eq!(
        err.to_string(),
        format!(
            "database {database} has test_store schema version 5, this build knows up to 2: use a newer tidemark"
        )
    );
    assert!(matches!(
        err,
        MysqlError::SchemaTooNew {
            found: 5,
            known: 2,
            ..
        }
    ));
    assert_eq!(version(&pool, "test_store").await, Some(5));
    done(url, pool).await;
}

/// Two nodes starting at once: the lock lets one migrate, the other then finds the version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_starts_run_each_migration_once() {
    let (url, pool) = scratch().await;
    let other = connect(&url, 2).await.unwrap();
    let (a, b) = tokio::join!(
        migrate_mysql(&pool, &VERSIONS),
        migrate_mysql(&other, &VERSIONS)
    );
    a.unwrap();
    b.unwrap();
    let (rows,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM u")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows, 1);
    other.close().await;
    done(url, pool).await;
}

/// Stores sharing a database keep a version each, and one's tables do not make the other
/// look made before versions.
#[tokio::test]
async fn stores_of_one_database_keep_their_own_versions() {
    static OTHER: Versions<MysqlUp> = Versions {
        store: "other_store",
        marks: &["o"],
        migrations: &[Step {
            what: "create o",
            up: MysqlUp::Sql(&["CREATE TABLE IF NOT EXISTS o (x INT) ENGINE = InnoDB"]),
        }],
        adopt: &[],
    };
    let (url, pool) = scratch().await;
    migrate_mysql(&pool, &VERSIONS).await.unwrap();
    migrate_mysql(&pool, &OTHER).await.unwrap();
    assert_eq!(version(&pool, "test_store").await, Some(2));
    assert_eq!(version(&pool, "other_store").await, Some(1));
    done(url, pool).await;
}
