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
//! `--report-runs` times timed; its answer is checked against sums kept while writing.
//!
//! The peer: the same rows, written as CSV while filling, loaded into DuckDB
//! ([`super::duckdb`]), which answers the report in SQL ([`duckdb_report`]). The timed runs
//! are split into [`PAIRS`] rounds, each Tidemark's share then DuckDB's, and the median of the
//! rounds' p50 and p99 ratios is reported. On SQLite the file is also measured beside a plain
//! copy of it (`VACUUM INTO`: the same schema and rows, freshly packed), and again after every
//! day was rolled up a second time with the same rows.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::ensure;
use tidemark_core::clock::{Clock, SystemClock};
use tidemark_core::day::Day;
use tidemark_core::mysql::{drop_database, scratch_database};
use tidemark_events::rollups::{DailyRow, MysqlRollups, ReportRow, RollupStore, SqliteRollups};

use super::super::{at_rest, file_bytes, median, sqlite_bytes};
use super::duckdb::{self, DuckDb};
use super::rollup::PAIRS;
use super::{
    BAR_DISK_RATIO, BAR_LISTINGS, BAR_REPORT_P99_MS, BAR_REPORT_PEER_RATIO, Bar, EventsBenchArgs,
    SEED_REPORT_MS, mix, opt, quantile_ms,
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
    from: Day,
    to: Day,
    table_rows: u64,
    account_rows: u64,
    answer_rows: usize,
    fill_secs: f64,
    db_bytes: u64,
    /// SQLite only: its file and its write-ahead log at rest.
    sqlite: Option<SqliteDisk>,
    first_ms: f64,
    /// Sorted.
    latencies: Vec<Duration>,
    correct: bool,
    /// `None` when DuckDB is not installed.
    peer: Option<ReportPeer>,
}

/// The summary tier's bytes on disk, SQLite only.
#[derive(Debug, Default)]
struct SqliteDisk {
    /// The database file and its log at rest after the fill.
    file: u64,
    wal: u64,
    /// A `VACUUM INTO` copy: the same schema and rows, packed.
    plain: u64,
    /// File and log at rest after every day was written again with the same rows.
    file_again: u64,
    wal_again: u64,
}

/// The DuckDB side of the report part.
#[derive(Debug)]
struct ReportPeer {
    /// Per round: Tidemark's p50 and p99, then DuckDB's (ms).
    rounds: Vec<[f64; 4]>,
    /// DuckDB's rows and sums equal the expected answer in every run.
    same_answer: bool,
}

