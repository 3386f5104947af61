//! Events reports and dashboard (DESIGN.md part C) against a real `tidemark serve`:
//! `GET /v1/events/recent` and `GET /v1/events/top` over HTTP, then `GET /dashboard` rendered
//! by headless Chromium from Debian (`/usr/bin/chromium`, installed by `scripts/test`): the
//! chart has data, the total is the number of non-bot events of the window, the legend and the
//! top listings match, the page refreshed by itself, a bad key shows the 401 message; a
//! screenshot is saved under `target/test-artifacts/dashboard.png`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use reqwest::Method;
use serde_json::{Value, json};
use tidemark_core::day::Day;
use tidemark_core::timefmt::rfc3339_ms;

const CHROMIUM: &str = "/usr/bin/chromium";
const KINDS: [&str; 5] = ["view", "click", "contact", "email_open", "email_click"];
const LISTINGS: [i64; 5] = [48213, 48214, 7, 900, 12];
/// Only bots touch this listing: it must never show.
const BOT_LISTING: i64 = 999;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// What was ingested, as `(time_ms, kind, listing_id, bot)`.
struct Ingested {
    events: Vec<(i64, &'static str, i64, bool)>,
}

impl Ingested {
    fn humans(&self) -> impl Iterator<Item = &(i64, &'static str, i64, bool)> {
        self.events.iter().filter(|e| !e.3)
    }

    /// Non-bot events per (minute start, kind) inside `[since, until)`.
    fn per_minute(&self, since: i64, until: i64) -> BTreeMap<(i64, &'static str), u64> {
        let mut m = BTreeMap::new();
        for &(t, k, _, _) in self.humans().filter(|e| e.0 >= since && e.0 < until) {
            *m.entry((t.div_euclid(60_000) * 60_000, k)).or_default() += 1;
        }
        m
    }

