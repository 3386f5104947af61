//! Which [`ErrorKind`] each engine error is: SQLite by its result code, MariaDB / MySQL by its
//! error number and SQLSTATE, the file system by its `io::ErrorKind`. Only public API is read
//! (`rusqlite::Error::SqliteFailure(e, _)` → `e.code`, `e.extended_code`; sqlx's
//! `MySqlDatabaseError::number`).

use rusqlite::ffi;
use sqlx::mysql::MySqlDatabaseError;

use super::ErrorKind;
use crate::sqlite::SqliteError;

/// The kind of a SQLite error.
///
/// `SQLITE_FULL` is [`ErrorKind::Full`] (SQLite's unix VFS answers it for ENOSPC), and so is an
/// `SQLITE_IOERR_SHMSIZE`: the `-shm` file could not grow, which on a full disk is how the
/// first write of a fresh WAL fails. Busy, locked, interrupted, aborted (a rolled-back group),
/// a changed schema and an out-of-memory are [`ErrorKind::Unavailable`], and so are other I/O
/// errors, which a serious product retries rather than treating as damage;
/// `SQLITE_CORRUPT` / `SQLITE_NOTADB` and values that do not decode as the column's type are
/// [`ErrorKind::Corrupt`]; constraints are [`ErrorKind::Conflict`]; the rest (misuse, bad SQL,
/// read-only or unopenable files, permissions) [`ErrorKind::Rejected`].
pub fn sqlite_kind(e: &rusqlite::Error) -> ErrorKind {
    use rusqlite::Error as E;
    match e {
        E::SqliteFailure(e, _) => sqlite_code_kind(e),
        E::FromSqlConversionFailure(..)
        | E::IntegralValueOutOfRange(..)
        | E::Utf8Error(_)
        | E::InvalidColumnType(..) => ErrorKind::Corrupt,
        _ => ErrorKind::Rejected,
    }
}

/// The kind of a SQLite result code ([`sqlite_kind`]).
pub fn sqlite_code_kind(e: &ffi::Error) -> ErrorKind {
    use ffi::ErrorCode as C;
    match e.code {
        C::DiskFull => ErrorKind::Full,
        C::SystemIoFailure if e.extended_code == ffi::SQLITE_IOERR_SHMSIZE => ErrorKind::Full,
        C::DatabaseBusy
        | C::DatabaseLocked
        | C::OperationInterrupted
        | C::OperationAborted
        | C::SchemaChanged
        | C::OutOfMemory
        | C::FileLockingProtocolFailed
        | C::SystemIoFailure => ErrorKind::Unavailable,
        C::DatabaseCorrupt | C::NotADatabase => ErrorKind::Corrupt,
        C::ConstraintViolation => ErrorKind::Conflict,
        _ => ErrorKind::Rejected,
    }
}

/// The kind of an error of the embedded engine's own machinery (not SQLite's result codes,
/// which [`sqlite_kind`] sorts): a group that did not commit is the kind of SQLite's error if
/// the COMMIT had one, [`ErrorKind::Unavailable`] otherwise (a neighbour's failure rolled it
/// back: retrying alone commits); a stopped writer or an exhausted read pool is
/// [`ErrorKind::Unavailable`]; a job that panicked is [`ErrorKind::Rejected`] (the same job
/// panics again), and so is a file of a newer build's schema.
pub fn sqlite_engine_kind(e: &SqliteError) -> ErrorKind {
    match e {
        SqliteError::Sqlite(e) => sqlite_kind(e),
        SqliteError::CommitFailed {
            source: Some(e), ..
        } => sqlite_kind(e),
        SqliteError::CommitFailed { source: None, .. }
        | SqliteError::WriterStopped
        | SqliteError::Pool(_) => ErrorKind::Unavailable,
        SqliteError::OrphanLog { .. } => ErrorKind::Corrupt,
        SqliteError::SchemaTooNew { .. } => ErrorKind::Rejected,
        SqliteError::Open { reason, .. } => sqlite_engine_kind(reason),
        SqliteError::Task(_) => ErrorKind::Rejected,
    }
}

/// The kind of an sqlx error on MariaDB / MySQL: the server's own errors by number
/// ([`mysql_number_kind`]); no connection, a pool timeout or a dropped link
/// [`ErrorKind::Unavailable`]; a row that does not decode [`ErrorKind::Corrupt`]; the rest
/// (configuration, missing columns, bad arguments) [`ErrorKind::Rejected`].
pub fn mysql_kind(e: &sqlx::Error) -> ErrorKind {
    use sqlx::Error as E;
    match e {
        E::Database(db) => match db.try_downcast_ref::<MySqlDatabaseError>() {
            Some(my) => mysql_message_kind(my.number(), my.code(), my.message()),
            None => match db.kind() {
                sqlx::error::ErrorKind::Other => ErrorKind::Rejected,
                _ => ErrorKind::Conflict,
            },
        },
        E::Io(_)
        | E::Tls(_)
        | E::Protocol(_)
        | E::PoolTimedOut
        | E::PoolClosed
        | E::WorkerCrashed
        | E::BeginFailed => ErrorKind::Unavailable,
        E::ColumnDecode { .. } | E::Decode(_) => ErrorKind::Corrupt,
        _ => ErrorKind::Rejected,
    }
}

