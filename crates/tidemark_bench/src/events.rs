//! `tidemark-bench events`: the figures of listing analytics (seed 002), in
//! four parts:
//! 1. **json** and 2. **line-protocol** — [`ingest`]: events/s over loopback HTTP into a
//!    `tidemark serve` child (`--server-bin`), `POST /v1/events` (a JSON array) and
//!    `POST /api/v2/write?precision=ms` (InfluxDB line protocol), in batches of `--batch`
//!    events from `--connections` connections in a closed loop for `--ingest-seconds`, with
//!    pre-built bodies; the raw tier is counted afterwards.
//! 3. **rollup** — [`rollup`]: [`roll_up_day`](tidemark_events::rollup::roll_up_day) of a day
//!    of `--rollup-events` events, appended in process to a raw tier in a temp dir; then again
//!    over the existing rows.
//! 4. **report** — [`report`]: the yearly account report
//!    ([`RollupStore::report`](tidemark_events::rollups::RollupStore::report)) over
//!    `listing_daily` filled day by day in process (on MariaDB with `--report-mysql`).
//! 5. **influx-schema** (not run by default) — `influx_schema.rs`: identifiers as tags vs as
//!    fields on a real InfluxDB: series cardinality, write rate and memory as users grow.
//!
//! With `--nodes 1,2,3` it runs instead line-protocol ingest on that many nodes sharing
//! InfluxDB and MariaDB (`nodes.rs`, on [`crate::nodes`]).
//!
//! Events are shaped like the marketplace's (DESIGN.md part C): kinds view / click / contact,
//! a listing id, user, device and session ids, and `page_url` `/item/<listing>`; all are
//! derived from the event's number, so every run writes the same data. It prints the figures,
//! then each bar of the events benchmark with PASS/FAIL; it asserts nothing.

mod duckdb;
mod influx_schema;
mod ingest;
mod nodes;
mod report;
mod rollup;

use std::path::PathBuf;

use anyhow::ensure;
use tidemark_events::Event;

use super::{Bar, ServerBin, load_average, print_summary, temp_root};

/// Bar: events per second ingested over HTTP, for each format.
const BAR_INGEST: f64 = 100_000.0;
/// The batch size the ingest bar is about.
const BAR_BATCH: usize = 5_000;
/// Bar: seconds to roll up a day of [`BAR_ROLLUP_EVENTS`] events.
const BAR_ROLLUP_SECS: f64 = 10.0;
/// Bar: the rollup's time at most this many times DuckDB's over the same rows.
const BAR_ROLLUP_PEER_RATIO: f64 = 2.0;
/// The day size the rollup bar is about.
const BAR_ROLLUP_EVENTS: u64 = 2_000_000;
/// Bar: report p99 (ms) for an account of [`BAR_LISTINGS`] listings over a year…
const BAR_REPORT_P99_MS: f64 = 100.0;
/// …and the seed's own bar.
const SEED_REPORT_MS: f64 = 1_000.0;
/// Bar: the report's p50 and p99 at most this many times DuckDB's over the same rows.
const BAR_REPORT_PEER_RATIO: f64 = 1.5;
/// Bar: `listing_daily`'s bytes on disk at most this many times a plain packed copy's.
const BAR_DISK_RATIO: f64 = 1.5;
/// The account size the report bar is about.
const BAR_LISTINGS: u64 = 900;

/// A part of the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Part {
    /// Ingest of JSON arrays (`POST /v1/events`) over HTTP.
    Json,
    /// Ingest of InfluxDB line protocol (`POST /api/v2/write`) over HTTP.
    LineProtocol,
    /// Rollup of one big day.
    Rollup,
    /// Yearly report of one account.
    Report,
    /// InfluxDB: identifiers as tags vs as fields (seed 002's measurement).
    InfluxSchema,
}

