//! The embedded engine: SQLite in WAL mode with fsync on every commit, through SQLite's public
//! API and documented pragmas only.
//!
//! Writes: one [`GroupWriter`] thread per database file owns the only write connection. Callers
//! hand it jobs (closures over a `&Connection`); the thread takes every job that is waiting (up
//! to `max_batch`), runs each inside its own savepoint of one `BEGIN IMMEDIATE` transaction,
//! commits once (one fsync, `synchronous = FULL`), and only then answers each caller. A job that
//! fails is rolled back to its savepoint alone; the others still commit. This is group commit:
//! many acknowledgements share one fsync, and no caller is answered before its data is durable.
//! A hot path whose jobs only fail before their first write ([`GroupWriter::write_unguarded`],
//! the chat commit) skips the savepoint; should such a job still fail after writing, the whole
//! group is rolled back and every job in it is answered [`SqliteError::CommitFailed`]; so is the
//! group of a job that panics (a bug), and the writer goes on with the next group. State a
//! job keeps beside the database (an in-memory index of its rows) is made whole again by a
//! rollback hook ([`GroupWriter::start_with_rollback_hook`]), which the writer runs after any
//! group it rolled back, before the next one.
//! The writer's page cache is sized by its file's size (see [`cache`]).
//!
//! Reads: a [`ReadPool`] of read-only connections; WAL lets them read a consistent snapshot while
//! the writer works.
//!
//! Checkpoints run off the commit path, on a companion thread of each writer, and background
//! work (checkpoints; a writer or reader that may lag, such as the archive's) runs at a lower
//! CPU priority than the commit path where the platform allows it: see [`background`]. Once a
//! writer rests, its companion empties the log file, so a store at rest takes no more disk than
//! its database file.

mod background;
mod cache;
mod job_thread;

pub use background::{BACKGROUND_NICE, Priority, ReadThread};
pub use cache::{RESIZE_EVERY_GROUPS, SMALL_FILE_CACHE_KIB, WRITER_CACHE_KIB, writer_cache_kib};
use job_thread::JobThread;

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::oneshot;

use crate::store::AsStoreError;

/// Errors of the embedded engine itself (not of a job's own logic).
#[derive(Debug, thiserror::Error)]
pub enum SqliteError {
    /// SQLite reported an error.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The transaction that held this job failed to commit; nothing of it was written.
    #[error("commit failed: {reason}")]
    CommitFailed {
        /// What happened to the group.
        reason: String,
        /// SQLite's error, when the `BEGIN` or `COMMIT` itself failed (a full disk, an I/O
        /// error); none when a neighbour's failure rolled the group back.
        #[source]
        source: Option<Arc<rusqlite::Error>>,
    },
    /// The writer thread has stopped (shutdown or a fatal error).
    #[error("sqlite writer stopped")]
    WriterStopped,
    /// A database file is missing but its write-ahead log is there, holding `bytes`: a new,
    /// empty file would take that log, which belongs to the missing one, for its own.
    #[error(
        "{wal} holds {bytes} bytes of log but its database file is missing: put the database file back beside it, or move the log away"
    )]
    OrphanLog {
        /// The log's path.
        wal: String,
        /// Its size.
        bytes: u64,
    },
    /// The file's schema version (`PRAGMA user_version`) is above the newest this build
    /// knows: a newer build wrote it (see [`crate::schema`]).
    #[error(
        "{path} has schema version {found}, this build knows up to {known}: use a newer tidemark"
    )]
    SchemaTooNew {
        /// The file.
        path: String,
        /// Its version.
        found: i64,
        /// The newest version this build knows.
        known: i64,
    },
    /// The read pool could not hand out a connection.
    #[error("sqlite read pool: {0}")]
    Pool(#[from] r2d2::Error),
    /// A blocking task panicked or was cancelled.
    #[error("sqlite task failed: {0}")]
    Task(String),
    /// Opening the database file at `path` failed (see [`opening`]).
    #[error("opening {path}: {reason}")]
    Open {
        /// The file.
        path: String,
        /// Why (in the message, not a `source`: a chain-printing reporter would say it twice).
        reason: Box<SqliteError>,
    },
}

/// Runs `open`, the opening of the database file at `path` (connection, schema, read pool),
/// and names the file in its error ([`SqliteError::Open`]): SQLite's own words name none
/// ("file is not a database", "disk I/O error" from `xShmMap` on a full disk).
///
/// # Errors
/// `open`'s error, wrapped; [`SqliteError::SchemaTooNew`] as it is (it names the file).
pub fn opening<T>(
    path: &Path,
    open: impl FnOnce() -> Result<T, SqliteError>,
) -> Result<T, SqliteError> {
    open().map_err(|e| match e {
        SqliteError::SchemaTooNew { .. } => e,
        e => SqliteError::Open {
            path: path.display().to_string(),
            reason: Box::new(e),
        },
    })
}

/// Test support: writes 8 KiB that are not a database to `path`, opens it with `open` and
/// panics unless the error names the file as [`opening`] does ("opening <path>: … not a
/// database"; SQLite's own message names none). With the `testing` feature only.
#[cfg(feature = "testing")]
pub fn assert_open_names_the_file<T, E: std::fmt::Display>(
    path: &Path,
    open: impl FnOnce(&Path) -> Result<T, E>,
) {
    std::fs::write(path, vec![b'x'; 8192]).expect("writing the test file");
    let Err(err) = open(path).map(drop) else {
        panic!("{} opened although it is not a database", path.display());
    };
    let err = err.to_string();
    let named = format!("opening {}: ", path.display());
    assert!(
        err.contains(&named) && err.contains("not a database"),
        "{err}"
    );
}

