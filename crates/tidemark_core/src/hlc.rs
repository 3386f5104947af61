//! A hybrid logical clock (Kulkarni et al., "Logical Physical Clocks", 2014; seed 000, step 3:
//! "seq and HLC rollback protection").
//!
//! An HLC timestamp is the wall clock in Unix milliseconds plus a logical counter. A
//! [`HybridClock`] never reads earlier than it read before, nor earlier than any time it was
//! shown ([`Clock::observe`]): a node whose wall clock steps back goes on from where it was, and
//! one whose wall clock lags moves up to the times the other nodes wrote into the shared stores
//! as soon as it reads them. When the wall clock is ahead of everything seen, the timestamp is
//! the wall clock.
//!
//! Stores keep the millisecond part ([`Hlc::ms`]); the logical counter orders the events of one
//! node inside one millisecond and is not persisted. Every rule built on these times compares
//! with "not before" (a commit at T's own millisecond is not behind T), so equal milliseconds
//! from two nodes never break one. What makes the times survive a restart is the stores: each
//! keeps the highest time it was given, and a node observes those before its first commit.

use std::sync::Mutex;

use crate::clock::{Clock, SharedClock};

/// A hybrid logical clock timestamp: `(ms, logical)`, ordered by `ms` then `logical`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Hlc {
    /// Unix milliseconds (UTC): the wall clock, or the latest time seen if that is later.
    pub ms: i64,
    /// Orders the timestamps this clock hands out inside one `ms`.
    pub logical: u32,
}

/// A hybrid logical clock over a wall clock (see the module docs).
#[derive(Debug)]
pub struct HybridClock {
    wall: SharedClock,
    last: Mutex<Hlc>,
}

impl HybridClock {
    /// A clock over `wall` that has seen nothing yet.
    pub fn new(wall: SharedClock) -> Self {
        Self {
            wall,
            last: Mutex::new(Hlc::default()),
        }
    }

    /// A timestamp for a local event: the wall clock if it is ahead of the last timestamp,
    /// else the last timestamp's `ms` with the next logical count.
    pub fn now(&self) -> Hlc {
        let wall = self.wall.now_ms();
        let mut last = self.lock();
        *last = if wall > last.ms {
            Hlc {
                ms: wall,
                logical: 0,
            }
        } else {
            next(*last)
        };
        *last
    }

    /// Moves the clock past `remote` (a timestamp read from another node or a store) and
    /// returns the timestamp of that receipt: later than `remote`, the last timestamp and not
    /// earlier than the wall clock.
    pub fn update(&self, remote: Hlc) -> Hlc {
        let wall = self.wall.now_ms();
        let mut last = self.lock();
        let seen = (*last).max(remote);
        *last = if wall > seen.ms {
            Hlc {
                ms: wall,
                logical: 0,
            }
        } else {
            next(seen)
        };
        *last
    }

    /// How far the clock stands ahead of its wall clock, ms (0 when the wall clock leads):
    /// the skew of the fastest clock whose times this node has seen.
    pub fn ahead_ms(&self) -> i64 {
        let wall = self.wall.now_ms();
        (self.lock().ms - wall).max(0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Hlc> {
        self.last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The timestamp after `t`: the next logical count, or the next millisecond once the counter
/// is spent (4 billion events in one millisecond).
fn next(t: Hlc) -> Hlc {
    match t.logical.checked_add(1) {
        Some(logical) => Hlc { ms: t.ms, logical },
        None => Hlc {
            ms: t.ms + 1,
            logical: 0,
        },
    }
}

impl Clock for HybridClock {
    fn now_ms(&self) -> i64 {
        self.now().ms
    }

    fn observe(&self, remote_ms: i64) {
        self.update(Hlc {
            ms: remote_ms,
            logical: 0,
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::ManualClock;

    fn clock(start_ms: i64) -> (Arc<ManualClock>, HybridClock) {
        let wall = Arc::new(ManualClock::new(start_ms));
        (Arc::clone(&wall), HybridClock::new(wall))
    }

    #[test]
    fn follows_the_wall_clock_while_it_leads() {
        let (wall, hlc) = clock(1_000);
        assert_eq!(
            hlc.now(),
            Hlc {
                ms: 1_000,
                logical: 0
            }
        );
        wall.advance(5);
        assert_eq!(
            hlc.now(),
            Hlc {
                ms: 1_005,
                logical: 0
            }
        );
        assert_eq!(hlc.ahead_ms(), 0);
    }

    #[test]
    fn never_goes_back_when_the_wall_clock_steps_back() {
        let (wall, hlc) = clock(10_000);
        assert_eq!(hlc.now_ms(), 10_000);
        wall.set(0);
        assert_eq!(
            hlc.now(),
            Hlc {
                ms: 10_000,
                logical: 1
            }
        );
        assert_eq!(
            hlc.now(),
            Hlc {
                ms: 10_000,
                logical: 2
            }
        );
        assert_eq!(hlc.ahead_ms(), 10_000);
        wall.set(10_001);
        assert_eq!(
            hlc.now(),
            Hlc {
                ms: 10_001,
                logical: 0
            }
        );
    }

    #[test]
    fn moves_past_every_time_it_observes() {
        let (wall, hlc) = clock(1_000);
        hlc.observe(6_000);
        assert_eq!(
            hlc.now(),
            Hlc {
                ms: 6_000,
                logical: 2
            }
        );
        assert_eq!(hlc.ahead_ms(), 5_000);
        // An observed time behind the clock changes nothing but the logical count.
        assert_eq!(
            hlc.update(Hlc {
                ms: 2_000,
                logical: 0
            }),
            Hlc {
                ms: 6_000,
                logical: 3
            }
        );
        // A remote timestamp ahead in logical count only is passed too.
        assert_eq!(
            hlc.update(Hlc {
                ms: 6_000,
                logical: 9
            }),
            Hlc {
                ms: 6_000,
                logical: 10
            }
        );
        wall.set(7_000);
        assert_eq!(
            hlc.now(),
            Hlc {
                ms: 7_000,
                logical: 0
            }
        );
    }

    #[test]
    fn a_spent_logical_counter_moves_to_the_next_millisecond() {
        let (_, hlc) = clock(0);
        hlc.update(Hlc {
            ms: 50,
            logical: u32::MAX,
        });
        assert_eq!(hlc.now(), Hlc { ms: 51, logical: 1 });
    }

    #[test]
    fn plain_clocks_ignore_observed_times() {
        let wall = ManualClock::new(1_000);
        wall.observe(9_000);
        assert_eq!(wall.now_ms(), 1_000);
    }
}
