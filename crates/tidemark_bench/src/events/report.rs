//! Part 4 of `tidemark-bench events`: the yearly report of one account.
//!
//! A fresh [`SqliteRollups`] in a temp dir (or, with `--report-mysql`, a [`MysqlRollups`] in a
//! scratch database on that MariaDB server) gets `--report-accounts` accounts of
//! `--report-listings` listings each (ids interleaved, so an account's listings are spread
//! over the whole key space) and `--report-days` days of `listing_daily`, written day by day
//! through [`RollupStore::upsert_day`] as the rollup writes them: per listing and day a view
//! row on 82 % of the days, a click row on 13 %, a contact row on 5 % — about one row per
//! listing and day, so 900 listings over 366 days are about 330,000 rows. Then
//! [`RollupStore::report`] of account 0 over all the days is run once untimed and
//! `--report-runs` times timed, one after another; its answer is checked against sums kept
//! while writing.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::ensure;
use tidemark_core::clock::{Clock, SystemClock};
use tidemark_core::day::UtcDay;
use tidemark_core::mysql::{drop_database, scratch_database};
use tidemark_events::rollups::{DailyRow, MysqlRollups, ReportRow, RollupStore, SqliteRollups};

use super::super::sqlite_bytes;
use super::{
    BAR_LISTINGS, BAR_REPORT_P99_MS, Bar, EventsBenchArgs, SEED_REPORT_MS, mix, opt, quantile_ms,
};

/// The tenant of the listings.
const TENANT: &str = "demo";
/// The account reported on.
const ACCOUNT: i64 = 0;

/// Figures of the report part.
#[derive(Debug)]
pub(super) struct ReportFigures {
    listings: u64,
    accounts: u64,
    days: u32,
    from: UtcDay,
    to: UtcDay,
    table_rows: u64,
    account_rows: u64,
    answer_rows: usize,
    fill_secs: f64,
    db_bytes: u64,
    first_ms: f64,
    /// Sorted.
    latencies: Vec<Duration>,
    correct: bool,
}

impl ReportFigures {
    fn p99_ms(&self) -> Option<f64> {
        quantile_ms(&self.latencies, 0.99)
    }

    pub(super) fn report(&self) -> String {
        let q = |p: f64| opt(quantile_ms(&self.latencies, p), 1);
        format!(
            "\n4. report: RollupStore::report of one account ({} listings) from {} to {} ({} \
             days), all kinds; listing_daily holds {} accounts of that size\n\
             filled day by day through upsert_day in {:.1} s: {} rows in listing_daily ({:.0} \
             MB), {} of them the account's\n\
             report: {} rows summed into {} (per listing and kind){}; first run {:.1} ms, then \
             {} runs one after another: p50 {} ms, p99 {} ms, max {} ms\n",
            self.listings,
            self.from,
            self.to,
            self.days,
            self.accounts,
            self.fill_secs,
            self.table_rows,
            self.db_bytes as f64 / 1e6,
            self.account_rows,
            self.account_rows,
            self.answer_rows,
            if self.correct {
                ", sums checked"
            } else {
                ", WRONG SUMS"
            },
            self.first_ms,
            self.latencies.len(),
            q(0.5),
            q(0.99),
            q(1.0)
        )
    }

    /// `report-latency.svg` in `dir`: the timed runs' latency by percentile.
    pub(super) fn plot(&self, dir: &Path, mysql: bool) -> anyhow::Result<()> {
        let n = self.latencies.len().max(1) as f64;
        let points = self
            .latencies
            .iter()
            .enumerate()
            .map(|(i, d)| (100.0 * (i + 1) as f64 / n, d.as_secs_f64() * 1000.0))
            .collect();
        super::super::plot::write_chart(
            &dir.join("report-latency.svg"),
            &format!(
                "Account report on {}: {} listings x {} days ({} rows of the account)",
                if mysql { "MariaDB" } else { "SQLite" },
                self.listings,
                self.days,
                self.account_rows
            ),
            "percentile of runs",
            "latency (ms)",
            &[super::super::plot::Series {
                name: format!("RollupStore::report, {} runs", self.latencies.len()),
                points,
            }],
        )
    }

    pub(super) fn bar(&self) -> Bar {
        let p99 = self.p99_ms();
        Bar {
            name: format!(
                "report p99 ≤ {BAR_REPORT_P99_MS:.0} ms (seed: {SEED_REPORT_MS:.0} ms) for \
                 {BAR_LISTINGS} listings over a year (~330,000 rows)"
            ),
            figure: format!(
                "p50 {} ms, p99 {} ms, max {} ms over {} runs; {} listings × {} days = {} rows{}",
                opt(quantile_ms(&self.latencies, 0.5), 1),
                opt(p99, 1),
                opt(quantile_ms(&self.latencies, 1.0), 1),
                self.latencies.len(),
                self.listings,
                self.days,
                self.account_rows,
                if self.correct { "" } else { ", WRONG SUMS" }
            ),
            pass: (self.listings >= BAR_LISTINGS && self.days >= 365)
                .then(|| self.correct && p99.is_some_and(|p| p <= BAR_REPORT_P99_MS)),
        }
    }
}

