//! The embedded default backends of chat, on SQLite (DESIGN.md "Backends").
//!
//! - [`SqliteHot`] (`hot.db`): hot store *and* outbox in one file, so a SEND is one
//!   transaction ([`crate::ports::FusedCommit`]) and concurrent sends share one fsync through the
//!   group-committing writer of `tidemark_core::sqlite`.
//! - [`SqliteArchive`] (`archive.db`): message records (in time order) and the history index
//!   (keyed by conversation and seq).
//!
//! Their tables, and every change to them, are in one place: `migrations`.
//!
//! Both only store; every rule (commit order, watermark, trim condition, tiered reads) lives in
//! the shared modules.

mod archive;
mod dedup;
mod hot;
mod migrations;
mod outbox;

pub use archive::SqliteArchive;
pub use hot::{HOT_PAGE_SIZE, SqliteHot};

use std::path::Path;

use rusqlite::Row;

use crate::error::ChatError;
use crate::model::{MessageClass, MessageRecord};

/// `e`, an error opening the file at `path`, with the file named in front: SQLite's own words
/// name none ("disk I/O error" from `xShmMap` on a full disk, "file is not a database"). An
/// error whose own message names the file already (a schema of a newer build) keeps it
/// ([`StoreError::in_file`]).
///
/// [`StoreError::in_file`]: tidemark_core::store::StoreError::in_file
fn opening(path: &Path, e: ChatError) -> ChatError {
    match e {
        ChatError::Store(e) => ChatError::Store(e.with_context("opening").in_file(path)),
        ChatError::Corrupt(m) => ChatError::Corrupt(format!("opening {}: {m}", path.display())),
        other => other,
    }
}

/// Columns of a message record, in the order [`record_from_row`] reads them.
const RECORD_COLUMNS: &str = "tenant, conversation_id, conversation_seq, message_id, sender, \
     client_msg_id, body, class, committed_at, expires_at";

fn record_from_row(row: &Row<'_>) -> rusqlite::Result<MessageRecord> {
    record_from_row_at(row, 0)
}

/// Reads [`RECORD_COLUMNS`] starting at column `base`.
pub(crate) fn record_from_row_at(row: &Row<'_>, base: usize) -> rusqlite::Result<MessageRecord> {
    Ok(MessageRecord {
        tenant: row.get(base)?,
        conversation_id: row.get(base + 1)?,
        conversation_seq: row.get::<_, i64>(base + 2)? as u64,
        message_id: row.get(base + 3)?,
        sender: row.get(base + 4)?,
        client_msg_id: row.get(base + 5)?,
        body: row.get(base + 6)?,
        class: MessageClass::from_code(row.get(base + 7)?),
        committed_at_ms: row.get(base + 8)?,
        expires_at_ms: row.get(base + 9)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file that is not a database is refused naming the file (SQLite's message names none).
    #[test]
    fn an_open_error_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        tidemark_core::sqlite::assert_open_names_the_file(&dir.path().join("hot.db"), |p| {
            SqliteHot::open(p, 8)
        });
        tidemark_core::sqlite::assert_open_names_the_file(
            &dir.path().join("archive.db"),
            SqliteArchive::open,
        );
    }
}
