//! A named thread that runs the jobs sent to it, in order: what the group writer and the
//! background read thread both are (one owner, a queue, and a join when the owner is done).

use std::sync::mpsc;
use std::thread::JoinHandle;

/// The thread has stopped: a job sent to it will not run.
#[derive(Debug)]
pub(super) struct Stopped;

/// A thread fed by a queue of `J`s; dropped (or [`JobThread::shutdown`]), it closes the queue
/// and joins the thread, which finishes the jobs already queued.
pub(super) struct JobThread<J> {
    tx: Option<mpsc::Sender<J>>,
    thread: Option<JoinHandle<()>>,
}

impl<J: Send + 'static> JobThread<J> {
    /// Starts thread `name`; `run` gets the queue and returns once it is closed and drained.
    pub(super) fn spawn(
        name: String,
        run: impl FnOnce(mpsc::Receiver<J>) + Send + 'static,
    ) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<J>();
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || run(rx))?;
        Ok(Self {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Queues `job` behind the ones already sent.
    pub(super) fn send(&self, job: J) -> Result<(), Stopped> {
        let tx = self.tx.as_ref().ok_or(Stopped)?;
        tx.send(job).map_err(|_| Stopped)
    }
}

impl<J> JobThread<J> {
    /// Stops accepting jobs, lets the thread finish the ones queued, and joins it.
    pub(super) fn shutdown(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl<J> Drop for JobThread<J> {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl<J> std::fmt::Debug for JobThread<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobThread")
            .field("running", &self.thread.is_some())
            .finish()
    }
}
