//! The production hot store on Redis 7 (DESIGN.md part A "Commit path", "Durability"; seed 000).
//!
//! Data flow of a SEND on the staged commit path ([`crate::commit::staged_commit`]):
//! 1. `reserve_and_record.lua`: dedup lookup, `HINCRBY latest`, record RESERVED, dedup entry,
//!    reserve-queue entry — one atomic script in the conversation's slot;
//! 2. the envelope is appended to the outbox (Kafka protocol, or a SQLite outbox file);
//! 3. `mark_published_and_committed.lua`: COMMITTED, hot index, trim candidate.
//!
//! In `hot-only` mode (no outbox) step 1 is the whole commit: the same script writes the record
//! COMMITTED and indexed, and queues it as untracked for a later tiered server's backfill
//! ([`crate::recovery::backfill_untracked`]).
//!
//! The trimmer, the recovery worker and the dedup purge walk per-shard queues with `trim.lua`,
//! `queued_records.lua` and `purge_dedup.lua` (key layout and the reason for shards in
//! [`keys`]). Reads are single scripts too (`hot_slice.lua`, `hot_unread.lua`), so the floor F,
//! the latest seq and the records are seen at one instant.
//!
//! Redis Cluster (`redis+cluster://host:port[,host:port…]`): the same keys and scripts. Every
//! script touches one slot — a conversation's keys and its shard's queues share the shard's
//! hash tag `{tm:NN}` — and what spans shards is one command per shard, never a cross-slot
//! pipeline; the `redis` crate's cluster client routes each command by its first key and follows
//! MOVED and ASK.
//!
//! Durability: at start [`RedisHot::connect`] refuses a server (every master of a cluster)
//! that is not `appendonly yes`, `appendfsync always`, `no-appendfsync-on-rewrite no`
//! (DESIGN.md "Durability"). Seqs are
//! never reused because `latest` lives in the conversation hash, which is never deleted, and is
//! fsynced with the record it allocated. Commands go over a pool of connections (default 8,
//! `chat.redis_pool`), round-robin: Redis fsyncs once per event-loop pass for all clients
//! served in it, so many connections let many commits share one fsync.

mod hot;
pub mod keys;
mod scripts;
mod shards;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use tidemark_core::store::{ErrorKind, StoreError};

use crate::error::{ChatError, Result};
use scripts::Scripts;

/// Default number of pooled connections per Redis instance (DESIGN.md "Durability").
pub const DEFAULT_POOL: usize = 8;

/// The settings a hot store must have, with the values required.
pub const REQUIRED_SETTINGS: [(&str, &str); 3] = [
    ("appendonly", "yes"),
    ("appendfsync", "always"),
    ("no-appendfsync-on-rewrite", "no"),
];

/// The Redis hot store (see the module docs).
pub struct RedisHot {
    url: String,
    pool: Vec<Conn>,
    next: AtomicUsize,
    scripts: Scripts,
}

impl std::fmt::Debug for RedisHot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisHot")
            .field("url", &self.url)
            .field("pool", &self.pool.len())
            .finish()
    }
}

impl From<redis::RedisError> for ChatError {
    fn from(e: redis::RedisError) -> Self {
        ChatError::Store(StoreError::new(error_kind(&e), "redis", e))
    }
}

/// The kind of a Redis error: `OOM command not allowed` (past `maxmemory`) is
/// [`ErrorKind::Full`], and so is a `MISCONF` refusal whose cause is a full disk (the AOF
/// could not be written: "No space left on device"); no connection, a timeout, a dropped
/// link, a server loading its data, busy with a script, failing over or refusing writes for
/// now (`MISCONF` otherwise, `READONLY`, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`), and on a
/// cluster a script that met a key of its slot already moved (resharding) or a cluster that is
/// down, is [`ErrorKind::Unavailable`]; an answer that does not parse as what was stored is
/// [`ErrorKind::Corrupt`]; the rest (a script error, a wrong type, bad auth or configuration)
/// [`ErrorKind::Rejected`].
pub fn error_kind(e: &redis::RedisError) -> ErrorKind {
    use redis::ErrorKind as K;
    let text = e.to_string();
    match (e.kind(), e.code()) {
        (_, Some("OOM")) => ErrorKind::Full,
        (_, Some("MISCONF")) if text.contains("No space left") => ErrorKind::Full,
        (_, Some("MISCONF" | "BUSY")) => ErrorKind::Unavailable,
        // On a cluster: a script met a key of its slot already moved (resharding), or the
        // cluster is down. Both pass.
        _ if text.contains("Script attempted to access a non local key")
            || text.contains("while the cluster is down") =>
        {
            ErrorKind::Unavailable
        }
        _ if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() => {
            ErrorKind::Unavailable
        }
        (
            K::IoError
            | K::BusyLoadingError
            | K::TryAgain
            | K::ClusterDown
            | K::MasterDown
            | K::ReadOnly
            | K::ClusterConnectionNotFound
            | K::Moved
            | K::Ask,
            _,
        ) => ErrorKind::Unavailable,
        (K::TypeError | K::ParseError, _) => ErrorKind::Corrupt,
        _ => ErrorKind::Rejected,
    }
}

