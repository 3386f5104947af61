//! Part 3 of `tidemark-bench links`: the link-store insert rate as the store grows.
//!
//! With `--insert-mysql`, the same on MariaDB for each of `--mysql-schemas` (seed 001's
//! comparison, see [`super::schemas`]), each in its own scratch database.
//!
//! [`SqliteLinks::insert`] of `--rows` records in batches of `--insert-batch`, one batch in
//! flight while the next is made. Ids come from [`IdCodec::generate`] at times increasing
//! evenly across one UTC day (today), so every record lands in the same day partition, as a
//! busy day's sends would; URLs, emails and positions vary like a real mailing's. The rate is
//! taken per million rows: it must stay flat as the partition grows (the clustered key appends;
//! the unique index on the id takes ids in time order).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use tidemark_core::clock::{Clock, SystemClock};
use tidemark_core::day::Day;
use tidemark_core::mysql::{drop_database, scratch_database};
use tidemark_links::id::IdCodec;
use tidemark_links::model::LinkRecord;
use tidemark_links::mysql::MysqlLinks;
use tidemark_links::rewrite::LinkKind;
use tidemark_links::sqlite::SqliteLinks;
use tidemark_links::store::LinkStore;

use super::LinksBenchArgs;
use super::schemas::{self, MysqlSchema};

/// Where the records go.
#[derive(Clone)]
enum Sink {
    /// A link store (SQLite, or MariaDB's Tidemark schema).
    Store(Arc<dyn LinkStore>),
    /// One of seed 001's comparison tables on MariaDB (random ids).
    Table(sqlx::mysql::MySqlPool),
}

impl Sink {
    async fn insert(self, mut recs: Vec<LinkRecord>) -> anyhow::Result<()> {
        match self {
            Sink::Store(s) => Ok(s.insert(recs).await?),
            Sink::Table(pool) => {
                for r in &mut recs {
                    r.link_id = schemas::random_id();
                }
                schemas::insert(&pool, &recs).await
            }
        }
    }
}

/// Rows per reported segment.
const SEGMENT: u64 = 1_000_000;
const DAY_MS: u64 = 86_400_000;

/// Figures of the insert part.
#[derive(Debug)]
pub(super) struct InsertFigures {
    label: String,
    rows: u64,
    batch: usize,
    /// Per segment: rows in it, seconds.
    segments: Vec<(u64, f64)>,
    wall: f64,
    /// Bytes of the database files after the run.
    db_bytes: u64,
}

impl InsertFigures {
    /// Rate of the last segment over the first, if there are two full ones.
    pub(super) fn ratio(&self) -> Option<f64> {
        let full: Vec<&(u64, f64)> = self.segments.iter().filter(|s| s.0 == SEGMENT).collect();
        if full.len() < 2 {
            return None;
        }
        let rate = |s: &(u64, f64)| s.0 as f64 / s.1;
        Some(rate(full[full.len() - 1]) / rate(full[0]))
    }

    /// `(rows so far, rows/s of the segment ending there)`, for the plot.
    pub(super) fn curve(&self) -> Vec<(f64, f64)> {
        let mut upto = 0;
        self.segments
            .iter()
            .map(|(n, secs)| {
                upto += n;
                (upto as f64, *n as f64 / secs)
            })
            .collect()
    }

    pub(super) fn report(&self) -> String {
        let mut s = format!(
            "\n3. link-store insert ({}, {} records per call, one day)\n\
             {:>12} {:>12} {:>10}\n",
            self.label, self.batch, "rows up to", "rows/s", "vs first"
        );
        let mut upto = 0;
        let first = self.segments.first().map(|s| s.0 as f64 / s.1);
        for (n, secs) in &self.segments {
            upto += n;
            let rate = *n as f64 / secs;
            s.push_str(&format!(
                "{:>12} {:>12.0} {:>10.2}\n",
                upto,
                rate,
                first.map_or(f64::NAN, |f| rate / f)
            ));
        }
        s.push_str(&format!(
            "{} rows in {:.1} s ({:.0} rows/s overall); database files {:.0} MB ({:.0} B/row)\n",
            self.rows,
            self.wall,
            self.rows as f64 / self.wall,
            self.db_bytes as f64 / 1e6,
            self.db_bytes as f64 / self.rows as f64
        ));
        s
    }
}

