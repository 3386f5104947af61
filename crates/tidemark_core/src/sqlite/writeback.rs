//! How Tidemark's writers reach the disk: a SQLite VFS that wraps the default one (`unix`) and
//! passes every call through, with two changes.
//!
//! 1. Coalesced log appends, on every writer connection ([`COALESCED_VFS`] and [`PACED_VFS`]):
//!    a WAL file's contiguous writes are held in a [`LogBuffer`] and reach the kernel in one
//!    call per commit (see [`super::coalesce`]).
//! 2. Paced writeback, for the connections of background work ([`PACED_VFS`]), whose writes
//!    reach the disk in small steps instead of one burst at the next fsync.
//!
//! Why pacing: a buffered `write` only dirties the page cache; the pages go to the device when
//! the file is fsynced. A background writer that copies megabytes at once — a checkpoint copying
//! the log into the database file, the archive's commit of a batch — so puts megabytes in the
//! device's queue in one go, and every commit's fsync issued meanwhile waits behind them (issue
//! 2: `tiered` against `hot-only`, and the stalls at 10,000 sends/s, where the hot writer was
//! seen waiting in the block layer behind a checkpoint's fsync).
//!
//! How: after each [`WRITEBACK_CHUNK`] bytes written to one file a paced file waits until the
//! write-out it started last has reached the device, and starts the write-out of what was
//! written since (`sync_file_range(SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE)`), the
//! way RocksDB's `bytes_per_sync` smooths its flushes. So at most about one chunk of a
//! background writer's data is queued at the device at any time, and the writer goes at the
//! device's pace. The fsync SQLite issues at the end is unchanged and is what makes the data
//! durable: `sync_file_range` only starts and waits for write-out early, it promises nothing.
//!
//! Only connections nobody waits on to answer a request are paced (the checkpointers, and the
//! archive's writer in `tiered` mode): the commit path's writer uses [`COALESCED_VFS`], so its
//! commits are never held back.
//!
//! The file descriptor of an open file is read from the `unix` VFS's file object (its fourth
//! field, `h`, in the bundled SQLite 3.50) and checked at every open against the opened path
//! (the same device and inode); if the check fails, that file is written unpaced, exactly as by
//! `unix` (a test fails then: `a_paced_commit_and_checkpoint_write_everything_in_chunk_steps`).

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::OnceLock;

use rusqlite::ffi;

use super::coalesce::LogBuffer;

/// The name of the paced VFS, for [`rusqlite::Connection::open_with_flags_and_vfs`]; call
/// [`register`] first.
pub const PACED_VFS: &str = "tidemark-paced";
const PACED_VFS_NAME: &CStr = c"tidemark-paced";

/// The name of the VFS of writers someone waits on (log appends coalesced, not paced); call
/// [`register`] first.
pub const COALESCED_VFS: &str = "tidemark-coalesced";
const COALESCED_VFS_NAME: &CStr = c"tidemark-coalesced";

/// Bytes written to one file between two write-out steps (see the module docs): about the most
/// a paced writer has queued at the device at once. Issue 2, a side test on the 2-core test
/// machine (one process appending 16 KiB + `fdatasync` in a loop, another writing 6 MiB of
/// random 4 KiB pages every 250 ms): the appender's p99 0.37 ms alone, 2.2–2.6 ms beside the
/// bursts fsynced whole; paced, 1.1–1.5 ms at 256 KiB, 0.55–0.65 ms at 64 KiB, 0.36–0.52 ms
/// at 16 KiB, where the 6 MiB took 19, 28 and 51 ms to write (18 ms unpaced).
pub const WRITEBACK_CHUNK: u64 = 64 * 1024;

/// Registers [`PACED_VFS`] and [`COALESCED_VFS`] once per process (later calls return the first
/// outcome).
///
/// # Errors
/// A message when SQLite has no default VFS or refuses the registration.
pub(super) fn register() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED.get_or_init(register_once).clone()
}

/// A VFS as registered; it lives for the rest of the process (SQLite keeps the pointer).
struct WrappingVfs {
    vfs: ffi::sqlite3_vfs,
}

fn register_once() -> Result<(), String> {
    register_vfs(PACED_VFS_NAME, true)?;
    register_vfs(COALESCED_VFS_NAME, false)
}

/// Registers the VFS `name` over the default one; `pace`: its files are paced.
fn register_vfs(name: &'static CStr, pace: bool) -> Result<(), String> {
    // SAFETY: sqlite3_vfs_find(NULL) returns the default VFS, valid for the process.
    let base = unsafe { ffi::sqlite3_vfs_find(std::ptr::null()) };
    if base.is_null() {
        return Err("sqlite has no default vfs".into());
    }
    // SAFETY: `base` is a registered VFS; its fields are read only.
    let (base_name, base_size, max_path, base_version) = unsafe {
        (
            CStr::from_ptr((*base).zName),
            (*base).szOsFile,
            (*base).mxPathname,
            (*base).iVersion,
        )
    };
    let unix = base_name.to_bytes() == b"unix";
    let vfs = ffi::sqlite3_vfs {
        // Version 2 at most (no system-call overrides), and no more than the base has.
        iVersion: base_version.min(2),
        szOsFile: (std::mem::size_of::<WrappedFile>() as c_int) + base_size,
        mxPathname: max_path,
        pNext: std::ptr::null_mut(),
        zName: name.as_ptr(),
        pAppData: Box::into_raw(Box::new(Base {
            vfs: base,
            unix,
            pace,
        }))
        .cast(),
        xOpen: Some(x_open),
        xDelete: Some(x_delete),
        xAccess: Some(x_access),
        xFullPathname: Some(x_full_pathname),
        xDlOpen: Some(x_dl_open),
        xDlError: Some(x_dl_error),
        xDlSym: Some(x_dl_sym),
        xDlClose: Some(x_dl_close),
        xRandomness: Some(x_randomness),
        xSleep: Some(x_sleep),
        xCurrentTime: Some(x_current_time),
        xGetLastError: Some(x_get_last_error),
        xCurrentTimeInt64: if base_version >= 2 {
            Some(x_current_time_int64)
        } else {
            None
        },
        xSetSystemCall: None,
        xGetSystemCall: None,
        xNextSystemCall: None,
    };
    let registered: &'static mut WrappingVfs = Box::leak(Box::new(WrappingVfs { vfs }));
    // SAFETY: the VFS and everything it points to live for the rest of the process.
    let rc = unsafe { ffi::sqlite3_vfs_register(&mut registered.vfs, 0) };
    if rc == ffi::SQLITE_OK {
        Ok(())
    } else {
        Err(format!(
            "sqlite refused to register the vfs {name:?}: code {rc}"
        ))
    }
}

