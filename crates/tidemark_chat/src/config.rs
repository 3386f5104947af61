//! Chat configuration (`[chat]` in the TOML file; env `TIDEMARK_CHAT__<KEY>`).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tidemark_core::engine::{EmbeddedStoreKey, is_embedded};

/// How history is stored (DESIGN.md part A, "Modes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ChatMode {
    /// Commit to the hot tier + outbox; archive asynchronously; trim behind the watermark.
    #[default]
    Tiered,
    /// Development: no archive, no outbox; history stays hot forever.
    HotOnly,
    /// Writes the archive on the commit path before SEND_ACK; kept only to measure against.
    SyncArchive,
}

impl ChatMode {
    /// The priority of the embedded archive's writer thread: background unless the archive
    /// write is on the commit path (`sync-archive`), see [`tidemark_core::sqlite::Priority`].
    pub fn archive_priority(self) -> tidemark_core::sqlite::Priority {
        match self {
            ChatMode::SyncArchive => tidemark_core::sqlite::Priority::Normal,
            ChatMode::Tiered | ChatMode::HotOnly => tidemark_core::sqlite::Priority::Background,
        }
    }
}

/// The default `chat.shard_lease`: 10 s.
pub const DEFAULT_SHARD_LEASE: Duration = Duration::from_secs(10);

/// Default of [`ChatConfig::dedup_memory_keys`].
pub const DEFAULT_DEDUP_MEMORY_KEYS: usize = 4_000_000;

/// Default of [`ChatConfig::page_bytes_max`]: 4 MiB, 64 of the largest default bodies, or a
/// page of 200 of them as plain text.
pub const DEFAULT_PAGE_BYTES_MAX: usize = 4 << 20;

