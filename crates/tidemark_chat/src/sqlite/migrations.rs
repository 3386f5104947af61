//! The versions of the embedded chat files (see `tidemark_core::schema`): every table they
//! hold, and every change to them, is here.
//!
//! [`HOT`], the hot tier's file (`hot.db`; `outbox.db` beside a Redis hot tier has the same
//! layout):
//! - version 1: `conversation`, `member`, `message` and `meta` (the hot store,
//!   [`super::hot`]), `outbox` ([`super::outbox`]), `dedup_log` and `dedup` (client dedup,
//!   [`super::dedup`]).
//! - adopting a file made before versions were recorded: an `outbox` made with
//!   `AUTOINCREMENT` (which kept its `high` in `sqlite_sequence`, one more page written per
//!   commit) is rebuilt without it, its `high` carried to `meta` ([`adopt_outbox`]).
//!
//! A `hot.db` made before its page size was 1 KiB keeps its 4 KiB pages (see
//! [`super::HOT_PAGE_SIZE`]): a page size is not a schema change (only a `VACUUM` outside WAL
//! mode would change it).
//!
//! [`ARCHIVE`], the embedded archive (`archive.db`, [`super::archive`]):
//! - version 1: `archive_meta` (with the archive's identity), `message_record`,
//!   `history_index`, and `history_index_log` with the view `history_index_all` (index entries
//!   written in time order first and merged into `history_index` in large sorted steps).
//! - version 2: index entries go straight to `history_index`: the log's entries are merged
//!   into it and the log and its view dropped ([`archive_v2`]).
//! - adopting a file made before versions were recorded: version 1's `IF NOT EXISTS` adds what
//!   a file of the layout before the index log lacks (the log, the view, the `message_id`
//!   index, `archive_meta`); its `message_record` keeps its unique key on
//!   `(tenant, conversation_id, seq_bucket, conversation_seq)` as well (rebuilding the
//!   archive's largest table at start would take minutes per GB; the extra key costs its
//!   writes a randomly placed index page). Then the expiry indexes of index entries, which
//!   served a purge of entries that tombstones ended, are dropped ([`ARCHIVE`]'s adoption
//!   step).

use rusqlite::{Connection, OptionalExtension};
use tidemark_core::schema::{SqliteUp, Step, Versions};

use super::outbox::HIGH_KEY;
use crate::model::SEQ_BUCKET_SIZE;

/// The hot tier's file (see the module docs).
pub(super) static HOT: Versions<SqliteUp> = Versions {
    store: "hot.db",
    marks: &["conversation", "message", "outbox"],
    migrations: &[Step {
        what: "hot store, outbox and client dedup tables",
        up: SqliteUp::Sql(HOT_V1),
    }],
    adopt: &[Step {
        what: "outbox without AUTOINCREMENT",
        up: SqliteUp::Run(adopt_outbox),
    }],
};

