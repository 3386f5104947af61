//! Hit events written in groups: the events of tracking hits (`email_click`, `email_open`)
//! go to the events ingest, and the hits to their mailings' campaign statistics
//! ([`crate::stats`]), off the redirector's path, many per append.
//!
//! A hit takes a permit (at most [`MAX_PENDING_HIT_EVENTS`] wait at once: back-pressure on the
//! redirector when the events store falls behind) and queues its event. The first hit to find
//! no writer running starts one; the writer waits [`HIT_EVENT_LINGER`] unless a full group is
//! already queued, takes everything queued (at most [`HIT_EVENT_GROUP`] per append), appends
//! it in one call (and applies the group's hits to the statistics, beside it), and goes on
//! until the queue is empty. While one group is being written the next one gathers, so a burst of
//! clicks costs a few appends, not one each: on a raw tier whose appends are round trips
//! (InfluxDB with its day catalog on MariaDB) that is what lets a node answer thousands of
//! redirects a second, and on the embedded one it saves most of the commits. A permit is
//! released when its event's group is written or has failed (counted and logged):
//! [`HitEvents::drain`] waits for all of them, and a graceful shutdown drains.
//!
//! The statistics' hits gather over several groups, up to [`STATS_GROUP`] or for
//! [`STATS_LINGER`] (at once when the queue runs empty), and are applied beside the next
//! append, under a group id of their own, tried [`crate::stats::WRITE_ATTEMPTS`] times: a try whose
//! outcome was unknown (a lost connection after the commit) is not counted twice, as the
//! store applies a group id once.
//!
//! What a crash can lose: the visitor is redirected before the click is stored, so a process
//! killed outright loses the hits queued and not yet appended — at most
//! [`MAX_PENDING_HIT_EVENTS`], in practice the last [`HIT_EVENT_LINGER`] plus one append's
//! worth. Their links, mailings and every other acknowledged write are unaffected.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tidemark_events::{Event, Ingest, IngestError};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{LinksError, Result};
use crate::metrics::LinksMetrics;
use crate::stats::{StatsHit, with_tries};
use crate::store::MailingStore;

/// Most hit events waiting to be written at once before the redirector waits.
pub const MAX_PENDING_HIT_EVENTS: u32 = 10_000;

/// Most hit events in one append.
pub const HIT_EVENT_GROUP: usize = 2_000;

/// How long the writer lets a group gather before each append. At 40,000 hits/s that makes
/// groups of about 400 and 100 commits a second; the redirects do not wait for it.
pub const HIT_EVENT_LINGER: Duration = Duration::from_millis(10);

/// How long the writer waits before taking its next group, with `waiting` hits queued: a
/// group still filling gathers for [`HIT_EVENT_LINGER`] (fewer, bigger appends, each one
/// commit, an fsync on the embedded tier); a full one is taken at once, so a burst is written
/// as fast as the store appends.
fn linger(waiting: usize) -> Option<Duration> {
    (waiting < HIT_EVENT_GROUP).then_some(HIT_EVENT_LINGER)
}

/// Hits the writer gathers for the statistics before it applies them, whatever
/// [`STATS_LINGER`] says: a group is one transaction of the link store (an fsync on the
/// embedded one), and hits of the same recipients in one group are deduplicated before any
/// row is touched.
pub const STATS_GROUP: usize = 4_000;

/// Longest time the writer gathers hits for the statistics while events keep coming; once
/// the queue is empty, what it gathered is applied at once.
pub const STATS_LINGER: Duration = Duration::from_millis(100);

/// The queue of hit events and its writer (see the module docs).
#[derive(Debug, Clone)]
pub struct HitEvents {
    ingest: Ingest,
    stats: Arc<dyn MailingStore>,
    metrics: LinksMetrics,
    permits: Arc<Semaphore>,
    queue: Arc<Mutex<Queue>>,
}

#[derive(Debug, Default)]
struct Queue {
    waiting: Vec<Pending>,
    writing: bool,
}

