//! Moving a store to another `events.time_zone` (`tidemark events move-zone --to <zone>`):
//! every part cut by days is re-cut from the events themselves. Run it with every node of the
//! store stopped.
//!
//! The move records its progress in place of the store's zone, `move:<from>:<to>:<phase>`
//! ([`PendingMove`]), so a node refuses to start while one is under way
//! ([`crate::calendar::agree_time_zone`]) and a second run resumes it where it stood. Each
//! phase can be interrupted anywhere and run again:
//! 1. **stage**: archive every raw day not archived up to its last arrival (in the old zone,
//!    as the lifecycle does), so the archive holds every event; then copy every archived event
//!    into a scratch raw store cut in the new zone (`events/zone-move.db`, SQLite). A re-run
//!    starts the scratch afresh; nothing else has changed yet.
//! 2. **archive**: archive each day of the scratch over the archive (each object replaced
//!    whole, read back and checked: [`RawArchive::archive_day`]), then delete the objects of
//!    days the new zone has no events on. From here the scratch is the source, and a re-run
//!    repeats the phase from it.
//! 3. **rebuild**: empty the summary tier's days around the scratch's, then roll each day of
//!    the scratch up into it ([`crate::rollup::roll_up_day`]); then clear the raw tier
//!    ([`RawStore::clear`]) and reload from the scratch the days over the span the raw tier
//!    held when the move began (from its earliest day not dropped), marked rolled up and
//!    archived as of the arrival their archive objects were written at; the older days are
//!    entered as dropped.
//! 4. Record the new zone, and remove the scratch.
//!
//! The event-kind audit and the raw-window report keep the days they were noted on.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use tidemark_core::day::Day;
use tidemark_core::store::StoreError;

use crate::archive::{ArchiveError, RawArchive};
use crate::calendar::{Calendar, UTC};
use crate::raw::{DayState, RawError, RawStore, SqliteRaw};
use crate::rollup::{RollupError, roll_up_day};
use crate::rollups::RollupStore;

/// Events handed to the raw tier per append when reloading it.
const RELOAD_CHUNK: usize = 10_000;

/// A phase of a move (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Archive the raw tier, copy the archive into the scratch.
    Stage,
    /// Archive the scratch's days over the archive.
    Archive,
    /// Summaries and raw tier from the scratch.
    Rebuild,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Stage => "stage",
            Phase::Archive => "archive",
            Phase::Rebuild => "rebuild",
        }
    }
}

/// A move under way, as recorded in place of the store's zone:
/// `move:<from>:<to>:<phase>[:<held_from_ms>]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingMove {
    /// The zone the store's days were cut in.
    pub from: String,
    /// The zone they are being moved to.
    pub to: String,
    /// The phase to run next.
    pub phase: Phase,
    /// From the stage on: the first instant (Unix ms) of the earliest day the raw tier still
    /// held when the move began (`i64::MAX`: none). The new days ending after it are reloaded
    /// into the raw tier, the others entered as dropped, so the move keeps what the raw tier
    /// keeps.
    pub held_from_ms: Option<i64>,
}

impl PendingMove {
    /// The move a recorded zone names, if it names one.
    pub fn parse(recorded: &str) -> Option<Self> {
        let mut parts = recorded.strip_prefix("move:")?.split(':');
        let (from, to, phase) = (parts.next()?, parts.next()?, parts.next()?);
        let phase = [Phase::Stage, Phase::Archive, Phase::Rebuild]
            .into_iter()
            .find(|p| p.name() == phase)?;
        let held_from_ms = match parts.next() {
            Some(ms) => Some(ms.parse().ok()?),
            None => None,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(Self {
            from: from.to_owned(),
            to: to.to_owned(),
            phase,
            held_from_ms,
        })
    }

    /// The recorded form.
    pub fn record(&self) -> String {
        let mut out = format!("move:{}:{}:{}", self.from, self.to, self.phase.name());
        if let Some(ms) = self.held_from_ms {
            out.push_str(&format!(":{ms}"));
        }
        out
    }
}

/// What a move did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveReport {
    /// The zone the days were cut in.
    pub from: String,
    /// The zone they are cut in now.
    pub to: String,
    /// The phase an interrupted move was resumed at (`None`: started afresh, or nothing to do).
    pub resumed_at: Option<Phase>,
    /// Events re-cut (every archived event).
    pub events: u64,
    /// Days of the new zone with events.
    pub days: usize,
    /// Of those, the days reloaded into the raw tier (those over the span it held).
    pub raw_days: usize,
    /// A move still at its stage was abandoned (`from` is the zone it was heading to, `to`
    /// the zone the store stays in).
    pub abandoned: bool,
}

