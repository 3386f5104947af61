//! The raw-tier lifecycle (DESIGN.md part C "Raw tier", "Daily rollup", "Archive";
//! principles 2 and 4): the scheduler that rolls up, archives and finally drops raw days.
//!
//! For each day of the raw catalog that is not dropped, one pass does:
//! 1. **roll up** the day ([`RollupService::roll_up`], so never at the same time as an
//!    on-demand rollup) once it has closed plus `lateness` (`now ≥ day end + lateness`) and
//!    its rollup is not current (never rolled up, or events arrived since: dirty);
//! 2. **archive** it under the same condition when its archive is not current;
//! 3. **drop** its raw partition whole only when the rollup and the archive are both current
//!    and no event for the day arrived within `raw_retention`
//!    (`now − last_arrival_ms ≥ raw_retention`). Imported history (old timestamps arriving now)
//!    is therefore kept as long as fresh data, and a rollup or archive that keeps failing
//!    stops deletion instead of causing loss.
//!
//! A day is only rolled up or archived once its last event arrived at least [`SETTLE_MS`] ago:
//! the catalog stamps arrivals in milliseconds, so a write stamped with the same millisecond
//! as the snapshot a job marks the day with must no longer be in flight.
//!
//! Every step on a day runs under the day's lease ([`crate::leases`], shared with
//! [`RollupService`]): a day another node holds is skipped this pass (`busy`), so each day is
//! worked by one node at a time. Before a drop, the archive object is checked to cover the
//! day's marked arrival ([`RawArchive::covers`]).
//!
//! Each step's failure is logged and counted (`tidemark_events_lifecycle_failures_total`) and
//! does not stop the other days. The gauge `tidemark_events_days_at_risk` counts closed days
//! whose last event arrived more than `raw_retention − 1 day` ago and that are still not both
//! rolled up and archived: those would have been dropped by now if the pipeline worked — and
//! days the raw store will remove by itself within a day (InfluxDB's retention policy,
//! [`RawStore::expires_at_ms`]) that are not yet both rolled up and archived.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tidemark_core::clock::SharedClock;
use tidemark_core::day::{DAY_MS, Day};
use tidemark_core::health::StoreHealth;
use tidemark_core::retry::Retry;
use tidemark_core::store::{AsStoreError, ErrorKind, StoreError};
use tokio_util::sync::CancellationToken;

use crate::archive::RawArchive;
use crate::calendar::Calendar;
use crate::config::EventsConfig;
use crate::leases::DayLease;
use crate::metrics::EventsMetrics;
use crate::raw::{DayState, RawStore};
use crate::rollup::RollupService;

/// How long after a day's last arrival it may be rolled up or archived (ms).
pub const SETTLE_MS: i64 = 2_000;

/// The lifecycle's windows, over the days of the raw tier's calendar.
#[derive(Debug, Clone)]
pub struct Windows {
    /// How long a day stays after its last event arrived (`events.raw_retention`).
    pub raw_retention_ms: i64,
    /// How long after its close a day is rolled up and archived (`events.lateness`).
    pub lateness_ms: i64,
    /// The days (UTC, or local days of `events.time_zone`): when each closes.
    pub calendar: Calendar,
}

impl Windows {
    /// The windows of `cfg` over the days of `calendar`.
    pub fn of(cfg: &EventsConfig, calendar: Calendar) -> Self {
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Self {
            raw_retention_ms: ms(cfg.raw_retention),
            lateness_ms: ms(cfg.lateness),
            calendar,
        }
    }

    /// The day has closed (its last instant, 23, 24 or 25 h after its first) plus the
    /// lateness window.
    pub fn closed(&self, day: Day, now_ms: i64) -> bool {
        now_ms >= self.calendar.end_ms(day).saturating_add(self.lateness_ms)
    }

    /// The day is due for its rollup and archive jobs: closed, settled, not dropped.
    pub fn due(&self, s: &DayState, now_ms: i64) -> bool {
        s.dropped_ms.is_none()
            && self.closed(s.day, now_ms)
            && now_ms - s.last_arrival_ms >= SETTLE_MS
    }

    /// The day's raw partition may be dropped: rolled up and archived (both current), closed,
    /// and no event arrived for it within `raw_retention`.
    pub fn may_drop(&self, s: &DayState, now_ms: i64) -> bool {
        s.dropped_ms.is_none()
            && s.rollup_current()
            && s.archive_current()
            && self.closed(s.day, now_ms)
            && now_ms - s.last_arrival_ms >= self.raw_retention_ms
    }

