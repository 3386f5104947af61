//! `tidemark events move-zone --to <zone>`: moves the events stores the configuration names
//! (`events.raw`, `events.rollups`, `events.archive_url`) to another time zone's days
//! ([`tidemark_events::zone_move`]): raw partitions, archive objects and summaries are all
//! re-cut from the archived events. Offline: it takes the data directory's lock, and every
//! node sharing the stores must be stopped (they refuse to start until the move is done). An
//! interrupted move is resumed by running the command again.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use tidemark_core::clock::{Clock, SystemClock};
use tidemark_events::archive::RawArchive;
use tidemark_events::calendar::Calendar;
use tidemark_events::raw::RawStore;
use tidemark_events::zone_move::{MoveStores, move_zone};

use crate::config::Config;

/// `tidemark events …` commands.
#[derive(Debug, clap::Subcommand)]
pub enum EventsCommand {
    /// Move the store's days to another time zone (or finish an interrupted move), then set
    /// `events.time_zone` to it on every node.
    MoveZone(MoveZoneArgs),
}

/// Arguments of `tidemark events move-zone`.
#[derive(Debug, clap::Args)]
pub struct MoveZoneArgs {
    /// The zone to move to: an IANA name such as `Europe/Sarajevo`, or `UTC`.
    #[arg(long)]
    pub to: String,
    /// TOML configuration file (the events stores, `data_dir`).
    #[arg(long, env = "TIDEMARK_CONFIG")]
    pub config: Option<PathBuf>,
    /// Data directory [default: the configuration's `data_dir`].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
}

/// Runs a `tidemark events` command.
pub async fn run(command: EventsCommand) -> anyhow::Result<()> {
    let EventsCommand::MoveZone(args) = command;
    let to = Calendar::named(&args.to).map_err(|_| {
        anyhow::anyhow!(
            "--to {:?} is not a time zone of the IANA database (e.g. \"UTC\", \"Europe/Sarajevo\")",
            args.to
        )
    })?;
    let mut cfg = Config::load(args.config.as_deref())?;
    if let Some(d) = args.data_dir {
        cfg.data_dir = d;
    }
    // A store to move exists: a mistyped directory must not be taken for an empty store.
    anyhow::ensure!(
        cfg.data_dir.is_dir(),
        "there is no data directory at {}",
        cfg.data_dir.display()
    );
    let _lock = crate::server::lock_data_dir(&cfg.data_dir)?;
    let dir = cfg.data_dir.join("events");
    std::fs::create_dir_all(&dir)?;
    let rollups = tidemark_events::stores::open_rollups(&cfg.events, &dir)
        .await
        .context("opening the summary tier (events.rollups)")?;
    let archive = RawArchive::open(cfg.events.archive_url.as_deref(), &dir.join("archive"))?;
    let open_raw = |calendar: Calendar| {
        let mut events = cfg.events.clone();
        events.time_zone = calendar.name().to_owned();
        let dir = dir.clone();
        async move {
            let raw: Arc<dyn RawStore> = tidemark_events::stores::open_raw(&events, &dir).await?;
            Ok(raw)
        }
    };
    let stores = MoveStores {
        rollups: rollups.as_ref(),
        archive: &archive,
        scratch: &dir.join("zone-move.db"),
    };
    let report = move_zone(stores, &to, open_raw, SystemClock.now_ms())
        .await
        .context("moving the events days")?;
    if report.abandoned {
        println!(
            "abandoned the move to {}: the store's days stay cut in {}",
            report.from, report.to
        );
        return Ok(());
    }
    if report.from == report.to && report.resumed_at.is_none() && report.events == 0 {
        println!(
            "the store's days are already cut in {}: nothing to move",
            report.to
        );
    } else {
        println!(
            "moved the events days from {} to {}{}: {} events on {} days re-cut (archive and \
             summaries), {} days reloaded into the raw tier",
            report.from,
            report.to,
            report
                .resumed_at
                .map(|p| format!(" (resumed at its {p:?} phase)"))
                .unwrap_or_default(),
            report.events,
            report.days,
            report.raw_days
        );
    }
    let configured = Calendar::named(&cfg.events.time_zone).map(|c| c.name().to_owned());
    if configured.ok().as_deref() != Some(report.to.as_str()) {
        println!(
            "set events.time_zone = {:?} on every node before starting it",
            report.to
        );
    }
    Ok(())
}