    /// Non-bot events of `day` per listing, most first (ties: lower id first).
    fn top(&self, day: Day) -> Vec<(i64, u64)> {
        let mut per: BTreeMap<i64, u64> = BTreeMap::new();
        for &(_, _, l, _) in self.humans().filter(|e| Day::of_utc_ms(e.0) == day) {
            *per.entry(l).or_default() += 1;
        }
        let mut v: Vec<(i64, u64)> = per.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }
}

/// Events of the last 45 minutes in four of the five kinds (`email_click` stays at zero,
/// so zero filling shows), bot events (counted nowhere), and three events two hours ago
/// (outside a 60-minute window).
async fn ingest(c: &reqwest::Client, s: &TestServer) -> Ingested {
    let now = now_ms();
    let mut events = Vec::new();
    for m in 0..45i64 {
        for (ki, kind) in KINDS[..4].iter().enumerate() {
            let n = (m * 3 + ki as i64 * 5) % 7;
            for j in 0..n {
                let listing = LISTINGS[((m + j) as usize + ki * 2) % LISTINGS.len()];
                let t = now - m * 60_000 - (j * 7_919 + ki as i64 * 3_001) % 50_000;
                events.push((t, *kind, listing, false));
            }
        }
        for (j, kind) in ["view", "view", "click", "contact"].into_iter().enumerate() {
            events.push((now - m * 60_000 - j as i64 * 1_000, kind, BOT_LISTING, true));
        }
    }
    for j in 0..3 {
        events.push((now - 2 * 3_600_000 - j * 1_000, "view", 7, false));
    }
    let body: Vec<Value> = events
        .iter()
        .enumerate()
        .map(|(i, &(t, kind, listing, bot))| {
            let mut e = json!({"time": t, "kind": kind, "listing_id": listing,
                               "session_id": format!("s{}", i % 13),
                               "page_url": format!("/item/{listing}")});
            if bot {
                e["bot"] = json!(true);
                e["ua_class"] = json!("bot");
            }
            e
        })
        .collect();
    let (st, v) = call(c, Method::POST, &s.url("/v1/events"), Some(json!(body))).await;
    assert_eq!(st, 202, "{v}");
    assert_eq!(v["accepted"], events.len());
    Ingested { events }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recent_and_top_over_http() {
    let server = TestServer::start(&[]).await;
    let c = client();
    let data = ingest(&c, &server).await;

    let (st, r) = call(&c, Method::GET, &server.url("/v1/events/recent"), None).await;
    assert_eq!(st, 200, "{r}");
    let minutes = r["minutes"].as_array().unwrap();
    assert_eq!(minutes.len(), 60, "every minute of the default window");
    assert_eq!(r["since"], minutes[0]["minute"]);
    // `until` is the end of the current minute (the request ran a moment ago).
    let until = r["until"].as_str().unwrap();
    let guess = (now_ms().div_euclid(60_000) + 1) * 60_000;
    let until_ms = [guess, guess - 60_000]
        .into_iter()
        .find(|u| rfc3339_ms(*u) == until)
        .unwrap_or_else(|| panic!("until {until} is not the end of the current minute"));
    let since_ms = until_ms - 60 * 60_000;
    assert_eq!(r["since"], rfc3339_ms(since_ms));
    let expected = data.per_minute(since_ms, until_ms);
    let mut total = 0;
    for (i, row) in minutes.iter().enumerate() {
        let minute = since_ms + i as i64 * 60_000;
        assert_eq!(row["minute"], rfc3339_ms(minute));
        let counts = row["counts"].as_object().unwrap();
        assert_eq!(
            counts.keys().map(String::as_str).collect::<BTreeSet<_>>(),
            KINDS.into_iter().collect::<BTreeSet<_>>(),
            "every declared kind in every minute"
        );
        for kind in KINDS {
            let want = expected.get(&(minute, kind)).copied().unwrap_or(0);
            assert_eq!(counts[kind], want, "{} {kind}", row["minute"]);
            total += want;
        }
    }
    let humans_in_window = data
        .humans()
        .filter(|e| e.0 >= since_ms && e.0 < until_ms)
        .count() as u64;
    assert!(humans_in_window > 50, "{humans_in_window}");
    assert_eq!(total, humans_in_window);
    assert_eq!(r["total"], total);
    assert_eq!(r["kinds"], json!(KINDS));

    let (st, r5) = call(
        &c,
        Method::GET,
        &server.url("/v1/events/recent?minutes=5"),
        None,
    )
    .await;
    assert_eq!(st, 200, "{r5}");
    assert_eq!(r5["minutes"].as_array().unwrap().len(), 5);
    let (_, r1440) = call(
        &c,
        Method::GET,
        &server.url("/v1/events/recent?minutes=1440"),
        None,
    )
    .await;
    assert_eq!(r1440["minutes"].as_array().unwrap().len(), 1440);
    assert_eq!(
        r1440["total"],
        data.humans().count(),
        "a day's window includes the events two hours ago"
    );

    let (st, top) = call(
        &c,
        Method::GET,
        &server.url("/v1/events/top?day=today&limit=3"),
        None,
    )
    .await;
    assert_eq!(st, 200, "{top}");
    let day = Day::parse(top["day"].as_str().unwrap()).unwrap();
    let today = Day::of_utc_ms(now_ms());
    assert!(day == today || day == today.plus(-1), "{day}");
    let want: Vec<Value> = data
        .top(day)
        .into_iter()
        .take(3)
        .map(|(l, n)| json!({"listing_id": l, "events": n}))
        .collect();
    assert_eq!(top["listings"], json!(want));
    let (_, top_explicit) = call(
        &c,
        Method::GET,
        &server.url(&format!("/v1/events/top?day={day}")),
        None,
    )
    .await;
    let listed: Vec<i64> = top_explicit["listings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["listing_id"].as_i64().unwrap())
        .collect();
    assert!(
        !listed.contains(&BOT_LISTING),
        "bots never count: {listed:?}"
    );
    assert_eq!(listed.len(), data.top(day).len().min(10));

    for bad in [
        "/v1/events/recent?minutes=0",
        "/v1/events/recent?minutes=1441",
        "/v1/events/recent?minutes=ten",
        "/v1/events/top?day=2026-13-01",
        "/v1/events/top?day=yesterday",
        "/v1/events/top?limit=0",
        "/v1/events/top?limit=many",
    ] {
        let (st, v) = call(&c, Method::GET, &server.url(bad), None).await;
        assert_eq!(st, 400, "{bad}: {v}");
        assert_eq!(v["error"]["code"], "bad_request", "{bad}: {v}");
    }
    for path in ["/v1/events/recent", "/v1/events/top"] {
        let r = c.get(server.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path} needs the API key");
    }

    // The page itself is public and self-contained.
    let page = c.get(server.url("/dashboard")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(
        page.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.contains("default-src 'none'"), "{csp}");
    let html = page.text().await.unwrap();
    assert!(html.contains("id=\"chart\"") && html.contains("/v1/events/recent"));
}

// ---------------------------------------------------------------------------------------------
// Headless Chromium.

fn chromium() -> &'static str {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: the dashboard browser test needs Debian's chromium. \
         Run scripts/test (it installs it: apt-get install -y chromium)."
    );
    CHROMIUM
}

/// Runs headless Chromium on `url` with `extra` flags and a fresh profile; returns stdout.
async fn run_chromium(url: &str, extra: &[String]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new(chromium());
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        "--mute-audio",
        "--virtual-time-budget=10000",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .args(extra)
    .arg(url)
    .stdin(std::process::Stdio::null())
    .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(90), cmd.output())
        .await
        .expect("chromium did not finish within 90 s")
        .expect("chromium could not be started");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "chromium failed ({}):\n{}\n{stdout}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The start tag of the element with `id`.
fn tag_with_id<'a>(dom: &'a str, id: &str) -> &'a str {
    let at = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in the DOM:\n{dom}"));
    let start = dom[..at].rfind('<').unwrap();
    let end = at + dom[at..].find('>').unwrap();
    &dom[start..=end]
}

