//! `tidemark-bench soak`: a crash soak. For each configuration a `tidemark serve` child takes
//! concurrent SENDs, is `kill -9`ed mid-flight, and is restarted on the same data directory
//! and engines; after every restart the checks of [`crate::acks`] run over every ACK so far
//! (present at its seq with its id and body, seqs dense, retries answered with the original
//! ACK, an unanswered send retried ends with one seq). It stops after `--cycles` cycles or
//! `--minutes` minutes of a configuration, whichever comes first, and prints per
//! configuration the cycles, the ACKs checked and every violation; it exits non-zero if there
//! was one. Loopback only; data in a temp dir, kept when a violation was found.
//!
//! Configurations (`setup`): `embedded` (the default engines, SQLite files in the data
//! dir) and `redis-mariadb` (a private durable `redis-server` as hot store, the outbox in
//! `data/chat/outbox.db` beside it, a scratch MariaDB database as archive). Only the server
//! is killed; Redis and MariaDB keep running. `chat.hot_window` is `0s` by default, and the
//! trim and recovery timers are short (`SHORT_TIMERS`), so messages leave the hot tier a few
//! seconds after they are archived, even though each server lives only a second or two: the
//! history read after a restart spans the archive as well as the hot tier.

mod cycle;
mod setup;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::ServerBin;
use crate::acks::{Api, Ledger, Retries};
use crate::load::http_client;
use crate::process::ServerProcess;
use cycle::Counters;
use setup::{Config, Engines};

/// The tenant key of a server with the default configuration.
const KEY: &str = "dev-key";

/// Violations printed per configuration (all are counted).
const SHOWN: usize = 10;

/// Chat's trim and recovery timers in a soak (unless `--default-timers`). A killed server's
/// hot-store shard leases block its successor until they expire: at the default 10 s no
/// server of a soak would live long enough to trim. A record is trimmed once the archive
/// watermark is `outbox_recovery_window + safety_margin` past it (default 40 s); here 3 s.
/// Recovery re-publishes records a kill left RESERVED after 2 s instead of 30 s.
const SHORT_TIMERS: [(&str, &str); 4] = [
    ("TIDEMARK_CHAT__SHARD_LEASE", "1s"),
    ("TIDEMARK_CHAT__TRIM_INTERVAL", "100ms"),
    ("TIDEMARK_CHAT__SAFETY_MARGIN", "1s"),
    ("TIDEMARK_CHAT__OUTBOX_RECOVERY_WINDOW", "2s"),
];

/// `tidemark-bench soak`. A flag given twice takes its last value (`scripts/soak` passes
/// defaults before the caller's flags).
#[derive(Debug, clap::Args)]
#[command(args_override_self = true)]
pub struct SoakArgs {
    /// Server configurations: `embedded` (SQLite), `redis-mariadb`, or `all` (both, in turn).
    #[arg(long, value_enum, default_value = "all")]
    pub config: ConfigArg,
    /// Most kill -9 cycles per configuration.
    #[arg(long, default_value_t = 100)]
    pub cycles: u32,
    /// Most minutes per configuration (the run stops at `--cycles` or here, first reached).
    #[arg(long, default_value_t = 10.0)]
    pub minutes: f64,
    /// The server's `chat.hot_window`: `0s` moves messages to the archive as soon as they
    /// are archived and trimmed, so the checks read both tiers.
    #[arg(long, default_value = "0s")]
    pub hot_window: String,
    /// Keep chat's default trim and recovery timers instead of the short ones of a soak
    /// (shard_lease 1s, trim_interval 100ms, safety_margin 1s, outbox_recovery_window 2s): the
    /// hot tier then keeps a message 40 s after it is archived, and a restarted server trims
    /// nothing for 10 s.
    #[arg(long)]
    pub default_timers: bool,
    /// Concurrent senders (one request each in flight).
    #[arg(long, default_value_t = 8)]
    pub senders: usize,
    /// Conversations the sends are spread over.
    #[arg(long, default_value_t = 4)]
    pub conversations: usize,
    /// The MariaDB server of `redis-mariadb` (a scratch database on it is created and dropped).
    #[arg(
        long,
        env = "TEST_MYSQL_URL",
        default_value = "mysql://root@127.0.0.1:3306"
    )]
    pub mysql: String,
    /// Directory for the temporary data dirs and server logs [default: the system temp dir].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The server executable.
    #[command(flatten)]
    pub server: ServerBin,
}