/// Version 1 of the hot tier's file. `message`: `state` 0 = RESERVED, 1 = COMMITTED;
/// `trim_score` set on commit. `outbox`: offset = rowid − 1, no `AUTOINCREMENT` (see
/// [`super::outbox`]). `dedup_log` in commit order, `dedup` keyed by the client's key (see
/// [`super::dedup`]).
const HOT_V1: &str = "
CREATE TABLE IF NOT EXISTS conversation (
    tenant TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    members TEXT NOT NULL,
    listing_id INTEGER,
    latest_seq INTEGER NOT NULL DEFAULT 0,
    floor INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, conversation_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS member (
    tenant TEXT NOT NULL,
    user TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    read_seq INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, user, conversation_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS message (
    tenant TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    conversation_seq INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    sender TEXT NOT NULL,
    client_msg_id TEXT NOT NULL,
    body TEXT NOT NULL,
    class INTEGER NOT NULL,
    committed_at INTEGER NOT NULL,
    expires_at INTEGER,
    state INTEGER NOT NULL,
    trim_score INTEGER,
    UNIQUE (tenant, conversation_id, conversation_seq)
);
CREATE INDEX IF NOT EXISTS message_trim ON message (trim_score) WHERE trim_score IS NOT NULL;
CREATE INDEX IF NOT EXISTS message_reserved ON message (committed_at) WHERE state = 0;
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS outbox (
    rowid INTEGER PRIMARY KEY,
    appended_at INTEGER NOT NULL,
    envelope BLOB,
    tenant TEXT,
    conversation_id TEXT,
    conversation_seq INTEGER
);
CREATE TABLE IF NOT EXISTS dedup_log (
    id INTEGER PRIMARY KEY,
    tenant TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    sender TEXT NOT NULL,
    client_msg_id TEXT NOT NULL,
    conversation_seq INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    committed_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS dedup (
    tenant TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    sender TEXT NOT NULL,
    client_msg_id TEXT NOT NULL,
    conversation_seq INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    committed_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, conversation_id, sender, client_msg_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS dedup_expiry ON dedup (expires_at);
";

/// The outbox columns of version 1, in order.
const OUTBOX_COLUMNS: [&str; 6] = [
    "rowid",
    "appended_at",
    "envelope",
    "tenant",
    "conversation_id",
    "conversation_seq",
];

/// Adoption: an `outbox` made with `AUTOINCREMENT` is rebuilt as version 1's table, rows and
/// offsets kept. Its `high` (the newest offset ever handed out, which `AUTOINCREMENT` kept in
/// `sqlite_sequence` also once retention dropped the rows) goes to `meta`'s `outbox_high`
/// first, the larger value kept, so offsets are never reused. Columns the table lacks (an
/// outbox older still held only envelopes) are copied as NULL.
fn adopt_outbox(conn: &Connection) -> rusqlite::Result<()> {
    let ddl: Option<String> = conn
        .query_row(
            "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'outbox'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    if !ddl.is_some_and(|d| d.to_ascii_uppercase().contains("AUTOINCREMENT")) {
        return Ok(());
    }
    conn.execute(
        "INSERT INTO meta (key, value)
             SELECT ?1, seq FROM sqlite_sequence WHERE name = 'outbox'
         ON CONFLICT (key) DO UPDATE SET value = max(value, excluded.value)",
        [HIGH_KEY],
    )?;
    let present: Vec<String> = conn
        .prepare("SELECT name FROM pragma_table_info('outbox')")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let source = OUTBOX_COLUMNS
        .iter()
        .map(|c| {
            if *c == "rowid" || present.iter().any(|p| p == c) {
                (*c).to_owned()
            } else {
                format!("NULL AS {c}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    conn.execute_batch(&format!(
        "ALTER TABLE outbox RENAME TO outbox_autoincrement;
         CREATE TABLE outbox (
             rowid INTEGER PRIMARY KEY,
             appended_at INTEGER NOT NULL,
             envelope BLOB,
             tenant TEXT,
             conversation_id TEXT,
             conversation_seq INTEGER
         );
         INSERT INTO outbox ({}) SELECT {source} FROM outbox_autoincrement ORDER BY rowid;
         DROP TABLE outbox_autoincrement;",
        OUTBOX_COLUMNS.join(", ")
    ))
}

/// The embedded archive (see the module docs).
pub(super) static ARCHIVE: Versions<SqliteUp> = Versions {
    store: "archive.db",
    marks: &["message_record", "history_index"],
    migrations: &[
        Step {
            what: "archive tables, index log and the archive's identity",
            up: SqliteUp::Run(archive_v1),
        },
        Step {
            what: "index log merged into the history index and dropped",
            up: SqliteUp::Run(archive_v2),
        },
    ],
    adopt: &[Step {
        what: "drop the expiry indexes of index entries",
        up: SqliteUp::Sql(
            "DROP INDEX IF EXISTS history_index_expiry;
             DROP INDEX IF EXISTS history_index_log_expiry;",
        ),
    }],
};

/// Version 1 of the archive's tables.
///
/// `history_index_log` is `AUTOINCREMENT`: row ids never go back, also once a merge emptied
/// the log, so "up to row id n" always names the rows a merge read (one `sqlite_sequence`
/// page per batch: the archive commits a few batches a second, not one per SEND).
/// `history_index_all` is the whole history index as readers see it (for operators and tests;
/// an entry both merged and in the log again — a replayed batch, `sync-archive`'s second
/// append — appears once).
const ARCHIVE_V1: &str = "
CREATE TABLE IF NOT EXISTS archive_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS message_record (
    tenant TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    seq_bucket INTEGER NOT NULL,
    conversation_seq INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    sender TEXT NOT NULL,
    client_msg_id TEXT NOT NULL,
    body TEXT NOT NULL,
    class INTEGER NOT NULL,
    committed_at INTEGER NOT NULL,
    expires_at INTEGER
);
CREATE UNIQUE INDEX IF NOT EXISTS message_record_id ON message_record (message_id);
CREATE INDEX IF NOT EXISTS message_record_expiry ON message_record (expires_at)
    WHERE expires_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS history_index (
    tenant TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    seq_bucket INTEGER NOT NULL,
    conversation_seq INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    expires_at INTEGER,
    PRIMARY KEY (tenant, conversation_id, seq_bucket, conversation_seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS history_index_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    conversation_seq INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    expires_at INTEGER
);
CREATE VIEW IF NOT EXISTS history_index_all AS
    SELECT tenant, conversation_id, conversation_seq, message_id, expires_at FROM history_index
    UNION
    SELECT tenant, conversation_id, conversation_seq, message_id, expires_at
    FROM history_index_log;
";

/// Version 1: [`ARCHIVE_V1`], and the archive's identity (a fresh one, unless a file made
/// before versions were recorded has one: [`crate::ports::Archive::identity`]).
fn archive_v1(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(ARCHIVE_V1)?;
    conn.execute(
        "INSERT INTO archive_meta (key, value) VALUES ('identity', ?1)
         ON CONFLICT (key) DO NOTHING",
        [crate::ports::fresh_archive_identity()],
    )?;
    Ok(())
}

/// Version 2: the entries of `history_index_log` go to `history_index` (an entry there
/// already is kept: the log's is a replay of it), then the log and `history_index_all` are
/// dropped. Inside the migration's transaction, so a crash leaves version 1 whole.
fn archive_v2(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT OR IGNORE INTO history_index (tenant, conversation_id, seq_bucket,
             conversation_seq, message_id, expires_at)
         SELECT tenant, conversation_id, conversation_seq / ?1, conversation_seq, message_id,
                expires_at
         FROM history_index_log ORDER BY tenant, conversation_id, conversation_seq, id",
        [SEQ_BUCKET_SIZE as i64],
    )?;
    conn.execute_batch(
        "DROP VIEW IF EXISTS history_index_all;
         DROP TABLE IF EXISTS history_index_log;",
    )
}

/// Test support: an in-memory database at `versions`'s version.
#[cfg(test)]
pub(super) fn in_memory(versions: &Versions<SqliteUp>) -> Connection {
    let conn = Connection::open_in_memory().unwrap();
    tidemark_core::schema::migrate_sqlite(&conn, std::path::Path::new(":memory:"), versions)
        .unwrap();
    conn
}

#[cfg(test)]
mod tests;