/// What one of our VFSes wraps, and how (its `pAppData`).
struct Base {
    vfs: *mut ffi::sqlite3_vfs,
    /// The base is SQLite's `unix` VFS, whose file objects hold their descriptor (see
    /// [`unix_fd`]); any other base is passed through unpaced.
    unix: bool,
    /// Its files are paced ([`PACED_VFS`]).
    pace: bool,
}

/// An open file of our VFSes: SQLite's `sqlite3_file` header first (our methods), then the
/// base VFS's own file object in the same allocation, right after this struct.
#[repr(C)]
struct WrappedFile {
    header: ffi::sqlite3_file,
    real: *mut ffi::sqlite3_file,
    /// A WAL file's buffered appends (see [`super::coalesce`]); `None` for other files, and
    /// for a WAL whose database file is not ours or that SQLite pads (see [`x_open`]).
    log: Option<LogBuffer>,
    /// A database file's open WAL file with a `log` (null if none): sent before the database
    /// file releases the WAL write lock (see [`x_shm_lock`]).
    wal: *mut WrappedFile,
    /// A WAL file's database file, while it points back here through `wal` (else null).
    db: *mut WrappedFile,
    /// The descriptor to start and wait for write-out on; -1: unpaced.
    fd: c_int,
    /// Bytes written since the last write-out step.
    unsynced: u64,
    /// The error a write-out step reported (an `errno`), if any: every later write and sync
    /// of this file fails until it is closed (see [`pace`]).
    failed: Option<c_int>,
}

/// The base VFS of `vfs` (one of ours).
unsafe fn base_of(vfs: *mut ffi::sqlite3_vfs) -> &'static Base {
    // SAFETY: pAppData of our VFSes is the leaked `Base`.
    unsafe { &*((*vfs).pAppData as *const Base) }
}

unsafe extern "C" fn x_open(
    vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    // SAFETY: SQLite hands us `szOsFile` bytes at `file`; the base's object goes after ours.
    unsafe {
        let base = base_of(vfs);
        let wrapped = file.cast::<WrappedFile>();
        let real = wrapped.add(1).cast::<ffi::sqlite3_file>();
        // The memory is uninitialised: each field is written without dropping what was there.
        std::ptr::addr_of_mut!((*wrapped).header.pMethods).write(std::ptr::null());
        std::ptr::addr_of_mut!((*wrapped).real).write(real);
        std::ptr::addr_of_mut!((*wrapped).log).write(None);
        std::ptr::addr_of_mut!((*wrapped).wal).write(std::ptr::null_mut());
        std::ptr::addr_of_mut!((*wrapped).db).write(std::ptr::null_mut());
        std::ptr::addr_of_mut!((*wrapped).fd).write(-1);
        std::ptr::addr_of_mut!((*wrapped).unsynced).write(0);
        std::ptr::addr_of_mut!((*wrapped).failed).write(None);
        (*real).pMethods = std::ptr::null();
        let Some(open) = (*base.vfs).xOpen else {
            return ffi::SQLITE_CANTOPEN;
        };
        let rc = open(base.vfs, name, real, flags, out_flags);
        if (*real).pMethods.is_null() {
            // Not open: SQLite calls no method of ours, not even xClose.
            return rc;
        }
        // Open (even if it failed, SQLite then closes it through us), with our methods of
        // the base's version: SQLite tells from them whether the file has shared memory (WAL)
        // and memory-mapped pages.
        (*wrapped).header.pMethods = match (*(*real).pMethods).iVersion {
            ..=1 => &IO_METHODS_V1,
            2 => &IO_METHODS_V2,
            _ => &IO_METHODS_V3,
        };
        if rc == ffi::SQLITE_OK && flags & ffi::SQLITE_OPEN_WAL != 0 && !name.is_null() {
            link_log(wrapped, name);
        }
        let durable = flags & (ffi::SQLITE_OPEN_MAIN_DB | ffi::SQLITE_OPEN_WAL) != 0;
        if rc == ffi::SQLITE_OK && base.pace && base.unix && durable && !name.is_null() {
            (*wrapped).fd = unix_fd(real, CStr::from_ptr(name));
        }
        rc
    }
}

