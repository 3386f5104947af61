//! A bounded pool for the CPU-heavy part of a request: decompressing and parsing a large
//! ingest body, rendering a mailing. Such work on the runtime's worker threads would hold
//! them for seconds, and every other request (`/healthz`, a chat SEND) would wait behind it;
//! on the pool it runs on blocking threads, at most one job per core at a time, while the
//! workers keep answering. A request waiting for a slot holds only its undecoded body.

use std::sync::Arc;

use tokio::sync::Semaphore;

/// Input up to this many bytes (an uncompressed body) is decoded on the request's own task:
/// its parse takes well under a millisecond, less than handing it to another thread.
pub const INLINE_INPUT_BYTES: usize = 64 * 1024;

/// Runs jobs on blocking threads, at most `size` at a time. Cloning shares the slots.
#[derive(Debug, Clone)]
pub struct CpuPool {
    slots: Arc<Semaphore>,
    size: usize,
}

impl CpuPool {
    /// A pool running at most `size` jobs at a time (at least 1).
    pub fn new(size: usize) -> Self {
        let size = size.max(1);
        Self {
            slots: Arc::new(Semaphore::new(size)),
            size,
        }
    }

    /// A pool with one slot per core of this machine.
    pub fn per_core() -> Self {
        Self::new(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// Jobs that run at once, at most.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Runs `job` on a blocking thread once a slot is free and returns its result. A panic
    /// in `job` is resumed here, as if it had run on the caller's task. Dropping the future
    /// while the job runs lets the job finish and then frees its slot.
    pub async fn run<T, F>(&self, job: F) -> T
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        // The semaphore is never closed, so acquiring fails only if it were.
        let slot = Arc::clone(&self.slots)
            .acquire_owned()
            .await
            .expect("the CPU pool's semaphore is never closed");
        let handle = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            job()
        });
        match handle.await {
            Ok(out) => out,
            Err(e) => match e.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                // Only a runtime shutting down cancels a blocking task.
                Err(e) => panic!("CPU pool job cancelled: {e}"),
            },
        }
    }

    /// Runs `job` on the pool when `heavy`, else right here on the caller's task.
    pub async fn run_if<T, F>(&self, heavy: bool, job: F) -> T
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        if heavy { self.run(job).await } else { job() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn at_most_size_jobs_run_at_once() {
        let pool = CpuPool::new(2);
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let jobs: Vec<_> = (0..8)
            .map(|i| {
                let (pool, running, peak) = (pool.clone(), Arc::clone(&running), Arc::clone(&peak));
                tokio::spawn(async move {
                    pool.run(move || {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(20));
                        running.fetch_sub(1, Ordering::SeqCst);
                        i * 10
                    })
                    .await
                })
            })
            .collect();
        let mut out = Vec::new();
        for j in jobs {
            out.push(j.await.unwrap());
        }
        assert_eq!(out, (0..8).map(|i| i * 10).collect::<Vec<_>>());
        assert_eq!(peak.load(Ordering::SeqCst), 2);
        assert_eq!(CpuPool::new(0).size(), 1);
    }

    #[tokio::test]
    async fn a_panicking_job_panics_the_caller_and_frees_its_slot() {
        let pool = CpuPool::new(1);
        let p = pool.clone();
        let caught = tokio::spawn(async move { p.run(|| panic!("boom")).await }).await;
        assert!(caught.unwrap_err().is_panic());
        assert_eq!(pool.run(|| 7).await, 7);
        assert_eq!(pool.run_if(false, || 8).await, 8);
    }
}