/// The `listing_daily` rows of `listing` on day number `d` (see the module docs).
fn daily_rows(listing: i64, d: u32) -> Vec<DailyRow> {
    let h = mix(((listing as u64) << 20) ^ u64::from(d));
    let row = |kind: &str, total: u64, uniques: u64| DailyRow {
        listing_id: listing,
        kind: kind.into(),
        total,
        uniques,
    };
    let mut rows = Vec::with_capacity(2);
    if h % 100 < 82 {
        let total = 1 + (h >> 24) % 40;
        rows.push(row("view", total, 1 + (h >> 32) % total));
    }
    if (h >> 8) % 100 < 13 {
        let total = 1 + (h >> 40) % 4;
        rows.push(row("click", total, 1 + (h >> 44) % total));
    }
    if (h >> 16) % 100 < 5 {
        rows.push(row("contact", 1, 1));
    }
    rows
}

/// Fills the summary tier and times the report; data under `dir`.
pub(super) async fn bench_report(
    args: &EventsBenchArgs,
    dir: &Path,
) -> anyhow::Result<ReportFigures> {
    std::fs::create_dir_all(dir)?;
    match &args.report_mysql {
        None => {
            let store = SqliteRollups::open(&dir.join("rollups.db"))?;
            let mut figures = fill_and_time(args, &store).await?;
            figures.db_bytes = sqlite_bytes(&dir.join("rollups.db"));
            Ok(figures)
        }
        Some(server) => {
            let url = scratch_database(server, "tm_bench_report").await?;
            eprintln!("report: on MariaDB, scratch database {url}");
            let store = MysqlRollups::connect(&url, 4).await?;
            let figures = fill_and_time(args, &store).await;
            let bytes: Option<(Option<i64>,)> = sqlx::query_as(
                "SELECT CAST(SUM(DATA_LENGTH + INDEX_LENGTH) AS SIGNED)
                 FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()",
            )
            .fetch_optional(store.pool())
            .await
            .ok()
            .flatten();
            store.pool().close().await;
            drop_database(&url).await?;
            let mut figures = figures?;
            figures.db_bytes = bytes.and_then(|b| b.0).unwrap_or(0).max(0) as u64;
            Ok(figures)
        }
    }
}

/// Fills `store` (see the module docs) and times its report.
async fn fill_and_time(
    args: &EventsBenchArgs,
    store: &dyn RollupStore,
) -> anyhow::Result<ReportFigures> {
    let accounts = args.report_accounts;
    let pairs: Vec<(i64, i64)> = (0..accounts * args.report_listings)
        .map(|i| {
            (
                1_000_000 + (i * 7_919 % 9_000_001) as i64,
                (i % accounts) as i64,
            )
        })
        .collect();
    store.put_listings(TENANT, &pairs).await?;
    let to = UtcDay::of_ms(SystemClock.now_ms()).plus(-1);
    let from = to.plus(1 - args.report_days as i32);
    eprintln!(
        "report: writing {} days of listing_daily for {} listings …",
        args.report_days,
        pairs.len()
    );
    // The account's expected answer: (listing, kind) → (total, uniques).
    let mut expected: BTreeMap<(i64, String), (u64, u64)> = BTreeMap::new();
    let (mut table_rows, mut account_rows) = (0u64, 0u64);
    let t = Instant::now();
    for d in 0..args.report_days {
        let mut rows = Vec::with_capacity(pairs.len() * 11 / 10);
        for &(listing, account) in &pairs {
            let of_listing = daily_rows(listing, d);
            if account == ACCOUNT {
                account_rows += of_listing.len() as u64;
                for r in &of_listing {
                    let e = expected.entry((listing, r.kind.clone())).or_default();
                    e.0 += r.total;
                    e.1 += r.uniques;
                }
            }
            rows.extend(of_listing);
        }
        table_rows += rows.len() as u64;
        store.upsert_day(from.plus(d as i32), rows).await?;
    }
    let fill_secs = t.elapsed().as_secs_f64();
    let expected: Vec<ReportRow> = expected
        .into_iter()
        .map(|((listing_id, kind), (total, uniques))| ReportRow {
            listing_id,
            kind,
            total,
            uniques_daily_sum: uniques,
        })
        .collect();

    eprintln!("report: {} runs …", args.report_runs);
    let t = Instant::now();
    let answer = store.report(TENANT, ACCOUNT, from, to, None).await?;
    let first_ms = t.elapsed().as_secs_f64() * 1000.0;
    let mut correct = answer == expected;
    let mut latencies = Vec::with_capacity(args.report_runs);
    for _ in 0..args.report_runs {
        let t = Instant::now();
        let r = store.report(TENANT, ACCOUNT, from, to, None).await?;
        latencies.push(t.elapsed());
        correct &= r.len() == expected.len();
    }
    latencies.sort();
    ensure!(!answer.is_empty(), "the report is empty");
    Ok(ReportFigures {
        listings: args.report_listings,
        accounts,
        days: args.report_days,
        from,
        to,
        table_rows,
        account_rows,
        answer_rows: answer.len(),
        fill_secs,
        db_bytes: 0,
        first_ms,
        latencies,
        correct,
    })
}
