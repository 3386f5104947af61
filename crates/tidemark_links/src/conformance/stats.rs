//! The campaign-statistics part of the mailing-store contract.

use std::sync::Arc;

use crate::stats::{
    DELIVERIES_KEPT_MS, Delivery, HOUR_MS, HitKind, HitSource, MACHINE_OPEN_WINDOW_MS, StatsHit,
    StoredStats, counter,
};
use crate::store::MailingStore;

const M: &str = "0193a1b2-0000-7000-8000-000000000001";
const OTHER: &str = "0193a1b2-0000-7000-8000-000000000002";
/// 2026-11-30T00:00Z.
const T0: i64 = 1_795_996_800_000;

fn hit(
    email: &str,
    kind: HitKind,
    source: HitSource,
    position: Option<u32>,
    at_ms: i64,
) -> StatsHit {
    StatsHit {
        mailing_id: M.into(),
        email: email.into(),
        position,
        kind,
        source,
        at_ms,
    }
}

fn get(s: &StoredStats, name: &str) -> i64 {
    s.counts.get(name).copied().unwrap_or_default()
}

/// The summary's contract: counters add up, the first render's link URLs stay, deliveries
/// count and make opens right after them machine opens, a group of hits is applied once
/// whatever the retries, uniques count each recipient once across groups and whatever the
/// address's case, mailings do not mix, and the timeline is by UTC hour.
pub async fn stats_store(store: Arc<dyn MailingStore>) {
    assert_eq!(store.stats(M).await.unwrap(), StoredStats::default());

    // Renders and sends.
    let render = [
        (counter::RENDERED.to_owned(), 3),
        (counter::skipped("suppressed"), 1),
    ];
    store
        .add_counts(
            M,
            &render,
            &[
                (0, "https://shop.ex/?u=a".into()),
                (2, "https://shop.ex/item/9".into()),
            ],
        )
        .await
        .unwrap();
    store
        .add_counts(
            M,
            &render,
            &[
                (0, "https://shop.ex/?u=z".into()),
                (1, "https://shop.ex/é".into()),
            ],
        )
        .await
        .unwrap();
    store
        .add_counts(M, &[(counter::HANDED.to_owned(), 6)], &[])
        .await
        .unwrap();
    let s = store.stats(M).await.unwrap();
    assert_eq!(get(&s, counter::RENDERED), 6);
    assert_eq!(get(&s, "skipped:suppressed"), 2);
    assert_eq!(get(&s, counter::HANDED), 6);
    assert_eq!(
        s.links,
        [
            (0, "https://shop.ex/?u=a".to_owned()),
            (1, "https://shop.ex/é".to_owned()),
            (2, "https://shop.ex/item/9".to_owned())
        ]
    );

    // Deliveries: Ana's at T0, Ben's failed, an old one of Cem forgotten.
    let delivery = |email: &str, delivered: bool, at_ms: i64| Delivery {
        mailing_id: M.into(),
        email: email.into(),
        delivered,
        at_ms,
    };
    store
        .record_deliveries(
            vec![
                delivery("Ana@Ex.com", true, T0),
                delivery("ben@ex.com", false, T0),
                delivery("cem@ex.com", true, T0 - DELIVERIES_KEPT_MS - 1),
            ],
            T0,
        )
        .await
        .unwrap();
    let s = store.stats(M).await.unwrap();
    assert_eq!(
        (get(&s, counter::DELIVERED), get(&s, counter::FAILED)),
        (2, 1)
    );

    // One group: Ana's client opens within the window (machine), then again later (person);
    // Cem's delivery is forgotten, so his early open is a person's; a bot probes a link.
    let g1 = vec![
        hit(
            "ana@ex.com",
            HitKind::Open,
            HitSource::Person,
            None,
            T0 + MACHINE_OPEN_WINDOW_MS - 1,
        ),
        hit(
            "ANA@ex.com",
            HitKind::Open,
            HitSource::Person,
            None,
            T0 + 60_000,
        ),
        hit("cem@ex.com", HitKind::Open, HitSource::Person, None, T0 + 1),
        hit(
            "ana@ex.com",
            HitKind::Click,
            HitSource::Bot,
            Some(0),
            T0 + 2,
        ),
        hit(
            "ben@ex.com",
            HitKind::Open,
            HitSource::ImageProxy,
            None,
            T0 + 3,
        ),
    ];
    assert!(
        store
            .apply_hits("g1", g1.clone(), T0 + 60_000)
            .await
            .unwrap()
    );
    // The same group again (a retry whose first try did commit): nothing changes.
    assert!(!store.apply_hits("g1", g1, T0 + 61_000).await.unwrap());
    let s = store.stats(M).await.unwrap();
    assert_eq!(get(&s, counter::OPENS), 2);
    assert_eq!(get(&s, counter::OPENS_UNIQUE), 2);
    assert_eq!(get(&s, counter::OPENS_MACHINE), 2);
    assert_eq!(get(&s, counter::BOT_HITS), 1);
    assert_eq!(get(&s, counter::CLICKS), 0);

    // A second group, an hour later: Ana clicks twice (she has opened already), Dan clicks
    // without an open (his click proves it), another mailing's hit stays apart.
    let later = T0 + HOUR_MS + 5;
    let mut g2 = vec![
        hit(
            "ana@ex.com",
            HitKind::Click,
            HitSource::Person,
            Some(1),
            later,
        ),
        hit(
            "ana@ex.com",
            HitKind::Click,
            HitSource::Person,
            Some(1),
            later + 1,
        ),
        hit(
            "dan@ex.com",
            HitKind::Click,
            HitSource::Person,
            Some(2),
            later + 2,
        ),
    ];
    let mut other = hit(
        "ana@ex.com",
        HitKind::Click,
        HitSource::Person,
        Some(1),
        later,
    );
    other.mailing_id = OTHER.into();
    g2.push(other);
    assert!(store.apply_hits("g2", g2, later).await.unwrap());
    let s = store.stats(M).await.unwrap();
    assert_eq!(get(&s, counter::OPENS), 2);
    assert_eq!(get(&s, counter::OPENS_UNIQUE), 3);
    assert_eq!(get(&s, counter::CLICKS), 3);
    assert_eq!(get(&s, counter::CLICKS_UNIQUE), 2);
    assert_eq!(get(&s, &counter::link_clicks(1)), 2);
    assert_eq!(get(&s, &counter::link_unique(1)), 1);
    assert_eq!(get(&s, &counter::link_clicks(2)), 1);
    assert_eq!(get(&s, &counter::link_unique(2)), 1);
    assert_eq!(s.hours, [(T0, 2, 0), (T0 + HOUR_MS, 0, 3)]);

    // Unsubscribes: once per recipient, in any group.
    for (group, email) in [
        ("g3", "eve@ex.com"),
        ("g4", "EVE@ex.com"),
        ("g5", "ana@ex.com"),
    ] {
        let h = hit(email, HitKind::Unsubscribe, HitSource::Person, None, later);
        assert!(store.apply_hits(group, vec![h], later).await.unwrap());
    }
    let s = store.stats(M).await.unwrap();
    assert_eq!(get(&s, counter::UNSUBSCRIBED), 2);
    assert_eq!(get(&s, counter::OPENS_UNIQUE), 3);

    let o = store.stats(OTHER).await.unwrap();
    assert_eq!(get(&o, counter::CLICKS), 1);
    assert_eq!(get(&o, counter::OPENS_UNIQUE), 1);
    assert_eq!(get(&o, counter::RENDERED), 0);
    assert!(o.links.is_empty());
}
