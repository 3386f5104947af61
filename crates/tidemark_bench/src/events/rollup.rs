//! Part 3 of `tidemark-bench events`: the daily rollup of one big day.
//!
//! A raw tier in a temp dir is filled in process through [`RawStore::append`] (batches of
//! `--append-batch`, the next batch generated while the last is written) with a day of
//! `--rollup-events` events over `--rollup-listings` listings, 1 % of them flagged as bots; then
//! [`roll_up_day`] of that day into a fresh [`SqliteRollups`] is timed, and timed again over
//! the rows it wrote (the re-run a late event causes).
//!
//! The peer: the day is archived as Parquet ([`RawArchive::archive_day`], the product's own
//! archive object) and loaded into DuckDB ([`super::duckdb`]), which answers the same question
//! in SQL ([`DUCKDB_ROLLUP`]). Then [`PAIRS`] pairs of runs, Tidemark's re-run and DuckDB's
//! query in turn, give the median ratio; DuckDB's sums are checked against Tidemark's rows.

use std::path::Path;
use std::time::Instant;

use anyhow::ensure;
use tidemark_core::clock::{Clock, SystemClock};
use tidemark_core::day::{DAY_MS, UtcDay};
use tidemark_events::archive::RawArchive;
use tidemark_events::rollup::{RollupOutcome, roll_up_day};
use tidemark_events::rollups::{DailyRow, RollupStore, SqliteRollups};
use tidemark_events::{Event, RawStore, SqliteRaw};

use super::super::{median, sqlite_bytes};
use super::duckdb::{self, DuckDb};
use super::{
    BAR_ROLLUP_EVENTS, BAR_ROLLUP_PEER_RATIO, BAR_ROLLUP_SECS, Bar, EventsBenchArgs, Population,
};

/// Pairs of interleaved runs, Tidemark's and DuckDB's.
pub(super) const PAIRS: usize = 5;

/// DuckDB's rollup of the archived day, the rule of `tidemark_events::rollup` in SQL: per
/// listing and kind, bots and events without a listing left out, `total` the events and
/// `uniques` the distinct `(session, page)` among those with a session.
const DUCKDB_ROLLUP: &str = "SELECT listing_id, kind, count(*) AS total,
       count(DISTINCT (session_id, page_url)) FILTER (WHERE session_id IS NOT NULL) AS uniques
     FROM raw
     WHERE listing_id IS NOT NULL
       AND NOT coalesce(CAST(json_extract(fields, '$.bot') AS BOOLEAN), false)
     GROUP BY listing_id, kind";

/// The DuckDB side of the rollup part.
#[derive(Debug)]
struct PeerFigures {
    /// Bytes of the day's Parquet archive object.
    parquet_bytes: u64,
    /// Bytes of DuckDB's database file holding the day.
    duckdb_bytes: u64,
    /// Seconds of each pair: (Tidemark's re-run, DuckDB's query).
    pairs: Vec<(f64, f64)>,
    /// DuckDB's rows and sums of total and uniques equal Tidemark's.
    same_answer: bool,
}

impl PeerFigures {
    /// The median of Tidemark's time over DuckDB's, pair by pair.
    fn ratio(&self) -> Option<f64> {
        let ratios: Vec<f64> = self.pairs.iter().map(|(t, d)| t / d).collect();
        median(&ratios)
    }
}

/// Sessions of the rolled-up day.
const SESSIONS: u64 = 300_000;
/// One event in this many is flagged `bot = true`.
const BOT_EVERY: u64 = 100;

/// Figures of the rollup part.
#[derive(Debug)]
pub(super) struct RollupFigures {
    events: u64,
    listings: u64,
    day: UtcDay,
    fill_secs: f64,
    raw_bytes: u64,
    first: RollupOutcome,
    first_secs: f64,
    again: RollupOutcome,
    again_secs: f64,
    /// The day's rows after the re-run equal those after the first run.
    unchanged: bool,
    /// `None` when DuckDB is not installed.
    peer: Option<PeerFigures>,
}

