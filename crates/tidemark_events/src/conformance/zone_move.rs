//! Moving a store's days to another zone ([`crate::zone_move`]): a store cut in UTC and moved
//! to `Europe/Berlin` ends up holding exactly what a store cut in `Europe/Berlin` from the
//! start holds, for the same events — summaries, visitor sketches, archive objects and raw
//! partitions — over both DST changes of 2024, whether or not the move was interrupted.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::json;
use tidemark_core::day::Day;
use tidemark_core::store::StoreError;

use super::{day, event, sorted};
use crate::archive::RawArchive;
use crate::calendar::{Calendar, agree_time_zone};
use crate::model::Event;
use crate::raw::{RawError, RawStore};
use crate::rollup::{RollupError, roll_up_day};
use crate::rollups::{ALL_LISTINGS, RollupStore};
use crate::zone_move::{MoveStores, PendingMove, move_zone};

const MIN: i64 = 60_000;

/// Opens a store's raw tier with its days cut in a calendar.
pub type OpenRaw = Arc<
    dyn Fn(Calendar) -> BoxFuture<'static, Result<Arc<dyn RawStore>, StoreError>> + Send + Sync,
>;

/// One store, as a move works on it: empty, its zone not recorded yet.
pub struct ZoneStore {
    /// The summary tier.
    pub rollups: Arc<dyn RollupStore>,
    /// The archive.
    pub archive: RawArchive,
    /// The raw tier, opened with a given calendar.
    pub open_raw: OpenRaw,
    /// Where the move's scratch store goes.
    pub scratch: PathBuf,
}

impl std::fmt::Debug for ZoneStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZoneStore")
            .field("archive", &self.archive)
            .field("scratch", &self.scratch)
            .finish_non_exhaustive()
    }
}

fn ms(rfc3339: &str) -> i64 {
    rfc3339
        .parse::<jiff::Timestamp>()
        .expect("an RFC 3339 time")
        .as_millisecond()
}

/// An event every 20 minutes over the spring and autumn changes of 2024: views and contacts of
/// three listings by eleven sessions, some bots, some without a listing.
fn history() -> Vec<Event> {
    let mut out = Vec::new();
    for (from, to) in [
        ("2024-03-29T00:00:00Z", "2024-04-02T00:00:00Z"),
        ("2024-10-24T00:00:00Z", "2024-10-31T00:00:00Z"),
    ] {
        let mut t = ms(from);
        let mut i = 0i64;
        while t < ms(to) {
            let kind = if i % 5 == 0 { "contact" } else { "view" };
            let mut e = event(kind, t, i % 3 + 1, &format!("s{}", i % 11));
            if i % 13 == 0 {
                e.fields.insert("bot".into(), json!(true));
            }
            if i % 17 == 0 {
                e.listing_id = None;
            }
            out.push(e);
            t += 20 * MIN;
            i += 1;
        }
    }
    out
}

/// When the stores are filled and moved: 2024-10-31T12:00Z.
fn now() -> i64 {
    ms("2024-10-31T12:00:00Z")
}

const RETENTION: Duration = Duration::from_secs(3 * 86_400);

/// Fills `store` as a running node would have, in `calendar`'s days: every day rolled up and
/// archived (the last one left dirty when `leave_last` is set), the days past the retention
/// dropped.
async fn fill(store: &ZoneStore, calendar: &Calendar, leave_last: bool) {
    let raw = (store.open_raw)(calendar.clone()).await.unwrap();
    agree_time_zone(calendar, raw.as_ref(), store.rollups.as_ref())
        .await
        .unwrap();
    store
        .rollups
        .put_listings("acme", &[(1, 7), (2, 7), (3, 7)])
        .await
        .unwrap();
    raw.append(history(), now() - 3_600_000).await.unwrap();
    let days = raw.days().await.unwrap();
    let keep_from = now() - RETENTION.as_millis() as i64;
    for (i, state) in days.iter().enumerate() {
        if leave_last && i + 1 == days.len() {
            continue;
        }
        roll_up_day(raw.as_ref(), store.rollups.as_ref(), state.day, now())
            .await
            .unwrap();
        store
            .archive
            .archive_day(raw.as_ref(), state.day)
            .await
            .unwrap();
        if calendar.end_ms(state.day) <= keep_from {
            assert!(
                raw.drop_day(state.day, now()).await.unwrap(),
                "{}",
                state.day
            );
        }
    }
}

