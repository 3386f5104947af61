use std::path::Path;

use rusqlite::Connection;

use super::*;
use crate::model::MessageRecord;
use crate::sqlite::outbox::{append, fetch, offsets};
use crate::sqlite::{SqliteArchive, SqliteHot};

fn user_version(path: &Path) -> i64 {
    Connection::open(path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap()
}

fn table_sql(conn: &Connection, name: &str) -> Option<String> {
    conn.query_row(
        "SELECT sql FROM sqlite_schema WHERE name = ?1",
        [name],
        |r| r.get(0),
    )
    .optional()
    .unwrap()
}

/// The hot tables of version 1 without `outbox`, as a file made before versions has them.
fn hot_tables_but_the_outbox(conn: &Connection) {
    let without_outbox = HOT_V1.replace("CREATE TABLE IF NOT EXISTS outbox", "CREATE TABLE x");
    conn.execute_batch(&without_outbox).unwrap();
    conn.execute_batch("DROP TABLE x").unwrap();
}

#[test]
fn new_files_are_made_at_the_current_version() {
    let dir = tempfile::tempdir().unwrap();
    let hot = dir.path().join("hot.db");
    let archive = dir.path().join("archive.db");
    drop(SqliteHot::open(&hot, 8).unwrap());
    drop(SqliteArchive::open(&archive).unwrap());
    assert_eq!((user_version(&hot), user_version(&archive)), (1, 2));
    let conn = Connection::open(&archive).unwrap();
    for table in ["archive_meta", "message_record", "history_index"] {
        assert!(table_sql(&conn, table).is_some(), "{table}");
    }
    assert!(table_sql(&conn, "history_index_log").is_none());
    assert!(table_sql(&conn, "history_index_all").is_none());
    let conn = Connection::open(&hot).unwrap();
    for table in [
        "conversation",
        "member",
        "message",
        "meta",
        "outbox",
        "dedup_log",
        "dedup",
    ] {
        assert!(table_sql(&conn, table).is_some(), "{table}");
    }
    // Opened again: nothing changes.
    drop(SqliteHot::open(&hot, 8).unwrap());
    assert_eq!(user_version(&hot), 1);
}

/// Adoption of an `outbox` made with `AUTOINCREMENT`, its newest rows dropped by retention
/// (so its `high` was only in `sqlite_sequence`): rebuilt without it, rows and offsets kept.
#[test]
fn an_autoincrement_outbox_is_rebuilt_with_its_rows_and_offsets() {
    let conn = Connection::open_in_memory().unwrap();
    hot_tables_but_the_outbox(&conn);
    conn.execute_batch(
        "CREATE TABLE outbox (
             rowid INTEGER PRIMARY KEY AUTOINCREMENT,
             appended_at INTEGER NOT NULL,
             envelope BLOB,
             tenant TEXT,
             conversation_id TEXT,
             conversation_seq INTEGER
         );
         INSERT INTO outbox (appended_at, tenant, conversation_id, conversation_seq)
             VALUES (1, 't', 'c', 1), (1, 't', 'c', 2), (1, 't', 'c', 3), (1, 't', 'c', 4),
                    (1, 't', 'c', 5);
         DELETE FROM outbox WHERE rowid IN (1, 5);",
    )
    .unwrap();
    let migrated = in_memory_from(conn, &HOT);
    let ddl = table_sql(&migrated, "outbox").unwrap();
    assert!(!ddl.contains("AUTOINCREMENT"), "{ddl}");
    assert!(table_sql(&migrated, "outbox_autoincrement").is_none());
    let rows: Vec<(i64, String, i64)> = migrated
        .prepare("SELECT rowid, tenant, conversation_seq FROM outbox ORDER BY rowid")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(
        rows,
        [(2, "t".into(), 2), (3, "t".into(), 3), (4, "t".into(), 4)]
    );
    // Offset 4 was handed out (row 5): the next append takes offset 5, not 4.
    assert_eq!(offsets(&migrated).unwrap(), (1, 5));
    append(&migrated, &[MessageRecord::sample(9, "new")], 2_000).unwrap();
    assert_eq!(offsets(&migrated).unwrap(), (1, 6));
    assert_eq!(fetch(&migrated, 5, 10).unwrap()[0].0, 5);
}

/// The outbox of the layout that held only envelopes (no reference columns), its log dropped
/// whole: rebuilt with the reference columns empty, the offsets going on.
#[test]
fn an_envelope_only_outbox_is_rebuilt_and_its_offsets_go_on() {
    let conn = Connection::open_in_memory().unwrap();
    hot_tables_but_the_outbox(&conn);
    let envelope = serde_json::to_vec(&MessageRecord::sample(1, "kept")).unwrap();
    conn.execute_batch(
        "CREATE TABLE outbox (
             rowid INTEGER PRIMARY KEY AUTOINCREMENT,
             appended_at INTEGER NOT NULL,
             envelope BLOB NOT NULL
         );",
    )
    .unwrap();
    for _ in 0..3 {
        conn.execute(
            "INSERT INTO outbox (appended_at, envelope) VALUES (1, ?1)",
            [&envelope],
        )
        .unwrap();
    }
    conn.execute_batch("DELETE FROM outbox WHERE rowid < 3")
        .unwrap();
    let migrated = in_memory_from(conn, &HOT);
    assert_eq!(offsets(&migrated).unwrap(), (2, 3));
    let kept = fetch(&migrated, 2, 10).unwrap();
    assert_eq!((kept.len(), kept[0].0), (1, 2));
    assert_eq!(kept[0].1.body, "kept");
    let refs: Option<String> = migrated
        .query_row("SELECT tenant FROM outbox", [], |r| r.get(0))
        .unwrap();
    assert_eq!(refs, None);
}

