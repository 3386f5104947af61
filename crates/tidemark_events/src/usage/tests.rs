use super::*;
use crate::calendar::Calendar;
use crate::rollups::SqliteRollups;

const DAY_MS: i64 = 86_400_000;

fn figures(written: &[(&str, i32, u64, i64)], read: &[(&str, i64, &str)]) -> UsageFigures {
    UsageFigures {
        written: written
            .iter()
            .map(|&(k, d, events, last_ms)| ((k.to_owned(), Day(d)), Written { events, last_ms }))
            .collect(),
        read: read
            .iter()
            .map(|&(k, at_ms, by)| {
                (
                    k.to_owned(),
                    Read {
                        at_ms,
                        by: by.to_owned(),
                    },
                )
            })
            .collect(),
        needs: BTreeMap::new(),
    }
}

#[test]
fn merging_sums_events_and_keeps_the_later_times() {
    let mut a = figures(&[("view", 1, 5, 100)], &[("view", 50, "report")]);
    a.merge(figures(
        &[("view", 1, 2, 90), ("click", 1, 1, 7)],
        &[("view", 60, "dashboard"), ("click", 3, "export")],
    ));
    assert_eq!(
        a,
        figures(
            &[("click", 1, 1, 7), ("view", 1, 7, 100)],
            &[("click", 3, "export"), ("view", 60, "dashboard")]
        )
    );
    // An older read does not replace a newer one.
    a.merge(figures(&[], &[("view", 10, "report")]));
    assert_eq!(a.read["view"].by, "dashboard");
}

#[test]
fn the_audit_flags_kinds_unwritten_or_unread_and_shows_retired_ones() {
    let schema = Schema {
        kinds: vec!["view".into(), "click".into(), "contact".into()],
        ..Schema::default()
    };
    let today = Day(20_000);
    let now = today.utc_start_ms() + 3_600_000;
    let f = figures(
        &[
            ("view", 19_990, 4, today.plus(-10).utc_start_ms()),
            ("view", 19_999, 3, now - 5_000),
            ("contact", 19_950, 9, today.plus(-50).utc_start_ms()),
            ("old_kind", 19_900, 2, today.plus(-100).utc_start_ms()),
        ],
        &[
            ("view", now - DAY_MS, "report"),
            ("click", now - 40 * DAY_MS, "dashboard"),
        ],
    );
    let a = audit(&Calendar::utc(), &schema, &f, today.plus(-7), 30, now);
    assert_eq!(a.time_zone, "UTC");
    assert_eq!(a.stale_days, 30);
    assert_eq!(a.raw_window_from, today.plus(-7).to_string());
    let names: Vec<(&str, &str)> = a
        .kinds
        .iter()
        .map(|k| (k.kind.as_str(), k.status.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("view", "declared"),
            ("click", "declared"),
            ("contact", "declared"),
            ("old_kind", "retired")
        ]
    );
    let view = &a.kinds[0];
    assert_eq!(
        view.last_written.as_deref(),
        Some(rfc3339_ms(now - 5_000).as_str())
    );
    // Only the days of the raw window.
    assert_eq!(
        view.events_per_day,
        [DayEvents {
            day: Day(19_999).to_string(),
            events: 3
        }]
    );
    assert_eq!(view.last_read_by.as_deref(), Some("report"));
    assert!(!view.not_written && !view.not_read);
    let click = &a.kinds[1];
    assert_eq!(
        (click.last_written.as_deref(), click.not_written),
        (None, true)
    );
    assert!(click.not_read, "read 40 days ago");
    let contact = &a.kinds[2];
    assert!(contact.not_written && contact.not_read);
    assert!(contact.events_per_day.is_empty());
    // A longer horizon: the contact written 50 days ago is not flagged at 60.
    let a = audit(&Calendar::utc(), &schema, &f, today.plus(-7), 60, now);
    assert!(!a.kinds[2].not_written && a.kinds[2].not_read);
}

#[tokio::test]
async fn flushed_usage_reads_back_from_the_summary_store() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn RollupStore> =
        Arc::new(SqliteRollups::open(&dir.path().join("rollups.db")).unwrap());
    let usage = KindUsage::new(Arc::clone(&store), Calendar::utc());
    let day = Day(20_000);
    let events: Vec<Event> = [("view", 0), ("view", 1), ("click", 2), ("view", DAY_MS)]
        .into_iter()
        .map(|(k, t)| Event::new(k, day.utc_start_ms() + t))
        .collect();
    usage.wrote(usage.per_kind_and_day(&events), 500);
    usage.read(["view", "view"], "report", 600);
    usage.flush().await.unwrap();
    usage.wrote(usage.per_kind_and_day(&events[..1]), 700);
    usage.flush().await.unwrap();
    // Nothing gathered: a flush writes nothing.
    usage.flush().await.unwrap();
    assert_eq!(
        store.kind_usage().await.unwrap(),
        figures(
            &[
                ("click", 20_000, 1, 500),
                ("view", 20_000, 3, 700),
                ("view", 20_001, 1, 500)
            ],
            &[("view", 600, "report")]
        )
    );
}

#[tokio::test]
async fn late_and_refused_events_and_rerolls_are_noted_by_age() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn RollupStore> =
        Arc::new(SqliteRollups::open(&dir.path().join("rollups.db")).unwrap());
    let usage = KindUsage::new(Arc::clone(&store), Calendar::utc());
    let today = Day(20_000);
    let now = today.utc_start_ms() + 5_000;
    let events: Vec<Event> = [0, -1, -1, -3, -45]
        .into_iter()
        .map(|d| Event::new("view", today.plus(d).utc_start_ms() + 60_000))
        .collect();
    usage.wrote(usage.per_kind_and_day(&events), now);
    usage.refused([today.plus(-9), today.plus(-9)], now + 1);
    usage.rerolled(today.plus(-2), now + 2);
    // Today's own rollup again is no need of an older day.
    usage.rerolled(today, now + 3);
    usage.flush().await.unwrap();
    let n = |count, first_ms| NeedCount { count, first_ms };
    assert_eq!(
        store.kind_usage().await.unwrap().needs,
        BTreeMap::from([
            ((Need::Late, 1), n(2, now)),
            ((Need::Late, 3), n(1, now)),
            ((Need::Late, 31), n(1, now)),
            ((Need::TooOld, 9), n(2, now + 1)),
            ((Need::Reroll, 2), n(1, now + 2)),
        ])
    );
}
