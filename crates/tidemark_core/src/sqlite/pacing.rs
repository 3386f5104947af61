//! Pacing a long background job: rests between bursts of work, so that the job keeps a core
//! only a fraction of the time.
//!
//! A background writer's job (an archive batch: a few thousand inserts, tens of milliseconds
//! of CPU) runs in one piece on one core; on a 2-core machine whose other core serves the
//! commit path, a SEND woken meanwhile waits for the job's scheduler slice to run out, and
//! every send queued behind it waits too. A [`DutyCycle`] cuts the job into bursts of about
//! [`BURST`] (the first unit of work that reaches it ends a burst) and sleeps after each for as
//! long as keeps the thread busy at most `duty` of the time: the same work, spread over
//! `1 / duty` times as long, with a core free in between.
//!
//! Issue 2, the chat archive (`tidemark_chat::sqlite`, duty 0.25 while it keeps up), `bench
//! chat` at 5,000 sends/s on session 9's 2-core machine, `tiered` p99 over `hot-only` p99 in
//! the same run: on disk 1.44 / 1.52 / 2.17 / 1.95 / 1.52 paced against 2.15 / 2.32 / 1.60 /
//! 2.75 unpaced; on tmpfs (CPU alone) 2.10 / 1.86 against 2.39 / 2.73. A modest gain: the
//! runs overlap.

use std::time::{Duration, Instant};

/// The work (wall time since the last rest) after which the next [`DutyCycle::step`] rests:
/// short against a scheduler slice (a few ms), long against the cost of a sleep and a wake-up
/// (tens of µs). Chosen by that reasoning, not measured against other values.
pub const BURST: Duration = Duration::from_micros(250);

/// Spreads a job's work so that it is busy at most `duty` of the time (see the module docs).
///
/// Call [`DutyCycle::step`] before each unit of work (row); the first call starts the clock
/// (so time spent before the job began, e.g. queued behind another, is not counted), later
/// ones return at once until the work since the last rest reaches [`BURST`], then sleep
/// `busy × (1 − duty) / duty`. Busy time is wall time, so time the thread spent waiting for a
/// core counts as work: on a contended machine the job rests more, which is the point.
#[derive(Debug, Clone)]
pub struct DutyCycle {
    duty: f64,
    since: Option<Instant>,
}

impl DutyCycle {
    /// A cycle busy at most `duty` of the time; `duty` is clamped to `[0.01, 1]` (NaN is 1),
    /// and at 1 [`DutyCycle::step`] never sleeps.
    pub fn new(duty: f64) -> Self {
        Self {
            duty: if duty.is_nan() {
                1.0
            } else {
                duty.clamp(0.01, 1.0)
            },
            since: None,
        }
    }

    /// The share of time this cycle may be busy, in `[0.01, 1]`.
    pub fn duty(&self) -> f64 {
        self.duty
    }

    /// Before a unit of work: sleeps if a burst is over (see the type docs).
    pub fn step(&mut self) {
        let Some(since) = self.since else {
            self.since = Some(Instant::now());
            return;
        };
        if let Some(rest) = self.rest_after(since.elapsed()) {
            std::thread::sleep(rest);
            self.since = Some(Instant::now());
        }
    }

    /// The rest owed after `busy` of work since the last one: none before [`BURST`] or at
    /// duty 1, else `busy × (1 − duty) / duty`.
    pub fn rest_after(&self, busy: Duration) -> Option<Duration> {
        if self.duty >= 1.0 || busy < BURST {
            return None;
        }
        Some(busy.mul_f64((1.0 - self.duty) / self.duty))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rests_three_times_the_burst_at_a_quarter_duty() {
        let cycle = DutyCycle::new(0.25);
        assert_eq!(cycle.rest_after(Duration::from_micros(100)), None);
        assert_eq!(
            cycle.rest_after(Duration::from_micros(400)),
            Some(Duration::from_micros(1200))
        );
        assert_eq!(
            cycle.rest_after(BURST),
            Some(Duration::from_micros(750)),
            "a burst of exactly BURST rests"
        );
    }

    #[test]
    fn the_first_step_starts_the_clock() {
        let mut cycle = DutyCycle::new(0.01);
        assert_eq!(
            cycle.since, None,
            "time before the first unit of work is not work"
        );
        cycle.step();
        assert!(cycle.since.is_some());
    }

    #[test]
    fn never_rests_unpaced_and_clamps_the_duty() {
        assert_eq!(DutyCycle::new(1.0).rest_after(Duration::from_secs(1)), None);
        assert_eq!(DutyCycle::new(7.0).duty(), 1.0);
        assert_eq!(DutyCycle::new(0.0).duty(), 0.01);
        assert_eq!(DutyCycle::new(f64::NAN).duty(), 1.0);
    }
}
