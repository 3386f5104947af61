//! The MariaDB / MySQL runner: the version is a row of [`VERSION_TABLE`]; migrations run under a
//! lock named after the database.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use sqlx::mysql::{MySqlConnection, MySqlPool};
use sqlx::{Connection, QueryBuilder};

use super::{Found, TooNew, Versions};
use crate::mysql::MysqlError;

/// The table of every store's version in a database: `store` (a [`Versions::store`]),
/// `version`, `migrated_at` (UTC, when that version was reached).
pub const VERSION_TABLE: &str = "tidemark_schema_version";

/// How long a start waits for another process's migrations of the same database (a
/// rebuilt table can take minutes) before it gives up with [`MysqlError::SchemaLocked`].
pub const LOCK_WAIT: Duration = Duration::from_secs(600);

/// The future of a [`MysqlUp::Run`] step.
pub type MysqlFuture<'c> = Pin<Box<dyn Future<Output = Result<(), sqlx::Error>> + Send + 'c>>;

/// How a MariaDB / MySQL migration or adoption step changes the database.
#[derive(Debug)]
pub enum MysqlUp {
    /// Statements, run in order.
    Sql(&'static [&'static str]),
    /// A function on the migrating connection (for steps that look before they change).
    Run(for<'c> fn(&'c mut MySqlConnection) -> MysqlFuture<'c>),
}

impl MysqlUp {
    async fn run(&self, conn: &mut MySqlConnection) -> Result<(), sqlx::Error> {
        match self {
            MysqlUp::Sql(statements) => {
                for sql in *statements {
                    sqlx::query(sql).execute(&mut *conn).await?;
                }
                Ok(())
            }
            MysqlUp::Run(f) => f(conn).await,
        }
    }
}

/// Brings the store `versions` describes, in the database of `pool`, to its
/// [`Versions::known`] version (see the module docs of [`super`]), on a connection of its own
/// that holds the database's schema lock (`GET_LOCK`, at most [`LOCK_WAIT`]) throughout and is
/// closed afterwards, which releases the lock whatever happened. The version is recorded after
/// each migration. Logs each migration at `info`.
///
/// # Errors
/// [`MysqlError::SchemaTooNew`] for a store of a newer build (nothing is changed),
/// [`MysqlError::SchemaLocked`] when the lock was not had in time, or the server's error (the
/// migrations before the failing one stay, recorded).
pub async fn migrate_mysql(
    pool: &MySqlPool,
    versions: &Versions<MysqlUp>,
) -> Result<(), MysqlError> {
    // Detached: the lock belongs to this connection, which must close with this call.
    let mut conn = pool.acquire().await?.detach();
    let migrated = locked(&mut conn, versions).await;
    let _ = conn.close().await;
    migrated
}

async fn locked(
    conn: &mut MySqlConnection,
    versions: &Versions<MysqlUp>,
) -> Result<(), MysqlError> {
    let (database,): (String,) = sqlx::query_as("SELECT DATABASE()")
        .fetch_one(&mut *conn)
        .await?;
    // Lock names are server-wide and at most 64 characters: one per database, hashed.
    let (got,): (Option<i64>,) = sqlx::query_as(
        "SELECT CAST(GET_LOCK(CONCAT('tidemark_schema.', SHA1(DATABASE())), ?) AS SIGNED)",
    )
    .bind(LOCK_WAIT.as_secs())
    .fetch_one(&mut *conn)
    .await?;
    if got != Some(1) {
        return Err(MysqlError::SchemaLocked {
            database,
            waited_s: LOCK_WAIT.as_secs(),
        });
    }
    sqlx::query(&format!(
        "CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (
            store VARCHAR(64) NOT NULL PRIMARY KEY,
            version BIGINT NOT NULL,
            migrated_at DATETIME(3) NOT NULL
        ) ENGINE = InnoDB"
    ))
    .execute(&mut *conn)
    .await?;
    let recorded: Option<(i64,)> = sqlx::query_as(&format!(
        "SELECT version FROM {VERSION_TABLE} WHERE store = ?"
    ))
    .bind(versions.store)
    .fetch_optional(&mut *conn)
    .await?;
    let found = match recorded {
        Some((v,)) => Found::Version(v),
        None if has_any_table(conn, versions.marks).await? => Found::Unversioned,
        None => Found::New,
    };
    let known = versions.known();
    let steps = versions
        .plan(found)
        .map_err(|TooNew { found }| MysqlError::SchemaTooNew {
            database: database.clone(),
            store: versions.store,
            found,
            known,
        })?;
    if steps.is_empty() {
        return Ok(());
    }
    if found == Found::Unversioned {
        tracing::info!(
            store = versions.store,
            %database,
            "the store records no schema version (made before versions were recorded): adopting it as version 1"
        );
    }
    for (step, reached) in &steps {
        step.up.run(conn).await?;
        if let Some(version) = reached {
            sqlx::query(&format!(
                "INSERT INTO {VERSION_TABLE} (store, version, migrated_at)
                 VALUES (?, ?, UTC_TIMESTAMP(3))
                 ON DUPLICATE KEY UPDATE version = VALUES(version),
                     migrated_at = VALUES(migrated_at)"
            ))
            .bind(versions.store)
            .bind(version)
            .execute(&mut *conn)
            .await?;
        }
    }
    tracing::info!(
        store = versions.store,
        %database,
        from = ?found,
        to = known,
        steps = ?steps.iter().map(|(s, _)| s.what).collect::<Vec<_>>(),
        "schema migrated"
    );
    Ok(())
}

/// Whether any of `tables` exists in the connection's database.
async fn has_any_table(conn: &mut MySqlConnection, tables: &[&str]) -> Result<bool, sqlx::Error> {
    if tables.is_empty() {
        return Ok(false);
    }
    let mut q = QueryBuilder::new(
        "SELECT COUNT(*) FROM information_schema.TABLES
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN (",
    );
    let mut names = q.separated(", ");
    for t in tables {
        names.push_bind(*t);
    }
    q.push(")");
    let (n,): (i64,) = q.build_query_as().fetch_one(&mut *conn).await?;
    Ok(n > 0)
}

#[cfg(test)]
mod tests;
