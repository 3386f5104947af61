//! Tidemark's load generators, the `tidemark-bench` binary. Not tests: nothing here asserts a
//! speed; each subcommand prints its figures, then each bar it is about with PASS / FAIL / NOT
//! MEASURED.
//!
//! - `tidemark-bench chat` ([`chat`]): SEND_ACK latency and throughput of
//!   `POST /v1/conversations/{cid}/messages` at constant offered rates, open loop (latency from
//!   the intended send time, so queueing is counted), for each chat mode (`tiered`, `hot-only`,
//!   `sync-archive`), on the embedded engines (SQLite) or the production ones (a private durable
//!   `redis-server`, a private tansu broker, a scratch MariaDB database); plus the fsync rate of
//!   the data disk, the server's and the generator's CPU, disk bytes and hot-tier bytes per
//!   message.
//! - `tidemark-bench links` ([`links`]): link rewriting MB/s over the template corpus, recipients
//!   rendered and stored per second, link-store insert rate per million rows (SQLite, or
//!   MariaDB schemas compared), and `GET /c/<id>` redirects/s with their latency, driven by
//!   `wrk` (when on `PATH`) and by the open-loop driver.
//! - `tidemark-bench events` ([`events`]): events/s ingested over HTTP as JSON and as InfluxDB
//!   line protocol, the rollup of one big UTC day, the yearly account report's latency (SQLite or
//!   MariaDB), and (on request) InfluxDB series cardinality with identifiers as tags vs fields.
//! - `tidemark-bench soak` ([`soak`]): a crash soak, not a benchmark: `kill -9` cycles of a
//!   server under concurrent SENDs, on the embedded engines and on Redis + MariaDB, with the
//!   checks of [`acks`] over every ACK after each restart; it counts violations and fails on
//!   one.
//!
//! How servers are driven: the HTTP parts start a fresh `tidemark serve` child per run
//! (`process`) on a free loopback port, with its own temp data dir and environment overrides
//! (e.g. `TIDEMARK_CHAT__MODE`), wait for `GET /readyz`, load it over keep-alive HTTP/1.1
//! (`load`), read its `/metrics` and its CPU time from `/proc`, and stop it with SIGTERM. The
//! executable is `--server-bin PATH`, else the `tidemark` beside this executable (the same
//! target dir), else `tidemark` on `PATH`: so one harness can drive two server builds in turn.
//! The other parts run the subsystem crates in process (rewrite, render, stores, rollup,
//! report). Real Redis, tansu and InfluxDB servers come from the subsystems' `testing` helpers;
//! MariaDB is the one at `--mysql` / `--insert-mysql` / `--report-mysql`.
//!
//! Backends measured: chat on the embedded SQLite stores or on Redis, tansu (Kafka protocol)
//! and MariaDB; the link store on SQLite or MariaDB (three key schemas compared); the events
//! summary tier on SQLite or MariaDB; InfluxDB 1.x for the tags-vs-fields comparison. The
//! HTTP parts measure whatever engines the server child is configured with.
//!
//! Modules:
//! - `acks`: the ACK ledger of a crash test and its checks after a restart (used by `soak`
//!   and by `tidemark`'s crash test).
//! - `chat`: the `chat` subcommand (open-loop SEND load, engines, fsync probe).
//! - `events`: the `events` subcommand (ingest, rollup, report, InfluxDB schema).
//! - `links`: the `links` subcommand (rewrite, render, link-store insert, redirect).
//! - `load` (private): the open-loop driver and its HTTP client.
//! - `nodes` (private): links and events on several nodes (`--nodes`), their shared engines
//!   and closed loops.
//! - `plot` (private): SVG charts written with `--plot-dir`.
//! - `process` (private): the server child, its metrics, CPU time and disk writes.
//! - `soak`: the `soak` subcommand (kill -9 cycles, engines kept across them).
//!
//! Here: the temp dir of a run, the machine's load average and the closing summary of bars.

pub mod acks;
pub mod chat;
pub mod events;
pub mod links;
mod load;
mod nodes;
mod plot;
mod process;
pub mod soak;