/// The value of `name` in the start tag `tag`.
fn attr(tag: &str, name: &str) -> Option<String> {
    let needle = format!(" {name}=\"");
    let at = tag.find(&needle)? + needle.len();
    let end = at + tag[at..].find('"')?;
    Some(tag[at..end].replace("&amp;", "&"))
}

fn id_attr(dom: &str, id: &str, name: &str) -> String {
    let tag = tag_with_id(dom, id);
    attr(tag, name).unwrap_or_else(|| panic!("#{id} has no {name}: {tag}"))
}

/// The text of the element with `id` (up to the next tag).
fn id_text(dom: &str, id: &str) -> String {
    let tag = tag_with_id(dom, id);
    let at = dom.find(tag).unwrap() + tag.len();
    dom[at..at + dom[at..].find('<').unwrap()].to_owned()
}

/// Every start tag carrying attribute `name`, with its value.
fn tags_with<'a>(dom: &'a str, name: &str) -> Vec<(&'a str, String)> {
    let needle = format!(" {name}=\"");
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = dom[from..].find(&needle) {
        let at = from + i;
        let start = dom[..at].rfind('<').unwrap();
        let end = at + dom[at..].find('>').unwrap();
        let tag = &dom[start..=end];
        out.push((tag, attr(tag, name).unwrap()));
        from = end;
    }
    out
}