/// Arguments of `tidemark-bench events`.
#[derive(Debug, Clone, clap::Args)]
pub struct EventsBenchArgs {
    /// Parts to run.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "json,line-protocol,rollup,report"
    )]
    pub parts: Vec<Part>,
    /// Measured seconds of each ingest run (one per format).
    #[arg(long, default_value_t = 10.0)]
    pub ingest_seconds: f64,
    /// Seconds of each ingest run before the measured window (sent, not recorded).
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Events per ingest request.
    #[arg(long, default_value_t = BAR_BATCH)]
    pub batch: usize,
    /// Concurrent connections of the ingest runs, each sending its next batch when the last
    /// one was answered.
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// Different pre-built bodies per format, sent in turn.
    #[arg(long, default_value_t = 8)]
    pub bodies: usize,
    /// Distinct listings of the ingested events.
    #[arg(long, default_value_t = 900)]
    pub ingest_listings: u64,
    /// Events of the rolled-up day.
    #[arg(long, default_value_t = BAR_ROLLUP_EVENTS)]
    pub rollup_events: u64,
    /// Distinct listings of the rolled-up day.
    #[arg(long, default_value_t = 20_000)]
    pub rollup_listings: u64,
    /// Events per `RawStore::append` call while filling the rolled-up day.
    #[arg(long, default_value_t = 100_000)]
    pub append_batch: u64,
    /// Listings of each account in the report part.
    #[arg(long, default_value_t = BAR_LISTINGS)]
    pub report_listings: u64,
    /// Accounts of that size in `listing_daily` (one is reported on; the others make the
    /// table bigger than one account).
    #[arg(long, default_value_t = 10)]
    pub report_accounts: u64,
    /// Days of `listing_daily`, ending yesterday; the report spans all of them.
    #[arg(long, default_value_t = 366)]
    pub report_days: u32,
    /// Timed report runs (after one untimed run).
    #[arg(long, default_value_t = 200)]
    pub report_runs: usize,
    /// Run the report part on MariaDB / MySQL instead of SQLite: the server's URL
    /// (`mysql://user[:password]@host[:port]`); a scratch database is created there and
    /// dropped afterwards.
    #[arg(long)]
    pub report_mysql: Option<String>,
    /// Steps of distinct users of the influx-schema part (increasing).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "10000,50000,100000,200000"
    )]
    pub influx_users: Vec<u64>,
    /// Events per user in the influx-schema part.
    #[arg(long, default_value_t = 5)]
    pub influx_events_per_user: u64,
    /// Write plots into this directory (e.g. `docs/benchmarks`): `report-latency.svg` (report
    /// part), `influx-series.svg`, `influx-rate.svg` and `influx-rss.svg` (influx-schema part).
    #[arg(long)]
    pub plot_dir: Option<PathBuf>,
    /// Directory under which the temporary data dirs go [default: the system temp dir].
    /// Removed afterwards.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Node counts: run only line-protocol ingest on that many nodes in turn (role `all`, raw
    /// events on a private `influxd`, the day catalog on a scratch MariaDB database of
    /// `--mysql`), with `--connections` connections spread over the nodes, `--warmup` +
    /// `--ingest-seconds` per count (e.g. `--nodes 1,2,3`).
    #[arg(long, value_delimiter = ',')]
    pub nodes: Vec<usize>,
    /// The MariaDB server of `--nodes` (`mysql://user[:password]@host[:port]`).
    #[arg(long, default_value = "mysql://root@127.0.0.1:3306")]
    pub mysql: String,
    /// The server executable of the ingest parts.
    #[command(flatten)]
    pub server: ServerBin,
}

/// Runs the events benchmark on its own single-threaded runtime (see
/// [`super::on_own_thread`]).
pub async fn run(args: EventsBenchArgs) -> anyhow::Result<()> {
    super::on_own_thread("bench-events", move || run_here(args)).await
}

async fn run_here(args: EventsBenchArgs) -> anyhow::Result<()> {
    ensure!(
        args.ingest_seconds > 0.0 && args.warmup >= 0.0,
        "--ingest-seconds must be positive, --warmup not negative"
    );
    ensure!(
        args.batch > 0
            && args.connections > 0
            && args.bodies > 0
            && args.ingest_listings > 0
            && args.rollup_events > 0
            && args.rollup_listings > 0
            && args.append_batch > 0
            && args.report_listings > 0
            && args.report_accounts > 0
            && args.report_days > 0
            && args.report_runs > 0,
        "sizes and counts must be positive"
    );
    ensure!(!args.nodes.contains(&0), "--nodes counts must be positive");
    if !args.nodes.is_empty() {
        let server_bin = args.server.resolve()?;
        let root = temp_root(args.dir.as_deref(), "events-nodes")?;
        println!(
            "tidemark-bench events --nodes — machine: {} CPUs, load average {}; server {}",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            load_average(),
            server_bin.display()
        );
        return nodes::run(&args, &server_bin, &args.mysql, root.path()).await;
    }
    let wants = |p: Part| args.parts.contains(&p);
    // Found before any part runs, so a missing server fails the run at once.
    let server_bin = (wants(Part::Json) || wants(Part::LineProtocol))
        .then(|| args.server.resolve())
        .transpose()?;
    let root = temp_root(args.dir.as_deref(), "events")?;
    println!(
        "tidemark-bench events — machine: {} CPUs, load average {}; data under {}{}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average(),
        root.path().display(),
        server_bin
            .as_deref()
            .map_or_else(String::new, |b| format!("; server {}", b.display()))
    );
    let mut bars = Vec::new();
    for (n, format) in [(1, ingest::Format::Json), (2, ingest::Format::LineProtocol)] {
        let Some(server_bin) = server_bin.as_deref().filter(|_| wants(format.part())) else {
            continue;
        };
        let dir = root.path().join(format.slug());
        let r = ingest::bench_ingest(&args, server_bin, format, &dir).await?;
        print!("{}", r.report(n));
        bars.push(r.bar());
    }
    if wants(Part::Rollup) {
        let r = rollup::bench_rollup(&args, &root.path().join("rollup")).await?;
        print!("{}", r.report());
        bars.extend(r.bars());
    }
    if wants(Part::Report) {
        let r = report::bench_report(&args, &root.path().join("report")).await?;
        print!("{}", r.report());
        bars.extend(r.bars());
        if let Some(dir) = &args.plot_dir {
            r.plot(dir, args.report_mysql.is_some())?;
        }
    }
    if wants(Part::InfluxSchema) {
        let r = influx_schema::bench_schemas(&args).await?;
        print!("{}", r.report());
        bars.push(r.bar());
        if let Some(dir) = &args.plot_dir {
            r.plot(dir)?;
        }
    }
    print_summary("events", &bars);
    drop(root);
    Ok(())
}

