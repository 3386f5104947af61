use std::error::Error as _;

use rusqlite::ffi;

use super::classify::{io_kind, mysql_kind, mysql_message_kind, mysql_number_kind, sqlite_kind};
use super::*;
use crate::sqlite::{GroupWriter, ReadPool, open_rw, opening};

fn sqlite_failure(code: i32) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(ffi::Error::new(code), None)
}

#[test]
fn sqlite_result_codes_sort_into_kinds() {
    let cases = [
        (ffi::SQLITE_BUSY, ErrorKind::Unavailable),
        (ffi::SQLITE_LOCKED, ErrorKind::Unavailable),
        (ffi::SQLITE_BUSY_SNAPSHOT, ErrorKind::Unavailable),
        (ffi::SQLITE_INTERRUPT, ErrorKind::Unavailable),
        (ffi::SQLITE_ABORT, ErrorKind::Unavailable),
        (ffi::SQLITE_SCHEMA, ErrorKind::Unavailable),
        (ffi::SQLITE_NOMEM, ErrorKind::Unavailable),
        (ffi::SQLITE_PROTOCOL, ErrorKind::Unavailable),
        (ffi::SQLITE_IOERR, ErrorKind::Unavailable),
        (ffi::SQLITE_IOERR_FSYNC, ErrorKind::Unavailable),
        (ffi::SQLITE_FULL, ErrorKind::Full),
        (ffi::SQLITE_IOERR_SHMSIZE, ErrorKind::Full),
        (ffi::SQLITE_CORRUPT, ErrorKind::Corrupt),
        (ffi::SQLITE_CORRUPT_INDEX, ErrorKind::Corrupt),
        (ffi::SQLITE_NOTADB, ErrorKind::Corrupt),
        (ffi::SQLITE_CONSTRAINT_UNIQUE, ErrorKind::Conflict),
        (ffi::SQLITE_CONSTRAINT_PRIMARYKEY, ErrorKind::Conflict),
        (ffi::SQLITE_ERROR, ErrorKind::Rejected),
        (ffi::SQLITE_READONLY, ErrorKind::Rejected),
        (ffi::SQLITE_PERM, ErrorKind::Rejected),
        (ffi::SQLITE_CANTOPEN, ErrorKind::Rejected),
        (ffi::SQLITE_TOOBIG, ErrorKind::Rejected),
        (ffi::SQLITE_MISMATCH, ErrorKind::Rejected),
        (ffi::SQLITE_MISUSE, ErrorKind::Rejected),
    ];
    for (code, kind) in cases {
        let e = StoreError::from(sqlite_failure(code));
        assert_eq!(e.kind(), kind, "code {code}: {e}");
        assert_eq!(e.backend(), "sqlite");
        assert_eq!(
            e.is_retryable(),
            matches!(kind, ErrorKind::Unavailable | ErrorKind::Full),
            "code {code}"
        );
    }
    let undecodable = rusqlite::Error::FromSqlConversionFailure(
        0,
        rusqlite::types::Type::Blob,
        "bad checksum".into(),
    );
    assert_eq!(sqlite_kind(&undecodable), ErrorKind::Corrupt);
    assert_eq!(
        sqlite_kind(&rusqlite::Error::IntegralValueOutOfRange(0, -1)),
        ErrorKind::Corrupt
    );
    assert_eq!(
        sqlite_kind(&rusqlite::Error::InvalidColumnName("x".into())),
        ErrorKind::Rejected
    );
    assert_eq!(
        sqlite_kind(&rusqlite::Error::QueryReturnedNoRows),
        ErrorKind::Rejected
    );
}

