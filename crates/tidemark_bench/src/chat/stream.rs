//! `tidemark-bench chat --stream`: live delivery under load, on the embedded engine. For each
//! `--clients` count N, one server with N/2 two-member conversations and a stream client per
//! member (users `b<k>`, `s<k>`), and `--pairs` interleaved pairs of runs at each `--rates`
//! rate: A without any stream open, B with all N open. Reported:
//! - the SEND p99 of A and of B and their ratio per pair, and the median ratio (bar: ≤ 1.25×);
//! - commit-to-delivery (the message's `committed_at` → the event read by the client; one
//!   clock, ms resolution) p50 and p99 over the B runs, and the deliveries seen against the
//!   two expected per SEND;
//! - the server's resident memory per open stream (RSS with all N open, idle, minus before).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Empty};
use hyper::Request;
use hyper::body::Bytes;
use hyper::header::AUTHORIZATION;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rand::{Rng, SeedableRng};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::{
    BEARER, ChatBenchArgs, create_conversations, created, open_loop, scrape, send_request,
};
use crate::load::{self, LoadResult};
use crate::median;
use crate::process::ServerProcess;

type SseClient = Client<HttpConnector, Empty<Bytes>>;

/// Streams opened at once while connecting.
const CONNECT_CONCURRENCY: usize = 200;

/// Delivery latencies of the B runs, µs, and how many deliveries were seen.
#[derive(Debug)]
struct Deliveries {
    recording: AtomicBool,
    seen: AtomicU64,
    latency: Mutex<Histogram<u64>>,
}

/// Runs the stream benchmark (see the module docs) and prints its table.
pub(super) async fn run(
    args: &ChatBenchArgs,
    server_bin: &std::path::Path,
    root: &std::path::Path,
    body_tail: &[u8],
) -> anyhow::Result<()> {
    if args.clients.iter().any(|&n| n < 2) || args.pairs == 0 {
        bail!("--clients must each be at least 2, --pairs at least 1");
    }
    let mut out = String::from(
        "clients | rate | pair | SEND p99 alone ms | SEND p99 streaming ms | ratio | delivery p50 ms | delivery p99 ms | delivered/expected\n",
    );
    let mut summary = Vec::new();
    for &clients in &args.clients {
        let conversations = clients / 2;
        let client = load::http_client(args.max_in_flight);
        let data_dir = root.join(format!("stream-{clients}"));
        let log = root.join(format!("stream-{clients}-server.log"));
        let (max, streams) = ((clients + 1024).to_string(), (clients + 16).to_string());
        let env = [
            ("TIDEMARK_MAX_CONNECTIONS", Some(max.as_str())),
            (
                "TIDEMARK_CHAT__STREAM_MAX_CONNECTIONS",
                Some(streams.as_str()),
            ),
        ];
        let server = ServerProcess::start(server_bin, &client, &data_dir, &log, &env).await?;
        let uris = create_conversations(&client, server.addr, conversations).await?;
        let pid = server.pid().context("the server's pid")?;
        for &rate in &args.rates {
            let mut ratios = Vec::new();
            let deliveries = Arc::new(Deliveries {
                recording: AtomicBool::new(false),
                seen: AtomicU64::new(0),
                latency: Mutex::new(Histogram::new_with_bounds(1, 60_000_000, 3)?),
            });
            let mut per_client_bytes = None;
            let mut sent_b = 0;
            for pair in 1..=args.pairs {
                let alone = measure(args, &client, &uris, rate, body_tail, pair, 'a').await?;
                let rss_before = rss_bytes(pid);
                let mut streams = connect(server.addr, clients, Arc::clone(&deliveries)).await?;
                tokio::time::sleep(Duration::from_millis(500)).await;
                if per_client_bytes.is_none() {
                    per_client_bytes =
                        Some(rss_bytes(pid).saturating_sub(rss_before) as f64 / clients as f64);
                }
                let before = scrape(&client, server.addr).await?.sends;
                deliveries.recording.store(true, Ordering::SeqCst);
                let with = measure(args, &client, &uris, rate, body_tail, pair, 'b').await?;
                // Let the last deliveries arrive before the count is read.
                tokio::time::sleep(Duration::from_millis(500)).await;
                deliveries.recording.store(false, Ordering::SeqCst);
                sent_b += (scrape(&client, server.addr).await?.sends - before) as u64;
                streams.abort_all();
                while streams.join_next().await.is_some() {}
                tokio::time::sleep(Duration::from_millis(500)).await;
                let (a, b) = (p99_ms(&alone), p99_ms(&with));
                let ratio = b / a;
                ratios.push(ratio);
                out.push_str(&format!(
                    "{clients} | {rate} | {pair} | {a:.2} | {b:.2} | {ratio:.2} | | |\n"
                ));
                eprint!("{}", out.lines().last().unwrap_or_default());
                eprintln!();
            }
            let hist = deliveries
                .latency
                .lock()
                .map_err(|_| anyhow::anyhow!("poisoned"))?;
            let seen = deliveries.seen.load(Ordering::SeqCst);
            let line = format!(
                "{clients} | {rate} | median | | | {:.2} | {:.1} | {:.1} | {seen}/{} |\n",
                median(&ratios).unwrap_or(f64::NAN),
                hist.value_at_quantile(0.5) as f64 / 1000.0,
                hist.value_at_quantile(0.99) as f64 / 1000.0,
                2 * sent_b,
            );
            out.push_str(&line);
            summary.push(format!(
                "{clients} streams at {rate} msg/s: SEND p99 ratio {:.2}× (median of {}), delivery p50 {:.1} ms / p99 {:.1} ms, server memory {:.1} KiB per stream",
                median(&ratios).unwrap_or(f64::NAN),
                args.pairs,
                hist.value_at_quantile(0.5) as f64 / 1000.0,
                hist.value_at_quantile(0.99) as f64 / 1000.0,
                per_client_bytes.unwrap_or(0.0) / 1024.0,
            ));
        }
        drop(client);
        let _ = server.stop(Duration::from_secs(30)).await;
        let _ = std::fs::remove_dir_all(&data_dir);
    }
    println!("{out}");
    for s in summary {
        println!("{s}");
    }
    Ok(())
}

