//! The `tidemark` binary: `serve` (HTTP API + every background worker, or one of them with
//! `--role`), the offline mail builder, the demo and the rollup command. The load generators are `tidemark-bench`.

use tidemark::{chat_cmd, config, demo, events_cmd, mail, rollup_cmd, server};

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

/// mimalloc rather than the C library's allocator: a redirect or an ingest allocates and
/// frees many small blocks across threads, where glibc's arenas spend a large share of the
/// CPU (its `malloc_consolidate` and locks showed in the redirector's profile).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SERVE_ENV_HELP: &str = "\
Configuration: defaults < --config TOML file < TIDEMARK_* env vars < flags.
Every key of the file can be set by env: TIDEMARK_<KEY>, nested keys joined by __.

  role                         TIDEMARK_ROLE                   all | api | workers (default all)
  listen                       TIDEMARK_LISTEN                 default 127.0.0.1:8080
  data_dir                     TIDEMARK_DATA_DIR               default ./data
  header_read_timeout          TIDEMARK_HEADER_READ_TIMEOUT    default 30s
  body_read_timeout            TIDEMARK_BODY_READ_TIMEOUT      default 30s
  send_timeout                 TIDEMARK_SEND_TIMEOUT           default 30s (a client that stops reading)
  max_connections              TIDEMARK_MAX_CONNECTIONS        default 4096
  metrics_key                  TIDEMARK_METRICS_KEY            default none: /metrics open
  min_free_disk_mb             TIDEMARK_MIN_FREE_DISK_MB       default 64 (/readyz 503 below)
  tenants = [{name, key}]      TIDEMARK_TENANTS='[{name=\"demo\",key=\"...\"}]'
                                                               default demo / dev-key (loopback only);
                                                               user_token_key = \"hs256:…\" | \"ed25519:…\":
                                                               chat user tokens (JWT) for that tenant
  analytics_tenant             TIDEMARK_ANALYTICS_TENANT       default: the first tenant
  [chat] mode                  TIDEMARK_CHAT__MODE             tiered | hot-only | sync-archive
  [chat] hot_window            TIDEMARK_CHAT__HOT_WINDOW       default 7d
  [chat] outbox_recovery_window TIDEMARK_CHAT__OUTBOX_RECOVERY_WINDOW  default 30s
  [chat] safety_margin         TIDEMARK_CHAT__SAFETY_MARGIN    default 10s
  [chat] dedup_window          TIDEMARK_CHAT__DEDUP_WINDOW     default 24h
  [chat] dedup_memory_keys     TIDEMARK_CHAT__DEDUP_MEMORY_KEYS  default 4000000 (SQLite hot store)
  [chat] archive_batch_max     TIDEMARK_CHAT__ARCHIVE_BATCH_MAX  default 500
  [chat] commit_batch_max      TIDEMARK_CHAT__COMMIT_BATCH_MAX   default 512
  [chat] max_body_bytes        TIDEMARK_CHAT__MAX_BODY_BYTES   default 65536
  [chat] page_bytes_max        TIDEMARK_CHAT__PAGE_BYTES_MAX   default 4194304 (a history page's JSON)
  [chat] trim_batch            TIDEMARK_CHAT__TRIM_BATCH       default 1000
  [chat] trim_interval         TIDEMARK_CHAT__TRIM_INTERVAL    default 1s
  [chat] archive_idle          TIDEMARK_CHAT__ARCHIVE_IDLE     default 250ms
  [chat] outbox_retention      TIDEMARK_CHAT__OUTBOX_RETENTION default 24h
  [chat] hot                   TIDEMARK_CHAT__HOT              sqlite | redis://host:port
  [chat] outbox                TIDEMARK_CHAT__OUTBOX           sqlite | kafka://host:port/topic
  [chat] archive               TIDEMARK_CHAT__ARCHIVE          sqlite | mysql://user@host/db
  [chat] redis_pool            TIDEMARK_CHAT__REDIS_POOL       default 8
  [chat] mysql_pool            TIDEMARK_CHAT__MYSQL_POOL       default 8
  [chat] stream_max_per_user   TIDEMARK_CHAT__STREAM_MAX_PER_USER  default 8 (live streams)
  [chat] stream_max_connections TIDEMARK_CHAT__STREAM_MAX_CONNECTIONS  default 3072 (≤ 3/4 of max_connections)
  [chat] stream_lag_timeout    TIDEMARK_CHAT__STREAM_LAG_TIMEOUT  default 10s
  [links] store                TIDEMARK_LINKS__STORE           sqlite | mysql://user@host/db
  [links] track_base           TIDEMARK_LINKS__TRACK_BASE      default http://<listen>
  [links] retention_days       TIDEMARK_LINKS__RETENTION_DAYS  default 180
  [events] raw                 TIDEMARK_EVENTS__RAW            sqlite | influxdb://host:port/db
  [events] rollups             TIDEMARK_EVENTS__ROLLUPS        sqlite | mysql://user@host/db
  [events] archive_url         TIDEMARK_EVENTS__ARCHIVE_URL    default data/events/archive
  [events] raw_retention       TIDEMARK_EVENTS__RAW_RETENTION  default 7d
  [events] time_zone           TIDEMARK_EVENTS__TIME_ZONE      default UTC (or e.g. Europe/Sarajevo)
(docs/configuration.md lists every key of the file)

Logging: RUST_LOG (default info).";

#[derive(Debug, Parser)]
#[command(
    name = "tidemark",
    version,
    about = "Tidemark: chat history, link tracking and listing analytics for a marketplace"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the HTTP API and every background worker (archiver, trimmer, recovery, partition
    /// manager, events lifecycle), or one of the two with `--role`.
    #[command(after_long_help = SERVE_ENV_HELP, after_help = SERVE_ENV_HELP)]
    Serve {
        /// TOML configuration file.
        #[arg(long, env = "TIDEMARK_CONFIG")]
        config: Option<PathBuf>,
        /// What this node runs; `api` and `workers` need every store on a shared engine (see
        /// docs/configuration.md, "Roles") [env: TIDEMARK_ROLE; default all].
        #[arg(long, value_enum)]
        role: Option<config::Role>,
        /// Address to listen on, ip:port or host:port [env: TIDEMARK_LISTEN; default
        /// 127.0.0.1:8080].
        #[arg(long, value_parser = config::parse_listen)]
        listen: Option<SocketAddr>,
        /// Directory of the embedded stores [env: TIDEMARK_DATA_DIR; default ./data].
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// The mail builder offline (`tidemark mail render --template T.html --recipients R.csv --out DIR`).
    #[command(subcommand)]
    Mail(mail::MailCommand),
    /// Replay one marketplace day through the HTTP API and print a summary
    /// (`tidemark demo --server http://127.0.0.1:8080 --key dev-key`, or `--embedded`).
    Demo(demo::DemoArgs),
    /// Roll up one day of raw events (of `events.time_zone`) into `listing_daily` now (`tidemark rollup --day YYYY-MM-DD`).
    Rollup(rollup_cmd::RollupArgs),
    /// Chat maintenance (`tidemark chat backfill`: archive the hot history the outbox no
    /// longer covers, so that a refused archiver can start).
    #[command(subcommand)]
    Chat(chat_cmd::ChatCommand),
    /// Events maintenance (`tidemark events move-zone --to Europe/Sarajevo`: re-cut the
    /// store's days in another time zone).
    #[command(subcommand)]
    Events(events_cmd::EventsCommand),
}

/// Runs the command; on an error prints it once, with its causes on the same line (`Error:
/// <what failed>: <why>`), and exits with code 1. Never a backtrace, whatever `RUST_BACKTRACE`
/// says: a refused start is a message for an operator, not a crash (a `main` that returned the
/// error would print anyhow's `Debug` form, a stack trace under `RUST_BACKTRACE=1`). Usage
/// errors are clap's (code 2).
fn main() -> std::process::ExitCode {
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("Error: {}", one_line(&error));
            std::process::ExitCode::FAILURE
        }
    }
}

