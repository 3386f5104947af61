//! Which engine each chat port runs on, chosen by URL (`chat.hot`, `chat.outbox`,
//! `chat.archive`; DESIGN.md "Backends"). `sqlite` everywhere is the embedded default
//! ([`ChatStores::open_embedded`]).
//!
//! | hot | outbox | commit path |
//! |---|---|---|
//! | `sqlite` | `sqlite` | fused: one SQLite transaction in `hot.db` (hot tier + outbox table) |
//! | `redis://…` | `sqlite` | staged: reserve in Redis → append to `<data_dir>/chat/outbox.db` → mark committed |
//! | `redis://…` | `kafka://…` | staged: reserve in Redis → produce to the topic → mark committed |
//! | `sqlite` | `kafka://…` | staged over `hot.db` as hot store and the topic as outbox |
//!
//! In `hot-only` mode there is no outbox and nothing is archived: SQLite commits in one
//! transaction, Redis in one `reserve_and_record.lua` call that writes the record COMMITTED (see
//! [`crate::redis`]). Either leaves that history untracked, and a later tiered server backfills
//! it into the outbox before it can be trimmed (`recovery::backfill_untracked`). An archive an
//! earlier tiered run filled is still read there ([`sqlite_archive`]).
//!
//! A Redis hot store without a Kafka URL gets a SQLite outbox file of its own: it is durable
//! (fsync per group commit) and keeps the archiver's position beside the log, so a single
//! machine needs no broker; it is not shared between machines, so a multi-node deployment names
//! a `kafka://` outbox.

use std::path::Path;
use std::sync::Arc;

use crate::commit::CommitPath;
use crate::config::{ChatConfig, ChatMode};
use crate::error::{ChatError, Result};
use crate::kafka::KafkaOutbox;
use crate::mysql::MysqlArchive;
use crate::ports::{Archive, HotStore, Outbox};
use crate::redis::RedisHot;
use crate::service::ChatStores;
use crate::sqlite::{SqliteArchive, SqliteHot};
use tidemark_core::store::StoreError;

/// A port's engine as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Engine {
    /// The embedded SQLite file.
    Sqlite,
    /// `redis://`, `rediss://` or `redis+cluster://` (a Redis Cluster).
    Redis(String),
    /// `kafka://host:port/topic`.
    Kafka(String),
    /// `mysql://` or `mariadb://`.
    Mysql(String),
}

impl Engine {
    /// Parses the value of setting `what`; `allowed` lists the URL schemes this port accepts
    /// besides `sqlite`. Errors: [`ChatError::Invalid`] naming the setting and the value.
    pub fn parse(what: &str, value: &str, allowed: &[&str]) -> Result<Self> {
        let v = value.trim();
        if tidemark_core::engine::is_embedded(v) {
            return Ok(Engine::Sqlite);
        }
        let scheme = v.split_once("://").map(|(s, _)| s).unwrap_or_default();
        if !allowed.contains(&scheme) {
            return Err(ChatError::Invalid(format!(
                "{what} = {v:?}: expected \"sqlite\" or a URL with scheme {}",
                allowed.join("://, ") + "://"
            )));
        }
        Ok(match scheme {
            "redis" | "rediss" | "redis+cluster" => Engine::Redis(v.to_owned()),
            "kafka" => Engine::Kafka(v.to_owned()),
            _ => Engine::Mysql(v.to_owned()),
        })
    }
}

