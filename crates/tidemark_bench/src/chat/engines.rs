//! Where the server of one `tidemark-bench chat` run keeps its chat data.
//!
//! `embedded` (default): the SQLite files under the run's data dir. `production` (the seed 000
//! shape): a private `redis-server` with durable AOF (`appendfsync always`) as hot store, a
//! private tansu broker (Kafka protocol) as outbox and a scratch database on a MariaDB
//! server as archive — all fresh for every (mode, pool) run, so each starts empty and its Redis
//! memory is its own. `hot-only` gets Redis alone; `sync-archive` writes MariaDB on the commit
//! path besides the outbox. The servers are the ones the tests use
//! ([`tidemark_chat::testing`]): `redis-server` and tansu must be installed (`scripts/test`
//! installs both).

use anyhow::Context;
use tidemark_chat::redis::keys::kind_of;
use tidemark_chat::testing::{KafkaBroker, RedisServer};
use tidemark_core::mysql::{drop_database, scratch_database};

use super::BenchMode;

/// The storage engines of the benchmarked servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Engines {
    /// SQLite files in the data dir (the embedded default).
    Embedded,
    /// Redis + Kafka protocol + MariaDB (`chat.hot`, `chat.outbox`, `chat.archive`).
    Production,
    /// Several nodes (`--nodes`) on a Redis Cluster, a partitioned outbox (`--partitions`) and
    /// MariaDB (see `chat::cluster`).
    Cluster,
}

/// The engines of one run; [`RunEngines::finish`] drops the scratch database, and the Redis
/// and broker processes are killed on drop.
#[derive(Debug)]
pub(super) struct RunEngines {
    redis: Option<RedisServer>,
    /// Kept alive for the run.
    _broker: Option<KafkaBroker>,
    mysql: Option<String>,
    env: Vec<(&'static str, String)>,
}

/// Redis memory per message at the end of a run (`MEMORY USAGE … SAMPLES 0` of every key).
#[derive(Debug, Clone, Copy)]
pub(super) struct RedisBytes {
    /// Records in the hot tier (`HLEN` of every record hash).
    pub(super) records: u64,
    /// Record hash + hot history index per record, the body's bytes subtracted (the figure the
    /// bar is about; seed 000: about 360 B).
    pub(super) record_and_index: f64,
    /// Every key (conversations, dedup entries and their expiry queue, trim candidates) per
    /// record, bodies subtracted.
    pub(super) all_keys: f64,
}

impl RunEngines {
    /// Starts what `engines` needs for `mode` with a Redis pool of `pool` connections and an
    /// outbox of `partitions`;
    /// `mysql_server` (`mysql://user@host:port`) holds the scratch archive database.
    pub(super) async fn start(
        engines: Engines,
        mode: BenchMode,
        pool: usize,
        partitions: u32,
        mysql_server: &str,
    ) -> anyhow::Result<Self> {
        let mut run = Self {
            redis: None,
            _broker: None,
            mysql: None,
            env: vec![("TIDEMARK_CHAT__MODE", mode.as_str().to_owned())],
        };
        if engines != Engines::Production {
            return Ok(run);
        }
        let redis = RedisServer::start().context("starting a private redis-server")?;
        run.env.push(("TIDEMARK_CHAT__HOT", redis.url()));
        run.env
            .push(("TIDEMARK_CHAT__REDIS_POOL", pool.to_string()));
        run.redis = Some(redis);
        if mode != BenchMode::HotOnly {
            let broker = KafkaBroker::start().context("starting a private tansu broker")?;
            run.env
                .push(("TIDEMARK_CHAT__OUTBOX", broker.url("tidemark.chat.outbox")));
            run.env
                .push(("TIDEMARK_CHAT__OUTBOX_PARTITIONS", partitions.to_string()));
            run._broker = Some(broker);
            let url = scratch_database(mysql_server, "tm_bench_chat")
                .await
                .with_context(|| format!("creating a scratch database on {mysql_server}"))?;
            run.env.push(("TIDEMARK_CHAT__ARCHIVE", url.clone()));
            run.mysql = Some(url);
        }
        Ok(run)
    }

    /// The server's environment overrides.
    pub(super) fn env(&self) -> Vec<(&str, Option<&str>)> {
        self.env
            .iter()
            .map(|(k, v)| (*k, Some(v.as_str())))
            .collect()
    }

    /// Redis memory per message (production only), bodies of `body_bytes` subtracted.
    pub(super) async fn redis_bytes(
        &self,
        body_bytes: usize,
    ) -> anyhow::Result<Option<RedisBytes>> {
        let Some(redis) = &self.redis else {
            return Ok(None);
        };
        let client = redis::Client::open(redis.url())?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        // A private server of this run only: KEYS is fine here.
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query_async(&mut conn).await?;
        let mut pipe = redis::pipe();
        for k in &keys {
            pipe.cmd("MEMORY").arg("USAGE").arg(k).arg("SAMPLES").arg(0);
        }
        let sizes: Vec<Option<u64>> = pipe.query_async(&mut conn).await?;
        // `m` record hashes, `h` hot history indexes.
        let record_hashes: Vec<&String> = keys.iter().filter(|k| kind_of(k) == Some("m")).collect();
        let mut pipe = redis::pipe();
        for k in &record_hashes {
            pipe.cmd("HLEN").arg(*k);
        }
        let lens: Vec<u64> = pipe.query_async(&mut conn).await?;
        let records: u64 = lens.iter().sum();
        if records == 0 {
            return Ok(None);
        }
        let (mut record_and_index, mut all) = (0u64, 0u64);
        for (k, size) in keys.iter().zip(&sizes) {
            let size = size.unwrap_or(0);
            all += size;
            if matches!(kind_of(k), Some("m" | "h")) {
                record_and_index += size;
            }
        }
        let per = |total: u64| total as f64 / records as f64 - body_bytes as f64;
        Ok(Some(RedisBytes {
            records,
            record_and_index: per(record_and_index),
            all_keys: per(all),
        }))
    }

    /// Drops the scratch database (the processes go on drop).
    pub(super) async fn finish(self) -> anyhow::Result<()> {
        if let Some(url) = &self.mysql {
            drop_database(url).await?;
        }
        Ok(())
    }
}
