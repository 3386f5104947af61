//! The open-loop driver and the HTTP client it uses.
//!
//! Request `i` has the intended send time `start + i / rate`, fixed before the run and
//! independent of how fast the server answers. Latency is measured from that intended time to
//! the end of the response, so time a request spends waiting — for the generator's timer, for a
//! connection, or in the server's queue — is counted, not hidden (no coordinated omission).
//! One task issues every request and polls every response (a `FuturesUnordered`), so the
//! histograms need no locking and each request costs one future. A pacer thread wakes that task
//! at the intended times (the tokio timer only ticks in milliseconds); at high rates it wakes it
//! every 500 µs for a batch. Any lateness of a send is in its latency, and is also reported on
//! its own as "send lag".
//!
//! A run also reports its longest stall: the longest time in the measured window during which
//! requests were outstanding and none completed. Every request outstanding through a stall
//! waited at least that long, so one stall of 200 ms at 10,000 requests/s puts 2,000 requests
//! (2 %) past it, whatever the server does the rest of the time. With
//! [`OpenLoop::timeline`] the run keeps each recorded request's intended time and latency, to
//! lay beside what was sampled on the machine meanwhile (`tidemark-bench chat --timeline`).
//!
//! Nothing here is chat-specific: the caller passes a closure that builds request `i`.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use std::time::{Instant, SystemTime};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::sync::Notify;

/// The pooled HTTP/1.1 keep-alive client.
pub(super) type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// A keep-alive client with `TCP_NODELAY`. The legacy pool opens a connection whenever no idle
/// one is free, so the number of connections is bounded by the caller's in-flight cap.
pub(super) fn http_client(max_idle: usize) -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(Duration::from_secs(5)));
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(max_idle)
        .retry_canceled_requests(false)
        .build(connector)
}

/// Sends `req` and reads the whole answer.
pub(super) async fn call(
    client: &HttpClient,
    req: Request<Full<Bytes>>,
) -> Result<(StatusCode, Bytes), Failure> {
    let resp = client
        .request(req)
        .await
        .map_err(|e| Failure::Transport(error_chain(&e)))?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| Failure::Transport(error_chain(&e)))?
        .to_bytes();
    Ok((status, body))
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

/// Why one request did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Failure {
    /// The server answered with a status other than the expected one.
    Status(u16, String),
    /// Connecting, writing or reading failed.
    Transport(String),
}

/// The outcome of one request.
pub(super) type Outcome = Result<(), Failure>;

/// One constant-rate run.
#[derive(Debug, Clone, Copy)]
pub(super) struct OpenLoop {
    /// Offered rate, requests per second.
    pub(super) rate: u64,
    /// Leading time whose requests are sent but not recorded.
    pub(super) warmup: Duration,
    /// The measured window after the warmup.
    pub(super) duration: Duration,
    /// Most requests outstanding at once; a request due while the cap is reached is not sent
    /// and counts as an error ("not sent on time").
    pub(super) max_in_flight: usize,
    /// How long to wait for stragglers after the last request was sent; those still
    /// outstanding then count as errors.
    pub(super) drain: Duration,
    /// Keep every recorded request's intended time and outcome ([`LoadResult::timeline`]).
    pub(super) timeline: bool,
}

/// The figures of one run. Only requests whose intended time lies in the measured window are
/// recorded; `ok_in_window` counts successes that *completed* in the window.
#[derive(Debug)]
pub(super) struct LoadResult {
    /// The configuration.
    pub(super) cfg: OpenLoop,
    /// Recorded requests (intended in the window), sent or not.
    pub(super) scheduled: u64,
    /// Successful responses that completed inside the window (any intended time).
    pub(super) ok_in_window: u64,
    /// Recorded successes' latency, intended send time → response read, µs.
    pub(super) latency: Histogram<u64>,
    /// Recorded requests' send lag, intended send time → handed to the client, µs.
    pub(super) lag: Histogram<u64>,
    /// Recorded requests not sent because `max_in_flight` were outstanding.
    pub(super) dropped: u64,
    /// Recorded requests answered with an unexpected status.
    pub(super) status_errors: u64,
    /// Recorded requests that failed in transport.
    pub(super) transport_errors: u64,
    /// Recorded requests still outstanding after the drain time.
    pub(super) timeouts: u64,
    /// The first failure seen, for diagnosis.
    pub(super) first_failure: Option<Failure>,
    /// Most requests outstanding at once.
    pub(super) peak_in_flight: usize,
    /// The longest time inside the measured window during which requests were outstanding and
    /// none completed (see the module docs).
    pub(super) longest_stall: Duration,
    /// With [`OpenLoop::timeline`]: every recorded request, in intended order, except the
    /// stragglers still unanswered when the drain time ran out (counted in `timeouts`).
    pub(super) timeline: Vec<TimelineEntry>,
}