/// Chat settings. Durations are written like `7d`, `30s`, `250ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChatConfig {
    /// Storage mode.
    pub mode: ChatMode,
    /// How long a committed message stays in the hot tier (default 7 days). It may change
    /// across restarts: each message keeps the window it was committed under, and trimming
    /// never outruns the archive whatever windows came before ([`crate::trimmer`]).
    #[serde(with = "humantime_serde")]
    pub hot_window: Duration,
    /// A record left RESERVED this long is re-published by the recovery worker (default 30 s).
    #[serde(with = "humantime_serde")]
    pub outbox_recovery_window: Duration,
    /// Extra margin in the trim condition (default 10 s).
    #[serde(with = "humantime_serde")]
    pub safety_margin: Duration,
    /// How long `(sender, client_msg_id)` is deduplicated (default 24 h).
    #[serde(with = "humantime_serde")]
    pub dedup_window: Duration,
    /// SQLite hot store: how many client dedup keys are indexed in memory (default 4,000,000,
    /// about 80–160 MB). Past it the oldest keys move to an on-disk index in the trimmer's pass
    /// (random B-tree writes, off the commit path) and each SEND also reads that index; sized
    /// to the sends of one dedup window, neither happens (see `sqlite::dedup`). The
    /// index is rebuilt when the server starts: 4,000,000 keys took 4.9 s and 207 MB of
    /// resident memory on the project's 2-core test machine.
    pub dedup_memory_keys: usize,
    /// Most records per archiver batch (default 500). A batch also ends at 16 MiB of message
    /// bodies ([`crate::archiver::DEFAULT_BATCH_BYTES_MAX`]), which bounds its memory whatever
    /// the bodies' size. Each batch is one archive transaction (records, then index entries):
    /// the smaller it is, the shorter the flush that the SEND commits' fsyncs queue behind on a
    /// shared disk; a larger one saves nothing per record since the history index is written
    /// in time order (see [`crate::archiver::Archiver::run`] for the figures).
    pub archive_batch_max: usize,
    /// Most sends sharing one commit (default 512).
    pub commit_batch_max: usize,
    /// Largest message body in bytes (default 64 KiB).
    pub max_body_bytes: usize,
    /// Most bytes of message JSON in one history page (default [`DEFAULT_PAGE_BYTES_MAX`],
    /// 4 MiB). A page over it keeps the messages nearest its anchor and says `truncated`
    /// ([`crate::reads::cap_page`]); one message is always answered, whatever its size.
    pub page_bytes_max: usize,
    /// Trim candidates removed per store call (default 1,000).
    pub trim_batch: usize,
    /// How often the trimmer runs (default 1 s).
    #[serde(with = "humantime_serde")]
    pub trim_interval: Duration,
    /// How long the archiver sleeps after a batch that was not full, i.e. once it has caught up
    /// (default 250 ms): the archive lags the outbox by about this much plus a batch's write
    /// under a steady load. Above `archive_batch_max` sends per pause the archiver runs batch
    /// after batch instead (see [`crate::archiver::Archiver::run`]).
    #[serde(with = "humantime_serde")]
    pub archive_idle: Duration,
    /// Outbox records already archived are dropped after this long (default 24 h).
    #[serde(with = "humantime_serde")]
    pub outbox_retention: Duration,
    /// Hot store: `sqlite` (default: `<data_dir>/chat/hot.db`) or `redis://host:port[/db]`
    /// (a Redis 7 with durable AOF; see [`crate::stores`]).
    pub hot: String,
    /// Outbox: `sqlite` (default: beside a SQLite hot store in `hot.db`; with a Redis hot store
    /// its own file `<data_dir>/chat/outbox.db`) or `kafka://host:port/topic`.
    pub outbox: String,
    /// How long a node's lease on a hot store shard lasts without renewal (default 10 s): each
    /// trimmer and recovery pass renews it, and a node that dies loses its shards to another
    /// after this long. Keep it several `trim_interval`s long.
    #[serde(with = "humantime_serde")]
    pub shard_lease: Duration,
    /// Partitions of a Kafka-protocol outbox's topic (default 1), fixed when the topic is
    /// created: a conversation's records go to one partition, and each partition has its own
    /// archiver position and watermark (DESIGN.md "Many nodes"). The embedded outbox has one.
    pub outbox_partitions: u32,
    /// Archive: `sqlite` (default: `<data_dir>/chat/archive.db`) or
    /// `mysql://user[:password]@host[:port]/database` (MariaDB / MySQL).
    pub archive: String,
    /// Connections to a Redis hot store (default 8): commits on different connections share
    /// one fsync (DESIGN.md "Durability").
    pub redis_pool: usize,
    /// Connections to a MariaDB / MySQL archive (default 8).
    pub mysql_pool: u32,
    /// Most live streams (`GET /v1/users/{user}/stream`) one user may hold open on a node
    /// (default 8); past it a new one is refused with 429.
    pub stream_max_per_user: usize,
    /// Most live streams open on a node (default 3,072); past it a new one is refused with
    /// 503. Each also holds one of the node's `max_connections` (4,096 by default): the server
    /// keeps this at most three quarters of those, so that streams cannot take every
    /// connection.
    pub stream_max_connections: usize,
    /// A stream whose client has not taken its buffered events (64) for this long is closed
    /// (default 10 s); the client resumes from the last event it got. Commits never wait.
    #[serde(with = "humantime_serde")]
    pub stream_lag_timeout: Duration,
}

impl Default for ChatConfig {
    fn default() -> Self {
        Self {
            mode: ChatMode::Tiered,
            hot_window: Duration::from_secs(7 * 24 * 3600),
            outbox_recovery_window: Duration::from_secs(30),
            safety_margin: Duration::from_secs(10),
            dedup_window: Duration::from_secs(24 * 3600),
            dedup_memory_keys: DEFAULT_DEDUP_MEMORY_KEYS,
            archive_batch_max: 500,
            commit_batch_max: 512,
            max_body_bytes: 64 * 1024,
            page_bytes_max: DEFAULT_PAGE_BYTES_MAX,
            trim_batch: 1000,
            trim_interval: Duration::from_secs(1),
            archive_idle: Duration::from_millis(250),
            outbox_retention: Duration::from_secs(24 * 3600),
            hot: "sqlite".into(),
            outbox: "sqlite".into(),
            archive: "sqlite".into(),
            redis_pool: crate::redis::DEFAULT_POOL,
            outbox_partitions: 1,
            shard_lease: DEFAULT_SHARD_LEASE,
            mysql_pool: 8,
            stream_max_per_user: 8,
            stream_max_connections: 3_072,
            stream_lag_timeout: Duration::from_secs(10),
        }
    }
}

