//! The bundled SQLite makes a commit durable with `fdatasync`, not `fsync` (`.cargo/config.toml`:
//! `-DHAVE_FDATASYNC=1`; without it SQLite's unix VFS calls `fsync` for every sync).
//!
//! How: this test binary defines `fsync` and `fdatasync` itself. The bundled SQLite is linked
//! statically into it, so its calls resolve to these definitions, which count the call and then
//! make the system call. Linux only (the system calls are issued by number); a binary of its own,
//! so that nothing else is counted.
#![cfg(target_os = "linux")]
#![allow(unsafe_code)] // the two C-ABI definitions below, and the raw system calls they make

use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};

static FSYNC_CALLS: AtomicUsize = AtomicUsize::new(0);
static FDATASYNC_CALLS: AtomicUsize = AtomicUsize::new(0);

/// `fsync(2)`, counted.
#[unsafe(no_mangle)]
pub extern "C" fn fsync(fd: c_int) -> c_int {
    FSYNC_CALLS.fetch_add(1, Ordering::SeqCst);
    // SAFETY: the fsync system call takes one descriptor and touches no memory of ours.
    unsafe { libc::syscall(libc::SYS_fsync, fd) as c_int }
}

/// `fdatasync(2)`, counted.
#[unsafe(no_mangle)]
pub extern "C" fn fdatasync(fd: c_int) -> c_int {
    FDATASYNC_CALLS.fetch_add(1, Ordering::SeqCst);
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_fdatasync, fd) as c_int }
}

#[test]
fn a_commit_is_made_durable_with_fdatasync_only() {
    let dir = tempfile::tempdir().unwrap();
    let conn = tidemark_core::sqlite::open_rw(&dir.path().join("t.db")).unwrap();
    conn.execute_batch("CREATE TABLE t (x INTEGER)").unwrap();

    let (fsyncs, fdatasyncs) = (
        FSYNC_CALLS.load(Ordering::SeqCst),
        FDATASYNC_CALLS.load(Ordering::SeqCst),
    );
    for x in 0..3 {
        conn.execute("INSERT INTO t (x) VALUES (?1)", [x]).unwrap();
    }

    // synchronous = FULL in WAL mode: at least one sync of the log per commit, each of them
    // an fdatasync.
    let fdatasyncs = FDATASYNC_CALLS.load(Ordering::SeqCst) - fdatasyncs;
    let fsyncs = FSYNC_CALLS.load(Ordering::SeqCst) - fsyncs;
    assert!(
        fdatasyncs >= 3,
        "{fdatasyncs} fdatasync calls for 3 commits"
    );
    assert_eq!(
        fsyncs, 0,
        "SQLite called fsync: built without HAVE_FDATASYNC?"
    );
}
