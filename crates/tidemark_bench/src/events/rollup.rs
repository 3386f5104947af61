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
use tidemark_core::day::{DAY_MS, Day};
use tidemark_events::archive::RawArchive;
use tidemark_events::rollup::{RollupOutcome, roll_up_day};
use tidemark_events::rollups::{DailyRow, RollupStore, SqliteRollups};
use tidemark_events::testing::InfluxServer;
use tidemark_events::{Event, InfluxRaw, RawStore, SqliteRaw};

use super::super::{at_rest, median, sqlite_bytes};
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
    /// Seconds of DuckDB's query on one thread, as Tidemark's rollup runs, after the pairs.
    one_thread: Vec<f64>,
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
    day: Day,
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
    /// InfluxDB's bytes for the same events, `(TSM files, log)`; `None` without `influxd`.
    influx_bytes: Option<(u64, u64)>,
}

impl RollupFigures {
    pub(super) fn report(&self) -> String {
        let o = &self.first;
        format!(
            "\n3. rollup: roll_up_day of {} ({} events, {} listings, {} sessions, kinds \
             view/click/contact, 1 in {BOT_EVERY} a bot) from the SQLite raw tier into \
             listing_daily\n\
             filled through RawStore::append in batches in {:.1} s ({:.0} events/s; raw.db at \
             rest {:.0} MB)\n\
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
        ) + &self.disk_report()
            + &self.peer_report()
    }

    /// The part's bars: the absolute one, the one against DuckDB, and bytes on disk against
    /// InfluxDB's.
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
        let per_event = |b: u64| b as f64 / self.events as f64;
        bars.push(Bar {
            name: "raw events on disk ≤ InfluxDB's bytes per event".into(),
            figure: match self.influx_bytes {
                Some((tsm, log)) => format!(
                    "raw.db {:.1} B, InfluxDB {:.1} B per event",
                    per_event(self.raw_bytes),
                    per_event(tsm + log)
                ),
                None => "influxd not installed".into(),
            },
            pass: self
                .influx_bytes
                .filter(|_| full)
                .map(|(tsm, log)| self.raw_bytes <= tsm + log),
        });
        bars
    }

    /// The DuckDB lines of the report.
    fn peer_report(&self) -> String {
        let Some(p) = &self.peer else {
            return format!("DuckDB peer: not installed ({})\n", duckdb::INSTALL);
        };
        let pairs: Vec<String> = p
            .pairs
            .iter()
            .map(|(t, d)| format!("{t:.2}/{d:.2} s"))
            .collect();
        format!(
            "DuckDB over the archived day (same answer: {}); pairs Tidemark/DuckDB: {}; median \
             ratio {}; DuckDB on one thread: median {} s\n",
            if p.same_answer { "yes" } else { "NO" },
            pairs.join(", "),
            p.ratio().map_or_else(|| "-".into(), |r| format!("{r:.2}×")),
            median(&p.one_thread).map_or_else(|| "-".into(), |s| format!("{s:.2}"))
        )
    }

    /// Bytes per event on disk: the raw tier, InfluxDB's, the archive's and DuckDB's.
    fn disk_report(&self) -> String {
        let per_event = |b: u64| b as f64 / self.events as f64;
        let mut line = format!(
            "on disk per event: raw.db {:.1} B",
            per_event(self.raw_bytes)
        );
        if let Some((tsm, log)) = self.influx_bytes {
            line += &format!(
                ", InfluxDB {:.1} B ({:.1} B of it its log; raw.db {:.2}× InfluxDB)",
                per_event(tsm + log),
                per_event(log),
                self.raw_bytes as f64 / (tsm + log).max(1) as f64
            );
        }
        if let Some(p) = &self.peer {
            line += &format!(
                ", Parquet archive {:.1} B, DuckDB {:.1} B",
                per_event(p.parquet_bytes),
                per_event(p.duckdb_bytes)
            );
        }
        line + "\n"
    }
}

