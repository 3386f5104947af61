//! The production relational engine: MariaDB / MySQL through `sqlx`.
//!
//! Every MariaDB-backed port (chat archive, link store, rollups) opens its pool here, so the
//! rules for URLs are the same everywhere: `mysql://user[:password]@host[:port]/database`. The
//! database is created if it does not exist (the server account needs `CREATE`); tables are the
//! port's own business.
//!
//! With the `testing` feature (tests and benchmarks only, never the product), `scratch_database`
//! gives a fresh, uniquely named database on a real server, so runs never see each other's rows.

use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::{ConnectOptions, Connection};

/// Errors opening a MariaDB / MySQL database.
#[derive(Debug, thiserror::Error)]
pub enum MysqlError {
    /// The URL is not a `mysql://…/database` URL.
    #[error("bad MySQL URL {url:?}: {reason}")]
    BadUrl {
        /// The URL as given (password removed).
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A store's schema version in the database is above the newest this build knows: a
    /// newer build wrote it (see [`crate::schema`]).
    #[error(
        "database {database} has {store} schema version {found}, this build knows up to {known}: use a newer tidemark"
    )]
    SchemaTooNew {
        /// The database.
        database: String,
        /// The store ([`crate::schema::Versions::store`]).
        store: &'static str,
        /// Its version.
        found: i64,
        /// The newest version this build knows.
        known: i64,
    },
    /// Another process held the database's schema lock (while migrating it) for longer than
    /// this start waits ([`crate::schema::LOCK_WAIT`]).
    #[error(
        "database {database}: another process held its schema lock for {waited_s} s (migrating it?); start again once it is done"
    )]
    SchemaLocked {
        /// The database.
        database: String,
        /// How long this start waited, seconds.
        waited_s: u64,
    },
    /// The server refused or failed.
    #[error("mysql: {0}")]
    Sqlx(#[from] sqlx::Error),
}

/// The server part of a URL and its database name.
fn split_database(url: &str) -> Result<(MySqlConnectOptions, String), MysqlError> {
    let parsed = url::Url::parse(url).map_err(|e| MysqlError::BadUrl {
        url: redact(url),
        reason: e.to_string(),
    })?;
    if parsed.scheme() != "mysql" && parsed.scheme() != "mariadb" {
        return Err(MysqlError::BadUrl {
            url: redact(url),
            reason: "the scheme must be mysql://".into(),
        });
    }
    let database = parsed.path().trim_start_matches('/').to_string();
    if database.is_empty()
        || !database
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(MysqlError::BadUrl {
            url: redact(url),
            reason: "the path must name a database ([A-Za-z0-9_]+)".into(),
        });
    }
    let mut server = parsed.clone();
    server.set_path("");
    let server_url = server.as_str().replacen("mariadb://", "mysql://", 1);
    let options: MySqlConnectOptions = server_url.parse()?;
    Ok((options, database))
}

/// `url` with any password replaced by `***`, for messages and logs.
pub fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => url.to_string(),
    }
}

/// Opens a pool of at most `max_connections` on the database `url` names, creating the database
/// first if it does not exist (utf8mb4). Fails fast (5 s connect timeout) when the server is
/// down.
pub async fn connect(url: &str, max_connections: u32) -> Result<MySqlPool, MysqlError> {
    let (server, database) = split_database(url)?;
    let server = server.disable_statement_logging();
    {
        let mut conn = tokio::time::timeout(Duration::from_secs(5), server.connect())
            .await
            .map_err(|_| sqlx::Error::PoolTimedOut)??;
        sqlx::query(&format!(
            "CREATE DATABASE IF NOT EXISTS `{database}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
        ))
        .execute(&mut conn)
        .await?;
        conn.close().await?;
    }
    let pool = MySqlPoolOptions::new()
        .max_connections(max_connections.max(1))
        .acquire_timeout(Duration::from_secs(5))
        .connect_with(server.database(&database))
        .await?;
    Ok(pool)
}

/// Text column `i` of `row`. Tables in the `utf8mb4_bin` collation (exact comparison, which
/// ids and addresses need) are reported by the server as binary, which sqlx will not decode
/// as `String`; the bytes are checked as UTF-8 here instead. Errors: the column is missing or
/// not UTF-8 (a decode error, which stores sort as corrupt data).
pub fn text_column(row: &sqlx::mysql::MySqlRow, i: usize) -> Result<String, sqlx::Error> {
    use sqlx::Row;
    String::from_utf8(row.try_get::<Vec<u8>, _>(i)?).map_err(|e| sqlx::Error::ColumnDecode {
        index: i.to_string(),
        source: Box::new(e),
    })
}