/// `--config`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ConfigArg {
    /// SQLite files in the data dir (the embedded default).
    Embedded,
    /// Redis hot store, `outbox.db`, MariaDB archive.
    RedisMariadb,
    /// Both, in turn.
    All,
}

/// What one configuration's soak found.
#[derive(Debug, Default)]
struct Summary {
    cycles: u32,
    acks: usize,
    acks_checked: usize,
    unanswered_retried: usize,
    acked_retried: usize,
    violations: Vec<String>,
    elapsed: Duration,
    /// The servers' counters, each read just before its kill, summed.
    counters: Counters,
}

/// Runs the soak on each chosen configuration and prints what it found.
pub async fn run(args: SoakArgs) -> anyhow::Result<()> {
    if args.cycles == 0 || args.senders == 0 || args.conversations == 0 || args.minutes <= 0.0 {
        bail!("--cycles, --senders, --conversations and --minutes must be positive");
    }
    let exe = args.server.resolve()?;
    let configs: &[Config] = match args.config {
        ConfigArg::Embedded => &[Config::Embedded],
        ConfigArg::RedisMariadb => &[Config::RedisMariadb],
        ConfigArg::All => &[Config::Embedded, Config::RedisMariadb],
    };
    println!(
        "tidemark-bench soak — server {}, at most {} cycles or {} min per configuration, {} \
         senders over {} conversations, chat.hot_window {}, {}",
        exe.display(),
        args.cycles,
        args.minutes,
        args.senders,
        args.conversations,
        args.hot_window,
        if args.default_timers {
            "default trim and recovery timers".to_owned()
        } else {
            SHORT_TIMERS
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        }
    );
    let mut failed = 0;
    for &config in configs {
        let root = crate::temp_root(args.dir.as_deref(), &format!("soak-{}", config.name()))?;
        println!("\n== {} ({})", config.name(), config.describe());
        let summary = soak(config, &args, &exe, root.path()).await?;
        print_summary(config, &summary);
        if !summary.violations.is_empty() {
            failed += summary.violations.len();
            println!("  data and server logs kept in {}", root.keep().display());
        }
    }
    if failed > 0 {
        bail!("{failed} violations");
    }
    Ok(())
}

/// The cycles of one configuration, its data under `root`.
async fn soak(
    config: Config,
    args: &SoakArgs,
    exe: &std::path::Path,
    root: &std::path::Path,
) -> anyhow::Result<Summary> {
    let engines = Engines::start(config, &args.mysql).await?;
    let result = soak_on(&engines, args, exe, root).await;
    let keep = result.as_ref().is_ok_and(|s| !s.violations.is_empty());
    engines.finish(keep).await?;
    result
}