/// A connection to the hot store: one server's (a connection manager that reconnects), or a
/// Redis Cluster's (the `redis` crate's cluster client: each command goes to the master of its
/// first key's slot, MOVED and ASK are followed).
#[derive(Clone)]
pub(crate) enum Conn {
    /// One server.
    Single(ConnectionManager),
    /// A cluster.
    Cluster(ClusterConnection),
}

impl redis::aio::ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// The seed nodes of a cluster URL `redis+cluster://host:port[,host:port…]`, as
/// `redis://host:port` URLs; `None` for any other URL. Errors: [`ChatError::Invalid`] for a
/// cluster URL without a node.
pub fn cluster_nodes(url: &str) -> Result<Option<Vec<String>>> {
    let Some(rest) = url.strip_prefix("redis+cluster://") else {
        return Ok(None);
    };
    let nodes: Vec<String> = rest
        .trim_end_matches('/')
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| format!("redis://{n}"))
        .collect();
    if nodes.is_empty() {
        return Err(ChatError::Invalid(format!(
            "bad Redis Cluster URL {url:?}: expected redis+cluster://host:port[,host:port…]"
        )));
    }
    Ok(Some(nodes))
}

impl RedisHot {
    /// Connects `pool_size` (≥ 1) connections to `url` — `redis://host:port[/db]` for one
    /// server, `redis+cluster://host:port[,host:port…]` for a Redis Cluster (any of its nodes
    /// as seeds) — checks the durability settings (on every master of a cluster) and loads the
    /// scripts. Errors: [`ChatError::Invalid`] for a bad URL, [`ChatError::Store`] if the
    /// server cannot be reached (5 s connect timeout), [`ChatError::NotDurable`] naming the
    /// server and the first setting that is not as required, a [`ChatError::Store`] that is
    /// not retryable for a server whose key layout a newer build wrote
    /// ([`keys::LAYOUT_VERSION`]).
    pub async fn connect(url: &str, pool_size: usize) -> Result<Self> {
        let unreachable = |e: redis::RedisError| {
            let kind = error_kind(&e);
            ChatError::from(
                StoreError::new(kind, "redis", e).with_context(format!("connecting to {url}")),
            )
        };
        let mut pool = Vec::with_capacity(pool_size.max(1));
        let masters = match cluster_nodes(url)? {
            Some(nodes) => {
                let client = ClusterClient::builder(nodes.clone())
                    .connection_timeout(Duration::from_secs(5))
                    .response_timeout(Duration::from_secs(5))
                    .build()
                    .map_err(|e| {
                        ChatError::Invalid(format!("bad Redis Cluster URL {url:?}: {e}"))
                    })?;
                for _ in 0..pool_size.max(1) {
                    let conn = client.get_async_connection().await.map_err(unreachable)?;
                    pool.push(Conn::Cluster(conn));
                }
                cluster_masters(&nodes[0]).await.map_err(unreachable)?
            }
            None => {
                let client = redis::Client::open(url)
                    .map_err(|e| ChatError::Invalid(format!("bad Redis URL {url:?}: {e}")))?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Duration::from_secs(5))
                    .set_response_timeout(Duration::from_secs(5))
                    .set_number_of_retries(2)
                    .set_max_delay(1000);
                for _ in 0..pool_size.max(1) {
                    let conn = ConnectionManager::new_with_config(client.clone(), config.clone())
                        .await
                        .map_err(unreachable)?;
                    pool.push(Conn::Single(conn));
                }
                Vec::new()
            }
        };
        let store = Self {
            url: url.to_owned(),
            pool,
            next: AtomicUsize::new(0),
            scripts: Scripts::new(),
        };
        if masters.is_empty() {
            check_durable(&mut store.conn(), url).await?;
        }
        for master in &masters {
            let client = redis::Client::open(master.as_str())
                .map_err(|e| ChatError::Invalid(format!("cluster master {master:?}: {e}")))?;
            let mut conn = client
                .get_multiplexed_async_connection()
                .await
                .map_err(unreachable)?;
            check_durable(&mut conn, master).await?;
        }
        store.check_layout().await?;
        let mut conn = store.conn();
        for s in store.scripts.all() {
            s.prepare_invoke().load_async(&mut conn).await?;
        }
        Ok(store)
    }

    /// Records [`keys::LAYOUT_VERSION`] in `tm:meta` on a server that has none (a new one, or
    /// one written before the version was recorded: the same layout), and refuses one whose
    /// recorded version is above it: a newer build wrote its keys.
    async fn check_layout(&self) -> Result<()> {
        let mut conn = self.conn();
        let (_, found): (bool, i64) = redis::pipe()
            .atomic()
            .cmd("HSETNX")
            .arg(keys::META)
            .arg(keys::LAYOUT_VERSION_FIELD)
            .arg(keys::LAYOUT_VERSION)
            .cmd("HGET")
            .arg(keys::META)
            .arg(keys::LAYOUT_VERSION_FIELD)
            .query_async(&mut conn)
            .await?;
        if found > keys::LAYOUT_VERSION {
            return Err(StoreError::rejected(
                "redis",
                format!(
                    "redis at {} has key layout version {found}, this build knows up to {}: use a newer tidemark",
                    self.url,
                    keys::LAYOUT_VERSION
                ),
            )
            .into());
        }
        Ok(())
    }

    /// The next pooled connection (round-robin; a handle, cheap to clone).
    fn conn(&self) -> Conn {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.pool.len();
        self.pool[i].clone()
    }

    /// Number of pooled connections.
    pub fn pool_size(&self) -> usize {
        self.pool.len()
    }
}

