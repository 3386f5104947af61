//! Part 4 of `tidemark-bench links`: the redirector under load on loopback.
//!
//! A `tidemark serve` child (its tracking base left to default to its listen address) gets a
//! mailing with six tracked links (one in Outlook VML) and renders it over HTTP for
//! `--recipients` recipients; the `/c/` ids in the rendered messages are the real ids the runs
//! ask for, at random, with a browser User-Agent so that each hit counts as a click (a
//! redirect, a lookup of one day partition and an `email_click` event stored durably). Two
//! runs: `wrk` (closed loop, if installed) and the open-loop driver at `--rate`. Then, with
//! wrk and nginx installed, [`PAIRS`] pairs of wrk runs of `--pair-seconds`, the redirector's
//! then nginx's `return 302` ([`super::nginx`]: the machine's HTTP limit), give the median
//! ratio of their rates. The server's counters afterwards tell whether every answered request
//! was counted as a click.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, LOCATION, USER_AGENT};
use hyper::{Request, StatusCode, Uri};
use rand::{Rng, SeedableRng};
use serde_json::json;

use super::super::load::{self, Failure, HttpClient, LoadResult, OpenLoop, call};
use super::super::median;
use super::super::process::{Cpu, CpuMark, ServerProcess, scrape_metrics};
use super::hit::{HitSplit, bench_hit_split};
use super::nginx::{self, Nginx};
use super::wrk::{self, WrkReport};
use super::{BAR_NGINX_SHARE, BAR_P99_MS, BAR_REDIRECTS, Bar, LinksBenchArgs, SUBJECT};

/// Pairs of wrk runs against nginx.
const PAIRS: usize = 5;

/// The API key of the default `demo` tenant of the spawned server.
pub(super) const BEARER: &str = "Bearer dev-key";
/// A desktop browser: counted as a click, not as a bot.
pub(super) const BROWSER: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, \
                       like Gecko) Chrome/131.0.0.0 Safari/537.36";
/// The mailing: six tracked links (one in VML), an unsubscribe link that is not tracked.
const TEMPLATE: &str = r#"<!doctype html>
<html><body>
<p>Hello {{ first_name }}, new in your area:</p>
<p><a href="https://shop.example.com/item/48213?utm_source=newsletter&amp;utm_medium=email">A bike</a></p>
<p><a href="https://shop.example.com/item/1277?utm_source=newsletter&amp;utm_medium=email">A sofa</a></p>
<p><a href="https://shop.example.com/item/90211?utm_source=newsletter&amp;utm_medium=email#photos">A lamp</a></p>
<p><a href="https://shop.example.com/search?q=caf%C3%A9+table">Café tables</a></p>
<!--[if mso]><v:roundrect href="https://shop.example.com/sale" style="height:40px;width:200px"><center>Sale</center></v:roundrect><![endif]-->
<!--[if !mso]><!--><a href="https://shop.example.com/sale">Sale</a><!--<![endif]-->
<p><a href="https://shop.example.com/unsubscribe?u=1">Unsubscribe</a></p>
</body></html>
"#;
/// Recipients per render call (the API takes up to 10,000).
pub(super) const RENDER_CALL: usize = 1_000;