impl ChatConfig {
    /// Checks the values no deployment can mean, so that the server refuses to start with the
    /// key named instead of running otherwise than configured: a count of 0
    /// (`archive_batch_max`, `commit_batch_max`, `trim_batch`, `redis_pool`, `mysql_pool`,
    /// `outbox_partitions`, `page_bytes_max`: each would silently run as 1; `max_body_bytes`:
    /// every SEND would be refused), and a `dedup_window`, `archive_idle`, `trim_interval` or
    /// `shard_lease` under 1 ms (the stores count in ms: a retried SEND would commit twice,
    /// against the API's idempotent retry, a worker would poll flat out while idle, or a lease
    /// would be gone before its first step). `hot_window` may be 0: messages then leave the hot
    /// tier as soon as the trim rule lets them ([`crate::trimmer`]); the store keeps the
    /// smallest window ever recorded, so a larger window set later trims later by the
    /// difference until the store's floor is reset. Returns the first problem, as a sentence.
    pub fn validate(&self) -> Result<(), String> {
        let counts = [
            ("archive_batch_max", self.archive_batch_max),
            ("commit_batch_max", self.commit_batch_max),
            ("trim_batch", self.trim_batch),
            ("redis_pool", self.redis_pool),
            ("mysql_pool", self.mysql_pool as usize),
            ("outbox_partitions", self.outbox_partitions as usize),
            ("max_body_bytes", self.max_body_bytes),
            ("page_bytes_max", self.page_bytes_max),
            ("stream_max_per_user", self.stream_max_per_user),
            ("stream_max_connections", self.stream_max_connections),
        ];
        if let Some((key, _)) = counts.iter().find(|(_, n)| *n == 0) {
            return Err(format!("chat.{key} must be at least 1"));
        }
        let durations = [
            ("dedup_window", self.dedup_window),
            ("archive_idle", self.archive_idle),
            ("trim_interval", self.trim_interval),
            ("shard_lease", self.shard_lease),
            ("stream_lag_timeout", self.stream_lag_timeout),
        ];
        if let Some((key, _)) = durations.iter().find(|(_, d)| d.as_millis() == 0) {
            return Err(format!("chat.{key} must be at least 1ms"));
        }
        Ok(())
    }

    /// The chat store keys that name the embedded SQLite store (DESIGN.md "Many nodes": the
    /// nodes of a multi-node deployment share every store, and a SQLite file is one node's):
    /// `chat.hot`, and `chat.outbox` and `chat.archive` unless `mode` is `hot-only` (which uses
    /// neither), each with the shared engine's URL form to set instead. Empty when every store
    /// chat uses is a shared engine.
    pub fn embedded_store_keys(&self) -> Vec<EmbeddedStoreKey> {
        let mut keys = Vec::new();
        if is_embedded(&self.hot) {
            keys.push(EmbeddedStoreKey {
                key: "chat.hot",
                shared: "redis://host:port",
            });
        }
        if self.mode != ChatMode::HotOnly {
            if is_embedded(&self.outbox) {
                keys.push(EmbeddedStoreKey {
                    key: "chat.outbox",
                    shared: "kafka://host:port/topic",
                });
            }
            if is_embedded(&self.archive) {
                keys.push(EmbeddedStoreKey {
                    key: "chat.archive",
                    shared: "mysql://user:password@host:port/database",
                });
            }
        }
        keys
    }

