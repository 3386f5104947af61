//! The daily rollup (DESIGN.md part C "Daily rollup", seed 002): one day of raw events (a day
//! of `events.time_zone`, [`crate::calendar`]) → one row per `(listing_id, day, kind)` in
//! `listing_daily`.
//!
//! The rule, in the order [`roll_up_day`] applies it:
//! 1. Take the day's catalog entry ([`DayState`]). No entry, or the partition was dropped →
//!    [`RollupError::RawGone`] and nothing is written: existing totals are never replaced by
//!    the zeros an empty read would give. Remember its `last_arrival_ms`.
//! 2. Read the day ([`RawStore::fold_day`]: the embedded tier in two halves of its rows read
//!    at once, each lent row by row and the two aggregations merged
//!    ([`DayAggregate::merge`]); others in chunks of [`ROLLUP_CHUNK`] events). Skip events
//!    flagged `bot = true` and events without a `listing_id`. Per `(listing_id, kind)`:
//!    - `total` = number of events. One event is one row, as in the seed (`b.total += 1`) and
//!      as the dashboard counts; the `count` field is kept in the raw tier and the archive but
//!      not summed (its writers always send 1).
//!    - `uniques` = number of distinct `(session_id, page_url)` among the events that carry a
//!      `session_id`; a missing `page_url` is one value of its own. Events without a session
//!      (e.g. email opens and clicks) count in `total` but not in `uniques`: there is no
//!      visitor to tell apart, and lumping them all into one "unknown visitor" would be as
//!      wrong as counting each as new.
//!    - `visitors` = those distinct visitors as a sketch ([`crate::visitors`]), so that the
//!      visitors of a month or a year can be counted without reading raw rows again.
//! 3. If fewer events were read than the catalog counted, part of the day is missing (dropped
//!    while reading): refused as [`RollupError::RawGone`], nothing written.
//! 4. Replace the day in the summary tier ([`RollupStore::upsert_day`]: a re-run overwrites,
//!    never doubles; rows no longer produced are deleted).
//! 5. Mark the day rolled up as of the arrival remembered in step 1, so an event that arrived
//!    during the rollup leaves the day dirty and it is rolled up again. (If the catalog shows
//!    more events than were read while its last arrival is still that same millisecond, the
//!    mark is skipped: the day stays dirty.)
//!
//! [`RollupService`] runs it with shared stores and a clock, one rollup at a time per process
//! (so the scheduler, `POST /v1/rollups/{day}` and a re-run never interleave their writes),
//! each under the day's lease, whose token fences the summary write (so no two nodes
//! interleave theirs either, [`crate::leases`]).

use std::collections::HashMap;
use std::sync::Arc;

use compact_str::CompactString;
use serde::{Serialize, Serializer};
use tidemark_core::clock::SharedClock;
use tidemark_core::day::Day;
use tidemark_core::store::{AsStoreError, ErrorKind, StoreError};
use tidemark_core::timefmt::rfc3339_ms;
use tokio::sync::Mutex;

use crate::leases::{DayLease, DayLeases};
use crate::model::Event;
use crate::raw::{DayState, RawStore};
use crate::rollups::{DailyRow, RollupStore};
use crate::usage::KindUsage;
use crate::visitors::{self, Visitors};

/// Events read from the raw tier per chunk.
pub const ROLLUP_CHUNK: usize = 50_000;

/// What one rollup did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct RollupOutcome {
    /// The day rolled up, `YYYY-MM-DD`.
    #[serde(serialize_with = "day_string")]
    #[schema(value_type = String, format = Date)]
    pub day: Day,
    /// Raw events read (all of the day, bots and events without a listing included).
    pub events_read: u64,
    /// Events left out because they were flagged `bot = true`.
    pub bots_skipped: u64,
    /// Events left out because they have no `listing_id`.
    pub without_listing_skipped: u64,
    /// Rows of `listing_daily` the day now has.
    pub rows_written: usize,
    /// The day is marked rolled up as of this arrival time (Unix ms).
    pub as_of_arrival_ms: i64,
}

fn day_string<S: Serializer>(day: &Day, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(day)
}