fn artifacts_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_in_headless_chromium() {
    chromium();
    let server = TestServer::start(&[]).await;
    let c = client();
    let data = ingest(&c, &server).await;
    let url = server.url(&format!("/dashboard?key={KEY}"));

    let dom = run_chromium(&url, &["--dump-dom".to_owned()]).await;
    let now = now_ms();
    let until = (now.div_euclid(60_000) + 1) * 60_000;
    let since = until - 60 * 60_000;
    assert_eq!(
        id_attr(&dom, "status", "data-state"),
        "ok",
        "{}",
        id_text(&dom, "message")
    );

    // The chart: 60 minutes, one point per (minute, kind) that had events, the window's total.
    let expected = data.per_minute(since, until);
    let humans_in_window: u64 = expected.values().sum();
    assert!(humans_in_window > 50);
    assert_eq!(id_attr(&dom, "chart", "data-minutes"), "60");
    let points: usize = id_attr(&dom, "chart", "data-points").parse().unwrap();
    assert!(points > 0, "the chart has data");
    assert_eq!(points, expected.len(), "minute × kind points with events");
    assert_eq!(
        id_attr(&dom, "chart", "data-total"),
        humans_in_window.to_string()
    );
    let series = tags_with(&dom, "data-sum");
    assert_eq!(series.len(), 4, "one area per kind with events: {series:?}");
    assert!(
        series.iter().all(|(t, _)| t.starts_with("<path")),
        "{series:?}"
    );

    // The total of the last hour: every non-bot event of the window, no bot, nothing older.
    let bots = data.events.iter().filter(|e| e.3).count() as u64;
    assert!(bots > 0);
    assert_eq!(
        id_attr(&dom, "total", "data-value"),
        humans_in_window.to_string()
    );
    assert_eq!(
        id_text(&dom, "total").replace(',', ""),
        humans_in_window.to_string()
    );

    // The legend: every declared kind with its total.
    let legend: BTreeMap<String, u64> = tags_with(&dom, "data-kind")
        .into_iter()
        .filter(|(t, _)| t.starts_with("<li"))
        .map(|(t, k)| (k, attr(t, "data-total").unwrap().parse().unwrap()))
        .collect();
    let mut want_legend: BTreeMap<String, u64> = KINDS.iter().map(|k| (k.to_string(), 0)).collect();
    for ((_, k), n) in &expected {
        *want_legend.get_mut(*k).unwrap() += n;
    }
    assert_eq!(legend, want_legend);

    // Today's top listings, in order, without the bots' listing.
    let day = Day::parse(&id_attr(&dom, "top", "data-day")).unwrap();
    assert!(day == Day::of_utc_ms(now) || day == Day::of_utc_ms(now).plus(-1));
    let rows: Vec<(i64, u64)> = tags_with(&dom, "data-listing")
        .into_iter()
        .map(|(t, l)| {
            (
                l.parse().unwrap(),
                attr(t, "data-events").unwrap().parse().unwrap(),
            )
        })
        .collect();
    let want_top: Vec<(i64, u64)> = data.top(day).into_iter().take(10).collect();
    assert!(!want_top.is_empty());
    assert_eq!(rows, want_top);
    assert!(rows.iter().all(|(l, _)| *l != BOT_LISTING));

    // It refreshes by itself (every 5 s; the 10 s virtual time budget allows two or three).
    let refreshes: u32 = attr(tag_with_body(&dom), "data-refreshes")
        .unwrap()
        .parse()
        .unwrap();
    assert!(refreshes >= 2, "the page refreshed {refreshes} time(s)");
    // The key left the address bar.
    assert!(!dom.contains(KEY), "the API key must not stay in the page");

    // A wrong key: a clear 401 message; no key: asked for one.
    let bad = run_chromium(
        &server.url("/dashboard?key=not-a-key"),
        &["--dump-dom".to_owned()],
    )
    .await;
    assert_eq!(id_attr(&bad, "status", "data-state"), "unauthorized");
    let msg = id_text(&bad, "message");
    assert!(msg.contains("401") && msg.contains("refused"), "{msg}");
    assert_eq!(id_attr(&bad, "chart", "data-points"), "0");
    let none = run_chromium(&server.url("/dashboard"), &["--dump-dom".to_owned()]).await;
    assert_eq!(id_attr(&none, "status", "data-state"), "no-key");
    assert!(id_text(&none, "message").contains("API key"));

    // The screenshot, kept as a test artifact.
    let png = artifacts_dir().join("dashboard.png");
    let _ = std::fs::remove_file(&png);
    run_chromium(
        &url,
        &[
            format!("--screenshot={}", png.display()),
            "--window-size=1280,800".to_owned(),
        ],
    )
    .await;
    let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("{}: {e}", png.display()));
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "a PNG");
    let width = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    assert_eq!((width, height), (1280, 800));
    assert!(bytes.len() > 20_000, "a blank page is smaller than that");
    println!("dashboard screenshot: {}", png.display());
}

fn tag_with_body(dom: &str) -> &str {
    let start = dom.find("<body").expect("a body");
    &dom[start..=start + dom[start..].find('>').unwrap()]
}