/// Gives the just opened WAL file `wal` (opened as `name`) a log buffer, if
/// two things hold. Its database file is ours, so that the buffer is sent before that file
/// releases the WAL write lock (a transaction that spilled frames and rolled back leaves them
/// buffered, and another connection's commit may write the same offsets next: they must not
/// land over it). And SQLite does not pad its commits: without powersafe overwrite (`psow=0`)
/// it syncs the log at a sector boundary in the middle of the commit's last frame and writes
/// the rest after the sync, which a buffer would hold past the commit.
unsafe fn link_log(wal: *mut WrappedFile, name: *const c_char) {
    // SAFETY: `name` is the WAL name SQLite passed to xOpen, for which
    // sqlite3_database_file_object answers the database's open file object.
    unsafe {
        let db = ffi::sqlite3_database_file_object(name);
        if db.is_null() || !is_ours(db) {
            return;
        }
        // SQLite pads by the database file's characteristics (wal.c, sqlite3WalOpen).
        let caps = (*(*db).pMethods)
            .xDeviceCharacteristics
            .map_or(0, |f| f(db));
        if caps & ffi::SQLITE_IOCAP_POWERSAFE_OVERWRITE == 0 {
            return;
        }
        let db = db.cast::<WrappedFile>();
        (*wal).log = Some(LogBuffer::default());
        (*wal).db = db;
        (*db).wal = wal;
    }
}

/// Whether the open file `file` was opened by one of our VFSes.
unsafe fn is_ours(file: *mut ffi::sqlite3_file) -> bool {
    // SAFETY: an open file object has its methods set.
    let methods = unsafe { (*file).pMethods };
    [&IO_METHODS_V1, &IO_METHODS_V2, &IO_METHODS_V3]
        .iter()
        .any(|m| std::ptr::eq(methods, *m))
}

/// The descriptor of the `unix` VFS's open file `real` (the head of its `unixFile`: three
/// pointers, then `int h`), if it is the file at `path`; else -1.
unsafe fn unix_fd(real: *mut ffi::sqlite3_file, path: &CStr) -> c_int {
    #[repr(C)]
    struct UnixFileHead {
        methods: *const c_void,
        vfs: *const c_void,
        inode: *const c_void,
        h: c_int,
    }
    // SAFETY: `real` is a unixFile, which begins with these fields.
    let fd = unsafe { (*real.cast::<UnixFileHead>()).h };
    if fd > 2 && same_file(fd, path) {
        fd
    } else {
        -1
    }
}

fn same_file(fd: c_int, path: &CStr) -> bool {
    let mut by_fd = std::mem::MaybeUninit::<libc::stat>::uninit();
    let mut by_path = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: both calls fill the buffers they are given, or fail.
    let (a, b) = unsafe {
        (
            libc::fstat(fd, by_fd.as_mut_ptr()),
            libc::stat(path.as_ptr(), by_path.as_mut_ptr()),
        )
    };
    if a != 0 || b != 0 {
        return false;
    }
    // SAFETY: both succeeded, so both are filled.
    let (a, b) = unsafe { (by_fd.assume_init(), by_path.assume_init()) };
    a.st_dev == b.st_dev && a.st_ino == b.st_ino
}

/// After `written` more bytes: one write-out step if a chunk is full (see the module docs).
///
/// A step that fails because the file cannot do it (`EINVAL`, `ESPIPE`, `ENOSYS`,
/// `EOPNOTSUPP`) leaves the file unpaced. Any other failure is a write-out error (`EIO`,
/// `ENOSPC`, …), and the kernel reports such an error once per open file: to this call, not
/// again to SQLite's next fsync of the same descriptor, which would then succeed over pages
/// that never reached the disk. So the error sticks to the file ([`WrappedFile::failed`]).
fn pace(file: &mut WrappedFile, written: u64) {
    if file.fd < 0 {
        return;
    }
    file.unsynced += written;
    if file.unsynced < WRITEBACK_CHUNK {
        return;
    }
    file.unsynced = 0;
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE;
    // SAFETY: the descriptor is open while the file is (see `x_close`).
    let outcome = match unsafe { libc::sync_file_range(file.fd, 0, 0, flags) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)),
    };
    #[cfg(test)]
    let outcome = tests::INJECTED.with(|e| e.take()).map_or(outcome, Err);
    match outcome {
        Ok(()) => {
            #[cfg(test)]
            tests::STEPS.with(|steps| steps.set(steps.get() + 1));
        }
        Err(libc::EINVAL | libc::ESPIPE | libc::ENOSYS | libc::EOPNOTSUPP) => {
            tracing::warn!("sync_file_range is not supported here: this file is written unpaced");
            file.fd = -1;
        }
        Err(errno) => {
            let error = std::io::Error::from_raw_os_error(errno);
            tracing::error!(%error, "write-out failed: this file fails every write and sync");
            file.failed = Some(errno);
        }
    }
}

/// The base file's methods.
unsafe fn real_methods(
    file: *mut ffi::sqlite3_file,
) -> (*mut ffi::sqlite3_file, &'static ffi::sqlite3_io_methods) {
    // SAFETY: only called on files our x_open opened, whose base file is open.
    unsafe {
        let real = (*file.cast::<WrappedFile>()).real;
        (real, &*(*real).pMethods)
    }
}

/// Calls the base file's method `$m` with the base file and the remaining arguments; a method
/// the base lacks answers `$missing`.
macro_rules! forward {
    ($file:expr, $m:ident, $missing:expr $(, $arg:expr)*) => {{
        // SAFETY: SQLite calls our methods only on files our x_open opened.
        let (real, methods) = unsafe { real_methods($file) };
        match methods.$m {
            // SAFETY: the base's own method on the base's own file.
            Some(f) => unsafe { f(real $(, $arg)*) },
            None => $missing,
        }
    }};
}

/// Sends `file`'s buffered log appends to the base file (see [`super::coalesce`]): before
/// anything that must see the file as written. An SQLite code.
fn send_log(file: *mut ffi::sqlite3_file) -> c_int {
    with_log(file, |log| {
        log.flush(|data, offset| send_run(file, data, offset))
    })
    .and_then(Result::err)
    .unwrap_or(ffi::SQLITE_OK)
}

