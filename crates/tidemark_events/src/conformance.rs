//! One conformance suite per events port (STYLE.md, object_store's `integration.rs`): each
//! function takes a fresh, empty store and checks the port's contract with exact values. Every
//! backend's tests call these unchanged — SQLite (`tests/conformance_sqlite.rs`), MariaDB
//! (`tests/conformance_mysql.rs`), InfluxDB (`tests/conformance_influx.rs`). They panic
//! (assert) on a violation.

use std::sync::Arc;

use serde_json::json;
use tidemark_core::day::Day;

use crate::leases::DayLeases;
use crate::model::Event;
use crate::raw::catalog::{Mark, PENDING_EXPIRES_MS};
use crate::raw::{DayCatalog, MinuteCount, RawError, RawStore};
use crate::raw_window::{Need, NeedCount};
use crate::rollups::{ALL_LISTINGS, DailyRow, MonthRow, ReportRow, RollupStore};
use crate::usage::{Read, UsageFigures, Written};

mod local_days;
mod visitors;
mod zone_move;
pub use local_days::local_days;
pub use visitors::period_uniques;
pub use zone_move::{OpenRaw, ZoneStore, zone_move};

fn row(listing_id: i64, kind: &str, total: u64, uniques: u64) -> DailyRow {
    DailyRow {
        listing_id,
        kind: kind.into(),
        total,
        uniques,
        visitors: Vec::new(),
    }
}

fn report_row(listing_id: i64, kind: &str, total: u64, uniques_daily_sum: u64) -> ReportRow {
    ReportRow {
        listing_id,
        kind: kind.into(),
        total,
        uniques_daily_sum,
        uniques_period: None,
    }
}

fn day(s: &str) -> Day {
    Day::parse(s).expect("a valid day")
}

