//! `events.time_zone` against a real `tidemark serve`: `?day=today`, the dashboard's answers
//! and on-demand rollups use the zone's days; a store keeps the zone it was first cut in, and a
//! restart with another zone is refused, naming both; an unknown zone is refused at start.

mod common;

use common::*;
use reqwest::Method;
use serde_json::{Value, json};
use tidemark_core::clock::{Clock, SystemClock};
use tidemark_events::calendar::Calendar;

/// Kiritimati is 14 hours ahead of UTC: for ten hours of every UTC day its date is the next
/// one, so a UTC day mistaken for a local one shows.
const ZONE: &str = "Pacific/Kiritimati";

fn ev(time: i64, listing: i64, session: &str) -> Value {
    json!({"time": time, "kind": "view", "listing_id": listing, "session_id": session})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn days_are_those_of_the_configured_time_zone() {
    let mut server = TestServer::start(&[("TIDEMARK_EVENTS__TIME_ZONE", ZONE)]).await;
    let c = client();
    let zone = Calendar::named(ZONE).unwrap();
    let now = SystemClock.now_ms();
    let today = zone.day_of(now);
    let yesterday = today.plus(-1);
    // Two events of local today, three of local yesterday (its last hour and its first).
    let events = json!([
        ev(now - 1_000, 9, "a"),
        ev(zone.start_ms(today), 9, "b"),
        ev(zone.end_ms(yesterday) - 1, 4, "c"),
        ev(zone.start_ms(yesterday), 4, "d"),
        ev(zone.start_ms(yesterday) + 3_600_000, 4, "e")
    ]);
    let (st, v) = call(&c, Method::POST, &server.url("/v1/events"), Some(events)).await;
    assert_eq!(st, 202, "{v}");

    let (st, top) = call(&c, Method::GET, &server.url("/v1/events/top"), None).await;
    assert_eq!(st, 200, "{top}");
    assert_eq!(top["day"], today.to_string());
    assert_eq!(top["time_zone"], ZONE);
    assert_eq!(top["listings"], json!([{"listing_id": 9, "events": 2}]));
    let url = server.url(&format!("/v1/events/top?day={yesterday}"));
    let (_, top) = call(&c, Method::GET, &url, None).await;
    assert_eq!(top["listings"], json!([{"listing_id": 4, "events": 3}]));
    for path in [
        "/v1/events/recent",
        "/v1/events/raw-window",
        "/v1/events/kinds",
    ] {
        let (st, v) = call(&c, Method::GET, &server.url(path), None).await;
        assert_eq!((st, &v["time_zone"]), (200, &json!(ZONE)), "{path}: {v}");
    }

    // Local yesterday rolls up with its three events (a UTC day would hold other ones).
    let url = server.url(&format!("/v1/rollups/{yesterday}"));
    let (st, out) = call(&c, Method::POST, &url, None).await;
    assert_eq!(st, 200, "{out}");
    assert_eq!(out["events_read"], 3, "{out}");

    // The store's days are Kiritimati's now: a restart in UTC is refused, naming both zones.
    server.terminate();
    let env = [("TIDEMARK_EVENTS__TIME_ZONE".to_owned(), "UTC".to_owned())];
    let stderr = TestServer::refused_start(&server.dir, &env);
    assert!(
        stderr.contains(r#"events.time_zone is "UTC""#) && stderr.contains(ZONE),
        "{stderr}"
    );
    // In its own zone it starts and still holds everything.
    server.spawn().await;
    let (_, top) = call(&c, Method::GET, &server.url("/v1/events/top"), None).await;
    assert_eq!(top["listings"], json!([{"listing_id": 9, "events": 2}]));
}

/// A fresh store takes whichever zone it is first started in; an unknown zone is refused at
/// start with the key and the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_time_zone_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let env = [(
        "TIDEMARK_EVENTS__TIME_ZONE".to_owned(),
        "Europe/Atlantis".to_owned(),
    )];
    let stderr = TestServer::refused_start(dir.path(), &env);
    assert!(
        stderr.contains(r#"events.time_zone "Europe/Atlantis" is not a time zone"#),
        "{stderr}"
    );
}

/// `tidemark events move-zone` re-cuts a stopped store's days in another zone: the server then
/// starts in that zone (and no longer in the old one), and its days hold what the new zone
/// says; a second run has nothing to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_moves_to_another_zone_offline() {
    let mut server = TestServer::start(&[]).await;
    let c = client();
    let zone = Calendar::named(ZONE).unwrap();
    let now = SystemClock.now_ms();
    let yesterday = zone.day_of(now).plus(-1);
    // Local yesterday's first and last instants are on two UTC days.
    let events = json!([
        ev(zone.start_ms(yesterday), 4, "a"),
        ev(zone.end_ms(yesterday) - 1, 4, "b"),
        ev(zone.end_ms(yesterday), 9, "c")
    ]);
    let (st, v) = call(&c, Method::POST, &server.url("/v1/events"), Some(events)).await;
    assert_eq!(st, 202, "{v}");
    server.terminate();

    let move_zone = |to: &str, dir: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_tidemark"))
            .args(["events", "move-zone", "--to", to, "--data-dir"])
            .arg(dir)
            .env("RUST_LOG", "warn")
            .env_remove("TIDEMARK_CONFIG")
            .output()
            .unwrap()
    };
    let out = move_zone(ZONE, &server.dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("moved the events days from UTC to {ZONE}"))
            && stdout.contains("3 events on 2 days")
            && stdout.contains(&format!("set events.time_zone = \"{ZONE}\"")),
        "{stdout}"
    );
    let again = String::from_utf8_lossy(&move_zone(ZONE, &server.dir).stdout).into_owned();
    assert!(again.contains("already cut in"), "{again}");
    // A mistyped directory or zone is refused, not taken for an empty store.
    let nowhere = server.dir.join("nowhere");
    for (to, refusal) in [
        (
            "Europe/Atlantis",
            r#"--to "Europe/Atlantis" is not a time zone"#,
        ),
        (ZONE, "there is no data directory at"),
    ] {
        let out = move_zone(to, &nowhere);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(refusal),
            "{stderr}"
        );
    }

    let env = [("TIDEMARK_EVENTS__TIME_ZONE".to_owned(), "UTC".to_owned())];
    let stderr = TestServer::refused_start(&server.dir, &env);
    assert!(stderr.contains(ZONE), "{stderr}");
    server
        .env
        .push(("TIDEMARK_EVENTS__TIME_ZONE".to_owned(), ZONE.to_owned()));
    server.spawn().await;
    let url = server.url(&format!("/v1/events/top?day={yesterday}"));
    let (st, top) = call(&c, Method::GET, &url, None).await;
    assert_eq!(st, 200, "{top}");
    assert_eq!(top["listings"], json!([{"listing_id": 4, "events": 2}]));
    let url = server.url(&format!("/v1/rollups/{yesterday}"));
    let (st, out) = call(&c, Method::POST, &url, None).await;
    assert_eq!((st, &out["events_read"]), (200, &json!(2)), "{out}");
}
