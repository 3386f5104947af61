use super::*;

const M: &str = "m1";

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

fn count(t: &Tally, name: &str) -> i64 {
    t.counts
        .get(&(M.to_owned(), name.to_owned()))
        .copied()
        .unwrap_or_default()
}

fn seen(t: &Tally, what: Unique) -> Vec<String> {
    t.uniques
        .get(&(M.to_owned(), what))
        .cloned()
        .unwrap_or_default()
}

#[test]
fn people_count_every_time_and_once_per_recipient() {
    let h = 7 * HOUR_MS;
    let hits = [
        hit("Ana@Ex.com", HitKind::Open, HitSource::Person, None, h + 5),
        hit("ana@ex.com", HitKind::Open, HitSource::Person, None, h + 6),
        hit(
            "ben@ex.com",
            HitKind::Click,
            HitSource::Person,
            Some(2),
            h + HOUR_MS,
        ),
        hit(
            "ben@ex.com",
            HitKind::Click,
            HitSource::Person,
            Some(2),
            h + HOUR_MS + 1,
        ),
        hit(
            "ana@ex.com",
            HitKind::Click,
            HitSource::Person,
            Some(0),
            h + 9,
        ),
    ];
    let t = tally(&hits, |_, _| None);
    assert_eq!(count(&t, counter::OPENS), 2);
    assert_eq!(count(&t, counter::CLICKS), 3);
    assert_eq!(count(&t, &counter::link_clicks(2)), 2);
    assert_eq!(count(&t, &counter::link_clicks(0)), 1);
    // A click proves the open.
    assert_eq!(seen(&t, Unique::Opened), ["ana@ex.com", "ben@ex.com"]);
    assert_eq!(seen(&t, Unique::Clicked), ["ana@ex.com", "ben@ex.com"]);
    assert_eq!(seen(&t, Unique::ClickedLink(2)), ["ben@ex.com"]);
    assert_eq!(seen(&t, Unique::ClickedLink(0)), ["ana@ex.com"]);
    assert_eq!(t.hours.get(&(M.to_owned(), h)), Some(&(2, 1)));
    assert_eq!(t.hours.get(&(M.to_owned(), h + HOUR_MS)), Some(&(0, 2)));
    assert_eq!(count(&t, counter::BOT_HITS), 0);
    assert_eq!(count(&t, counter::OPENS_MACHINE), 0);
}

#[test]
fn bots_and_machine_opens_are_counted_apart() {
    let delivered = 1_000_000;
    let hits = [
        hit(
            "a@ex.com",
            HitKind::Click,
            HitSource::Bot,
            Some(0),
            delivered + 60_000,
        ),
        hit(
            "a@ex.com",
            HitKind::Open,
            HitSource::Bot,
            None,
            delivered + 60_000,
        ),
        hit(
            "a@ex.com",
            HitKind::Click,
            HitSource::ImageProxy,
            Some(0),
            delivered + 60_000,
        ),
        hit(
            "a@ex.com",
            HitKind::Open,
            HitSource::ImageProxy,
            None,
            delivered + 60_000,
        ),
        // A person's client, but within the window after delivery: a prefetch.
        hit(
            "a@ex.com",
            HitKind::Open,
            HitSource::Person,
            None,
            delivered + MACHINE_OPEN_WINDOW_MS - 1,
        ),
        // Just past it: the person.
        hit(
            "a@ex.com",
            HitKind::Open,
            HitSource::Person,
            None,
            delivered + MACHINE_OPEN_WINDOW_MS,
        ),
        // No delivery known (rendered only, or forgotten): the person.
        hit(
            "b@ex.com",
            HitKind::Open,
            HitSource::Person,
            None,
            delivered + 1,
        ),
    ];
    let t = tally(&hits, |m, e| {
        (m == M && e == "a@ex.com").then_some(delivered)
    });
    assert_eq!(count(&t, counter::BOT_HITS), 3);
    assert_eq!(count(&t, counter::OPENS_MACHINE), 2);
    assert_eq!(count(&t, counter::OPENS), 2);
    assert_eq!(count(&t, counter::CLICKS), 0);
    assert_eq!(seen(&t, Unique::Opened), ["a@ex.com", "b@ex.com"]);
    assert!(seen(&t, Unique::Clicked).is_empty());
}