#[test]
fn engine_failures_sort_by_their_cause() {
    let rolled_back = SqliteError::CommitFailed {
        reason: "rolled back: a job of the same group failed after writing".into(),
        source: None,
    };
    assert_eq!(StoreError::from(rolled_back).kind(), ErrorKind::Unavailable);
    let full = SqliteError::CommitFailed {
        reason: "database or disk is full".into(),
        source: Some(std::sync::Arc::new(sqlite_failure(ffi::SQLITE_FULL))),
    };
    let e = StoreError::from(full);
    assert_eq!(e.kind(), ErrorKind::Full);
    assert_eq!(
        e.to_string(),
        "sqlite: commit failed: database or disk is full"
    );
    // The chain: StoreError → SqliteError::CommitFailed → rusqlite's error with its code.
    let commit = e.source().unwrap();
    assert!(commit.downcast_ref::<SqliteError>().is_some(), "{commit:?}");
    // Shared by every job of the group, hence the `Arc`.
    let sqlite = commit.source().unwrap();
    let Some(rusqlite::Error::SqliteFailure(code, _)) = sqlite
        .downcast_ref::<std::sync::Arc<rusqlite::Error>>()
        .map(|e| &**e)
    else {
        panic!("{sqlite:?}");
    };
    assert_eq!(code.code, ffi::ErrorCode::DiskFull);
    assert_eq!(
        StoreError::from(SqliteError::WriterStopped).kind(),
        ErrorKind::Unavailable
    );
    assert_eq!(
        StoreError::from(SqliteError::Task("the write job panicked".into())).kind(),
        ErrorKind::Rejected
    );
    let orphan = StoreError::from(SqliteError::OrphanLog {
        wal: "/d/x.db-wal".into(),
        bytes: 8,
    });
    assert_eq!(orphan.kind(), ErrorKind::Corrupt);
    assert_eq!(orphan.path(), Some(Path::new("/d/x.db-wal")));
}

#[test]
fn mysql_error_numbers_sort_into_kinds() {
    let cases = [
        (1114, "HY000", ErrorKind::Full),
        (1021, "HY000", ErrorKind::Full),
        (1062, "23000", ErrorKind::Conflict),
        (1586, "23000", ErrorKind::Conflict),
        (1452, "23000", ErrorKind::Conflict),
        (1048, "23000", ErrorKind::Conflict),
        (1205, "HY000", ErrorKind::Unavailable),
        (1213, "40001", ErrorKind::Unavailable),
        (1040, "08004", ErrorKind::Unavailable),
        (1053, "08S01", ErrorKind::Unavailable),
        (1969, "70100", ErrorKind::Unavailable),
        (1194, "HY000", ErrorKind::Corrupt),
        (1034, "HY000", ErrorKind::Corrupt),
        (1712, "HY000", ErrorKind::Corrupt),
        (1064, "42000", ErrorKind::Rejected),
        (1146, "42S02", ErrorKind::Rejected),
        (1045, "28000", ErrorKind::Rejected),
        (9999, "08S01", ErrorKind::Unavailable),
        (9999, "40001", ErrorKind::Unavailable),
        (9999, "23000", ErrorKind::Conflict),
        (9999, "HY000", ErrorKind::Rejected),
    ];
    for (number, state, kind) in cases {
        assert_eq!(
            mysql_number_kind(number, Some(state)),
            kind,
            "{number} ({state})"
        );
    }
    let enospc = "Got error 28 \"No space left on device\" from storage engine InnoDB";
    assert_eq!(mysql_message_kind(1030, None, enospc), ErrorKind::Full);
    let write = "Error writing file './t/x.ibd' (errno: 28 \"No space left on device\")";
    assert_eq!(mysql_message_kind(3, None, write), ErrorKind::Full);
    assert_eq!(
        mysql_message_kind(1030, None, "Got error 5 from storage engine"),
        ErrorKind::Rejected
    );

    let kind = |e: sqlx::Error| mysql_kind(&e);
    assert_eq!(kind(sqlx::Error::PoolTimedOut), ErrorKind::Unavailable);
    assert_eq!(kind(sqlx::Error::PoolClosed), ErrorKind::Unavailable);
    let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
    assert_eq!(kind(sqlx::Error::Io(refused)), ErrorKind::Unavailable);
    assert_eq!(kind(sqlx::Error::RowNotFound), ErrorKind::Rejected);
    assert_eq!(
        kind(sqlx::Error::ColumnNotFound("x".into())),
        ErrorKind::Rejected
    );
    assert_eq!(
        kind(sqlx::Error::Decode("bad utf-8".into())),
        ErrorKind::Corrupt
    );
    let e = StoreError::from(sqlx::Error::PoolTimedOut);
    assert!(e.is_retryable());
    assert_eq!(e.backend(), "mysql");
    assert!(e.source().unwrap().downcast_ref::<sqlx::Error>().is_some());
}

