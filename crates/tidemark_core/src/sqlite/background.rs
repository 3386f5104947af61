//! Background work on the embedded engine: threads that yield the CPU to the commit path.
//!
//! On a machine with few cores the SEND path (the HTTP workers and the hot store's writer)
//! shares them with work that may lag: WAL checkpoints, and in `tiered` mode the archiver's
//! reads of the outbox and the archive's writer. Those run on threads of their own at
//! [`Priority::Background`], so that when both want a core the scheduler gives it to the
//! commit path; with cores to spare they run as before. On Linux that is:
//!
//! - **CPU: `SCHED_IDLE`.** A lower nice value is not enough under the kernel's EEVDF
//!   scheduler: a thread at any nice, once on a core, runs out its slice (milliseconds) before
//!   a SEND thread woken meanwhile gets the core, so every archive batch (a burst of some
//!   20 ms of CPU every 250 ms at 5,000 sends/s) held up the SENDs that came during it. A
//!   `SCHED_IDLE` thread gives the core up at once. Issue 2, `tiered` on tmpfs (the CPU
//!   alone), two interleaved pairs: SEND_ACK p99 at 5,000 sends/s 1.28 / 1.17 ms against
//!   2.84 / 2.60 ms at nice 10 (`hot-only` 0.81–1.00 ms), at 10,000 1.64 / 1.90 against
//!   4.58 / 3.88 ms; nice 19 did no better than nice 10. Nice [`BACKGROUND_NICE`] is still
//!   set, for where `SCHED_IDLE` is not.
//! - **IO: best-effort, lowest level, set explicitly (first).** Left unset, the IO priority
//!   follows the CPU policy, and a `SCHED_IDLE` thread's writes fall into the idle IO class,
//!   which the disk's queue (mq-deadline) serves only when nothing else waits: the
//!   checkpointer's writes then held up the commits' fsyncs. `hot-only` at 5,000 sends/s on
//!   disk: p99 9–11 ms with the idle class, 3.2–3.8 ms best-effort, as at nice 10. So a thread
//!   whose IO priority cannot be set stays off `SCHED_IDLE`.
//!
//! What this costs: under CPU saturation a `SCHED_IDLE` thread gets a small share of a core
//! (weight 3 against 1,024 for each busy normal thread). The archive then lags (the
//! archive-lag metric shows it; nothing is trimmed that is not archived; at 20,000 sends/s on
//! the 2-core test machine it kept up, lag p99 2.0 s against 3.1 s at nice 10), a checkpoint
//! pass or an outbox read takes longer, and while one holds its snapshot the log grows. A
//! lock held by such a thread would make normal threads wait with it; the bundled SQLite is
//! built without the process-wide locks of its page cache and memory statistics for that
//! reason (`.cargo/config.toml`), and no normal thread waits on these threads except the
//! archiver and the trimmer (background work themselves) and shutdown, which joins them.
//!
//! Before, with nice 10 (issue 2, `tiered` at 10,000 sends/s, three interleaved pairs): p99
//! 30.2 / 42.2 / 39.6 ms against 43.1 / 56.7 / 51.2 ms at normal priority.

use std::panic::AssertUnwindSafe;
use std::path::Path;

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::job_thread::JobThread;
use super::{BUSY_TIMEOUT, SqliteError, read_only_flags};