/// Why a rollup was refused or failed. Nothing was written to `listing_daily` in any case.
#[derive(Debug, thiserror::Error)]
pub enum RollupError {
    /// The day's raw events are not (all) in the raw tier; existing totals are kept.
    #[error("raw events for {day} are gone ({why}); existing totals are kept")]
    RawGone {
        /// The day.
        day: Day,
        /// What the raw tier says about it.
        why: String,
    },
    /// The raw tier has no event of the day (a day in the future, one without traffic, or one
    /// whose catalog entry is gone): nothing is rolled up and existing totals are kept.
    #[error("the raw tier has no event of {day}{}; nothing rolled up, existing totals are kept", if *future { " (a day in the future)" } else { "" })]
    NoEvents {
        /// The day.
        day: Day,
        /// Whether the day has not started yet.
        future: bool,
    },
    /// The raw tier could not be read.
    #[error("raw tier: {0}")]
    Raw(#[source] StoreError),
    /// The summary tier could not be written.
    #[error("rollup store: {0}")]
    Store(#[source] StoreError),
}

impl AsStoreError for RollupError {
    fn as_store_error(&self) -> Option<&StoreError> {
        match self {
            RollupError::Raw(e) | RollupError::Store(e) => Some(e),
            _ => None,
        }
    }
    fn as_store_error_mut(&mut self) -> Option<&mut StoreError> {
        match self {
            RollupError::Raw(e) | RollupError::Store(e) => Some(e),
            _ => None,
        }
    }
}

/// One event as the rollup reads it, borrowed from the raw tier's row ([`RawStore::fold_day`]):
/// only the columns the rule needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RollupRow<'a> {
    /// The event kind.
    pub kind: &'a str,
    /// The listing, if any.
    pub listing_id: Option<i64>,
    /// The session, if any.
    pub session_id: Option<&'a str>,
    /// The page, if any.
    pub page_url: Option<&'a str>,
    /// Flagged `bot = true` ([`Event::is_bot`]).
    pub bot: bool,
}

impl<'a> RollupRow<'a> {
    /// The rollup's view of `e`.
    pub fn of(e: &'a Event) -> Self {
        Self {
            kind: &e.kind,
            listing_id: e.listing_id,
            session_id: e.session_id.as_deref(),
            page_url: e.page_url.as_deref(),
            bot: e.is_bot(),
        }
    }
}

/// Hash maps of the aggregation: foldhash, seeded per map, several times faster than the
/// standard SipHash on these short keys.
type Fast = foldhash::fast::RandomState;

/// Interns strings to dense numbers, so the visits are small numbers instead of string copies
/// (a day of 2,000,000 events has far fewer distinct sessions and pages than events); a string
/// is copied once, when first seen. Keys of up to 24 bytes (session ids, most paths) are held
/// inline in the table, so a lookup reads one cache line, not a second one behind a pointer.
#[derive(Debug, Default)]
struct Interner {
    ids: HashMap<CompactString, u32, Fast>,
}

impl Interner {
    fn id(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.ids.len() as u32;
        self.ids.insert(s.into(), id);
        id
    }

