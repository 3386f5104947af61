//! The summary tier's period uniques ([`crate::visitors`]), part of the rollup-store contract.

use std::sync::Arc;

use super::day;
use crate::rollups::{ALL_LISTINGS, DailyRow, RollupStore};
use crate::visitors::{Visitors, coupon, visitor_hash};

/// A row of `visitors` sessions `s<i>` (one page each) and as many events.
fn row(listing_id: i64, kind: &str, visitors: std::ops::Range<u32>) -> DailyRow {
    let mut v = Visitors::default();
    for i in visitors.clone() {
        v.add(coupon(visitor_hash(&format!("s{i}"), Some("/item"))));
    }
    let n = u64::from(visitors.end - visitors.start);
    DailyRow {
        listing_id,
        kind: kind.into(),
        total: n,
        uniques: n,
        visitors: v.to_bytes(),
    }
}

/// Period uniques: the distinct visitors of a period are the union of its edge days' and whole
/// months' sketches (a visitor of two days counts once); a day rolled up again with more
/// visitors adds them to its month; a day without a sketch makes the periods that need it
/// unknown; tenants, accounts, listing ranges and the kind filter are kept apart.
pub async fn period_uniques(s: Arc<dyn RollupStore>) {
    s.put_listings("acme", &[(1, 7), (2, 7), (3, 8)])
        .await
        .unwrap();
    s.put_listings("other", &[(1, 9)]).await.unwrap();
    let put = |d: &str, rows: Vec<DailyRow>| {
        let s = Arc::clone(&s);
        let d = day(d);
        async move { s.upsert_day(d, rows).await.unwrap() }
    };
    put(
        "2025-01-30",
        vec![row(1, "view", 0..10), row(2, "view", 0..5)],
    )
    .await;
    put(
        "2025-01-31",
        vec![row(1, "view", 5..15), row(1, "click", 0..2)],
    )
    .await;
    put(
        "2025-02-10",
        vec![row(1, "view", 100..120), row(3, "view", 0..50)],
    )
    .await;
    put("2025-02-11", vec![row(1, "view", 110..125)]).await;
    put("2025-03-01", vec![row(1, "view", 0..3)]).await;
    let uniques = |from: &str, to: &str, kind: Option<&'static str>, tenant: &'static str| {
        let s = Arc::clone(&s);
        let (from, to) = (day(from), day(to));
        async move {
            s.period_uniques(tenant, 7, from, to, kind, ALL_LISTINGS)
                .await
                .unwrap()
        }
    };
    let est = |l: i64, k: &str, n: Option<u64>| (l, k.to_owned(), n);
    // Edge days of January, all of February from its month sketch, an edge day of March.
    assert_eq!(
        uniques("2025-01-30", "2025-03-01", None, "acme").await,
        vec![
            est(1, "click", Some(2)),
            est(1, "view", Some(15 + 25)),
            est(2, "view", Some(5)),
        ]
    );
    // A whole month, from its month sketch alone.
    assert_eq!(
        uniques("2025-02-01", "2025-02-28", Some("view"), "acme").await,
        vec![est(1, "view", Some(25))]
    );
    assert_eq!(
        uniques("2025-01-01", "2025-01-31", Some("view"), "acme").await,
        vec![est(1, "view", Some(15)), est(2, "view", Some(5))]
    );
    // Another tenant's listing 1 is not acme's; account 8 is not 7; a listing range.
    put(
        "2025-01-30",
        vec![row(1, "view", 0..10), row(2, "view", 0..5)],
    )
    .await;
    assert!(
        uniques("2025-01-01", "2025-12-31", None, "other")
            .await
            .is_empty()
    );
    assert_eq!(
        s.period_uniques("acme", 7, day("2025-01-30"), day("2025-01-30"), None, 2..=2)
            .await
            .unwrap(),
        vec![est(2, "view", Some(5))]
    );
    // A day rolled up again with more visitors: its month gains them.
    put(
        "2025-01-31",
        vec![row(1, "view", 5..30), row(1, "click", 0..2)],
    )
    .await;
    assert_eq!(
        uniques("2025-01-01", "2025-01-31", Some("view"), "acme").await,
        vec![est(1, "view", Some(30)), est(2, "view", Some(5))]
    );
    // A day kept without a sketch: its month and every period needing it are unknown; a
    // period of other days is not.
    let mut unknown = row(2, "view", 0..1);
    unknown.visitors.clear();
    put("2025-01-15", vec![unknown]).await;
    assert_eq!(
        uniques("2025-01-01", "2025-01-31", Some("view"), "acme").await,
        vec![est(1, "view", Some(30)), est(2, "view", None)]
    );
    assert_eq!(
        uniques("2025-01-30", "2025-01-31", Some("view"), "acme").await,
        vec![est(1, "view", Some(30)), est(2, "view", Some(5))]
    );
    // A day whose row is no longer produced leaves the days; an emptied month leaves too.
    put("2025-03-01", vec![]).await;
    assert_eq!(
        uniques("2025-03-01", "2025-03-31", None, "acme").await,
        Vec::new()
    );
}
