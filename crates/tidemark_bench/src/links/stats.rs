//! Part 7 of `tidemark-bench links`: the campaign statistics of a big mailing.
//!
//! Against a fresh server: a mailing of `--stats-recipients` recipients (1,000,000 by
//! default) is rendered through `POST /v1/mailings/{mid}/render`, two calls of
//! [`RENDER_CALL`] recipients in flight; then 30 % of the recipients open (their pixel) and
//! 10 % click one of the six links, through the redirector with a browser's User-Agent. Once
//! the statistics show every hit (their exact figures are checked: rendered, opens, unique
//! opens and clicks), `--stats-clients` clients read `GET /v1/mailings/{mid}/stats` back to
//! back for `--stats-seconds`, first alone, then while the same hits are replayed through the
//! redirector (the hit writer applying groups to the same summary meanwhile). Bar: p99 of the
//! reads under that load ≤ [`BAR_STATS_P99_MS`] at 1,000,000 recipients.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use futures::{StreamExt, TryStreamExt};
use hdrhistogram::Histogram;
use http_body_util::Full;
use hyper::header::{AUTHORIZATION, USER_AGENT};
use hyper::{Request, StatusCode};
use serde_json::{Value, json};

use super::super::load::{self, HttpClient, call};
use super::super::process::ServerProcess;
use super::redirect::{BEARER, BROWSER, RENDER_CALL, click_ids, create_mailing, post_json};
use super::{Bar, LinksBenchArgs};

/// Bar: p99 of the stats reads under redirect load, ms.
pub(super) const BAR_STATS_P99_MS: f64 = 50.0;

/// The size the bar is about.
const BAR_RECIPIENTS: usize = 1_000_000;

/// Hits in flight at once while the hits are made.
const HITS_IN_FLIGHT: usize = 32;

/// Latencies of one phase of reads.
#[derive(Debug)]
pub(super) struct Reads {
    reads: u64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    /// Redirects answered per second meanwhile (0 when alone).
    redirects_per_sec: f64,
}

impl Reads {
    fn line(&self) -> String {
        format!(
            "{} reads, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            self.reads, self.p50_ms, self.p99_ms, self.max_ms
        )
    }
}

/// Figures of the stats part.
#[derive(Debug)]
pub(super) struct StatsFigures {
    recipients: usize,
    render_secs: f64,
    hits: usize,
    hit_secs: f64,
    alone: Reads,
    loaded: Reads,
}

impl StatsFigures {
    pub(super) fn report(&self) -> String {
        format!(
            "\n7. stats: a mailing of {} recipients rendered through the API in {:.1} s \
             ({:.0}/s); {} opens and clicks in {:.1} s ({:.0}/s), all counted exactly\n  \
             GET /v1/mailings/{{mid}}/stats alone: {}\n  \
             the same while redirects run ({:.0}/s): {}\n",
            self.recipients,
            self.render_secs,
            self.recipients as f64 / self.render_secs,
            self.hits,
            self.hit_secs,
            self.hits as f64 / self.hit_secs,
            self.alone.line(),
            self.loaded.redirects_per_sec,
            self.loaded.line()
        )
    }

    pub(super) fn bar(&self) -> Bar {
        Bar {
            name: format!(
                "campaign stats of a {BAR_RECIPIENTS}-recipient mailing: p99 ≤ {BAR_STATS_P99_MS:.0} ms \
                 under redirect load"
            ),
            figure: format!(
                "p99 {:.2} ms at {} recipients",
                self.loaded.p99_ms, self.recipients
            ),
            pass: (self.recipients >= BAR_RECIPIENTS)
                .then_some(self.loaded.p99_ms <= BAR_STATS_P99_MS),
        }
    }
}

/// Whom of recipient `i` opens and clicks: 30 % open, 10 % click link `(i / 10) % 6`.
fn plan(i: usize) -> (bool, Option<usize>) {
    (i % 10 < 3, i.is_multiple_of(10).then_some((i / 10) % 6))
}

/// The `/o/` id in a rendered message.
fn pixel_id(html: &str) -> Option<&str> {
    let at = html.find("/o/")? + 3;
    html.get(at..at + 32)
}

async fn get_json(client: &HttpClient, uri: &str) -> anyhow::Result<(StatusCode, Value)> {
    let req = Request::get(uri)
        .header(AUTHORIZATION, BEARER)
        .body(Full::default())?;
    let (status, body) = call(client, req)
        .await
        .map_err(|f| anyhow::anyhow!("GET {uri}: {f:?}"))?;
    Ok((status, serde_json::from_slice(&body)?))
}