#[test]
fn file_system_errors_sort_into_kinds() {
    // Linux's errno values: ENOSPC, EDQUOT, EIO, ENOENT, EACCES, EROFS.
    let (enospc, edquot, eio, enoent, eacces, erofs) = (28, 122, 5, 2, 13, 30);
    let os = std::io::Error::from_raw_os_error;
    assert_eq!(io_kind(&os(enospc)), ErrorKind::Full);
    assert_eq!(io_kind(&os(edquot)), ErrorKind::Full);
    assert_eq!(io_kind(&os(eio)), ErrorKind::Unavailable);
    assert_eq!(io_kind(&os(enoent)), ErrorKind::Rejected);
    assert_eq!(io_kind(&os(eacces)), ErrorKind::Rejected);
    assert_eq!(io_kind(&os(erofs)), ErrorKind::Rejected);
    let truncated = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
    assert_eq!(io_kind(&truncated), ErrorKind::Corrupt);
    #[derive(Debug, thiserror::Error)]
    #[error("wrapped")]
    struct Wrapper(#[source] std::io::Error);
    let wrapped = Wrapper(os(enospc));
    assert_eq!(
        super::classify::io_kind_in_chain(&wrapped),
        Some(ErrorKind::Full)
    );
    assert_eq!(
        super::classify::io_kind_in_chain(&StoreError::rejected("x", "no io here")),
        None
    );
    let e = StoreError::file(Path::new("/d/links/id.key"), os(enospc));
    assert_eq!(e.kind(), ErrorKind::Full);
    assert!(
        e.to_string()
            .starts_with("file /d/links/id.key: No space left on device"),
        "{e}"
    );
}

#[test]
fn messages_name_the_engine_what_was_done_and_the_file() {
    let e = StoreError::unavailable("kafka", "broker down").with_context("produce");
    assert_eq!(e.to_string(), "kafka: produce: broker down");
    let malformed = rusqlite::Error::SqliteFailure(
        ffi::Error::new(ffi::SQLITE_CORRUPT),
        Some("database disk image is malformed".into()),
    );
    let e = StoreError::from(malformed)
        .in_file(Path::new("/d/a.db"))
        .in_file(Path::new("/d/b.db"));
    assert_eq!(e.path(), Some(Path::new("/d/a.db")), "the first name stays");
    assert_eq!(
        e.to_string(),
        "sqlite /d/a.db: database disk image is malformed"
    );
}

/// `PRAGMA max_page_count` makes SQLite answer `SQLITE_FULL` as on a full disk: the job's
/// error is `Full`, retryable, names the file, and keeps SQLite's error as its source.
#[tokio::test]
async fn a_full_database_is_full_and_names_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("full.db");
    let conn = open_rw(&path).unwrap();
    conn.execute_batch("CREATE TABLE t (v BLOB)").unwrap();
    let pages: i64 = conn
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .unwrap();
    conn.pragma_update(None, "max_page_count", pages + 4)
        .unwrap();
    let writer = GroupWriter::start("full", conn, 8);
    let err = writer
        .write(|conn| {
            for _ in 0..64 {
                conn.execute("INSERT INTO t VALUES (zeroblob(4096))", [])?;
            }
            Ok::<_, StoreError>(())
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Full, "{err}");
    assert!(err.is_retryable());
    assert_eq!(err.path(), Some(path.as_path()));
    assert_eq!(
        err.to_string(),
        format!("sqlite {}: database or disk is full", path.display())
    );
    let Some(rusqlite::Error::SqliteFailure(code, _)) = err
        .source()
        .and_then(|s| s.downcast_ref::<rusqlite::Error>())
    else {
        panic!("{:?}", err.source());
    };
    assert_eq!(code.code, ffi::ErrorCode::DiskFull);
    // A smaller write still fits: the writer goes on.
    writer
        .write(|conn| {
            Ok::<_, StoreError>(conn.execute("INSERT INTO t VALUES (x'00')", []).map(drop)?)
        })
        .await
        .unwrap();
}

/// A file damaged after it was opened: reads fail `Corrupt`, naming the file.
#[tokio::test]
async fn a_corrupt_file_is_corrupt_and_names_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("damaged.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "PRAGMA page_size = 4096; CREATE TABLE t (v TEXT);
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
             INSERT INTO t SELECT printf('%0200d', i) FROM n;",
        )
        .unwrap();
    }
    let reads = ReadPool::open(&path, 1).unwrap();
    // Every page but the first (the header and the schema) overwritten with garbage.
    let mut bytes = std::fs::read(&path).unwrap();
    for b in &mut bytes[4096..] {
        *b = 0xA5;
    }
    std::fs::write(&path, &bytes).unwrap();
    let err = reads
        .read(|conn| {
            Ok::<i64, StoreError>(conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0))?)
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    assert!(!err.is_retryable());
    assert_eq!(err.path(), Some(path.as_path()));
    assert_eq!(
        err.to_string(),
        format!(
            "sqlite {}: database disk image is malformed",
            path.display()
        )
    );
}