/// Why a move stopped. Whatever was done stays recorded, and a re-run resumes it.
#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    /// The move cannot start or go on as asked.
    #[error("{0}")]
    Refused(String),
    /// A store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The archive failed.
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    /// The raw tier refused events.
    #[error(transparent)]
    Raw(#[from] RawError),
    /// A rollup failed.
    #[error(transparent)]
    Rollup(#[from] RollupError),
}

/// The stores a move works on.
#[derive(Debug, Clone, Copy)]
pub struct MoveStores<'a> {
    /// The summary tier, where the zone (and the move's progress) is recorded.
    pub rollups: &'a dyn RollupStore,
    /// The archive.
    pub archive: &'a RawArchive,
    /// Where the scratch raw store goes (`events/zone-move.db`).
    pub scratch: &'a Path,
}

/// Moves the store's days to `to` (see the module docs), or resumes the move under way.
/// `open_raw` opens the raw tier with its days cut in a given calendar. `now_ms` is the
/// arrival time the re-cut events are given.
///
/// # Errors
/// [`MoveError::Refused`] when another move is under way; any store's failure (the move then
/// stays recorded, and a re-run resumes it).
pub async fn move_zone<F, Fut>(
    stores: MoveStores<'_>,
    to: &Calendar,
    open_raw: F,
    now_ms: i64,
) -> Result<MoveReport, MoveError>
where
    F: Fn(Calendar) -> Fut,
    Fut: Future<Output = Result<Arc<dyn RawStore>, StoreError>>,
{
    let recorded = stores.rollups.recorded_time_zone().await?;
    let current = recorded.clone().unwrap_or_else(|| UTC.to_owned());
    let (mut pending, resumed_at) = match PendingMove::parse(&current) {
        Some(p) if p.to == to.name() => {
            let at = p.phase;
            (p, Some(at))
        }
        // Back to where it came from while nothing but the scratch was written: abandoned.
        Some(p) if p.from == to.name() && p.phase == Phase::Stage => {
            advance(stores.rollups, Some(&current), &p.from).await?;
            remove_scratch(stores.scratch);
            return Ok(MoveReport {
                from: p.to,
                to: p.from,
                resumed_at: Some(Phase::Stage),
                events: 0,
                days: 0,
                raw_days: 0,
                abandoned: true,
            });
        }
        Some(p) => {
            let back = if p.phase == Phase::Stage {
                format!(", or abandon it with --to {}", p.from)
            } else {
                String::new()
            };
            return Err(MoveError::Refused(format!(
                "a move of this store's days from {} to {} is under way (at its {} phase): \
                 finish it first (tidemark events move-zone --to {}){back}",
                p.from,
                p.to,
                p.phase.name(),
                p.to
            )));
        }
        None if current == to.name() => {
            return Ok(MoveReport {
                from: current.clone(),
                to: current,
                resumed_at: None,
                events: 0,
                days: 0,
                raw_days: 0,
                abandoned: false,
            });
        }
        None => {
            let p = PendingMove {
                from: current.clone(),
                to: to.name().to_owned(),
                phase: Phase::Stage,
                held_from_ms: None,
            };
            advance(stores.rollups, recorded.as_deref(), &p.record()).await?;
            (p, None)
        }
    };
    let from = Calendar::named(&pending.from).map_err(|e| MoveError::Refused(e.to_string()))?;
    let mut events = 0;
    if pending.phase == Phase::Stage {
        let old_raw = open_raw(from).await?;
        let (copied, held_from_ms) = stage(stores, old_raw.as_ref(), to, now_ms).await?;
        drop(old_raw);
        events = copied;
        let was = pending.record();
        pending.held_from_ms = Some(held_from_ms);
        pending = next_phase(stores.rollups, &was, pending, Phase::Archive).await?;
    }
    if !stores.scratch.exists() {
        if pending.phase == Phase::Rebuild {
            // The archive holds every event in the new zone's days by now: the scratch is
            // made again from it.
            events = copy_archive(stores, to, now_ms).await?;
        } else {
            // Mid-archive the scratch is the only whole copy of the events in the new zone's
            // days (the archive holds days of both zones); an empty one would have every
            // archive object deleted.
            return Err(MoveError::Refused(format!(
                "the move's scratch store {} is gone while the move is at its archive \
                 phase, and the archive may hold days of both zones: restore the file and run \
                 the move again",
                stores.scratch.display()
            )));
        }
    }
    let scratch = SqliteRaw::open(stores.scratch)
        .map_err(StoreError::from)?
        .with_calendar(to.clone());
    // Read once: the phases below mark these days, but never change their events or arrivals.
    let states = scratch.days().await?;
    let days: Vec<Day> = states.iter().map(|s| s.day).collect();
    if pending.phase == Phase::Archive {
        archive_days(stores.archive, &scratch, &days).await?;
        let was = pending.record();
        pending = next_phase(stores.rollups, &was, pending, Phase::Rebuild).await?;
    }
    let new_raw = open_raw(to.clone()).await?;
    let held_from_ms = pending.held_from_ms.unwrap_or(i64::MAX);
    let raw_days = rebuild(
        stores,
        &scratch,
        new_raw.as_ref(),
        &states,
        held_from_ms,
        now_ms,
    )
    .await?;
    advance(stores.rollups, Some(&pending.record()), to.name()).await?;
    if events == 0 {
        events = states.iter().map(|s| s.events).sum();
    }
    drop(scratch);
    remove_scratch(stores.scratch);
    tracing::info!(from = %pending.from, to = %pending.to, events, days = days.len(),
        "events days moved to another time zone");
    Ok(MoveReport {
        from: pending.from,
        to: pending.to,
        resumed_at,
        events,
        days: days.len(),
        raw_days,
        abandoned: false,
    })
}