/// Renders the mailing; returns its id and the paths to hit (`/o/…`, `/c/…`) by [`plan`].
async fn render(
    client: &HttpClient,
    addr: SocketAddr,
    recipients: usize,
) -> anyhow::Result<(String, Vec<String>)> {
    let mid = create_mailing(client, addr).await?;
    let uri = format!("http://{addr}/v1/mailings/{mid}/render");
    let calls = (0..recipients).step_by(RENDER_CALL).map(|from| {
        let (client, uri) = (client.clone(), uri.clone());
        async move {
            let to = (from + RENDER_CALL).min(recipients);
            let list: Vec<Value> = (from..to)
                .map(|i| json!({"email": format!("reader{i}@example.com"), "fields": {"first_name": "Ada"}}))
                .collect();
            let (status, v) = post_json(&client, &uri, json!({ "recipients": list })).await?;
            ensure!(status == StatusCode::OK, "render: {status} {v}");
            let messages = v["messages"].as_array().context("no messages")?;
            ensure!(messages.len() == to - from, "render: {} of {} messages", messages.len(), to - from);
            let mut paths = Vec::new();
            for (i, m) in (from..to).zip(messages) {
                let html = m["html"].as_str().context("no html")?;
                let (opens, click) = plan(i);
                if opens {
                    paths.push(format!("/o/{}", pixel_id(html).context("no pixel")?));
                }
                if let Some(link) = click {
                    let ids = click_ids(html);
                    paths.push(format!("/c/{}", ids.get(link).context("too few links")?));
                }
            }
            anyhow::Ok(paths)
        }
    });
    let parts: Vec<Vec<String>> = futures::stream::iter(calls)
        .buffered(2)
        .try_collect()
        .await?;
    Ok((mid, parts.concat()))
}

/// Sends every path once, [`HITS_IN_FLIGHT`] at a time; each must be answered 200 or 302.
async fn hit_all(client: &HttpClient, addr: SocketAddr, paths: Vec<String>) -> anyhow::Result<()> {
    futures::stream::iter(paths)
        .map(|p| hit(client, addr, p))
        .buffer_unordered(HITS_IN_FLIGHT)
        .try_collect::<()>()
        .await
}

async fn hit(client: &HttpClient, addr: SocketAddr, path: String) -> anyhow::Result<()> {
    let req = Request::get(format!("http://{addr}{path}"))
        .header(USER_AGENT, BROWSER)
        .body(Full::default())?;
    let (status, _) = call(client, req)
        .await
        .map_err(|f| anyhow::anyhow!("GET {path}: {f:?}"))?;
    ensure!(
        status == StatusCode::OK || status == StatusCode::FOUND,
        "GET {path}: {status}"
    );
    Ok(())
}

/// `clients` loops reading the statistics for `secs`.
async fn read_for(
    client: &HttpClient,
    uri: &str,
    clients: usize,
    secs: f64,
) -> anyhow::Result<Histogram<u64>> {
    let until = Instant::now() + Duration::from_secs_f64(secs);
    let loops = (0..clients).map(|_| async move {
        let mut h = Histogram::<u64>::new(3)?;
        while Instant::now() < until {
            let t = Instant::now();
            let (status, _) = get_json(client, uri).await?;
            ensure!(status == StatusCode::OK, "GET {uri}: {status}");
            h.record(t.elapsed().as_micros() as u64)?;
        }
        anyhow::Ok(h)
    });
    let mut all = Histogram::<u64>::new(3)?;
    for h in futures::future::try_join_all(loops).await? {
        all.add(h)?;
    }
    Ok(all)
}

fn reads(h: &Histogram<u64>, redirects_per_sec: f64) -> Reads {
    Reads {
        reads: h.len(),
        p50_ms: h.value_at_quantile(0.5) as f64 / 1e3,
        p99_ms: h.value_at_quantile(0.99) as f64 / 1e3,
        max_ms: h.max() as f64 / 1e3,
        redirects_per_sec,
    }
}

