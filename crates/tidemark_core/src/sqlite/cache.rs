//! The page cache of a read-write connection, sized by the size of its file.
//!
//! SQLite's B-tree balance puts the pages it rebalances in page-number order, and when they are
//! out of order it renumbers them through a spare page number: the lock-byte page
//! (`PENDING_BYTE / page_size + 1`, page 262,145 of a file of 4 KiB pages), never a real page.
//! That raises the page cache's largest key, and the end of that transaction drops every cached
//! page past the file's end: while the file is smaller than the lock-byte page, this walks the
//! whole cache — every hash slot and every cached page (`pcache1TruncateUnsafe`, SQLite 3.50).
//! In a `perf` profile of the chat writer at 10,000 sends/s with a 64 MiB cache (about 10,000
//! pages in it at the time) that walk was a fifth of the writer thread's time, on nearly every
//! commit. It costs in proportion to the pages cached and the hash slots
//! (which SQLite grows with the cache and never shrinks), and never happens once the file is
//! past the lock byte (1 GiB). So a writer's cache is [`SMALL_FILE_CACHE_KIB`] while its file is
//! smaller than that and [`WRITER_CACHE_KIB`] from then on; the group writer looks again every
//! [`RESIZE_EVERY_GROUPS`] commits. (A file never shrinks back under 1 GiB here: nothing runs
//! `VACUUM`; if one did, its writer would keep the large hash table until reopened.)

use rusqlite::Connection;

/// Page cache of a read-write connection whose file is past the lock byte, KiB: with SQLite's
/// default of 2 MiB the chat writer re-read index pages and spilled dirty pages
/// mid-transaction (`pagerStress` in a perf profile at 8,000 sends/s).
pub const WRITER_CACHE_KIB: i64 = 64 * 1024;

/// Page cache of a read-write connection whose file is smaller than the lock byte, KiB (see
/// the module docs): about 1,950 pages of 4 KiB (SQLite counts its per-page overhead in), four
/// times SQLite's 2 MiB default. In `bench chat` at 10,000 sends/s it took the walk from 6.8 %
/// to 0.9 % of the server's CPU samples, and the server from 1.38–1.44 to 1.29–1.40 cores.
pub const SMALL_FILE_CACHE_KIB: i64 = 8 * 1024;

/// SQLite's lock byte (1 GiB): its page is the one B-tree balance renumbers through.
const PENDING_BYTE: i64 = 0x4000_0000;

/// How many group commits the writer runs between two looks at its file's size.
pub const RESIZE_EVERY_GROUPS: u64 = 1024;

/// The cache, KiB, of a writer of a file of `page_count` pages of `page_size` bytes:
/// [`SMALL_FILE_CACHE_KIB`] while the file ends before the lock-byte page (a commit after a
/// balance would walk a larger cache whole), [`WRITER_CACHE_KIB`] once it is past it.
pub fn writer_cache_kib(page_count: i64, page_size: i64) -> i64 {
    if page_count > PENDING_BYTE / page_size.max(512) {
        WRITER_CACHE_KIB
    } else {
        SMALL_FILE_CACHE_KIB
    }
}

/// Sets `conn`'s cache to [`writer_cache_kib`] of its main file's current size; returns the
/// size, KiB. Setting the size the cache already has evicts nothing.
///
/// # Errors
/// SQLite's, reading the file's size or setting the cache.
pub(super) fn size_writer_cache(conn: &Connection) -> rusqlite::Result<i64> {
    let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
    let page_size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    let kib = writer_cache_kib(pages, page_size);
    conn.pragma_update(None, "cache_size", -kib)?;
    Ok(kib)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_is_small_until_the_file_is_past_the_lock_byte() {
        // 4 KiB pages: the lock byte is in page 262,145; a file of 262,144 pages ends before it.
        assert_eq!(writer_cache_kib(1, 4096), SMALL_FILE_CACHE_KIB);
        assert_eq!(writer_cache_kib(262_144, 4096), SMALL_FILE_CACHE_KIB);
        assert_eq!(writer_cache_kib(262_145, 4096), WRITER_CACHE_KIB);
        // The same 1 GiB at other page sizes.
        assert_eq!(writer_cache_kib(131_072, 8192), SMALL_FILE_CACHE_KIB);
        assert_eq!(writer_cache_kib(131_073, 8192), WRITER_CACHE_KIB);
        assert_eq!(writer_cache_kib(16_385, 65_536), WRITER_CACHE_KIB);
    }

    #[test]
    fn a_small_file_gets_the_small_cache_and_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("t.db")).unwrap();
        conn.pragma_update(None, "cache_size", -WRITER_CACHE_KIB)
            .unwrap();
        conn.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
            .unwrap();
        assert_eq!(size_writer_cache(&conn).unwrap(), SMALL_FILE_CACHE_KIB);
        let cache: i64 = conn
            .query_row("PRAGMA cache_size", [], |r| r.get(0))
            .unwrap();
        assert_eq!(cache, -SMALL_FILE_CACHE_KIB);
        assert_eq!(size_writer_cache(&conn).unwrap(), SMALL_FILE_CACHE_KIB);
    }
}