/// Runs `f` on `file`'s log buffer, if it has one (`None` otherwise). The buffer is out of the
/// file object meanwhile, so that `f` may send through the file (see [`send_run`]).
fn with_log<R>(file: *mut ffi::sqlite3_file, f: impl FnOnce(&mut LogBuffer) -> R) -> Option<R> {
    // SAFETY: our own file object, used by one connection (one thread) at a time.
    let mut log = unsafe { (*file.cast::<WrappedFile>()).log.take() }?;
    let outcome = f(&mut log);
    // SAFETY: as above; `f` is done with the file object.
    unsafe { (*file.cast::<WrappedFile>()).log = Some(log) };
    Some(outcome)
}

/// Sends a run of buffered log appends (see [`write_through`]).
fn send_run(file: *mut ffi::sqlite3_file, data: &[u8], offset: u64) -> Result<(), c_int> {
    #[cfg(test)]
    tests::LOG_SENDS.with(|n| n.set(n.get() + 1));
    write_through(file, data, offset)
}

/// Writes `data` at `offset` to the base file, then paces it: `Err` with an SQLite code.
fn write_through(file: *mut ffi::sqlite3_file, data: &[u8], offset: u64) -> Result<(), c_int> {
    // SAFETY: as in `with_log`.
    let wrapped = unsafe { &mut *file.cast::<WrappedFile>() };
    if wrapped.failed.is_some() {
        return Err(ffi::SQLITE_IOERR_WRITE);
    }
    let Ok(amount) = c_int::try_from(data.len()) else {
        return Err(ffi::SQLITE_IOERR_WRITE);
    };
    let rc = forward!(
        file,
        xWrite,
        ffi::SQLITE_IOERR_WRITE,
        data.as_ptr().cast(),
        amount,
        offset as ffi::sqlite3_int64
    );
    if rc != ffi::SQLITE_OK {
        return Err(rc);
    }
    // SAFETY: as above (the base's method did not touch our part).
    let wrapped = unsafe { &mut *file.cast::<WrappedFile>() };
    pace(wrapped, data.len() as u64);
    match wrapped.failed {
        Some(_) => Err(ffi::SQLITE_IOERR_WRITE),
        None => Ok(()),
    }
}

/// Sends the buffered log appends, then calls the base's method (see [`forward!`]); a failed
/// send answers its own code instead.
macro_rules! forward_sent {
    ($file:expr, $m:ident, $missing:expr $(, $arg:expr)*) => {{
        match send_log($file) {
            ffi::SQLITE_OK => forward!($file, $m, $missing $(, $arg)*),
            rc => rc,
        }
    }};
}

unsafe extern "C" fn x_close(file: *mut ffi::sqlite3_file) -> c_int {
    let sent = send_log(file);
    let rc = forward!(file, xClose, ffi::SQLITE_OK);
    // SAFETY: our own header; the descriptor was the base file's and is closed with it. The
    // buffer was initialised by x_open and is dropped here, once (SQLite closes a file once).
    unsafe {
        let wrapped = file.cast::<WrappedFile>();
        (*wrapped).fd = -1;
        (*wrapped).log = None;
        // Unlink a WAL from its database file and the other way round (SQLite closes the WAL
        // first; either order leaves no pointer to a closed file).
        if !(*wrapped).db.is_null() {
            (*(*wrapped).db).wal = std::ptr::null_mut();
        }
        if !(*wrapped).wal.is_null() {
            (*(*wrapped).wal).db = std::ptr::null_mut();
        }
        (*file).pMethods = std::ptr::null();
    }
    if sent == ffi::SQLITE_OK { rc } else { sent }
}

unsafe extern "C" fn x_read(
    file: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amount: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: as in `with_log`.
    let buffered = unsafe { &*file.cast::<WrappedFile>() }
        .log
        .as_ref()
        .is_some_and(|log| log.overlaps(offset as u64, amount.max(0) as u64));
    if buffered {
        forward_sent!(file, xRead, ffi::SQLITE_IOERR_READ, buf, amount, offset)
    } else {
        forward!(file, xRead, ffi::SQLITE_IOERR_READ, buf, amount, offset)
    }
}

unsafe extern "C" fn x_write(
    file: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amount: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: SQLite hands us `amount` readable bytes at `buf` for the length of this call.
    let data = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), amount.max(0) as usize) };
    // SAFETY: as in `with_log`.
    if unsafe { (*file.cast::<WrappedFile>()).failed.is_some() } {
        return ffi::SQLITE_IOERR_WRITE;
    }
    let offset = offset as u64;
    with_log(file, |log| {
        log.write(data, offset, |d, o| send_run(file, d, o))
    })
    .unwrap_or_else(|| write_through(file, data, offset))
    .err()
    .unwrap_or(ffi::SQLITE_OK)
}

unsafe extern "C" fn x_truncate(file: *mut ffi::sqlite3_file, size: ffi::sqlite3_int64) -> c_int {
    forward_sent!(file, xTruncate, ffi::SQLITE_IOERR_TRUNCATE, size)
}

unsafe extern "C" fn x_sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    let sent = send_log(file);
    if sent != ffi::SQLITE_OK {
        return sent;
    }
    // SAFETY: as in `with_log`.
    let wrapped = unsafe { &mut *file.cast::<WrappedFile>() };
    if wrapped.failed.is_some() {
        return ffi::SQLITE_IOERR_FSYNC;
    }
    let rc = forward!(file, xSync, ffi::SQLITE_IOERR_FSYNC, flags);
    if rc == ffi::SQLITE_OK {
        wrapped.unsynced = 0;
    }
    rc
}

unsafe extern "C" fn x_file_size(
    file: *mut ffi::sqlite3_file,
    size: *mut ffi::sqlite3_int64,
) -> c_int {
    forward_sent!(file, xFileSize, ffi::SQLITE_IOERR_FSTAT, size)
}