/// How long a connection waits for a lock another holds before it gives up (`SQLITE_BUSY`).
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Opens a read-write connection with Tidemark's pragmas: WAL, `synchronous = FULL` (fsync of
/// the WAL on every commit), foreign keys on, a page cache sized by the file's size
/// ([`writer_cache_kib`]), a [`BUSY_TIMEOUT`]. Creates the file if missing.
///
/// # Errors
/// [`SqliteError::OrphanLog`] if the file is missing but its log is not; SQLite's otherwise.
pub fn open_rw(path: &Path) -> Result<Connection, SqliteError> {
    open_rw_inner(path, None)
}

/// [`open_rw`] of a file whose pages are `page_size` bytes (a power of two from 512 to
/// 65,536) if this call creates it. A file that exists keeps its page size: in WAL mode
/// SQLite ignores the pragma (only a `VACUUM` outside WAL would change it).
///
/// Smaller pages cost a WAL less for a small row in a randomly placed B-tree leaf: each commit
/// writes every page it touched whole, as one frame (see `tidemark_chat`'s `hot.db`, which
/// uses this for its (conversation, seq) index).
pub fn open_rw_paged(path: &Path, page_size: u32) -> Result<Connection, SqliteError> {
    open_rw_inner(path, Some(page_size))
}

fn open_rw_inner(path: &Path, page_size: Option<u32>) -> Result<Connection, SqliteError> {
    refuse_orphan_log(path)?;
    let conn = Connection::open_with_flags(path, OpenFlags::default())?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    if let Some(size) = page_size {
        // Before the switch to WAL, which fixes the size of a new file.
        conn.pragma_update(None, "page_size", size)?;
    }
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // Savepoint sub-journals (one per group-commit job) stay in memory.
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    cache::size_writer_cache(&conn)?;
    Ok(conn)
}

/// [`SqliteError::OrphanLog`] if `path` does not exist but a non-empty `<path>-wal` does (an
/// operator moved a database file away without its log: SQLite would replay that log into the
/// new file it creates, and a later checkpoint would empty it).
fn refuse_orphan_log(path: &Path) -> Result<(), SqliteError> {
    if path.exists() {
        return Ok(());
    }
    let wal = format!("{}-wal", path.display());
    match std::fs::metadata(&wal) {
        Ok(m) if m.len() > 0 => Err(SqliteError::OrphanLog {
            wal,
            bytes: m.len(),
        }),
        _ => Ok(()),
    }
}

/// How a group transaction ended: committed, or not, with why and SQLite's error if it had one.
type GroupOutcome = Result<(), (String, Option<Arc<rusqlite::Error>>)>;
type Completion = Box<dyn FnOnce(GroupOutcome) + Send>;
/// A job run by the writer thread: its completion, and whether it failed after writing without
/// a savepoint (which dooms the group transaction).
type Job = Box<dyn FnOnce(&Connection) -> (Completion, bool) + Send>;
/// Runs on the writer thread after a group transaction was rolled back (see the module docs).
pub type RollbackHook = Box<dyn FnMut(&Connection) + Send>;

/// The flags of every read-only connection ([`ReadPool`], [`ReadThread`]); each also gets a
/// [`BUSY_TIMEOUT`].
fn read_only_flags() -> OpenFlags {
    OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
}

/// The single writer of one SQLite file, with group commit (see the module docs).
#[derive(Debug)]
pub struct GroupWriter {
    jobs: JobThread<Job>,
    /// The database file, named in the store failures of its jobs ([`in_file`]).
    path: Option<PathBuf>,
}

impl GroupWriter {
    /// Starts the writer thread on `conn`; `max_batch` bounds how many jobs share a transaction.
    ///
    /// WAL checkpoints are taken off the commit path: a companion thread (at
    /// [`Priority::Background`]) runs a PASSIVE
    /// checkpoint on its own connection every [`CHECKPOINT_EVERY`], or every
    /// [`CHECKPOINT_BUSY_EVERY`] while the log grows fast ([`checkpoint_pause`]); the writer's
    /// automatic checkpoint, which rewinds the log, only triggers past [`AUTOCHECKPOINT_BYTES`];
    /// the companion truncates the WAL once a pass finds nothing written since the last one and
    /// every frame copied, and the writer truncates it when it stops.
    pub fn start(name: &str, conn: Connection, max_batch: usize) -> Self {
        Self::spawn(name, conn, max_batch, Box::new(|_| {}), Priority::Normal)
    }

    /// Like [`GroupWriter::start`], the writer thread at `priority`: [`Priority::Background`]
    /// for a writer nobody waits on to answer a request (the archive in `tiered` mode).
    pub fn start_with_priority(
        name: &str,
        conn: Connection,
        max_batch: usize,
        priority: Priority,
    ) -> Self {
        Self::spawn(name, conn, max_batch, Box::new(|_| {}), priority)
    }

    /// Like [`GroupWriter::start`]; `on_rollback` runs on the writer thread, with the
    /// connection, after every group transaction that was rolled back (a job failed after
    /// writing without a savepoint, or the COMMIT failed), before the next group begins: the
    /// place to rebuild what jobs of that group changed outside the database.
    pub fn start_with_rollback_hook(
        name: &str,
        conn: Connection,
        max_batch: usize,
        on_rollback: RollbackHook,
    ) -> Self {
        Self::spawn(name, conn, max_batch, on_rollback, Priority::Normal)
    }