/// A file made before versions whose outbox is already version 1's: adoption changes nothing.
#[test]
fn an_outbox_of_version_1_is_left_as_it_is() {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(HOT_V1).unwrap();
    conn.execute_batch("INSERT INTO outbox (rowid, appended_at) VALUES (7, 1)")
        .unwrap();
    let migrated = in_memory_from(conn, &HOT);
    assert_eq!(offsets(&migrated).unwrap(), (6, 7));
    assert!(table_sql(&migrated, "sqlite_sequence").is_none());
}

/// Adoption of an archive with the expiry indexes of index entries: dropped; rows and the
/// archive's identity kept.
#[test]
fn the_expiry_indexes_of_index_entries_are_dropped_and_the_identity_kept() {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(ARCHIVE_V1).unwrap();
    conn.execute_batch(
        "CREATE INDEX history_index_expiry ON history_index (expires_at)
             WHERE expires_at IS NOT NULL;
         CREATE INDEX history_index_log_expiry ON history_index_log (expires_at)
             WHERE expires_at IS NOT NULL;
         INSERT INTO archive_meta VALUES ('identity', 42);
         INSERT INTO history_index VALUES ('t', 'c', 0, 1, 'm1', 99);
         INSERT INTO history_index_log (tenant, conversation_id, conversation_seq, message_id,
             expires_at) VALUES ('t', 'c', 2, 'm2', 99);",
    )
    .unwrap();
    let migrated = in_memory_from(conn, &ARCHIVE);
    assert!(table_sql(&migrated, "history_index_expiry").is_none());
    assert!(table_sql(&migrated, "history_index_log_expiry").is_none());
    let identity: i64 = migrated
        .query_row(
            "SELECT value FROM archive_meta WHERE key = 'identity'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(identity, 42);
    let entries: i64 = migrated
        .query_row("SELECT count(*) FROM history_index", [], |r| r.get(0))
        .unwrap();
    assert_eq!(entries, 2);
}

/// Version 1 → 2: the log's entries are merged into the keyed index (with their seq bucket;
/// a replay of an entry the index holds leaves it as it is), the log and its view dropped.
#[test]
fn version_2_merges_the_index_log_into_the_history_index_and_drops_it() {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(ARCHIVE_V1).unwrap();
    conn.execute_batch(
        "PRAGMA user_version = 1;
         INSERT INTO archive_meta VALUES ('identity', 7);
         INSERT INTO history_index VALUES ('t', 'c', 0, 1, 'm1', NULL);
         INSERT INTO history_index_log (tenant, conversation_id, conversation_seq, message_id,
             expires_at)
         VALUES ('t', 'c', 1, 'm1', NULL), ('t', 'd', 1500, 'm3', 99), ('t', 'c', 2, 'm2', NULL),
                ('t', 'd', 1500, 'm3', 99);",
    )
    .unwrap();
    let migrated = in_memory_from(conn, &ARCHIVE);
    let entries: Vec<(String, i64, i64, String, Option<i64>)> = migrated
        .prepare(
            "SELECT conversation_id, seq_bucket, conversation_seq, message_id, expires_at
             FROM history_index ORDER BY conversation_id, conversation_seq",
        )
        .unwrap()
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(
        entries,
        [
            ("c".into(), 0, 1, "m1".into(), None),
            ("c".into(), 0, 2, "m2".into(), None),
            ("d".into(), 1, 1500, "m3".into(), Some(99)),
        ]
    );
    assert!(table_sql(&migrated, "history_index_log").is_none());
    assert!(table_sql(&migrated, "history_index_all").is_none());
    let version: i64 = migrated
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 2);
}

/// A file of a newer build is refused at open, naming it and both versions, and left as is.
#[test]
fn files_of_a_newer_build_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (name, known) in [("hot.db", 1), ("archive.db", 2)] {
        let path = dir.path().join(name);
        Connection::open(&path)
            .unwrap()
            .execute_batch("PRAGMA user_version = 3")
            .unwrap();
        let err = if name == "hot.db" {
            SqliteHot::open(&path, 8).map(drop)
        } else {
            SqliteArchive::open(&path).map(drop)
        }
        .unwrap_err()
        .to_string();
        let expected = format!(
            "sqlite: {} has schema version 3, this build knows up to {known}: use a newer tidemark",
            path.display()
        );
        assert_eq!(err, expected);
        let conn = Connection::open(&path).unwrap();
        assert!(
            table_sql(&conn, "message").is_none() && table_sql(&conn, "message_record").is_none()
        );
        assert_eq!(user_version(&path), 3);
    }
}

/// `conn` (in memory) brought to `versions`'s version.
fn in_memory_from(conn: Connection, versions: &Versions<SqliteUp>) -> Connection {
    tidemark_core::schema::migrate_sqlite(&conn, Path::new(":memory:"), versions).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, versions.known());
    conn
}
