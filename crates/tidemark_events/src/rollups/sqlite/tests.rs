use std::time::Instant;

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

/// The report bar of the issue: an account with 900 listings over a year of `listing_daily`
/// (≈ 330,000 of its rows) among nine other such accounts. Prints p50/p99; run with
/// `cargo test -p tidemark_events --release -- --ignored --nocapture report_latency`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement; prints figures"]
async fn report_latency_900_listings_over_a_year() {
    let (_dir, s) = open();
    let accounts = 10i64;
    let per_account = 900i64;
    let pairs: Vec<(i64, i64)> = (0..accounts * per_account)
        // Interleaved ids: an account's listings are spread over the whole key space.
        .map(|i| (1_000_000 + i * 7919 % 9_000_001, i % accounts))
        .collect();
    s.put_listings("demo", &pairs).await.unwrap();
    let last = UtcDay::parse("2026-11-29").unwrap();
    let first = last.plus(-365);
    let t = Instant::now();
    for d in 0..366 {
        let day = first.plus(d);
        let rows = pairs
            .iter()
            .flat_map(|&(l, _)| {
                let mut v = vec![row(l, "view", 20 + (l as u64 + d as u64) % 30, 10)];
                if (l + i64::from(d)) % 10 == 0 {
                    v.push(row(l, "click", 2, 1));
                }
                v
            })
            .collect();
        s.upsert_day(day, rows).await.unwrap();
    }
    let load = t.elapsed();
    let mut lat = Vec::new();
    // listing_daily rows of account 0 in the period: one view a day, a click every tenth day.
    let account_rows: usize = (0..366i64)
        .map(|d| {
            pairs
                .iter()
                .filter(|&&(_, a)| a == 0)
                .map(|&(l, _)| 1 + usize::from((l + d) % 10 == 0))
                .sum::<usize>()
        })
        .sum();
    for i in 0..200 {
        let t = Instant::now();
        let r = s
            .report("demo", i % accounts, first, last, None)
            .await
            .unwrap();
        lat.push(t.elapsed());
        assert_eq!(r.len(), 1800);
    }
    lat.sort();
    println!(
        "loaded 366 days × {} listings in {load:.1?}; report of 900 listings × 366 days ({} rows summed into 1800): p50 {:.1?} p99 {:.1?} max {:.1?}",
        pairs.len(),
        account_rows,
        lat[100],
        lat[197],
        lat[199]
    );
}