impl RollupFigures {
    pub(super) fn report(&self) -> String {
        let o = &self.first;
        format!(
            "\n3. rollup: roll_up_day of {} ({} events, {} listings, {} sessions, kinds \
             view/click/contact, 1 in {BOT_EVERY} a bot) from the SQLite raw tier into \
             listing_daily\n\
             filled through RawStore::append in batches in {:.1} s ({:.0} events/s; raw.db {:.0} \
             MB)\n\
             rollup: {:.2} s ({:.0} events/s); {} events read, {} bots skipped, {} rows \
             written\n\
             re-run over the existing rows: {:.2} s ({} rows; every row as before: {})\n",
            self.day,
            self.events,
            self.listings,
            SESSIONS,
            self.fill_secs,
            self.events as f64 / self.fill_secs,
            self.raw_bytes as f64 / 1e6,
            self.first_secs,
            o.events_read as f64 / self.first_secs,
            o.events_read,
            o.bots_skipped,
            o.rows_written,
            self.again_secs,
            self.again.rows_written,
            if self.unchanged { "yes" } else { "NO" }
        ) + &self.peer_report()
    }

    /// The part's bars: the absolute one and the one against DuckDB.
    pub(super) fn bars(&self) -> Vec<Bar> {
        let full = self.events >= BAR_ROLLUP_EVENTS;
        let mut bars = vec![Bar {
            name: format!("rollup of a {BAR_ROLLUP_EVENTS}-event day ≤ {BAR_ROLLUP_SECS:.0} s"),
            figure: format!(
                "{:.2} s for {} events ({} rows), re-run {:.2} s",
                self.first_secs, self.events, self.first.rows_written, self.again_secs
            ),
            pass: full.then_some(self.first_secs <= BAR_ROLLUP_SECS && self.unchanged),
        }];
        let ratio = self.peer.as_ref().and_then(PeerFigures::ratio);
        bars.push(Bar {
            name: format!(
                "rollup of a {BAR_ROLLUP_EVENTS}-event day ≤ {BAR_ROLLUP_PEER_RATIO:.0}× DuckDB's \
                 over the same rows"
            ),
            figure: match (&self.peer, ratio) {
                (Some(p), Some(r)) => format!(
                    "median {r:.2}× over {} pairs{}",
                    p.pairs.len(),
                    if p.same_answer {
                        ""
                    } else {
                        ", DIFFERENT ANSWERS"
                    }
                ),
                _ => format!("DuckDB not installed ({})", duckdb::INSTALL),
            },
            pass: (full && self.peer.is_some()).then(|| {
                self.peer.as_ref().is_some_and(|p| p.same_answer)
                    && ratio.is_some_and(|r| r <= BAR_ROLLUP_PEER_RATIO)
            }),
        });
        bars
    }

    /// The DuckDB lines of the report.
    fn peer_report(&self) -> String {
        let Some(p) = &self.peer else {
            return format!("DuckDB peer: not installed ({})\n", duckdb::INSTALL);
        };
        let per_event = |b: u64| b as f64 / self.events as f64;
        let pairs: Vec<String> = p
            .pairs
            .iter()
            .map(|(t, d)| format!("{t:.2}/{d:.2} s"))
            .collect();
        format!(
            "on disk per event: raw.db {:.1} B, Parquet archive {:.1} B, DuckDB {:.1} B\n\
             DuckDB over the archived day (same answer: {}); pairs Tidemark/DuckDB: {}; \
             median ratio {}\n",
            per_event(self.raw_bytes),
            per_event(p.parquet_bytes),
            per_event(p.duckdb_bytes),
            if p.same_answer { "yes" } else { "NO" },
            pairs.join(", "),
            p.ratio().map_or_else(|| "-".into(), |r| format!("{r:.2}×"))
        )
    }
}

/// Whether DuckDB's answer (rows, then sums of listing, total, uniques) is Tidemark's `rows`.
fn same_answer(rows: &[DailyRow], peer: &duckdb::PeerRun) -> bool {
    let sum = |f: fn(&DailyRow) -> f64| rows.iter().map(f).sum::<f64>();
    let ours = [
        sum(|r| r.listing_id as f64),
        sum(|r| r.total as f64),
        sum(|r| r.uniques as f64),
    ];
    peer.rows == rows.len() as u64 && peer.sums == ours
}