pub use process::ServerBin;

use std::path::Path;

use anyhow::Context;
use clap::Subcommand;

/// `tidemark-bench <what>`.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Chat SEND_ACK latency at constant offered rates, for each chat mode.
    Chat(chat::ChatBenchArgs),
    /// Links: rewrite throughput, render+store rate, link-store insert rate, redirector load.
    Links(links::LinksBenchArgs),
    /// Events: ingest events/s (JSON, line protocol), rollup of a big day, yearly report latency.
    Events(events::EventsBenchArgs),
    /// Crash soak: kill -9 cycles under concurrent SENDs, every ACK checked after each restart.
    Soak(soak::SoakArgs),
}

/// Runs the chosen benchmark.
pub async fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Chat(args) => chat::run(args).await,
        BenchCommand::Links(args) => links::run(args).await,
        BenchCommand::Events(args) => events::run(args).await,
        BenchCommand::Soak(args) => soak::run(args).await,
    }
}

/// Runs `make()`'s future on its own single-threaded runtime in a dedicated thread and waits
/// for it. A load generator on a small machine shared with the server costs less CPU as one
/// thread that never hands work to another than as a work-stealing pool.
pub(crate) async fn on_own_thread<F, Fut, T>(name: &str, make: F) -> anyhow::Result<T>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
    T: Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(anyhow::Error::from)
                .and_then(|rt| rt.block_on(make()));
            let _ = tx.send(result);
        })?;
    rx.await
        .map_err(|_| anyhow::anyhow!("the {name} thread panicked"))?
}

/// A temp dir `tidemark-bench-<name>-…` under `parent` (default: the system temp dir) for the
/// data of one run; removed when dropped.
pub(crate) fn temp_root(parent: Option<&Path>, name: &str) -> anyhow::Result<tempfile::TempDir> {
    let parent = parent.map_or_else(std::env::temp_dir, Path::to_owned);
    tempfile::Builder::new()
        .prefix(&format!("tidemark-bench-{name}-"))
        .tempdir_in(&parent)
        .with_context(|| format!("creating a temp dir in {}", parent.display()))
}

/// Bytes of the SQLite database at `db` and of its write-ahead log beside it.
pub(crate) fn sqlite_bytes(db: &Path) -> u64 {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    file_bytes(db) + file_bytes(Path::new(&wal))
}

/// Bytes of the file at `path` (0 if missing).
pub(crate) fn file_bytes(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// Waits until the write-ahead log of the SQLite file `db` is emptied (its writer at rest), at
/// most 5 s: figures on disk are those of a store at rest.
pub(crate) async fn at_rest(db: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while sqlite_bytes(db) > file_bytes(db) && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// The median of `values` (the mean of the middle two for an even count); `None` if empty.
pub(crate) fn median(values: &[f64]) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// `/proc/loadavg`'s 1, 5 and 15 minute figures: other work on the machine disturbs these.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "-".into(),
        |l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    )
}

/// One bar of a benchmark, for the closing summary.
#[derive(Debug)]
pub(crate) struct Bar {
    /// What is asked, e.g. "redirect ≥ 10000 req/s".
    pub(crate) name: String,
    /// What was measured.
    pub(crate) figure: String,
    /// `None`: not measured (the run was not of the size the bar is about).
    pub(crate) pass: Option<bool>,
}

/// Prints each bar of the `subsystem`'s benchmark with PASS / FAIL / NOT MEASURED, and the load
/// average now.
pub(crate) fn print_summary(subsystem: &str, bars: &[Bar]) {
    println!(
        "\nsummary ({subsystem} bars on this machine; load average now {}):",
        load_average()
    );
    for b in bars {
        let verdict = match b.pass {
            Some(true) => "PASS",
            Some(false) => "FAIL",
            None => "NOT MEASURED",
        };
        println!("  {verdict:<12} {} — {}", b.name, b.figure);
    }
    if bars.is_empty() {
        println!("  (no part with a bar was run)");
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn the_median_takes_the_middle_or_the_mean_of_the_middle_two() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }
}
