//! The raw-tier lifecycle: rollup and archive after close + lateness, again when dirty, drop
//! only after raw_retention without arrivals and never while a rollup or archive fails
//! (DESIGN.md part C, principles 2 and 4).
//!
//! Every test runs on the embedded default (SQLite raw tier and rollups) and in production mode:
//! the raw tier on a real InfluxDB started by the test (a retention policy of 10 years, as the
//! tests' days are fixed dates) and the rollups on MariaDB (a scratch database).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use common::{Fault, FaultyStore, full, read_parquet_file};
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use tidemark_core::clock::SharedClock;
use tidemark_core::day::{DAY_MS, Day};
use tidemark_core::store::StoreError;
use tidemark_core::{Clock, ManualClock};
use tidemark_events::archive::RawArchive;
use tidemark_events::lifecycle::{Failure, Lifecycle, LifecycleReport, SETTLE_MS, Step};
use tidemark_events::metrics::EventsMetrics;
use tidemark_events::rollup::RollupService;
use tidemark_events::rollups::{
    DailyRow, MonthRow, MysqlRollups, ReportRow, RollupStore, SqliteRollups,
};
use tidemark_events::testing::InfluxServer;
use tidemark_events::{DayState, Event, EventsConfig, InfluxRaw, RawStore, SqliteRaw};

const H: i64 = 3_600_000;

/// A summary tier whose writes can be made to fail.
#[derive(Debug)]
struct Switchable {
    inner: Arc<dyn RollupStore>,
    fail: AtomicBool,
}

#[async_trait]
impl RollupStore for Switchable {
    async fn upsert_day(&self, day: Day, rows: Vec<DailyRow>) -> Result<usize, StoreError> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(StoreError::unavailable(
                "sqlite",
                "injected rollup store failure",
            ));
        }
        self.inner.upsert_day(day, rows).await
    }
    async fn put_listings(&self, tenant: &str, pairs: &[(i64, i64)]) -> Result<usize, StoreError> {
        self.inner.put_listings(tenant, pairs).await
    }
    async fn recorded_time_zone(&self) -> Result<Option<String>, StoreError> {
        self.inner.recorded_time_zone().await
    }
    async fn record_time_zone(
        &self,
        name: &str,
        replacing: Option<&str>,
    ) -> Result<(), StoreError> {
        self.inner.record_time_zone(name, replacing).await
    }
    async fn holds_summaries(&self) -> Result<bool, StoreError> {
        self.inner.holds_summaries().await
    }
    async fn add_kind_usage(
        &self,
        figures: &tidemark_events::usage::UsageFigures,
    ) -> Result<(), StoreError> {
        self.inner.add_kind_usage(figures).await
    }
    async fn kind_usage(&self) -> Result<tidemark_events::usage::UsageFigures, StoreError> {
        self.inner.kind_usage().await
    }
    async fn account_listings(
        &self,
        tenant: &str,
        account_id: i64,
        after: i64,
        limit: usize,
    ) -> Result<Vec<i64>, StoreError> {
        self.inner
            .account_listings(tenant, account_id, after, limit)
            .await
    }
    async fn months_range(
        &self,
        tenant: &str,
        account_id: i64,
        from_month: Day,
        to_month: Day,
        kind: Option<&str>,
        listings: std::ops::RangeInclusive<i64>,
    ) -> Result<Vec<MonthRow>, StoreError> {
        self.inner
            .months_range(tenant, account_id, from_month, to_month, kind, listings)
            .await
    }
    async fn period_uniques(
        &self,
        tenant: &str,
        account_id: i64,
        from: Day,
        to: Day,
        kind: Option<&str>,
        listings: std::ops::RangeInclusive<i64>,
    ) -> Result<Vec<(i64, String, Option<u64>)>, StoreError> {
        self.inner
            .period_uniques(tenant, account_id, from, to, kind, listings)
            .await
    }
    async fn report_range(
        &self,
        tenant: &str,
        account_id: i64,
        from: Day,
        to: Day,
        kind: Option<&str>,
        listings: std::ops::RangeInclusive<i64>,
    ) -> Result<Vec<ReportRow>, StoreError> {
        self.inner
            .report_range(tenant, account_id, from, to, kind, listings)
            .await
    }
    async fn day_rows(&self, day: Day) -> Result<Vec<DailyRow>, StoreError> {
        self.inner.day_rows(day).await
    }
}

#[derive(Debug, Clone, Copy)]
enum Mode {
    Embedded,
    Production,
}

