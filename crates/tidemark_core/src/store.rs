//! One error type for every storage port, whatever engine is behind it.
//!
//! The ports (chat's hot store, outbox and archive, the link store, the raw tier, rollups, …)
//! run on SQLite (embedded default), MariaDB / MySQL, Redis, a Kafka-protocol broker and
//! InfluxDB. Their callers (request handlers, workers) need to know three things of a failure:
//! what it was (the engine's own error, kept as [`std::error::Error::source`]), where (the
//! engine, and the file for an embedded one), and what to do about it, which is its
//! [`ErrorKind`]:
//!
//! | kind | what happened | retry? | HTTP ([`crate::http`]) |
//! |---|---|---|---|
//! | [`ErrorKind::Unavailable`] | unreachable, timed out, busy or locked | yes | 503 `unavailable` |
//! | [`ErrorKind::Full`] | disk or quota full | yes, once space is back | 503 `storage_full` |
//! | [`ErrorKind::Corrupt`] | the stored data is damaged or unreadable | no | 500 `corrupt` |
//! | [`ErrorKind::Rejected`] | the engine refused the request as such | no | 500 `store_rejected` |
//! | [`ErrorKind::Conflict`] | a constraint or a duplicate | no | 409 `conflict` |
//!
//! Each engine's errors are sorted into kinds where its client is a dependency: SQLite
//! (`rusqlite`), MariaDB (`sqlx`) and the file system here ([`classify`]); Redis and Kafka in
//! `tidemark_chat`; InfluxDB's HTTP answers in `tidemark_events`.
//!
//! Background workers follow one rule with these kinds ([`crate::retry`]), and a
//! [`ErrorKind::Full`] store makes the node not ready ([`crate::health`]).

pub mod classify;

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use crate::mysql::MysqlError;
use crate::sqlite::SqliteError;

/// Any error, as the source of a store failure ([`std::error::Error::source`]).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What kind of failure a [`StoreError`] is: decides whether to retry and how to answer (see
/// the table in the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorKind {
    /// The engine could not be reached, timed out, or was busy or locked. Retryable.
    Unavailable,
    /// The disk or a quota is full: `SQLITE_FULL` (ENOSPC), MariaDB's "table is full" and
    /// disk-full errors, Redis's `OOM command not allowed`. Retryable once space is freed.
    Full,
    /// The stored data is damaged or cannot be decoded (`SQLITE_CORRUPT`, `SQLITE_NOTADB`, a
    /// crashed table, a value that does not decode). Not retryable.
    Corrupt,
    /// The engine refused the request as such (bad SQL, a type or size it does not take, no
    /// permission). Not retryable as it is.
    Rejected,
    /// A constraint or duplicate key the caller should see as a conflict. Not retryable.
    Conflict,
}

impl ErrorKind {
    /// Whether the same operation may succeed later: [`ErrorKind::Unavailable`] and
    /// [`ErrorKind::Full`].
    pub fn is_retryable(self) -> bool {
        matches!(self, ErrorKind::Unavailable | ErrorKind::Full)
    }

    /// A stable lower-case name: `unavailable`, `full`, `corrupt`, `rejected`, `conflict`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Full => "full",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::Rejected => "rejected",
            ErrorKind::Conflict => "conflict",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A storage engine failed; nothing of the failed operation was acknowledged.
///
/// Displays as `<backend>[: <context>][ <path>]: <source>`, e.g. `sqlite /data/chat/hot.db:
/// database or disk is full`, `sqlite: opening /data/links/links.db: file is not a database`,
/// `kafka: produce: Message production error: …`.
#[derive(Debug, thiserror::Error)]
#[error("{backend}{place}: {source}", place = self.place())]
pub struct StoreError {
    kind: ErrorKind,
    backend: &'static str,
    /// What was being done, when the source does not say (`opening`, `produce`).
    context: Option<Cow<'static, str>>,
    /// The file the engine was working on, for an embedded engine.
    path: Option<PathBuf>,
    /// The source's own message names the file already (a schema of a newer build): the
    /// message shows neither context nor path again.
    named_in_source: bool,
    source: BoxError,
}

/// The `[: <context>][ <path>]` part of a [`StoreError`]'s message.
struct Place<'a>(Option<&'a str>, Option<&'a Path>);

impl StoreError {
    fn place(&self) -> Place<'_> {
        if self.named_in_source {
            return Place(None, None);
        }
        Place(self.context.as_deref(), self.path.as_deref())
    }
}

impl std::fmt::Display for Place<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(context) = self.0 {
            write!(f, ": {context}")?;
        }
        if let Some(path) = self.1 {
            write!(f, " {}", path.display())?;
        }
        Ok(())
    }
}

