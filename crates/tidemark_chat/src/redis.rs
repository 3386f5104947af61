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
//! Durability: at start [`RedisHot::connect`] refuses a server that is not `appendonly yes`,
//! `appendfsync always`, `no-appendfsync-on-rewrite no` (DESIGN.md "Durability"). Seqs are
//! never reused because `latest` lives in the conversation hash, which is never deleted, and is
//! fsynced with the record it allocated. Commands go over a pool of connections (default 8,
//! `chat.redis_pool`), round-robin: Redis fsyncs once per event-loop pass for all clients
//! served in it, so many connections let many commits share one fsync.

mod hot;
pub mod keys;
mod scripts;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
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
    pool: Vec<ConnectionManager>,
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
/// now (`MISCONF` otherwise, `READONLY`, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`) is
/// [`ErrorKind::Unavailable`]; an answer that does not parse as what was stored is
/// [`ErrorKind::Corrupt`]; the rest (a script error, a wrong type, bad auth or configuration)
/// [`ErrorKind::Rejected`].
pub fn error_kind(e: &redis::RedisError) -> ErrorKind {
    use redis::ErrorKind as K;
    let text = e.to_string();
    match (e.kind(), e.code()) {
        (_, Some("OOM")) => ErrorKind::Full,
        (_, Some("MISCONF")) if text.contains("No space left") => ErrorKind::Full,
        (_, Some("MISCONF" | "BUSY")) => ErrorKind::Unavailable,
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

impl RedisHot {
    /// Connects `pool_size` (≥ 1) connections to `url` (`redis://host:port[/db]`), checks the
    /// durability settings and loads the scripts. Errors: [`ChatError::Invalid`] for a bad URL,
    /// [`ChatError::Store`] if the server cannot be reached (5 s connect timeout),
    /// [`ChatError::NotDurable`] naming the first setting that is not as required, a
    /// [`ChatError::Store`] that is not retryable for a server whose key layout a newer build
    /// wrote ([`keys::LAYOUT_VERSION`]).
    pub async fn connect(url: &str, pool_size: usize) -> Result<Self> {
        let client = redis::Client::open(url)
            .map_err(|e| ChatError::Invalid(format!("bad Redis URL {url:?}: {e}")))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Duration::from_secs(5))
            .set_response_timeout(Duration::from_secs(5))
            .set_number_of_retries(2)
            .set_max_delay(1000);
        let mut pool = Vec::with_capacity(pool_size.max(1));
        for _ in 0..pool_size.max(1) {
            let conn = ConnectionManager::new_with_config(client.clone(), config.clone())
                .await
                .map_err(|e| {
                    let kind = error_kind(&e);
                    StoreError::new(kind, "redis", e).with_context(format!("connecting to {url}"))
                })?;
            pool.push(conn);
        }
        let store = Self {
            url: url.to_owned(),
            pool,
            next: AtomicUsize::new(0),
            scripts: Scripts::new(),
        };
        store.check_durable().await?;
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

    /// Refuses a server that could lose acknowledged writes (DESIGN.md "Durability").
    async fn check_durable(&self) -> Result<()> {
        let mut conn = self.conn();
        for (setting, required) in REQUIRED_SETTINGS {
            let got: Vec<String> = redis::cmd("CONFIG")
                .arg("GET")
                .arg(setting)
                .query_async(&mut conn)
                .await?;
            let value = got.get(1).cloned().unwrap_or_default();
            if value != required {
                return Err(ChatError::NotDurable {
                    url: self.url.clone(),
                    setting: setting.to_owned(),
                    value,
                    required: required.to_owned(),
                });
            }
        }
        Ok(())
    }

    /// The next pooled connection (round-robin; a handle, cheap to clone).
    fn conn(&self) -> ConnectionManager {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.pool.len();
        self.pool[i].clone()
    }

    /// Number of pooled connections.
    pub fn pool_size(&self) -> usize {
        self.pool.len()
    }
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