struct World {
    _dir: tempfile::TempDir,
    _influx: Option<InfluxServer>,
    /// The MariaDB scratch database (production mode), dropped with the world.
    scratch: Option<String>,
    archive_dir: std::path::PathBuf,
    raw: Arc<dyn RawStore>,
    rollups: Arc<Switchable>,
    store: Arc<FaultyStore>,
    clock: Arc<ManualClock>,
    metrics: EventsMetrics,
    lifecycle: Option<Lifecycle>,
}

async fn world(start_ms: i64, mode: Mode) -> World {
    let dir = tempfile::tempdir().unwrap();
    let (raw, inner, influx, scratch): (Arc<dyn RawStore>, Arc<dyn RollupStore>, _, _) = match mode
    {
        Mode::Embedded => (
            Arc::new(SqliteRaw::open(&dir.path().join("raw.db")).unwrap()),
            Arc::new(SqliteRollups::open(&dir.path().join("rollups.db")).unwrap()),
            None,
            None,
        ),
        Mode::Production => {
            let influx = InfluxServer::start().unwrap();
            let raw = InfluxRaw::connect(
                &format!("{}?retention=3650d", influx.url("lifecycle")),
                &dir.path().join("catalog.db"),
            )
            .await
            .unwrap();
            let url = tidemark_core::mysql::scratch_database(
                &tidemark_core::mysql::test_server_url(),
                "tm_lifecycle",
            )
            .await
            .unwrap();
            let rollups = MysqlRollups::connect(&url, 2).await.unwrap();
            (Arc::new(raw), Arc::new(rollups), Some(influx), Some(url))
        }
    };
    let rollups = Arc::new(Switchable {
        inner,
        fail: AtomicBool::new(false),
    });
    let archive_dir = dir.path().join("archive");
    std::fs::create_dir_all(&archive_dir).unwrap();
    let local: Arc<dyn ObjectStore> =
        Arc::new(LocalFileSystem::new_with_prefix(&archive_dir).unwrap());
    let store = FaultyStore::new(local);
    let clock = Arc::new(ManualClock::new(start_ms));
    let shared_clock: SharedClock = Arc::clone(&clock) as SharedClock;
    let service = RollupService::new(
        Arc::clone(&raw) as Arc<dyn RawStore>,
        Arc::clone(&rollups) as Arc<dyn RollupStore>,
        shared_clock,
    );
    let archive = RawArchive::new(
        Arc::clone(&store) as Arc<dyn ObjectStore>,
        ObjectPath::default(),
    );
    let metrics = EventsMetrics::unregistered();
    // Defaults: raw_retention 7 days, lateness 1 h.
    let cfg = EventsConfig::default();
    assert_eq!(cfg.raw_retention.as_millis(), 7 * DAY_MS as u128);
    assert_eq!(cfg.lateness.as_millis(), H as u128);
    let lifecycle = Lifecycle::new(service, archive, &cfg, metrics.clone());
    World {
        _dir: dir,
        _influx: influx,
        scratch,
        archive_dir,
        raw,
        rollups,
        store,
        clock,
        metrics,
        lifecycle: Some(lifecycle),
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if let Some(url) = self.scratch.take() {
            // Async work in a drop: on a thread of its own, with its own runtime.
            let _ = std::thread::spawn(move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map(|rt| rt.block_on(tidemark_core::mysql::drop_database(&url)))
            })
            .join();
        }
    }
}

impl World {
    async fn append(&self, events: Vec<Event>) {
        self.raw.append(events, self.clock.now_ms()).await.unwrap();
    }
    async fn pass(&self) -> LifecycleReport {
        self.lifecycle.as_ref().unwrap().run_once().await.unwrap()
    }
    async fn state(&self, day: Day) -> DayState {
        self.raw
            .days()
            .await
            .unwrap()
            .into_iter()
            .find(|s| s.day == day)
            .unwrap()
    }
    fn archived(&self, day: Day) -> Vec<Event> {
        read_parquet_file(
            &self
                .archive_dir
                .join(format!("events/day={day}/events.parquet")),
        )
    }
    fn failures(&self, step: &str) -> u64 {
        self.metrics.failures.with_label_values(&[step]).get()
    }
}

fn report(rolled_up: &[Day], archived: &[Day], dropped: &[Day]) -> LifecycleReport {
    LifecycleReport {
        rolled_up: rolled_up.to_vec(),
        archived: archived.to_vec(),
        dropped: dropped.to_vec(),
        failures: Vec::new(),
        at_risk: Vec::new(),
        busy: Vec::new(),
    }
}

