//! The link-store conformance suite (STYLE.md, object_store's `integration.rs`): a function
//! per port that takes a fresh, empty [`LinkStore`] or [`MailingStore`] and checks the
//! port's contract with exact values.
//! Every backend's tests call it unchanged — SQLite (`tests/conformance_sqlite.rs`) and
//! MariaDB (`tests/conformance_mysql.rs`). It panics (asserts) on a violation.

use std::sync::Arc;

use tidemark_core::day::Day;

use crate::id::{IdCodec, LinkId};
use crate::model::{LinkRecord, Lookup, Mailing};
use crate::rewrite::LinkKind;
use crate::store::{LinkStore, MailingStore};

mod stats;

pub use stats::stats_store;

fn record(id: &LinkId, url: &str, position: Option<u32>, kind: LinkKind) -> LinkRecord {
    LinkRecord {
        link_id: id.as_str().to_owned(),
        url: url.to_owned(),
        email: "Ana.Kovač@example.com".into(),
        mailing_id: "m-2026-11".into(),
        position,
        kind,
        created_ms: id.created_ms(),
    }
}

/// The link-store contract (DESIGN.md part B "Storage", seed 001): records go to the day
/// partition their id carries, in one all-or-nothing batch; a lookup finds a record exactly
/// (URLs of any length, byte for byte), knows unknown ids and ids past retention; partitions
/// are created ahead idempotently, counted per day and dropped whole.
pub async fn link_store(store: Arc<dyn LinkStore>) {
    let codec = IdCodec::new([42; 16]);
    let d0 = Day::parse("2026-11-28").expect("day");
    let (d1, d2) = (d0.plus(1), d0.plus(2));
    let at = |day: Day, ms: i64| codec.generate(day.utc_start_ms() + ms);

    assert!(store.partitions().await.unwrap().is_empty());
    assert_eq!(store.count(d0).await.unwrap(), 0);

    // Partitions ahead, idempotent.
    store.create_partitions(&[d0, d1, d2]).await.unwrap();
    store.create_partitions(&[d1, d2]).await.unwrap();
    assert_eq!(store.partitions().await.unwrap(), vec![d0, d1, d2]);

    // One batch over two days: the last millisecond of d0 and the first of d1.
    let (a, b, c) = (at(d0, 86_399_999), at(d0, 86_399_999), at(d1, 0));
    let long_url = format!(
        "https://shop.example/item/48213?utm=news&x={}#top",
        "é&amp;".repeat(3_000)
    );
    let ra = record(&a, &long_url, Some(0), LinkKind::Link);
    let rb = record(&b, "", None, LinkKind::Open);
    let rc = record(
        &c,
        "https://cdn.example/img/1.png",
        Some(7),
        LinkKind::Image,
    );
    store
        .insert(vec![ra.clone(), rb.clone(), rc.clone()])
        .await
        .unwrap();
    assert_eq!(store.count(d0).await.unwrap(), 2);
    assert_eq!(store.count(d1).await.unwrap(), 1);
    assert_eq!(store.count(d2).await.unwrap(), 0);
    assert_eq!(
        store.lookup(&a, d0).await.unwrap(),
        Lookup::Found(ra.clone())
    );
    assert_eq!(
        store.lookup(&b, d0).await.unwrap(),
        Lookup::Found(rb.clone())
    );
    assert_eq!(
        store.lookup(&c, d0).await.unwrap(),
        Lookup::Found(rc.clone())
    );

    // An id never stored, on a day with a partition and on a day without one.
    assert_eq!(store.lookup(&at(d0, 5), d0).await.unwrap(), Lookup::Unknown);
    assert_eq!(
        store.lookup(&at(d0.plus(30), 5), d0).await.unwrap(),
        Lookup::Unknown
    );
    // Past retention: expired, whatever the store holds.
    assert_eq!(store.lookup(&a, d1).await.unwrap(), Lookup::Expired);

    // All or nothing: a batch repeating a stored id stores none of its records.
    let fresh = record(
        &at(d2, 1),
        "https://shop.example/x",
        Some(1),
        LinkKind::Link,
    );
    let dup = store.insert(vec![fresh.clone(), ra.clone()]).await;
    assert!(dup.is_err(), "a duplicate id is refused");
    assert_eq!(store.count(d2).await.unwrap(), 0);
    assert_eq!(store.lookup(&at(d2, 1), d0).await.unwrap(), Lookup::Unknown);
    assert_eq!(store.count(d0).await.unwrap(), 2);

    // A record for a day without a partition yet gets one.
    let d5 = d0.plus(5);
    let later = record(
        &at(d5, 3_600_000),
        "https://shop.example/later",
        Some(2),
        LinkKind::Link,
    );
    store.insert(vec![later.clone()]).await.unwrap();
    assert_eq!(store.count(d5).await.unwrap(), 1);
    assert!(store.partitions().await.unwrap().contains(&d5));
    // And an earlier day too (a backfill before the first partition).
    let early_day = d0.plus(-3);
    let early = record(
        &at(early_day, 9),
        "https://shop.example/early",
        None,
        LinkKind::Link,
    );
    store.insert(vec![early.clone()]).await.unwrap();
    assert_eq!(store.count(early_day).await.unwrap(), 1);
    assert_eq!(store.count(d0).await.unwrap(), 2, "other days untouched");
    let early_id = codec.parse(&early.link_id).unwrap();
    assert_eq!(
        store.lookup(&early_id, early_day).await.unwrap(),
        Lookup::Found(early.clone())
    );

    // Retention drops whole days, and only those before the first day kept.
    let dropped = store.drop_partitions_before(d1).await.unwrap();
    assert!(
        dropped.contains(&d0) && dropped.contains(&early_day),
        "{dropped:?}"
    );
    assert!(dropped.iter().all(|d| *d < d1));
    let left = store.partitions().await.unwrap();
    assert!(left.iter().all(|d| *d >= d1), "{left:?}");
    assert!(left.contains(&d1) && left.contains(&d2) && left.contains(&d5));
    assert_eq!(store.count(d0).await.unwrap(), 0);
    assert_eq!(store.lookup(&a, d0).await.unwrap(), Lookup::Unknown);
    assert_eq!(store.lookup(&c, d1).await.unwrap(), Lookup::Found(rc));
    assert_eq!(
        store
            .lookup(&codec.parse(&later.link_id).unwrap(), d1)
            .await
            .unwrap(),
        Lookup::Found(later)
    );
    assert!(store.drop_partitions_before(d1).await.unwrap().is_empty());
}