/// The kind of a MariaDB / MySQL server error, by its error number (and SQLSTATE for classes
/// the numbers do not list):
/// - [`ErrorKind::Full`]: `ER_RECORD_FILE_FULL` (1114, "The table … is full") and
///   `ER_DISK_FULL` (1021); a write error that carries ENOSPC is sorted by
///   [`mysql_message_kind`];
/// - [`ErrorKind::Conflict`]: duplicates (1022, 1062, 1169, 1586, 1859), foreign keys
///   (1216, 1217, 1451, 1452), `NOT NULL` (1048) and check constraints (3819, 4025);
/// - [`ErrorKind::Unavailable`]: lock wait timeout (1205), deadlock (1213), too many
///   connections (1040), shutdown (1053, 1927), interrupted or timed-out statements (1317,
///   1969, 3024), out of resources (1041, 1037, 1038), and SQLSTATE classes `08`
///   (connection) and `40` (transaction rollback);
/// - [`ErrorKind::Corrupt`]: crashed or damaged tables and indexes (126, 127, 134, 144, 145,
///   1034, 1194, 1195, 1712);
/// - everything else (syntax, unknown table or column, access denied) [`ErrorKind::Rejected`].
pub fn mysql_number_kind(number: u16, sqlstate: Option<&str>) -> ErrorKind {
    match number {
        1021 | 1114 => ErrorKind::Full,
        1022 | 1062 | 1169 | 1586 | 1859 | 1216 | 1217 | 1451 | 1452 | 1048 | 3819 | 4025 => {
            ErrorKind::Conflict
        }
        1205 | 1213 | 1040 | 1053 | 1927 | 1317 | 1969 | 3024 | 1041 | 1037 | 1038 => {
            ErrorKind::Unavailable
        }
        126 | 127 | 134 | 144 | 145 | 1034 | 1194 | 1195 | 1712 => ErrorKind::Corrupt,
        _ => match sqlstate {
            Some(s) if s.starts_with("08") || s.starts_with("40") => ErrorKind::Unavailable,
            Some(s) if s.starts_with("23") => ErrorKind::Conflict,
            _ => ErrorKind::Rejected,
        },
    }
}

/// [`mysql_number_kind`], and a write the server could not make for want of space: error 3
/// (`ER_ERROR_ON_WRITE`) or 1030 (`ER_GET_ERRNO`) whose message carries errno 28 (ENOSPC) is
/// [`ErrorKind::Full`], as MariaDB reports a full disk under a storage engine that way.
pub fn mysql_message_kind(number: u16, sqlstate: Option<&str>, message: &str) -> ErrorKind {
    let enospc = message.contains("errno: 28")
        || message.contains("error 28 ")
        || message.contains("No space left");
    match number {
        3 | 1030 if enospc => ErrorKind::Full,
        _ => mysql_number_kind(number, sqlstate),
    }
}

/// The kind of the first file-system error in the source chain of `e` (`e` included), if
/// any: how a library that wraps the file system (`object_store`'s local store, a Parquet
/// writer) tells of a full disk.
pub fn io_kind_in_chain(e: &(dyn std::error::Error + 'static)) -> Option<ErrorKind> {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return Some(io_kind(io));
        }
        next = e.source();
    }
    None
}

/// The kind of a file-system error: ENOSPC / EDQUOT are [`ErrorKind::Full`]; unreadable data
/// (`InvalidData`, an unexpected end of file) [`ErrorKind::Corrupt`]; missing files, no
/// permission, a read-only file system and bad arguments [`ErrorKind::Rejected`]; the rest
/// (timeouts, interruptions, EIO) [`ErrorKind::Unavailable`].
pub fn io_kind(e: &std::io::Error) -> ErrorKind {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::StorageFull | K::QuotaExceeded | K::FileTooLarge => ErrorKind::Full,
        K::InvalidData | K::UnexpectedEof => ErrorKind::Corrupt,
        K::NotFound
        | K::PermissionDenied
        | K::ReadOnlyFilesystem
        | K::InvalidInput
        | K::InvalidFilename
        | K::AlreadyExists
        | K::IsADirectory
        | K::NotADirectory
        | K::DirectoryNotEmpty
        | K::Unsupported => ErrorKind::Rejected,
        _ => ErrorKind::Unavailable,
    }
}