fn row(listing_id: i64, kind: &str, total: u64, uniques: u64) -> DailyRow {
    DailyRow {
        listing_id,
        kind: kind.into(),
        total,
        uniques,
        visitors: Vec::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolled_up_and_archived_after_close_and_lateness_again_when_dirty_dropped_after_retention()
{
    rolled_up_and_archived_after_close_and_lateness_again_when_dirty_dropped_after_retention_in(
        Mode::Embedded,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolled_up_and_archived_after_close_and_lateness_again_when_dirty_dropped_after_retention_on_influxdb_and_mariadb()
 {
    rolled_up_and_archived_after_close_and_lateness_again_when_dirty_dropped_after_retention_in(
        Mode::Production,
    )
    .await;
}

async fn rolled_up_and_archived_after_close_and_lateness_again_when_dirty_dropped_after_retention_in(
    mode: Mode,
) {
    let day = Day::parse("2026-03-10").unwrap();
    let end = day.plus(1).utc_start_ms();
    let w = world(day.utc_start_ms() + 10 * H, mode).await;
    let t = day.utc_start_ms() + 9 * H;
    // Same session and page twice: 3 views, 2 uniques.
    w.append(vec![
        full("view", t, 1, "s1", "/item/1"),
        full("view", t, 1, "s1", "/item/1"),
        full("view", t + 5, 1, "s2", "/item/1"),
    ])
    .await;

    // Open day, then closed but inside the lateness window: nothing happens.
    w.clock.set(end - 1);
    assert_eq!(w.pass().await, report(&[], &[], &[]));
    w.clock.set(end + H - 1);
    assert_eq!(w.pass().await, report(&[], &[], &[]));
    assert_eq!(w.rollups.day_rows(day).await.unwrap(), vec![]);
    let s = w.state(day).await;
    assert_eq!(
        (s.rolled_up_arrival_ms, s.archived_arrival_ms),
        (None, None)
    );

    // Closed plus lateness: rolled up and archived.
    w.clock.set(end + H);
    assert_eq!(w.pass().await, report(&[day], &[day], &[]));
    assert_eq!(
        w.rollups.day_rows(day).await.unwrap(),
        vec![row(1, "view", 3, 2)]
    );
    assert_eq!(w.archived(day), w.raw.day_events(day).await.unwrap());
    assert_eq!(w.archived(day).len(), 3);
    assert_eq!(w.pass().await, report(&[], &[], &[]));

    // A late event makes the day dirty: once settled, rolled up and archived again.
    w.clock.set(end + 5 * H);
    let late_arrival = w.clock.now_ms();
    w.append(vec![full("view", t + 9, 1, "s3", "/item/1")])
        .await;
    assert!(!w.state(day).await.rollup_current());
    assert_eq!(w.pass().await, report(&[], &[], &[]), "not settled yet");
    w.clock.advance(SETTLE_MS);
    assert_eq!(w.pass().await, report(&[day], &[day], &[]));
    assert_eq!(
        w.rollups.day_rows(day).await.unwrap(),
        vec![row(1, "view", 4, 3)]
    );
    assert_eq!(w.archived(day).len(), 4);
    let s = w.state(day).await;
    assert_eq!(s.rolled_up_arrival_ms, Some(late_arrival));
    assert_eq!(s.archived_arrival_ms, Some(late_arrival));

    // Dropped only raw_retention after the last arrival (not after the day's end).
    w.clock.set(late_arrival + 7 * DAY_MS - 1);
    assert_eq!(w.pass().await, report(&[], &[], &[]));
    assert_eq!(w.raw.day_events(day).await.unwrap().len(), 4);
    w.clock.set(late_arrival + 7 * DAY_MS);
    assert_eq!(w.pass().await, report(&[], &[], &[day]));
    assert_eq!(
        w.state(day).await.dropped_ms,
        Some(late_arrival + 7 * DAY_MS)
    );
    assert_eq!(w.raw.day_events(day).await.unwrap(), vec![]);
    // Summary and archive stay.
    assert_eq!(
        w.rollups.day_rows(day).await.unwrap(),
        vec![row(1, "view", 4, 3)]
    );
    assert_eq!(w.archived(day).len(), 4);
    assert_eq!(w.pass().await, report(&[], &[], &[]));

    assert_eq!(w.metrics.days_rolled_up.get(), 2);
    assert_eq!(w.metrics.days_archived.get(), 2);
    assert_eq!(w.metrics.archived_events.get(), 3 + 4);
    assert_eq!(w.metrics.days_dropped.get(), 1);
    assert_eq!(w.metrics.raw_days.get(), 0);
    for step in ["rollup", "archive", "drop", "catalog"] {
        assert_eq!(w.failures(step), 0, "{step}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_dropped_while_the_archive_fails() {
    nothing_is_dropped_while_the_archive_fails_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_dropped_while_the_archive_fails_on_influxdb_and_mariadb() {
    nothing_is_dropped_while_the_archive_fails_in(Mode::Production).await;
}

async fn nothing_is_dropped_while_the_archive_fails_in(mode: Mode) {
    let day = Day::parse("2026-03-10").unwrap();
    let end = day.plus(1).utc_start_ms();
    let w = world(day.utc_start_ms() + 10 * H, mode).await;
    w.append(vec![full("click", day.utc_start_ms() + H, 7, "s", "/p")])
        .await;
    let arrival = w.clock.now_ms();
    w.store.set(Fault::FailWrites);

    // Far past retention: rolled up, but the archive fails, so the day is kept.
    w.clock.set(end + 30 * DAY_MS);
    let r = w.pass().await;
    assert_eq!(r.rolled_up, vec![day]);
    assert_eq!(r.archived, vec![]);
    assert_eq!(r.dropped, vec![]);
    assert_eq!(r.at_risk, vec![day]);
    assert_eq!(r.failures.len(), 1);
    assert_eq!(
        (r.failures[0].day, r.failures[0].step),
        (day, Step::Archive)
    );
    assert!(
        r.failures[0].error.contains("injected write failure"),
        "{}",
        r.failures[0].error
    );
    let r = w.pass().await;
    assert_eq!(
        (r.archived.len(), r.dropped.len(), r.failures.len()),
        (0, 0, 1)
    );
    assert_eq!(w.failures("archive"), 2);
    assert_eq!(w.metrics.days_at_risk.get(), 1);
    assert_eq!(w.raw.day_events(day).await.unwrap().len(), 1);
    let s = w.state(day).await;
    assert_eq!(
        (s.rolled_up_arrival_ms, s.archived_arrival_ms, s.dropped_ms),
        (Some(arrival), None, None)
    );

    // Healthy again: archived, and dropped in the same pass (retention long over).
    w.store.set(Fault::None);
    let r = w.pass().await;
    assert_eq!(r, report(&[], &[day], &[day]));
    assert_eq!(w.metrics.days_at_risk.get(), 0);
    assert_eq!(w.archived(day).len(), 1);
    assert_eq!(w.failures("archive"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_dropped_while_the_rollup_fails() {
    nothing_is_dropped_while_the_rollup_fails_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_dropped_while_the_rollup_fails_on_influxdb_and_mariadb() {
    nothing_is_dropped_while_the_rollup_fails_in(Mode::Production).await;
}

async fn nothing_is_dropped_while_the_rollup_fails_in(mode: Mode) {
    let day = Day::parse("2026-03-10").unwrap();
    let end = day.plus(1).utc_start_ms();
    let w = world(day.utc_start_ms() + 10 * H, mode).await;
    w.append(vec![full("view", day.utc_start_ms() + H, 7, "s", "/p")])
        .await;
    w.rollups.fail.store(true, Ordering::SeqCst);

    w.clock.set(end + 30 * DAY_MS);
    let r = w.pass().await;
    assert_eq!(r.rolled_up, vec![]);
    assert_eq!(r.archived, vec![day]);
    assert_eq!(r.dropped, vec![]);
    assert_eq!(r.at_risk, vec![day]);
    assert_eq!(
        r.failures
            .iter()
            .map(|f| (f.day, f.step))
            .collect::<Vec<_>>(),
        vec![(day, Step::Rollup)]
    );
    let r = w.pass().await;
    assert_eq!(
        (r.archived.len(), r.dropped.len(), r.failures.len()),
        (0, 0, 1)
    );
    assert_eq!(w.failures("rollup"), 2);
    assert_eq!(w.raw.day_events(day).await.unwrap().len(), 1);
    assert_eq!(w.rollups.day_rows(day).await.unwrap(), vec![]);

    w.rollups.fail.store(false, Ordering::SeqCst);
    assert_eq!(w.pass().await, report(&[day], &[], &[day]));
    assert_eq!(
        w.rollups.day_rows(day).await.unwrap(),
        vec![row(7, "view", 1, 1)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imported_history_is_kept_for_raw_retention_after_it_arrived() {
    imported_history_is_kept_for_raw_retention_after_it_arrived_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imported_history_is_kept_for_raw_retention_after_it_arrived_on_influxdb_and_mariadb() {
    imported_history_is_kept_for_raw_retention_after_it_arrived_in(Mode::Production).await;
}

async fn imported_history_is_kept_for_raw_retention_after_it_arrived_in(mode: Mode) {
    // Today is 2026-03-20; events of 2025-01-15 are imported now.
    let now = Day::parse("2026-03-20").unwrap().utc_start_ms() + 12 * H;
    let old = Day::parse("2025-01-15").unwrap();
    let w = world(now, mode).await;
    w.append(
        (0..5)
            .map(|i| {
                full(
                    "view",
                    old.utc_start_ms() + i * 1000,
                    3,
                    &format!("s{i}"),
                    "/a",
                )
            })
            .collect(),
    )
    .await;
    assert_eq!(w.pass().await, report(&[], &[], &[]), "not settled yet");
    w.clock.advance(SETTLE_MS);
    assert_eq!(w.pass().await, report(&[old], &[old], &[]));
    assert_eq!(
        w.rollups.day_rows(old).await.unwrap(),
        vec![row(3, "view", 5, 5)]
    );

    // Kept as long as fresh data: raw_retention from its arrival.
    w.clock.set(now + 7 * DAY_MS - 1);
    let r = w.pass().await;
    assert_eq!(r, report(&[], &[], &[]));
    assert_eq!(w.raw.day_events(old).await.unwrap().len(), 5);
    w.clock.set(now + 7 * DAY_MS);
    assert_eq!(w.pass().await, report(&[], &[], &[old]));
    assert_eq!(w.raw.day_events(old).await.unwrap(), vec![]);
    assert_eq!(w.archived(old).len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_day_not_processed_near_the_end_of_retention_is_at_risk() {
    a_day_not_processed_near_the_end_of_retention_is_at_risk_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_day_not_processed_near_the_end_of_retention_is_at_risk_on_influxdb_and_mariadb() {
    a_day_not_processed_near_the_end_of_retention_is_at_risk_in(Mode::Production).await;
}

async fn a_day_not_processed_near_the_end_of_retention_is_at_risk_in(mode: Mode) {
    let day = Day::parse("2026-03-10").unwrap();
    let end = day.plus(1).utc_start_ms();
    let w = world(day.utc_start_ms() + H, mode).await;
    w.append(vec![full("view", day.utc_start_ms(), 1, "s", "/p")])
        .await;
    w.store.set(Fault::FailWrites);
    // Last arrival lies before the day's end: counted from the end. 6 days is the threshold.
    w.clock.set(end + 6 * DAY_MS - 1);
    let r = w.pass().await;
    assert_eq!(r.at_risk, vec![]);
    assert_eq!(
        r.failures,
        vec![Failure {
            day,
            step: Step::Archive,
            error: r.failures[0].error.clone(),
        }]
    );
    w.clock.set(end + 6 * DAY_MS);
    assert_eq!(w.pass().await.at_risk, vec![day]);
    assert_eq!(w.metrics.days_at_risk.get(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_passes_until_cancelled() {
    run_passes_until_cancelled_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_passes_until_cancelled_on_influxdb_and_mariadb() {
    run_passes_until_cancelled_in(Mode::Production).await;
}

async fn run_passes_until_cancelled_in(mode: Mode) {
    let day = Day::parse("2026-03-10").unwrap();
    let mut w = world(day.utc_start_ms() + H, mode).await;
    w.append(vec![full("view", day.utc_start_ms(), 1, "s", "/p")])
        .await;
    w.clock.set(day.plus(1).utc_start_ms() + 2 * H);
    let cancel = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(
        w.lifecycle
            .take()
            .unwrap()
            .run(std::time::Duration::from_secs(3600), cancel.clone()),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !w.state(day).await.archive_current() {
        assert!(std::time::Instant::now() < deadline, "no pass ran");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(w.state(day).await.rollup_current());
    cancel.cancel();
    tokio::time::timeout(std::time::Duration::from_secs(10), task)
        .await
        .expect("run returns once cancelled")
        .unwrap();
}

#[test]
fn metrics_register() {
    let registry = prometheus::Registry::new();
    let m = EventsMetrics::register(&registry).unwrap();
    m.failures.with_label_values(&["archive"]).inc();
    let names: Vec<String> = registry
        .gather()
        .iter()
        .map(|f| f.name().to_owned())
        .collect();
    for n in [
        "tidemark_events_days_rolled_up_total",
        "tidemark_events_days_archived_total",
        "tidemark_events_days_dropped_total",
        "tidemark_events_lifecycle_failures_total",
        "tidemark_events_days_at_risk",
    ] {
        assert!(names.iter().any(|x| x == n), "{n} in {names:?}");
    }
}
