//! Whether the commit path works, for `/readyz`.
//!
//! A store can answer reads while every write fails: on a full disk SQLite reads on and every
//! commit fails with "database or disk is full", so a read probe says ready while every SEND
//! answers 503. So the SEND path reports here: each commit that fails on a store
//! ([`crate::ChatError::is_retryable`]) marks the path failing, the next one that commits a new
//! message clears it (a retry answered with its original ACK commits nothing), and `/readyz`
//! answers 503 for [`NOT_READY_AFTER_FAILURE`] after a failure that no commit has cleared
//! since. It recovers by itself: once that time passes without a new failure it says ready
//! again, a load balancer that took the server out sends it SENDs again, and if they still fail
//! it is taken out again.
//!
//! A full store is the exception to "by itself": the SEND path, the archiver, the trimmer and
//! the recovery worker also report to the node's [`tidemark_core::health::StoreHealth`] under
//! [`HOT_STORE`] and [`ARCHIVE_STORE`], where a full store stays marked until a write to it
//! succeeds.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The hot store's name in the node's [`tidemark_core::health::StoreHealth`]: the SEND path,
/// the trimmer and the recovery worker write to it (and to the outbox beside it).
pub const HOT_STORE: &str = "chat hot store";

/// The archive's name in the node's [`tidemark_core::health::StoreHealth`]: the archiver
/// writes to it.
pub const ARCHIVE_STORE: &str = "chat archive";

/// How long `/readyz` answers "not ready" after a commit failed that no commit has cleared.
pub const NOT_READY_AFTER_FAILURE: Duration = Duration::from_secs(10);

/// The commit path's last failure, shared by the SEND path and `/readyz`.
#[derive(Debug, Clone, Default)]
pub struct CommitHealth {
    /// Set while a failure is recorded: the SEND path reads only this (no lock) when all is
    /// well.
    failing: Arc<AtomicBool>,
    last_failure: Arc<Mutex<Option<(Instant, String)>>>,
}

impl CommitHealth {
    /// A commit succeeded: clears any recorded failure.
    pub fn succeeded(&self) {
        if self.failing.swap(false, Ordering::Relaxed) {
            *self.lock() = None;
        }
    }

    /// A commit failed on a store with `error`.
    pub fn failed(&self, error: &str) {
        *self.lock() = Some((Instant::now(), error.to_owned()));
        self.failing.store(true, Ordering::Relaxed);
    }

    /// `Err` with what failed, while a failure no commit has cleared is younger than
    /// [`NOT_READY_AFTER_FAILURE`].
    pub fn check(&self) -> Result<(), String> {
        self.check_at(Instant::now())
    }

    fn check_at(&self, now: Instant) -> Result<(), String> {
        if !self.failing.load(Ordering::Relaxed) {
            return Ok(());
        }
        match &*self.lock() {
            Some((at, error)) if now.saturating_duration_since(*at) < NOT_READY_AFTER_FAILURE => {
                Err(format!(
                    "the last chat commit failed {:.1} s ago and none has succeeded since: {error}",
                    now.saturating_duration_since(*at).as_secs_f64()
                ))
            }
            _ => Ok(()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(Instant, String)>> {
        self.last_failure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_reported_until_a_commit_succeeds_or_it_is_old() {
        let health = CommitHealth::default();
        assert_eq!(health.check(), Ok(()));
        health.failed("sqlite: database or disk is full");
        let err = health.check().unwrap_err();
        assert!(
            err.starts_with("the last chat commit failed 0.0 s ago")
                && err.ends_with("none has succeeded since: sqlite: database or disk is full"),
            "{err}"
        );
        let later = Instant::now() + NOT_READY_AFTER_FAILURE;
        assert_eq!(
            health.check_at(later),
            Ok(()),
            "ready again after the pause"
        );
        health.succeeded();
        assert_eq!(health.check(), Ok(()));
        // A clone shares the state (the service's and /readyz's are one).
        let other = health.clone();
        other.failed("again");
        assert!(health.check().is_err());
    }
}
