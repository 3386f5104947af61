//! The events port conformance suites (`tidemark_events::conformance`) on the production
//! engines: MariaDB for the summary tier (the machine's server, `TEST_MYSQL_URL`; a
//! scratch database per test, dropped afterwards).

use std::sync::Arc;

use tidemark_core::mysql::{drop_database, scratch_database, test_server_url};
use tidemark_events::conformance;
use tidemark_events::rollups::MysqlRollups;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_rollup_store() {
    let url = scratch_database(&test_server_url(), "tm_rollups")
        .await
        .unwrap();
    let store = MysqlRollups::connect(&url, 4).await.unwrap();
    conformance::rollup_store(Arc::new(store.clone())).await;
    store.pool().close().await;
    drop_database(&url).await.unwrap();
}

/// The report reads the account's listings from `listings_account` and, per listing, a range
/// of `listing_daily`'s (and `listing_monthly`'s) clustered primary key — never a scan of the
/// whole table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_reads_ranges_of_the_primary_key() {
    use sqlx::Row;
    use tidemark_core::day::UtcDay;
    use tidemark_events::rollups::{DailyRow, RollupStore, mysql_report_part_sql};

    let url = scratch_database(&test_server_url(), "tm_rollups_plan")
        .await
        .unwrap();
    let store = MysqlRollups::connect(&url, 2).await.unwrap();
    // 10 accounts × 30 listings × 60 days.
    let pairs: Vec<(i64, i64)> = (0..300).map(|i| (1_000 + i, i % 10)).collect();
    store.put_listings("t", &pairs).await.unwrap();
    let first = UtcDay::parse("2026-01-01").unwrap();
    for d in 0..60 {
        let rows = pairs
            .iter()
            .map(|(l, _)| DailyRow {
                listing_id: *l,
                kind: "view".into(),
                total: 2,
                uniques: 1,
            })
            .collect();
        store.upsert_day(first.plus(d), rows).await.unwrap();
    }
    sqlx::query("ANALYZE TABLE listing_daily, listing_monthly, listings")
        .execute(store.pool())
        .await
        .unwrap();
    let (from, to) = (first.plus(10), first.plus(39));
    // Each part of the report: the account's listings from `listings_account`, then a range
    // of the table's primary key per listing.
    for (table, column) in [("listing_daily", "day"), ("listing_monthly", "month")] {
        let rows = sqlx::query(&format!(
            "EXPLAIN {}",
            mysql_report_part_sql(table, column, false)
        ))
        .bind(from.to_string())
        .bind(to.to_string())
        .bind("t")
        .bind(3_i64)
        .fetch_all(store.pool())
        .await
        .unwrap();
        let plan: Vec<(String, String)> = rows
            .iter()
            .map(|r| {
                let text = |c: &str| -> String {
                    r.try_get::<Option<String>, _>(c)
                        .ok()
                        .flatten()
                        .or_else(|| {
                            r.try_get::<Option<Vec<u8>>, _>(c)
                                .ok()
                                .flatten()
                                .map(|b| String::from_utf8_lossy(&b).into_owned())
                        })
                        .unwrap_or_default()
                };
                (text("table"), text("key"))
            })
            .collect();
        assert_eq!(
            plan,
            vec![
                ("l".to_owned(), "listings_account".to_owned()),
                ("d".to_owned(), "PRIMARY".to_owned())
            ],
            "{table}: {plan:?}"
        );
    }
    let report = store.report("t", 3, from, to, None).await.unwrap();
    assert_eq!(report.len(), 30);
    assert!(
        report
            .iter()
            .all(|r| r.total == 60 && r.uniques_daily_sum == 30)
    );
    store.pool().close().await;
    drop_database(&url).await.unwrap();
}