/// The summary-tier contract (DESIGN.md part C "Daily rollup", "Report"; seed 002):
/// `upsert_day` replaces one day whole and never doubles; `put_listings` inserts or moves
/// listings per tenant; `report` sums one account's listings per kind over a period, tenants
/// apart; kinds no longer produced still report.
pub async fn rollup_store(s: Arc<dyn RollupStore>) {
    // upsert_day replaces the day and leaves other days.
    let d = day("2026-11-28");
    let next = d.plus(1);
    s.upsert_day(d, vec![row(1, "view", 5, 3), row(2, "click", 1, 1)])
        .await
        .unwrap();
    s.upsert_day(next, vec![row(2, "click", 9, 9)])
        .await
        .unwrap();
    // The same rows again, in another order: nothing doubles.
    s.upsert_day(d, vec![row(2, "click", 1, 1), row(1, "view", 5, 3)])
        .await
        .unwrap();
    assert_eq!(
        s.day_rows(d).await.unwrap(),
        vec![row(1, "view", 5, 3), row(2, "click", 1, 1)]
    );
    // A re-run with changed totals, a new row, and one row no longer produced.
    let n = s
        .upsert_day(d, vec![row(1, "view", 6, 4), row(3, "contact", 2, 1)])
        .await
        .unwrap();
    assert_eq!(n, 2);
    assert_eq!(
        s.day_rows(d).await.unwrap(),
        vec![row(1, "view", 6, 4), row(3, "contact", 2, 1)]
    );
    assert_eq!(s.day_rows(next).await.unwrap(), vec![row(2, "click", 9, 9)]);
    // An empty run empties only that day.
    assert_eq!(s.upsert_day(d, vec![]).await.unwrap(), 0);
    assert!(s.day_rows(d).await.unwrap().is_empty());
    assert_eq!(s.day_rows(next).await.unwrap(), vec![row(2, "click", 9, 9)]);
    // Large values survive exactly.
    s.upsert_day(d, vec![row(i64::MAX, "view", 4_000_000_000, 3_999_999_999)])
        .await
        .unwrap();
    assert_eq!(
        s.day_rows(d).await.unwrap(),
        vec![row(i64::MAX, "view", 4_000_000_000, 3_999_999_999)]
    );
    s.upsert_day(d, vec![]).await.unwrap();
    s.upsert_day(next, vec![]).await.unwrap();

    // The report: per listing and kind, for the account as the tenant maps it.
    let d1 = day("2026-01-01");
    let d2 = d1.plus(1);
    let d3 = d1.plus(2);
    s.put_listings("acme", &[(10, 1), (11, 1), (12, 2), (13, 1)])
        .await
        .unwrap();
    // Another tenant maps listing 12 to account 1: acme's account 1 must not see it.
    s.put_listings("other", &[(12, 1)]).await.unwrap();
    // Move 13 to account 2 (a later pair wins).
    assert_eq!(
        s.put_listings("acme", &[(13, 9), (13, 2)]).await.unwrap(),
        2
    );
    s.upsert_day(
        d1,
        vec![
            row(10, "view", 5, 3),
            row(10, "click", 1, 1),
            row(11, "view", 2, 2),
            row(12, "view", 100, 50),
            row(13, "view", 7, 7),
        ],
    )
    .await
    .unwrap();
    s.upsert_day(d2, vec![row(10, "view", 4, 4), row(12, "view", 1, 1)])
        .await
        .unwrap();
    s.upsert_day(d3, vec![row(10, "view", 1000, 1000)])
        .await
        .unwrap();
    assert_eq!(
        s.report("acme", 1, d1, d2, None).await.unwrap(),
        vec![
            report_row(10, "click", 1, 1),
            report_row(10, "view", 9, 7),
            report_row(11, "view", 2, 2),
        ]
    );
    assert_eq!(
        s.report("acme", 1, d1, d2, Some("view")).await.unwrap(),
        vec![report_row(10, "view", 9, 7), report_row(11, "view", 2, 2)]
    );
    assert_eq!(
        s.report("acme", 1, d2, d3, None).await.unwrap(),
        vec![report_row(10, "view", 1004, 1004)]
    );
    assert_eq!(
        s.report("acme", 2, d1, d3, None).await.unwrap(),
        vec![
            report_row(12, "view", 101, 51),
            report_row(13, "view", 7, 7)
        ]
    );
    assert_eq!(
        s.report("other", 1, d1, d3, None).await.unwrap(),
        vec![report_row(12, "view", 101, 51)]
    );
    assert!(s.report("acme", 3, d1, d3, None).await.unwrap().is_empty());
    assert!(
        s.report("nobody", 1, d1, d3, None)
            .await
            .unwrap()
            .is_empty()
    );
    // An empty or inverted period reports nothing.
    assert!(s.report("acme", 1, d3, d1, None).await.unwrap().is_empty());

    // Pages of an account's listings, and the report and month sums of a range of them
    // (what the streamed exports walk).
    assert_eq!(
        s.account_listings("acme", 1, -1, 10).await.unwrap(),
        [10, 11]
    );
    assert_eq!(s.account_listings("acme", 1, -1, 1).await.unwrap(), [10]);
    assert_eq!(s.account_listings("acme", 1, 10, 10).await.unwrap(), [11]);
    assert!(
        s.account_listings("acme", 1, 11, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        s.account_listings("acme", 2, -1, 10).await.unwrap(),
        [12, 13]
    );
    assert_eq!(s.account_listings("other", 1, -1, 10).await.unwrap(), [12]);
    assert_eq!(
        s.report_range("acme", 1, d1, d2, None, 11..=11)
            .await
            .unwrap(),
        vec![report_row(11, "view", 2, 2)]
    );
    let month = |listing_id: i64, kind: &str, total: u64, uniques: u64| MonthRow {
        listing_id,
        month: "2026-01".into(),
        kind: kind.into(),
        total,
        uniques_daily_sum: uniques,
    };
    let (jan, feb) = (day("2026-01-01"), day("2026-02-01"));
    assert_eq!(
        s.months_range("acme", 1, jan, feb, None, ALL_LISTINGS)
            .await
            .unwrap(),
        vec![
            month(10, "click", 1, 1),
            month(10, "view", 1009, 1007),
            month(11, "view", 2, 2)
        ]
    );
    assert_eq!(
        s.months_range("acme", 1, jan, jan, Some("view"), 11..=i64::MAX)
            .await
            .unwrap(),
        vec![month(11, "view", 2, 2)]
    );
    assert!(
        s.months_range("acme", 1, feb, feb, None, ALL_LISTINGS)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        s.months_range("other", 1, jan, jan, None, ALL_LISTINGS)
            .await
            .unwrap(),
        vec![month(12, "view", 101, 51)]
    );

    // Periods over several months, whole and partial, while days are re-run and emptied:
    // every sum equals the sum of the days in the period (a backend may keep month sums).
    s.put_listings("m", &[(500, 1), (501, 1)]).await.unwrap();
    let jan1 = day("2024-01-01");
    let mut days: Vec<(Day, Vec<DailyRow>)> = Vec::new();
    for i in 0..121 {
        // 2024-01-01 … 2024-04-30 (a leap February): every day for 500, every 3rd for 501.
        let d = jan1.plus(i);
        let mut rows = vec![row(500, "view", 1 + (i as u64 % 5), 1)];
        if i % 3 == 0 {
            rows.push(row(501, "click", 2, 1));
        }
        days.push((d, rows));
    }
    for (d, rows) in &days {
        s.upsert_day(*d, rows.clone()).await.unwrap();
    }
    // A re-run of a February day with other totals, and a March day emptied.
    let feb10 = day("2024-02-10");
    let mar05 = day("2024-03-05");
    for (d, rows) in days.iter_mut() {
        if *d == feb10 {
            *rows = vec![row(500, "view", 40, 7), row(501, "contact", 1, 1)];
        }
        if *d == mar05 {
            rows.clear();
        }
    }
    for (d, rows) in &days {
        if *d == feb10 || *d == mar05 {
            s.upsert_day(*d, rows.clone()).await.unwrap();
        }
    }
    let expect = |from: Day, to: Day| {
        let mut sums: std::collections::BTreeMap<(i64, String), (u64, u64)> = Default::default();
        for (d, rows) in &days {
            if *d >= from && *d <= to {
                for r in rows {
                    let e = sums.entry((r.listing_id, r.kind.clone())).or_default();
                    e.0 += r.total;
                    e.1 += r.uniques;
                }
            }
        }
        sums.into_iter()
            .map(|((l, k), (t, u))| report_row(l, &k, t, u))
            .collect::<Vec<_>>()
    };
    for (from, to) in [
        ("2024-01-15", "2024-03-10"), // part of January, February, part of March
        ("2024-02-01", "2024-02-29"), // exactly a month
        ("2024-01-01", "2024-04-30"), // whole months only
        ("2024-02-10", "2024-02-10"), // the re-run day alone
        ("2024-03-01", "2024-03-31"), // the month with an emptied day
        ("2023-12-01", "2024-05-31"), // beyond the data on both sides
        ("2024-01-31", "2024-02-01"), // across a month boundary, no whole month
    ] {
        let (from, to) = (day(from), day(to));
        assert_eq!(
            s.report("m", 1, from, to, None).await.unwrap(),
            expect(from, to),
            "{from}..={to}"
        );
    }
    assert_eq!(
        s.report("m", 1, day("2024-01-01"), day("2024-04-30"), Some("click"))
            .await
            .unwrap(),
        expect(day("2024-01-01"), day("2024-04-30"))
            .into_iter()
            .filter(|r| r.kind == "click")
            .collect::<Vec<_>>()
    );
    // A kind that left a month entirely is gone from its sums.
    s.upsert_day(feb10, vec![]).await.unwrap();
    let feb = s
        .report(
            "m",
            1,
            day("2024-02-01"),
            day("2024-02-29"),
            Some("contact"),
        )
        .await
        .unwrap();
    assert!(feb.is_empty(), "{feb:?}");

    // Kinds no longer produced still report.
    let k = day("2025-06-01");
    s.put_listings("t", &[(1, 1)]).await.unwrap();
    s.upsert_day(k, vec![row(1, "phone_reveal", 3, 2)])
        .await
        .unwrap();
    s.upsert_day(k, vec![row(1, "view", 1, 1)]).await.unwrap();
    s.upsert_day(k.plus(-1), vec![row(1, "phone_reveal", 4, 4)])
        .await
        .unwrap();
    assert_eq!(
        s.report("t", 1, k.plus(-1), k, None).await.unwrap(),
        vec![
            report_row(1, "phone_reveal", 4, 4),
            report_row(1, "view", 1, 1)
        ]
    );

    // The event-kind audit's usage: events per (kind, day) add up across flushes (and
    // nodes), the later arrival and the later read are kept.
    assert_eq!(s.kind_usage().await.unwrap(), UsageFigures::default());
    let usage = |written: &[(&str, i32, u64, i64)], read: &[(&str, i64, &str)]| UsageFigures {
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
        needs: Default::default(),
    };
    s.add_kind_usage(&usage(
        &[("view", 20_000, 5, 1_000), ("click", 20_001, 1, 900)],
        &[("view", 2_000, "report")],
    ))
    .await
    .unwrap();
    s.add_kind_usage(&usage(
        &[("view", 20_000, 2, 800), ("view", 19_000, 1, 10)],
        &[("view", 1_500, "dashboard"), ("click", 3_000, "export")],
    ))
    .await
    .unwrap();
    s.add_kind_usage(&usage(&[], &[("click", 4_000, "dashboard")]))
        .await
        .unwrap();
    assert_eq!(
        s.kind_usage().await.unwrap(),
        usage(
            &[
                ("click", 20_001, 1, 900),
                ("view", 19_000, 1, 10),
                ("view", 20_000, 7, 1_000)
            ],
            &[("click", 4_000, "dashboard"), ("view", 2_000, "report")]
        )
    );

    // The raw window's needs, with the usage: counts add up, the first time is the earliest.
    let needs = |n: &[(Need, u32, u64, i64)]| UsageFigures {
        needs: n
            .iter()
            .map(|&(need, age, count, first_ms)| ((need, age), NeedCount { count, first_ms }))
            .collect(),
        ..UsageFigures::default()
    };
    s.add_kind_usage(&needs(&[
        (Need::Late, 1, 5, 900),
        (Need::Reroll, 31, 1, 950),
    ]))
    .await
    .unwrap();
    s.add_kind_usage(&needs(&[
        (Need::Late, 1, 2, 700),
        (Need::TooOld, 12, 3, 990),
    ]))
    .await
    .unwrap();
    assert_eq!(
        s.kind_usage().await.unwrap().needs,
        needs(&[
            (Need::Late, 1, 7, 700),
            (Need::TooOld, 12, 3, 990),
            (Need::Reroll, 31, 1, 950)
        ])
        .needs
    );
}

fn event(kind: &str, time_ms: i64, listing_id: i64, session: &str) -> Event {
    let mut e = Event::new(kind, time_ms);
    e.listing_id = Some(listing_id);
    e.session_id = Some(session.into());
    e.page_url = Some(format!("https://shop.example/item/{listing_id}"));
    e
}

/// Sorted the way the suite compares event lists: by time, then by everything else (a backend
/// returns a day in its own stable order: SQLite by arrival, InfluxDB by time).
fn sorted(mut v: Vec<Event>) -> Vec<Event> {
    v.sort_by_cached_key(|e| (e.time_ms, serde_json::to_string(e).unwrap_or_default()));
    v
}

/// The raw-tier contract (DESIGN.md part C "Schema", "Raw tier"; seed 002): events of one
/// batch go to their days (UTC for a store opened without a calendar); events with equal timestamps stay distinct (never merged);
/// every field comes back exactly (strings, integers, floats, booleans, absent values); the
/// day catalog counts events and arrivals; a day is dropped only when rolled up and archived
/// up to its last arrival, and then refuses late events ([`RawError::DayDropped`]); chunked
/// reads see every event once; dashboard counts exclude bots; a cleared tier holds nothing.
pub async fn raw_store(raw: Arc<dyn RawStore>) {
    // Two days before today: inside a production store's retention (InfluxDB's 7 days).
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let d0 = Day::of_utc_ms(now_ms).plus(-2);
    let d1 = d0.plus(1);
    let t = d0.utc_start_ms() + 10 * 3_600_000; // 10:00 on d0

    // Nothing yet.
    assert!(raw.days().await.unwrap().is_empty());
    assert!(raw.day_events(d0).await.unwrap().is_empty());

    // One batch over two days; three events share one millisecond (and even the same series).
    let mut rich = event("view", t, 7, "s1");
    rich.user_id = Some("u-1".into());
    rich.device_id = Some("dev \"quoted\", with, commas=and spaces".into());
    rich.count = 3;
    rich.fields.insert("bot".into(), json!(false));
    rich.fields.insert("position".into(), json!(4));
    rich.fields.insert("ratio".into(), json!(0.25));
    rich.fields.insert("email".into(), json!("a@b.example"));
    let same_ms = vec![
        rich.clone(),
        event("view", t, 7, "s1"),
        event("view", t, 7, "s2"),
        event("click", t, 8, "s1"),
    ];
    let mut bot = event("view", t + 61_000, 7, "s3");
    bot.fields.insert("bot".into(), json!(true));
    let mut bare = Event::new("contact", t + 62_000);
    bare.count = 1;
    let late = event("view", d1.utc_start_ms() + 5, 9, "s9");
    let mut batch = same_ms.clone();
    batch.extend([bot.clone(), bare.clone(), late.clone()]);
    raw.append(batch, 5_000).await.unwrap();

    let mut want_d0 = same_ms.clone();
    want_d0.extend([bot.clone(), bare.clone()]);
    assert_eq!(
        sorted(raw.day_events(d0).await.unwrap()),
        sorted(want_d0.clone()),
        "every event of the day, equal timestamps kept apart, fields exact"
    );
    assert_eq!(raw.day_events(d1).await.unwrap(), vec![late.clone()]);

    // Chunked reads: every event exactly once, the cursor ends with None.
    let mut chunks = Vec::new();
    let mut cursor = Some(0);
    let mut seen = Vec::new();
    while let Some(after) = cursor {
        let (chunk, next) = raw.read_chunk(d0, after, 2).await.unwrap();
        assert!(chunk.len() <= 2);
        chunks.push(chunk.len());
        seen.extend(chunk);
        cursor = next;
        assert!(chunks.len() < 10, "the cursor advances");
    }
    assert_eq!(sorted(seen), sorted(want_d0.clone()));
    assert_eq!(chunks.iter().sum::<usize>(), 6);

    // The catalog.
    let days = raw.days().await.unwrap();
    assert_eq!(
        days.iter()
            .map(|s| (s.day, s.events, s.last_arrival_ms))
            .collect::<Vec<_>>(),
        vec![(d0, 6, 5_000), (d1, 1, 5_000)]
    );
    assert!(days.iter().all(|s| s.rolled_up_arrival_ms.is_none()
        && s.archived_arrival_ms.is_none()
        && s.dropped_ms.is_none()));

    // A second batch to d0 arrives later.
    raw.append(vec![event("click", t + 120_000, 7, "s4")], 6_000)
        .await
        .unwrap();
    let s0 = raw.days().await.unwrap()[0];
    assert_eq!((s0.events, s0.last_arrival_ms), (7, 6_000));

    // Dashboard slices: bots excluded, per minute and kind.
    let minute = t - t % 60_000;
    assert_eq!(
        raw.counts_per_minute(t, t + 180_000).await.unwrap(),
        vec![
            MinuteCount {
                minute_ms: minute,
                kind: "click".into(),
                count: 1
            },
            MinuteCount {
                minute_ms: minute,
                kind: "view".into(),
                count: 3
            },
            MinuteCount {
                minute_ms: minute + 60_000,
                kind: "contact".into(),
                count: 1
            },
            MinuteCount {
                minute_ms: minute + 120_000,
                kind: "click".into(),
                count: 1
            },
        ]
    );
    assert!(
        raw.counts_per_minute(t + 180_000, t + 240_000)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        raw.top_listings(d0, 10).await.unwrap(),
        vec![(7, 4), (8, 1)]
    );
    assert_eq!(raw.top_listings(d0, 1).await.unwrap(), vec![(7, 4)]);
    assert!(raw.top_listings(d0.plus(5), 3).await.unwrap().is_empty());

    // Bytes on disk per day held: both days take some.
    let bytes = raw.day_bytes().await.unwrap();
    assert_eq!(bytes.iter().map(|b| b.0).collect::<Vec<_>>(), vec![d0, d1]);
    assert!(bytes.iter().all(|b| b.1 > 0), "{bytes:?}");

    // Dropping: refused until rolled up and archived up to the last arrival.
    assert!(!raw.drop_day(d0, 9_000).await.unwrap());
    raw.mark_rolled_up(d0, 5_000).await.unwrap();
    raw.mark_archived(d0, 6_000).await.unwrap();
    assert!(
        !raw.drop_day(d0, 9_000).await.unwrap(),
        "the rollup is older than the last arrival"
    );
    raw.mark_rolled_up(d0, 6_000).await.unwrap();
    // Marks never move back.
    raw.mark_archived(d0, 1_000).await.unwrap();
    let s0 = raw.days().await.unwrap()[0];
    assert_eq!(
        (s0.rolled_up_arrival_ms, s0.archived_arrival_ms),
        (Some(6_000), Some(6_000))
    );
    assert!(s0.rollup_current() && s0.archive_current());
    assert!(raw.drop_day(d0, 9_000).await.unwrap());
    assert!(!raw.drop_day(d0, 9_500).await.unwrap(), "dropped once");
    assert!(raw.day_events(d0).await.unwrap().is_empty());
    let s0 = raw.days().await.unwrap()[0];
    assert_eq!((s0.day, s0.events, s0.dropped_ms), (d0, 7, Some(9_000)));
    // The next day is untouched; the dropped one takes no bytes.
    assert_eq!(raw.day_events(d1).await.unwrap(), vec![late.clone()]);
    let bytes = raw.day_bytes().await.unwrap();
    assert_eq!(bytes.iter().map(|b| b.0).collect::<Vec<_>>(), vec![d1]);

    // Late events for the dropped day refuse the whole batch.
    let refused = raw
        .append(
            vec![
                event("view", d1.utc_start_ms() + 9, 9, "s9"),
                event("view", t + 1, 7, "late"),
            ],
            10_000,
        )
        .await;
    assert!(
        matches!(refused, Err(RawError::DayDropped(d)) if d == d0),
        "{refused:?}"
    );
    assert_eq!(
        raw.day_events(d1).await.unwrap(),
        vec![late],
        "nothing of the refused batch was stored"
    );
    assert_eq!(raw.days().await.unwrap()[1].events, 1);

    // Cleared (a zone move): no day, no event, and even the dropped day takes events again.
    raw.clear().await.unwrap();
    assert!(raw.days().await.unwrap().is_empty());
    assert!(raw.day_events(d1).await.unwrap().is_empty());
    let again = event("view", t + 2, 7, "again");
    raw.append(vec![again.clone()], 11_000).await.unwrap();
    assert_eq!(raw.day_events(d0).await.unwrap(), vec![again]);
    assert_eq!(raw.days().await.unwrap()[0].events, 1);
}

/// The day-catalog contract of a raw tier without transactions ([`DayCatalog`]; DESIGN
/// principle 2): sequence numbers of a day go on across appends; an append in flight holds its
/// day until it ends or is taken for dead; a finished or failed append makes the day dirty; a
/// batch with a dropped day is refused whole, holding none of its other days; marks never
/// move back; a day is dropped only when rolled up and archived up to its last arrival.
pub async fn day_catalog(cat: Arc<dyn DayCatalog>) {
    let (d1, d2, d3) = (Day(20_000), Day(20_001), Day(20_002));
    let first = cat.begin_appends(&[(d2, 2), (d1, 3)], 1_000).await.unwrap();
    assert_eq!((first[&d1], first[&d2]), (0, 0));
    cat.end_appends(&[(d1, 3), (d2, 2)], true, 1_000)
        .await
        .unwrap();
    let first = cat.begin_appends(&[(d1, 2)], 2_000).await.unwrap();
    assert_eq!(first[&d1], 3, "numbers go on");
    cat.set_mark(Mark::RolledUp, d1, 5_000).await.unwrap();
    cat.set_mark(Mark::Archived, d1, 5_000).await.unwrap();
    cat.set_mark(Mark::RolledUp, d1, 100).await.unwrap();
    assert!(
        !cat.mark_dropped_if_current(d1, 6_000).await.unwrap(),
        "an append in flight holds the day"
    );
    // Its process died: after the expiry the day may go.
    let later = 2_001 + PENDING_EXPIRES_MS;
    assert!(cat.mark_dropped_if_current(d1, later).await.unwrap());
    assert!(cat.is_dropped(d1).await.unwrap());
    assert!(!cat.is_dropped(d2).await.unwrap());
    assert!(!cat.is_dropped(d3).await.unwrap(), "a day never seen");

    // A batch with the dropped day is refused whole: d2 is not held, d3 not made.
    match cat.begin_appends(&[(d2, 1), (d1, 1), (d3, 1)], later).await {
        Err(RawError::DayDropped(d)) => assert_eq!(d, d1),
        other => panic!("{other:?}"),
    }
    let days = cat.days().await.unwrap();
    assert_eq!(days.iter().map(|s| s.day).collect::<Vec<_>>(), vec![d1, d2]);
    let s1 = days[0];
    assert_eq!(
        (
            s1.events,
            s1.last_arrival_ms,
            s1.rolled_up_arrival_ms,
            s1.dropped_ms
        ),
        (3, 1_000, Some(5_000), Some(later)),
        "marks never move back"
    );
    cat.set_mark(Mark::RolledUp, d2, 1_000).await.unwrap();
    assert!(
        !cat.mark_dropped_if_current(d2, later).await.unwrap(),
        "not archived"
    );
    cat.set_mark(Mark::Archived, d2, 1_000).await.unwrap();

    // A failed append makes the day dirty: its last arrival moves past the marks.
    cat.begin_appends(&[(d2, 1)], 1_000).await.unwrap();
    cat.end_appends(&[(d2, 1)], false, 1_000).await.unwrap();
    let s2 = cat.days().await.unwrap()[1];
    assert_eq!((s2.events, s2.last_arrival_ms), (2, 1_001));
    assert!(!s2.rollup_current());
    assert!(!cat.mark_dropped_if_current(d2, later).await.unwrap());
    cat.set_mark(Mark::RolledUp, d2, 1_001).await.unwrap();
    cat.set_mark(Mark::Archived, d2, 1_001).await.unwrap();
    assert!(cat.mark_dropped_if_current(d2, later).await.unwrap());
    assert!(
        !cat.mark_dropped_if_current(d2, later + 1).await.unwrap(),
        "dropped once"
    );

    // Cleared: every day forgotten, dropped ones included; a day starts afresh.
    cat.clear().await.unwrap();
    assert!(cat.days().await.unwrap().is_empty());
    assert!(!cat.is_dropped(d2).await.unwrap());
    let first = cat.begin_appends(&[(d2, 1)], later).await.unwrap();
    cat.end_appends(&[(d2, 1)], true, later).await.unwrap();
    assert_eq!(cat.days().await.unwrap()[0].events, 1);
    assert!(first.contains_key(&d2));
}

/// The day-lease contract ([`DayLeases`]; DESIGN.md "Many nodes"): `a` and `b` are two
/// holders over the same leases, each with lease time `ttl`. One holder at a time; a holder
/// renews its own under the same token; a release or an expiry frees the day and a take-over
/// raises the token; a lost lease is no longer held.
pub async fn day_leases(a: Arc<dyn DayLeases>, b: Arc<dyn DayLeases>, ttl: std::time::Duration) {
    let d = Day(20_000);
    let first = a.acquire(d).await.unwrap().expect("a free day");
    assert!(b.acquire(d).await.unwrap().is_none(), "held by a");
    let renewed = a.acquire(d).await.unwrap().expect("a renews");
    assert_eq!(renewed.token, first.token);
    assert!(a.holds(&first).await.unwrap());
    assert!(
        b.acquire(Day(20_001)).await.unwrap().is_some(),
        "another day is free"
    );
    a.release(&first).await.unwrap();
    assert!(!a.holds(&first).await.unwrap(), "released");
    let taken = b.acquire(d).await.unwrap().expect("free after the release");
    assert_eq!(taken.token, first.token + 1);
    assert!(a.acquire(d).await.unwrap().is_none());
    // A release of a lost lease changes nothing.
    a.release(&first).await.unwrap();
    assert!(b.holds(&taken).await.unwrap());
    tokio::time::sleep(ttl + std::time::Duration::from_millis(300)).await;
    assert!(!b.holds(&taken).await.unwrap(), "expired");
    let again = a.acquire(d).await.unwrap().expect("free after the expiry");
    assert_eq!(again.token, taken.token + 1);
    assert!(a.holds(&again).await.unwrap());
}