#[test]
fn image_proxies_by_user_agent() {
    for ua in [
        "Mozilla/5.0",
        "Mozilla/5.0 (Windows NT 5.1; rv:11.0) Gecko Firefox/11.0 (via ggpht.com GoogleImageProxy)",
        "YahooMailProxy; https://help.yahoo.com/kb/yahoo-mail-proxy-SLN28749.html",
    ] {
        assert!(is_image_proxy(Some(ua)), "{ua}");
    }
    for ua in [
        "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148",
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36",
        "",
    ] {
        assert!(!is_image_proxy(Some(ua)), "{ua}");
    }
    assert!(!is_image_proxy(None));
}

#[test]
fn skip_reasons_are_few_names() {
    assert_eq!(skip_reason("suppressed"), "suppressed");
    assert_eq!(
        skip_reason("too many links (300 > 200 per message)"),
        "too_many_links"
    );
    assert_eq!(skip_reason("missing merge field `name`"), "render_failed");
}

#[test]
fn statistics_from_a_summary_name_the_template_links() {
    let mailing = Mailing {
        mailing_id: M.into(),
        tenant: "t".into(),
        subject: "s".into(),
        from: "n@ex.com".into(),
        html: "<p>hi</p>".into(),
        created_ms: 0,
    };
    let counts = [
        (counter::RENDERED, 10),
        ("skipped:suppressed", 2),
        (counter::HANDED, 10),
        (counter::DELIVERED, 9),
        (counter::FAILED, 1),
        (counter::OPENS, 7),
        (counter::OPENS_UNIQUE, 4),
        (counter::OPENS_MACHINE, 3),
        (counter::CLICKS, 5),
        (counter::CLICKS_UNIQUE, 1),
        (counter::BOT_HITS, 6),
        ("link:1:clicks", 5),
        ("link:1:unique", 1),
        ("link:4:clicks", 1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let stored = StoredStats {
        counts,
        links: vec![
            (0, "https://shop.ex/a".into()),
            (1, "https://shop.ex/b?u=7".into()),
        ],
        hours: vec![(1_795_996_800_000, 7, 5)],
    };
    let s = mailing_stats(&mailing, &stored);
    assert_eq!(s.recipients.rendered, 10);
    assert_eq!(s.recipients.skipped.get("suppressed"), Some(&2));
    assert_eq!(
        (s.sending.handed, s.sending.delivered, s.sending.failed),
        (10, 9, 1)
    );
    assert_eq!((s.opens.total, s.opens.unique, s.opens.machine), (7, 4, 3));
    assert_eq!((s.clicks.total, s.clicks.unique), (5, 1));
    assert_eq!(s.click_to_open, Some(0.25));
    assert_eq!(s.bot_hits, 6);
    let links: Vec<_> = s
        .links
        .iter()
        .map(|l| (l.position, l.url.as_deref(), l.clicks, l.unique_clicks))
        .collect();
    assert_eq!(
        links,
        [
            (0, Some("https://shop.ex/a"), 0, 0),
            (1, Some("https://shop.ex/b?u=7"), 5, 1),
            (4, None, 1, 0),
        ]
    );
    assert_eq!(s.timeline[0].hour, "2026-11-30T00:00:00.000Z");
    assert_eq!((s.timeline[0].opens, s.timeline[0].clicks), (7, 5));
    let empty = mailing_stats(&mailing, &StoredStats::default());
    assert_eq!(empty.click_to_open, None);
    assert!(empty.links.is_empty());
}

#[test]
fn a_render_keeps_the_first_url_of_each_link_position() {
    let rec = |email: &str, url: &str, position: Option<u32>, kind: LinkKind| LinkRecord {
        link_id: String::new(),
        url: url.into(),
        email: email.into(),
        mailing_id: M.into(),
        position,
        kind,
        created_ms: 0,
    };
    let records = [
        rec("a@ex.com", "https://shop.ex/?u=a", Some(0), LinkKind::Link),
        rec("a@ex.com", "https://cdn.ex/i.png", Some(1), LinkKind::Image),
        rec("a@ex.com", "", None, LinkKind::Open),
        rec("b@ex.com", "https://shop.ex/?u=b", Some(0), LinkKind::Link),
        rec(
            "b@ex.com",
            "https://shop.ex/item/4",
            Some(2),
            LinkKind::Link,
        ),
    ];
    assert_eq!(
        rendered_links(&records),
        [
            (0, "https://shop.ex/?u=a".to_owned()),
            (2, "https://shop.ex/item/4".to_owned())
        ]
    );
}

#[test]
fn an_unsubscribe_counts_its_recipient_once_and_nothing_else() {
    let hits = [
        hit(
            "Ana@ex.com",
            HitKind::Unsubscribe,
            HitSource::Person,
            None,
            5,
        ),
        hit("ana@ex.com", HitKind::Unsubscribe, HitSource::Bot, None, 6),
    ];
    let t = tally(&hits, |_, _| None);
    assert_eq!(seen(&t, Unique::Unsubscribed), ["ana@ex.com"]);
    assert!(t.counts.is_empty());
    assert!(t.hours.is_empty());
    assert_eq!(Unique::Unsubscribed.counter(), counter::UNSUBSCRIBED);
}

#[test]
fn uniques_known_stored_are_not_written_again() {
    let known = SeenUniques::default();
    let group = |emails: &[&str]| {
        let hits: Vec<StatsHit> = emails
            .iter()
            .map(|e| hit(e, HitKind::Click, HitSource::Person, Some(1), 5))
            .collect();
        tally(&hits, |_, _| None)
    };
    let mut t = group(&["a@ex.com", "b@ex.com"]);
    let keys = known.filter(&mut t);
    // Nothing remembered yet: every unique is written (3 kinds × 2 recipients).
    assert_eq!(keys.len(), 6);
    assert_eq!(seen(&t, Unique::ClickedLink(1)), ["a@ex.com", "b@ex.com"]);
    // Filtering again before the commit is remembered changes nothing.
    let mut again = group(&["a@ex.com"]);
    assert_eq!(known.filter(&mut again).len(), 3);
    known.remember(keys);
    let mut t = group(&["A@ex.com", "c@ex.com"]);
    let keys = known.filter(&mut t);
    assert_eq!(keys.len(), 3);
    assert_eq!(seen(&t, Unique::Clicked), ["c@ex.com"]);
    assert_eq!(seen(&t, Unique::Opened), ["c@ex.com"]);
    // The counters are untouched: every click still counts.
    assert_eq!(count(&t, counter::CLICKS), 2);
}

#[test]
fn outcomes_count_per_mailing_and_keep_each_recipients_last_delivery() {
    let d = |mailing: &str, email: &str, delivered: bool, at_ms: i64| Delivery {
        mailing_id: mailing.into(),
        email: email.into(),
        delivered,
        at_ms,
    };
    let t = tally_deliveries(&[
        d(M, "Ana@Ex.com", true, 10),
        d(M, "ana@ex.com", true, 12),
        d(M, "ben@ex.com", false, 11),
        d("m2", "ana@ex.com", true, 9),
    ]);
    let key = |m: &str, s: &str| (m.to_owned(), s.to_owned());
    assert_eq!(
        t.counts,
        [
            (key(M, counter::DELIVERED), 2),
            (key(M, counter::FAILED), 1),
            (key("m2", counter::DELIVERED), 1)
        ]
        .into_iter()
        .collect()
    );
    assert_eq!(
        t.delivered_at,
        [(key(M, "ana@ex.com"), 12), (key("m2", "ana@ex.com"), 9)]
            .into_iter()
            .collect()
    );
}