    /// The day is closed, its last event (or its end, whichever is later) lies more than
    /// `raw_retention − 1 day` in the past, and it is not yet both rolled up and archived.
    pub fn at_risk(&self, s: &DayState, now_ms: i64) -> bool {
        let horizon = (self.raw_retention_ms - DAY_MS).max(0);
        let since = s.last_arrival_ms.max(self.calendar.end_ms(s.day));
        s.dropped_ms.is_none()
            && self.closed(s.day, now_ms)
            && now_ms - since >= horizon
            && !(s.rollup_current() && s.archive_current())
    }
}

impl Windows {
    /// The day will be removed by the raw store itself at `expires_at_ms` (InfluxDB's retention
    /// policy: it does not wait for Tidemark), that is less than a day away or past, and the
    /// day is not yet both rolled up and archived.
    pub fn at_risk_of_expiry(&self, s: &DayState, now_ms: i64, expires_at_ms: Option<i64>) -> bool {
        expires_at_ms.is_some_and(|at| now_ms >= at - DAY_MS)
            && s.dropped_ms.is_none()
            && !(s.rollup_current() && s.archive_current())
    }
}

/// A lifecycle step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    /// The daily rollup.
    Rollup,
    /// The Parquet archive.
    Archive,
    /// Dropping the raw partition.
    Drop,
    /// Taking the day's lease (in the summary tier, where the leases are).
    Lease,
}

impl Step {
    /// The store the step writes to, by its name in the node's [`StoreHealth`].
    pub fn store(self) -> &'static str {
        match self {
            Step::Rollup => ROLLUP_STORE,
            Step::Archive => ARCHIVE_STORE,
            Step::Drop => crate::ingest::RAW_STORE,
            Step::Lease => ROLLUP_STORE,
        }
    }

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Step::Rollup => "rollup",
            Step::Archive => "archive",
            Step::Drop => "drop",
            Step::Lease => "lease",
        }
    }
}

/// One failed step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The day.
    pub day: Day,
    /// The step that failed.
    pub step: Step,
    /// The error, as text.
    pub error: String,
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LifecycleReport {
    /// Days rolled up.
    pub rolled_up: Vec<Day>,
    /// Days archived.
    pub archived: Vec<Day>,
    /// Days whose raw partition was dropped.
    pub dropped: Vec<Day>,
    /// Steps that failed (the days stay in the raw tier).
    pub failures: Vec<Failure>,
    /// Days at risk after the pass (see [`Windows::at_risk`]).
    pub at_risk: Vec<Day>,
    /// Days skipped because another node held their lease.
    pub busy: Vec<Day>,
}

/// Why a pass could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    /// The raw catalog could not be read.
    #[error("raw catalog: {0}")]
    Catalog(#[from] StoreError),
}

impl LifecycleError {
    /// Whether the next pass may succeed (the catalog's store is unavailable or full).
    pub fn is_retryable(&self) -> bool {
        match self {
            LifecycleError::Catalog(e) => e.is_retryable(),
        }
    }
}

/// The raw-tier scheduler (see the module docs).
#[derive(Debug)]
pub struct Lifecycle {
    raw: Arc<dyn RawStore>,
    rollup: RollupService,
    archive: RawArchive,
    clock: SharedClock,
    windows: Windows,
    metrics: EventsMetrics,
    /// Dropped days that received events afterwards, already warned about.
    warned: Mutex<BTreeSet<Day>>,
    /// Steps failing with an error that is not retryable, already logged as such (cleared
    /// when the step succeeds).
    reported: Mutex<BTreeSet<(Day, Step)>>,
    /// Where its writes are reported ([`Lifecycle::with_store_health`]).
    health: StoreHealth,
}

/// The summary tier's name in the node's [`StoreHealth`].
pub const ROLLUP_STORE: &str = "events rollups";
/// The Parquet archive's name in the node's [`StoreHealth`].
pub const ARCHIVE_STORE: &str = "events archive";

