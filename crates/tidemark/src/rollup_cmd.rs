//! `tidemark rollup --day YYYY-MM-DD`: the daily rollup on demand, offline. Opens the data
//! dir's raw tier (`events/raw.db`) and summary tier (`events/rollups.db`) — the same files the
//! server uses — rolls the day up and prints the outcome. A day whose raw events are gone is
//! refused (non-zero exit, existing totals kept).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use tidemark_core::clock::SystemClock;
use tidemark_core::day::UtcDay;
use tidemark_events::SqliteRaw;
use tidemark_events::rollup::RollupService;
use tidemark_events::rollups::SqliteRollups;

use crate::config::Config;

/// Arguments of `tidemark rollup`.
#[derive(Debug, clap::Args)]
pub struct RollupArgs {
    /// The UTC day to roll up (YYYY-MM-DD).
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
    let day = UtcDay::parse(&args.day)?;
    let mut cfg = Config::load(args.config.as_deref())?;
    if let Some(d) = args.data_dir {
        cfg.data_dir = d;
    }
    let dir = cfg.data_dir.join("events");
    let raw_path = dir.join("raw.db");
    anyhow::ensure!(
        raw_path.exists(),
        "raw events for {day} are gone (there is no raw tier at {}); existing totals are kept",
        raw_path.display()
    );
    let raw = SqliteRaw::open(&raw_path)
        .with_context(|| format!("opening the raw tier {}", raw_path.display()))?;
    let rollups_path = dir.join("rollups.db");
    let rollups = SqliteRollups::open(&rollups_path)
        .with_context(|| format!("opening the summary tier {}", rollups_path.display()))?;
    let service = RollupService::new(Arc::new(raw), Arc::new(rollups), Arc::new(SystemClock));
    let out = service.roll_up(day).await?;
    println!(
        "rolled up {}: {} events read ({} bots and {} without a listing left out), {} rows in listing_daily",
        out.day, out.events_read, out.bots_skipped, out.without_listing_skipped, out.rows_written
    );
    Ok(())
}