/// The mailing-store contract: a mailing reads back exactly (a template of 1 MiB, any
/// characters), per tenant and by id alone; the suppression list is per tenant, lower case, idempotent, and a
/// lookup of many addresses returns exactly the suppressed ones.
pub async fn mailing_store(store: Arc<dyn MailingStore>) {
    let html = format!("<p>Zdravo {{{{ name }}}} — ✓ 😀</p>{}", "x".repeat(1 << 20));
    let m = Mailing {
        mailing_id: "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b".into(),
        tenant: "acme".into(),
        subject: "Novo: {{ title }}".into(),
        from: "Oglasi <news@oglasi.example>".into(),
        html,
        created_ms: 1_795_999_534_123,
    };
    store.create_mailing(m.clone()).await.unwrap();
    assert_eq!(
        store.mailing("acme", &m.mailing_id).await.unwrap(),
        Some(m.clone())
    );
    assert_eq!(store.mailing("other", &m.mailing_id).await.unwrap(), None);
    assert_eq!(store.mailing("acme", "no-such").await.unwrap(), None);
    // By id alone, whichever tenant owns it.
    assert_eq!(
        store.mailing_by_id(&m.mailing_id).await.unwrap(),
        Some(m.clone())
    );
    assert_eq!(store.mailing_by_id("no-such").await.unwrap(), None);

    let emails: Vec<String> = (0..2500).map(|i| format!("r{i}@x.example")).collect();
    store
        .suppress("acme", &["R7@X.example".into(), "r2400@x.example".into()])
        .await
        .unwrap();
    // Again: idempotent.
    store
        .suppress("acme", &["r7@x.example".into()])
        .await
        .unwrap();
    let hit = store.suppressed("acme", &emails).await.unwrap();
    let mut hit: Vec<String> = hit.into_iter().collect();
    hit.sort();
    assert_eq!(hit, vec!["r2400@x.example", "r7@x.example"]);
    assert!(store.suppressed("other", &emails).await.unwrap().is_empty());
    assert!(store.unsuppress("acme", "R7@x.example").await.unwrap());
    assert!(!store.unsuppress("acme", "r7@x.example").await.unwrap());
    let hit = store.suppressed("acme", &emails).await.unwrap();
    assert_eq!(hit.into_iter().collect::<Vec<_>>(), vec!["r2400@x.example"]);
}
