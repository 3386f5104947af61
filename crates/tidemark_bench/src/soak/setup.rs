//! The engines of a soak configuration, started once and kept across every kill of the server.
//!
//! `embedded` needs none: the SQLite files live in the data dir the server restarts on.
//! `redis-mariadb` is the production mode without a Kafka-protocol broker
//! (docs/configuration.md, `chat.outbox`: beside Redis the outbox is `data/chat/outbox.db`):
//! a private `redis-server` with durable AOF (`appendfsync always`,
//! [`tidemark_chat::testing::RedisServer`]) as `chat.hot` and a scratch database on the
//! MariaDB server as `chat.archive`. Redis is never killed: only the server is.

use anyhow::Context;
use tidemark_chat::testing::RedisServer;
use tidemark_core::mysql::{drop_database, scratch_database};

/// A soak configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Config {
    Embedded,
    RedisMariadb,
}

impl Config {
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Embedded => "embedded",
            Self::RedisMariadb => "redis-mariadb",
        }
    }

    pub(super) fn describe(self) -> &'static str {
        match self {
            Self::Embedded => "SQLite hot store, outbox and archive in the data dir",
            Self::RedisMariadb => {
                "private durable redis-server (appendfsync always) as hot store, \
                 data/chat/outbox.db, scratch MariaDB database as archive"
            }
        }
    }
}

/// The engines of one configuration's soak; [`Engines::finish`] drops the scratch database,
/// Redis is killed on drop.
#[derive(Debug)]
pub(super) struct Engines {
    _redis: Option<RedisServer>,
    mysql: Option<String>,
    env: Vec<(&'static str, String)>,
}

impl Engines {
    /// Starts what `config` needs; `mysql_server` (`mysql://user@host:port`) holds the scratch
    /// archive database.
    pub(super) async fn start(config: Config, mysql_server: &str) -> anyhow::Result<Self> {
        let mut engines = Self {
            _redis: None,
            mysql: None,
            env: Vec::new(),
        };
        if config == Config::RedisMariadb {
            let redis = RedisServer::start().context("starting a private redis-server")?;
            engines.env.push(("TIDEMARK_CHAT__HOT", redis.url()));
            engines._redis = Some(redis);
            let url = scratch_database(mysql_server, "tm_soak")
                .await
                .with_context(|| format!("creating a scratch database on {mysql_server}"))?;
            engines.env.push(("TIDEMARK_CHAT__ARCHIVE", url.clone()));
            engines.mysql = Some(url);
        }
        Ok(engines)
    }

    /// The server's environment overrides.
    pub(super) fn env(&self) -> Vec<(&str, Option<&str>)> {
        self.env
            .iter()
            .map(|(k, v)| (*k, Some(v.as_str())))
            .collect()
    }

    /// Drops the scratch database, or with `keep` says where it is.
    pub(super) async fn finish(self, keep: bool) -> anyhow::Result<()> {
        match &self.mysql {
            Some(url) if keep => println!("  archive database kept: {url}"),
            Some(url) => drop_database(url).await?,
            None => {}
        }
        Ok(())
    }
}
