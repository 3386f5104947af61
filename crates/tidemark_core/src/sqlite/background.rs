//! Background work on the embedded engine: threads that yield the CPU to the commit path.
//!
//! On a machine with few cores the SEND path (the HTTP workers and the hot store's writer)
//! shares them with work that may lag: WAL checkpoints, and in `tiered` mode the archiver's
//! reads of the outbox and the archive's writer. Those run on threads of their own at
//! [`Priority::Background`] (nice [`BACKGROUND_NICE`] on Linux), so that when both want a core
//! the scheduler gives it to the commit path; with cores to spare they run as before.
//! On a 2-core machine at 10,000 sends/s (`tiered`) this lowered the SEND p99 by about a
//! quarter; with cores to spare it changes nothing.
//!
//! Not `SCHED_IDLE`: these threads write files, and one descheduled while it holds a kernel lock
//! (the filesystem journal's, the file's) makes a commit's fsync wait for a free core; its IO
//! priority would also fall into the idle class, holding up the commits' fsyncs behind the
//! checkpointer's writes. A nice value keeps the IO class and only yields the CPU.

use std::panic::AssertUnwindSafe;
use std::path::Path;

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::job_thread::JobThread;
use super::{BUSY_TIMEOUT, SqliteError, read_only_flags};
use crate::store::AsStoreError;

/// The nice value of [`Priority::Background`] threads (0 is the default, 19 the lowest).
pub const BACKGROUND_NICE: i32 = 10;

/// How a thread of the embedded engine is scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Priority {
    /// Like the rest of the process: for work someone waits on (a commit, a read request).
    #[default]
    Normal,
    /// Yields to normal threads (see the module docs): for work that may lag.
    Background,
}

impl Priority {
    /// Applies this priority to the calling thread (never raising it). A thread cannot raise
    /// its priority again without privileges, so call it first thing, on a thread of its own.
    /// Failure is logged, not returned: the thread works the same, only less politely.
    pub fn apply_to_current_thread(self) {
        if self == Priority::Background {
            lower_current_thread();
        }
    }
}

#[cfg(target_os = "linux")]
fn lower_current_thread() {
    // On Linux the nice value is per thread, addressed by its thread id.
    // Never raise it: a process started at a lower priority stays there.
    let tid = rustix::thread::gettid();
    let lowered = rustix::process::getpriority_process(Some(tid)).and_then(|nice| {
        if nice < BACKGROUND_NICE {
            rustix::process::setpriority_process(Some(tid), BACKGROUND_NICE)
        } else {
            Ok(())
        }
    });
    if let Err(error) = lowered {
        tracing::warn!(%error, "could not lower a background thread's priority");
    }
}

#[cfg(not(target_os = "linux"))]
fn lower_current_thread() {}

type ReadJob = Box<dyn FnOnce(&Connection) + Send>;

/// One read-only connection on a thread of its own, at [`Priority::Background`]: for a
/// background reader (the archiver's outbox reads), whose work must not run on the shared
/// blocking pool — a pool thread cannot be given back its priority after such a job.
#[derive(Debug)]
pub struct ReadThread {
    jobs: JobThread<ReadJob>,
    /// The database file, named in the store failures of its reads.
    path: std::path::PathBuf,
}

impl ReadThread {
    /// Opens `path` (which must exist) read-only and starts the thread `sqlite-read-<name>`.
    pub fn open(path: &Path, name: &str) -> Result<Self, SqliteError> {
        let conn = Connection::open_with_flags(path, read_only_flags())?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        let jobs = JobThread::<ReadJob>::spawn(format!("sqlite-read-{name}"), move |rx| {
            Priority::Background.apply_to_current_thread();
            while let Ok(job) = rx.recv() {
                // A job that panics fails alone (its caller sees the answer channel closed);
                // the thread goes on serving the next ones, as a pool would.
                let _ = std::panic::catch_unwind(AssertUnwindSafe(|| job(&conn)));
            }
        })
        .map_err(|e| SqliteError::Task(format!("spawning the read thread: {e}")))?;
        Ok(Self {
            jobs,
            path: path.to_path_buf(),
        })
    }

    /// Runs `f` on the thread's connection, after the reads queued before it.
    pub async fn read<R, E, F>(&self, f: F) -> Result<R, E>
    where
        F: FnOnce(&Connection) -> Result<R, E> + Send + 'static,
        R: Send + 'static,
        E: From<SqliteError> + AsStoreError + Send + 'static,
    {
        let (done_tx, done_rx) = oneshot::channel();
        let job: ReadJob = Box::new(move |conn| {
            let _ = done_tx.send(f(conn));
        });
        self.jobs
            .send(job)
            .map_err(|_| SqliteError::Task("the read thread has stopped".into()))?;
        let read = done_rx
            .await
            .map_err(|_| SqliteError::Task("the read job panicked".into()))?;
        read.map_err(|e| super::in_file(e, Some(&self.path)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_run_on_a_background_thread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.db");
        Connection::open(&path)
            .unwrap()
            .execute_batch("CREATE TABLE t (v INTEGER); INSERT INTO t VALUES (7);")
            .unwrap();
        let reader = ReadThread::open(&path, "test").unwrap();
        let (v, thread) = reader
            .read(|conn| {
                let v: i64 = conn.query_row("SELECT v FROM t", [], |r| r.get(0))?;
                let thread = std::thread::current().name().map(str::to_owned);
                Ok::<_, SqliteError>((v, thread))
            })
            .await
            .unwrap();
        assert_eq!(v, 7);
        assert_eq!(thread.as_deref(), Some("sqlite-read-test"));
        #[cfg(target_os = "linux")]
        {
            let nice = reader
                .read(|_| {
                    let tid = rustix::thread::gettid();
                    Ok::<_, SqliteError>(rustix::process::getpriority_process(Some(tid)))
                })
                .await
                .unwrap()
                .expect("getpriority");
            assert!(nice >= BACKGROUND_NICE, "nice {nice}");
        }
        // Read-only: a write is refused.
        let write = reader
            .read(|conn| {
                conn.execute("INSERT INTO t VALUES (8)", [])
                    .map_err(SqliteError::from)
            })
            .await;
        assert!(write.is_err());
        // A job that panics fails alone; the next one is served.
        let panicked = reader
            .read(|_| -> Result<(), SqliteError> { panic!("a bug in a read job") })
            .await;
        assert!(matches!(panicked, Err(SqliteError::Task(m)) if m.contains("panicked")));
        let after: i64 = reader
            .read(|conn| Ok::<_, SqliteError>(conn.query_row("SELECT v FROM t", [], |r| r.get(0))?))
            .await
            .unwrap();
        assert_eq!(after, 7);
    }
}