/// The pairs against nginx: each `(redirector, nginx)`.
#[derive(Debug)]
enum VersusNginx {
    /// wrk or nginx is not installed.
    Missing(&'static str),
    Failed(String),
    Ran(Vec<(WrkReport, WrkReport)>),
}

impl VersusNginx {
    /// The median of the pairs' redirector / nginx req/s.
    fn share(&self) -> Option<f64> {
        match self {
            VersusNginx::Ran(pairs) => median(
                &pairs
                    .iter()
                    .map(|(t, n)| t.requests_per_sec / n.requests_per_sec)
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        }
    }
}

#[derive(Debug)]
enum WrkOutcome {
    Missing,
    Failed(String),
    Ran { report: WrkReport, cpu: Cpu },
}

/// Figures of the redirect part.
#[derive(Debug)]
pub(super) struct RedirectFigures {
    addr: SocketAddr,
    ids: usize,
    setup_secs: f64,
    sample: (String, String),
    threads: usize,
    connections: usize,
    seconds: f64,
    wrk: WrkOutcome,
    nginx: VersusNginx,
    pair_seconds: f64,
    open: LoadResult,
    open_cpu: Cpu,
    /// Server counters over both runs: clicks, bot hits, not found, event failures.
    counted: [f64; 4],
    /// Requests answered 302 over both runs (as the generators saw them).
    answered: u64,
    split: HitSplit,
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.2}"))
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

impl RedirectFigures {
    pub(super) fn report(&self) -> String {
        let mut s = format!(
            "\n4. redirect: GET /c/<id> on {} (tidemark serve child), {} real ids from {} \
             rendered over HTTP in {:.1} s, random id per request, browser User-Agent\n\
             sample: /c/{} → 302 Location {}\n",
            self.addr,
            self.ids,
            self.ids / 6,
            self.setup_secs,
            self.sample.0,
            self.sample.1
        );
        match &self.wrk {
            WrkOutcome::Missing => s.push_str(
                "wrk: NOT FOUND on PATH (Debian: apt-get install wrk) — closed-loop run skipped; \
                 open-loop figures only\n",
            ),
            WrkOutcome::Failed(e) => s.push_str(&format!("wrk: FAILED — {e}\n")),
            WrkOutcome::Ran { report: r, cpu } => s.push_str(&format!(
                "wrk -t{} -c{} -d{}s --latency (closed loop): {:.0} req/s, {} requests, latency \
                 p50 {:.2} ms, p75 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, mean {:.2} ms, max \
                 {:.2} ms; non-2xx/3xx {}; {}\n  {}\n",
                self.threads,
                self.connections,
                self.seconds,
                r.requests_per_sec,
                r.requests,
                r.percentiles_ms[0],
                r.percentiles_ms[1],
                r.percentiles_ms[2],
                r.percentiles_ms[3],
                r.mean_ms,
                r.max_ms,
                r.bad_status,
                r.socket_errors.as_deref().unwrap_or("no socket errors"),
                cpu
            )),
        }
        let l = &self.open;
        let q = |p: f64| {
            if l.latency.is_empty() {
                "-".to_string()
            } else {
                format!("{:.2}", ms(l.latency.value_at_quantile(p)))
            }
        };
        s.push_str(&format!(
            "open loop at {} req/s offered ({} s warmup + {} s measured, ≤{} in flight; latency \
             from the intended send time): achieved {:.0} req/s, p50 {} ms, p99 {} ms, p99.9 {} \
             ms, max {} ms, send lag p99 {:.2} ms, errors {} of {}{}\n  {}\n",
            l.cfg.rate,
            l.cfg.warmup.as_secs_f64(),
            l.cfg.duration.as_secs_f64(),
            l.cfg.max_in_flight,
            l.achieved(),
            q(0.5),
            q(0.99),
            q(0.999),
            q(1.0),
            ms(l.lag.value_at_quantile(0.99)),
            l.errors(),
            l.scheduled,
            match &l.first_failure {
                Some(Failure::Status(c, b)) => format!(" (first: HTTP {c} {b})"),
                Some(Failure::Transport(e)) => format!(" (first: {e})"),
                None => String::new(),
            },
            self.open_cpu
        ));
        let per_request = |cpu: &Cpu, rate: f64| {
            cpu.server
                .map_or_else(|| "-".into(), |c| format!("{:.0}", c / rate * 1e6))
        };
        if let WrkOutcome::Ran { report, cpu } = &self.wrk {
            s.push_str(&format!(
                "server CPU per redirect: {} µs under wrk, {} µs under the open loop; the hit \
                 itself (below) {} µs, the rest is HTTP and scheduling\n",
                per_request(cpu, report.requests_per_sec),
                per_request(&self.open_cpu, self.open.achieved()),
                self.split
                    .hit_cpu_us()
                    .map_or_else(|| "-".into(), |c| format!("{c:.0}"))
            ));
        }
        s.push_str(&self.nginx_report());
        s.push_str(&self.split.report());
        let [clicks, bots, not_found, failures] = self.counted;
        s.push_str(&format!(
            "server counted {clicks:.0} clicks, {bots:.0} bot hits, {not_found:.0} not found, \
             {failures:.0} event failures for {} redirects answered{}\n",
            self.answered,
            if clicks as u64 >= self.answered && failures == 0.0 && bots == 0.0 {
                " (every redirect was a click with its event stored)"
            } else {
                " (MISMATCH: not every redirect was counted as a click with its event)"
            }
        ));
        s
    }

    fn nginx_report(&self) -> String {
        match &self.nginx {
            VersusNginx::Missing(what) => format!("beside nginx: skipped, {what}\n"),
            VersusNginx::Failed(e) => format!("beside nginx: FAILED — {e}\n"),
            VersusNginx::Ran(pairs) => {
                let each: Vec<String> = pairs
                    .iter()
                    .map(|(t, n)| {
                        format!(
                            "{:.0}/{:.0} req/s (p99 {:.1}/{:.1} ms)",
                            t.requests_per_sec,
                            n.requests_per_sec,
                            t.p99(),
                            n.p99()
                        )
                    })
                    .collect();
                format!(
                    "beside nginx `return 302` (wrk -t{} -c{}, {} pairs of {:.0} s), \
                     redirector/nginx: {}; median share {}\n",
                    self.threads,
                    self.connections,
                    pairs.len(),
                    self.pair_seconds,
                    each.join(", "),
                    self.nginx
                        .share()
                        .map_or_else(|| "-".into(), |r| format!("{r:.2}×"))
                )
            }
        }
    }

