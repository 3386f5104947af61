use std::path::Path;

use tidemark_core::day::Day;

use super::*;
use crate::rollups::{ReportRow, RollupStore, SqliteRollups};

/// A report row of listing 7, the listing of these tests.
fn row(kind: &str, total: u64, uniques_daily_sum: u64) -> ReportRow {
    ReportRow {
        listing_id: 7,
        kind: kind.into(),
        total,
        uniques_daily_sum,
        uniques_period: None,
    }
}

fn user_version(path: &Path) -> i64 {
    Connection::open(path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap()
}

/// A `rollups.db` made before versions were recorded, of the layout before `rollup_kinds`
/// (`listing_daily` keyed `(listing_id, day, event)`): rebuilt with version 1's key, its kinds
/// listed, and its days reported as before.
#[tokio::test]
async fn a_rollups_db_keyed_by_day_first_is_rekeyed_and_reports_its_days() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rollups.db");
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "CREATE TABLE listing_daily (
                 listing_id INTEGER NOT NULL,
                 day INTEGER NOT NULL,
                 event TEXT NOT NULL,
                 total INTEGER NOT NULL,
                 uniques INTEGER NOT NULL,
                 PRIMARY KEY (listing_id, day, event)
             ) WITHOUT ROWID;
             CREATE INDEX listing_daily_day ON listing_daily (day);
             CREATE TABLE listings (
                 tenant TEXT NOT NULL,
                 listing_id INTEGER NOT NULL,
                 account_id INTEGER NOT NULL,
                 PRIMARY KEY (tenant, listing_id)
             ) WITHOUT ROWID;
             CREATE INDEX listings_account ON listings (tenant, account_id);
             INSERT INTO listings VALUES ('t', 7, 1);
             INSERT INTO listing_daily VALUES (7, 20000, 'view', 10, 4), (7, 20001, 'view', 5, 2),
                 (7, 20001, 'click', 3, 1), (8, 20000, 'view', 1, 1);",
        )
        .unwrap();
    let store = SqliteRollups::open(&path).unwrap();
    assert_eq!(user_version(&path), 5);
    let conn = Connection::open(&path).unwrap();
    assert_eq!(listing_daily_key(&conn).unwrap(), "listing_id,event,day");
    let kinds: Vec<String> = conn
        .prepare("SELECT kind FROM rollup_kinds ORDER BY kind")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(kinds, ["click", "view"]);
    let indexes: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE name IN ('listing_daily_day', 'listings_account')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(indexes, 2);
    let report = store
        .report("t", 1, Day(20_000), Day(20_001), None)
        .await
        .unwrap();
    assert_eq!(report, [row("click", 3, 1), row("view", 15, 6)]);
    assert_eq!(store.day_rows(Day(20_000)).await.unwrap().len(), 2);
}

/// A `rollups.db` of version 1's layout made before versions: its kinds listed, nothing else
/// changed.
#[test]
fn a_rollups_db_of_version_1_layout_keeps_its_rows() {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(SQLITE_V1).unwrap();
    conn.execute_batch("INSERT INTO listing_daily VALUES (7, 20000, 'view', 10, 4);")
        .unwrap();
    tidemark_core::schema::migrate_sqlite(&conn, Path::new(":memory:"), &SQLITE).unwrap();
    let (rows, kinds): (i64, i64) = conn
        .query_row(
            "SELECT (SELECT count(*) FROM listing_daily), (SELECT count(*) FROM rollup_kinds)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((rows, kinds), (1, 1));
}

/// A `rollups.db` of version 1 gets version 2's `listing_monthly`, built from its days, and a
/// year's report reading the months answers as the days did.
#[tokio::test]
async fn a_version_1_rollups_db_gets_month_sums_of_its_days() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rollups.db");
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch(SQLITE_V1).unwrap();
    // 2024-01-30, 2024-01-31 and 2024-02-01 as day numbers: 19752, 19753, 19754.
    conn.execute_batch(
        "PRAGMA user_version = 1;
         INSERT INTO listings VALUES ('t', 7, 1);
         INSERT INTO rollup_kinds VALUES ('view'), ('click');
         INSERT INTO listing_daily VALUES (7, 19752, 'view', 10, 4), (7, 19753, 'view', 5, 2),
             (7, 19754, 'view', 1, 1), (7, 19754, 'click', 3, 1);",
    )
    .unwrap();
    drop(conn);
    let store = SqliteRollups::open(&path).unwrap();
    assert_eq!(user_version(&path), 5);
    let months: Vec<(i64, String, i64, i64, i64)> = Connection::open(&path)
        .unwrap()
        .prepare(
            "SELECT month, event, total, uniques, days FROM listing_monthly ORDER BY month, event",
        )
        .unwrap()
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    // 2024-01-01 is day 19723, 2024-02-01 day 19754.
    assert_eq!(
        months,
        [
            (19_723, "view".to_owned(), 15, 6, 2),
            (19_754, "click".to_owned(), 3, 1, 1),
            (19_754, "view".to_owned(), 1, 1, 1),
        ]
    );
    let year = store
        .report("t", 1, Day(19_723), Day(19_723 + 365), None)
        .await
        .unwrap();
    assert_eq!(year, [row("click", 3, 1), row("view", 16, 7)]);
}

/// A `rollups.db` of a newer build is refused, naming the file and both versions.
#[test]
fn a_rollups_db_of_a_newer_build_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rollups.db");
    drop(SqliteRollups::open(&path).unwrap());
    Connection::open(&path)
        .unwrap()
        .execute_batch("PRAGMA user_version = 9")
        .unwrap();
    let err = SqliteRollups::open(&path).unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "{} has schema version 9, this build knows up to 5: use a newer tidemark",
            path.display()
        )
    );
}