impl StoreError {
    /// A failure of `kind` on `backend` (`"sqlite"`, `"mysql"`, `"redis"`, `"kafka"`,
    /// `"influxdb"`, `"file"`, …) with its cause; a `String` or `&str` is a cause too.
    pub fn new(kind: ErrorKind, backend: &'static str, source: impl Into<BoxError>) -> Self {
        Self {
            kind,
            backend,
            context: None,
            path: None,
            named_in_source: false,
            source: source.into(),
        }
    }

    /// [`ErrorKind::Unavailable`] on `backend`.
    pub fn unavailable(backend: &'static str, source: impl Into<BoxError>) -> Self {
        Self::new(ErrorKind::Unavailable, backend, source)
    }

    /// [`ErrorKind::Rejected`] on `backend`.
    pub fn rejected(backend: &'static str, source: impl Into<BoxError>) -> Self {
        Self::new(ErrorKind::Rejected, backend, source)
    }

    /// A file-system error on `path` (creating a data directory, writing a key file, an
    /// archive file), sorted by [`classify::io_kind`]: ENOSPC is [`ErrorKind::Full`].
    pub fn file(path: &Path, e: std::io::Error) -> Self {
        Self::new(classify::io_kind(&e), "file", e).in_file(path)
    }

    /// Says what was being done (`opening`, `produce`), unless something already did.
    #[must_use]
    pub fn with_context(mut self, context: impl Into<Cow<'static, str>>) -> Self {
        if self.context.is_none() {
            self.context = Some(context.into());
        }
        self
    }

    /// Names `path` as the file the failure happened on, unless one is named already.
    #[must_use]
    pub fn in_file(mut self, path: &Path) -> Self {
        self.name_file(path);
        self
    }

    /// [`StoreError::in_file`] in place.
    pub fn name_file(&mut self, path: &Path) {
        if self.path.is_none() && !path.as_os_str().is_empty() {
            self.path = Some(path.to_path_buf());
        }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The engine: `"sqlite"`, `"mysql"`, `"redis"`, `"kafka"`, `"influxdb"`, `"file"`, ….
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    /// The file the failure happened on, when the engine works on one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Whether trying the same operation again later may succeed ([`ErrorKind::is_retryable`]).
    pub fn is_retryable(&self) -> bool {
        self.kind.is_retryable()
    }
}

/// An error type that may hold a [`StoreError`]: a subsystem's own error (`ChatError::Store`,
/// `LinksError::Store`, …) or `StoreError` itself. Through it the SQLite writer and readers
/// name their file in the errors of their jobs, and workers and `/readyz` read the kind.
pub trait AsStoreError {
    /// The store failure inside, if this is one.
    fn as_store_error(&self) -> Option<&StoreError>;
    /// The same, to add to it (the file's name).
    fn as_store_error_mut(&mut self) -> Option<&mut StoreError>;

    /// The kind of the store failure inside, if this is one.
    fn store_kind(&self) -> Option<ErrorKind> {
        self.as_store_error().map(StoreError::kind)
    }
}

impl AsStoreError for StoreError {
    fn as_store_error(&self) -> Option<&StoreError> {
        Some(self)
    }
    fn as_store_error_mut(&mut self) -> Option<&mut StoreError> {
        Some(self)
    }
}

/// The engine's own error, before it is a store failure: holds none.
impl AsStoreError for SqliteError {
    fn as_store_error(&self) -> Option<&StoreError> {
        None
    }
    fn as_store_error_mut(&mut self) -> Option<&mut StoreError> {
        None
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::new(classify::sqlite_kind(&e), "sqlite", e)
    }
}

impl From<SqliteError> for StoreError {
    fn from(e: SqliteError) -> Self {
        match e {
            SqliteError::Sqlite(e) => e.into(),
            SqliteError::Open { path, reason } => StoreError::from(*reason)
                .with_context("opening")
                .in_file(Path::new(&path)),
            SqliteError::OrphanLog { ref wal, .. } => {
                let wal = PathBuf::from(wal);
                StoreError::new(ErrorKind::Corrupt, "sqlite", e).in_file(&wal)
            }
            SqliteError::SchemaTooNew { ref path, .. } => {
                let path = PathBuf::from(path);
                let mut e = StoreError::new(ErrorKind::Rejected, "sqlite", e).in_file(&path);
                e.named_in_source = true;
                e
            }
            e => StoreError::new(classify::sqlite_engine_kind(&e), "sqlite", e),
        }
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::new(classify::mysql_kind(&e), "mysql", e)
    }
}

impl From<MysqlError> for StoreError {
    fn from(e: MysqlError) -> Self {
        match e {
            MysqlError::Sqlx(e) => e.into(),
            e @ (MysqlError::BadUrl { .. } | MysqlError::SchemaTooNew { .. }) => {
                StoreError::rejected("mysql", e)
            }
            e @ MysqlError::SchemaLocked { .. } => StoreError::unavailable("mysql", e),
        }
    }
}

#[cfg(test)]
mod tests;