/// Phase 1: the raw tier archived, then every archived event in a fresh scratch cut in `to`.
/// Returns the events copied, and the first instant of the earliest day the raw tier holds
/// (`i64::MAX`: none).
async fn stage(
    stores: MoveStores<'_>,
    old_raw: &dyn RawStore,
    to: &Calendar,
    now_ms: i64,
) -> Result<(u64, i64), MoveError> {
    let mut held_from_ms = i64::MAX;
    // Every day's events must be in the archive: a dropped day's only copy is there.
    for state in old_raw.days().await? {
        if state.dropped_ms.is_none() {
            held_from_ms = held_from_ms.min(old_raw.calendar().start_ms(state.day));
        }
        let covered = stores.archive.covers(&state).await?;
        let archived = if state.dropped_ms.is_some() || state.archive_current() && covered {
            covered
        } else {
            stores.archive.archive_day(old_raw, state.day).await?.marked
        };
        if !archived {
            return Err(MoveError::Refused(format!(
                "day {} ({} events) is archived by the raw catalog, but its archive object {} \
                 is missing or older than that: restore it and run the move again, or abandon \
                 the move (--to {})",
                state.day,
                state.events,
                stores.archive.day_path(state.day),
                old_raw.calendar().name()
            )));
        }
    }
    let copied = copy_archive(stores, to, now_ms).await?;
    if !stores.scratch.exists() {
        return Err(MoveError::Refused(format!(
            "the move's scratch store {} went away while it was written: run the move again",
            stores.scratch.display()
        )));
    }
    Ok((copied, held_from_ms))
}

/// Every archived event into a fresh scratch cut in `to`. Returns the events copied.
async fn copy_archive(
    stores: MoveStores<'_>,
    to: &Calendar,
    now_ms: i64,
) -> Result<u64, MoveError> {
    remove_scratch(stores.scratch);
    if let Some(dir) = stores.scratch.parent() {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::file(stores.scratch, e))?;
    }
    let scratch = SqliteRaw::open(stores.scratch)
        .map_err(StoreError::from)?
        .with_calendar(to.clone());
    let mut copied = 0;
    for day in stores.archive.archived_days().await? {
        copied += stores
            .archive
            .read_day(day, async |events| {
                // The scratch drops no day, so its appends fail only as a store does.
                scratch.append(events, now_ms).await.map_err(|e| match e {
                    RawError::Store(e) => ArchiveError::Raw(e),
                    other => {
                        ArchiveError::Raw(StoreError::rejected("zone move", other.to_string()))
                    }
                })
            })
            .await?;
    }
    Ok(copied)
}

/// Phase 2: each day of the scratch archived over the archive, then the objects of other days
/// deleted.
async fn archive_days(
    archive: &RawArchive,
    scratch: &SqliteRaw,
    days: &[Day],
) -> Result<(), MoveError> {
    for &day in days {
        archive.archive_day(scratch, day).await?;
    }
    for day in archive.archived_days().await? {
        if days.binary_search(&day).is_err() {
            archive.delete_day(day).await?;
        }
    }
    Ok(())
}