async fn soak_on(
    engines: &Engines,
    args: &SoakArgs,
    exe: &std::path::Path,
    root: &std::path::Path,
) -> anyhow::Result<Summary> {
    let mut env = engines.env();
    env.push(("TIDEMARK_CHAT__HOT_WINDOW", Some(args.hot_window.as_str())));
    if !args.default_timers {
        env.extend(SHORT_TIMERS.iter().map(|(k, v)| (*k, Some(*v))));
    }
    let data = root.join("data");
    let probe = http_client(4);
    let start = |n: u32| {
        let log = root.join(format!("server-{n}.log"));
        let (exe, probe, data, env) = (exe, &probe, &data, &env);
        async move { ServerProcess::start(exe, probe, data, &log, env).await }
    };
    let mut server = start(0).await?;
    let mut api = Api {
        client: reqwest::Client::builder()
            .pool_max_idle_per_host(args.senders * 2)
            .timeout(Duration::from_secs(30))
            .build()?,
        base: format!("http://{}", server.addr),
        key: KEY.to_owned(),
    };
    let mut cids = Vec::new();
    for i in 0..args.conversations {
        cids.push(
            api.create_conversation(&[format!("a{i}"), format!("b{i}")])
                .await?,
        );
    }
    // Conversation `i`'s history is read by its member `a<i>`.
    let readers: Vec<(String, String)> = cids
        .iter()
        .enumerate()
        .map(|(i, cid)| (cid.clone(), format!("a{i}")))
        .collect();
    let mut ledger = Ledger::default();
    let mut out = Summary::default();
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(args.minutes * 60.0);
    while out.cycles < args.cycles && Instant::now() < deadline {
        let before = ledger.acked().len();
        let load = cycle::load_then_kill(
            &api,
            &cids,
            args.senders,
            out.cycles,
            &mut ledger,
            &probe,
            server,
        )
        .await?;
        out.counters += load.counters;
        out.cycles += 1;
        // A server that cannot start again, or then cannot answer, is a finding too: it ends
        // this configuration's soak as a violation (the data is kept), not the whole run.
        server = match start(out.cycles).await {
            Ok(s) => s,
            Err(e) => {
                out.violations.push(format!(
                    "cycle {}: no restart after the kill: {e:#}",
                    out.cycles
                ));
                return Ok(finish(out, &ledger, started));
            }
        };
        api.base = format!("http://{}", server.addr);
        let retries = Retries {
            from: before,
            every: (before / 200).max(1),
            offset: out.cycles as usize,
        };
        let check = match ledger.check(&api, &readers, retries).await {
            Ok(c) => c,
            Err(e) => {
                out.violations
                    .push(format!("cycle {}: the checks failed: {e:#}", out.cycles));
                let _ = server.kill9().await;
                return Ok(finish(out, &ledger, started));
            }
        };
        println!(
            "cycle {:>3}: {:>5} ACKs in {:>4} ms of load, {} unanswered; {:>6} ACKs checked, {} \
             retried, {} violations",
            out.cycles,
            load.acks,
            load.elapsed.as_millis(),
            load.unanswered,
            check.acks_checked,
            check.acked_retried + check.unanswered_retried,
            check.violations.len()
        );
        for v in check.violations.iter().take(SHOWN) {
            println!("    VIOLATION {v}");
        }
        out.acks_checked += check.acks_checked;
        out.unanswered_retried += check.unanswered_retried;
        out.acked_retried += check.acked_retried;
        out.violations.extend(check.violations);
    }
    let out = finish(out, &ledger, started);
    server.stop(Duration::from_secs(30)).await?;
    Ok(out)
}

fn finish(mut out: Summary, ledger: &Ledger, started: Instant) -> Summary {
    out.acks = ledger.acked().len();
    out.elapsed = started.elapsed();
    out
}

fn print_summary(config: Config, s: &Summary) {
    println!(
        "{}: {} cycles in {:.1} s; {} ACKs, {} ACK checks after restarts ({} ACKed and {} \
         unanswered sends retried); {} violations",
        config.name(),
        s.cycles,
        s.elapsed.as_secs_f64(),
        s.acks,
        s.acks_checked,
        s.acked_retried,
        s.unanswered_retried,
        s.violations.len()
    );
    println!(
        "  servers' counters up to each kill, summed: {} records archived, {} trimmed from the \
         hot tier (read back from the archive since), {} re-published by recovery",
        s.counters.archived, s.counters.trimmed, s.counters.recovered
    );
    for v in s.violations.iter().take(SHOWN) {
        println!("  VIOLATION {v}");
    }
    if s.violations.len() > SHOWN {
        println!("  … and {} more", s.violations.len() - SHOWN);
    }
}