/// A file that is no database at all, at open: `Corrupt`, naming the file.
#[test]
fn a_file_that_is_not_a_database_is_corrupt_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garbage.db");
    std::fs::write(&path, vec![b'x'; 8192]).unwrap();
    let err = StoreError::from(
        opening(&path, || {
            let conn = open_rw(&path)?;
            conn.execute_batch("CREATE TABLE IF NOT EXISTS t (v)")?;
            Ok(conn)
        })
        .unwrap_err(),
    );
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    assert_eq!(err.path(), Some(path.as_path()));
    assert_eq!(
        err.to_string(),
        format!("sqlite: opening {}: file is not a database", path.display())
    );
}

/// The real server's answers: a duplicate is a conflict, a MEMORY table past
/// `max_heap_table_size` is full (`ER_RECORD_FILE_FULL`), bad SQL is rejected.
#[tokio::test]
async fn mariadb_errors_sort_into_kinds_on_the_real_server() {
    let url = crate::mysql::scratch_database(&crate::mysql::test_server_url(), "tm_core_kinds")
        .await
        .unwrap();
    let pool = crate::mysql::connect(&url, 1).await.unwrap();
    let run = |sql: &'static str| {
        let pool = pool.clone();
        async move { sqlx::query(sql).execute(&pool).await.map(drop) }
    };
    run("CREATE TABLE k (id INT PRIMARY KEY)").await.unwrap();
    run("INSERT INTO k VALUES (1)").await.unwrap();
    let dup = StoreError::from(run("INSERT INTO k VALUES (1)").await.unwrap_err());
    assert_eq!(dup.kind(), ErrorKind::Conflict, "{dup}");
    let bad = StoreError::from(run("SELEC 1").await.unwrap_err());
    assert_eq!(bad.kind(), ErrorKind::Rejected, "{bad}");
    run("SET SESSION max_heap_table_size = 16384")
        .await
        .unwrap();
    run("CREATE TABLE m (v CHAR(255)) ENGINE = MEMORY")
        .await
        .unwrap();
    let mut full = None;
    for _ in 0..10_000 {
        if let Err(e) = run("INSERT INTO m VALUES (REPEAT('x', 255))").await {
            full = Some(StoreError::from(e));
            break;
        }
    }
    let full = full.expect("the MEMORY table never filled");
    assert_eq!(full.kind(), ErrorKind::Full, "{full}");
    assert!(full.is_retryable());
    assert!(full.to_string().contains("is full"), "{full}");
    pool.close().await;
    crate::mysql::drop_database(&url).await.unwrap();
}