/// Phase 3: summaries and raw tier from the scratch. Returns the days reloaded into the raw
/// tier.
async fn rebuild(
    stores: MoveStores<'_>,
    scratch: &SqliteRaw,
    raw: &dyn RawStore,
    states: &[DayState],
    held_from_ms: i64,
    now_ms: i64,
) -> Result<usize, MoveError> {
    // Every day the old zone may have summaries on is emptied first (an old day is at most two
    // days from the new days its events fall on: zone offsets differ by at most 26 h). A
    // replacement leaves a row whose figures did not change alone, sketch included, and a
    // month's sketch only grows: both hold for re-rolls of one day, not across zones.
    if let (Some(first), Some(last)) = (states.first(), states.last()) {
        let (first, last) = (first.day, last.day);
        let mut day = first.plus(-2);
        while day <= last.plus(2) {
            stores.rollups.upsert_day(day, Vec::new()).await?;
            day = day.plus(1);
        }
    }
    for state in states {
        roll_up_day(scratch, stores.rollups, state.day, now_ms).await?;
    }
    raw.clear().await?;
    let mut reloaded = 0;
    let mut dropped = Vec::new();
    for &state in states {
        if raw.calendar().end_ms(state.day) <= held_from_ms {
            // Its events live in the archive only, as those of a day the lifecycle dropped.
            let at = Some(state.last_arrival_ms);
            dropped.push(DayState {
                rolled_up_arrival_ms: at,
                archived_arrival_ms: at,
                dropped_ms: Some(now_ms),
                ..state
            });
            continue;
        }
        // The arrival the day's archive object was written at: the reloaded day is then
        // covered by it, as if the lifecycle had archived it.
        let arrival = state.last_arrival_ms;
        let mut cursor = Some(0);
        while let Some(after) = cursor {
            let (chunk, next) = scratch.read_chunk(state.day, after, RELOAD_CHUNK).await?;
            if !chunk.is_empty() {
                raw.append(chunk, arrival).await?;
            }
            cursor = next;
        }
        raw.mark_rolled_up(state.day, arrival).await?;
        raw.mark_archived(state.day, arrival).await?;
        reloaded += 1;
    }
    raw.record_dropped(&dropped).await?;
    Ok(reloaded)
}

/// Records `pending` at `phase` in place of the record `was`.
async fn next_phase(
    rollups: &dyn RollupStore,
    was: &str,
    pending: PendingMove,
    phase: Phase,
) -> Result<PendingMove, MoveError> {
    let next = PendingMove { phase, ..pending };
    advance(rollups, Some(was), &next.record()).await?;
    Ok(next)
}

/// Replaces the recorded zone `was` by `now`, and checks it took (another run moved it on).
async fn advance(rollups: &dyn RollupStore, was: Option<&str>, now: &str) -> Result<(), MoveError> {
    rollups.record_time_zone(now, was).await?;
    let recorded = rollups.recorded_time_zone().await?;
    if recorded.as_deref() != Some(now) {
        return Err(MoveError::Refused(format!(
            "the store's recorded zone changed under the move (now {recorded:?}): is another \
             move running?"
        )));
    }
    Ok(())
}

/// Removes the scratch file and its journal (best effort: a missing one is fine).
fn remove_scratch(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let _ = std::fs::remove_file(std::path::PathBuf::from(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_moves_round_trip() {
        let mut p = PendingMove {
            from: "UTC".into(),
            to: "Europe/Berlin".into(),
            phase: Phase::Stage,
            held_from_ms: None,
        };
        assert_eq!(p.record(), "move:UTC:Europe/Berlin:stage");
        assert_eq!(PendingMove::parse(&p.record()), Some(p.clone()));
        p.phase = Phase::Archive;
        p.held_from_ms = Some(1_700_000_000_000);
        assert_eq!(p.record(), "move:UTC:Europe/Berlin:archive:1700000000000");
        assert_eq!(PendingMove::parse(&p.record()), Some(p));
        for not_one in [
            "move:a:b:archive:x",
            "move:a:b:archive:1:2",
            "UTC",
            "Europe/Berlin",
            "move:UTC:Europe/Berlin",
            "move:a:b:done",
        ] {
            assert_eq!(PendingMove::parse(not_one), None, "{not_one}");
        }
    }
}
