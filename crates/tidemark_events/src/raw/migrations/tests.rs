use std::path::Path;

use super::*;
use crate::raw::SqliteRaw;
use crate::raw::catalog::{PENDING_EXPIRES_MS, days, mark_dropped_if_current};
use tidemark_core::day::Day;

/// The catalog columns, in order.
fn columns(conn: &Connection) -> Vec<String> {
    conn.prepare("SELECT name FROM pragma_table_info('raw_day')")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

fn migrated(conn: &Connection) {
    tidemark_core::schema::migrate_sqlite(conn, Path::new(":memory:"), &RAW).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 1);
}

const BEFORE_APPENDS_IN_FLIGHT: &str = "CREATE TABLE raw_day (
    day INTEGER PRIMARY KEY,
    events INTEGER NOT NULL,
    last_arrival_ms INTEGER NOT NULL,
    rolled_up_arrival_ms INTEGER,
    archived_arrival_ms INTEGER,
    dropped_ms INTEGER
);
INSERT INTO raw_day VALUES (20000, 12, 1000, 1000, 900, NULL);";

/// A catalog made before appends in flight were counted gains `pending` and `next_seq` (and
/// `pending_since_ms`), its days kept as they were.
#[test]
fn a_catalog_without_appends_in_flight_gains_their_columns() {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(BEFORE_APPENDS_IN_FLIGHT).unwrap();
    migrated(&conn);
    assert_eq!(
        columns(&conn),
        [
            "day",
            "events",
            "last_arrival_ms",
            "rolled_up_arrival_ms",
            "archived_arrival_ms",
            "dropped_ms",
            "pending",
            "next_seq",
            "pending_since_ms"
        ]
    );
    let (pending, next_seq, since): (i64, i64, Option<i64>) = conn
        .query_row(
            "SELECT pending, next_seq, pending_since_ms FROM raw_day",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!((pending, next_seq, since), (0, 0, None));
    let day = days(&conn).unwrap()[0];
    assert_eq!(
        (day.day, day.events, day.last_arrival_ms),
        (Day(20_000), 12, 1_000)
    );
}

/// A catalog made before the start of appends in flight was kept gains `pending_since_ms`; a
/// day still counting events in flight holds as if they began at the adoption, then goes.
#[test]
fn a_catalog_without_the_start_of_appends_gains_it() {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(
        "CREATE TABLE raw_day (
             day INTEGER PRIMARY KEY,
             events INTEGER NOT NULL,
             last_arrival_ms INTEGER NOT NULL,
             rolled_up_arrival_ms INTEGER,
             archived_arrival_ms INTEGER,
             dropped_ms INTEGER,
             pending INTEGER NOT NULL DEFAULT 0,
             next_seq INTEGER NOT NULL DEFAULT 0
         );
         INSERT INTO raw_day VALUES (20000, 5, 1000, 1000, 1000, NULL, 2, 7);
         INSERT INTO raw_day VALUES (20001, 5, 1000, 1000, 1000, NULL, 0, 5);",
    )
    .unwrap();
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    migrated(&conn);
    assert!(columns(&conn).contains(&"pending_since_ms".to_owned()));
    let since: Vec<Option<i64>> = conn
        .prepare("SELECT pending_since_ms FROM raw_day ORDER BY day")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    let start = since[0].expect("the day in flight has a start");
    assert!(
        (before - 1_000..before + 60_000).contains(&start),
        "{start}"
    );
    assert_eq!(since[1], None);
    let next_seq: i64 = conn
        .query_row("SELECT next_seq FROM raw_day WHERE day = 20000", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(next_seq, 7);
    let day = Day(20_000);
    assert!(
        !mark_dropped_if_current(&conn, day, start + 1).unwrap(),
        "held"
    );
    assert!(mark_dropped_if_current(&conn, day, start + PENDING_EXPIRES_MS + 1).unwrap());
}

/// `raw.db` of a newer build is refused, naming the file and both versions.
#[test]
fn a_raw_db_of_a_newer_build_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("raw.db");
    drop(SqliteRaw::open(&path).unwrap());
    let conn = Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 1);
    conn.execute_batch("PRAGMA user_version = 2").unwrap();
    let err = SqliteRaw::open(&path).unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "{} has schema version 2, this build knows up to 1: use a newer tidemark",
            path.display()
        )
    );
}
