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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_period_uniques() {
    let url = scratch_database(&test_server_url(), "tm_uniques")
        .await
        .unwrap();
    let store = MysqlRollups::connect(&url, 4).await.unwrap();
    conformance::period_uniques(Arc::new(store.clone())).await;
    store.pool().close().await;
    drop_database(&url).await.unwrap();
}

/// The report reads the account's listings from `listings_account` and, per listing, a range
/// of `listing_daily`'s (and `listing_monthly`'s) clustered primary key — never a scan of the
/// whole table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_reads_ranges_of_the_primary_key() {
    use sqlx::Row;
    use tidemark_core::day::Day;
    use tidemark_events::rollups::{DailyRow, RollupStore, mysql_report_part_sql};

    let url = scratch_database(&test_server_url(), "tm_rollups_plan")
        .await
        .unwrap();
    let store = MysqlRollups::connect(&url, 2).await.unwrap();
    // 10 accounts × 30 listings × 60 days.
    let pairs: Vec<(i64, i64)> = (0..300).map(|i| (1_000 + i, i % 10)).collect();
    store.put_listings("t", &pairs).await.unwrap();
    let first = Day::parse("2026-01-01").unwrap();
    for d in 0..60 {
        let rows = pairs
            .iter()
            .map(|(l, _)| DailyRow {
                listing_id: *l,
                kind: "view".into(),
                total: 2,
                uniques: 1,
                visitors: Vec::new(),
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
        .bind(0_i64)
        .bind(i64::MAX)
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

async fn schema_version(pool: &sqlx::MySqlPool) -> Option<i64> {
    sqlx::query_scalar("SELECT version FROM tidemark_schema_version WHERE store = 'events_rollups'")
        .fetch_optional(pool)
        .await
        .unwrap()
}

/// A database made before versions were recorded and before `listing_monthly`: adopted at
/// connect, `listing_monthly` built from the days, the report reading them through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_made_before_listing_monthly_gets_it_built_from_the_days() {
    use tidemark_core::day::Day;
    use tidemark_events::rollups::{ReportRow, RollupStore};

    let url = scratch_database(&test_server_url(), "tm_rollups_adopt")
        .await
        .unwrap();
    let pool = tidemark_core::mysql::connect(&url, 2).await.unwrap();
    for sql in [
        "CREATE TABLE listing_daily (
            listing_id BIGINT NOT NULL, day DATE NOT NULL, event VARCHAR(100) NOT NULL,
            total BIGINT UNSIGNED NOT NULL, uniques BIGINT UNSIGNED NOT NULL,
            PRIMARY KEY (listing_id, day, event), KEY listing_daily_day (day)
        ) ENGINE=InnoDB",
        "CREATE TABLE listings (
            tenant VARCHAR(255) NOT NULL, id BIGINT NOT NULL, account_id BIGINT NOT NULL,
            PRIMARY KEY (tenant, id), KEY listings_account (tenant, account_id, id)
        ) ENGINE=InnoDB",
        "INSERT INTO listings VALUES ('t', 7, 1)",
        "INSERT INTO listing_daily VALUES (7, '2026-01-01', 'view', 10, 4),
            (7, '2026-01-31', 'view', 5, 2), (7, '2026-02-01', 'view', 1, 1)",
    ] {
        sqlx::query(sql).execute(&pool).await.unwrap();
    }
    let store = MysqlRollups::connect(&url, 2).await.unwrap();
    assert_eq!(schema_version(&pool).await, Some(4));
    let months: Vec<(String, i64, i64, i32)> = sqlx::query_as(
        "SELECT CAST(month AS CHAR), total, uniques, days FROM listing_monthly ORDER BY month",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        months,
        [
            ("2026-01-01".into(), 15, 6, 2),
            ("2026-02-01".into(), 1, 1, 1)
        ]
    );
    let from = Day::parse("2026-01-01").unwrap();
    let to = Day::parse("2026-02-28").unwrap();
    let report = store.report("t", 1, from, to, None).await.unwrap();
    assert_eq!(
        report,
        [ReportRow {
            listing_id: 7,
            kind: "view".into(),
            total: 16,
            uniques_daily_sum: 7,
            uniques_period: None,
        }]
    );
    // A second connect finds version 2: nothing runs again.
    drop(MysqlRollups::connect(&url, 2).await.unwrap());
    let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM listing_monthly")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(n, 2);
    store.pool().close().await;
    pool.close().await;
    drop_database(&url).await.unwrap();
}