impl ChatStores {
    /// Opens the stores `cfg` names (see the module docs); all `sqlite` is
    /// [`ChatStores::open_embedded`] under `dir`. Errors: a bad or unsupported URL or mode
    /// combination ([`ChatError::Invalid`]), a server down ([`ChatError::Store`]), a
    /// Redis that is not durable ([`ChatError::NotDurable`]), an archive missing or not the
    /// one the hot tier's history is in ([`check_archive`]).
    pub async fn open(dir: &Path, cfg: &ChatConfig) -> Result<Self> {
        let chat_dir = dir.join("chat");
        let archive_at = match Engine::parse("chat.archive", &cfg.archive, &["mysql", "mariadb"])? {
            Engine::Mysql(url) => tidemark_core::mysql::redact(&url),
            _ => chat_dir.join("archive.db").display().to_string(),
        };
        // The embedded files this start may create: those not there yet.
        let made_here: Vec<_> = ["hot.db", "outbox.db", "archive.db"]
            .into_iter()
            .map(|name| chat_dir.join(name))
            .filter(|path| !path.exists())
            .collect();
        let stores = Self::open_unchecked(dir, cfg).await?;
        let checked = check_archive(
            stores.hot.as_ref(),
            stores.outbox.as_deref(),
            stores.archive.as_deref(),
            &archive_at,
        )
        .await;
        if let Err(e) = checked {
            drop(stores);
            // A refused start leaves no new, empty file behind (an archive, or a hot tier
            // beside a newer archive), beside which the old one would have to be put back.
            for path in &made_here {
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
                }
            }
            return Err(e);
        }
        Ok(stores)
    }

    async fn open_unchecked(dir: &Path, cfg: &ChatConfig) -> Result<Self> {
        let hot = Engine::parse("chat.hot", &cfg.hot, &["redis", "rediss", "redis+cluster"])?;
        let outbox = Engine::parse("chat.outbox", &cfg.outbox, &["kafka"])?;
        let archive = Engine::parse("chat.archive", &cfg.archive, &["mysql", "mariadb"])?;
        if cfg.outbox_partitions > 1 && !matches!(outbox, Engine::Kafka(_)) {
            return Err(ChatError::Invalid(format!(
                "chat.outbox_partitions = {} needs a Kafka-protocol outbox (chat.outbox = \"kafka://host:port/topic\"): the embedded outbox has one partition",
                cfg.outbox_partitions
            )));
        }
        if (&hot, &outbox, &archive) == (&Engine::Sqlite, &Engine::Sqlite, &Engine::Sqlite) {
            return Self::open_embedded(dir, cfg);
        }
        let chat_dir = dir.join("chat");
        std::fs::create_dir_all(&chat_dir)
            .map_err(|e| StoreError::file(&chat_dir, e).with_context("creating"))?;
        let tiered = cfg.mode != ChatMode::HotOnly;
        let archive: Option<Arc<dyn Archive>> = match &archive {
            // Configured, so read in hot-only mode too (see `sqlite_archive`).
            Engine::Mysql(url) => Some(Arc::new(MysqlArchive::connect(url, cfg.mysql_pool).await?)),
            _ => sqlite_archive(&chat_dir, cfg)?,
        };
        match hot {
            Engine::Redis(url) => {
                let redis = Arc::new(RedisHot::connect(&url, cfg.redis_pool).await?);
                if !tiered {
                    // hot-only: Redis alone, one script per commit, no outbox; an earlier tiered
                    // run's archive is only read.
                    return Ok(Self {
                        commit_path: CommitPath::Fused {
                            store: Arc::clone(&redis) as _,
                            with_outbox: false,
                        },
                        hot: redis,
                        outbox: None,
                        archive,
                    });
                }
                let hot: Arc<dyn HotStore> = redis;
                let outbox: Arc<dyn Outbox> = match &outbox {
                    Engine::Kafka(url) => {
                        Arc::new(KafkaOutbox::connect(url, cfg.outbox_partitions).await?)
                    }
                    _ => Arc::new(SqliteHot::open(
                        &chat_dir.join("outbox.db"),
                        cfg.commit_batch_max,
                    )?),
                };
                Ok(Self {
                    commit_path: CommitPath::Staged {
                        hot: Arc::clone(&hot),
                        outbox: Arc::clone(&outbox),
                    },
                    hot,
                    outbox: Some(outbox),
                    archive,
                })
            }
            _ => {
                let sqlite = Arc::new(
                    SqliteHot::open(&chat_dir.join("hot.db"), cfg.commit_batch_max)?
                        .with_dedup_memory_keys(cfg.dedup_memory_keys),
                );
                let hot: Arc<dyn HotStore> = Arc::clone(&sqlite) as _;
                let (commit_path, outbox) = match (&outbox, tiered) {
                    (Engine::Kafka(url), true) => {
                        let outbox: Arc<dyn Outbox> =
                            Arc::new(KafkaOutbox::connect(url, cfg.outbox_partitions).await?);
                        (
                            CommitPath::Staged {
                                hot: Arc::clone(&hot),
                                outbox: Arc::clone(&outbox),
                            },
                            Some(outbox),
                        )
                    }
                    _ => (
                        CommitPath::Fused {
                            store: Arc::clone(&sqlite) as _,
                            with_outbox: tiered,
                        },
                        tiered.then(|| Arc::clone(&sqlite) as Arc<dyn Outbox>),
                    ),
                };
                Ok(Self {
                    hot,
                    outbox,
                    archive,
                    commit_path,
                })
            }
        }
    }
}

