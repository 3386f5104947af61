//! Parts 1 and 2 of `tidemark-bench events`: ingest over loopback HTTP.
//!
//! For each format, a fresh `tidemark serve` child gets batches of `--batch` events from
//! `--connections` connections; each connection sends its next batch as soon as the last one
//! was answered (closed loop: this measures how much the server takes, not a latency at a set
//! rate). The bodies are built before the run and sent in turn, so the generator only moves
//! bytes. Batches answered inside the measured window count; latency is send → answer read, of
//! the batches sent inside it. After a graceful stop the raw tier's catalog is read back: every
//! acknowledged event must be there.
//!
//! Before the server starts, the same bodies are decoded in process on one thread, to show how
//! much of a core the parsing and schema checks alone take per event.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE};
use hyper::{Request, StatusCode, Uri};
use serde_json::json;
use tidemark_core::clock::{Clock, SystemClock};
use tidemark_core::timefmt::rfc3339_ms;
use tidemark_events::ingest::{decode_json, decode_line_protocol};
use tidemark_events::lineproto::Precision;
use tidemark_events::schema::Schema;
use tidemark_events::{Event, RawStore, SqliteRaw};

use super::super::load::{self, HttpClient, call};
use super::super::process::{Cpu, CpuMark, ServerProcess};
use super::{BAR_BATCH, BAR_INGEST, Bar, EventsBenchArgs, Part, Population, opt, quantile_ms};

/// Sessions the ingested events are drawn from.
pub(super) const SESSIONS: u64 = 50_000;
/// Event times of a body lie within this many ms before the moment it was built.
const SPREAD_MS: u64 = 60_000;

/// The wire format of an ingest run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Format {
    /// A JSON array to `POST /v1/events`.
    Json,
    /// InfluxDB line protocol to `POST /api/v2/write`.
    LineProtocol,
}

impl Format {
    pub(super) fn part(self) -> Part {
        match self {
            Format::Json => Part::Json,
            Format::LineProtocol => Part::LineProtocol,
        }
    }

    /// Name of its data dir.
    pub(super) fn slug(self) -> &'static str {
        match self {
            Format::Json => "ingest-json",
            Format::LineProtocol => "ingest-line-protocol",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Format::Json => "JSON",
            Format::LineProtocol => "line protocol",
        }
    }

    pub(super) fn path(self) -> &'static str {
        match self {
            Format::Json => "/v1/events",
            Format::LineProtocol => "/api/v2/write?org=o&bucket=b&precision=ms",
        }
    }

    /// What the server answers to an accepted batch.
    pub(super) fn accepted(self) -> StatusCode {
        match self {
            Format::Json => StatusCode::ACCEPTED,
            Format::LineProtocol => StatusCode::NO_CONTENT,
        }
    }

    pub(super) fn request(self, uri: Uri, body: Bytes) -> Request<Full<Bytes>> {
        let (auth, content_type) = match self {
            // The default `demo` tenant's key; InfluxDB clients send it as `Token`.
            Format::Json => ("Bearer dev-key", "application/json"),
            Format::LineProtocol => ("Token dev-key", "text/plain; charset=utf-8"),
        };
        Request::post(uri)
            .header(AUTHORIZATION, auth)
            .header(CONTENT_TYPE, content_type)
            .body(Full::new(body))
            .expect("a valid request")
    }

    /// The request body for `events`.
    fn body(self, events: &[Event]) -> Vec<u8> {
        match self {
            Format::Json => {
                let items: Vec<serde_json::Value> = events
                    .iter()
                    .map(|e| {
                        json!({
                            "time": rfc3339_ms(e.time_ms),
                            "kind": e.kind,
                            "listing_id": e.listing_id,
                            "user_id": e.user_id,
                            "device_id": e.device_id,
                            "session_id": e.session_id,
                            "page_url": e.page_url,
                        })
                    })
                    .collect();
                serde_json::to_vec(&items).expect("JSON of plain values")
            }
            // As the seed's writer sends it: identifiers as string fields, `count` an integer,
            // millisecond timestamps. The generated values need no escaping.
            Format::LineProtocol => events
                .iter()
                .map(|e| {
                    format!(
                        "listing_event,event={} listing_id=\"{}\",user_id=\"{}\",device_id=\"{}\",\
                         session_id=\"{}\",page_url=\"{}\",count=1i {}\n",
                        e.kind,
                        e.listing_id.unwrap_or_default(),
                        e.user_id.as_deref().unwrap_or_default(),
                        e.device_id.as_deref().unwrap_or_default(),
                        e.session_id.as_deref().unwrap_or_default(),
                        e.page_url.as_deref().unwrap_or_default(),
                        e.time_ms
                    )
                })
                .collect::<String>()
                .into_bytes(),
        }
    }

    /// Decodes `body` as the server does (the schema checks included); returns the events.
    fn decode(self, schema: &Schema, body: &[u8]) -> anyhow::Result<Vec<Event>> {
        let text = std::str::from_utf8(body)?;
        Ok(match self {
            Format::Json => decode_json(schema, text, usize::MAX)?,
            Format::LineProtocol => {
                decode_line_protocol(schema, text, Precision::Ms, 0, usize::MAX)?
            }
        })
    }
}

