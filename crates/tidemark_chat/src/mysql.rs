//! The production archive on MariaDB / MySQL (DESIGN.md "Backends": chat archive).
//!
//! [`MysqlArchive`] stores what the archiver hands it — message records, then history-index
//! entries — with plain idempotent multi-row inserts; every rule (batching, order, position,
//! watermark) stays in [`crate::archiver`]. The pool comes from `tidemark_core::mysql`.

mod archive;
mod migrations;

pub use archive::MysqlArchive;

use crate::error::ChatError;

impl From<sqlx::Error> for ChatError {
    fn from(e: sqlx::Error) -> Self {
        ChatError::Store(e.into())
    }
}

impl From<tidemark_core::mysql::MysqlError> for ChatError {
    fn from(e: tidemark_core::mysql::MysqlError) -> Self {
        match e {
            tidemark_core::mysql::MysqlError::BadUrl { .. } => ChatError::Invalid(e.to_string()),
            other => ChatError::Store(other.into()),
        }
    }
}
