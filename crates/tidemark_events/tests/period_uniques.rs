//! Period uniques against exact counts on a generated stretch of 40 days (the end of
//! September, all of October, the start of November): 12,000 visitors of one listing, each
//! back on two or three days, and 400 of another. The sketches' union must land within 2 % of
//! the exact number of distinct visitors, and the small listing exactly; on the embedded
//! summary tier and on MariaDB.

use std::collections::HashSet;

use tidemark_core::day::Day;
use tidemark_core::mysql::{drop_database, scratch_database, test_server_url};
use tidemark_events::rollup::roll_up_day;
use tidemark_events::rollups::{MysqlRollups, RollupStore, SqliteRollups};
use tidemark_events::{Event, RawStore, SqliteRaw};

const BIG: u32 = 12_000;
const SMALL: u32 = 400;

fn first_day() -> Day {
    Day::parse("2026-09-25").unwrap()
}

/// The generated events: visitor `i` of listing 1 comes on days `i % 40`, `(7 i + 3) % 40`
/// and, for every third, `(13 i + 5) % 40`; listing 2's on one day each. A visit is two views.
fn generated() -> Vec<Event> {
    let mut out = Vec::new();
    let visit = |out: &mut Vec<Event>, listing: i64, session: String, day: u32| {
        let t = first_day().utc_start_ms() + i64::from(day) * 86_400_000 + 3_600_000;
        for k in 0..2 {
            let mut e = Event::new("view", t + k);
            e.listing_id = Some(listing);
            e.session_id = Some(session.clone());
            e.page_url = Some(format!("/item/{listing}"));
            out.push(e);
        }
    };
    for i in 0..BIG {
        let s = format!("v{i}");
        visit(&mut out, 1, s.clone(), i % 40);
        visit(&mut out, 1, s.clone(), (7 * i + 3) % 40);
        if i % 3 == 0 {
            visit(&mut out, 1, s, (13 * i + 5) % 40);
        }
    }
    for i in 0..SMALL {
        visit(&mut out, 2, format!("w{i}"), i % 40);
    }
    out
}

async fn check(rollups: &dyn RollupStore) {
    let dir = tempfile::tempdir().unwrap();
    let raw = SqliteRaw::open(&dir.path().join("raw.db")).unwrap();
    let events = generated();
    let exact: HashSet<&str> = events
        .iter()
        .filter(|e| e.listing_id == Some(1))
        .filter_map(|e| e.session_id.as_deref())
        .collect();
    assert_eq!(exact.len(), BIG as usize);
    let now = Day::parse("2026-12-01").unwrap().utc_start_ms();
    raw.append(events.clone(), now).await.unwrap();
    for d in 0..40 {
        roll_up_day(&raw, rollups, first_day().plus(d), now)
            .await
            .unwrap();
    }
    rollups.put_listings("t", &[(1, 5), (2, 5)]).await.unwrap();
    let last = first_day().plus(39);
    assert_eq!(last, Day::parse("2026-11-03").unwrap());
    let got = rollups
        .period_uniques("t", 5, first_day(), last, Some("view"), 0..=i64::MAX)
        .await
        .unwrap();
    assert_eq!(got.len(), 2);
    let big = got[0].2.unwrap() as f64;
    let error = (big - f64::from(BIG)).abs() / f64::from(BIG);
    assert!(
        error < 0.02,
        "listing 1: {big} for {BIG} visitors ({:.2} %)",
        error * 100.0
    );
    assert_eq!(got[1], (2, "view".to_owned(), Some(u64::from(SMALL))));
    // October alone, from its month sketch: every visitor with a day in it.
    let october: HashSet<&str> = events
        .iter()
        .filter(|e| e.listing_id == Some(1))
        .filter(|e| {
            let d = Day::of_utc_ms(e.time_ms);
            d >= Day::parse("2026-10-01").unwrap() && d <= Day::parse("2026-10-31").unwrap()
        })
        .filter_map(|e| e.session_id.as_deref())
        .collect();
    assert!(october.len() >= 10_000, "{}", october.len());
    let got = rollups
        .period_uniques(
            "t",
            5,
            Day::parse("2026-10-01").unwrap(),
            Day::parse("2026-10-31").unwrap(),
            Some("view"),
            1..=1,
        )
        .await
        .unwrap();
    let month = got[0].2.unwrap() as f64;
    let exact = october.len() as f64;
    assert!(
        (month - exact).abs() / exact < 0.02,
        "October: {month} for {exact}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_stretch_is_counted_within_two_percent() {
    let dir = tempfile::tempdir().unwrap();
    let rollups = SqliteRollups::open(&dir.path().join("rollups.db")).unwrap();
    check(&rollups).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_stretch_is_counted_within_two_percent_on_mariadb() {
    let url = scratch_database(&test_server_url(), "tm_period")
        .await
        .unwrap();
    let rollups = MysqlRollups::connect(&url, 4).await.unwrap();
    check(&rollups).await;
    rollups.pool().close().await;
    drop_database(&url).await.unwrap();
}
