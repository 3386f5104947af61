//! Local days: a raw tier and a summary tier whose days are those of `Europe/Berlin`, over
//! its two DST changes of 2024 (DESIGN.md part C: days in a named time zone).

use std::sync::Arc;

use tidemark_core::clock::{ManualClock, SharedClock};
use tidemark_core::day::Day;

use super::{day, event, sorted};
use crate::calendar::{Calendar, UTC, agree_time_zone};
use crate::lifecycle::Windows;
use crate::raw::RawStore;
use crate::rollup::RollupService;
use crate::rollups::{ALL_LISTINGS, RollupStore};
use crate::{EventsConfig, model::Event};

const MIN: i64 = 60_000;
const H: i64 = 60 * MIN;

fn ms(rfc3339: &str) -> i64 {
    rfc3339
        .parse::<jiff::Timestamp>()
        .expect("an RFC 3339 time")
        .as_millisecond()
}

/// One view of listing 1 every half hour of `[from, to)`, each by its own session.
fn every_half_hour(from: i64, to: i64) -> Vec<Event> {
    (0..)
        .map(|i| from + i * 30 * MIN)
        .take_while(|t| *t < to)
        .map(|t| event("view", t, 1, &format!("s{t}")))
        .collect()
}

/// The contract of local days, on a raw tier and a summary tier opened with the calendar of
/// `Europe/Berlin` and empty:
/// - the zone is recorded with the summary tier at the first agreement, once, and another
///   zone is refused, naming both zones;
/// - 27 October 2024 holds 25 hours (22:00 UTC on the 26th to 23:00 UTC on the 27th), and an
///   event at 22:30 UTC on the 27th is of the 27th; 31 March 2024 holds 23 hours;
/// - a day is rolled up whole (every event of its 25 hours counted once), closes at its own
///   end, and is dropped without touching the neighbouring days' events.
pub async fn local_days(raw: Arc<dyn RawStore>, rollups: Arc<dyn RollupStore>) {
    let berlin = raw.calendar().clone();
    assert_eq!(berlin.name(), "Europe/Berlin");
    agree_time_zone(&berlin, raw.as_ref(), rollups.as_ref())
        .await
        .unwrap();
    assert_eq!(
        rollups.recorded_time_zone().await.unwrap().as_deref(),
        Some("Europe/Berlin")
    );
    // Recorded once: a second first record leaves it, and another zone is refused even while
    // the stores are empty (nodes sharing them must cut the same days).
    rollups.record_time_zone(UTC, None).await.unwrap();
    assert_eq!(
        rollups.recorded_time_zone().await.unwrap().as_deref(),
        Some("Europe/Berlin")
    );
    assert!(
        agree_time_zone(&Calendar::utc(), raw.as_ref(), rollups.as_ref())
            .await
            .is_err()
    );

    // Autumn: 21:00 UTC on the 26th (23:00 local) to 00:30 UTC on the 28th.
    let autumn = every_half_hour(ms("2024-10-26T21:00:00Z"), ms("2024-10-28T00:30:00Z"));
    // Spring: 22:00 UTC on the 30th (23:00 local) to 22:30 UTC on the 31st.
    let spring = every_half_hour(ms("2024-03-30T22:00:00Z"), ms("2024-03-31T23:00:00Z"));
    let arrival = ms("2024-11-01T12:00:00Z");
    raw.append(autumn.clone(), arrival).await.unwrap();
    raw.append(spring.clone(), arrival).await.unwrap();

    let (oct26, oct27, oct28) = (day("2024-10-26"), day("2024-10-27"), day("2024-10-28"));
    let mar31 = day("2024-03-31");
    let in_day = |events: &[Event], d: Day| -> Vec<Event> {
        let (a, b) = (berlin.start_ms(d), berlin.end_ms(d));
        sorted(
            events
                .iter()
                .filter(|e| (a..b).contains(&e.time_ms))
                .cloned()
                .collect(),
        )
    };
    let per_day: Vec<(String, u64)> = raw
        .days()
        .await
        .unwrap()
        .iter()
        .map(|s| (s.day.to_string(), s.events))
        .collect();
    // 2 and 50 (25 h) and 3 half-hours in autumn; 2 and 46 (23 h) and 2 in spring.
    let expected: Vec<(String, u64)> = [
        ("2024-03-30", 2),
        ("2024-03-31", 46),
        ("2024-04-01", 2),
        ("2024-10-26", 2),
        ("2024-10-27", 50),
        ("2024-10-28", 3),
    ]
    .iter()
    .map(|(d, n)| ((*d).to_owned(), *n))
    .collect();
    assert_eq!(per_day, expected);
    let oct27_events = sorted(raw.day_events(oct27).await.unwrap());
    assert_eq!(oct27_events, in_day(&autumn, oct27));
    assert_eq!(
        oct27_events.first().unwrap().time_ms,
        ms("2024-10-26T22:00:00Z")
    );
    assert_eq!(
        oct27_events.last().unwrap().time_ms,
        ms("2024-10-27T22:30:00Z")
    );
    assert_eq!(
        sorted(raw.day_events(mar31).await.unwrap()),
        in_day(&spring, mar31)
    );
    assert_eq!(raw.top_listings(oct27, 5).await.unwrap(), vec![(1, 50)]);
    let minutes = raw
        .counts_per_minute(berlin.start_ms(oct27), berlin.end_ms(oct27))
        .await
        .unwrap();
    assert_eq!(minutes.iter().map(|m| m.count).sum::<u64>(), 50);

    // The 25-hour day closes at its own end (23:00 UTC) plus the lateness, and rolls up whole.
    let windows = Windows::of(&EventsConfig::default(), berlin.clone());
    assert!(!windows.closed(oct27, ms("2024-10-27T23:59:59.999Z")));
    assert!(windows.closed(oct27, ms("2024-10-28T00:00:00Z")));
    let clock: SharedClock = Arc::new(ManualClock::new(ms("2024-11-02T00:00:00Z")));
    let service = RollupService::new(Arc::clone(&raw), Arc::clone(&rollups), clock);
    for d in [oct26, oct27, oct28, mar31] {
        service.roll_up(d).await.unwrap();
    }
    let totals = |rows: Vec<crate::rollups::DailyRow>| -> Vec<(String, u64, u64)> {
        rows.into_iter()
            .map(|r| (r.kind, r.total, r.uniques))
            .collect()
    };
    assert_eq!(
        totals(rollups.day_rows(oct27).await.unwrap()),
        vec![("view".to_owned(), 50, 50)]
    );
    assert_eq!(
        totals(rollups.day_rows(mar31).await.unwrap()),
        vec![("view".to_owned(), 46, 46)]
    );
    rollups.put_listings("t", &[(1, 7)]).await.unwrap();
    let report = rollups
        .report_range("t", 7, oct26, oct28, None, ALL_LISTINGS)
        .await
        .unwrap();
    assert_eq!(report.iter().map(|r| r.total).collect::<Vec<_>>(), vec![55]);

    // Dropping the 25-hour day leaves both neighbours whole.
    raw.mark_archived(oct27, arrival).await.unwrap();
    assert!(raw.drop_day(oct27, arrival + H).await.unwrap());
    assert!(raw.day_events(oct27).await.unwrap().is_empty());
    assert_eq!(
        sorted(raw.day_events(oct26).await.unwrap()),
        in_day(&autumn, oct26)
    );
    assert_eq!(
        sorted(raw.day_events(oct28).await.unwrap()),
        in_day(&autumn, oct28)
    );

    // The stores hold Berlin days now: UTC is refused, naming both zones.
    let err = agree_time_zone(&Calendar::utc(), raw.as_ref(), rollups.as_ref())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("\"UTC\"") && err.contains("\"Europe/Berlin\""),
        "{err}"
    );
    agree_time_zone(&berlin, raw.as_ref(), rollups.as_ref())
        .await
        .unwrap();
}