    fn spawn(
        name: &str,
        conn: Connection,
        max_batch: usize,
        on_rollback: RollbackHook,
        priority: Priority,
    ) -> Self {
        let raised = conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .and_then(|page_size| {
                conn.pragma_update(None, "wal_autocheckpoint", autocheckpoint_pages(page_size))
            });
        if let Err(e) = raised {
            tracing::warn!(error = %e, "could not raise wal_autocheckpoint");
        }
        let path = conn
            .path()
            .filter(|p| !p.is_empty())
            .map(std::path::PathBuf::from);
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let checkpointer = path.clone().map(|path| {
            std::thread::Builder::new()
                .name(format!("sqlite-checkpoint-{name}"))
                .spawn(move || checkpoint_loop(&path, &stop_rx))
                .expect("spawning the sqlite checkpoint thread")
        });
        let jobs = JobThread::spawn(format!("sqlite-writer-{name}"), move |rx| {
            priority.apply_to_current_thread();
            writer_loop(&conn, rx, max_batch.max(1), on_rollback);
            drop(stop_tx);
            if let Some(c) = checkpointer {
                let _ = c.join();
            }
            if let Err(e) = conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)") {
                tracing::warn!(error = %e, "final wal checkpoint failed");
            }
        })
        .expect("spawning the sqlite writer thread");
        Self { jobs, path }
    }

    /// Runs `job` in the next group transaction and returns its result once that transaction is
    /// durable. If the job returns `Err`, its writes are rolled back (alone) and the error is
    /// returned; if the commit fails, nothing of the job was written and
    /// [`SqliteError::CommitFailed`] is returned (converted into `E`), or the job's own error if
    /// it failed too (its failure is then usually the group's cause: a full disk, say).
    pub async fn write<R, E, F>(&self, job: F) -> Result<R, E>
    where
        F: FnOnce(&Connection) -> Result<R, E> + Send + 'static,
        R: Send + 'static,
        E: From<SqliteError> + AsStoreError + Send + 'static,
    {
        self.submit(move |conn| (run_in_savepoint(conn, job), false))
            .await
    }

    /// Like [`GroupWriter::write`] without the job's savepoint (one statement and the
    /// sub-journal copy of every page it touches less), for jobs whose errors come before their
    /// first write (a lookup, a missing row) or doom the transaction anyway (I/O, corruption).
    /// If the job returns `Err` after it changed rows, the whole group transaction is rolled
    /// back and every job in it is answered [`SqliteError::CommitFailed`]: never a half-written
    /// job, at the price of its neighbours retrying.
    pub async fn write_unguarded<R, E, F>(&self, job: F) -> Result<R, E>
    where
        F: FnOnce(&Connection) -> Result<R, E> + Send + 'static,
        R: Send + 'static,
        E: From<SqliteError> + AsStoreError + Send + 'static,
    {
        self.submit(move |conn| {
            let before = conn.total_changes();
            let outcome = job(conn);
            // Changed rows, or a failure after which SQLite itself rolled the transaction back
            // (a full disk, say): either way the group cannot commit as it is.
            let doomed =
                outcome.is_err() && (conn.total_changes() != before || conn.is_autocommit());
            (outcome, doomed)
        })
        .await
    }

    async fn submit<R, E, F>(&self, run: F) -> Result<R, E>
    where
        F: FnOnce(&Connection) -> (Result<R, E>, bool) + Send + 'static,
        R: Send + 'static,
        E: From<SqliteError> + AsStoreError + Send + 'static,
    {
        let (done_tx, done_rx) = oneshot::channel::<Result<R, E>>();
        let boxed: Job = Box::new(move |conn: &Connection| {
            // Outside a transaction (the writer could not begin one, or SQLite rolled the
            // group back after a neighbour's error) the job is not run: in autocommit each of
            // its statements would be durable alone, half a job. It is answered the group's
            // error.
            let (outcome, doomed) = if conn.is_autocommit() {
                (None, false)
            } else {
                // A job that panics (a bug) may have written anything, and left its savepoint
                // open: it dooms its group, and the writer goes on with the next one.
                let (outcome, doomed) = std::panic::catch_unwind(AssertUnwindSafe(|| run(conn)))
                    .unwrap_or_else(|_| {
                        tracing::error!("a sqlite writer job panicked: its group is rolled back");
                        let panicked = SqliteError::Task("the write job panicked".into());
                        (Err(E::from(panicked)), true)
                    });
                (Some(outcome), doomed)
            };
            let completion = Box::new(move |commit: GroupOutcome| {
                // A job that failed keeps its own error (e.g. disk full) when the group fails
                // too: the group's error is often only that failure's consequence.
                let answer = match (commit, outcome) {
                    (Ok(()), Some(outcome)) => outcome,
                    (Err(_), Some(Err(own))) => Err(own),
                    (Err((reason, source)), _) => {
                        Err(E::from(SqliteError::CommitFailed { reason, source }))
                    }
                    (Ok(()), None) => Err(E::from(SqliteError::CommitFailed {
                        reason: "no transaction to run in".into(),
                        source: None,
                    })),
                };
                let _ = done_tx.send(answer);
            }) as Completion;
            (completion, doomed)
        });
        let path = self.path.as_deref();
        self.jobs
            .send(boxed)
            .map_err(|_| in_file(E::from(SqliteError::WriterStopped), path))?;
        let answer = done_rx
            .await
            .map_err(|_| in_file(E::from(SqliteError::WriterStopped), path))?;
        answer.map_err(|e| in_file(e, path))
    }

    /// Stops accepting jobs, finishes the ones queued, and joins the thread (dropping the
    /// writer does the same).
    pub fn shutdown(&mut self) {
        self.jobs.shutdown();
    }
}

