//! One error type for every storage port, whatever engine is behind it.
//!
//! The ports (`RawStore`, `RollupStore`, …) are implemented on SQLite (embedded default),
//! MariaDB / MySQL and InfluxDB. Their callers (ingest, rollup, lifecycle, HTTP handlers) only
//! need to know that the store failed, what it said, and whether trying again may help; so the
//! ports return [`StoreError`], and each engine's own error converts into it with `From`.

use crate::mysql::MysqlError;
use crate::sqlite::SqliteError;

/// A storage engine failed; nothing of the failed operation was acknowledged.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The embedded engine (SQLite) failed.
    #[error(transparent)]
    Sqlite(#[from] SqliteError),
    /// MariaDB / MySQL failed or could not be reached.
    #[error(transparent)]
    Mysql(#[from] MysqlError),
    /// A server reached over HTTP (InfluxDB) could not be reached, timed out, or answered 5xx.
    /// Retryable.
    #[error("{backend} unavailable: {message}")]
    Unavailable {
        /// The engine, e.g. `"influxdb"`.
        backend: &'static str,
        /// What happened.
        message: String,
    },
    /// The engine answered, but refused the request or returned data Tidemark cannot read
    /// (a 4xx, a malformed response, a value out of range). Not retryable as is.
    #[error("{backend}: {message}")]
    Rejected {
        /// The engine, e.g. `"influxdb"`.
        backend: &'static str,
        /// What it said, or what is wrong with its answer.
        message: String,
    },
}

impl StoreError {
    /// Whether trying the same operation again later may succeed (the engine was unreachable,
    /// busy or timed out), as opposed to a refusal that will repeat.
    pub fn is_retryable(&self) -> bool {
        match self {
            StoreError::Sqlite(SqliteError::SchemaTooNew { .. }) => false,
            StoreError::Sqlite(_) | StoreError::Unavailable { .. } => true,
            StoreError::Mysql(MysqlError::BadUrl { .. } | MysqlError::SchemaTooNew { .. }) => false,
            StoreError::Mysql(MysqlError::SchemaLocked { .. }) => true,
            StoreError::Mysql(MysqlError::Sqlx(e)) => !matches!(
                e,
                sqlx::Error::Database(_)
                    | sqlx::Error::ColumnDecode { .. }
                    | sqlx::Error::Decode(_)
                    | sqlx::Error::TypeNotFound { .. }
                    | sqlx::Error::ColumnNotFound(_)
                    | sqlx::Error::ColumnIndexOutOfBounds { .. }
            ),
            StoreError::Rejected { .. } => false,
        }
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Sqlite(e.into())
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::Mysql(e.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreachable_servers_are_retryable_refusals_are_not() {
        assert!(StoreError::from(sqlx::Error::PoolTimedOut).is_retryable());
        assert!(
            StoreError::Unavailable {
                backend: "influxdb",
                message: "connection refused".into()
            }
            .is_retryable()
        );
        assert!(
            !StoreError::Rejected {
                backend: "influxdb",
                message: "400 partial write".into()
            }
            .is_retryable()
        );
        assert!(!StoreError::from(sqlx::Error::ColumnNotFound("x".into())).is_retryable());
    }
}
