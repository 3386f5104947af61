//! The wrapped page cache (`tidemark_core::sqlite::pcache`) in a real SQLite: installed first
//! thing, it skips the truncations that follow B-tree balance's swaps through the spare page,
//! still passes on the one that must drop the pages a rolled-back savepoint added past the
//! file's end, and a database written through it, with transactions that grow the file and are
//! rolled back, holds exactly what was committed. A binary of its own with one test, so that
//! `install` is the process's first use of SQLite and runs on no other thread's heels.
#![allow(unsafe_code)] // reading the page cache's memory through SQLite's C interface

use std::collections::BTreeSet;

use rusqlite::params;
use tidemark_core::sqlite::{open_rw_paged, pcache};

/// xorshift64: a fixed sequence of pseudo-random keys.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Bytes of page cache `conn` holds (`SQLITE_DBSTATUS_CACHE_USED`).
fn cache_used(conn: &rusqlite::Connection) -> i64 {
    let (mut current, mut highest) = (0, 0);
    // SAFETY: the handle is valid while `conn` is; the call writes the two integers only.
    let rc = unsafe {
        rusqlite::ffi::sqlite3_db_status(
            conn.handle(),
            rusqlite::ffi::SQLITE_DBSTATUS_CACHE_USED,
            &mut current,
            &mut highest,
            0,
        )
    };
    assert_eq!(rc, rusqlite::ffi::SQLITE_OK);
    i64::from(current)
}

#[test]
fn the_wrapped_cache_skips_only_truncations_with_nothing_to_drop() {
    pcache::install().unwrap();
    assert!(pcache::installed());

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    // 1 KiB pages, as hot.db: the spare page is 1,048,577, far past this file's end.
    let conn = open_rw_paged(&path, 1024).unwrap();
    conn.execute_batch(
        "CREATE TABLE t (k INTEGER NOT NULL, v BLOB NOT NULL); CREATE INDEX t_k ON t (k);",
    )
    .unwrap();
    let saved_before = pcache::walks_saved();

    let mut rng = 0x9E37_79B9_7F4A_7C15_u64;
    let mut committed = BTreeSet::new();
    for txn in 0..400 {
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        let mut pending = Vec::new();
        for _ in 0..50 {
            let k = (next(&mut rng) % 1_000_000_000) as i64;
            conn.execute(
                "INSERT INTO t (k, v) VALUES (?1, zeroblob(200))",
                params![k],
            )
            .unwrap();
            pending.push(k);
        }
        // Every fifth transaction, which grew the file, is rolled back: its pages past the old
        // end must leave the cache (a skipped truncation there would serve them again).
        if txn % 5 == 4 {
            conn.execute_batch("ROLLBACK").unwrap();
        } else {
            conn.execute_batch("COMMIT").unwrap();
            committed.extend(pending);
        }
    }

    // A savepoint rolled back after it grew the file by ~1,000 pages: in WAL mode its pages past
    // the old end stay cached until the truncation at the commit's end, which must be passed on.
    let before = cache_used(&conn);
    conn.execute_batch("BEGIN IMMEDIATE; SAVEPOINT grow")
        .unwrap();
    for _ in 0..1000 {
        conn.execute("INSERT INTO t (k, v) VALUES (-1, zeroblob(900))", [])
            .unwrap();
    }
    conn.execute_batch("ROLLBACK TO grow; RELEASE grow")
        .unwrap();
    let rolled_back = cache_used(&conn);
    conn.execute_batch("COMMIT").unwrap();
    let committed_end = cache_used(&conn);
    assert!(rolled_back > before + 1_000_000, "{before} → {rolled_back}");
    assert!(
        committed_end < before + 100_000,
        "{before} → {rolled_back} → {committed_end}"
    );

    // A rolled-back transaction that grew the file by ~1,000 pages leaves none of them cached
    // (SQLite drops them page by page through the wrapper, then truncates).
    let before = cache_used(&conn);
    conn.execute_batch("BEGIN IMMEDIATE").unwrap();
    for _ in 0..1000 {
        conn.execute("INSERT INTO t (k, v) VALUES (-1, zeroblob(900))", [])
            .unwrap();
    }
    let grown = cache_used(&conn);
    conn.execute_batch("ROLLBACK").unwrap();
    let after = cache_used(&conn);
    assert!(grown > before + 1_000_000, "{before} → {grown}");
    assert!(after < before + 100_000, "{before} → {grown} → {after}");

    let saved = pcache::walks_saved() - saved_before;
    assert!(
        saved > 100,
        "commits after balance swaps skipped their walk of the cache: {saved} of 320"
    );
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    // Read back through the writer and through a fresh connection (no cache of its own yet).
    for reader in [&conn, &rusqlite::Connection::open(&path).unwrap()] {
        let keys: BTreeSet<i64> = reader
            .prepare("SELECT k FROM t ORDER BY k")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(keys, committed);
    }
}
