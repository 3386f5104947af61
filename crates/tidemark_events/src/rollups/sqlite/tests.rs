use super::*;

fn row(listing_id: i64, kind: &str, total: u64, uniques: u64) -> DailyRow {
    DailyRow {
        listing_id,
        kind: kind.into(),
        total,
        uniques,
    }
}

fn report_row(listing_id: i64, kind: &str, total: u64, uniques_daily_sum: u64) -> ReportRow {
    ReportRow {
        listing_id,
        kind: kind.into(),
        total,
        uniques_daily_sum,
    }
}

fn open() -> (tempfile::TempDir, SqliteRollups) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteRollups::open(&dir.path().join("rollups.db")).unwrap();
    (dir, store)
}

#[tokio::test]
async fn upsert_day_replaces_the_day_and_leaves_other_days() {
    let (_dir, s) = open();
    let d = UtcDay::parse("2026-11-28").unwrap();
    let next = d.plus(1);
    s.upsert_day(d, vec![row(1, "view", 5, 3), row(2, "click", 1, 1)])
        .await
        .unwrap();
    s.upsert_day(next, vec![row(2, "click", 9, 9)])
        .await
        .unwrap();
    // The same rows again: nothing doubles.
    s.upsert_day(d, vec![row(2, "click", 1, 1), row(1, "view", 5, 3)])
        .await
        .unwrap();
    assert_eq!(
        s.day_rows(d).await.unwrap(),
        vec![row(1, "view", 5, 3), row(2, "click", 1, 1)]
    );
    // A re-run with changed totals, a new row, and one row no longer produced.
    let n = s
        .upsert_day(d, vec![row(1, "view", 6, 4), row(3, "contact", 2, 1)])
        .await
        .unwrap();
    assert_eq!(n, 2);
    assert_eq!(
        s.day_rows(d).await.unwrap(),
        vec![row(1, "view", 6, 4), row(3, "contact", 2, 1)]
    );
    assert_eq!(s.day_rows(next).await.unwrap(), vec![row(2, "click", 9, 9)]);
    // An empty run empties only that day.
    assert_eq!(s.upsert_day(d, vec![]).await.unwrap(), 0);
    assert!(s.day_rows(d).await.unwrap().is_empty());
    assert_eq!(s.day_rows(next).await.unwrap(), vec![row(2, "click", 9, 9)]);
}

#[tokio::test]
async fn report_sums_per_listing_and_kind_for_the_account_of_the_tenant() {
    let (_dir, s) = open();
    let d1 = UtcDay::parse("2026-01-01").unwrap();
    let d2 = d1.plus(1);
    let d3 = d1.plus(2);
    s.put_listings("acme", &[(10, 1), (11, 1), (12, 2), (13, 1)])
        .await
        .unwrap();
    // Another tenant maps listing 12 to account 1: acme's account 1 must not see it.
    s.put_listings("other", &[(12, 1)]).await.unwrap();
    // Move 13 to account 2 (a later pair wins).
    assert_eq!(
        s.put_listings("acme", &[(13, 9), (13, 2)]).await.unwrap(),
        2
    );
    s.upsert_day(
        d1,
        vec![
            row(10, "view", 5, 3),
            row(10, "click", 1, 1),
            row(11, "view", 2, 2),
            row(12, "view", 100, 50),
            row(13, "view", 7, 7),
        ],
    )
    .await
    .unwrap();
    s.upsert_day(d2, vec![row(10, "view", 4, 4), row(12, "view", 1, 1)])
        .await
        .unwrap();
    s.upsert_day(d3, vec![row(10, "view", 1000, 1000)])
        .await
        .unwrap();

    let r = s.report("acme", 1, d1, d2, None).await.unwrap();
    assert_eq!(
        r,
        vec![
            report_row(10, "click", 1, 1),
            report_row(10, "view", 9, 7),
            report_row(11, "view", 2, 2),
        ]
    );
    let r = s.report("acme", 1, d1, d2, Some("view")).await.unwrap();
    assert_eq!(
        r,
        vec![report_row(10, "view", 9, 7), report_row(11, "view", 2, 2)]
    );
    let r = s.report("acme", 1, d2, d3, None).await.unwrap();
    assert_eq!(r, vec![report_row(10, "view", 1004, 1004)]);
    let r = s.report("acme", 2, d1, d3, None).await.unwrap();
    assert_eq!(
        r,
        vec![
            report_row(12, "view", 101, 51),
            report_row(13, "view", 7, 7)
        ]
    );
    let r = s.report("other", 1, d1, d3, None).await.unwrap();
    assert_eq!(r, vec![report_row(12, "view", 101, 51)]);
    assert!(s.report("acme", 3, d1, d3, None).await.unwrap().is_empty());
    assert!(
        s.report("nobody", 1, d1, d3, None)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn the_report_seeks_each_listing_and_kind_and_sums_without_sorting() {
    let (dir, _s) = open();
    let conn = Connection::open(dir.path().join("rollups.db")).unwrap();
    let plan: Vec<String> = conn
        .prepare(&format!("EXPLAIN QUERY PLAN {REPORT_SUMS}"))
        .unwrap()
        .query_map(params![1, 0, 1, Option::<String>::None], |r| r.get(3))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(
        plan,
        vec![
            "SCAN k".to_owned(),
            "SEARCH d USING PRIMARY KEY (listing_id=? AND event=? AND day>? AND day<?)".to_owned()
        ],
        "no temp B-tree, no scan of listing_daily"
    );
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

#[tokio::test]
async fn kinds_no_longer_configured_still_report() {
    let (_dir, s) = open();
    let d = UtcDay::parse("2026-01-01").unwrap();
    s.put_listings("t", &[(1, 1)]).await.unwrap();
    s.upsert_day(d, vec![row(1, "phone_reveal", 3, 2)])
        .await
        .unwrap();
    s.upsert_day(d, vec![row(1, "view", 1, 1)]).await.unwrap();
    s.upsert_day(d.plus(-1), vec![row(1, "phone_reveal", 4, 4)])
        .await
        .unwrap();
    assert_eq!(
        s.report("t", 1, d.plus(-1), d, None).await.unwrap(),
        vec![
            report_row(1, "phone_reveal", 4, 4),
            report_row(1, "view", 1, 1)
        ]
    );
}
