//! The redirector and retention with an injected clock: one partition per UTC day, lookups by
//! the day the id carries, whole-day drops, the fallback for dropped days, and the events
//! recorded from the one row read. Every test runs on the embedded store and on MariaDB's day
//! partitions (`links.store = "mysql://…"`, a scratch database on the machine's server).

#![allow(clippy::clone_on_ref_ptr)] // test wiring

use std::sync::Arc;

use serde_json::json;
use tidemark_core::clock::{ManualClock, SharedClock};
use tidemark_core::day::{DAY_MS, Day};
use tidemark_events::{EventsConfig, Ingest, RawStore, SqliteRaw};
use tidemark_links::builder::Recipient;
use tidemark_links::config::LinksConfig;
use tidemark_links::metrics::LinksMetrics;
use tidemark_links::partitions::PartitionManager;
use tidemark_links::service::{Hit, LinksService, Route};

const START: i64 = 1_795_999_534_123; // 2026-11-30T00:45:34.123Z

#[derive(Debug, Clone, Copy)]
enum Mode {
    Embedded,
    Production,
}

struct H {
    _dir: tempfile::TempDir,
    /// The scratch database (production mode), dropped by [`H::done`].
    scratch: Option<String>,
    clock: Arc<ManualClock>,
    raw: Arc<SqliteRaw>,
    svc: LinksService,
    partitions: PartitionManager,
}

impl H {
    async fn done(self) {
        if let Some(url) = &self.scratch {
            tidemark_core::mysql::drop_database(url).await.unwrap();
        }
    }
}

async fn harness(mode: Mode) -> H {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START));
    let shared: SharedClock = clock.clone();
    let raw = Arc::new(SqliteRaw::open(&dir.path().join("raw.db")).unwrap());
    let ingest = Ingest::new(raw.clone(), EventsConfig::default());
    let scratch = match mode {
        Mode::Embedded => None,
        Mode::Production => Some(
            tidemark_core::mysql::scratch_database(
                &tidemark_core::mysql::test_server_url(),
                "tm_redirector",
            )
            .await
            .unwrap(),
        ),
    };
    let cfg = LinksConfig {
        track_base: "https://t.example.net".into(),
        fallback_url: Some("https://shop.example/expired".into()),
        retention_days: 2,
        store: scratch.clone().unwrap_or_else(|| "sqlite".into()),
        ..LinksConfig::default()
    };
    let svc = LinksService::open(
        dir.path(),
        cfg,
        ingest,
        shared.clone(),
        LinksMetrics::unregistered(),
    )
    .await
    .unwrap();
    let partitions = PartitionManager::new(svc.link_store(), shared, 2);
    H {
        _dir: dir,
        scratch,
        clock,
        raw,
        svc,
        partitions,
    }
}

