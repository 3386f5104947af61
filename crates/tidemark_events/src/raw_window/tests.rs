use super::*;

fn d(s: &str) -> Day {
    Day::parse(s).unwrap()
}

fn state(day: &str, events: u64, dropped: bool) -> DayState {
    DayState {
        day: d(day),
        events,
        last_arrival_ms: 0,
        rolled_up_arrival_ms: None,
        archived_arrival_ms: None,
        dropped_ms: dropped.then_some(1),
    }
}

#[test]
fn ages_are_whole_utc_days_clamped_past_thirty() {
    let utc = Calendar::utc();
    let now = d("2026-12-06").utc_start_ms() + 60_000;
    assert_eq!(age(&utc, d("2026-12-06"), now), None);
    assert_eq!(age(&utc, d("2026-12-07"), now), None);
    assert_eq!(age(&utc, d("2026-12-05"), now), Some(1));
    assert_eq!(age(&utc, d("2026-11-06"), now), Some(30));
    assert_eq!(age(&utc, d("2026-11-05"), now), Some(31));
    assert_eq!(age(&utc, d("2020-01-01"), now), Some(31));
}

#[test]
fn ages_are_whole_local_days() {
    // 00:30 on 6 December in Sarajevo is still 5 December in UTC.
    let sarajevo = Calendar::named("Europe/Sarajevo").unwrap();
    let now = d("2026-12-05").utc_start_ms() + 23 * 3_600_000 + 30 * 60_000;
    assert_eq!(age(&sarajevo, d("2026-12-05"), now), Some(1));
    assert_eq!(age(&Calendar::utc(), d("2026-12-05"), now), None);
}

#[test]
fn the_report_counts_needs_at_least_k_days_back_and_prices_windows() {
    let now = d("2026-12-06").utc_start_ms() + 60_000;
    let days = [
        state("2026-11-20", 10, true),
        state("2026-12-04", 100, false),
        state("2026-12-05", 200, false),
        state("2026-12-06", 5, false),
    ];
    let bytes = [
        (d("2026-12-04"), 4_000),
        (d("2026-12-05"), 6_000),
        (d("2026-12-06"), 100),
    ];
    let mut needs = BTreeMap::new();
    let n = |count, first_ms| NeedCount { count, first_ms };
    needs.insert((Need::Late, 1), n(7, 500));
    needs.insert((Need::Late, 3), n(2, 300));
    needs.insert((Need::Late, 31), n(1, 900));
    needs.insert((Need::TooOld, 12), n(4, 700));
    needs.insert((Need::Reroll, 2), n(1, 800));
    let r = report(&Calendar::utc(), &days, &bytes, &needs, 7, now);
    assert_eq!(r.raw_retention_days, 7);
    assert_eq!(
        r.days,
        vec![
            RawDay {
                day: "2026-12-04".into(),
                events: 100,
                bytes: 4_000
            },
            RawDay {
                day: "2026-12-05".into(),
                events: 200,
                bytes: 6_000
            },
            RawDay {
                day: "2026-12-06".into(),
                events: 5,
                bytes: 100
            },
        ]
    );
    // The mean of the closed days held: today and the dropped day left out.
    assert_eq!(r.bytes_per_day, 5_000);
    assert_eq!(r.window_30_days_bytes, 150_000);
    assert_eq!(r.counted_since.as_deref(), Some("1970-01-01T00:00:00.300Z"));
    let at = |k: usize| {
        let a = &r.at_least[k - 1];
        assert_eq!(a.days as usize, k);
        (a.late_events, a.refused_events, a.rerolls, a.window_bytes)
    };
    assert_eq!(r.at_least.len(), 30);
    assert_eq!(at(1), (10, 4, 1, 5_000));
    assert_eq!(at(2), (3, 4, 1, 10_000));
    assert_eq!(at(3), (3, 4, 0, 15_000));
    assert_eq!(at(4), (1, 4, 0, 20_000));
    assert_eq!(at(13), (1, 0, 0, 65_000));
    assert_eq!(at(30), (1, 0, 0, 150_000));
    assert_eq!(
        r.beyond_30_days,
        Beyond {
            late_events: 1,
            refused_events: 0,
            rerolls: 0
        }
    );
}

#[test]
fn needs_are_named_both_ways() {
    for n in [Need::Late, Need::TooOld, Need::Reroll] {
        assert_eq!(Need::parse(n.as_str()), Some(n));
    }
    assert_eq!(Need::parse("other"), None);
}