/// Hits gathered for the statistics, with their permits.
#[derive(Debug, Default)]
struct Gathered {
    hits: Vec<StatsHit>,
    permits: Vec<OwnedSemaphorePermit>,
    /// When the first of them was gathered.
    since: Option<std::time::Instant>,
    /// The latest arrival among them (Unix ms).
    now: i64,
}

impl Gathered {
    fn add(&mut self, hit: StatsHit, permit: OwnedSemaphorePermit, now: i64) {
        self.since.get_or_insert_with(std::time::Instant::now);
        self.hits.push(hit);
        self.permits.push(permit);
        self.now = self.now.max(now);
    }

    /// Full, or gathering for [`STATS_LINGER`] already.
    fn due(&self) -> bool {
        self.hits.len() >= STATS_GROUP || self.since.is_some_and(|t| t.elapsed() >= STATS_LINGER)
    }

    fn take(&mut self) -> Gathered {
        std::mem::take(self)
    }
}

/// One queued hit.
#[derive(Debug)]
struct Pending {
    event: Event,
    /// What the mailing's statistics count of it.
    stats: Option<StatsHit>,
    /// Arrival (Unix ms).
    at_ms: i64,
    permit: OwnedSemaphorePermit,
}

impl HitEvents {
    /// Hit events appended through `ingest`, their hits applied to `stats`, counted in
    /// `metrics` (`tidemark_links_events_recorded_total`, `…_event_failures_total`,
    /// `…_stats_failures_total`).
    pub fn new(ingest: Ingest, stats: Arc<dyn MailingStore>, metrics: LinksMetrics) -> Self {
        Self {
            ingest,
            stats,
            metrics,
            permits: Arc::new(Semaphore::new(MAX_PENDING_HIT_EVENTS as usize)),
            queue: Arc::default(),
        }
    }