/// Fills yesterday with the events and times its rollup twice; data under `dir`.
pub(super) async fn bench_rollup(
    args: &EventsBenchArgs,
    dir: &Path,
) -> anyhow::Result<RollupFigures> {
    std::fs::create_dir_all(dir)?;
    let raw = SqliteRaw::open(&dir.join("raw.db"))?;
    let rollups = SqliteRollups::open(&dir.join("rollups.db"))?;
    let now = SystemClock.now_ms();
    let day = UtcDay::of_ms(now).plus(-1);
    let population = Population {
        listings: args.rollup_listings,
        sessions: SESSIONS,
        bot_every: BOT_EVERY,
    };
    let n = args.rollup_events;
    let generate = move |from: u64, to: u64| -> Vec<Event> {
        (from..to)
            // Spread evenly over the day.
            .map(|i| population.event(i, day.start_ms() + (i as i64 * DAY_MS / n as i64)))
            .collect()
    };
    eprintln!("rollup: filling {day} with {n} events …");
    let t = Instant::now();
    let mut batch = generate(0, args.append_batch.min(n));
    let mut from = batch.len() as u64;
    loop {
        let following = (from < n).then(|| {
            let (make, to) = (generate, (from + args.append_batch).min(n));
            tokio::task::spawn_blocking(move || make(from, to))
        });
        raw.append(batch, now).await?;
        match following {
            Some(next) => {
                batch = next.await?;
                from += batch.len() as u64;
            }
            None => break,
        }
    }
    let fill_secs = t.elapsed().as_secs_f64();
    let raw_bytes = sqlite_bytes(&dir.join("raw.db"));

    eprintln!("rollup: rolling up {day} …");
    let t = Instant::now();
    let first = roll_up_day(&raw, &rollups, day, now).await?;
    let first_secs = t.elapsed().as_secs_f64();
    ensure!(
        first.events_read == n,
        "the rollup read {} events of {n}",
        first.events_read
    );
    let rows = rollups.day_rows(day).await?;
    let t = Instant::now();
    let again = roll_up_day(&raw, &rollups, day, now).await?;
    let again_secs = t.elapsed().as_secs_f64();
    let unchanged = rollups.day_rows(day).await? == rows;
    let peer = if duckdb::available().await {
        Some(versus_duckdb(&raw, &rollups, day, now, &rows, dir).await?)
    } else {
        None
    };
    Ok(RollupFigures {
        events: n,
        listings: args.rollup_listings,
        day,
        fill_secs,
        raw_bytes,
        first,
        first_secs,
        again,
        again_secs,
        unchanged,
        peer,
    })
}

/// Archives `day`, loads it into DuckDB and times [`PAIRS`] pairs of runs (see the module
/// docs); `rows` is Tidemark's answer.
async fn versus_duckdb(
    raw: &SqliteRaw,
    rollups: &SqliteRollups,
    day: UtcDay,
    now: i64,
    rows: &[DailyRow],
    dir: &Path,
) -> anyhow::Result<PeerFigures> {
    eprintln!("rollup: archiving {day} as Parquet for DuckDB …");
    let archive_dir = dir.join("archive");
    let archive = RawArchive::open(None, &archive_dir)?;
    archive.archive_day(raw, day).await?;
    let parquet = archive_dir.join(archive.day_path(day).as_ref());
    let parquet_bytes = std::fs::metadata(&parquet)?.len();
    let mut peer = DuckDb::start(
        &dir.join("rollup.duckdb"),
        &[("raw", "parquet", &parquet)],
        DUCKDB_ROLLUP,
    )
    .await?;
    let duckdb_bytes = peer.bytes().await?;
    let mut pairs = Vec::with_capacity(PAIRS);
    let mut same = true;
    for _ in 0..PAIRS {
        let t = Instant::now();
        roll_up_day(raw, rollups, day, now).await?;
        let ours = t.elapsed().as_secs_f64();
        let theirs = peer.run().await?;
        same &= same_answer(rows, &theirs);
        pairs.push((ours, theirs.secs));
    }
    Ok(PeerFigures {
        parquet_bytes,
        duckdb_bytes,
        pairs,
        same_answer: same,
    })
}