unsafe extern "C" fn x_lock(file: *mut ffi::sqlite3_file, lock: c_int) -> c_int {
    forward!(file, xLock, ffi::SQLITE_IOERR_LOCK, lock)
}

unsafe extern "C" fn x_unlock(file: *mut ffi::sqlite3_file, lock: c_int) -> c_int {
    forward!(file, xUnlock, ffi::SQLITE_IOERR_UNLOCK, lock)
}

unsafe extern "C" fn x_check_reserved_lock(file: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    forward!(
        file,
        xCheckReservedLock,
        ffi::SQLITE_IOERR_CHECKRESERVEDLOCK,
        out
    )
}

unsafe extern "C" fn x_file_control(
    file: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    forward_sent!(file, xFileControl, ffi::SQLITE_NOTFOUND, op, arg)
}

unsafe extern "C" fn x_sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    forward!(file, xSectorSize, 4096)
}

unsafe extern "C" fn x_device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    forward!(file, xDeviceCharacteristics, 0)
}

unsafe extern "C" fn x_shm_map(
    file: *mut ffi::sqlite3_file,
    region: c_int,
    size: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    forward!(
        file,
        xShmMap,
        ffi::SQLITE_IOERR_SHMMAP,
        region,
        size,
        extend,
        out
    )
}

unsafe extern "C" fn x_shm_lock(
    file: *mut ffi::sqlite3_file,
    offset: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    // The WAL write lock is lock 0 (wal.c's WAL_WRITE_LOCK): its holder's buffered log goes
    // out while it still holds it (see `link_log`).
    if flags & ffi::SQLITE_SHM_UNLOCK != 0 && offset == 0 && n > 0 {
        // SAFETY: our own file object; `wal` is an open WAL of the same connection or null.
        let wal = unsafe { (*file.cast::<WrappedFile>()).wal };
        if !wal.is_null() && send_log(wal.cast()) != ffi::SQLITE_OK {
            // The bytes were past the last commit (see `coalesce`): nothing committed is lost.
            tracing::warn!("could not write rolled-back log frames before releasing the lock");
        }
    }
    forward!(file, xShmLock, ffi::SQLITE_IOERR_SHMLOCK, offset, n, flags)
}

unsafe extern "C" fn x_shm_barrier(file: *mut ffi::sqlite3_file) {
    forward!(file, xShmBarrier, ())
}

unsafe extern "C" fn x_shm_unmap(file: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    forward!(file, xShmUnmap, ffi::SQLITE_OK, delete)
}

unsafe extern "C" fn x_fetch(
    file: *mut ffi::sqlite3_file,
    offset: ffi::sqlite3_int64,
    amount: c_int,
    out: *mut *mut c_void,
) -> c_int {
    // SAFETY: `out` is SQLite's; a null page means "not mapped, read it".
    unsafe { *out = std::ptr::null_mut() };
    forward_sent!(file, xFetch, ffi::SQLITE_OK, offset, amount, out)
}

unsafe extern "C" fn x_unfetch(
    file: *mut ffi::sqlite3_file,
    offset: ffi::sqlite3_int64,
    page: *mut c_void,
) -> c_int {
    forward!(file, xUnfetch, ffi::SQLITE_OK, offset, page)
}

/// Our methods of `version` (1: no shared memory, 2: no memory-mapped pages, 3: all): a file
/// gets those of its base file's version, so that we forward only what the base has.
const fn io_methods(version: c_int) -> ffi::sqlite3_io_methods {
    ffi::sqlite3_io_methods {
        iVersion: version,
        xClose: Some(x_close),
        xRead: Some(x_read),
        xWrite: Some(x_write),
        xTruncate: Some(x_truncate),
        xSync: Some(x_sync),
        xFileSize: Some(x_file_size),
        xLock: Some(x_lock),
        xUnlock: Some(x_unlock),
        xCheckReservedLock: Some(x_check_reserved_lock),
        xFileControl: Some(x_file_control),
        xSectorSize: Some(x_sector_size),
        xDeviceCharacteristics: Some(x_device_characteristics),
        xShmMap: if version >= 2 { Some(x_shm_map) } else { None },
        xShmLock: if version >= 2 { Some(x_shm_lock) } else { None },
        xShmBarrier: if version >= 2 {
            Some(x_shm_barrier)
        } else {
            None
        },
        xShmUnmap: if version >= 2 {
            Some(x_shm_unmap)
        } else {
            None
        },
        xFetch: if version >= 3 { Some(x_fetch) } else { None },
        xUnfetch: if version >= 3 { Some(x_unfetch) } else { None },
    }
}

static IO_METHODS_V1: ffi::sqlite3_io_methods = io_methods(1);
static IO_METHODS_V2: ffi::sqlite3_io_methods = io_methods(2);
static IO_METHODS_V3: ffi::sqlite3_io_methods = io_methods(3);

// The VFS-level methods: the base's, called with the base.

macro_rules! forward_vfs {
    ($vfs:expr, $m:ident, $missing:expr $(, $arg:expr)*) => {{
        // SAFETY: SQLite calls these only on our registered VFS.
        let base = unsafe { base_of($vfs) }.vfs;
        // SAFETY: the base's own method with the base.
        match unsafe { (*base).$m } {
            Some(f) => unsafe { f(base $(, $arg)*) },
            None => $missing,
        }
    }};
}

unsafe extern "C" fn x_delete(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    sync_dir: c_int,
) -> c_int {
    forward_vfs!(vfs, xDelete, ffi::SQLITE_IOERR_DELETE, name, sync_dir)
}

unsafe extern "C" fn x_access(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    flags: c_int,
    out: *mut c_int,
) -> c_int {
    forward_vfs!(vfs, xAccess, ffi::SQLITE_IOERR_ACCESS, name, flags, out)
}