/// Refuses a server that could lose acknowledged writes (DESIGN.md "Durability"): the first
/// of [`REQUIRED_SETTINGS`] not as required, named with the server `at`.
async fn check_durable(conn: &mut impl redis::aio::ConnectionLike, at: &str) -> Result<()> {
    for (setting, required) in REQUIRED_SETTINGS {
        let got: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(setting)
            .query_async(conn)
            .await?;
        let value = got.get(1).cloned().unwrap_or_default();
        if value != required {
            return Err(ChatError::NotDurable {
                url: at.to_owned(),
                setting: setting.to_owned(),
                value,
                required: required.to_owned(),
            });
        }
    }
    Ok(())
}

/// The masters of the cluster `seed` belongs to, as `redis://ip:port`, from `CLUSTER NODES`
/// (lines `<id> <ip:port@cport[,hostname]> <flags> …`; a master's flags hold `master`).
async fn cluster_masters(seed: &str) -> redis::RedisResult<Vec<String>> {
    let client = redis::Client::open(seed)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut conn)
        .await?;
    Ok(nodes
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (_, addr, flags) = (fields.next()?, fields.next()?, fields.next()?);
            let master = flags.split(',').any(|f| f == "master")
                && !flags.split(',').any(|f| f == "fail" || f == "noaddr");
            let addr = addr.split(['@', ',']).next()?;
            master.then(|| format!("redis://{addr}"))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_errors_sort_into_kinds() {
        let ext = |code: &str, detail: &str| {
            redis::make_extension_error(code.to_owned(), Some(detail.to_owned()))
        };
        let oom = ext("OOM", "command not allowed when used memory > 'maxmemory'.");
        assert_eq!(error_kind(&oom), ErrorKind::Full);
        let misconf = "Errors writing to the AOF file: No space left on device";
        assert_eq!(error_kind(&ext("MISCONF", misconf)), ErrorKind::Full);
        let misconf = "Redis is configured to save RDB snapshots, but it's currently unable to persist to disk";
        assert_eq!(error_kind(&ext("MISCONF", misconf)), ErrorKind::Unavailable);
        let script_err = |detail: &str| {
            redis::RedisError::from((
                redis::ErrorKind::ResponseError,
                "An error was signalled by the server",
                detail.to_owned(),
            ))
        };
        let moved = "Script attempted to access a non local key in a cluster node script: f_1, on @user_script:1.";
        assert_eq!(error_kind(&script_err(moved)), ErrorKind::Unavailable);
        let down = "Script attempted to execute a command while the cluster is down";
        assert_eq!(error_kind(&script_err(down)), ErrorKind::Unavailable);
        let other = "user_script:1: Script attempted to access nonexistent global variable";
        assert_eq!(error_kind(&script_err(other)), ErrorKind::Rejected);
        let kind = |k: redis::ErrorKind| error_kind(&redis::RedisError::from((k, "x")));
        assert_eq!(
            kind(redis::ErrorKind::BusyLoadingError),
            ErrorKind::Unavailable
        );
        assert_eq!(kind(redis::ErrorKind::TryAgain), ErrorKind::Unavailable);
        assert_eq!(kind(redis::ErrorKind::ReadOnly), ErrorKind::Unavailable);
        assert_eq!(kind(redis::ErrorKind::TypeError), ErrorKind::Corrupt);
        assert_eq!(kind(redis::ErrorKind::ResponseError), ErrorKind::Rejected);
        assert_eq!(kind(redis::ErrorKind::NoScriptError), ErrorKind::Rejected);
        assert_eq!(
            kind(redis::ErrorKind::AuthenticationFailed),
            ErrorKind::Rejected
        );
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let e = ChatError::from(redis::RedisError::from(refused));
        assert!(e.is_retryable(), "{e}");
        assert!(
            matches!(&e, ChatError::Store(s) if s.kind() == ErrorKind::Unavailable && s.backend() == "redis")
        );
    }
}