/// Renders one message for `email` and returns its (click id, open id).
async fn ids(h: &H, html: &str) -> (String, String) {
    let mid = h
        .svc
        .create_mailing("t", "Hello", html, "news@shop.example")
        .await
        .unwrap();
    let (_, build) = h
        .svc
        .render(
            "t",
            &mid,
            vec![Recipient {
                email: "ann@x.com".into(),
                fields: json!({}).as_object().unwrap().clone(),
            }],
        )
        .await
        .unwrap();
    let html = &build.messages[0].html;
    let grab = |route: &str| {
        let prefix = format!("https://t.example.net/{route}/");
        let at = html.find(&prefix).unwrap() + prefix.len();
        html[at..at + 32].to_owned()
    };
    (grab("c"), grab("o"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clicks_and_opens_are_recorded_from_the_row_read() {
    clicks_and_opens_are_recorded_from_the_row_read_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clicks_and_opens_are_recorded_from_the_row_read_on_mariadb() {
    clicks_and_opens_are_recorded_from_the_row_read_in(Mode::Production).await;
}

async fn clicks_and_opens_are_recorded_from_the_row_read_in(mode: Mode) {
    let h = harness(mode).await;
    let (c, o) = ids(
        &h,
        r#"<body><a href="https://shop.example/item/48213#photos">x</a></body>"#,
    )
    .await;
    let ua = Some("Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X)");
    assert_eq!(
        h.svc.hit(Route::Click, &c, false, ua).await.unwrap(),
        Hit::Redirect("https://shop.example/item/48213#photos".into())
    );
    assert_eq!(
        h.svc.hit(Route::Click, &c, true, ua).await.unwrap(),
        Hit::Redirect("https://shop.example/item/48213#photos".into())
    );
    assert_eq!(
        h.svc
            .hit(
                Route::Open,
                &o,
                false,
                Some("Mozilla/5.0 (Windows NT 10.0)")
            )
            .await
            .unwrap(),
        Hit::Pixel
    );
    // The two routes do not answer for each other's ids.
    assert_eq!(
        h.svc.hit(Route::Open, &c, false, ua).await.unwrap(),
        Hit::NotFound
    );
    assert_eq!(
        h.svc.hit(Route::Click, &o, false, ua).await.unwrap(),
        Hit::NotFound
    );

    h.svc.drain_events().await;
    let mut events = h.raw.day_events(Day::of_utc_ms(START)).await.unwrap();
    // Hit events are written in the background: their order is not the hits' order.
    events.sort_by_key(|e| (e.kind.clone(), e.is_bot()));
    let summary: Vec<(String, Option<i64>, bool, String)> = events
        .iter()
        .map(|e| {
            (
                e.kind.clone(),
                e.listing_id,
                e.is_bot(),
                e.fields["ua_class"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("email_click".into(), Some(48213), false, "mobile".into()),
            ("email_click".into(), Some(48213), true, "mobile".into()),
            ("email_open".into(), None, false, "desktop".into()),
        ]
    );
    assert_eq!(events[0].fields["email"], "ann@x.com");
    assert_eq!(events[0].fields["position"], 0);
    assert_eq!(events[0].fields["link_id"], c.as_str());
    h.done().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_forged_and_unknown_ids_are_404() {
    malformed_forged_and_unknown_ids_are_404_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_forged_and_unknown_ids_are_404_on_mariadb() {
    malformed_forged_and_unknown_ids_are_404_in(Mode::Production).await;
}

async fn malformed_forged_and_unknown_ids_are_404_in(mode: Mode) {
    let h = harness(mode).await;
    let (c, _) = ids(&h, r#"<a href="https://ex.com/">x</a>"#).await;
    for bad in [
        "",
        "short",
        &format!("{c}x"),
        &c.replace(|ch: char| ch.is_ascii_digit(), "_"),
        &format!("{}A", &c[..31]),
    ] {
        if bad == c {
            continue;
        }
        assert_eq!(
            h.svc.hit(Route::Click, bad, false, None).await.unwrap(),
            Hit::NotFound,
            "{bad}"
        );
    }
    h.svc.drain_events().await;
    assert!(
        h.raw
            .day_events(Day::of_utc_ms(START))
            .await
            .unwrap()
            .is_empty(),
        "nothing recorded for 404s"
    );
    h.done().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_days_are_dropped_and_their_ids_fall_back() {
    whole_days_are_dropped_and_their_ids_fall_back_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_days_are_dropped_and_their_ids_fall_back_on_mariadb() {
    whole_days_are_dropped_and_their_ids_fall_back_in(Mode::Production).await;
}

async fn whole_days_are_dropped_and_their_ids_fall_back_in(mode: Mode) {
    let h = harness(mode).await;
    h.partitions.run_once().await.unwrap();
    let today = Day::of_utc_ms(START);
    assert_eq!(
        h.svc.link_store().partitions().await.unwrap(),
        (0..=3).map(|d| today.plus(d)).collect::<Vec<_>>()
    );
    let (day0, _) = ids(&h, r#"<a href="https://ex.com/0">x</a>"#).await;
    h.clock.advance(DAY_MS);
    let (day1, _) = ids(&h, r#"<a href="https://ex.com/1">x</a>"#).await;
    assert_eq!(
        h.svc.link_store().count(today).await.unwrap(),
        2,
        "link + pixel on day 0"
    );
    assert_eq!(h.svc.link_store().count(today.plus(1)).await.unwrap(), 2);

    // Retention 2 days: on day 2, day 0 is past retention and dropped whole.
    h.clock.advance(DAY_MS);
    assert_eq!(h.partitions.run_once().await.unwrap(), vec![today]);
    assert!(
        !h.svc
            .link_store()
            .partitions()
            .await
            .unwrap()
            .contains(&today)
    );
    assert_eq!(
        h.svc.hit(Route::Click, &day0, false, None).await.unwrap(),
        Hit::Expired("https://shop.example/expired".into())
    );
    assert_eq!(
        h.svc.hit(Route::Click, &day1, false, None).await.unwrap(),
        Hit::Redirect("https://ex.com/1".into())
    );
    // An id past retention falls back even before the manager ran.
    h.clock.advance(DAY_MS);
    assert_eq!(
        h.svc.hit(Route::Click, &day1, false, None).await.unwrap(),
        Hit::Expired("https://shop.example/expired".into())
    );
    h.done().await;
}