unsafe extern "C" fn x_full_pathname(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    n: c_int,
    out: *mut c_char,
) -> c_int {
    forward_vfs!(vfs, xFullPathname, ffi::SQLITE_CANTOPEN, name, n, out)
}

unsafe extern "C" fn x_dl_open(vfs: *mut ffi::sqlite3_vfs, name: *const c_char) -> *mut c_void {
    forward_vfs!(vfs, xDlOpen, std::ptr::null_mut(), name)
}

unsafe extern "C" fn x_dl_error(vfs: *mut ffi::sqlite3_vfs, n: c_int, out: *mut c_char) {
    forward_vfs!(vfs, xDlError, (), n, out)
}

/// What `xDlSym` answers (as bindgen spells SQLite's `void (*)(void)`).
type DlSymbol = Option<unsafe extern "C" fn(*mut ffi::sqlite3_vfs, *mut c_void, *const c_char)>;

unsafe extern "C" fn x_dl_sym(
    vfs: *mut ffi::sqlite3_vfs,
    handle: *mut c_void,
    symbol: *const c_char,
) -> DlSymbol {
    forward_vfs!(vfs, xDlSym, None, handle, symbol)
}

unsafe extern "C" fn x_dl_close(vfs: *mut ffi::sqlite3_vfs, handle: *mut c_void) {
    forward_vfs!(vfs, xDlClose, (), handle)
}

unsafe extern "C" fn x_randomness(vfs: *mut ffi::sqlite3_vfs, n: c_int, out: *mut c_char) -> c_int {
    forward_vfs!(vfs, xRandomness, 0, n, out)
}

unsafe extern "C" fn x_sleep(vfs: *mut ffi::sqlite3_vfs, micros: c_int) -> c_int {
    forward_vfs!(vfs, xSleep, 0, micros)
}

unsafe extern "C" fn x_current_time(vfs: *mut ffi::sqlite3_vfs, out: *mut f64) -> c_int {
    forward_vfs!(vfs, xCurrentTime, ffi::SQLITE_ERROR, out)
}

unsafe extern "C" fn x_get_last_error(
    vfs: *mut ffi::sqlite3_vfs,
    n: c_int,
    out: *mut c_char,
) -> c_int {
    forward_vfs!(vfs, xGetLastError, 0, n, out)
}

unsafe extern "C" fn x_current_time_int64(
    vfs: *mut ffi::sqlite3_vfs,
    out: *mut ffi::sqlite3_int64,
) -> c_int {
    forward_vfs!(vfs, xCurrentTimeInt64, ffi::SQLITE_ERROR, out)
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::path::Path;

    use rusqlite::{Connection, OpenFlags};

    use super::*;

    thread_local! {
        /// Write-out steps taken on this thread (each test's connection runs on its own).
        pub(super) static STEPS: Cell<u64> = const { Cell::new(0) };
        /// An `errno` the next write-out step on this thread reports instead of its own.
        pub(super) static INJECTED: Cell<Option<c_int>> = const { Cell::new(None) };
        /// Writes of buffered log appends sent to a base file on this thread.
        pub(super) static LOG_SENDS: Cell<u64> = const { Cell::new(0) };
    }

    fn steps() -> u64 {
        STEPS.with(Cell::get)
    }

    fn open_paced(path: &Path) -> Connection {
        register().unwrap();
        Connection::open_with_flags_and_vfs(path, OpenFlags::default(), PACED_VFS).unwrap()
    }

    /// `rows` blobs of `size` bytes, each byte its row number, inserted in one transaction.
    fn fill(conn: &Connection, rows: usize, size: usize) {
        conn.execute_batch("CREATE TABLE t (i INTEGER PRIMARY KEY, b BLOB NOT NULL); BEGIN")
            .unwrap();
        for i in 0..rows {
            conn.execute(
                "INSERT INTO t (i, b) VALUES (?1, ?2)",
                rusqlite::params![i as i64, vec![i as u8; size]],
            )
            .unwrap();
        }
        conn.execute_batch("COMMIT").unwrap();
    }

    /// Every row as `fill` wrote it, read through the default VFS, and the file intact.
    fn assert_filled(path: &Path, rows: usize, size: usize) {
        assert_rows_of(&Connection::open(path).unwrap(), rows, size);
    }

    /// Every row as `fill` wrote it (`rows` of `size` bytes), read through `conn`, and the file
    /// intact.
    pub(super) fn assert_rows_of(conn: &Connection, rows: usize, size: usize) {
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok");
        let mut stmt = conn.prepare("SELECT i, b FROM t ORDER BY i").unwrap();
        let got: Vec<(i64, Vec<u8>)> = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(got.len(), rows);
        for (i, (n, b)) in got.into_iter().enumerate() {
            assert_eq!(n, i as i64);
            assert_eq!(b, vec![i as u8; size], "row {i}");
        }
    }

    #[test]
    fn a_paced_commit_and_checkpoint_write_everything_in_chunk_steps() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        let conn = open_paced(&path);
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.pragma_update(None, "synchronous", "FULL").unwrap();
        conn.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        // 4 MiB of rows: the commit writes them to the log, a step per chunk.
        let chunks = (4 << 20) / WRITEBACK_CHUNK;
        let before = steps();
        fill(&conn, 64, 64 * 1024);
        let logged = steps() - before;
        assert!(
            logged >= chunks,
            "{logged} steps for the log, {chunks} chunks"
        );
        // The checkpoint writes them again, into the database file.
        let before = steps();
        let (busy, log, copied): (i64, i64, i64) = conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .unwrap();
        assert_eq!(
            (busy, log, copied),
            (0, 0, 0),
            "truncated: nothing left in the log"
        );
        let checkpointed = steps() - before;
        assert!(
            checkpointed >= chunks,
            "{checkpointed} steps for the database file, {chunks} chunks"
        );
        drop(conn);
        assert_filled(&path, 64, 64 * 1024);
    }

    #[test]
    fn a_file_without_a_name_is_written_unpaced_and_whole() {
        // A temporary database ("") has no path to check a descriptor against.
        let conn = open_paced(Path::new(""));
        let before = steps();
        fill(&conn, 64, 64 * 1024);
        assert_eq!(steps(), before);
        let total: i64 = conn
            .query_row("SELECT sum(length(b)) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(total, 64 * 64 * 1024);
    }

    #[test]
    fn a_descriptor_counts_only_for_the_file_it_names() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, b"a").unwrap();
        std::fs::write(&b, b"b").unwrap();
        let file = std::fs::File::open(&a).unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        let c = |p: &Path| std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        assert!(same_file(fd, &c(&a)));
        assert!(!same_file(fd, &c(&b)));
        assert!(!same_file(fd, &c(&dir.path().join("missing"))));
        assert!(!same_file(-1, &c(&a)));
    }

    #[test]
    fn paced_and_plain_connections_share_one_database() {
        // The checkpointer (paced) and the writer (plain) of one file, as in GroupWriter.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let plain = Connection::open(&path).unwrap();
        plain.pragma_update(None, "journal_mode", "WAL").unwrap();
        fill(&plain, 32, 32 * 1024);
        let paced = open_paced(&path);
        let n: i64 = paced
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 32);
        paced
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
            .unwrap();
        plain
            .execute(
                "INSERT INTO t (i, b) VALUES (32, ?1)",
                [vec![32u8; 32 * 1024]],
            )
            .unwrap();
        drop((plain, paced));
        assert_filled(&path, 33, 32 * 1024);
    }
}