/// A database a newer build migrated is refused, naming it and both versions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_of_a_newer_build_is_refused() {
    let url = scratch_database(&test_server_url(), "tm_rollups_newer")
        .await
        .unwrap();
    let store = MysqlRollups::connect(&url, 2).await.unwrap();
    sqlx::query("UPDATE tidemark_schema_version SET version = 5 WHERE store = 'events_rollups'")
        .execute(store.pool())
        .await
        .unwrap();
    let err = MysqlRollups::connect(&url, 2)
        .await
        .unwrap_err()
        .to_string();
    let database = url.rsplit('/').next().unwrap();
    assert_eq!(
        err,
        format!(
            "database {database} has events_rollups schema version 5, this build knows up to 4: use a newer tidemark"
        )
    );
    store.pool().close().await;
    drop_database(&url).await.unwrap();
}

/// Nodes sharing the summary tier agree on the events schema: the first records it, a node
/// that only adds a kind or a field moves it forward, and a node that lacks one, or retypes a
/// field, is refused naming `events.schema` and what it lacks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_sharing_the_summary_tier_agree_on_the_schema() {
    use tidemark_events::rollups::RollupStore;
    use tidemark_events::schema::{FieldType, Schema};

    let url = scratch_database(&test_server_url(), "tm_rollups_schema")
        .await
        .unwrap();
    let store = MysqlRollups::connect(&url, 2).await.unwrap();
    let first = Schema::default();
    store.agree_schema(&first).await.unwrap();
    store.agree_schema(&first).await.unwrap();
    let mut wider = first.clone();
    wider.kinds.push("purchase".into());
    wider.fields.insert("price".into(), FieldType::Float);
    store.agree_schema(&wider).await.unwrap();
    let err = store.agree_schema(&first).await.unwrap_err();
    assert_eq!(err.kind(), tidemark_core::store::ErrorKind::Rejected);
    assert!(
        err.to_string().contains(
            "events.schema differs from the schema of the other nodes sharing this summary \
             tier: it lacks kind \"purchase\", field `price`"
        ),
        "{err}"
    );
    let mut retyped = wider.clone();
    retyped.fields.insert("price".into(), FieldType::Int);
    let err = store.agree_schema(&retyped).await.unwrap_err().to_string();
    assert!(err.contains("field `price` as Float (not Int)"), "{err}");
    store.pool().close().await;
    drop_database(&url).await.unwrap();
}

/// Two nodes rolling up the days of one month at once update the same month rows: InnoDB may
/// pick one of them as a deadlock victim, whose transaction is then run again. Every upsert
/// succeeds and the month holds the sum of the days.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn days_of_one_month_upserted_at_once_on_two_nodes_all_land() {
    use tidemark_core::day::Day;
    use tidemark_events::rollups::{DailyRow, RollupStore};

    let url = scratch_database(&test_server_url(), "tm_rollups_month")
        .await
        .unwrap();
    let a = MysqlRollups::connect(&url, 4).await.unwrap();
    let b = MysqlRollups::connect(&url, 4).await.unwrap();
    let first = Day::parse("2026-11-01").unwrap();
    let rows = |d: i32| -> Vec<DailyRow> {
        (0..300)
            .flat_map(|l| {
                ["view", "click"].map(|kind| DailyRow {
                    listing_id: 1_000 + l,
                    kind: kind.into(),
                    total: u64::try_from(d).unwrap() + 1,
                    uniques: 1,
                    visitors: Vec::new(),
                })
            })
            .collect()
    };
    let mut jobs = Vec::new();
    for d in 0..16 {
        let store = if d % 2 == 0 { a.clone() } else { b.clone() };
        let rows = rows(d);
        jobs.push(tokio::spawn(async move {
            store.upsert_day(first.plus(d), rows).await
        }));
    }
    for j in jobs {
        assert_eq!(j.await.unwrap().unwrap(), 600);
    }
    let (total, days): (i64, i64) = sqlx::query_as(
        "SELECT CAST(SUM(total) AS SIGNED), CAST(MAX(days) AS SIGNED) FROM listing_monthly",
    )
    .fetch_one(a.pool())
    .await
    .unwrap();
    // Per listing and kind: 1 + 2 + … + 16 over the 16 days.
    assert_eq!((total, days), (600 * 136, 16));
    a.pool().close().await;
    b.pool().close().await;
    drop_database(&url).await.unwrap();
}