/// The campaign page `/dashboard/mailings/{mid}` in headless Chromium: its figures, per-link
/// table and timeline are the stats route's, a wrong key and an unknown mailing show their
/// messages; a screenshot is saved under `target/test-artifacts/campaign.png`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn campaign_page_in_headless_chromium() {
    chromium();
    let server = TestServer::start(&[]).await;
    let c = client();
    let html = r#"<p>Hi {{ name }}</p><a href="https://shop.example/item/7">see</a> <a href="https://shop.example/sale?who={{ name }}">sale</a>"#;
    let (st, v) = call(
        &c,
        Method::POST,
        &server.url("/v1/mailings"),
        Some(json!({"subject": "Deals", "from": "news@shop.example", "html": html})),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    let mid = v["mailing_id"].as_str().unwrap().to_owned();
    let recipients: Vec<Value> = (0..6)
        .map(|i| json!({"email": format!("r{i}@x.example"), "fields": {"name": format!("R{i}")}}))
        .chain([json!({"email": "nofield@x.example", "fields": {}})])
        .collect();
    let (st, v) = call(
        &c,
        Method::POST,
        &server.url(&format!("/v1/mailings/{mid}/render")),
        Some(json!({"recipients": recipients})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let browser = "Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0";
    let mut hits = 0;
    for (i, m) in v["messages"].as_array().unwrap().iter().enumerate() {
        let (links, pixel) = tracking_ids(m["html"].as_str().unwrap(), &server.base);
        let mut paths = vec![format!("/o/{pixel}")];
        paths.extend(links.iter().take(i % 3).map(|l| format!("/c/{l}")));
        for p in paths {
            let r = no_redirects()
                .get(server.url(&p))
                .header("user-agent", browser)
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success() || r.status().is_redirection());
            hits += 1;
        }
    }
    let path = format!("/v1/mailings/{mid}/stats");
    let stats = loop {
        let (st, s) = call(&c, Method::GET, &server.url(&path), None).await;
        assert_eq!(st, 200);
        if s["opens"]["total"].as_u64().unwrap() + s["clicks"]["total"].as_u64().unwrap() == hits {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(stats["clicks"]["total"], 6);

    let url = server.url(&format!("/dashboard/mailings/{mid}?key={KEY}"));
    let dom = run_chromium(&url, &["--dump-dom".to_owned()]).await;
    assert_eq!(id_attr(&dom, "status", "data-state"), "ok");
    for (figure, want) in [
        ("rendered", &stats["recipients"]["rendered"]),
        ("delivered", &stats["sending"]["delivered"]),
        ("failed", &stats["sending"]["failed"]),
        ("unique-opens", &stats["opens"]["unique"]),
        ("unique-clicks", &stats["clicks"]["unique"]),
        ("click-to-open", &stats["click_to_open"]),
        ("machine-opens", &stats["opens"]["machine"]),
        ("bot-hits", &stats["bot_hits"]),
        ("unsubscribed", &stats["unsubscribed"]),
    ] {
        assert_eq!(
            id_attr(&dom, &format!("fig-{figure}"), "data-value"),
            want.to_string(),
            "{figure}"
        );
    }
    assert_eq!(id_attr(&dom, "fig-skipped", "data-value"), "1");
    let rows: Vec<Value> = tags_with(&dom, "data-position")
        .into_iter()
        .map(|(t, p)| {
            json!({
                "position": p.parse::<u64>().unwrap(),
                "clicks": attr(t, "data-clicks").unwrap().parse::<u64>().unwrap(),
                "unique_clicks": attr(t, "data-unique").unwrap().parse::<u64>().unwrap(),
            })
        })
        .collect();
    let want: Vec<Value> = stats["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| json!({"position": l["position"], "clicks": l["clicks"], "unique_clicks": l["unique_clicks"]}))
        .collect();
    assert_eq!(rows, want);
    assert!(
        dom.contains("https://shop.example/sale?who=R"),
        "the rendered URL is shown"
    );
    let sum = |k: &str| {
        stats["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h[k].as_u64().unwrap())
            .sum::<u64>()
    };
    assert_eq!(
        id_attr(&dom, "timeline", "data-opens"),
        sum("opens").to_string()
    );
    assert_eq!(
        id_attr(&dom, "timeline", "data-clicks"),
        sum("clicks").to_string()
    );
    assert_eq!(
        id_attr(&dom, "timeline", "data-hours"),
        stats["timeline"].as_array().unwrap().len().to_string()
    );
    assert!(!dom.contains(KEY), "the API key must not stay in the page");

    let bad = run_chromium(
        &server.url(&format!("/dashboard/mailings/{mid}?key=not-a-key")),
        &["--dump-dom".to_owned()],
    )
    .await;
    assert_eq!(id_attr(&bad, "status", "data-state"), "unauthorized");
    let unknown = run_chromium(
        &server.url(&format!(
            "/dashboard/mailings/0193a1b2-0000-7000-8000-00000000dead?key={KEY}"
        )),
        &["--dump-dom".to_owned()],
    )
    .await;
    assert_eq!(id_attr(&unknown, "status", "data-state"), "not-found");
    assert!(id_text(&unknown, "message").contains("404"));

    let png = artifacts_dir().join("campaign.png");
    let _ = std::fs::remove_file(&png);
    run_chromium(
        &url,
        &[
            format!("--screenshot={}", png.display()),
            "--window-size=1280,900".to_owned(),
        ],
    )
    .await;
    let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("{}: {e}", png.display()));
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "a PNG");
    println!("campaign screenshot: {}", png.display());
}