/// The kinds of the generated events, by share: 80 % view, 15 % click, 5 % contact.
fn kind_of(x: u64) -> &'static str {
    match x % 100 {
        0..80 => "view",
        80..95 => "click",
        _ => "contact",
    }
}

/// A well-mixed 64-bit hash of `i` (splitmix64's finaliser): the generated data is a function
/// of the event's number.
fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The population events are drawn from.
#[derive(Debug, Clone, Copy)]
struct Population {
    /// Distinct listings (ids spread over a wide range, not 0..n).
    listings: u64,
    /// Distinct sessions.
    sessions: u64,
    /// Every `bot_every`-th event is flagged `bot = true` (0: none).
    bot_every: u64,
}

impl Population {
    /// Event number `i`, at `time_ms`.
    fn event(&self, i: u64, time_ms: i64) -> Event {
        let x = mix(i);
        let listing = 10_000 + (x % self.listings) as i64 * 37;
        let session = (x >> 16) % self.sessions;
        // A session belongs to one user on one device.
        let user = mix(session) % (self.sessions * 4 / 5).max(1);
        let mut e = Event::new(kind_of(x >> 40), time_ms);
        e.listing_id = Some(listing);
        e.user_id = Some(format!("u_{user:06x}"));
        e.device_id = Some(format!("d_{:06x}", mix(user) % 0xff_ffff));
        e.session_id = Some(format!("s_{session:08x}"));
        e.page_url = Some(format!("/item/{listing}"));
        if self.bot_every > 0 && i.is_multiple_of(self.bot_every) {
            e.fields.insert("bot".into(), true.into());
        }
        e
    }
}

/// The `q` quantile (nearest rank) of `sorted`, in milliseconds; `None` if empty.
fn quantile_ms(sorted: &[std::time::Duration], q: f64) -> Option<f64> {
    let n = sorted.len();
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n.max(1));
    sorted.get(rank - 1).map(|d| d.as_secs_f64() * 1000.0)
}

/// Formats an optional figure with `prec` decimals, `-` if absent.
fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.prec$}"))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        let v: Vec<Duration> = (1..=200).map(Duration::from_millis).collect();
        assert_eq!(quantile_ms(&v, 0.5), Some(100.0));
        assert_eq!(quantile_ms(&v, 0.99), Some(198.0));
        assert_eq!(quantile_ms(&v, 1.0), Some(200.0));
        assert_eq!(quantile_ms(&[], 0.5), None);
    }

    #[test]
    fn generated_events_pass_the_default_schema() {
        let schema = tidemark_events::schema::Schema::default();
        let p = Population {
            listings: 900,
            sessions: 1000,
            bot_every: 10,
        };
        let mut listings = std::collections::HashSet::new();
        for i in 0..20_000 {
            let e = p.event(i, 1_717_430_400_000);
            schema.check_kind(&e.kind).unwrap();
            assert_eq!(
                e.page_url.as_deref(),
                Some(format!("/item/{}", e.listing_id.unwrap()).as_str())
            );
            assert_eq!(e.is_bot(), i % 10 == 0);
            listings.insert(e.listing_id);
        }
        assert_eq!(listings.len(), 900);
    }
}
