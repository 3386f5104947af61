use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use tidemark_core::clock::ManualClock;

use super::*;
use crate::raw::{InfluxRaw, MinuteCount, RawError, SqliteRaw};
use crate::rollups::{MysqlRollups, SqliteRollups};
use crate::testing::InfluxServer;

/// 2026-11-28T10:00:00Z.
const T: i64 = 1_795_860_000_000;

fn day() -> Day {
    Day::of_utc_ms(T)
}

fn ev(kind: &str, listing: Option<i64>, session: Option<&str>, page: Option<&str>) -> Event {
    let mut e = Event::new(kind, T);
    e.listing_id = listing;
    e.session_id = session.map(Into::into);
    e.page_url = page.map(Into::into);
    e
}

fn bot(mut e: Event) -> Event {
    e.fields.insert("bot".into(), true.into());
    e
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

/// `rows` without their visitor sketches, each sketch checked first: it counts the row's
/// `uniques`.
fn figures(rows: Vec<DailyRow>) -> Vec<DailyRow> {
    rows.into_iter()
        .map(|mut r| {
            let mut u = crate::visitors::PeriodUnion::default();
            u.add(Some(&r.visitors)).unwrap();
            assert_eq!(u.estimate(), Some(r.uniques), "{r:?}");
            r.visitors.clear();
            r
        })
        .collect()
}

/// Where the tests run: the embedded default, or InfluxDB (started by the test, a retention
/// policy of 10 years for the fixed dates) and MariaDB (a scratch database).
#[derive(Debug, Clone, Copy)]
enum Mode {
    Embedded,
    Production,
}

struct Stores {
    _dir: tempfile::TempDir,
    _influx: Option<InfluxServer>,
    scratch: Option<String>,
    raw: Arc<dyn RawStore>,
    rollups: Arc<dyn RollupStore>,
}

impl Drop for Stores {
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

async fn stores(mode: Mode) -> Stores {
    let dir = tempfile::tempdir().unwrap();
    match mode {
        Mode::Embedded => {
            let raw = Arc::new(SqliteRaw::open(&dir.path().join("raw.db")).unwrap());
            let rollups = Arc::new(SqliteRollups::open(&dir.path().join("rollups.db")).unwrap());
            Stores {
                _dir: dir,
                _influx: None,
                scratch: None,
                raw,
                rollups,
            }
        }
        Mode::Production => {
            let influx = InfluxServer::start().unwrap();
            let raw = InfluxRaw::connect(
                &format!("{}?retention=3650d", influx.url("rollup")),
                &dir.path().join("catalog.db"),
            )
            .await
            .unwrap();
            let url = tidemark_core::mysql::scratch_database(
                &tidemark_core::mysql::test_server_url(),
                "tm_rollup_unit",
            )
            .await
            .unwrap();
            let rollups = MysqlRollups::connect(&url, 2).await.unwrap();
            Stores {
                _dir: dir,
                _influx: Some(influx),
                scratch: Some(url),
                raw: Arc::new(raw),
                rollups: Arc::new(rollups),
            }
        }
    }
}

async fn state(raw: &dyn RawStore, day: Day) -> DayState {
    raw.days()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.day == day)
        .unwrap()
}

/// The day's fixture: what each event contributes is in its comment.
fn fixture() -> Vec<Event> {
    let mut later = ev("view", Some(1), Some("s1"), Some("/item/1"));
    later.time_ms = T + 13 * 3_600_000; // same day, later: same (session, page)
    let mut next_day = ev("view", Some(1), Some("s9"), Some("/item/1"));
    next_day.time_ms = day().plus(1).utc_start_ms(); // the next day: not this day's
    vec![
        ev("view", Some(1), Some("s1"), Some("/item/1")), // 1 view, unique (s1, /item/1)
        ev("view", Some(1), Some("s1"), Some("/item/1")), // same ms, same pair: total only
        later,                                            // total only
        ev("view", Some(1), Some("s1"), Some("/search")), // new pair (s1, /search)
        ev("view", Some(1), Some("s2"), Some("/item/1")), // new pair (s2, /item/1)
        ev("view", Some(1), None, Some("/item/1")),       // no session: total only
        bot(ev("view", Some(1), Some("s3"), Some("/item/1"))), // bot: nothing
        ev("click", Some(1), Some("s1"), Some("/item/1")), // click 1/1
        ev("contact", Some(2), Some("s4"), None),         // missing page is a value
        ev("contact", Some(2), Some("s4"), None),         // same pair
        ev("contact", Some(2), Some("s5"), None),         // new pair
        ev("email_click", None, None, None),              // no listing: nothing
        next_day,
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn totals_uniques_bots_and_events_without_listing() {
    totals_uniques_bots_and_events_without_listing_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn totals_uniques_bots_and_events_without_listing_on_influxdb_and_mariadb() {
    totals_uniques_bots_and_events_without_listing_in(Mode::Production).await;
}

async fn totals_uniques_bots_and_events_without_listing_in(mode: Mode) {
    let s = stores(mode).await;
    s.raw.append(fixture(), T + 1).await.unwrap();
    let out = roll_up_day(&*s.raw, &*s.rollups, day(), T + 2)
        .await
        .unwrap();
    assert_eq!(
        out,
        RollupOutcome {
            day: day(),
            events_read: 12,
            bots_skipped: 1,
            without_listing_skipped: 1,
            rows_written: 3,
            as_of_arrival_ms: T + 1,
        }
    );
    assert_eq!(
        s.rollups.day_rows(day()).await.unwrap(),
        vec![
            row(1, "click", 1, 1),
            row(1, "view", 6, 3),
            row(2, "contact", 3, 2)
        ]
    );
    // The next day is its own day.
    roll_up_day(&*s.raw, &*s.rollups, day().plus(1), T + 2)
        .await
        .unwrap();
    assert_eq!(
        s.rollups.day_rows(day().plus(1)).await.unwrap(),
        vec![row(1, "view", 1, 1)]
    );
    let st = state(&*s.raw, day()).await;
    assert_eq!(st.rolled_up_arrival_ms, Some(T + 1));
    assert!(st.rollup_current());
    let json = serde_json::to_value(&out).unwrap();
    assert_eq!(json["day"], "2026-11-28");
    assert_eq!(json["rows_written"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_run_overwrites_and_a_late_event_changes_the_totals() {
    a_re_run_overwrites_and_a_late_event_changes_the_totals_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_run_overwrites_and_a_late_event_changes_the_totals_on_influxdb_and_mariadb() {
    a_re_run_overwrites_and_a_late_event_changes_the_totals_in(Mode::Production).await;
}

async fn a_re_run_overwrites_and_a_late_event_changes_the_totals_in(mode: Mode) {
    let s = stores(mode).await;
    s.raw.append(fixture(), T + 1).await.unwrap();
    let first = roll_up_day(&*s.raw, &*s.rollups, day(), T + 2)
        .await
        .unwrap();
    let rows = s.rollups.day_rows(day()).await.unwrap();
    let again = roll_up_day(&*s.raw, &*s.rollups, day(), T + 3)
        .await
        .unwrap();
    assert_eq!(again, first);
    assert_eq!(
        s.rollups.day_rows(day()).await.unwrap(),
        rows,
        "not doubled"
    );

    // A late event for the day: the day is dirty until rolled up again.
    s.raw
        .append(
            vec![
                ev("view", Some(1), Some("s7"), Some("/item/1")),
                ev("click", Some(3), Some("s7"), None),
            ],
            T + 5_000,
        )
        .await
        .unwrap();
    let st = state(&*s.raw, day()).await;
    assert!(!st.rollup_current());
    let out = roll_up_day(&*s.raw, &*s.rollups, day(), T + 6_000)
        .await
        .unwrap();
    assert_eq!(
        (out.events_read, out.rows_written, out.as_of_arrival_ms),
        (14, 4, T + 5_000)
    );
    assert_eq!(
        s.rollups.day_rows(day()).await.unwrap(),
        vec![
            row(1, "click", 1, 1),
            row(1, "view", 7, 4),
            row(2, "contact", 3, 2),
            row(3, "click", 1, 1)
        ]
    );
    assert!(state(&*s.raw, day()).await.rollup_current());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_no_longer_produced_are_deleted() {
    rows_no_longer_produced_are_deleted_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_no_longer_produced_are_deleted_on_influxdb_and_mariadb() {
    rows_no_longer_produced_are_deleted_in(Mode::Production).await;
}

async fn rows_no_longer_produced_are_deleted_in(mode: Mode) {
    let s = stores(mode).await;
    // Yesterday's run left a row for listing 9, which the raw day does not hold (e.g. its
    // events were re-flagged as bots): the re-run removes it, in the same transaction.
    s.rollups
        .upsert_day(day(), vec![row(9, "view", 4, 4), row(1, "view", 1, 1)])
        .await
        .unwrap();
    s.raw.append(fixture(), T + 1).await.unwrap();
    roll_up_day(&*s.raw, &*s.rollups, day(), T + 2)
        .await
        .unwrap();
    assert_eq!(
        s.rollups.day_rows(day()).await.unwrap(),
        vec![
            row(1, "click", 1, 1),
            row(1, "view", 6, 3),
            row(2, "contact", 3, 2)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_gone_refuses_and_keeps_existing_totals() {
    raw_gone_refuses_and_keeps_existing_totals_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_gone_refuses_and_keeps_existing_totals_on_influxdb_and_mariadb() {
    raw_gone_refuses_and_keeps_existing_totals_in(Mode::Production).await;
}

async fn raw_gone_refuses_and_keeps_existing_totals_in(mode: Mode) {
    let s = stores(mode).await;
    let good = vec![row(1, "view", 6, 3)];
    // No record of the day at all.
    let never = day().plus(-3);
    s.rollups.upsert_day(never, good.clone()).await.unwrap();
    let err = roll_up_day(&*s.raw, &*s.rollups, never, T)
        .await
        .unwrap_err();
    assert!(
        matches!(err, RollupError::NoEvents { day, future: false } if day == never),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "the raw tier has no event of 2026-11-25; nothing rolled up, existing totals are kept"
    );
    let future = day().plus(30);
    assert_eq!(
        roll_up_day(&*s.raw, &*s.rollups, future, T)
            .await
            .unwrap_err()
            .to_string(),
        format!(
            "the raw tier has no event of {future} (a day in the future); nothing rolled up, existing totals are kept"
        )
    );
    assert_eq!(s.rollups.day_rows(never).await.unwrap(), good);

    // Rolled up and archived, then dropped; a late event for the day is refused (it could
    // never be counted), and the rollup still refuses to overwrite the good totals.
    s.raw.append(fixture(), T + 1).await.unwrap();
    roll_up_day(&*s.raw, &*s.rollups, day(), T + 2)
        .await
        .unwrap();
    let rows = s.rollups.day_rows(day()).await.unwrap();
    let dropped_at = day().plus(8).utc_start_ms();
    assert!(
        !s.raw.drop_day(day(), dropped_at).await.unwrap(),
        "not archived yet: kept"
    );
    s.raw.mark_archived(day(), T + 1).await.unwrap();
    assert!(s.raw.drop_day(day(), dropped_at).await.unwrap());
    let late = s
        .raw
        .append(
            vec![ev("view", Some(1), Some("s1"), Some("/item/1"))],
            dropped_at + 1,
        )
        .await;
    assert!(
        matches!(late, Err(RawError::DayDropped(d)) if d == day()),
        "{late:?}"
    );
    let err = roll_up_day(&*s.raw, &*s.rollups, day(), dropped_at + 2)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "raw events for 2026-11-28 are gone (its partition was dropped at 2026-12-06T00:00:00.000Z); existing totals are kept"
    );
    assert_eq!(
        s.rollups.day_rows(day()).await.unwrap(),
        rows,
        "never zeros or partial totals"
    );
}

/// A raw tier that misbehaves during a rollup: appends an event while the first chunk is read,
/// or loses events (as a partition dropped mid-read would).
#[derive(Debug)]
struct Meddling {
    inner: Arc<dyn RawStore>,
    append_during_read: bool,
    lose_events: bool,
    chunks: AtomicUsize,
}

#[async_trait]
impl RawStore for Meddling {
    async fn append(&self, events: Vec<Event>, now_ms: i64) -> Result<(), RawError> {
        self.inner.append(events, now_ms).await
    }
    fn calendar(&self) -> &crate::calendar::Calendar {
        self.inner.calendar()
    }
    async fn read_chunk(
        &self,
        day: Day,
        after: i64,
        limit: usize,
    ) -> Result<(Vec<Event>, Option<i64>), StoreError> {
        if self.chunks.fetch_add(1, Ordering::SeqCst) == 0 && self.append_during_read {
            let late = ev("view", Some(1), Some("s8"), Some("/item/1"));
            self.inner
                .append(vec![late], T + 9_000)
                .await
                .expect("late append");
        }
        let (mut chunk, next) = self.inner.read_chunk(day, after, limit).await?;
        if self.lose_events {
            chunk.truncate(chunk.len().saturating_sub(2));
        }
        Ok((chunk, next))
    }
    async fn days(&self) -> Result<Vec<DayState>, StoreError> {
        self.inner.days().await
    }
    async fn mark_rolled_up(&self, day: Day, arrival_ms: i64) -> Result<(), StoreError> {
        self.inner.mark_rolled_up(day, arrival_ms).await
    }
    async fn clear(&self) -> Result<(), StoreError> {
        self.inner.clear().await
    }
    async fn record_dropped(&self, days: &[DayState]) -> Result<(), StoreError> {
        self.inner.record_dropped(days).await
    }
    async fn day_bytes(&self) -> Result<Vec<(Day, u64)>, StoreError> {
        self.inner.day_bytes().await
    }
    async fn mark_archived(&self, day: Day, arrival_ms: i64) -> Result<(), StoreError> {
        self.inner.mark_archived(day, arrival_ms).await
    }
    async fn drop_day(&self, day: Day, now_ms: i64) -> Result<bool, StoreError> {
        self.inner.drop_day(day, now_ms).await
    }
    async fn counts_per_minute(&self, a: i64, b: i64) -> Result<Vec<MinuteCount>, StoreError> {
        self.inner.counts_per_minute(a, b).await
    }
    async fn top_listings(&self, d: Day, n: usize) -> Result<Vec<(i64, u64)>, StoreError> {
        self.inner.top_listings(d, n).await
    }
}

fn meddling(inner: &Arc<dyn RawStore>, append_during_read: bool, lose_events: bool) -> Meddling {
    Meddling {
        inner: Arc::clone(inner),
        append_during_read,
        lose_events,
        chunks: AtomicUsize::new(0),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_arriving_during_the_rollup_keeps_the_day_dirty() {
    an_event_arriving_during_the_rollup_keeps_the_day_dirty_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_arriving_during_the_rollup_keeps_the_day_dirty_on_influxdb_and_mariadb() {
    an_event_arriving_during_the_rollup_keeps_the_day_dirty_in(Mode::Production).await;
}

async fn an_event_arriving_during_the_rollup_keeps_the_day_dirty_in(mode: Mode) {
    let s = stores(mode).await;
    s.raw.append(fixture(), T + 1).await.unwrap();
    let raw = meddling(&s.raw, true, false);
    let out = roll_up_day(&raw, &*s.rollups, day(), T + 2).await.unwrap();
    // Whether or not the read saw the late event, the mark is the arrival before it.
    assert_eq!(out.as_of_arrival_ms, T + 1);
    let st = state(&*s.raw, day()).await;
    assert_eq!(
        (st.rolled_up_arrival_ms, st.last_arrival_ms),
        (Some(T + 1), T + 9_000)
    );
    assert!(
        !st.rollup_current(),
        "dirty: rolled up again by the next pass"
    );
    let again = roll_up_day(&*s.raw, &*s.rollups, day(), T + 10_000)
        .await
        .unwrap();
    assert_eq!(again.as_of_arrival_ms, T + 9_000);
    assert!(state(&*s.raw, day()).await.rollup_current());
    assert_eq!(
        s.rollups.day_rows(day()).await.unwrap(),
        vec![
            row(1, "click", 1, 1),
            row(1, "view", 7, 4),
            row(2, "contact", 3, 2)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_read_is_refused_and_writes_nothing() {
    a_short_read_is_refused_and_writes_nothing_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_read_is_refused_and_writes_nothing_on_influxdb_and_mariadb() {
    a_short_read_is_refused_and_writes_nothing_in(Mode::Production).await;
}

async fn a_short_read_is_refused_and_writes_nothing_in(mode: Mode) {
    let s = stores(mode).await;
    s.raw.append(fixture(), T + 1).await.unwrap();
    roll_up_day(&*s.raw, &*s.rollups, day(), T + 2)
        .await
        .unwrap();
    let rows = s.rollups.day_rows(day()).await.unwrap();
    s.raw
        .append(vec![ev("view", Some(5), Some("s1"), None)], T + 3)
        .await
        .unwrap();
    let raw = meddling(&s.raw, false, true);
    let err = roll_up_day(&raw, &*s.rollups, day(), T + 4)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "raw events for 2026-11-28 are gone (the catalog counts 13 events but only 11 could be read); existing totals are kept"
    );
    assert_eq!(s.rollups.day_rows(day()).await.unwrap(), rows);
    assert!(!state(&*s.raw, day()).await.rollup_current());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_day_larger_than_a_chunk_is_read_whole() {
    a_day_larger_than_a_chunk_is_read_whole_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_day_larger_than_a_chunk_is_read_whole_on_influxdb_and_mariadb() {
    a_day_larger_than_a_chunk_is_read_whole_in(Mode::Production).await;
}

async fn a_day_larger_than_a_chunk_is_read_whole_in(mode: Mode) {
    let s = stores(mode).await;
    let n = 2 * ROLLUP_CHUNK + 3;
    let events: Vec<Event> = (0..n)
        .map(|i| {
            let session = format!("s{}", i % 1000);
            ev("view", Some(42), Some(&session), Some("/item/42"))
        })
        .collect();
    s.raw.append(events, T + 1).await.unwrap();
    let raw = meddling(&s.raw, false, false);
    let out = roll_up_day(&raw, &*s.rollups, day(), T + 2).await.unwrap();
    assert_eq!(out.events_read, n as u64);
    assert_eq!(raw.chunks.load(Ordering::SeqCst), 3);
    assert_eq!(
        s.rollups.day_rows(day()).await.unwrap(),
        vec![row(42, "view", n as u64, 1000)]
    );
}

/// Day leases whose release is slow to arrive, counting acquisitions made while another is
/// still out: a rollup waiting for its turn must not take the day (renewing the same holder's
/// lease) before the one ahead of it has let it go, or that release pulls the lease from
/// under it.
#[derive(Debug)]
struct SlowRelease(Arc<dyn crate::leases::DayLeases>, AtomicUsize, AtomicUsize);

#[async_trait]
impl crate::leases::DayLeases for SlowRelease {
    async fn acquire(&self, day: Day) -> Result<Option<DayLease>, StoreError> {
        if self.1.fetch_add(1, Ordering::SeqCst) > 0 {
            self.2.fetch_add(1, Ordering::SeqCst);
        }
        self.0.acquire(day).await
    }
    async fn holds(&self, lease: &DayLease) -> Result<bool, StoreError> {
        self.0.holds(lease).await
    }
    async fn release(&self, lease: &DayLease) -> Result<(), StoreError> {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let released = self.0.release(lease).await;
        self.1.fetch_sub(1, Ordering::SeqCst);
        released
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_rollups_of_one_day_in_one_process_follow_each_other_on_mariadb() {
    let s = stores(Mode::Production).await;
    s.raw.append(fixture(), T + 1).await.unwrap();
    let clock = Arc::new(ManualClock::new(T + 7_200_000));
    let leases = s.rollups.day_leases(std::time::Duration::from_secs(300));
    let slow = Arc::new(SlowRelease(
        leases,
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    ));
    let svc = RollupService::new(Arc::clone(&s.raw) as _, Arc::clone(&s.rollups) as _, clock)
        .with_leases(Arc::clone(&slow) as _);
    let (a, b) = tokio::join!(svc.roll_up(day()), svc.roll_up(day()));
    assert_eq!(a.unwrap(), b.unwrap());
    assert_eq!(
        slow.2.load(Ordering::SeqCst),
        0,
        "a lease taken before the last was released"
    );
    assert_eq!(svc.rollups().day_rows(day()).await.unwrap().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_rolls_up_with_its_clock() {
    the_service_rolls_up_with_its_clock_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_rolls_up_with_its_clock_on_influxdb_and_mariadb() {
    the_service_rolls_up_with_its_clock_in(Mode::Production).await;
}

async fn the_service_rolls_up_with_its_clock_in(mode: Mode) {
    let s = stores(mode).await;
    s.raw.append(fixture(), T + 1).await.unwrap();
    let clock = Arc::new(ManualClock::new(T + 7_200_000));
    let svc = RollupService::new(Arc::clone(&s.raw) as _, Arc::clone(&s.rollups) as _, clock);
    let (a, b) = tokio::join!(svc.roll_up(day()), svc.roll_up(day()));
    assert_eq!(a.unwrap(), b.unwrap());
    assert_eq!(svc.rollups().day_rows(day()).await.unwrap().len(), 3);
    assert!(matches!(
        svc.roll_up(day().plus(5)).await,
        Err(RollupError::NoEvents { future: true, .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_one_pass_read_counts_as_the_chunked_read() {
    let s = stores(Mode::Embedded).await;
    let mut events = fixture();
    let mut flagged = ev("click", Some(2), Some("s9"), None);
    flagged.fields.insert("ua_class".into(), "scanner".into());
    flagged.fields.insert("bot".into(), true.into());
    let mut not_flagged = ev("click", Some(2), Some("s9"), None);
    not_flagged.fields.insert("bot".into(), false.into());
    events.extend([flagged, not_flagged]);
    s.raw.append(events, T).await.unwrap();

    let one_pass = s
        .raw
        .fold_day(day(), DayAggregate::default())
        .await
        .unwrap();
    // The trait's own fold, through `read_chunk`, one event per chunk.
    let chunked = meddling(&s.raw, false, false);
    let mut by_chunks = DayAggregate::default();
    let mut cursor = Some(0);
    while let Some(after) = cursor {
        let (chunk, next) = chunked.read_chunk(day(), after, 1).await.unwrap();
        for e in &chunk {
            by_chunks.add(RollupRow::of(e));
        }
        cursor = next;
    }
    let default_fold = chunked
        .fold_day(day(), DayAggregate::default())
        .await
        .unwrap();
    let counts = |a: &DayAggregate| (a.events_read, a.bots_skipped, a.without_listing_skipped);
    assert_eq!(counts(&one_pass), (14, 2, 1));
    assert_eq!(counts(&by_chunks), counts(&one_pass));
    assert_eq!(counts(&default_fold), counts(&one_pass));
    let rows = figures(one_pass.rows());
    assert!(rows.contains(&row(2, "click", 1, 1)), "{rows:?}");
    assert_eq!(figures(by_chunks.rows()), rows);
    assert_eq!(figures(default_fold.rows()), rows);
}

#[test]
fn visits_compacted_midway_still_count_each_visitor_once() {
    let mut agg = DayAggregate::default();
    let add = |agg: &mut DayAggregate, session: &str, page: Option<&str>| {
        agg.add(RollupRow {
            kind: "view",
            listing_id: Some(7),
            session_id: Some(session),
            page_url: page,
            bot: false,
        });
    };
    add(&mut agg, "s1", Some("/a"));
    add(&mut agg, "s2", None);
    add(&mut agg, "s1", Some("/a"));
    agg.compact();
    assert_eq!(agg.visits.len(), 2);
    // The same visits again after the compaction, and one new.
    add(&mut agg, "s2", None);
    add(&mut agg, "s1", Some("/a"));
    add(&mut agg, "s1", Some("/b"));
    agg.compact();
    add(&mut agg, "s1", Some("/b"));
    assert_eq!(figures(agg.rows()), vec![row(7, "view", 7, 3)]);
}

#[test]
fn two_merged_halves_count_as_the_whole_day() {
    let events = [
        ev("view", Some(1), Some("s1"), Some("/a")),
        ev("view", Some(1), Some("s2"), None),
        bot(ev("view", Some(1), Some("s3"), None)),
        ev("click", Some(2), Some("s1"), Some("/b")),
        ev("view", Some(1), Some("s1"), Some("/a")),
        ev("view", None, Some("s1"), None),
        ev("view", Some(1), Some("s4"), None),
        ev("click", Some(2), None, None),
        ev("contact", Some(3), Some("s2"), Some("/a")),
    ];
    let fold = |events: &[Event]| {
        let mut agg = DayAggregate::default();
        for e in events {
            agg.add(RollupRow::of(e));
        }
        agg
    };
    let whole = fold(&events);
    let counts = |a: &DayAggregate| (a.events_read, a.bots_skipped, a.without_listing_skipped);
    for cut in 0..=events.len() {
        let mut merged = fold(&events[..cut]);
        // The second half interns in its own order: kinds, sessions and pages renumbered.
        merged.merge(fold(&events[cut..]));
        assert_eq!(counts(&merged), (9, 1, 1), "cut at {cut}");
        assert_eq!(
            figures(merged.rows()),
            vec![
                row(1, "view", 4, 3),
                row(2, "click", 2, 1),
                row(3, "contact", 1, 1)
            ],
            "cut at {cut}"
        );
    }
    assert_eq!(counts(&whole), (9, 1, 1));
}

/// A day's sketch of many visitors estimates them as well as any union does: the coupons go
/// in in the order the visits were first seen, never sorted by their hash (which skews the
/// sketch's own running estimate upwards, by 8 % at 10,000 visitors).
#[test]
fn one_day_of_many_visitors_is_estimated_within_two_percent() {
    for n in [2_000u32, 10_000, 60_000] {
        let mut agg = DayAggregate::default();
        for i in 0..n {
            agg.add(RollupRow {
                kind: "view",
                listing_id: Some(7),
                session_id: Some(&format!("s{i}")),
                page_url: Some("/item/7"),
                bot: false,
            });
        }
        let rows = agg.rows();
        let mut u = crate::visitors::PeriodUnion::default();
        u.add(Some(&rows[0].visitors)).unwrap();
        let got = u.estimate().unwrap() as f64;
        let error = (got - f64::from(n)).abs() / f64::from(n);
        assert!(error < 0.02, "{got} for {n} visitors");
    }
}