/// `e`, naming `path` in the store failure it holds, if it holds one: SQLite's own messages
/// ("database disk image is malformed") name no file.
fn in_file<E: AsStoreError>(mut e: E, path: Option<&Path>) -> E {
    if let (Some(path), Some(store)) = (path, e.as_store_error_mut()) {
        store.name_file(path);
    }
    e
}

fn run_in_savepoint<R, E, F>(conn: &Connection, job: F) -> Result<R, E>
where
    F: FnOnce(&Connection) -> Result<R, E>,
    E: From<SqliteError>,
{
    let run = |sql: &str| -> Result<(), SqliteError> {
        conn.prepare_cached(sql)?.execute([])?;
        Ok(())
    };
    run("SAVEPOINT job").map_err(E::from)?;
    let out = job(conn);
    if out.is_err() {
        if conn.is_autocommit() {
            // SQLite rolled the whole transaction back (disk full, an I/O error): the savepoint
            // is gone with it, and the job's error is the cause to report.
            return out;
        }
        run("ROLLBACK TO job").map_err(E::from)?;
    }
    run("RELEASE job").map_err(E::from)?;
    out
}

/// How often the companion thread checkpoints the WAL into the database file while the log
/// grows slowly.
pub const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

/// The companion thread's pause while the log grows fast (see [`checkpoint_pause`]).
pub const CHECKPOINT_BUSY_EVERY: Duration = Duration::from_millis(5);

/// Log growth (frames per second, measured between two passes) above which the companion
/// thread counts the writer as busy and checkpoints again after [`CHECKPOINT_BUSY_EVERY`]:
/// 1,024 frames/s is 4 MiB/s of 4 KiB pages (1 MiB/s of `hot.db`'s 1 KiB pages: a writer that
/// busy is checkpointed closely either way).
pub const CHECKPOINT_BUSY_FRAMES_PER_SEC: f64 = 1024.0;

/// WAL size (bytes of pages) past which the writer checkpoints by itself (SQLite's default is
/// 1,000 pages); SQLite counts it in pages: [`autocheckpoint_pages`].
///
/// Under a steady write load the log is never fully copied when the writer starts a transaction, so
/// it only rewinds at this size, with the writer's own checkpoint; each rewind stalls commits for
/// tens of milliseconds, whatever was left to copy (at 50,000 pages of 4 KiB that is once a second
/// at 10,000 sends/s, and p99 follows the stalls). At 250,000 pages of 4 KiB (≈ 1 GiB of WAL at
/// most) it is once in about five seconds; in bytes, so that a file of smaller pages
/// (`hot.db`'s 1 KiB) rewinds as seldom. The log is copied into the database continuously all
/// the same, so readers and crash recovery see a log that is mostly checkpointed.
pub const AUTOCHECKPOINT_BYTES: i64 = 250_000 * 4096;

/// [`AUTOCHECKPOINT_BYTES`] in pages of `page_size` bytes (`wal_autocheckpoint`'s unit).
pub fn autocheckpoint_pages(page_size: i64) -> i64 {
    AUTOCHECKPOINT_BYTES / page_size.max(512)
}

/// The pause before the companion thread's next PASSIVE checkpoint, given that the log grew by
/// `grew_frames` in `elapsed` since the previous one: [`CHECKPOINT_BUSY_EVERY`] while the
/// writer is busy (above [`CHECKPOINT_BUSY_FRAMES_PER_SEC`]), so that each pass has little to
/// copy and the database file is fsynced in small steps rather than in one long flush that
/// commits queue behind; [`CHECKPOINT_EVERY`] otherwise.
pub fn checkpoint_pause(grew_frames: i64, elapsed: Duration) -> Duration {
    let secs = elapsed.as_secs_f64().max(1e-3);
    if grew_frames as f64 / secs > CHECKPOINT_BUSY_FRAMES_PER_SEC {
        CHECKPOINT_BUSY_EVERY
    } else {
        CHECKPOINT_EVERY
    }
}

fn checkpoint_loop(path: &Path, stop: &mpsc::Receiver<()>) {
    // Copying the log into the database may lag; the writer rewinds it past
    // AUTOCHECKPOINT_BYTES whatever happens here.
    Priority::Background.apply_to_current_thread();
    let opened = Connection::open_with_flags(path, OpenFlags::default()).and_then(|c| {
        c.busy_timeout(Duration::from_millis(50))?;
        c.pragma_update(None, "synchronous", "FULL")?;
        Ok(c)
    });
    let conn = match opened {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "checkpoint thread could not open the database");
            return;
        }
    };
    let (mut pause, mut last_log, mut last_pass) =
        (CHECKPOINT_EVERY, 0_i64, std::time::Instant::now());
    while let Err(mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(pause) {
        // PASSIVE never waits for readers or the writer. Its row: (busy, frames in the log,
        // frames copied); (1, -1, -1) while another connection checkpoints.
        let pass = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
            ))
        });
        pause = match pass {
            Ok((0, log, copied)) if log > 0 && log == last_log && copied == log => {
                // At rest: nothing written since the last pass and every frame copied. The log
                // would otherwise keep its largest size on disk (up to AUTOCHECKPOINT_BYTES and
                // beyond) until the next write rewinds it; TRUNCATE empties the file. It waits
                // for no one (the 50 ms busy timeout): with a reader or a writer about, it is
                // tried again at the next rest.
                if let Err(e) = conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)") {
                    tracing::debug!(error = %e, "truncating checkpoint skipped");
                }
                last_log = 0;
                CHECKPOINT_EVERY
            }
            Ok((0, log, _)) if log >= 0 => {
                // A log smaller than before was rewound: all of it is new.
                let grew = if log >= last_log { log - last_log } else { log };
                let pause = checkpoint_pause(grew, last_pass.elapsed());
                (last_log, last_pass) = (log, std::time::Instant::now());
                pause
            }
            // Another checkpoint holds the lock (the writer's own, rewinding the log): look
            // again soon, keeping the last reading.
            Ok(_) => CHECKPOINT_BUSY_EVERY,
            Err(e) => {
                tracing::debug!(error = %e, "passive checkpoint skipped");
                CHECKPOINT_EVERY
            }
        };
    }
}