/// Tidemark's `rows` as DuckDB's run is checked against ([`duckdb::PeerRun::answers`]).
fn peer_rows(rows: &[DailyRow]) -> impl Iterator<Item = [f64; 3]> + '_ {
    rows.iter()
        .map(|r| [r.listing_id as f64, r.total as f64, r.uniques as f64])
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
    let day = Day::of_utc_ms(now).plus(-1);
    let population = Population {
        listings: args.rollup_listings,
        sessions: SESSIONS,
        bot_every: BOT_EVERY,
    };
    let n = args.rollup_events;
    eprintln!("rollup: filling {day} with {n} events …");
    let t = Instant::now();
    fill(&raw, population, day, n, args.append_batch, now).await?;
    let fill_secs = t.elapsed().as_secs_f64();
    at_rest(&dir.join("raw.db")).await;
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
    let influx_bytes = match InfluxServer::start() {
        Ok(server) => Some(influx_bytes(&server, population, day, args, now, dir).await?),
        Err(e) => {
            eprintln!("rollup: no InfluxDB to compare bytes on disk with ({e})");
            None
        }
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
        influx_bytes,
    })
}

/// Appends `n` events of `population`, spread evenly over `day`, to `raw` in batches of
/// `batch`, the next batch generated while the last is written.
async fn fill(
    raw: &dyn RawStore,
    population: Population,
    day: Day,
    n: u64,
    batch: u64,
    now: i64,
) -> anyhow::Result<()> {
    let generate = move |from: u64, to: u64| -> Vec<Event> {
        (from..to)
            .map(|i| population.event(i, day.utc_start_ms() + (i as i64 * DAY_MS / n as i64)))
            .collect()
    };
    let mut next = generate(0, batch.min(n));
    let mut from = next.len() as u64;
    loop {
        let following = (from < n).then(|| {
            let to = (from + batch).min(n);
            tokio::task::spawn_blocking(move || generate(from, to))
        });
        raw.append(next, now).await?;
        match following {
            Some(f) => {
                next = f.await?;
                from += next.len() as u64;
            }
            None => return Ok(()),
        }
    }
}

/// The same events appended to InfluxDB through the product's own InfluxDB tier
/// ([`InfluxRaw`]), and its bytes on disk at rest (its cache written out and the shard
/// compacted, which the test server does a second after writes stop): `(TSM files, log)`.
async fn influx_bytes(
    server: &InfluxServer,
    population: Population,
    day: Day,
    args: &EventsBenchArgs,
    now: i64,
    dir: &Path,
) -> anyhow::Result<(u64, u64)> {
    eprintln!("rollup: the same events into InfluxDB …");
    let raw = InfluxRaw::connect(&server.url("bench"), &dir.join("influx-catalog.db")).await?;
    fill(
        &raw,
        population,
        day,
        args.rollup_events,
        args.append_batch,
        now,
    )
    .await?;
    // At rest: the log written out and the shard compacted, seen as three seconds without a
    // change; at most 120 s.
    let deadline = Instant::now() + std::time::Duration::from_secs(120);
    let (mut last, mut still) = (server.data_bytes(), 0);
    while (last.1 > 0 || still < 3) && Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let now = server.data_bytes();
        still = if now == last { still + 1 } else { 0 };
        last = now;
    }
    Ok(last)
}

/// Archives `day`, loads it into DuckDB and times [`PAIRS`] pairs of runs (see the module
/// docs); `rows` is Tidemark's answer.
async fn versus_duckdb(
    raw: &SqliteRaw,
    rollups: &SqliteRollups,
    day: Day,
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
        same &= theirs.answers(peer_rows(rows));
        pairs.push((ours, theirs.secs));
    }
    peer.set_threads(1).await?;
    let mut one_thread = Vec::with_capacity(PAIRS);
    for _ in 0..PAIRS {
        let run = peer.run().await?;
        same &= run.answers(peer_rows(rows));
        one_thread.push(run.secs);
    }
    Ok(PeerFigures {
        parquet_bytes,
        duckdb_bytes,
        pairs,
        one_thread,
        same_answer: same,
    })
}
