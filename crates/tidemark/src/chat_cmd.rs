//! `tidemark chat backfill`: seed 000's backfill tool, offline. Opens the chat stores the
//! configuration names (the same the server uses), archives the hot history the outbox no
//! longer covers ([`tidemark_chat::backfill`]) with a progress bar, sets each refused
//! partition's archiver position to the start of its log and prints what it did. Then
//! `tidemark serve` starts its archivers again.
//!
//! It takes the data directory's lock, as the server does: on the embedded stores the server
//! must be stopped; on production engines, nodes elsewhere may keep answering SENDs meanwhile
//! (records committed during the backfill are in the outbox, beyond its start).

use std::path::PathBuf;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use tidemark_chat::backfill::backfill;
use tidemark_chat::service::ChatStores;

use crate::config::Config;

/// `tidemark chat …` commands.
#[derive(Debug, clap::Subcommand)]
pub enum ChatCommand {
    /// Archive the hot history the outbox no longer covers, so that an archiver the start rule
    /// refused (down longer than the outbox retention) can start again.
    Backfill(BackfillArgs),
}

/// Arguments of `tidemark chat backfill`.
#[derive(Debug, clap::Args)]
pub struct BackfillArgs {
    /// TOML configuration file (the chat stores, `data_dir`).
    #[arg(long, env = "TIDEMARK_CONFIG")]
    pub config: Option<PathBuf>,
    /// Data directory [default: the configuration's `data_dir`].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
}

/// Runs a `tidemark chat` command.
pub async fn run(command: ChatCommand) -> anyhow::Result<()> {
    let ChatCommand::Backfill(args) = command;
    let mut cfg = Config::load(args.config.as_deref())?;
    if let Some(d) = args.data_dir {
        cfg.data_dir = d;
    }
    cfg.validate()?;
    let _lock = crate::server::lock_data_dir(&cfg.data_dir)?;
    let stores = ChatStores::open(&cfg.data_dir, &cfg.chat)
        .await
        .context("opening the chat stores")?;
    let (Some(outbox), Some(archive)) = (&stores.outbox, &stores.archive) else {
        anyhow::bail!(
            "chat.mode = \"hot-only\" has no outbox and no archive: nothing to backfill (a tiered start archives hot-only history itself)"
        );
    };
    let bar = ProgressBar::new(stores.hot.hot_len().await?);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} hot records looked at ({eta})")
            .context("progress bar style")?,
    );
    let report = backfill(
        stores.hot.as_ref(),
        outbox.as_ref(),
        archive.as_ref(),
        |n| bar.set_position(n),
    )
    .await?;
    bar.finish_and_clear();
    if report.positions.is_empty() {
        println!("every outbox partition passes the archiver's start rule: nothing to backfill");
        return Ok(());
    }
    println!(
        "archived {} hot records (of {} looked at) that the outbox no longer held",
        report.records, report.scanned
    );
    for (partition, low) in &report.positions {
        println!(
            "outbox partition {partition}: archiver position set to {low}, the start of its log"
        );
    }
    println!("`tidemark serve` now starts its archivers from there");
    Ok(())
}