    /// Queues `event` and its hit for the statistics, which arrived at `now_ms`; waits only
    /// for a permit.
    ///
    /// # Errors
    /// [`LinksError::Unavailable`] once the queue is closed.
    pub async fn push(&self, event: Event, stats: Option<StatsHit>, now_ms: i64) -> Result<()> {
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| LinksError::Unavailable("event recording is closed".into()))?;
        let start_writer = {
            let mut q = self.lock();
            q.waiting.push(Pending {
                event,
                stats,
                at_ms: now_ms,
                permit,
            });
            !std::mem::replace(&mut q.writing, true)
        };
        if start_writer {
            tokio::spawn(self.clone().write_all());
        }
        Ok(())
    }

    /// Waits until every queued event has been written or has failed (and been counted).
    pub async fn drain(&self) {
        if let Ok(all) = self.permits.acquire_many(MAX_PENDING_HIT_EVENTS).await {
            drop(all);
        }
    }

    /// Writes groups until the queue is empty, then stops (the next push starts a writer).
    /// The hits for the statistics gather over several groups ([`STATS_GROUP`],
    /// [`STATS_LINGER`]), their permits held until they are applied, so [`HitEvents::drain`]
    /// waits for them too.
    async fn write_all(self) {
        let mut stats = Gathered::default();
        loop {
            let waiting = self.lock().waiting.len();
            if let Some(linger) = linger(waiting) {
                tokio::time::sleep(linger).await;
            }
            let group: Vec<Pending> = {
                let mut q = self.lock();
                if q.waiting.is_empty() {
                    if stats.hits.is_empty() {
                        q.writing = false;
                        return;
                    }
                    Vec::new()
                } else {
                    let n = q.waiting.len().min(HIT_EVENT_GROUP);
                    q.waiting.drain(..n).collect()
                }
            };
            let idle = group.is_empty();
            let now = group.iter().map(|g| g.at_ms).max().unwrap_or(stats.now);
            let mut events = Vec::with_capacity(group.len());
            let mut permits = Vec::with_capacity(group.len());
            for p in group {
                events.push(p.event);
                match p.stats {
                    Some(hit) => stats.add(hit, p.permit, now),
                    None => permits.push(p.permit),
                }
            }
            let due = idle || stats.due();
            let applying = if due {
                stats.take()
            } else {
                Gathered::default()
            };
            tokio::join!(
                async {
                    if !events.is_empty() {
                        self.append(events, now).await;
                    }
                },
                self.apply_stats(applying.hits, applying.now)
            );
            drop(permits);
            drop(applying.permits);
        }
    }

    /// The queue (a panic elsewhere while holding it leaves it usable: it only holds events).
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies hits to their mailings' statistics under one fresh group id, trying again
    /// after a failure (see the module docs).
    async fn apply_stats(&self, hits: Vec<StatsHit>, now: i64) {
        if hits.is_empty() {
            return;
        }
        let group = uuid::Uuid::now_v7().to_string();
        let applied = with_tries("campaign statistics", || {
            self.stats.apply_hits(&group, hits.clone(), now)
        })
        .await;
        if let Err(error) = applied {
            self.metrics.stats_failures.inc_by(hits.len() as u64);
            tracing::warn!(%error, hits = hits.len(), "could not count tracking hits");
        }
    }

    /// Appends one group of events; a group refused for one bad event is appended event by
    /// event, so the others are kept.
    async fn append(&self, events: Vec<Event>, now: i64) {
        let n = events.len() as u64;
        match self.ingest.record(events.clone(), now).await {
            Ok(_) => self.metrics.events_recorded.inc_by(n),
            Err(IngestError::Invalid(_)) if n > 1 => {
                for event in events {
                    self.record_one(event, now).await;
                }
            }
            Err(error) => {
                // The visitors got the right answers; the loss is counted and logged.
                self.metrics.event_failures.inc_by(n);
                tracing::warn!(%error, events = n, "could not record tracking hits");
            }
        }
    }

    async fn record_one(&self, event: Event, now: i64) {
        match self.ingest.record(vec![event], now).await {
            Ok(_) => self.metrics.events_recorded.inc(),
            Err(error) => {
                self.metrics.event_failures.inc();
                tracing::warn!(%error, "could not record a tracking hit");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use async_trait::async_trait;
    use tidemark_core::day::Day;
    use tidemark_core::store::StoreError;
    use tidemark_events::raw::{DayState, MinuteCount};
    use tidemark_events::{EventsConfig, RawError, RawStore, SqliteRaw};

    use super::*;
    use crate::sqlite::SqliteLinks;

    /// A SQLite raw tier whose appends take 20 ms and are counted.
    #[derive(Debug)]
    struct SlowCounted {
        inner: SqliteRaw,
        groups: Mutex<Vec<usize>>,
    }

    #[async_trait]
    impl RawStore for SlowCounted {
        async fn append(&self, events: Vec<Event>, now_ms: i64) -> Result<(), RawError> {
            self.groups.lock().unwrap().push(events.len());
            tokio::time::sleep(Duration::from_millis(20)).await;
            self.inner.append(events, now_ms).await
        }
        fn calendar(&self) -> &tidemark_events::calendar::Calendar {
            self.inner.calendar()
        }
        async fn read_chunk(
            &self,
            day: Day,
            after: i64,
            limit: usize,
        ) -> Result<(Vec<Event>, Option<i64>), StoreError> {
            self.inner.read_chunk(day, after, limit).await
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
        async fn counts_per_minute(
            &self,
            since_ms: i64,
            until_ms: i64,
        ) -> Result<Vec<MinuteCount>, StoreError> {
            self.inner.counts_per_minute(since_ms, until_ms).await
        }
        async fn top_listings(
            &self,
            day: Day,
            limit: usize,
        ) -> Result<Vec<(i64, u64)>, StoreError> {
            self.inner.top_listings(day, limit).await
        }
    }

    fn hit_events(cfg: EventsConfig) -> (HitEvents, Arc<SlowCounted>, tempfile::TempDir) {
        let (hits, raw, _, dir) = hit_events_and_stats(cfg);
        (hits, raw, dir)
    }

    fn hit_events_and_stats(
        cfg: EventsConfig,
    ) -> (
        HitEvents,
        Arc<SlowCounted>,
        Arc<SqliteLinks>,
        tempfile::TempDir,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let raw = Arc::new(SlowCounted {
            inner: SqliteRaw::open(&dir.path().join("raw.db")).unwrap(),
            groups: Mutex::default(),
        });
        let ingest = Ingest::new(Arc::clone(&raw) as Arc<dyn RawStore>, cfg);
        let stats = Arc::new(SqliteLinks::open(&dir.path().join("links.db")).unwrap());
        let hits = HitEvents::new(
            ingest,
            Arc::clone(&stats) as _,
            LinksMetrics::unregistered(),
        );
        (hits, raw, stats, dir)
    }

    /// The statistics' hits gather over several event groups, and a drain waits until they
    /// are applied.
    #[tokio::test]
    async fn hits_for_the_statistics_gather_over_groups_and_drain() {
        use crate::stats::{HitKind, HitSource, counter};
        let (hits, raw, stats, _dir) = hit_events_and_stats(EventsConfig::default());
        let now = now_ms();
        for i in 0..3_000 {
            let hit = StatsHit {
                mailing_id: "m".into(),
                email: format!("r{}@ex.com", i % 700),
                position: Some(0),
                kind: HitKind::Click,
                source: HitSource::Person,
                at_ms: now,
            };
            hits.push(Event::new("email_click", now), Some(hit), now)
                .await
                .unwrap();
        }
        hits.drain().await;
        let s = stats.stats("m").await.unwrap();
        assert_eq!(s.counts[counter::CLICKS], 3_000);
        assert_eq!(s.counts[counter::CLICKS_UNIQUE], 700);
        assert_eq!(raw.days().await.unwrap()[0].events, 3_000);
        assert_eq!(hits.metrics.stats_failures.get(), 0);
    }

    fn now_ms() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    }

    #[test]
    fn only_a_group_still_filling_lingers() {
        assert_eq!(linger(0), Some(HIT_EVENT_LINGER));
        assert_eq!(linger(HIT_EVENT_GROUP - 1), Some(HIT_EVENT_LINGER));
        assert_eq!(linger(HIT_EVENT_GROUP), None);
        assert_eq!(linger(3 * HIT_EVENT_GROUP), None);
    }

    #[tokio::test]
    async fn a_burst_of_hits_is_written_in_a_few_groups() {
        let (hits, raw, _dir) = hit_events(EventsConfig::default());
        let now = now_ms();
        for i in 0..3_000 {
            let mut e = Event::new("email_click", now);
            e.listing_id = Some(i);
            hits.push(e, None, now).await.unwrap();
        }
        hits.drain().await;
        let groups = raw.groups.lock().unwrap().clone();
        assert_eq!(groups.iter().sum::<usize>(), 3_000, "{groups:?}");
        assert!(groups.len() <= 4, "{groups:?}");
        assert!(groups.iter().all(|&g| g <= HIT_EVENT_GROUP), "{groups:?}");
        assert_eq!(hits.metrics.events_recorded.get(), 3_000);
        assert_eq!(hits.metrics.event_failures.get(), 0);
        let day = raw.days().await.unwrap();
        assert_eq!(day[0].events, 3_000);
    }

    #[tokio::test]
    async fn one_refused_event_does_not_take_its_group_with_it() {
        let mut cfg = EventsConfig::default();
        cfg.schema.kinds.retain(|k| k != "email_open");
        let (hits, raw, _dir) = hit_events(cfg);
        let now = now_ms();
        for kind in ["email_click", "email_open", "email_click"] {
            hits.push(Event::new(kind, now), None, now).await.unwrap();
        }
        hits.drain().await;
        assert_eq!(hits.metrics.events_recorded.get(), 2);
        assert_eq!(hits.metrics.event_failures.get(), 1);
        assert_eq!(raw.days().await.unwrap()[0].events, 2);
    }
}