    /// Interns every string of `other`: its numbers mapped to this interner's.
    fn absorb(&mut self, other: &Interner) -> Vec<u32> {
        let mut to = vec![0; other.ids.len()];
        for (s, id) in &other.ids {
            to[*id as usize] = self.id(s);
        }
        to
    }
}

/// Totals of one `(listing_id, kind)` while reading.
#[derive(Debug)]
struct Bucket {
    listing_id: i64,
    kind: u32,
    total: u64,
    uniques: u64,
}

/// The aggregation of one day, step 2 of the module docs: fed one [`RollupRow`] at a time by
/// [`RawStore::fold_day`], which hands it back when the day is read.
#[derive(Debug, Default)]
pub struct DayAggregate {
    kinds: Vec<String>,
    /// `(listing_id, kind)` → index in `buckets`.
    bucket_of: HashMap<(i64, u32), u32, Fast>,
    buckets: Vec<Bucket>,
    /// Every `(bucket, session, page)` visit with its visitor hash, packed by [`visit`]; kept
    /// sorted and free of
    /// duplicates up to `distinct_upto` ([`DayAggregate::compact`]). Sorting a vector of
    /// numbers is several times cheaper than probing a hash set of millions of visits, whose
    /// every insert misses the cache.
    visits: Vec<u128>,
    distinct_upto: usize,
    sessions: Interner,
    pages: Interner,
    events_read: u64,
    bots_skipped: u64,
    without_listing_skipped: u64,
}

/// Stands for a missing `page_url` (interned numbers start at 0 and never reach it).
const NO_PAGE: u32 = u32::MAX;

/// Visits gathered beyond the distinct ones before they are compacted again.
const COMPACT_EVERY: usize = 1 << 20;

/// One visit as one number: bucket, session and page, in that order of significance, then
/// the visitor's hash ([`visitors::visitor_hash`], a function of session and page, so it never
/// tells two equal visits apart), taken while the event's strings are at hand so that the
/// sketches need not look them up again.
fn visit(bucket: u32, session: u32, page: u32, hash: u32) -> u128 {
    (u128::from(bucket) << 96)
        | (u128::from(session) << 64)
        | (u128::from(page) << 32)
        | u128::from(hash)
}

impl DayAggregate {
    /// Counts one event of the day.
    pub fn add(&mut self, e: RollupRow<'_>) {
        self.events_read += 1;
        if e.bot {
            self.bots_skipped += 1;
            return;
        }
        let Some(listing_id) = e.listing_id else {
            self.without_listing_skipped += 1;
            return;
        };
        let kind = self.kind_id(e.kind);
        let b = self.bucket_id(listing_id, kind);
        self.buckets[b as usize].total += 1;
        if let Some(session) = e.session_id {
            let hash = visitors::visitor_hash(session, e.page_url);
            let session = self.sessions.id(session);
            let page = e.page_url.map_or(NO_PAGE, |p| self.pages.id(p));
            self.visits.push(visit(b, session, page, hash));
            if self.visits.len() >= 2 * self.distinct_upto + COMPACT_EVERY {
                self.compact();
            }
        }
    }

    /// Folds `other`, an aggregation of other events of the same day, into this one: the
    /// result is the aggregation of both sets of events (a visitor seen by both counts once).
    pub fn merge(&mut self, mut other: DayAggregate) {
        if self.events_read == 0 {
            // Nothing to fold into: take `other` whole, nothing renumbered.
            *self = other;
            return;
        }
        self.events_read += other.events_read;
        self.bots_skipped += other.bots_skipped;
        self.without_listing_skipped += other.without_listing_skipped;
        let kinds: Vec<u32> = other.kinds.iter().map(|k| self.kind_id(k)).collect();
        let buckets: Vec<u32> = other
            .buckets
            .iter()
            .map(|o| {
                let b = self.bucket_id(o.listing_id, kinds[o.kind as usize]);
                self.buckets[b as usize].total += o.total;
                b
            })
            .collect();
        let sessions = self.sessions.absorb(&other.sessions);
        let pages = self.pages.absorb(&other.pages);
        other.compact();
        self.visits.reserve(other.visits.len());
        for v in other.visits {
            let page = (v >> 32) as u32;
            self.visits.push(visit(
                buckets[(v >> 96) as usize],
                sessions[(v >> 64) as u32 as usize],
                if page == NO_PAGE {
                    NO_PAGE
                } else {
                    pages[page as usize]
                },
                v as u32,
            ));
        }
        self.compact();
    }

    fn kind_id(&mut self, kind: &str) -> u32 {
        match self.kinds.iter().position(|k| k == kind) {
            Some(k) => k as u32,
            None => {
                self.kinds.push(kind.to_owned());
                self.kinds.len() as u32 - 1
            }
        }
    }

    fn bucket_id(&mut self, listing_id: i64, kind: u32) -> u32 {
        let next = self.buckets.len() as u32;
        let b = *self.bucket_of.entry((listing_id, kind)).or_insert(next);
        if b == next {
            self.buckets.push(Bucket {
                listing_id,
                kind,
                total: 0,
                uniques: 0,
            });
        }
        b
    }

    /// Sorts the visits and drops repeated ones, so they take memory in proportion to the
    /// distinct visits, not to the events.
    fn compact(&mut self) {
        self.visits.sort_unstable();
        self.visits.dedup();
        self.distinct_upto = self.visits.len();
    }