impl Lifecycle {
    /// A lifecycle over the raw tier, summary tier and clock of `rollup` (whose one-at-a-time
    /// lock it shares with `POST /v1/rollups/{day}` and `tidemark rollup`), archiving into
    /// `archive`, with the windows of `cfg`.
    pub fn new(
        rollup: RollupService,
        archive: RawArchive,
        cfg: &EventsConfig,
        metrics: EventsMetrics,
    ) -> Self {
        Self {
            raw: Arc::clone(rollup.raw()),
            clock: Arc::clone(rollup.clock()),
            windows: Windows::of(cfg, rollup.raw().calendar().clone()),
            rollup,
            archive,
            metrics,
            warned: Mutex::new(BTreeSet::new()),
            reported: Mutex::new(BTreeSet::new()),
            health: StoreHealth::default(),
        }
    }

    /// Reports each step to `health`, the node's: a rollup, archive or drop that fails for
    /// want of space marks its store ([`ROLLUP_STORE`], [`ARCHIVE_STORE`],
    /// [`crate::ingest::RAW_STORE`]) full, the next one that succeeds clears it.
    #[must_use]
    pub fn with_store_health(mut self, health: StoreHealth) -> Self {
        self.health = health;
        self
    }

    /// One pass over the catalog: roll up, archive, then drop (see the module docs).
    pub async fn run_once(&self) -> Result<LifecycleReport, LifecycleError> {
        let now = self.clock.now_ms();
        let mut report = LifecycleReport::default();
        let days = self.catalog().await?;
        for s in days.iter().filter(|s| self.windows.due(s, now)) {
            let Some(lease) = self.lease(&mut report, s.day).await else {
                continue;
            };
            // Decided again under the lease: another node may have done the day since the
            // catalog was read at the start of this pass.
            let fresh = match self.catalog().await {
                Ok(days) => days.into_iter().find(|f| f.day == s.day),
                Err(_) => None,
            };
            let Some(s) = fresh.filter(|f| self.windows.due(f, now)) else {
                self.release(&lease).await;
                continue;
            };
            if !s.rollup_current() {
                match self.rollup.roll_up_leased(&lease).await {
                    Ok(_) => {
                        self.succeeded(s.day, Step::Rollup);
                        self.metrics.days_rolled_up.inc();
                        report.rolled_up.push(s.day);
                    }
                    Err(e) => self.failed(&mut report, s.day, Step::Rollup, &e),
                }
            }
            if !s.archive_current() {
                self.archive_leased(&mut report, &lease).await;
            }
            self.release(&lease).await;
        }

        // Drops are decided on the catalog as it is now, each one re-checked under the day's
        // lease just before.
        for s in self.catalog().await? {
            if !self.windows.may_drop(&s, now) {
                continue;
            }
            let Some(lease) = self.lease(&mut report, s.day).await else {
                continue;
            };
            self.drop_leased(&mut report, &lease, now).await;
            self.release(&lease).await;
        }

        let days = self.catalog().await?;
        report.at_risk = days
            .iter()
            .filter(|s| {
                self.windows.at_risk(s, now)
                    || self
                        .windows
                        .at_risk_of_expiry(s, now, self.raw.expires_at_ms(s.day))
            })
            .map(|s| s.day)
            .collect();
        self.metrics.days_at_risk.set(report.at_risk.len() as i64);
        self.metrics
            .raw_days
            .set(days.iter().filter(|s| s.dropped_ms.is_none()).count() as i64);
        if !report.at_risk.is_empty() {
            tracing::warn!(days = ?report.at_risk, "raw days near the end of retention are not rolled up and archived yet; they are kept");
        }
        self.warn_arrivals_after_drop(&days);
        Ok(report)
    }

    /// The lease on `day`, or `None` (reported) while another node holds it or it could not
    /// be had.
    async fn lease(&self, report: &mut LifecycleReport, day: Day) -> Option<DayLease> {
        match self.rollup.leases().acquire(day).await {
            Ok(Some(lease)) => {
                self.succeeded(day, Step::Lease);
                Some(lease)
            }
            Ok(None) => {
                tracing::debug!(%day, "another node holds the day's lease; skipped this pass");
                report.busy.push(day);
                None
            }
            Err(e) => {
                self.failed(report, day, Step::Lease, &e);
                None
            }
        }
    }

    async fn release(&self, lease: &DayLease) {
        // Renewed: another task of this process (an on-demand rollup) took it and releases it.
        if lease.renewed {
            return;
        }
        if let Err(error) = self.rollup.leases().release(lease).await {
            tracing::warn!(day = %lease.day, %error, "could not release the day's lease; it expires by itself");
        }
    }