impl ReportPeer {
    /// The median over rounds of Tidemark's p50 / DuckDB's p50, and of the p99s.
    fn ratios(&self) -> (Option<f64>, Option<f64>) {
        let r = |i: usize| -> Vec<f64> { self.rounds.iter().map(|q| q[i] / q[i + 2]).collect() };
        (median(&r(0)), median(&r(1)))
    }
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
        ) + &self.disk_report()
            + &self.peer_report()
    }

    fn disk_report(&self) -> String {
        let Some(d) = &self.sqlite else {
            return String::new();
        };
        let mb = |b: u64| b as f64 / 1e6;
        let per_row = |b: u64| b as f64 / self.table_rows.max(1) as f64;
        format!(
            "on disk: rollups.db {:.0} MB + log {:.0} MB ({:.1} B per row); a plain packed copy \
             {:.0} MB ({:.1} B per row): {:.2}×; after every day written again with the same \
             rows: {:.0} MB + log {:.0} MB\n",
            mb(d.file),
            mb(d.wal),
            per_row(d.file + d.wal),
            mb(d.plain),
            per_row(d.plain),
            (d.file + d.wal) as f64 / d.plain.max(1) as f64,
            mb(d.file_again),
            mb(d.wal_again)
        )
    }

    fn peer_report(&self) -> String {
        let Some(p) = &self.peer else {
            return format!("DuckDB peer: not installed ({})\n", duckdb::INSTALL);
        };
        let rounds: Vec<String> = p
            .rounds
            .iter()
            .map(|q| format!("{:.1}/{:.1} vs {:.1}/{:.1}", q[0], q[1], q[2], q[3]))
            .collect();
        let (p50, p99) = p.ratios();
        let x = |r: Option<f64>| r.map_or_else(|| "-".into(), |r| format!("{r:.2}×"));
        format!(
            "DuckDB over the same rows (same answer: {}); rounds p50/p99 ms, Tidemark vs DuckDB: \
             {}; median ratio p50 {}, p99 {}\n",
            if p.same_answer { "yes" } else { "NO" },
            rounds.join(", "),
            x(p50),
            x(p99)
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

    /// The part's bars: the absolute one, the one against DuckDB and, on SQLite, the one on
    /// disk.
    pub(super) fn bars(&self) -> Vec<Bar> {
        let p99 = self.p99_ms();
        let full = self.listings >= BAR_LISTINGS && self.days >= 365;
        let mut bars = vec![Bar {
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
            pass: full.then(|| self.correct && p99.is_some_and(|p| p <= BAR_REPORT_P99_MS)),
        }];
        let (p50_ratio, p99_ratio) = self.peer.as_ref().map_or((None, None), ReportPeer::ratios);
        bars.push(Bar {
            name: format!(
                "report p50 and p99 ≤ {BAR_REPORT_PEER_RATIO}× DuckDB's over the same rows"
            ),
            figure: match &self.peer {
                Some(p) => format!(
                    "median ratio p50 {}, p99 {} over {} rounds{}",
                    opt(p50_ratio, 2),
                    opt(p99_ratio, 2),
                    p.rounds.len(),
                    if p.same_answer {
                        ""
                    } else {
                        ", DIFFERENT ANSWERS"
                    }
                ),
                None => format!("DuckDB not installed ({})", duckdb::INSTALL),
            },
            pass: (full && self.peer.is_some()).then(|| {
                self.peer.as_ref().is_some_and(|p| p.same_answer)
                    && [p50_ratio, p99_ratio]
                        .iter()
                        .all(|r| r.is_some_and(|r| r <= BAR_REPORT_PEER_RATIO))
            }),
        });
        if let Some(d) = &self.sqlite {
            let ratio = |f: u64, w: u64| (f + w) as f64 / d.plain.max(1) as f64;
            let (first, again) = (ratio(d.file, d.wal), ratio(d.file_again, d.wal_again));
            bars.push(Bar {
                name: format!(
                    "listing_daily on disk ≤ {BAR_DISK_RATIO}× a plain packed SQLite copy, and \
                     not growing when the days are written again"
                ),
                figure: format!("{first:.2}×, then {again:.2}×"),
                pass: full.then_some(first <= BAR_DISK_RATIO && again <= BAR_DISK_RATIO),
            });
        }
        bars
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
        visitors: Vec::new(),
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

/// The report in DuckDB's SQL over tables loaded from the fill's CSV files: the account's
/// listings joined to their days of `from..=to`, summed per listing and kind.
fn duckdb_report(from: Day, to: Day) -> String {
    format!(
        "SELECT d.listing_id, d.event, sum(d.total) AS total, sum(d.uniques) AS uniques
         FROM listings l JOIN listing_daily d ON d.listing_id = l.listing_id
         WHERE l.tenant = '{TENANT}' AND l.account_id = {ACCOUNT}
           AND d.day BETWEEN {} AND {}
         GROUP BY d.listing_id, d.event",
        from.0, to.0
    )
}

/// Fills the summary tier and times the report; data under `dir`.
pub(super) async fn bench_report(
    args: &EventsBenchArgs,
    dir: &Path,
) -> anyhow::Result<ReportFigures> {
    std::fs::create_dir_all(dir)?;
    match &args.report_mysql {
        None => {
            let db = dir.join("rollups.db");
            let store = SqliteRollups::open(&db)?;
            let filled = fill(args, &store, Some(dir)).await?;
            let wal = |db: &Path| sqlite_bytes(db) - file_bytes(db);
            at_rest(&db).await;
            let (file, log) = (file_bytes(&db), wal(&db));
            let mut figures = time(args, &store, &filled, dir).await?;
            let plain = dir.join("plain.db");
            rusqlite::Connection::open(&db)?
                .execute("VACUUM INTO ?1", [plain.to_string_lossy()])?;
            eprintln!("report: writing every day again with the same rows …");
            fill(args, &store, None).await?;
            at_rest(&db).await;
            figures.db_bytes = file + log;
            figures.sqlite = Some(SqliteDisk {
                file,
                wal: log,
                plain: file_bytes(&plain),
                file_again: file_bytes(&db),
                wal_again: wal(&db),
            });
            Ok(figures)
        }
        Some(server) => {
            let url = scratch_database(server, "tm_bench_report").await?;
            eprintln!("report: on MariaDB, scratch database {url}");
            let store = MysqlRollups::connect(&url, 4).await?;
            let figures = match fill(args, &store, Some(dir)).await {
                Ok(fill) => time(args, &store, &fill, dir).await,
                Err(e) => Err(e),
            };
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

/// What [`fill`] wrote.
#[derive(Debug)]
struct Fill {
    from: Day,
    to: Day,
    table_rows: u64,
    account_rows: u64,
    secs: f64,
    /// The account's report as it must be.
    expected: Vec<ReportRow>,
}

/// Writes the listings and the days into `store` (see the module docs), and with `csv_dir`
/// the same rows into `listings.csv` and `listing_daily.csv` there.
async fn fill(
    args: &EventsBenchArgs,
    store: &dyn RollupStore,
    csv_dir: Option<&Path>,
) -> anyhow::Result<Fill> {
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
    let mut csv = match csv_dir {
        Some(dir) => {
            let mut listings = csv::Writer::from_path(dir.join("listings.csv"))?;
            listings.write_record(["tenant", "listing_id", "account_id"])?;
            for (l, a) in &pairs {
                listings.serialize((TENANT, l, a))?;
            }
            listings.flush()?;
            let mut daily = csv::Writer::from_path(dir.join("listing_daily.csv"))?;
            daily.write_record(["listing_id", "day", "event", "total", "uniques"])?;
            Some(daily)
        }
        None => None,
    };
    let to = Day::of_utc_ms(SystemClock.now_ms()).plus(-1);
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
        let day = from.plus(d as i32);
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
        if let Some(csv) = csv.as_mut() {
            for r in &rows {
                csv.serialize((r.listing_id, day.0, &r.kind, r.total, r.uniques))?;
            }
        }
        store.upsert_day(day, rows).await?;
    }
    let secs = t.elapsed().as_secs_f64();
    if let Some(mut csv) = csv {
        csv.flush()?;
    }
    let expected = expected
        .into_iter()
        .map(|((listing_id, kind), (total, uniques))| ReportRow {
            listing_id,
            kind,
            total,
            uniques_daily_sum: uniques,
            uniques_period: None,
        })
        .collect();
    Ok(Fill {
        from,
        to,
        table_rows,
        account_rows,
        secs,
        expected,
    })
}

/// Times the report of `store` (filled by `fill`), in [`PAIRS`] rounds against DuckDB when it
/// is installed (loading the CSV files in `dir`).
async fn time(
    args: &EventsBenchArgs,
    store: &dyn RollupStore,
    fill: &Fill,
    dir: &Path,
) -> anyhow::Result<ReportFigures> {
    let (from, to) = (fill.from, fill.to);
    let mut peer = if duckdb::available().await {
        eprintln!("report: loading the same rows into DuckDB …");
        let (listings, daily) = (dir.join("listings.csv"), dir.join("listing_daily.csv"));
        let loads: [(&str, &str, &Path); 2] = [
            ("listings", "csv", &listings),
            ("listing_daily", "csv", &daily),
        ];
        Some(DuckDb::start(&dir.join("report.duckdb"), &loads, &duckdb_report(from, to)).await?)
    } else {
        None
    };
    eprintln!("report: {} runs …", args.report_runs);
    let t = Instant::now();
    let answer = store.report(TENANT, ACCOUNT, from, to, None).await?;
    let first_ms = t.elapsed().as_secs_f64() * 1000.0;
    let mut correct = answer == fill.expected;
    if let Some(peer) = peer.as_mut() {
        // DuckDB's first run too is left out of its figures.
        peer.run().await?;
    }
    let rounds = if peer.is_some() { PAIRS } else { 1 };
    let per_round = args.report_runs.div_ceil(rounds);
    let mut latencies = Vec::with_capacity(per_round * rounds);
    let (mut peer_rounds, mut same) = (Vec::new(), true);
    for _ in 0..rounds {
        let mut ours = Vec::with_capacity(per_round);
        for _ in 0..per_round {
            let t = Instant::now();
            let r = store.report(TENANT, ACCOUNT, from, to, None).await?;
            ours.push(t.elapsed());
            correct &= r.len() == fill.expected.len();
        }
        ours.sort();
        latencies.extend_from_slice(&ours);
        if let Some(peer) = peer.as_mut() {
            let mut theirs = Vec::with_capacity(per_round);
            for _ in 0..per_round {
                let run = peer.run().await?;
                same &= run.answers(fill.expected.iter().map(|r| {
                    [
                        r.listing_id as f64,
                        r.total as f64,
                        r.uniques_daily_sum as f64,
                    ]
                }));
                theirs.push(Duration::from_secs_f64(run.secs));
            }
            theirs.sort();
            let q = |v: &[Duration], p: f64| quantile_ms(v, p).unwrap_or(f64::NAN);
            peer_rounds.push([
                q(&ours, 0.5),
                q(&ours, 0.99),
                q(&theirs, 0.5),
                q(&theirs, 0.99),
            ]);
        }
    }
    latencies.sort();
    ensure!(!answer.is_empty(), "the report is empty");
    Ok(ReportFigures {
        listings: args.report_listings,
        accounts: args.report_accounts,
        days: args.report_days,
        from,
        to,
        table_rows: fill.table_rows,
        account_rows: fill.account_rows,
        answer_rows: answer.len(),
        fill_secs: fill.secs,
        db_bytes: 0,
        sqlite: None,
        first_ms,
        latencies,
        correct,
        peer: peer.map(|_| ReportPeer {
            rounds: peer_rounds,
            same_answer: same,
        }),
    })
}