/// Startup rule: the archive is the one the hot tier's history is archived into. The first
/// time they meet, the hot tier records the archive's [`Archive::identity`]; from then on a
/// missing archive (`hot-only` without its file) or another one (a new empty file after the old
/// was moved away, another database) is refused with [`ChatError::WrongArchive`]. Below each
/// conversation's floor F the history is only in that archive, and without this rule reads there
/// would answer 200 with holes while `/readyz` said ready. `archive_at` says where the archive
/// is looked for.
///
/// The other way round, with an outbox: an archive that holds an outbox partition through
/// offset `through` ([`Archive::archived_through`]) beside a partition whose `high` is below
/// it is refused too. With the embedded outbox (in `hot.db`) that is a hot tier put back from an
/// older copy, or deleted, beside the archive its later history went to: it would hand out the
/// same `conversation_seq`s again, and a retry of an acknowledged message would commit anew
/// (DESIGN.md part A: seqs are never reused).
///
/// # Errors
/// [`ChatError::WrongArchive`], or a store's own.
pub async fn check_archive(
    hot: &dyn HotStore,
    outbox: Option<&dyn Outbox>,
    archive: Option<&dyn Archive>,
    archive_at: &str,
) -> Result<()> {
    if let (Some(outbox), Some(archive)) = (outbox, archive) {
        for p in 0..outbox.partitions() {
            let Some(through) = archive.archived_through(p).await? else {
                continue;
            };
            let (_, high) = outbox.offsets(p).await?;
            if high < through {
                return Err(ChatError::WrongArchive(format!(
                    "{archive_at} holds outbox partition {p} through offset {through}, but it ends at offset {high}: the hot tier (with its outbox) is older than the archive, restored from an older copy or new; put back the hot tier that wrote the archive"
                )));
            }
        }
    }
    let recorded = hot.archive_identity().await?;
    let found = match archive {
        Some(archive) => Some(archive.identity().await?),
        None => None,
    };
    match (recorded, found) {
        (None, Some(id)) => hot.record_archive_identity(id).await,
        (Some(r), Some(f)) if r != f => Err(ChatError::WrongArchive(format!(
            "the hot tier's history is archived in archive {r:016x}, but {archive_at} is archive {f:016x} (a new one, or another): put back the archive it was archived into"
        ))),
        (Some(r), None) => Err(ChatError::WrongArchive(format!(
            "the hot tier's history is archived in archive {r:016x}, but there is none at {archive_at}: put it back"
        ))),
        _ => Ok(()),
    }
}

/// The SQLite archive `<chat_dir>/archive.db` as `cfg.mode` uses it: opened (created if
/// missing) and written by the archiver in `tiered` and `sync-archive`; in `hot-only` nothing is
/// archived, but a file an earlier tiered run left is opened all the same, because that run's
/// trimmer moved the history below each conversation's floor F there, and reads below F and
/// unread counts need it (it is also purged of expired ephemerals); without it, a tiered data
/// dir restarted `hot-only` would answer every read below a floor with 500 `corrupt_history`
/// while `/readyz` said ready. `None` in `hot-only` without the file.
pub(crate) fn sqlite_archive(
    chat_dir: &Path,
    cfg: &ChatConfig,
) -> Result<Option<Arc<dyn Archive>>> {
    let path = chat_dir.join("archive.db");
    if cfg.mode == ChatMode::HotOnly && !path.exists() {
        return Ok(None);
    }
    let archive = SqliteArchive::open_with_priority(&path, cfg.mode.archive_priority())?;
    Ok(Some(Arc::new(archive)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_pick_engines_and_bad_ones_name_the_setting() {
        assert_eq!(
            Engine::parse("chat.hot", "", &["redis"]).unwrap(),
            Engine::Sqlite
        );
        assert_eq!(
            Engine::parse("chat.hot", "redis://127.0.0.1:6390", &["redis"]).unwrap(),
            Engine::Redis("redis://127.0.0.1:6390".into())
        );
        let err = Engine::parse("chat.archive", "postgres://x/y", &["mysql", "mariadb"])
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "chat.archive = \"postgres://x/y\": expected \"sqlite\" or a URL with scheme mysql://, mariadb://"
        );
    }
}