/// The nice value of [`Priority::Background`] threads (0 is the default, 19 the lowest): what
/// they run at where `SCHED_IDLE` is refused.
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
    use thread_priority::ThreadPriority;
    use thread_priority::unix::{
        NormalThreadSchedulePolicy, ThreadSchedulePolicy, set_thread_priority_and_policy,
        thread_native_id, thread_schedule_policy,
    };

    // On Linux the nice value and the IO priority are per thread, addressed by its thread id
    // (0 = the calling thread).
    let tid = rustix::thread::gettid();
    let nice_before = rustix::process::getpriority_process(Some(tid)).unwrap_or(0);

    // IO first: best-effort at the lowest level, set explicitly, because left unset a
    // SCHED_IDLE thread's IO is in the idle class (see the module docs). Never raised: a
    // thread already in the idle class (a process started under `ionice -c3`) stays there.
    let this_thread = ioprio::Target::Process(ioprio::Pid::from_raw(0));
    let io_set = match ioprio::get_priority(this_thread) {
        Ok(io) if io.class() == Some(ioprio::Class::Idle) => Ok(()),
        _ => ioprio::set_priority(
            this_thread,
            ioprio::Priority::new(ioprio::Class::BestEffort(ioprio::BePriorityLevel::lowest())),
        ),
    };

    // CPU: SCHED_IDLE, only once the IO priority is explicit (an unprivileged thread cannot
    // leave SCHED_IDLE again). The library also sets the nice value to 0, which a thread
    // started at a higher nice may not do without privileges: so the policy is checked, not
    // the result.
    match io_set {
        Err(error) => tracing::warn!(
            %error,
            "could not set a background thread's IO priority; lowering its nice value only"
        ),
        Ok(()) => {
            let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
            let set = set_thread_priority_and_policy(thread_native_id(), ThreadPriority::Min, idle);
            if thread_schedule_policy().ok() != Some(idle) {
                tracing::warn!(
                    error = ?set.err(),
                    "could not move a background thread to SCHED_IDLE; lowering its nice value only"
                );
            }
        }
    }

    // The nice value, which weighs only where SCHED_IDLE was not set; never raised: a process
    // started at a lower priority stays there.
    let nice = nice_before.max(BACKGROUND_NICE);
    let lowered = rustix::process::getpriority_process(Some(tid)).and_then(|now| {
        if now < nice {
            rustix::process::setpriority_process(Some(tid), nice)
        } else {
            Ok(())
        }
    });
    if let Err(error) = lowered {
        tracing::warn!(%error, "could not lower a background thread's nice value");
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
        Ok(Self { jobs })
    }

    /// Runs `f` on the thread's connection, after the reads queued before it.
    pub async fn read<R, E, F>(&self, f: F) -> Result<R, E>
    where
        F: FnOnce(&Connection) -> Result<R, E> + Send + 'static,
        R: Send + 'static,
        E: From<SqliteError> + Send + 'static,
    {
        let (done_tx, done_rx) = oneshot::channel();
        let job: ReadJob = Box::new(move |conn| {
            let _ = done_tx.send(f(conn));
        });
        self.jobs
            .send(job)
            .map_err(|_| SqliteError::Task("the read thread has stopped".into()))?;
        done_rx
            .await
            .map_err(|_| SqliteError::Task("the read job panicked".into()))?
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
            let (policy, io, nice) = reader
                .read(|_| {
                    let tid = rustix::thread::gettid();
                    let policy = thread_priority::unix::thread_schedule_policy();
                    let io =
                        ioprio::get_priority(ioprio::Target::Process(ioprio::Pid::from_raw(0)));
                    let nice = rustix::process::getpriority_process(Some(tid));
                    Ok::<_, SqliteError>((policy, io, nice))
                })
                .await
                .unwrap();
            assert_eq!(
                policy.unwrap(),
                thread_priority::unix::ThreadSchedulePolicy::Normal(
                    thread_priority::unix::NormalThreadSchedulePolicy::Idle
                )
            );
            // Best-effort, not the idle IO class SCHED_IDLE would otherwise imply.
            assert_eq!(
                io.unwrap().class(),
                Some(ioprio::Class::BestEffort(ioprio::BePriorityLevel::lowest()))
            );
            let nice = nice.expect("getpriority");
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

    /// A thread already in the idle IO class (a process started under `ionice -c3`) keeps it:
    /// background priority lowers, never raises.
    #[cfg(target_os = "linux")]
    #[test]
    fn background_priority_never_raises_the_io_class() {
        let this_thread = ioprio::Target::Process(ioprio::Pid::from_raw(0));
        let (io, policy) = std::thread::spawn(move || {
            ioprio::set_priority(this_thread, ioprio::Priority::new(ioprio::Class::Idle)).unwrap();
            Priority::Background.apply_to_current_thread();
            let io = ioprio::get_priority(this_thread).unwrap();
            (
                io.class(),
                thread_priority::unix::thread_schedule_policy().unwrap(),
            )
        })
        .join()
        .unwrap();
        assert_eq!(io, Some(ioprio::Class::Idle));
        assert_eq!(
            policy,
            thread_priority::unix::ThreadSchedulePolicy::Normal(
                thread_priority::unix::NormalThreadSchedulePolicy::Idle
            )
        );
    }
}
