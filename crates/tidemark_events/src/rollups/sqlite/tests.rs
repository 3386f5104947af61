//! SQLite-specific checks (query plans); the port's contract is `crate::conformance::rollup_store`,
//! run in `tests/conformance_sqlite.rs`.

use super::*;

fn open() -> (tempfile::TempDir, SqliteRollups) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteRollups::open(&dir.path().join("rollups.db")).unwrap();
    (dir, store)
}

#[tokio::test]
async fn the_report_seeks_each_listing_and_kind_and_sums_without_sorting() {
    let (dir, _s) = open();
    let conn = Connection::open(dir.path().join("rollups.db")).unwrap();
    for (sql, table, column) in [(REPORT_DAYS, "d", "day"), (REPORT_MONTHS, "d", "month")] {
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .unwrap()
            .query_map(params![1, 0, 1, Option::<String>::None], |r| r.get(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(
            plan,
            vec![
                "SCAN k".to_owned(),
                format!(
                    "SEARCH {table} USING PRIMARY KEY (listing_id=? AND event=? AND {column}>? AND {column}<?)"
                )
            ],
            "no temp B-tree, no scan of the table"
        );
    }
    let plan: String = conn
        .query_row(
            "EXPLAIN QUERY PLAN SELECT listing_id FROM listings WHERE tenant = ?1 AND account_id = ?2
             ORDER BY listing_id",
            params!["t", 1],
            |r| r.get(3),
        )
        .unwrap();
    assert_eq!(
        plan,
        "SEARCH listings USING COVERING INDEX listings_account (tenant=? AND account_id=?)"
    );
}

/// A file that is not a database is refused naming the file, for both of the embedded tiers
/// (SQLite's message names none).
#[test]
fn an_open_error_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    tidemark_core::sqlite::assert_open_names_the_file(
        &dir.path().join("raw.db"),
        crate::raw::SqliteRaw::open,
    );
    tidemark_core::sqlite::assert_open_names_the_file(
        &dir.path().join("rollups.db"),
        SqliteRollups::open,
    );
}