/// One run of SENDs at `rate` over the conversations, uniformly.
async fn measure(
    args: &ChatBenchArgs,
    client: &load::HttpClient,
    uris: &[hyper::Uri],
    rate: u64,
    body_tail: &[u8],
    pair: usize,
    tag: char,
) -> anyhow::Result<LoadResult> {
    let cfg = open_loop(args, rate, false);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(0x5e55 ^ pair as u64 ^ (tag as u64) << 32);
    let result = load::run(cfg, |i| {
        let (k, b_side) = (rng.random_range(0..uris.len()), rng.random::<bool>());
        let req = send_request(uris[k].clone(), (tag, pair, i), (b_side, k), body_tail);
        created(client, req)
    })
    .await?;
    Ok(result)
}

fn p99_ms(l: &LoadResult) -> f64 {
    l.latency.value_at_quantile(0.99) as f64 / 1000.0
}

/// Opens a stream for each of the `clients` users (`b<k>` and `s<k>`), from now, and returns
/// once every one answered 200; each then reads its events into `deliveries`.
async fn connect(
    addr: std::net::SocketAddr,
    clients: usize,
    deliveries: Arc<Deliveries>,
) -> anyhow::Result<JoinSet<()>> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let sse: SseClient = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build(connector);
    let gate = Arc::new(Semaphore::new(CONNECT_CONCURRENCY));
    let mut tasks = JoinSet::new();
    let (ok_tx, mut ok_rx) = tokio::sync::mpsc::unbounded_channel::<Result<(), String>>();
    for i in 0..clients {
        let user = if i % 2 == 0 {
            format!("b{}", i / 2)
        } else {
            format!("s{}", i / 2)
        };
        let (sse, gate, deliveries, ok_tx) = (
            sse.clone(),
            Arc::clone(&gate),
            Arc::clone(&deliveries),
            ok_tx.clone(),
        );
        tasks.spawn(async move {
            let permit = gate.acquire_owned().await;
            let req = Request::get(format!("http://{addr}/v1/users/{user}/stream"))
                .header(AUTHORIZATION, BEARER)
                .body(Empty::new())
                .expect("a valid request");
            let resp = match sse.request(req).await {
                Ok(r) if r.status() == 200 => r,
                Ok(r) => {
                    let _ = ok_tx.send(Err(format!("{user}: {}", r.status())));
                    return;
                }
                Err(e) => {
                    let _ = ok_tx.send(Err(format!("{user}: {e}")));
                    return;
                }
            };
            drop(permit);
            let _ = ok_tx.send(Ok(()));
            read_events(resp.into_body(), &deliveries).await;
        });
    }
    drop(ok_tx);
    let deadline = Instant::now() + Duration::from_secs(120);
    for _ in 0..clients {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, ok_rx.recv()).await {
            Ok(Some(Ok(()))) => {}
            Ok(Some(Err(e))) => bail!("a stream did not open: {e}"),
            _ => bail!("the streams did not all open within 120 s"),
        }
    }
    Ok(tasks)
}

/// Reads one stream's events; each message's commit-to-delivery time goes to `deliveries`
/// while it records.
async fn read_events(mut body: hyper::body::Incoming, deliveries: &Deliveries) {
    let mut buf: Vec<u8> = Vec::new();
    while let Some(Ok(frame)) = body.frame().await {
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let now_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64);
        buf.extend_from_slice(&data);
        while let Some(end) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            if !line.starts_with(b"data: {\"conversation_id\"") {
                continue;
            }
            if !deliveries.recording.load(Ordering::Relaxed) {
                continue;
            }
            deliveries.seen.fetch_add(1, Ordering::Relaxed);
            if let Some(ms) = committed_at_ms(&line)
                && let Ok(mut h) = deliveries.latency.lock()
            {
                let _ = h.record((now_us - ms * 1000).max(1) as u64);
            }
        }
    }
}

/// The `committed_at` of a message event's data line, Unix ms.
fn committed_at_ms(line: &[u8]) -> Option<i64> {
    const KEY: &[u8] = b"\"committed_at\":\"";
    let at = line.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let end = line[at..].iter().position(|&b| b == b'"')? + at;
    let text = std::str::from_utf8(&line[at..end]).ok()?;
    let t =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    Some((t.unix_timestamp_nanos() / 1_000_000) as i64)
}

/// The resident memory of process `pid`, bytes (0 when unknown).
fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_commit_time_is_read_from_a_message_line() {
        let line = br#"data: {"conversation_id":"c","conversation_seq":1,"committed_at":"2026-12-06T09:06:15.240Z"}"#;
        assert_eq!(committed_at_ms(line), Some(1_796_547_975_240));
        assert_eq!(committed_at_ms(b"data: {}"), None);
    }
}