/// A connection of its own, taken out of `pool`, that holds the named lock `name` of this
/// database (`GET_LOCK`; lock names are server-wide, so the database's hash is added), or
/// `None` when another session kept it for `wait`. Statements that must not run on two nodes
/// at once (partition DDL) run on it; closing it releases the lock, and so does the session's
/// end when its node dies, at once and without a lease to expire. `name` is at most 23
/// characters.
pub async fn lock_session(
    pool: &MySqlPool,
    name: &str,
    wait: Duration,
) -> Result<Option<sqlx::MySqlConnection>, sqlx::Error> {
    debug_assert!(name.len() <= 23, "GET_LOCK names are at most 64 characters");
    // Detached: the lock belongs to this connection, which must never go back to the pool.
    let mut conn = pool.acquire().await?.detach();
    let (got,): (Option<i64>,) =
        sqlx::query_as("SELECT CAST(GET_LOCK(CONCAT(?, '.', SHA1(DATABASE())), ?) AS SIGNED)")
            .bind(name)
            .bind(wait.as_secs())
            .fetch_one(&mut conn)
            .await?;
    if got == Some(1) {
        Ok(Some(conn))
    } else {
        let _ = conn.close().await;
        Ok(None)
    }
}

/// Creates a new, empty database named `<prefix>_<pid>_<n>_<ms>` on the server of `server_url`
/// (`mysql://user@host:port`, any path ignored) and returns its URL. For tests and benchmarks;
/// drop it with [`drop_database`]. With the `testing` feature only.
#[cfg(feature = "testing")]
pub async fn scratch_database(server_url: &str, prefix: &str) -> Result<String, MysqlError> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() % 1_000_000_000)
        .unwrap_or(0);
    let name = format!("{prefix}_{}_{n}_{ms}", std::process::id());
    let mut base = url::Url::parse(server_url).map_err(|e| MysqlError::BadUrl {
        url: redact(server_url),
        reason: e.to_string(),
    })?;
    base.set_path(&name);
    let url = base.to_string();
    // `connect` creates it.
    connect(&url, 1).await?.close().await;
    Ok(url)
}

/// Drops the database `url` names (if it exists). With the `testing` feature only.
#[cfg(feature = "testing")]
pub async fn drop_database(url: &str) -> Result<(), MysqlError> {
    let (server, database) = split_database(url)?;
    let mut conn = server.connect().await?;
    sqlx::query(&format!("DROP DATABASE IF EXISTS `{database}`"))
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    Ok(())
}

/// The MariaDB server tests use: `TEST_MYSQL_URL`, default `mysql://root@127.0.0.1:3306` (the
/// machine's MariaDB; `scripts/test` checks it is up). Not a `TIDEMARK_*` name: the server
/// reads every `TIDEMARK_*` variable as configuration and refuses unknown ones. With the
/// `testing` feature only.
#[cfg(feature = "testing")]
pub fn test_server_url() -> String {
    std::env::var("TEST_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_must_name_a_database() {
        assert!(matches!(
            split_database("mysql://root@127.0.0.1:3306"),
            Err(MysqlError::BadUrl { .. })
        ));
        assert!(matches!(
            split_database("postgres://root@127.0.0.1/x"),
            Err(MysqlError::BadUrl { .. })
        ));
        assert!(matches!(
            split_database("mysql://root@127.0.0.1/bad-name"),
            Err(MysqlError::BadUrl { .. })
        ));
        let (_, db) = split_database("mysql://root@127.0.0.1:3306/tidemark").unwrap();
        assert_eq!(db, "tidemark");
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("mysql://u:secret@h:1/db"),
            "mysql://u:***@h:1/db".to_string()
        );
        assert_eq!(redact("mysql://u@h/db"), "mysql://u@h/db");
    }

    #[tokio::test]
    async fn scratch_databases_are_created_and_dropped_on_the_real_server() {
        let url = scratch_database(&test_server_url(), "tm_core")
            .await
            .unwrap();
        let pool = connect(&url, 2).await.unwrap();
        let one: (i64,) = sqlx::query_as("SELECT 1").fetch_one(&pool).await.unwrap();
        assert_eq!(one.0, 1);
        let (db,): (String,) = sqlx::query_as("SELECT DATABASE()")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert!(url.ends_with(&db), "{url} vs {db}");
        pool.close().await;
        drop_database(&url).await.unwrap();
        let mut conn = split_database(&url).unwrap().0.connect().await.unwrap();
        let found: Option<(String,)> = sqlx::query_as(
            "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
        )
        .bind(&db)
        .fetch_optional(&mut conn)
        .await
        .unwrap();
        assert_eq!(found, None);
    }
}