    /// Archives the day of `lease` if the lease is still held: an object store cannot check
    /// the lease in the upload itself, so it is checked just before, and the drop verifies the
    /// object again ([`Lifecycle::drop_leased`]).
    async fn archive_leased(&self, report: &mut LifecycleReport, lease: &DayLease) -> bool {
        match self.rollup.leases().holds(lease).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(day = %lease.day, "the day's lease ran out before its archive; left to the next pass");
                return false;
            }
            Err(e) => {
                self.failed(report, lease.day, Step::Lease, &e);
                return false;
            }
        }
        match self.archive.archive_day(&*self.raw, lease.day).await {
            Ok(outcome) => {
                self.succeeded(lease.day, Step::Archive);
                self.metrics.days_archived.inc();
                self.metrics.archived_events.inc_by(outcome.rows);
                report.archived.push(lease.day);
                true
            }
            Err(e) => {
                self.failed(report, lease.day, Step::Archive, &e);
                false
            }
        }
    }

    /// Drops the day of `lease` if, under the lease, it still may go and its archive object
    /// covers its marked arrival (an upload of a node that lost its lease could have replaced
    /// it with an older copy: then it is archived again first).
    async fn drop_leased(&self, report: &mut LifecycleReport, lease: &DayLease, now: i64) {
        let day = lease.day;
        let fresh = match self.catalog().await {
            Ok(days) => days.into_iter().find(|f| f.day == day),
            Err(_) => return,
        };
        let Some(fresh) = fresh.filter(|f| self.windows.may_drop(f, now)) else {
            return;
        };
        match self.archive.covers(&fresh).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(%day, "the archive object does not cover the day's marked arrival; archiving it again before the drop");
                if !self.archive_leased(report, lease).await {
                    return;
                }
                if !matches!(self.archive.covers(&fresh).await, Ok(true)) {
                    return;
                }
            }
            Err(e) => {
                self.failed(report, day, Step::Archive, &e);
                return;
            }
        }
        match self.raw.drop_day(day, now).await {
            Ok(false) => {
                tracing::info!(%day, "raw day kept: events arrived since its rollup or archive");
            }
            Ok(true) => {
                self.succeeded(day, Step::Drop);
                tracing::info!(%day, events = fresh.events, "raw day dropped (rolled up and archived)");
                self.metrics.days_dropped.inc();
                report.dropped.push(day);
            }
            Err(e) => self.failed(report, day, Step::Drop, &e),
        }
    }

    async fn catalog(&self) -> Result<Vec<DayState>, LifecycleError> {
        self.raw.days().await.map_err(|e| {
            self.metrics.failures.with_label_values(&["catalog"]).inc();
            LifecycleError::Catalog(e)
        })
    }

    /// A step's failure: counted, reported to the node's health, and logged by the workers'
    /// rule ([`tidemark_core::retry`]): a retryable one (a store unavailable or full) as a
    /// warning each pass, any other (a corrupt or refused store, raw data gone) once as an
    /// error until the step succeeds. Either way the day is kept and tried again next pass.
    fn failed<E>(&self, report: &mut LifecycleReport, day: Day, step: Step, error: &E)
    where
        E: AsStoreError + std::fmt::Display,
    {
        self.health.failed(step.store(), error);
        self.metrics
            .failures
            .with_label_values(&[step.label()])
            .inc();
        let retryable = error.store_kind().is_some_and(ErrorKind::is_retryable);
        if retryable {
            tracing::warn!(%day, step = step.label(), %error, "raw-tier lifecycle step failed; the day is kept and retried");
        } else if self.lock_reported().insert((day, step)) {
            tracing::error!(%day, step = step.label(), %error, "raw-tier lifecycle step failed and retrying will not help until the cause is fixed; the day is kept and retried each pass");
        }
        report.failures.push(Failure {
            day,
            step,
            error: error.to_string(),
        });
    }

    /// A step succeeded: its store accepts writes, and a failure logged once may be logged
    /// again.
    fn succeeded(&self, day: Day, step: Step) {
        self.health.wrote(step.store());
        self.lock_reported().remove(&(day, step));
    }

    fn lock_reported(&self) -> std::sync::MutexGuard<'_, BTreeSet<(Day, Step)>> {
        self.reported
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Events that arrived for a day after its partition was dropped are neither rolled up
    /// nor archived (a rollup would overwrite the day's totals with them alone); say so once.
    fn warn_arrivals_after_drop(&self, days: &[DayState]) {
        let Ok(mut warned) = self.warned.lock() else {
            return;
        };
        for s in days {
            if let Some(dropped) = s.dropped_ms
                && s.last_arrival_ms > dropped
                && warned.insert(s.day)
            {
                tracing::warn!(day = %s.day, "events arrived for a day after its raw partition was dropped; they are not rolled up or archived");
            }
        }
    }

    /// Runs a pass now and then every `every` (at least 1 s) until `cancel`. A pass cut short
    /// by `cancel` is harmless: a day is marked only after its job completed, and a temporary
    /// archive object left behind is deleted by the next archive of that day.
    pub async fn run(self, every: Duration, cancel: CancellationToken) {
        let every = every.max(Duration::from_secs(1));
        // A pass that could not read the catalog: the workers' rule (`tidemark_core::retry`),
        // from one second up to `every`.
        let mut retry = Retry::new("events lifecycle", Duration::from_secs(1), every);
        loop {
            let pause = tokio::select! {
                _ = cancel.cancelled() => return,
                result = self.run_once() => match result {
                    Ok(_) => {
                        retry.succeeded();
                        every
                    }
                    Err(error) => retry.failed(&error, error.is_retryable()),
                },
            };
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(day: Day, last_arrival_ms: i64) -> DayState {
        DayState {
            day,
            events: 1,
            last_arrival_ms,
            rolled_up_arrival_ms: None,
            archived_arrival_ms: None,
            dropped_ms: None,
        }
    }

    const H: i64 = 3_600_000;

    #[test]
    fn windows() {
        let w = Windows {
            raw_retention_ms: 7 * DAY_MS,
            calendar: Calendar::utc(),
            lateness_ms: H,
        };
        let day = Day::parse("2026-03-10").unwrap();
        let end = day.plus(1).utc_start_ms();
        assert!(!w.closed(day, end + H - 1));
        assert!(w.closed(day, end + H));

        let mut s = state(day, end - 5);
        assert!(!w.due(&s, end + H - 1));
        assert!(w.due(&s, end + H));
        // A fresh arrival must settle first.
        s.last_arrival_ms = end + H - 1;
        assert!(!w.due(&s, end + H));
        assert!(w.due(&s, end + H - 1 + SETTLE_MS));

        // Not rolled up and archived: never dropped, at risk from retention − 1 day on.
        s.last_arrival_ms = end - 5;
        assert!(!w.may_drop(&s, end + 30 * DAY_MS));
        assert!(!w.at_risk(&s, end + 6 * DAY_MS - 1));
        assert!(w.at_risk(&s, end + 6 * DAY_MS));
        s.rolled_up_arrival_ms = Some(end - 5);
        assert!(!w.may_drop(&s, end + 30 * DAY_MS));
        s.archived_arrival_ms = Some(end - 5);
        assert!(!w.at_risk(&s, end + 30 * DAY_MS));
        assert!(!w.may_drop(&s, end - 5 + 7 * DAY_MS - 1));
        assert!(w.may_drop(&s, end - 5 + 7 * DAY_MS));
        // Dirty again: not current, not droppable.
        s.last_arrival_ms = end + 2 * DAY_MS;
        assert!(!w.may_drop(&s, end + 30 * DAY_MS));
    }

    #[test]
    fn days_the_store_expires_by_itself_are_at_risk_a_day_before() {
        let w = Windows {
            raw_retention_ms: 7 * DAY_MS,
            calendar: Calendar::utc(),
            lateness_ms: H,
        };
        let day = Day::parse("2026-03-10").unwrap();
        let expiry = day.plus(8).utc_start_ms();
        // Late events keep the arrival rule quiet; the store's own expiry does not wait.
        let mut s = state(day, day.plus(5).utc_start_ms());
        let now = expiry - DAY_MS;
        assert!(!w.at_risk(&s, now));
        assert!(!w.at_risk_of_expiry(&s, now - 1, Some(expiry)));
        assert!(w.at_risk_of_expiry(&s, now, Some(expiry)));
        assert!(
            !w.at_risk_of_expiry(&s, now, None),
            "SQLite keeps days until dropped"
        );
        s.rolled_up_arrival_ms = Some(s.last_arrival_ms);
        s.archived_arrival_ms = Some(s.last_arrival_ms);
        assert!(
            !w.at_risk_of_expiry(&s, now, Some(expiry)),
            "safely elsewhere"
        );
    }
}