    fn rows(mut self) -> Vec<DailyRow> {
        self.compact();
        let mut visitors: Vec<Visitors> =
            self.buckets.iter().map(|_| Visitors::default()).collect();
        // The visits are in order of their interned numbers, that is of first sight, which has
        // nothing to do with their hashes. Coupons must not go in sorted by hash: the sketch's
        // running estimate assumes them in random order, and sorted ones skew it upwards.
        for v in &self.visits {
            let b = (v >> 96) as usize;
            self.buckets[b].uniques += 1;
            visitors[b].add(visitors::coupon(*v as u32));
        }
        let kinds = self.kinds;
        let mut rows: Vec<DailyRow> = self
            .buckets
            .into_iter()
            .zip(visitors)
            .map(|(b, v)| DailyRow {
                listing_id: b.listing_id,
                kind: kinds[b.kind as usize].clone(),
                total: b.total,
                uniques: b.uniques,
                visitors: v.to_bytes(),
            })
            .collect();
        rows.sort();
        rows
    }
}

/// Rolls up one day (the rule is in the module docs). Callers run at most one rollup of a
/// day at a time ([`RollupService`] does); `now_ms` is only logged.
pub async fn roll_up_day(
    raw: &dyn RawStore,
    rollups: &dyn RollupStore,
    day: Day,
    now_ms: i64,
) -> Result<RollupOutcome, RollupError> {
    Ok(roll_up(raw, rollups, day, now_ms, None).await?.0)
}

/// [`roll_up_day`] under `lease` on the day: the summary write is fenced by it
/// ([`RollupStore::upsert_day_fenced`]), so it is refused, whole, if the lease was lost.
pub async fn roll_up_day_leased(
    raw: &dyn RawStore,
    rollups: &dyn RollupStore,
    lease: &DayLease,
    now_ms: i64,
) -> Result<RollupOutcome, RollupError> {
    Ok(roll_up(raw, rollups, lease.day, now_ms, Some(lease))
        .await?
        .0)
}

/// The rollup, and whether the day had been rolled up before (a re-roll).
async fn roll_up(
    raw: &dyn RawStore,
    rollups: &dyn RollupStore,
    day: Day,
    now_ms: i64,
    lease: Option<&DayLease>,
) -> Result<(RollupOutcome, bool), RollupError> {
    let state = day_state(raw, day).await?;
    let gone = |why: String| RollupError::RawGone { day, why };
    let state = match state {
        None => {
            return Err(RollupError::NoEvents {
                day,
                future: day > raw.calendar().day_of(now_ms),
            });
        }
        Some(DayState {
            dropped_ms: Some(dropped),
            ..
        }) => {
            return Err(gone(format!(
                "its partition was dropped at {}",
                rfc3339_ms(dropped)
            )));
        }
        Some(s) => s,
    };
    let as_of = state.last_arrival_ms;
    let again = state.rolled_up_arrival_ms.is_some();

    let agg = raw
        .fold_day(day, DayAggregate::default())
        .await
        .map_err(RollupError::Raw)?;
    if agg.events_read < state.events {
        return Err(gone(format!(
            "the catalog counts {} events but only {} could be read",
            state.events, agg.events_read
        )));
    }

    let (events_read, bots_skipped, without_listing_skipped) = (
        agg.events_read,
        agg.bots_skipped,
        agg.without_listing_skipped,
    );
    let rows_written = match lease {
        Some(lease) => rollups.upsert_day_fenced(day, agg.rows(), lease).await,
        None => rollups.upsert_day(day, agg.rows()).await,
    }
    .map_err(RollupError::Store)?;
    // Arrival times have millisecond resolution: an event stored after our read but in the
    // same millisecond as `as_of` would not make the day look dirty. Then leave it unmarked.
    let after = day_state(raw, day).await?;
    if after.is_some_and(|s| s.last_arrival_ms <= as_of && s.events > events_read) {
        tracing::warn!(%day, "events arrived within the rollup's snapshot millisecond; the day stays dirty");
    } else {
        raw.mark_rolled_up(day, as_of)
            .await
            .map_err(RollupError::Raw)?;
    }
    tracing::info!(
        %day,
        events_read,
        bots_skipped,
        without_listing_skipped,
        rows_written,
        as_of_arrival = %rfc3339_ms(as_of),
        now = %rfc3339_ms(now_ms),
        "day rolled up"
    );
    let outcome = RollupOutcome {
        day,
        events_read,
        bots_skipped,
        without_listing_skipped,
        rows_written,
        as_of_arrival_ms: as_of,
    };
    Ok((outcome, again))
}

async fn day_state(raw: &dyn RawStore, day: Day) -> Result<Option<DayState>, RollupError> {
    Ok(raw
        .days()
        .await
        .map_err(RollupError::Raw)?
        .into_iter()
        .find(|s| s.day == day))
}

/// Runs rollups over shared stores, one at a time per process, each under its day's lease
/// ([`crate::leases`]), so never at the same time as another node's rollup of the day. Cheap
/// to clone.
#[derive(Debug, Clone)]
pub struct RollupService {
    raw: Arc<dyn RawStore>,
    rollups: Arc<dyn RollupStore>,
    clock: SharedClock,
    leases: Arc<dyn DayLeases>,
    one_at_a_time: Arc<Mutex<()>>,
    usage: Option<KindUsage>,
}

/// Lease time of [`RollupService::new`]'s leases: `events.day_lease`'s default.
const DAY_LEASE: std::time::Duration = std::time::Duration::from_secs(300);

impl RollupService {
    /// A service over the raw tier `raw` and the summary tier `rollups`, with the day leases
    /// that fence `rollups`' writes ([`RollupStore::day_leases`], held 5 min).
    pub fn new(raw: Arc<dyn RawStore>, rollups: Arc<dyn RollupStore>, clock: SharedClock) -> Self {
        Self {
            raw,
            leases: rollups.day_leases(DAY_LEASE),
            rollups,
            clock,
            one_at_a_time: Arc::new(Mutex::new(())),
            usage: None,
        }
    }