    pub(super) fn bars(&self) -> Vec<Bar> {
        let name = format!("redirect ≥ {BAR_REDIRECTS:.0} req/s with p99 ≤ {BAR_P99_MS} ms");
        let wrk_bar = match &self.wrk {
            WrkOutcome::Ran { report: r, .. } => Bar {
                name: format!(
                    "{name} (wrk -t{} -c{}, closed loop)",
                    self.threads, self.connections
                ),
                figure: format!(
                    "{:.0} req/s, p50 {:.2} ms, p99 {:.2} ms, {} bad status",
                    r.requests_per_sec,
                    r.p50(),
                    r.p99(),
                    r.bad_status
                ),
                pass: Some(
                    r.requests_per_sec >= BAR_REDIRECTS
                        && r.p99() <= BAR_P99_MS
                        && r.bad_status == 0,
                ),
            },
            WrkOutcome::Missing => Bar {
                name: format!("{name} (wrk)"),
                figure: "wrk not installed".into(),
                pass: None,
            },
            WrkOutcome::Failed(e) => Bar {
                name: format!("{name} (wrk)"),
                figure: format!("wrk failed: {e}"),
                pass: Some(false),
            },
        };
        let l = &self.open;
        let p99 = (!l.latency.is_empty()).then(|| ms(l.latency.value_at_quantile(0.99)));
        let open_bar = Bar {
            name: format!("{name} (open loop at {} req/s offered)", l.cfg.rate),
            figure: format!(
                "achieved {:.0} req/s, p99 {} ms, {} errors of {}",
                l.achieved(),
                opt(p99),
                l.errors(),
                l.scheduled
            ),
            pass: (l.cfg.rate as f64 >= BAR_REDIRECTS).then(|| {
                l.sustained()
                    && l.achieved() >= 0.99 * BAR_REDIRECTS
                    && p99.is_some_and(|p| p <= BAR_P99_MS)
            }),
        };
        let share = self.nginx.share();
        let nginx_bar = Bar {
            name: format!(
                "redirect ≥ {BAR_NGINX_SHARE}× nginx's `return 302` req/s (wrk -c{}, same run), \
                 every click stored",
                self.connections
            ),
            figure: match (&self.nginx, share) {
                (VersusNginx::Ran(p), Some(r)) => {
                    format!("median {r:.2}× over {} pairs", p.len())
                }
                (VersusNginx::Missing(what), _) => (*what).to_owned(),
                (VersusNginx::Failed(e), _) => format!("failed: {e}"),
                _ => "-".into(),
            },
            pass: match &self.nginx {
                VersusNginx::Missing(_) => None,
                _ => Some(share.is_some_and(|r| r >= BAR_NGINX_SHARE)),
            },
        };
        vec![wrk_bar, open_bar, nginx_bar]
    }
}

pub(super) async fn post_json(
    client: &HttpClient,
    uri: &str,
    body: serde_json::Value,
) -> anyhow::Result<(StatusCode, serde_json::Value)> {
    let req = Request::post(uri)
        .header(AUTHORIZATION, BEARER)
        .header(CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(serde_json::to_vec(&body)?)))?;
    let (status, body) = call(client, req)
        .await
        .map_err(|f| anyhow::anyhow!("POST {uri}: {f:?}"))?;
    let v = serde_json::from_slice(&body).with_context(|| {
        format!(
            "POST {uri}: {status} {}",
            String::from_utf8_lossy(&body[..body.len().min(300)])
        )
    })?;
    Ok((status, v))
}

/// The `/c/` ids in a rendered message.
pub(super) fn click_ids(html: &str) -> Vec<String> {
    html.match_indices("/c/")
        .filter_map(|(at, _)| html.get(at + 3..at + 35))
        .filter(|id| {
            id.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        .map(str::to_owned)
        .collect()
}

/// Creates the mailing of [`TEMPLATE`]; returns its id.
pub(super) async fn create_mailing(
    client: &HttpClient,
    addr: SocketAddr,
) -> anyhow::Result<String> {
    let (status, v) = post_json(
        client,
        &format!("http://{addr}/v1/mailings"),
        json!({"subject": SUBJECT, "html": TEMPLATE, "from": "news@example.com"}),
    )
    .await?;
    ensure!(
        status == StatusCode::CREATED,
        "POST /v1/mailings: {status} {v}"
    );
    Ok(v["mailing_id"]
        .as_str()
        .context("no mailing_id in the answer")?
        .to_owned())
}

/// Creates the mailing and renders it; returns the ids.
pub(super) async fn setup(
    client: &HttpClient,
    addr: SocketAddr,
    recipients: usize,
) -> anyhow::Result<Vec<String>> {
    let mid = create_mailing(client, addr).await?;
    let mut ids = Vec::new();
    let mut done = 0;
    while done < recipients {
        let n = RENDER_CALL.min(recipients - done);
        let list: Vec<serde_json::Value> = (done..done + n)
            .map(|i| json!({"email": format!("reader{i}@example.com"), "fields": {"first_name": "Ada"}}))
            .collect();
        let (status, v) = post_json(
            client,
            &format!("http://{addr}/v1/mailings/{mid}/render"),
            json!({ "recipients": list }),
        )
        .await?;
        ensure!(status == StatusCode::OK, "render: {status} {v}");
        let messages = v["messages"].as_array().context("no messages")?;
        ensure!(
            messages.len() == n,
            "render: {} of {n} messages: {v}",
            messages.len()
        );
        for m in messages {
            let found = click_ids(m["html"].as_str().context("no html")?);
            ensure!(
                found.len() == 6,
                "{} /c/ ids in a message, not 6",
                found.len()
            );
            ids.extend(found);
        }
        done += n;
    }
    Ok(ids)
}

pub(super) fn click_request(uri: Uri) -> Request<Full<Bytes>> {
    Request::get(uri)
        .header(USER_AGENT, HeaderValue::from_static(BROWSER))
        .body(Full::default())
        .expect("a valid request")
}

async fn counters(client: &HttpClient, addr: SocketAddr) -> anyhow::Result<[f64; 4]> {
    let m = scrape_metrics(client, addr).await?;
    let get = |n: &str| m.get(n).copied().unwrap_or(0.0);
    Ok([
        get("tidemark_links_clicks_total"),
        get("tidemark_links_bot_hits_total"),
        get("tidemark_links_not_found_total"),
        get("tidemark_links_event_failures_total"),
    ])
}

/// The redirect part against a fresh `server_bin serve` with its data under `dir`.
pub(super) async fn bench_redirect(
    args: &LinksBenchArgs,
    server_bin: &Path,
    dir: &Path,
) -> anyhow::Result<RedirectFigures> {
    std::fs::create_dir_all(dir)?;
    eprintln!("redirect: in-process split of a hit …");
    let split = bench_hit_split(
        &dir.join("split"),
        TEMPLATE,
        BROWSER,
        args.wrk_connections,
        args.split_seconds,
    )
    .await?;
    let client = load::http_client(args.max_in_flight);
    let log = dir.join("server.log");
    let server = ServerProcess::start(
        server_bin,
        &client,
        &dir.join("data"),
        &log,
        &[("TIDEMARK_LINKS__TRACK_BASE", None)],
    )
    .await?;
    let (addr, pid) = (server.addr, server.pid());
    eprintln!(
        "redirect: server on {addr}; rendering for {} recipients …",
        args.recipients
    );
    let t = Instant::now();
    let ids = setup(&client, addr, args.recipients).await?;
    let setup_secs = t.elapsed().as_secs_f64();
    let uris: Arc<Vec<Uri>> = Arc::new(
        ids.iter()
            .map(|id| format!("http://{addr}/c/{id}").parse())
            .collect::<Result<_, _>>()?,
    );

    // One click by hand: the answer is a redirect to the original URL.
    let resp = client.request(click_request(uris[0].clone())).await?;
    let location = resp
        .headers()
        .get(LOCATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    if resp.status() != StatusCode::FOUND || !location.starts_with("https://shop.example.com/") {
        bail!("GET /c/{}: {} Location {location:?}", ids[0], resp.status());
    }
    let before = counters(&client, addr).await?;
    let seconds = args.redirect_seconds;

    // One script for every wrk run: the closed-loop run and the pairs beside nginx.
    let wrk_exe = wrk::find();
    let script = dir.join("ids.lua");
    if wrk_exe.is_some() {
        std::fs::write(&script, wrk::script(&ids, BROWSER))?;
    }
    let wrk = match &wrk_exe {
        None => WrkOutcome::Missing,
        Some(exe) => {
            eprintln!(
                "redirect: wrk -t{} -c{} -d{seconds}s …",
                args.wrk_threads, args.wrk_connections
            );
            let mark = CpuMark::now(pid);
            match wrk::run(
                exe,
                addr,
                &script,
                args.wrk_threads,
                args.wrk_connections,
                Duration::from_secs_f64(seconds),
            )
            .await
            {
                Ok((report, _)) => WrkOutcome::Ran {
                    report,
                    cpu: mark.since(pid),
                },
                Err(e) => WrkOutcome::Failed(format!("{e:#}")),
            }
        }
    };

    let nginx = match (&wrk_exe, nginx::find()) {
        (Some(wrk_exe), Some(nginx_exe)) => {
            let peer_dir = dir.join("nginx");
            versus_nginx(
                args, addr, wrk_exe, &script, &nginx_exe, &location, &peer_dir,
            )
            .await
        }
        _ => VersusNginx::Missing(nginx::INSTALL),
    };

    eprintln!("redirect: open loop at {} req/s …", args.rate);
    let cfg = OpenLoop {
        rate: args.rate,
        warmup: Duration::from_secs_f64(args.warmup),
        duration: Duration::from_secs_f64(seconds),
        max_in_flight: args.max_in_flight,
        drain: Duration::from_secs(10),
        timeline: false,
    };
    let mut rng = rand::rngs::SmallRng::seed_from_u64(0x11c5_0c11);
    let client_ref = &client;
    // Redirects answered, warmup included (the server counts those clicks too).
    let open_ok = std::cell::Cell::new(0u64);
    let open_ok_ref = &open_ok;
    let mark = CpuMark::now(pid);
    let open = load::run(cfg, |_| {
        let req = click_request(uris[rng.random_range(0..uris.len())].clone());
        async move {
            match call(client_ref, req).await {
                Ok((StatusCode::FOUND, _)) => {
                    open_ok_ref.set(open_ok_ref.get() + 1);
                    Ok(())
                }
                Ok((s, b)) => Err(Failure::Status(
                    s.as_u16(),
                    String::from_utf8_lossy(&b[..b.len().min(300)]).into_owned(),
                )),
                Err(f) => Err(f),
            }
        }
    })
    .await?;
    let open_cpu = mark.since(pid);
    // Let the last events land before reading the counters.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = counters(&client, addr).await?;
    drop(client);
    if let Err(e) = server.stop(Duration::from_secs(30)).await {
        eprintln!("redirect: {e:#}");
    }

    let answered = |r: &WrkReport| r.requests.saturating_sub(r.bad_status);
    let mut wrk_ok = match &wrk {
        WrkOutcome::Ran { report, .. } => answered(report),
        _ => 0,
    };
    if let VersusNginx::Ran(pairs) = &nginx {
        wrk_ok += pairs.iter().map(|(t, _)| answered(t)).sum::<u64>();
    }
    Ok(RedirectFigures {
        addr,
        ids: ids.len(),
        setup_secs,
        sample: (ids[0].clone(), location),
        threads: args.wrk_threads,
        connections: args.wrk_connections,
        seconds,
        wrk,
        nginx,
        pair_seconds: args.pair_seconds,
        open,
        open_cpu,
        counted: std::array::from_fn(|i| after[i] - before[i]),
        answered: wrk_ok + open_ok.get(),
        split,
    })
}

/// [`PAIRS`] pairs of runs of `wrk_exe` with `script` (see the module docs): the redirector at
/// `addr`, then `nginx_exe` answering `location` with its files under `nginx_dir`.
async fn versus_nginx(
    args: &LinksBenchArgs,
    addr: SocketAddr,
    wrk_exe: &Path,
    script: &Path,
    nginx_exe: &Path,
    location: &str,
    nginx_dir: &Path,
) -> VersusNginx {
    let run = async {
        let peer = Nginx::start(nginx_exe, nginx_dir, location)?;
        let seconds = Duration::from_secs_f64(args.pair_seconds);
        let mut pairs = Vec::with_capacity(PAIRS);
        for i in 0..PAIRS {
            eprintln!("redirect: pair {} of {PAIRS} beside nginx …", i + 1);
            let one = |to| {
                wrk::run(
                    wrk_exe,
                    to,
                    script,
                    args.wrk_threads,
                    args.wrk_connections,
                    seconds,
                )
            };
            let (ours, _) = one(addr).await?;
            let (theirs, _) = one(peer.addr).await?;
            pairs.push((ours, theirs));
        }
        anyhow::Ok(pairs)
    };
    match run.await {
        Ok(pairs) => VersusNginx::Ran(pairs),
        Err(e) => VersusNginx::Failed(format!("{e:#}")),
    }
}