/// Ends the open transaction, if any (SQLite may have rolled it back already, after an I/O
/// error); tries twice, then leaves it to the next group's BEGIN to try again.
fn roll_back(conn: &Connection) {
    for _ in 0..2 {
        if conn.is_autocommit() {
            return;
        }
        if let Err(e) = conn.execute_batch("ROLLBACK") {
            tracing::error!(error = %e, "sqlite writer could not roll back");
        }
    }
}

fn writer_loop(
    conn: &Connection,
    rx: mpsc::Receiver<Job>,
    max_batch: usize,
    mut on_rollback: RollbackHook,
) {
    let mut completions: Vec<Completion> = Vec::with_capacity(max_batch);
    let mut groups = 0_u64;
    // On a full disk every group fails alike: one line a second says so.
    let failed_commits = crate::throttle::Throttle::new(crate::throttle::LOG_EVERY);
    while let Ok(first) = rx.recv() {
        let began = conn.execute_batch("BEGIN IMMEDIATE");
        if let Err(e) = began {
            tracing::error!(error = %e, "sqlite writer could not begin a transaction");
            // A transaction left open by a ROLLBACK that failed: end it, or no group could
            // ever begin again.
            if !conn.is_autocommit() {
                roll_back(conn);
                on_rollback(conn);
            }
            // In autocommit now: the job sees it and does not run (see `submit`).
            first(conn).0(Err((e.to_string(), Some(Arc::new(e)))));
            continue;
        }
        let (done, mut doomed) = first(conn);
        completions.push(done);
        while completions.len() < max_batch {
            match rx.try_recv() {
                Ok(job) => {
                    let (done, d) = job(conn);
                    doomed |= d;
                    completions.push(done);
                }
                Err(_) => break,
            }
        }
        let commit = if doomed {
            tracing::error!("a job failed after writing without a savepoint: group rolled back");
            roll_back(conn);
            Err((
                "rolled back: a job of the same group failed after writing".to_owned(),
                None,
            ))
        } else if conn.is_autocommit() {
            // SQLite itself rolled the transaction back after a job's error (disk full, an I/O
            // error): a COMMIT would only say that no transaction is active.
            Err(("rolled back by SQLite after a job of the same group failed (e.g. disk full); nothing of the group was written".to_owned(), None))
        } else {
            conn.execute_batch("COMMIT").map_err(|e| {
                if let Some(left_out) = failed_commits.allow() {
                    tracing::error!(error = %e, left_out, "sqlite group commit failed (left_out: failed commits not logged since the last line)");
                }
                roll_back(conn);
                (e.to_string(), Some(Arc::new(e)))
            })
        };
        if commit.is_err() {
            on_rollback(conn);
        }
        for done in completions.drain(..) {
            done(commit.clone());
        }
        // After the answers, so that no waiting job pays for the look.
        groups += 1;
        if groups.is_multiple_of(RESIZE_EVERY_GROUPS)
            && let Err(e) = cache::size_writer_cache(conn)
        {
            tracing::warn!(error = %e, "sqlite writer could not size its page cache");
        }
    }
}

/// A pool of read-only connections to one SQLite file (WAL snapshot reads).
#[derive(Debug, Clone)]
pub struct ReadPool {
    pool: r2d2::Pool<r2d2_sqlite::SqliteConnectionManager>,
    /// The database file, named in the store failures of its reads.
    path: Arc<Path>,
}

impl ReadPool {
    /// Opens up to `size` read-only connections to `path` (the file must exist).
    pub fn open(path: &Path, size: u32) -> Result<Self, SqliteError> {
        let manager = r2d2_sqlite::SqliteConnectionManager::file(path)
            .with_flags(read_only_flags())
            .with_init(|c| c.busy_timeout(BUSY_TIMEOUT));
        let pool = r2d2::Pool::builder()
            .max_size(size.max(1))
            .min_idle(Some(1))
            .build(manager)?;
        Ok(Self {
            pool,
            path: Arc::from(path),
        })
    }

    /// Runs `f` at once on the calling thread if a pooled read connection is free, else as
    /// [`ReadPool::read`] does. For point reads of a few pages (a link lookup by primary key):
    /// a hand-off to a blocking thread and back costs more than the read, and a free
    /// connection never makes the caller wait. The read itself may still touch the disk when
    /// its pages are not in the OS cache; longer reads use [`ReadPool::read`].
    pub async fn read_point<R, E, F>(&self, f: F) -> Result<R, E>
    where
        F: FnOnce(&Connection) -> Result<R, E> + Send + 'static,
        R: Send + 'static,
        E: From<SqliteError> + AsStoreError + Send + 'static,
    {
        match self.pool.try_get() {
            Some(conn) => f(&conn).map_err(|e| in_file(e, Some(&self.path))),
            None => self.read(f).await,
        }
    }

