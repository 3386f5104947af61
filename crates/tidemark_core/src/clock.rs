//! Injected time. All of Tidemark reads "now" through [`Clock`], in Unix milliseconds (UTC).
//!
//! Where several nodes compare times (chat's commit times, trim scores and watermark), the
//! clock is a [`crate::hlc::HybridClock`] over one of these: it never goes back, and it moves
//! past every time it is shown ([`Clock::observe`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of the current time in Unix milliseconds (UTC).
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;

    /// Takes note of a time read from another node or from a store (Unix ms): a hybrid
    /// logical clock ([`crate::hlc::HybridClock`]) never reads earlier than it afterwards.
    /// Plain clocks ignore it.
    fn observe(&self, _remote_ms: i64) {}
}

/// A shared clock handle, as passed to every component.
pub type SharedClock = Arc<dyn Clock>;

/// The machine's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}

/// A clock that only moves when told to; for tests of windows and expiry.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicI64,
}

impl ManualClock {
    /// A clock standing at `start_ms` (Unix milliseconds).
    pub fn new(start_ms: i64) -> Self {
        Self {
            now: AtomicI64::new(start_ms),
        }
    }

    /// Moves the clock forward by `ms` milliseconds.
    pub fn advance(&self, ms: i64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the clock to `ms` (Unix milliseconds).
    pub fn set(&self, ms: i64) {
        self.now.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now.load(Ordering::SeqCst)
    }
}
