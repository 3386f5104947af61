//! At most one log line per interval for an error that can repeat on every request.
//!
//! On a full disk every SEND fails the same way: a warning for each 503 and an error for each
//! failed group commit would be about 1,500 lines a second, onto a disk that has no room. A
//! [`Throttle`] lets the first line through, then one per interval, each saying how many like
//! it were left out since the last.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a throttled line is let through.
pub const LOG_EVERY: Duration = Duration::from_secs(1);

/// Lets one event through per interval and counts the others (see the module docs).
#[derive(Debug)]
pub struct Throttle {
    every: Duration,
    state: Mutex<(Option<Instant>, u64)>,
}

impl Throttle {
    /// One event per `every`.
    pub const fn new(every: Duration) -> Self {
        Self {
            every,
            state: Mutex::new((None, 0)),
        }
    }

    /// `Some(n)` if this event is to be logged, `n` being how many were left out since the last
    /// one logged; `None` if it is to be left out (and is counted).
    pub fn allow(&self) -> Option<u64> {
        self.allow_at(Instant::now())
    }

    fn allow_at(&self, now: Instant) -> Option<u64> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (last, skipped) = &mut *state;
        match last {
            Some(at) if now.saturating_duration_since(*at) < self.every => {
                *skipped += 1;
                None
            }
            _ => {
                *last = Some(now);
                Some(std::mem::take(skipped))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_event_per_interval_with_the_count_of_the_others() {
        let throttle = Throttle::new(Duration::from_secs(1));
        let t0 = Instant::now();
        assert_eq!(throttle.allow_at(t0), Some(0));
        for i in 1..=5 {
            assert_eq!(throttle.allow_at(t0 + Duration::from_millis(100 * i)), None);
        }
        assert_eq!(throttle.allow_at(t0 + Duration::from_secs(1)), Some(5));
        assert_eq!(throttle.allow_at(t0 + Duration::from_millis(1500)), None);
        assert_eq!(throttle.allow_at(t0 + Duration::from_secs(3)), Some(1));
    }
}