/// Record `i` of `rows`, made at a time `i / rows` of the way through `day_start`'s day.
pub(super) fn record(codec: &IdCodec, day_start: i64, i: u64, rows: u64) -> LinkRecord {
    let t = day_start + (u128::from(i) * u128::from(DAY_MS) / u128::from(rows)) as i64;
    let recipient = i / 5;
    LinkRecord {
        link_id: codec.generate(t).to_string(),
        url: format!(
            "https://shop.example.com/item/{}?utm_source=newsletter&utm_medium=email&utm_campaign=w{}",
            (i * 7919) % 250_000,
            i / 1_000_000
        ),
        email: format!("reader{recipient}@example.com"),
        mailing_id: format!("0195d3a4-7c1e-7000-8000-{:012x}", i / 2_000_000),
        position: Some((i % 5) as u32),
        kind: LinkKind::Link,
        created_ms: t,
    }
}

/// The insert part on the embedded SQLite store; data under `dir`.
pub(super) async fn bench_insert(
    args: &LinksBenchArgs,
    dir: &Path,
) -> anyhow::Result<InsertFigures> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join("links.db");
    let store = Arc::new(SqliteLinks::open(&path)?);
    let mut figures = run_inserts(args, Sink::Store(store), "SqliteLinks::insert").await?;
    figures.db_bytes = super::super::sqlite_bytes(&path);
    Ok(figures)
}

/// The insert part on MariaDB (`server`: `mysql://user@host:port`) with `schema`, in a
/// scratch database dropped afterwards.
pub(super) async fn bench_insert_mysql(
    args: &LinksBenchArgs,
    server: &str,
    schema: MysqlSchema,
) -> anyhow::Result<InsertFigures> {
    let url = scratch_database(server, "tm_bench_links").await?;
    eprintln!("insert: {} in {url}", schema.label());
    let (sink, pool) = if schema == MysqlSchema::Tidemark {
        let store = Arc::new(MysqlLinks::connect(&url, 4).await?);
        let pool = store.pool().clone();
        (Sink::Store(store), pool)
    } else {
        let pool = tidemark_core::mysql::connect(&url, 4).await?;
        schemas::create(&pool, schema).await?;
        (Sink::Table(pool.clone()), pool)
    };
    let figures = run_inserts(args, sink, schema.label()).await;
    // Table sizes in information_schema are statistics: refresh them first.
    let _ = sqlx::query("ANALYZE TABLE links").execute(&pool).await;
    let bytes: Option<(Option<i64>,)> = sqlx::query_as(
        "SELECT CAST(SUM(DATA_LENGTH + INDEX_LENGTH) AS SIGNED)
         FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA = DATABASE()",
    )
    .fetch_optional(&pool)
    .await
    .ok()
    .flatten();
    pool.close().await;
    drop_database(&url).await?;
    let mut figures = figures?;
    figures.db_bytes = bytes.and_then(|b| b.0).unwrap_or(0).max(0) as u64;
    Ok(figures)
}

async fn run_inserts(
    args: &LinksBenchArgs,
    sink: Sink,
    label: &str,
) -> anyhow::Result<InsertFigures> {
    let codec = IdCodec::new(rand::random());
    let day_start = Day::of_utc_ms(SystemClock.now_ms()).utc_start_ms();
    let (rows, batch) = (args.rows, args.insert_batch as u64);
    eprintln!("insert: {rows} rows in batches of {batch} …");

    let start = Instant::now();
    let mut segments = Vec::new();
    let (mut done, mut seg_rows, mut seg_start) = (0u64, 0u64, start);
    let mut in_flight: Option<(u64, tokio::task::JoinHandle<_>)> = None;
    let mut next = 0u64;
    loop {
        // Make the next batch while the previous one is written.
        let made = (next < rows).then(|| {
            let end = (next + batch).min(rows);
            let recs: Vec<LinkRecord> = (next..end)
                .map(|i| record(&codec, day_start, i, rows))
                .collect();
            next = end;
            recs
        });
        if let Some((n, handle)) = in_flight.take() {
            let result: anyhow::Result<()> = handle.await?;
            result?;
            done += n;
            seg_rows += n;
            if seg_rows >= SEGMENT || done == rows {
                let now = Instant::now();
                segments.push((seg_rows, (now - seg_start).as_secs_f64()));
                eprintln!(
                    "insert: {done} rows, last {seg_rows} at {:.0} rows/s",
                    seg_rows as f64 / (now - seg_start).as_secs_f64()
                );
                (seg_rows, seg_start) = (0, now);
            }
        }
        let Some(recs) = made else { break };
        let n = recs.len() as u64;
        let s = sink.clone();
        in_flight = Some((n, tokio::spawn(s.insert(recs))));
    }
    let wall = start.elapsed().as_secs_f64();
    drop(sink);
    Ok(InsertFigures {
        label: label.to_owned(),
        rows,
        batch: args.insert_batch,
        segments,
        wall,
        db_bytes: 0,
    })
}