/// One recorded request of a run with [`OpenLoop::timeline`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct TimelineEntry {
    /// Its intended send time, wall clock (to line up with samples taken outside the process).
    pub(super) intended: SystemTime,
    /// Intended send time → response read, if it succeeded.
    pub(super) latency: Option<Duration>,
    /// `false` if it was never sent (the in-flight cap was reached).
    pub(super) sent: bool,
}

impl LoadResult {
    /// All recorded requests that did not succeed.
    pub(super) fn errors(&self) -> u64 {
        self.dropped + self.status_errors + self.transport_errors + self.timeouts
    }

    /// Successful completions per second over the window.
    pub(super) fn achieved(&self) -> f64 {
        self.ok_in_window as f64 / self.cfg.duration.as_secs_f64()
    }

    /// Sustained: achieved ≥ 99 % of offered, errors ≤ 0.1 % of the scheduled requests.
    pub(super) fn sustained(&self) -> bool {
        self.achieved() >= 0.99 * self.cfg.rate as f64
            && (self.errors() as f64) <= 0.001 * self.scheduled as f64
    }
}

fn new_hist() -> Histogram<u64> {
    Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

type Completion = (Instant, bool, Outcome, Instant);

/// Finds the longest stall: the longest interval, clipped to the measured window, that began
/// when a request was sent with none outstanding or when one completed with others still
/// outstanding, and ended at the next completion.
#[derive(Debug, Default)]
struct StallWatch {
    /// Start of the current interval, while requests are outstanding.
    since: Option<Instant>,
    longest: Duration,
}

impl StallWatch {
    /// A request was sent at `at`.
    fn sent(&mut self, at: Instant) {
        self.since.get_or_insert(at);
    }

    /// A request completed at `at`, leaving `outstanding` requests.
    fn completed(&mut self, at: Instant, outstanding: usize, window: (Instant, Instant)) {
        if let Some(since) = self.since {
            let (from, to) = (since.max(window.0), at.min(window.1));
            if to > from {
                self.longest = self.longest.max(to - from);
            }
        }
        self.since = (outstanding > 0).then_some(at);
    }
}

async fn timed<F: Future<Output = Outcome>>(
    intended: Instant,
    recorded: bool,
    fut: F,
) -> Completion {
    let outcome = fut.await;
    (intended, recorded, outcome, Instant::now())
}

/// Wakes the driver at intended send times, more precisely than the tokio timer (1 ms ticks):
/// a thread that sleeps until the next intended time (or [`MIN_TICK`] after its last wake,
/// whichever is later, so at high rates it wakes in batches) and then notifies.
#[derive(Debug)]
struct Pacer {
    notify: Arc<Notify>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Shortest interval between two pacer wakes.
const MIN_TICK: Duration = Duration::from_micros(500);

impl Pacer {
    fn start(start: Instant, rate: u64, total: u64) -> std::io::Result<Self> {
        let notify = Arc::new(Notify::new());
        let stop = Arc::new(AtomicBool::new(false));
        let (n, st) = (Arc::clone(&notify), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("bench-pacer".into())
            .spawn(move || {
                let mut i = 0u64;
                let mut last_wake = start - MIN_TICK;
                while i < total && !st.load(Ordering::Relaxed) {
                    let target = intended(start, rate, i).max(last_wake + MIN_TICK);
                    let now = Instant::now();
                    if target > now {
                        std::thread::sleep(target - now);
                    }
                    last_wake = Instant::now();
                    n.notify_one();
                    // The first request not yet due.
                    let elapsed = last_wake.saturating_duration_since(start).as_nanos();
                    i = (elapsed * u128::from(rate) / 1_000_000_000) as u64 + 1;
                }
            })?;
        Ok(Self {
            notify,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Pacer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn intended(start: Instant, rate: u64, i: u64) -> Instant {
    start + Duration::from_nanos((u128::from(i) * 1_000_000_000 / u128::from(rate)) as u64)
}

/// Where a run's clock is on the wall clock, for [`TimelineEntry::intended`]. Read before the
/// run's start, so every intended time is at or after it.
#[derive(Debug, Clone, Copy)]
struct WallClock {
    instant: Instant,
    wall: SystemTime,
}

impl WallClock {
    fn now() -> Self {
        Self {
            instant: Instant::now(),
            wall: SystemTime::now(),
        }
    }

    fn at(self, t: Instant) -> SystemTime {
        self.wall + t.saturating_duration_since(self.instant)
    }
}

/// Counts completion `c`, after which `outstanding` requests remain.
fn record(
    res: &mut LoadResult,
    stalls: &mut StallWatch,
    outstanding: usize,
    window: (Instant, Instant),
    clock: WallClock,
    c: Completion,
) {
    let (t, recorded, outcome, done) = c;
    stalls.completed(done, outstanding, window);
    if outcome.is_ok() && done >= window.0 && done <= window.1 {
        res.ok_in_window += 1;
    }
    if recorded && res.cfg.timeline {
        res.timeline.push(TimelineEntry {
            intended: clock.at(t),
            latency: outcome.is_ok().then(|| done - t),
            sent: true,
        });
    }
    if recorded {
        match outcome {
            Ok(()) => {
                res.latency
                    .saturating_record((done - t).as_micros().max(1) as u64);
            }
            Err(f) => {
                match f {
                    Failure::Status(..) => res.status_errors += 1,
                    Failure::Transport(_) => res.transport_errors += 1,
                }
                res.first_failure.get_or_insert(f);
            }
        }
    }
}

/// Runs `cfg`: calls `make(i)` at request `i`'s intended time and drives the futures.
pub(super) async fn run<F, Fut>(cfg: OpenLoop, mut make: F) -> std::io::Result<LoadResult>
where
    F: FnMut(u64) -> Fut,
    Fut: Future<Output = Outcome>,
{
    assert!(cfg.rate > 0, "rate must be positive");
    let mut res = LoadResult {
        cfg,
        scheduled: 0,
        ok_in_window: 0,
        latency: new_hist(),
        lag: new_hist(),
        dropped: 0,
        status_errors: 0,
        transport_errors: 0,
        timeouts: 0,
        first_failure: None,
        peak_in_flight: 0,
        longest_stall: Duration::ZERO,
        timeline: Vec::new(),
    };
    let clock = WallClock::now();
    let mut stalls = StallWatch::default();
    let total = ((cfg.warmup + cfg.duration).as_secs_f64() * cfg.rate as f64).round() as u64;
    let start = Instant::now() + Duration::from_millis(5);
    let window_start = start + cfg.warmup;
    let window = (window_start, window_start + cfg.duration);
    let pacer = Pacer::start(start, cfg.rate, total)?;

    let mut in_flight = FuturesUnordered::new();
    let mut next = 0u64;
    let mut drain_deadline: Option<Instant> = None;
    loop {
        let now = Instant::now();
        while next < total {
            let t = intended(start, cfg.rate, next);
            if t > now {
                break;
            }
            let recorded = t >= window_start;
            if recorded {
                res.scheduled += 1;
            }
            if in_flight.len() >= cfg.max_in_flight {
                if recorded {
                    res.dropped += 1;
                    if cfg.timeline {
                        res.timeline.push(TimelineEntry {
                            intended: clock.at(t),
                            latency: None,
                            sent: false,
                        });
                    }
                }
            } else {
                if recorded {
                    res.lag
                        .saturating_record((now - t).as_micros().max(1) as u64);
                }
                stalls.sent(now);
                in_flight.push(timed(t, recorded, make(next)));
                res.peak_in_flight = res.peak_in_flight.max(in_flight.len());
            }
            next += 1;
        }
        if next < total {
            tokio::select! {
                biased;
                Some(c) = in_flight.next(), if !in_flight.is_empty() => {
                    record(&mut res, &mut stalls, in_flight.len(), window, clock, c);
                }
                _ = pacer.notify.notified() => {}
            }
        } else {
            if in_flight.is_empty() {
                break;
            }
            let deadline = *drain_deadline.get_or_insert(now + cfg.drain);
            tokio::select! {
                biased;
                Some(c) = in_flight.next() => {
                    record(&mut res, &mut stalls, in_flight.len(), window, clock, c);
                }
                _ = tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)) => {
                    // Stragglers (all intended near the end, so in the window) count as
                    // errors; dropping their futures closes their connections.
                    stalls.completed(deadline, 0, window);
                    res.timeouts += in_flight.len() as u64;
                    res.first_failure.get_or_insert(Failure::Transport(format!(
                        "{} requests still unanswered {:?} after the last was sent",
                        in_flight.len(),
                        cfg.drain
                    )));
                    break;
                }
            }
        }
    }
    drop(pacer);
    res.longest_stall = stalls.longest;
    // Completions arrive out of order; the not-sent ones were pushed as they came due.
    res.timeline.sort_by_key(|e| e.intended);
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(rate: u64, max_in_flight: usize) -> OpenLoop {
        OpenLoop {
            rate,
            warmup: Duration::from_millis(100),
            duration: Duration::from_millis(400),
            max_in_flight,
            drain: Duration::from_secs(2),
            timeline: false,
        }
    }

    #[tokio::test]
    async fn schedules_at_the_offered_rate_and_measures_from_the_intended_time() {
        let res = run(cfg(1000, 64), |_| async {
            tokio::time::sleep(Duration::from_millis(3)).await;
            Ok(())
        })
        .await
        .unwrap();
        assert_eq!(res.scheduled, 400);
        assert_eq!(res.errors(), 0);
        assert_eq!(res.latency.len(), 400);
        assert!(res.latency.min() >= 3000, "latency includes the 3 ms");
        let achieved = res.achieved();
        assert!((900.0..=1100.0).contains(&achieved), "achieved {achieved}");
    }

    fn at(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    #[test]
    fn the_longest_stall_is_the_longest_wait_for_a_completion_while_requests_are_outstanding() {
        let b = Instant::now();
        let window = (b, at(b, 1000));
        let mut w = StallWatch::default();
        w.sent(at(b, 0));
        w.sent(at(b, 2));
        w.completed(at(b, 10), 1, window);
        // 10 → 30 ms with one request outstanding and nothing answered.
        w.completed(at(b, 30), 0, window);
        // Nothing outstanding from 30 to 500 ms: idle, not a stall.
        w.sent(at(b, 500));
        w.completed(at(b, 505), 0, window);
        assert_eq!(w.longest, Duration::from_millis(20));
    }

    #[test]
    fn a_stall_counts_only_inside_the_measured_window() {
        let b = Instant::now();
        let mut w = StallWatch::default();
        w.sent(at(b, 0));
        w.completed(at(b, 120), 0, (at(b, 50), at(b, 100)));
        assert_eq!(w.longest, Duration::from_millis(50));
        let mut w = StallWatch::default();
        w.sent(at(b, 0));
        w.completed(at(b, 40), 0, (at(b, 50), at(b, 100)));
        assert_eq!(w.longest, Duration::ZERO);
    }

    #[tokio::test]
    async fn a_server_that_answers_nothing_for_a_while_shows_as_the_longest_stall() {
        // From request 200 on (intended 200 ms into the run, in the window) every request is
        // held until 150 ms after the first of them was made; the earlier ones take 2 ms. No
        // request completes from about 202 ms to the release, so the stall is about 148 ms.
        let release: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();
        let release = &release;
        let mut cfg = cfg(1000, 512);
        cfg.timeline = true;
        let res = run(cfg, |i| async move {
            if i >= 200 {
                let until = *release
                    .get_or_init(|| tokio::time::Instant::now() + Duration::from_millis(150));
                tokio::time::sleep_until(until).await;
            } else {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            Ok(())
        })
        .await
        .unwrap();
        let stall = res.longest_stall;
        assert!(
            (Duration::from_millis(100)..=Duration::from_millis(400)).contains(&stall),
            "stall {stall:?}"
        );
        // The timeline holds each recorded request once, in intended order, all answered.
        assert_eq!(res.timeline.len(), 400);
        assert!(
            res.timeline
                .windows(2)
                .all(|w| w[0].intended <= w[1].intended)
        );
        assert!(res.timeline.iter().all(|e| e.sent && e.latency.is_some()));
        let held = res.timeline[100].latency.unwrap();
        assert!(held >= Duration::from_millis(100), "held request {held:?}");
    }

    #[tokio::test]
    async fn a_slow_server_shows_as_drops_and_failures_not_as_a_lower_rate() {
        // Each request takes 50 ms, at most 5 in flight: about 100/s can be served of 1000/s.
        let res = run(cfg(1000, 5), |i| async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if i % 2 == 0 {
                Ok(())
            } else {
                Err(Failure::Status(500, String::new()))
            }
        })
        .await
        .unwrap();
        assert_eq!(res.scheduled, 400);
        assert!(res.dropped > 300, "dropped {}", res.dropped);
        assert!(res.status_errors > 0);
        assert_eq!(res.errors(), res.scheduled - res.latency.len());
        assert!(res.peak_in_flight <= 5);
        assert!(res.timeline.is_empty(), "no timeline unless asked for");
    }
}