/// `count` bodies of `batch` events each, timed within [`SPREAD_MS`] before `now_ms`.
pub(super) fn bodies(
    format: Format,
    population: &Population,
    batch: usize,
    count: usize,
    now_ms: i64,
) -> Vec<Bytes> {
    (0..count)
        .map(|b| {
            let events: Vec<Event> = (0..batch)
                .map(|j| {
                    let i = (b * batch + j) as u64;
                    let age = super::mix(!i) % SPREAD_MS;
                    population.event(i, now_ms - age as i64)
                })
                .collect();
            Bytes::from(format.body(&events))
        })
        .collect()
}

/// What one connection saw.
#[derive(Debug, Default)]
struct Tally {
    /// Batches acknowledged (warmup included).
    accepted: u64,
    /// Batches acknowledged inside the measured window.
    ok_in_window: u64,
    /// Send → answer of the acknowledged batches sent inside the window.
    latencies: Vec<Duration>,
    failures: u64,
    first_failure: Option<String>,
}

/// One connection's closed loop: batch `first`, `first + step`, … until the window ends.
async fn connection(
    client: &HttpClient,
    uri: &Uri,
    format: Format,
    bodies: &[Bytes],
    (first, step): (usize, usize),
    window: (Instant, Instant),
) -> Tally {
    let mut t = Tally::default();
    let mut i = first;
    loop {
        let sent = Instant::now();
        if sent >= window.1 {
            break;
        }
        let req = format.request(uri.clone(), bodies[i % bodies.len()].clone());
        let outcome = call(client, req).await;
        let done = Instant::now();
        let failure = match outcome {
            Ok((status, _)) if status == format.accepted() => None,
            Ok((status, body)) => Some(format!(
                "HTTP {status} {}",
                String::from_utf8_lossy(&body[..body.len().min(300)])
            )),
            Err(f) => Some(format!("{f:?}")),
        };
        match failure {
            None => {
                t.accepted += 1;
                if done >= window.0 && done <= window.1 {
                    t.ok_in_window += 1;
                }
                if sent >= window.0 {
                    t.latencies.push(done - sent);
                }
            }
            Some(f) => {
                t.failures += 1;
                t.first_failure.get_or_insert(f);
                // Do not spin on a server that refuses everything.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        i += step;
    }
    t
}

/// Figures of one ingest run.
#[derive(Debug)]
pub(super) struct IngestFigures {
    format: Format,
    addr: SocketAddr,
    batch: usize,
    connections: usize,
    bodies: usize,
    /// Mean bytes per body.
    body_bytes: f64,
    warmup: f64,
    window: f64,
    /// In-process decode on one thread, µs per event.
    decode_us: f64,
    ok_in_window: u64,
    /// Sorted.
    latencies: Vec<Duration>,
    /// Events acknowledged over the whole run (warmup included).
    acknowledged: u64,
    failures: u64,
    first_failure: Option<String>,
    cpu: Cpu,
    /// Events in the raw tier's catalog after the server stopped.
    stored: u64,
    stop_error: Option<String>,
}

impl IngestFigures {
    fn events_per_sec(&self) -> f64 {
        self.ok_in_window as f64 * self.batch as f64 / self.window
    }

    fn batches_per_sec(&self) -> f64 {
        self.ok_in_window as f64 / self.window
    }

    fn all_stored(&self) -> bool {
        self.stored == self.acknowledged
    }

    pub(super) fn report(&self, n: usize) -> String {
        let q = |p: f64| opt(quantile_ms(&self.latencies, p), 1);
        let per_event_us =
            |cores: Option<f64>| opt(cores.map(|c| c / self.events_per_sec().max(1.0) * 1e6), 2);
        let mut s = format!(
            "\n{n}. ingest, {} over loopback HTTP: POST {} on {} (tidemark serve child), {} \
             events per batch ({:.0} KB), {} pre-built bodies, {} connections in a closed loop, \
             {} s warmup + {} s measured\n\
             {:.0} events/s, {:.1} batches/s; batch latency (send → answer) p50 {} ms, p99 {} \
             ms, max {} ms; {} failed{}\n\
             {}; server CPU per event {} µs\n\
             decode + schema checks alone (in process, one thread): {:.2} µs/event ({:.0} \
             events/s per core)\n\
             raw tier after a graceful stop: {} events stored for {} acknowledged{}{}\n",
            self.format.title(),
            self.format.path(),
            self.addr,
            self.batch,
            self.body_bytes / 1024.0,
            self.bodies,
            self.connections,
            self.warmup,
            self.window,
            self.events_per_sec(),
            self.batches_per_sec(),
            q(0.5),
            q(0.99),
            q(1.0),
            self.failures,
            self.first_failure
                .as_deref()
                .map_or_else(String::new, |f| format!(" (first: {f})")),
            self.cpu,
            per_event_us(self.cpu.server),
            self.decode_us,
            1e6 / self.decode_us.max(1e-9),
            self.stored,
            self.acknowledged,
            if self.all_stored() {
                " (all)"
            } else {
                " (MISMATCH)"
            },
            self.stop_error
                .as_deref()
                .map_or_else(String::new, |e| format!("; stop: {e}")),
        );
        if self.latencies.is_empty() {
            s.push_str("no batch was acknowledged in the window\n");
        }
        s
    }

    pub(super) fn bar(&self) -> Bar {
        Bar {
            name: format!(
                "ingest {} ≥ {BAR_INGEST:.0} events/s (batches of {BAR_BATCH}, loopback HTTP)",
                self.format.title()
            ),
            figure: format!(
                "{:.0} events/s with {} connections, batch p99 {} ms, {} failed, {} of {} \
                 acknowledged events stored",
                self.events_per_sec(),
                self.connections,
                opt(quantile_ms(&self.latencies, 0.99), 1),
                self.failures,
                self.stored,
                self.acknowledged
            ),
            pass: (self.batch == BAR_BATCH).then(|| {
                self.events_per_sec() >= BAR_INGEST && self.failures == 0 && self.all_stored()
            }),
        }
    }
}

/// Decodes `bodies` in turn for about a second; µs per event.
fn decode_cost(format: Format, bodies: &[Bytes], batch: usize) -> anyhow::Result<f64> {
    let schema = Schema::default();
    let start = Instant::now();
    let mut events = 0u64;
    for body in bodies.iter().cycle() {
        let decoded = format.decode(&schema, body)?;
        anyhow::ensure!(decoded.len() == batch, "{} events decoded", decoded.len());
        events += batch as u64;
        if start.elapsed() >= Duration::from_secs(1) {
            break;
        }
    }
    Ok(start.elapsed().as_secs_f64() * 1e6 / events as f64)
}

/// Runs one format against a fresh `server_bin serve` with its data under `dir`.
pub(super) async fn bench_ingest(
    args: &EventsBenchArgs,
    server_bin: &Path,
    format: Format,
    dir: &Path,
) -> anyhow::Result<IngestFigures> {
    std::fs::create_dir_all(dir)?;
    let population = Population {
        listings: args.ingest_listings,
        sessions: SESSIONS,
        bot_every: 0,
    };
    eprintln!(
        "ingest {}: building {} bodies of {} events …",
        format.title(),
        args.bodies,
        args.batch
    );
    let bodies = bodies(
        format,
        &population,
        args.batch,
        args.bodies,
        SystemClock.now_ms(),
    );
    let body_bytes = bodies.iter().map(Bytes::len).sum::<usize>() as f64 / bodies.len() as f64;
    let decode_us = decode_cost(format, &bodies, args.batch)?;

    let client = load::http_client(args.connections);
    let data = dir.join("data");
    let server =
        ServerProcess::start(server_bin, &client, &data, &dir.join("server.log"), &[]).await?;
    let (addr, pid) = (server.addr, server.pid());
    let uri: Uri = format!("http://{addr}{}", format.path()).parse()?;
    eprintln!(
        "ingest {}: server on {addr}; {} connections for {} s + {} s …",
        format.title(),
        args.connections,
        args.warmup,
        args.ingest_seconds
    );
    let start = Instant::now() + Duration::from_millis(5);
    let window_start = start + Duration::from_secs_f64(args.warmup);
    let window = (
        window_start,
        window_start + Duration::from_secs_f64(args.ingest_seconds),
    );
    let mut mark = None;
    let tallies = {
        let runs = futures::future::join_all((0..args.connections).map(|c| {
            connection(
                &client,
                &uri,
                format,
                &bodies,
                (c, args.connections),
                window,
            )
        }));
        // The CPU window starts with the measured window.
        let marker = async {
            tokio::time::sleep_until(tokio::time::Instant::from_std(window.0)).await;
            mark = Some(CpuMark::now(pid));
        };
        let (tallies, ()) = tokio::join!(runs, marker);
        tallies
    };
    let cpu = mark.context("the measured window never began")?.since(pid);
    drop(client);
    let stop_error = server
        .stop(Duration::from_secs(60))
        .await
        .err()
        .map(|e| format!("{e:#}"));

    let raw = SqliteRaw::open(&data.join("events").join("raw.db"))?;
    let stored = raw.days().await?.iter().map(|d| d.events).sum();
    let mut fig = IngestFigures {
        format,
        addr,
        batch: args.batch,
        connections: args.connections,
        bodies: bodies.len(),
        body_bytes,
        warmup: args.warmup,
        window: args.ingest_seconds,
        decode_us,
        ok_in_window: 0,
        latencies: Vec::new(),
        acknowledged: 0,
        failures: 0,
        first_failure: None,
        cpu,
        stored,
        stop_error,
    };
    for t in tallies {
        fig.ok_in_window += t.ok_in_window;
        fig.latencies.extend(t.latencies);
        fig.acknowledged += t.accepted * args.batch as u64;
        fig.failures += t.failures;
        if fig.first_failure.is_none() {
            fig.first_failure = t.first_failure;
        }
    }
    fig.latencies.sort();
    Ok(fig)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_formats_carry_the_same_events() {
        let p = Population {
            listings: 900,
            sessions: SESSIONS,
            bot_every: 0,
        };
        let now = 1_795_860_000_000;
        let schema = Schema::default();
        let json = bodies(Format::Json, &p, 50, 2, now);
        let lp = bodies(Format::LineProtocol, &p, 50, 2, now);
        for (j, l) in json.iter().zip(&lp) {
            let from_json = Format::Json.decode(&schema, j).unwrap();
            let from_lp = Format::LineProtocol.decode(&schema, l).unwrap();
            assert_eq!(from_json.len(), 50);
            assert_eq!(from_json, from_lp);
            assert!(
                from_json
                    .iter()
                    .all(|e| e.time_ms <= now && e.time_ms > now - SPREAD_MS as i64)
            );
        }
        assert_ne!(json[0], json[1]);
    }
}