/// Every event of `day`'s archive object.
async fn archived(archive: &RawArchive, day: Day) -> Vec<Event> {
    let mut out = Vec::new();
    archive
        .read_day(day, async |events| {
            out.extend(events);
            Ok(())
        })
        .await
        .unwrap();
    sorted(out)
}

/// The days of interest: both changes, with margins.
fn days() -> Vec<Day> {
    let mut out = Vec::new();
    for (a, b) in [("2024-03-25", "2024-04-05"), ("2024-10-20", "2024-11-03")] {
        let mut d = day(a);
        while d <= day(b) {
            out.push(d);
            d = d.plus(1);
        }
    }
    out
}

/// The contract (module docs). `moved` is filled in UTC (its last day neither rolled up nor
/// archived) and moved to `Europe/Berlin`; `native` is filled in `Europe/Berlin`. With
/// `interrupt`, the move is cut short again and again (each time a little later) and run once
/// more, as an operator would after a crash, until it finishes.
pub async fn zone_move(moved: ZoneStore, native: ZoneStore, interrupt: bool) {
    let berlin = Calendar::named("Europe/Berlin").unwrap();
    fill(&moved, &Calendar::utc(), true).await;
    fill(&native, &berlin, false).await;

    let stores = MoveStores {
        rollups: moved.rollups.as_ref(),
        archive: &moved.archive,
        scratch: &moved.scratch,
    };
    let open = |c: Calendar| (moved.open_raw)(c);
    let events = history().len() as u64;
    if interrupt {
        let mut budget = Duration::from_millis(5);
        let mut cuts = 0;
        loop {
            match tokio::time::timeout(budget, move_zone(stores, &berlin, &open, now())).await {
                Ok(report) => {
                    report.unwrap();
                    break;
                }
                Err(_) => {
                    cuts += 1;
                    budget *= 2;
                }
            }
            // While a move is under way no node starts, and says why.
            let recorded = moved.rollups.recorded_time_zone().await.unwrap();
            if let Some(p) = recorded.as_deref().and_then(PendingMove::parse) {
                let raw = (moved.open_raw)(berlin.clone()).await.unwrap();
                let err = agree_time_zone(&berlin, raw.as_ref(), moved.rollups.as_ref())
                    .await
                    .unwrap_err()
                    .to_string();
                assert!(err.contains("move-zone --to Europe/Berlin"), "{p:?}: {err}");
            }
        }
        assert!(cuts >= 2, "the move was cut short {cuts} times");
    } else {
        let report = move_zone(stores, &berlin, &open, now()).await.unwrap();
        assert_eq!(
            (report.from.as_str(), report.to.as_str(), report.events),
            ("UTC", "Europe/Berlin", events)
        );
        assert_eq!(report.resumed_at, None);
    }
    assert!(!moved.scratch.exists(), "the scratch is removed");
    assert_eq!(
        moved.rollups.recorded_time_zone().await.unwrap().as_deref(),
        Some("Europe/Berlin")
    );
    // Run again: nothing to do.
    let again = move_zone(stores, &berlin, &open, now()).await.unwrap();
    assert_eq!((again.events, again.days), (0, 0));

    // Summaries, day by day, and the 25-hour day whole.
    for d in days() {
        assert_eq!(
            moved.rollups.day_rows(d).await.unwrap(),
            native.rollups.day_rows(d).await.unwrap(),
            "{d}"
        );
    }
    let oct27 = day("2024-10-27");
    let counted: u64 = moved
        .rollups
        .day_rows(oct27)
        .await
        .unwrap()
        .iter()
        .map(|r| r.total)
        .sum();
    let in_day = history()
        .iter()
        .filter(|e| (berlin.start_ms(oct27)..berlin.end_ms(oct27)).contains(&e.time_ms))
        .filter(|e| !e.is_bot() && e.listing_id.is_some())
        .count() as u64;
    assert_eq!(counted, in_day, "25 hours of events");
    assert_eq!(berlin.end_ms(oct27) - berlin.start_ms(oct27), 25 * 60 * MIN);
    // The visitor sketches, through a period's uniques.
    for (from, to) in [
        ("2024-10-01", "2024-10-31"),
        ("2024-03-01", "2024-03-31"),
        ("2024-03-30", "2024-04-01"),
        ("2024-03-25", "2024-04-30"),
    ] {
        let uniques = |s: &ZoneStore| {
            let rollups = Arc::clone(&s.rollups);
            async move {
                rollups
                    .period_uniques("acme", 7, day(from), day(to), None, ALL_LISTINGS)
                    .await
                    .unwrap()
            }
        };
        let got = uniques(&moved).await;
        assert!(!got.is_empty());
        assert_eq!(got, uniques(&native).await, "{from}..{to}");
    }

    // The archive: the same days, each with the same events.
    let archived_days = moved.archive.archived_days().await.unwrap();
    assert_eq!(archived_days, native.archive.archived_days().await.unwrap());
    let mut total = 0;
    for &d in &archived_days {
        let events = archived(&moved.archive, d).await;
        total += events.len() as u64;
        assert_eq!(events, archived(&native.archive, d).await, "{d}");
    }
    assert_eq!(total, events, "every event archived once");

    // The raw tier: the days inside the retention, the same events, rolled up and archived.
    let a = (moved.open_raw)(berlin.clone()).await.unwrap();
    let b = (native.open_raw)(berlin.clone()).await.unwrap();
    let live = |raw: Arc<dyn RawStore>| async move {
        raw.days()
            .await
            .unwrap()
            .into_iter()
            .filter(|s| s.dropped_ms.is_none())
            .collect::<Vec<_>>()
    };
    let (a_days, b_days) = (live(Arc::clone(&a)).await, live(Arc::clone(&b)).await);
    assert_eq!(
        a_days.iter().map(|s| s.day).collect::<Vec<_>>(),
        b_days.iter().map(|s| s.day).collect::<Vec<_>>()
    );
    assert!(!a_days.is_empty());
    for state in &a_days {
        assert_eq!(
            sorted(a.day_events(state.day).await.unwrap()),
            sorted(b.day_events(state.day).await.unwrap()),
            "{}",
            state.day
        );
        assert!(
            state.rollup_current() && state.archive_current(),
            "{state:?}"
        );
        assert!(moved.archive.covers(state).await.unwrap(), "{state:?}");
    }
    // The days outside the retention are in the catalog as dropped, as the native store's
    // are: late events for them are refused, and a rollup of one says the raw data is gone.
    let catalog = |raw: Arc<dyn RawStore>| async move {
        raw.days()
            .await
            .unwrap()
            .iter()
            .map(|s| (s.day, s.events, s.dropped_ms.is_some()))
            .collect::<Vec<_>>()
    };
    let a_catalog = catalog(Arc::clone(&a)).await;
    assert_eq!(a_catalog, catalog(Arc::clone(&b)).await);
    let (gone, ..) = *a_catalog.iter().find(|d| d.2).expect("a dropped day");
    let late = event("view", berlin.start_ms(gone) + MIN, 1, "late");
    for raw in [&a, &b] {
        let refused = raw.append(vec![late.clone()], now()).await;
        assert!(
            matches!(refused, Err(RawError::DayDropped(d)) if d == gone),
            "{refused:?}"
        );
        let rollup = roll_up_day(raw.as_ref(), moved.rollups.as_ref(), gone, now()).await;
        assert!(
            matches!(rollup, Err(RollupError::RawGone { .. })),
            "{rollup:?}"
        );
    }
    // Nodes of the new zone start; the old zone is refused.
    agree_time_zone(&berlin, a.as_ref(), moved.rollups.as_ref())
        .await
        .unwrap();
    assert!(
        agree_time_zone(&Calendar::utc(), a.as_ref(), moved.rollups.as_ref())
            .await
            .is_err()
    );
    // And the lifecycle goes on: a late event re-rolls its local day alike.
    let last = a_days.last().unwrap().day;
    let late = event("view", berlin.start_ms(last) + 5 * MIN, 2, "late");
    for (raw, store) in [(&a, &moved), (&b, &native)] {
        raw.append(vec![late.clone()], now()).await.unwrap();
        roll_up_day(raw.as_ref(), store.rollups.as_ref(), last, now() + 1)
            .await
            .unwrap();
    }
    assert_eq!(
        moved.rollups.day_rows(last).await.unwrap(),
        native.rollups.day_rows(last).await.unwrap()
    );
}