/// The stats part against a fresh `server_bin serve` with its data under `dir`.
pub(super) async fn bench_stats(
    args: &LinksBenchArgs,
    server_bin: &Path,
    dir: &Path,
) -> anyhow::Result<StatsFigures> {
    ensure!(
        args.stats_recipients >= 10 && args.stats_clients > 0 && args.stats_seconds > 0.0,
        "--stats-recipients ≥ 10, --stats-clients and --stats-seconds positive"
    );
    std::fs::create_dir_all(dir)?;
    let client = load::http_client(64);
    let server = ServerProcess::start(
        server_bin,
        &client,
        &dir.join("data"),
        &dir.join("server.log"),
        &[("TIDEMARK_LINKS__TRACK_BASE", None)],
    )
    .await?;
    let addr = server.addr;
    let n = args.stats_recipients;

    let t = Instant::now();
    let (mid, paths) = render(&client, addr, n).await?;
    let render_secs = t.elapsed().as_secs_f64();
    eprintln!("stats: {n} recipients rendered in {render_secs:.1} s");
    let t = Instant::now();
    hit_all(&client, addr, paths.clone()).await?;
    let hit_secs = t.elapsed().as_secs_f64();

    let (opens, clicks) = (0..n).fold((0u64, 0u64), |(o, c), i| {
        let (open, click) = plan(i);
        (o + u64::from(open), c + u64::from(click.is_some()))
    });
    let uri = format!("http://{addr}/v1/mailings/{mid}/stats");
    let deadline = Instant::now() + Duration::from_secs(120);
    let stats = loop {
        let (status, v) = get_json(&client, &uri).await?;
        ensure!(status == StatusCode::OK, "GET stats: {status} {v}");
        if v["opens"]["total"] == opens && v["clicks"]["total"] == clicks {
            break v;
        }
        ensure!(
            Instant::now() < deadline,
            "the hits were not all counted within 120 s: {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Every recipient who clicked also opened (30 % ⊇ 10 %): the uniques are exact.
    ensure!(
        stats["recipients"]["rendered"] == n
            && stats["opens"]["unique"] == opens
            && stats["clicks"]["unique"] == clicks
            && stats["bot_hits"] == 0,
        "wrong figures for {n} recipients, {opens} opens, {clicks} clicks: {stats}"
    );

    let alone = read_for(&client, &uri, args.stats_clients, args.stats_seconds).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let replay = {
        let (client, paths, stop, done) = (
            client.clone(),
            paths.clone(),
            Arc::clone(&stop),
            Arc::clone(&done),
        );
        tokio::spawn(async move {
            for chunk in paths.chunks(1_000).cycle() {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                hit_all(&client, addr, chunk.to_vec()).await?;
                done.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            }
            anyhow::Ok(())
        })
    };
    let t = Instant::now();
    let loaded = read_for(&client, &uri, args.stats_clients, args.stats_seconds).await?;
    let redirects_per_sec = done.load(Ordering::Relaxed) as f64 / t.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    replay.await??;
    drop(client);
    if let Err(e) = server.stop(Duration::from_secs(30)).await {
        eprintln!("stats: {e:#}");
    }
    Ok(StatsFigures {
        recipients: n,
        render_secs,
        hits: paths.len(),
        hit_secs,
        alone: reads(&alone, 0.0),
        loaded: reads(&loaded, redirects_per_sec),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_opens_thirty_and_clicks_ten_in_a_hundred() {
        let (o, c) = (0..100).fold((0, 0), |(o, c), i| {
            let (open, click) = plan(i);
            (o + usize::from(open), c + usize::from(click.is_some()))
        });
        assert_eq!((o, c), (30, 10));
        // Every clicker opens too, and the clicks spread over the six links.
        assert!((0..100).all(|i| plan(i).1.is_none() || plan(i).0));
        let links: std::collections::BTreeSet<usize> = (0..60).filter_map(|i| plan(i).1).collect();
        assert_eq!(links.len(), 6);
    }

    #[test]
    fn the_bar_is_measured_at_a_million_recipients_only() {
        let r = |p99_ms| Reads {
            reads: 10,
            p50_ms: 1.0,
            p99_ms,
            max_ms: p99_ms,
            redirects_per_sec: 0.0,
        };
        let f = |recipients, p99| StatsFigures {
            recipients,
            render_secs: 1.0,
            hits: 1,
            hit_secs: 1.0,
            alone: r(1.0),
            loaded: r(p99),
        };
        assert_eq!(f(1_000_000, 12.0).bar().pass, Some(true));
        assert_eq!(f(1_000_000, 51.0).bar().pass, Some(false));
        assert_eq!(f(2_000, 1.0).bar().pass, None);
    }
}