/// `error` and its causes, joined by `": "`, each cause left out where the message before it
/// already ends with it (a storage error's message holds its source's).
fn one_line(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !text.ends_with(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

fn run(cli: Cli) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Colours only on a terminal: a log file or a collector gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        match cli.command {
            Command::Serve {
                config,
                role,
                listen,
                data_dir,
            } => {
                let mut cfg = config::Config::load(config.as_deref())?;
                if let Some(r) = role {
                    cfg.role = r;
                }
                if let Some(l) = listen {
                    cfg.listen = l;
                }
                if let Some(d) = data_dir {
                    cfg.data_dir = d;
                }
                cfg.validate()?;
                let listener = tokio::net::TcpListener::bind(cfg.listen)
                    .await
                    .with_context(|| format!("listening on {}", cfg.listen))?;
                server::run(listener, cfg, server::shutdown_signal()).await
            }
            Command::Mail(m) => mail::run(m).await,
            Command::Rollup(r) => rollup_cmd::run(r).await,
            Command::Chat(c) => chat_cmd::run(c).await,
            Command::Events(c) => events_cmd::run(c).await,
            Command::Demo(d) => demo::run(d).await.map(|_| ()),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let store = tidemark_core::store::StoreError::rejected("config", "zone differs");
        let e = anyhow::Error::from(store).context("opening the events stores");
        assert_eq!(
            one_line(&e),
            "opening the events stores: config: zone differs"
        );
        let io = std::io::Error::other("disk on fire");
        let e = anyhow::Error::from(io).context("writing");
        assert_eq!(one_line(&e), "writing: disk on fire");
    }
}