    /// Runs `f` on a pooled read connection in a blocking task.
    pub async fn read<R, E, F>(&self, f: F) -> Result<R, E>
    where
        F: FnOnce(&Connection) -> Result<R, E> + Send + 'static,
        R: Send + 'static,
        E: From<SqliteError> + AsStoreError + Send + 'static,
    {
        let pool = self.pool.clone();
        let read = tokio::task::spawn_blocking(move || {
            let conn = pool.get().map_err(|e| E::from(SqliteError::Pool(e)))?;
            f(&conn)
        })
        .await
        .map_err(|e| E::from(SqliteError::Task(e.to_string())))
        .and_then(|r| r);
        read.map_err(|e| in_file(e, Some(&self.path)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    enum TestError {
        Db(SqliteError),
        Refused,
    }
    impl From<SqliteError> for TestError {
        fn from(e: SqliteError) -> Self {
            TestError::Db(e)
        }
    }
    impl From<rusqlite::Error> for TestError {
        fn from(e: rusqlite::Error) -> Self {
            TestError::Db(e.into())
        }
    }
    impl AsStoreError for TestError {
        fn as_store_error(&self) -> Option<&crate::store::StoreError> {
            None
        }
        fn as_store_error_mut(&mut self) -> Option<&mut crate::store::StoreError> {
            None
        }
    }

    #[test]
    fn checkpoints_follow_the_writer_closely_only_while_the_log_grows_fast() {
        let ms = Duration::from_millis;
        assert_eq!(checkpoint_pause(0, ms(250)), CHECKPOINT_EVERY);
        // 1,024 frames/s is not yet busy, over a long or a short pause alike.
        assert_eq!(checkpoint_pause(256, ms(250)), CHECKPOINT_EVERY);
        assert_eq!(checkpoint_pause(5, ms(5)), CHECKPOINT_EVERY);
        // 5,000 sends/s write ~30,000 frames/s: busy whichever pause measured it.
        assert_eq!(checkpoint_pause(7_500, ms(250)), CHECKPOINT_BUSY_EVERY);
        assert_eq!(checkpoint_pause(150, ms(5)), CHECKPOINT_BUSY_EVERY);
        // No division by zero: an instant counts as 1 ms.
        assert_eq!(checkpoint_pause(1, Duration::ZERO), CHECKPOINT_EVERY);
        assert_eq!(checkpoint_pause(2, Duration::ZERO), CHECKPOINT_BUSY_EVERY);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_jobs_commit_and_a_failing_job_rolls_back_alone() {
        let (_dir, path, conn) = table_t();
        let writer = std::sync::Arc::new(GroupWriter::start("t", conn, 64));
        let mut tasks = Vec::new();
        for i in 0..200i64 {
            let w = std::sync::Arc::clone(&writer);
            tasks.push(tokio::spawn(async move {
                w.write(move |c| {
                    c.execute("INSERT INTO t (v) VALUES (?1)", [i])?;
                    if i % 10 == 0 {
                        return Err(TestError::Refused);
                    }
                    Ok(i)
                })
                .await
            }));
        }
        let mut ok = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(_) => ok += 1,
                Err(TestError::Refused) => {}
                Err(TestError::Db(e)) => panic!("db error {e}"),
            }
        }
        assert_eq!(ok, 180);
        let pool = ReadPool::open(&path, 2).unwrap();
        let (count, refused): (i64, i64) = pool
            .read(|c| {
                Ok::<_, TestError>(c.query_row(
                    "SELECT count(*), sum(v % 10 = 0) FROM t",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?)
            })
            .await
            .unwrap();
        assert_eq!((count, refused), (180, 0));
    }

    /// A job after whose error SQLite itself rolled the group back (as on a full disk, here
    /// by a `ROLLBACK` in the job) keeps its own error, and the group's other jobs hear that
    /// SQLite rolled it back, not "cannot commit - no transaction is active".
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_group_that_sqlite_rolled_back_answers_each_job_with_the_cause() {
        let (_dir, path, conn) = table_t();
        let writer = std::sync::Arc::new(GroupWriter::start("t", conn, 64));
        let insert = |v: i64| {
            let w = std::sync::Arc::clone(&writer);
            tokio::spawn(async move {
                w.write(move |c| {
                    if v == 1 {
                        // Holds the writer while the next two jobs queue into its group.
                        std::thread::sleep(Duration::from_millis(300));
                    }
                    c.execute("INSERT INTO t (v) VALUES (?1)", [v])?;
                    Ok::<_, TestError>(())
                })
                .await
            })
        };
        let first = insert(1);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let second = insert(2);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let w = std::sync::Arc::clone(&writer);
        let failing = tokio::spawn(async move {
            w.write(|c| {
                c.execute_batch("ROLLBACK")?;
                Err::<(), _>(TestError::Refused)
            })
            .await
        });
        assert!(matches!(failing.await.unwrap(), Err(TestError::Refused)));
        for job in [first, second] {
            match job.await.unwrap() {
                Err(TestError::Db(SqliteError::CommitFailed { reason: m, .. })) => {
                    assert!(m.contains("rolled back by SQLite"), "{m}")
                }
                other => panic!("{other:?}"),
            }
        }
        let pool = ReadPool::open(&path, 1).unwrap();
        let count: i64 = pool
            .read(|c| Ok::<_, TestError>(c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))?))
            .await
            .unwrap();
        assert_eq!(count, 0);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_point_read_runs_on_the_caller_while_a_connection_is_free() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        Connection::open(&path).unwrap();
        let pool = ReadPool::open(&path, 1).unwrap();
        async fn on(pool: &ReadPool) -> Result<std::thread::ThreadId, TestError> {
            pool.read_point(|_| Ok(std::thread::current().id())).await
        }
        let caller = std::thread::current().id();
        assert_eq!(on(&pool).await.unwrap(), caller);
        // The only connection taken: the read waits for it on a blocking thread instead.
        let held = pool.pool.get().unwrap();
        let read = tokio::spawn({
            let pool = pool.clone();
            async move { on(&pool).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!read.is_finished());
        drop(held);
        assert_ne!(read.await.unwrap().unwrap(), caller);
    }

    #[test]
    fn a_log_without_its_database_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gone.db");
        std::fs::write(dir.path().join("gone.db-wal"), [7u8; 4096]).unwrap();
        let err = open_rw(&path).unwrap_err().to_string();
        assert!(
            err.ends_with("gone.db-wal holds 4096 bytes of log but its database file is missing: put the database file back beside it, or move the log away"),
            "{err}"
        );
        assert!(!path.exists(), "no new database file was made");
        // An empty log (left by a clean stop) is no one's: the file is made.
        std::fs::write(dir.path().join("gone.db-wal"), []).unwrap();
        open_rw(&path).unwrap();
    }

    #[test]
    fn a_paged_open_sizes_new_files_and_keeps_existing_ones() {
        let dir = tempfile::tempdir().unwrap();
        let page_size =
            |c: &Connection| -> i64 { c.query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap() };
        let journal = |c: &Connection| -> String {
            c.query_row("PRAGMA journal_mode", [], |r| r.get(0))
                .unwrap()
        };
        let new = dir.path().join("new.db");
        let conn = open_rw_paged(&new, 1024).unwrap();
        conn.execute_batch("CREATE TABLE t (v BLOB); INSERT INTO t VALUES (zeroblob(3000));")
            .unwrap();
        assert_eq!((page_size(&conn), journal(&conn).as_str()), (1024, "wal"));
        drop(conn);
        let conn = open_rw_paged(&new, 4096).unwrap();
        assert_eq!(page_size(&conn), 1024);
        let old = dir.path().join("old.db");
        let conn = open_rw(&old).unwrap();
        conn.execute_batch("CREATE TABLE t (v INTEGER); INSERT INTO t VALUES (7);")
            .unwrap();
        drop(conn);
        let conn = open_rw_paged(&old, 1024).unwrap();
        let v: i64 = conn.query_row("SELECT v FROM t", [], |r| r.get(0)).unwrap();
        assert_eq!((page_size(&conn), v), (4096, 7));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_writer_rewinds_its_log_at_the_same_bytes_whatever_the_page_size() {
        let dir = tempfile::tempdir().unwrap();
        let mut rewinds = Vec::new();
        for size in [1024_u32, 4096] {
            let conn = open_rw_paged(&dir.path().join(format!("p{size}.db")), size).unwrap();
            let writer = GroupWriter::start("pages", conn, 8);
            let pages: i64 = writer
                .write(|c: &Connection| -> Result<i64, TestError> {
                    Ok(c.query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0))?)
                })
                .await
                .unwrap();
            rewinds.push((pages, pages * i64::from(size)));
        }
        let bytes = AUTOCHECKPOINT_BYTES;
        assert_eq!(rewinds, [(1_000_000, bytes), (250_000, bytes)]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_writer_at_rest_leaves_an_empty_log() {
        let (_dir, path, conn) = table_t();
        let writer = GroupWriter::start("rest", conn, 8);
        for v in 0..2_000 {
            writer.write(insert(v)).await.unwrap();
        }
        let wal = format!("{}-wal", path.display());
        let log_bytes = || std::fs::metadata(&wal).map_or(0, |m| m.len());
        assert!(log_bytes() > 0, "the writes went through the log");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while log_bytes() > 0 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(log_bytes(), 0, "the log is emptied once the writer rests");
        // The rows are all in the database file, and writing goes on.
        writer.write(insert(2_000)).await.unwrap();
        let n: i64 = Connection::open(&path)
            .unwrap()
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 2_001);
    }

    /// A fresh database file (kept while the returned dir lives) with table `t (v INTEGER)`, and
    /// a read-write connection to it.
    fn table_t() -> (tempfile::TempDir, std::path::PathBuf, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let conn = open_rw(&path).unwrap();
        conn.execute_batch("CREATE TABLE t (v INTEGER NOT NULL)")
            .unwrap();
        (dir, path, conn)
    }

    type TestJob = Box<dyn FnOnce(&Connection) -> Result<i64, TestError> + Send>;

    /// A job inserting `v` into `t`.
    fn insert(v: i64) -> TestJob {
        Box::new(move |c: &Connection| {
            c.execute("INSERT INTO t (v) VALUES (?1)", [v])?;
            Ok(v)
        })
    }

    /// `jobs` answers: the job at `cause` failed with its own error, and each of the others
    /// was told its group was rolled back.
    fn assert_group_rolled_back(out: &[Result<i64, TestError>], jobs: usize, cause: usize) {
        assert_eq!(out.len(), jobs);
        for (i, r) in out.iter().enumerate() {
            let rolled_back = matches!(r, Err(TestError::Db(SqliteError::CommitFailed { .. })));
            assert!(r.is_err() && rolled_back == (i != cause), "{i}: {r:?}");
        }
    }

    /// Jobs queued while the writer is held by a first job share one group transaction.
    async fn one_group(
        writer: &std::sync::Arc<GroupWriter>,
        jobs: Vec<TestJob>,
    ) -> Vec<Result<i64, TestError>> {
        let (hold_tx, hold_rx) = std::sync::mpsc::channel::<()>();
        let w = std::sync::Arc::clone(writer);
        let first = tokio::spawn(async move {
            w.write_unguarded(move |_| {
                let _ = hold_rx.recv();
                Ok::<_, TestError>(0)
            })
            .await
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut tasks = Vec::new();
        for job in jobs {
            let w = std::sync::Arc::clone(writer);
            tasks.push(tokio::spawn(async move { w.write_unguarded(job).await }));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        hold_tx.send(()).unwrap();
        let mut out = vec![first.await.unwrap()];
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn an_unguarded_job_failing_before_writing_leaves_its_group_alone_and_after_writing_rolls_it_back()
     {
        let (_dir, path, conn) = table_t();
        let rollbacks = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = std::sync::Arc::clone(&rollbacks);
        let writer = std::sync::Arc::new(GroupWriter::start_with_rollback_hook(
            "t",
            conn,
            64,
            Box::new(move |c: &Connection| {
                // Runs after the ROLLBACK: the connection sees only committed rows.
                let n: i64 = c
                    .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
                    .unwrap();
                assert_eq!(n, 2);
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }),
        ));
        let count = |path: std::path::PathBuf| {
            let c = Connection::open(path).unwrap();
            c.query_row("SELECT count(*), coalesce(sum(v), 0) FROM t", [], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
            })
            .unwrap()
        };

        // Refused before any write: the neighbours commit.
        let out = one_group(
            &writer,
            vec![insert(1), Box::new(|_| Err(TestError::Refused)), insert(2)],
        )
        .await;
        assert!(matches!(out[2], Err(TestError::Refused)));
        assert_eq!(
            [&out[0], &out[1], &out[3]].map(|r| r.as_ref().ok().copied()),
            [Some(0), Some(1), Some(2)]
        );
        assert_eq!(count(path.clone()), (2, 3));
        assert_eq!(rollbacks.load(std::sync::atomic::Ordering::SeqCst), 0);

        // Failed after writing: the whole group is rolled back, every job told so.
        let half = Box::new(|c: &Connection| {
            c.execute("INSERT INTO t (v) VALUES (100)", [])?;
            Err(TestError::Refused)
        });
        let out = one_group(&writer, vec![insert(10), half, insert(20)]).await;
        assert_group_rolled_back(&out, 4, 2);
        assert!(matches!(out[2], Err(TestError::Refused)));
        assert_eq!(
            count(path.clone()),
            (2, 3),
            "nothing of that group was written"
        );
        assert_eq!(rollbacks.load(std::sync::atomic::Ordering::SeqCst), 1);

        // The writer goes on.
        let out = one_group(&writer, vec![insert(7)]).await;
        assert_eq!(out[1].as_ref().ok(), Some(&7));
        assert_eq!(count(path), (3, 10));
        assert_eq!(rollbacks.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_job_that_panics_rolls_back_its_group_and_the_writer_goes_on() {
        let (_dir, path, conn) = table_t();
        let writer = std::sync::Arc::new(GroupWriter::start("t", conn, 64));
        let count = |path: &std::path::Path| -> i64 {
            Connection::open(path)
                .unwrap()
                .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
                .unwrap()
        };
        let panics: TestJob = Box::new(|c: &Connection| {
            c.execute("INSERT INTO t (v) VALUES (100)", [])?;
            panic!("a bug in a write job")
        });
        // The job that panicked is told so, every other job of the group that its group was
        // rolled back.
        let out = one_group(&writer, vec![insert(1), panics, insert(2)]).await;
        assert_group_rolled_back(&out, 4, 2);
        assert!(
            matches!(&out[2], Err(TestError::Db(SqliteError::Task(m))) if m.contains("panicked")),
            "{:?}",
            out[2]
        );
        assert_eq!(count(&path), 0, "nothing of that group was written");
        // In a savepoint (`write`), after a write: the same.
        let guarded = writer
            .write(|c: &Connection| -> Result<i64, TestError> {
                c.execute("INSERT INTO t (v) VALUES (200)", [])?;
                panic!("a bug in a guarded write job")
            })
            .await;
        assert!(
            matches!(&guarded, Err(TestError::Db(SqliteError::Task(m))) if m.contains("panicked")),
            "{guarded:?}"
        );
        assert_eq!(count(&path), 0);
        // The writer goes on.
        assert_eq!(writer.write(insert(7)).await.unwrap(), 7);
        assert_eq!(count(&path), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_whose_transaction_cannot_begin_is_not_run() {
        let (_dir, path, conn) = table_t();
        conn.busy_timeout(Duration::from_millis(20)).unwrap();
        let writer = GroupWriter::start("t", conn, 64);
        // Another connection holds the write lock, so BEGIN IMMEDIATE fails (SQLITE_BUSY); the
        // lock is gone a moment later, which the job plays by releasing it first thing.
        let other = Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let out = writer
            .write_unguarded(move |c| {
                other.execute_batch("COMMIT")?;
                c.execute("INSERT INTO t (v) VALUES (1)", [])?;
                Ok::<_, TestError>(1)
            })
            .await;
        assert!(
            matches!(out, Err(TestError::Db(SqliteError::CommitFailed { .. }))),
            "{out:?}"
        );
        let n: i64 = Connection::open(&path)
            .unwrap()
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 0, "a caller told it failed must find nothing written");
    }
}