    /// Notes in `usage` every rollup of a day rolled up before (the raw-window report's
    /// re-rolls, [`crate::raw_window`]).
    #[must_use]
    pub fn with_usage(mut self, usage: KindUsage) -> Self {
        self.usage = Some(usage);
        self
    }

    /// Takes its days' leases from `leases`: the summary tier's under another lease time
    /// (`events.day_lease`) or holder name (tests). The lifecycle shares them.
    #[must_use]
    pub fn with_leases(mut self, leases: Arc<dyn DayLeases>) -> Self {
        self.leases = leases;
        self
    }

    /// The day leases.
    pub fn leases(&self) -> &Arc<dyn DayLeases> {
        &self.leases
    }

    /// Rolls up `day` now under its lease (waits for a rollup already running in this
    /// process). Errors as [`roll_up_day`], and [`RollupError::Store`] of kind
    /// [`tidemark_core::store::ErrorKind::Conflict`] while another node holds the day.
    pub async fn roll_up(&self, day: Day) -> Result<RollupOutcome, RollupError> {
        // The turn first, kept until the lease is released: two rollups of this process never
        // hold the day's lease at once, so the first one's release cannot pull the lease from
        // under the second (which would have renewed it under the same holder and token).
        let turn = self.one_at_a_time.lock().await;
        let lease = self
            .leases
            .acquire(day)
            .await
            .map_err(RollupError::Store)?
            .ok_or_else(|| {
                RollupError::Store(StoreError::new(
                    ErrorKind::Conflict,
                    "lease",
                    format!("another node is working on {day} (it holds the day's lease); try again shortly"),
                ))
            })?;
        let out = self.roll_up_in_turn(&lease).await;
        // A lease this process's lifecycle holds (renewed here) stays with the lifecycle.
        if !lease.renewed
            && let Err(error) = self.leases.release(&lease).await
        {
            tracing::warn!(%day, %error, "could not release the day's lease; it expires by itself");
        }
        drop(turn);
        out
    }

    /// Rolls up the day of `lease`, which the caller holds (waits for a rollup already
    /// running in this process).
    pub async fn roll_up_leased(&self, lease: &DayLease) -> Result<RollupOutcome, RollupError> {
        let _turn = self.one_at_a_time.lock().await;
        self.roll_up_in_turn(lease).await
    }

    async fn roll_up_in_turn(&self, lease: &DayLease) -> Result<RollupOutcome, RollupError> {
        let now = self.clock.now_ms();
        let (out, again) = roll_up(
            self.raw.as_ref(),
            self.rollups.as_ref(),
            lease.day,
            now,
            Some(lease),
        )
        .await?;
        if let Some(usage) = &self.usage
            && again
        {
            usage.rerolled(lease.day, now);
        }
        Ok(out)
    }

    /// The summary tier (for reports and listings).
    pub fn rollups(&self) -> &Arc<dyn RollupStore> {
        &self.rollups
    }

    /// The raw tier.
    pub fn raw(&self) -> &Arc<dyn RawStore> {
        &self.raw
    }

    /// The clock.
    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }
}

#[cfg(test)]
mod tests;