    /// The commit-path knobs in ms.
    pub fn commit_params(&self) -> crate::ports::CommitParams {
        crate::ports::CommitParams {
            dedup_window_ms: self.dedup_window.as_millis() as i64,
            hot_window_ms: self.hot_window.as_millis() as i64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid() {
        assert_eq!(ChatConfig::default().validate(), Ok(()));
    }

    #[test]
    fn a_zero_count_or_interval_names_its_key() {
        let zeroed = |edit: fn(&mut ChatConfig)| {
            let mut cfg = ChatConfig::default();
            edit(&mut cfg);
            cfg.validate()
        };
        let at_least_one = |key: &str| Err(format!("chat.{key} must be at least 1"));
        let positive = |key: &str| Err(format!("chat.{key} must be at least 1ms"));
        assert_eq!(
            zeroed(|c| c.archive_batch_max = 0),
            at_least_one("archive_batch_max")
        );
        assert_eq!(
            zeroed(|c| c.commit_batch_max = 0),
            at_least_one("commit_batch_max")
        );
        assert_eq!(zeroed(|c| c.trim_batch = 0), at_least_one("trim_batch"));
        assert_eq!(zeroed(|c| c.redis_pool = 0), at_least_one("redis_pool"));
        assert_eq!(zeroed(|c| c.mysql_pool = 0), at_least_one("mysql_pool"));
        assert_eq!(
            zeroed(|c| c.max_body_bytes = 0),
            at_least_one("max_body_bytes")
        );
        assert_eq!(
            zeroed(|c| c.page_bytes_max = 0),
            at_least_one("page_bytes_max")
        );
        assert_eq!(
            zeroed(|c| c.dedup_window = Duration::ZERO),
            positive("dedup_window")
        );
        assert_eq!(
            zeroed(|c| c.archive_idle = Duration::ZERO),
            positive("archive_idle")
        );
        assert_eq!(
            zeroed(|c| c.trim_interval = Duration::ZERO),
            positive("trim_interval")
        );
        // The stores count in ms: under 1 ms is 0 to them.
        assert_eq!(
            zeroed(|c| c.dedup_window = Duration::from_micros(500)),
            positive("dedup_window")
        );
        assert_eq!(
            zeroed(|c| c.trim_interval = Duration::from_nanos(1)),
            positive("trim_interval")
        );
        let one_ms = ChatConfig {
            dedup_window: Duration::from_millis(1),
            archive_idle: Duration::from_millis(1),
            trim_interval: Duration::from_millis(1),
            ..ChatConfig::default()
        };
        assert_eq!(one_ms.validate(), Ok(()));
    }

    #[test]
    fn embedded_store_keys_name_each_sqlite_port_the_mode_uses() {
        let keys = |cfg: &ChatConfig| -> Vec<&str> {
            cfg.embedded_store_keys().iter().map(|k| k.key).collect()
        };
        let embedded = ChatConfig::default();
        assert_eq!(keys(&embedded), ["chat.hot", "chat.outbox", "chat.archive"]);
        let shared = ChatConfig {
            hot: "redis://127.0.0.1:6379".into(),
            outbox: "kafka://127.0.0.1:9092/tidemark.chat.outbox".into(),
            archive: "mysql://root@127.0.0.1:3306/tidemark".into(),
            ..ChatConfig::default()
        };
        assert!(shared.embedded_store_keys().is_empty());
        // An empty value is the embedded store too; a Redis hot store alone leaves the other two.
        let redis_only = ChatConfig {
            hot: "redis://127.0.0.1:6379".into(),
            outbox: String::new(),
            ..ChatConfig::default()
        };
        assert_eq!(keys(&redis_only), ["chat.outbox", "chat.archive"]);
        assert_eq!(
            redis_only.embedded_store_keys()[0].shared,
            "kafka://host:port/topic"
        );
        // hot-only uses neither outbox nor archive: only the hot store counts.
        let hot_only = ChatConfig {
            mode: ChatMode::HotOnly,
            ..redis_only.clone()
        };
        assert!(hot_only.embedded_store_keys().is_empty());
        let hot_only_embedded = ChatConfig {
            mode: ChatMode::HotOnly,
            ..ChatConfig::default()
        };
        assert_eq!(keys(&hot_only_embedded), ["chat.hot"]);
        for mode in [ChatMode::Tiered, ChatMode::SyncArchive] {
            let cfg = ChatConfig {
                mode,
                ..redis_only.clone()
            };
            assert_eq!(keys(&cfg), ["chat.outbox", "chat.archive"], "{mode:?}");
        }
    }

    #[test]
    fn a_zero_hot_window_is_allowed() {
        let cfg = ChatConfig {
            hot_window: Duration::ZERO,
            ..ChatConfig::default()
        };
        assert_eq!(cfg.validate(), Ok(()));
    }
}