#[cfg(test)]
mod coalesce_tests {
    use std::cell::Cell;
    use std::path::Path;

    use rusqlite::{Connection, OpenFlags};

    use super::tests::LOG_SENDS;
    use super::*;

    /// A writer as `open_rw_with` makes one: through `vfs`, WAL, a sync per commit, no automatic
    /// checkpoint (the log keeps every frame, as between two checkpoints).
    fn writer(path: &Path, vfs: &str) -> Connection {
        register().unwrap();
        let conn = Connection::open_with_flags_and_vfs(path, OpenFlags::default(), vfs).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.pragma_update(None, "synchronous", "FULL").unwrap();
        conn.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        conn.execute_batch("CREATE TABLE t (i INTEGER PRIMARY KEY, b BLOB NOT NULL)")
            .unwrap();
        conn
    }

    fn sends() -> u64 {
        LOG_SENDS.with(Cell::get)
    }

    fn count(conn: &Connection) -> i64 {
        conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap()
    }

    /// Rows `from..to`, 1 KiB each (row number in every byte), in one transaction.
    fn commit_rows(conn: &Connection, from: i64, to: i64) {
        conn.execute_batch("BEGIN").unwrap();
        for i in from..to {
            conn.execute(
                "INSERT INTO t (i, b) VALUES (?1, ?2)",
                rusqlite::params![i, vec![i as u8; 1024]],
            )
            .unwrap();
        }
        conn.execute_batch("COMMIT").unwrap();
    }

    /// Rows `0..rows` as `commit_rows` wrote them, read through `conn`, and the file intact.
    fn assert_rows(conn: &Connection, rows: usize) {
        super::tests::assert_rows_of(conn, rows, 1024);
    }

    /// Opens a transaction on `conn` with a cache of ten pages and inserts rows `from..to` of
    /// 1 KiB (0xEE each) in it: it writes (spills) frames to the log before any commit.
    fn spill(conn: &Connection, from: i64, to: i64) {
        conn.pragma_update(None, "cache_size", 10).unwrap();
        conn.execute_batch("BEGIN").unwrap();
        for i in from..to {
            conn.execute(
                "INSERT INTO t (i, b) VALUES (?1, ?2)",
                rusqlite::params![i, vec![0xEEu8; 1024]],
            )
            .unwrap();
        }
    }

    /// Frames in the log so far (a 32-byte header, then frames of a header and a 4 KiB page).
    fn frames(path: &Path) -> i64 {
        let wal = std::fs::metadata(path.with_extension("db-wal")).unwrap();
        (wal.len() as i64 - 32) / (24 + 4096)
    }

