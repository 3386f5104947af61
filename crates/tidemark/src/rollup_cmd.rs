//! `tidemark rollup --day YYYY-MM-DD`: the daily rollup on demand, offline. Opens the raw tier
//! and summary tier the configuration names (`events.raw`, `events.rollups`; by default the
//! data dir's `events/raw.db` and `events/rollups.db`) — the same stores the server uses —
//! rolls the day up and prints the outcome. A day whose raw events are gone is
//! refused (non-zero exit, existing totals kept).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use tidemark_core::clock::SystemClock;
use tidemark_core::day::Day;
use tidemark_events::rollup::RollupService;

use crate::config::Config;

/// Arguments of `tidemark rollup`.
#[derive(Debug, clap::Args)]
pub struct RollupArgs {
    /// The day to roll up (YYYY-MM-DD), a day of `events.time_zone`.
    #[arg(long)]
    pub day: String,
    /// TOML configuration file (for `data_dir`).
    #[arg(long, env = "TIDEMARK_CONFIG")]
    pub config: Option<PathBuf>,
    /// Data directory [default: the configuration's `data_dir`].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
}

/// Runs `tidemark rollup`.
pub async fn run(args: RollupArgs) -> anyhow::Result<()> {
    let day = Day::parse(&args.day)?;
    let mut cfg = Config::load(args.config.as_deref())?;
    if let Some(d) = args.data_dir {
        cfg.data_dir = d;
    }
    let dir = cfg.data_dir.join("events");
    let raw_path = dir.join("raw.db");
    let embedded = matches!(cfg.events.raw.trim(), "" | "sqlite");
    anyhow::ensure!(
        !embedded || raw_path.exists(),
        "raw events for {day} are gone (there is no raw tier at {}); existing totals are kept",
        raw_path.display()
    );
    std::fs::create_dir_all(&dir)?;
    let (raw, rollups) = tidemark_events::stores::open_both(&cfg.events, &dir)
        .await
        .context("opening the events stores (events.raw, events.rollups)")?;
    // Under the day's lease, as a running server's lifecycle takes it.
    let service = RollupService::new(raw, rollups, Arc::new(SystemClock));
    let out = service.roll_up(day).await?;
    println!(
        "rolled up {}: {} events read ({} bots and {} without a listing left out), {} rows in listing_daily",
        out.day, out.events_read, out.bots_skipped, out.without_listing_skipped, out.rows_written
    );
    Ok(())
}
