//! The one rule every background worker follows after a failed pass: the chat archiver,
//! trimmer and recovery worker, the links partition manager, the events lifecycle (the
//! sending pool retries each mail by its own rule, `tidemark_links::send`).
//!
//! - A **retryable** failure ([`ErrorKind::Unavailable`], [`ErrorKind::Full`], or a domain
//!   error the subsystem calls retryable) is tried again after an exponential back-off: the
//!   worker's first pause, doubled at each failure in a row, up to its longest pause. Each one
//!   is logged as a warning; the back-off bounds how often. A full disk is retried like this
//!   too, since space may come back, and meanwhile `/readyz` says not ready
//!   ([`crate::health`]).
//! - A failure that is **not retryable** ([`ErrorKind::Corrupt`], [`ErrorKind::Rejected`],
//!   [`ErrorKind::Conflict`], or a domain error such as a wrong archive) would fail the same way
//!   at once: it is logged once as an error (again only if a different error takes its place),
//!   and the worker waits [`NOT_RETRYABLE_PAUSE`] (or its longest pause, if longer) before it
//!   tries again, so that an operator's repair is taken up without a restart and nothing
//!   spins.
//! - A pass that succeeds resets both, and says so if the worker was failing.
//!
//! A worker never skips the work that failed: the archiver's batch, the trimmer's pass and
//! the lifecycle's day are all retried whole, so a failure delays them and loses nothing.
//!
//! [`ErrorKind::Unavailable`]: crate::store::ErrorKind::Unavailable
//! [`ErrorKind::Full`]: crate::store::ErrorKind::Full
//! [`ErrorKind::Corrupt`]: crate::store::ErrorKind::Corrupt
//! [`ErrorKind::Rejected`]: crate::store::ErrorKind::Rejected
//! [`ErrorKind::Conflict`]: crate::store::ErrorKind::Conflict

use std::time::Duration;

/// The shortest pause after a failure that is not retryable: a minute.
pub const NOT_RETRYABLE_PAUSE: Duration = Duration::from_secs(60);

/// One worker's failures in a row and what it logged of them (see the module docs).
#[derive(Debug)]
pub struct Retry {
    worker: &'static str,
    first: Duration,
    max: Duration,
    failures: u32,
    /// The non-retryable error logged as such, so that it is not logged again.
    reported: Option<String>,
}

impl Retry {
    /// The rule for `worker` (its name in logs): back-off from `first` doubling up to `max`.
    pub fn new(worker: &'static str, first: Duration, max: Duration) -> Self {
        Self {
            worker,
            first,
            max: max.max(first),
            failures: 0,
            reported: None,
        }
    }

    /// A pass succeeded.
    pub fn succeeded(&mut self) {
        if self.failures > 0 {
            tracing::info!(
                worker = self.worker,
                failures = self.failures,
                "worker recovered"
            );
        }
        self.failures = 0;
        self.reported = None;
    }

    /// A pass failed with `error`: logs it as the rule says and returns the pause before the
    /// next try.
    pub fn failed(&mut self, error: &dyn std::fmt::Display, retryable: bool) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let worker = self.worker;
        if retryable {
            self.reported = None;
            let pause = self.pause(true);
            tracing::warn!(worker, %error, failures = self.failures, retry_in = ?pause, "worker pass failed; retrying");
            return pause;
        }
        let pause = self.pause(false);
        let message = error.to_string();
        if self.reported.as_deref() == Some(message.as_str()) {
            tracing::debug!(worker, %error, "worker pass failed again");
        } else {
            tracing::error!(worker, %error, retry_in = ?pause, "worker pass failed and retrying will not help until the cause is fixed; retrying slowly");
            self.reported = Some(message);
        }
        pause
    }

    /// The pause after the failures counted so far.
    fn pause(&self, retryable: bool) -> Duration {
        if !retryable {
            return self.max.max(NOT_RETRYABLE_PAUSE);
        }
        let doublings = self.failures.saturating_sub(1).min(30);
        self.first.saturating_mul(1_u32 << doublings).min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_failures_back_off_and_others_wait_long() {
        let ms = Duration::from_millis;
        let mut retry = Retry::new("test", ms(100), ms(1000));
        let pauses: Vec<Duration> = (0..6).map(|_| retry.failed(&"busy", true)).collect();
        assert_eq!(
            pauses,
            [ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000)]
        );
        assert_eq!(retry.failed(&"corrupt", false), NOT_RETRYABLE_PAUSE);
        assert_eq!(retry.reported.as_deref(), Some("corrupt"));
        assert_eq!(retry.failed(&"corrupt", false), NOT_RETRYABLE_PAUSE);
        retry.succeeded();
        assert_eq!((retry.failures, retry.reported.as_deref()), (0, None));
        assert_eq!(
            retry.failed(&"busy", true),
            ms(100),
            "a success resets the back-off"
        );
        // A worker whose longest pause is longer waits that.
        let mut hourly = Retry::new("test", Duration::from_secs(10), Duration::from_secs(3600));
        assert_eq!(hourly.failed(&"rejected", false), Duration::from_secs(3600));
    }
}