    #[test]
    fn a_commit_sends_its_log_appends_in_one_write() {
        for vfs in [COALESCED_VFS, PACED_VFS] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("c.db");
            let conn = writer(&path, vfs);
            let before_frames = frames(&path);
            let before = sends();
            for k in 0..10 {
                commit_rows(&conn, k * 8, k * 8 + 8);
            }
            let commits_frames = frames(&path) - before_frames;
            // Ten commits of 8 KiB of rows: at least three pages each (two leaves, the root),
            // so 60 or more calls uncoalesced (header and page of each frame).
            assert!(commits_frames >= 30, "{vfs}: {commits_frames} frames");
            assert_eq!(sends() - before, 10, "{vfs}: one write per commit");
            assert_rows(&conn, 80);
        }
    }

    #[test]
    fn every_commit_is_on_disk_for_other_connections_and_after_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.db");
        let conn = writer(&path, COALESCED_VFS);
        let reader = Connection::open(&path).unwrap();
        for k in 0..20 {
            commit_rows(&conn, k * 5, k * 5 + 5);
            assert_eq!(count(&reader), k * 5 + 5, "a reader sees commit {k}");
        }
        // A crash: the files as they are now, the writer still open and nothing checkpointed.
        let copy = dir.path().join("copy");
        std::fs::create_dir(&copy).unwrap();
        for name in ["v.db", "v.db-wal"] {
            std::fs::copy(dir.path().join(name), copy.join(name)).unwrap();
        }
        assert_rows(&Connection::open(copy.join("v.db")).unwrap(), 100);
        drop(conn);
        assert_rows(&reader, 100);
    }

    #[test]
    fn a_rolled_back_spill_goes_out_before_another_connection_writes_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.db");
        let ours = writer(&path, COALESCED_VFS);
        commit_rows(&ours, 0, 10);
        // Frames spilled to the log and rolled back: the last of them still buffered.
        spill(&ours, 10, 300);
        ours.execute_batch("ROLLBACK").unwrap();
        // Another writer commits over the same offsets of the log, then ours closes (which
        // sends whatever it still holds).
        let other = Connection::open(&path).unwrap();
        other.pragma_update(None, "synchronous", "FULL").unwrap();
        commit_rows(&other, 10, 400);
        drop(ours);
        assert_rows(&Connection::open(&path).unwrap(), 400);
        assert_rows(&other, 400);
    }

    #[test]
    fn a_log_that_sqlite_pads_is_not_buffered() {
        let dir = tempfile::tempdir().unwrap();
        let uri = format!("file:{}?psow=0", dir.path().join("p.db").display());
        let conn = writer(Path::new(&uri), COALESCED_VFS);
        let before = sends();
        commit_rows(&conn, 0, 40);
        assert_eq!(sends(), before, "written through, frame by frame");
        assert_rows(&conn, 40);
    }

    #[test]
    fn a_transaction_that_spilled_and_rolled_back_leaves_every_commit_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let conn = writer(&path, COALESCED_VFS);
        commit_rows(&conn, 0, 50);
        // The transaction writes frames to the log before its commit, rewrites some of them in
        // place, reads them back, then rolls them all back.
        spill(&conn, 50, 400);
        // Newest first: the pages spilled last are read back while still buffered.
        let newest_first = |conn: &Connection| -> Vec<(i64, Vec<u8>)> {
            let mut stmt = conn
                .prepare("SELECT i, b FROM t WHERE i >= 50 ORDER BY i DESC")
                .unwrap();
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        };
        let want = |i: i64, zeroed: bool| {
            let byte = if zeroed && i % 7 == 0 { 0 } else { 0xEE };
            (i, vec![byte; 1024])
        };
        let read = newest_first(&conn);
        assert_eq!(
            read,
            (50..400).rev().map(|i| want(i, false)).collect::<Vec<_>>()
        );
        conn.execute("UPDATE t SET b = zeroblob(1024) WHERE i % 7 = 0", [])
            .unwrap();
        let read = newest_first(&conn);
        assert_eq!(
            read,
            (50..400).rev().map(|i| want(i, true)).collect::<Vec<_>>()
        );
        conn.execute_batch("ROLLBACK").unwrap();
        commit_rows(&conn, 50, 120);
        let reader = Connection::open(&path).unwrap();
        assert_rows(&reader, 120);
        drop(conn);
        assert_rows(&Connection::open(&path).unwrap(), 120);
    }
}

#[cfg(test)]
mod failure_tests {
    use std::path::Path;

    use rusqlite::{Connection, OpenFlags};

    use super::tests::{INJECTED, STEPS};
    use super::*;

    fn paced_wal(path: &Path) -> Connection {
        register().unwrap();
        let conn =
            Connection::open_with_flags_and_vfs(path, OpenFlags::default(), PACED_VFS).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.pragma_update(None, "synchronous", "FULL").unwrap();
        conn.execute_batch("CREATE TABLE t (b BLOB NOT NULL)")
            .unwrap();
        conn
    }

    /// One transaction of 1 MiB (16 write-out steps), or its error.
    fn commit_a_mebibyte(conn: &Connection) -> rusqlite::Result<()> {
        conn.execute_batch("BEGIN")?;
        for _ in 0..16 {
            conn.execute("INSERT INTO t (b) VALUES (?1)", [vec![7u8; 64 * 1024]])?;
        }
        conn.execute_batch("COMMIT")
    }

    #[test]
    fn a_write_out_error_fails_the_commit_and_every_later_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.db");
        let conn = paced_wal(&path);
        commit_a_mebibyte(&conn).unwrap();
        // The kernel reports a write-out error once, to the step that sees it: the commit must
        // fail rather than let its fsync succeed over pages lost on the way.
        INJECTED.with(|e| e.set(Some(libc::EIO)));
        let failed = commit_a_mebibyte(&conn);
        assert!(
            matches!(&failed, Err(rusqlite::Error::SqliteFailure(e, _)) if e.code == rusqlite::ErrorCode::SystemIoFailure),
            "{failed:?}"
        );
        let _ = conn.execute_batch("ROLLBACK");
        // It sticks to the file: no later commit through it is taken as durable.
        assert!(commit_a_mebibyte(&conn).is_err());
        let _ = conn.execute_batch("ROLLBACK");
        drop(conn);
        // What was committed before is intact; nothing of the failed commits is there.
        let plain = Connection::open(&path).unwrap();
        let rows: i64 = plain
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 16);
    }

    #[test]
    fn a_file_that_cannot_step_is_written_unpaced_and_commits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("u.db");
        let conn = paced_wal(&path);
        INJECTED.with(|e| e.set(Some(libc::EINVAL)));
        commit_a_mebibyte(&conn).unwrap();
        let steps = STEPS.with(std::cell::Cell::get);
        commit_a_mebibyte(&conn).unwrap();
        assert_eq!(
            STEPS.with(std::cell::Cell::get),
            steps,
            "no step once refused"
        );
        let rows: i64 = conn
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 32);
    }
}
