//! The raw tier on InfluxDB 1.x (`events.raw = "influxdb://host:port/database"`; DESIGN.md
//! part C, seed 002's production shape), through the v1 HTTP API: `/write` with line protocol,
//! `/query` with InfluxQL.
//!
//! **Schema** (seed 002, DESIGN principle 5): one measurement `listing_event`, one tag `event`
//! (the kind: a closed, declared set), so the series cardinality is the number of kinds.
//! Identifiers are fields: `listing_id` (integer), `user_id`, `device_id`, `session_id`,
//! `page_url` (strings), `count` (integer), `is_bot` (boolean, always written so the
//! dashboard can filter on it), `seq` (integer, see below) and `fields` (the other declared
//! fields as one JSON string, so their types never conflict between points).
//!
//! **Equal timestamps never merge.** InfluxDB keeps one point per series and timestamp. Every
//! event of a day gets a sequence number from the day catalog, and its point's timestamp is
//! `time_ms × 1,000,000 + seq mod 1,000,000` ns: events of the same kind and millisecond get
//! different nanoseconds unless their arrivals are exactly a multiple of a million events of
//! that day apart. Should that ever happen, the rollup notices: it reads fewer events than the
//! catalog counts and refuses the day rather than under-count it.
//!
//! **Start**: the database and the retention policy `tidemark_raw` (default 7 days, `?retention=`
//! in the URL; shard groups of one day, so a day is one shard, or of one hour under two days of
//! retention, [`InfluxTarget::shard_ms`]) are created or altered.
//!
//! **Append**: (1) in the catalog, refuse the batch if a day of it was dropped, else count its
//! events as pending and reserve their sequence numbers; (2) `POST /write` in requests of at
//! most [`WRITE_LINES`] lines, each retried on connection errors, timeouts and 5xx (a retry
//! rewrites the same points: idempotent); (3) count the events, or, on failure, release them
//! and answer the error (ingest answers 503: nothing acknowledged that is not stored).
//!
//! **Reads** page through one day in time order with `time > <last ns>` as the cursor, at most
//! 10,000 points per request, until a request comes back empty (so a server whose
//! `max-row-limit` is lower still gives every point).
//!
//! **Drop**: the catalog marks the day dropped only if rolled up and archived up to its last
//! arrival with no append pending; then the shards that lie within the day are dropped whole
//! (`DROP SHARD`), and its points deleted by time range where no such shard covers them. Shard
//! groups are aligned to UTC, so a UTC day is one shard, while a local day of
//! `events.time_zone` spans two and is deleted by range. If that fails, the day's points are
//! unreachable anyway (a dropped day reads empty) and InfluxDB's retention removes them.
//!
//! **Why a day catalog beside InfluxDB** ([`DayCatalog`]): the drop decision must be atomic
//! with appends (a day may go only if nothing arrived since its rollup and archive), and
//! InfluxDB has neither transactions nor conditional updates. The catalog is small (a row per
//! day), written twice per batch. For one node it is a local SQLite file
//! (`<data_dir>/events/influx-catalog.db`, group-committed); with a MariaDB summary tier it is
//! a table there, which every node shares: any node ingests, the sequence numbers of a day are
//! unique across nodes, and the lifecycle sees every day whichever node took its events.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use reqwest_object_store as reqwest;
use serde_json::{Map, Value};
use tidemark_core::day::Day;
use tidemark_core::store::{ErrorKind, StoreError};

use super::catalog::{DayCatalog, Mark, SqliteCatalog};
use super::{DayState, MinuteCount, RawError, RawStore};
use crate::calendar::Calendar;
use crate::model::Event;

/// The measurement (seed 002's name).
pub const MEASUREMENT: &str = "listing_event";
/// The retention policy Tidemark creates and writes to.
pub const RETENTION_POLICY: &str = "tidemark_raw";
/// Lines per `/write` request.
pub const WRITE_LINES: usize = 5_000;
/// Attempts per request (the first and three retries: after 50 ms, 200 ms, 800 ms).
const ATTEMPTS: u32 = 4;
/// Points per read request: InfluxDB's usual `max-row-limit`. A server configured lower
/// answers fewer rows; reads then simply ask again from the last timestamp.
const READ_PAGE: usize = 10_000;
const NS_PER_MS: i64 = 1_000_000;
const BACKEND: &str = "influxdb";

fn rejected(message: impl Into<String>) -> StoreError {
    StoreError::rejected(BACKEND, message.into())
}

fn unavailable(message: impl Into<String>) -> StoreError {
    StoreError::unavailable(BACKEND, message.into())
}

/// The kind of InfluxDB's last 5xx answer (or connection error) after every attempt: a full
/// disk (`no space left on device`, which InfluxDB passes on from its storage engine) is
/// [`ErrorKind::Full`], anything else [`ErrorKind::Unavailable`].
fn server_error_kind(answer: &str) -> ErrorKind {
    if answer
        .to_ascii_lowercase()
        .contains("no space left on device")
    {
        ErrorKind::Full
    } else {
        ErrorKind::Unavailable
    }
}

/// Where and how: parsed from `influxdb://host:port/database[?retention=7d]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfluxTarget {
    /// `http://host:port`.
    pub base: String,
    /// The database (`[A-Za-z0-9_]+`).
    pub database: String,
    /// Duration of the retention policy (default 7 days; at least 1 hour, InfluxDB's minimum).
    pub retention: Duration,
}

impl InfluxTarget {
    /// The shard group duration of the retention policy (ms), by InfluxDB's own rule for a
    /// policy's default: one hour under two days of retention (InfluxDB refuses a policy
    /// shorter than its shards), else one day, so that a day's points sit in whole shards.
    pub fn shard_ms(&self) -> i64 {
        if self.retention < Duration::from_secs(2 * 86_400) {
            3_600_000
        } else {
            86_400_000
        }
    }

    /// Parses a raw-tier URL. Errors (a [`StoreError`] of kind [`ErrorKind::Rejected`]) name
    /// what is wrong.
    pub fn parse(url: &str) -> Result<Self, StoreError> {
        let u = url::Url::parse(url).map_err(|e| rejected(format!("bad URL {url:?}: {e}")))?;
        if u.scheme() != "influxdb" {
            return Err(rejected(format!(
                "bad URL {url:?}: the scheme must be influxdb://"
            )));
        }
        let host = u
            .host_str()
            .ok_or_else(|| rejected(format!("bad URL {url:?}: no host")))?;
        let database = u.path().trim_start_matches('/').to_owned();
        if database.is_empty()
            || !database
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(rejected(format!(
                "bad URL {url:?}: the path must name a database ([A-Za-z0-9_]+)"
            )));
        }
        let mut retention = Duration::from_secs(7 * 24 * 3600);
        for (k, v) in u.query_pairs() {
            match &*k {
                "retention" => {
                    retention = humantime::parse_duration(&v)
                        .map_err(|e| rejected(format!("bad URL {url:?}: retention {v:?}: {e}")))?;
                    if retention < Duration::from_secs(3600) {
                        return Err(rejected(format!(
                            "bad URL {url:?}: retention must be at least 1h"
                        )));
                    }
                }
                other => {
                    return Err(rejected(format!(
                        "bad URL {url:?}: unknown parameter {other:?} (known: retention)"
                    )));
                }
            }
        }
        Ok(Self {
            base: format!("http://{host}:{}", u.port().unwrap_or(8086)),
            database,
            retention,
        })
    }
}

/// The raw tier on InfluxDB (see the module docs).
#[derive(Debug)]
pub struct InfluxRaw {
    http: reqwest::Client,
    target: InfluxTarget,
    catalog: Arc<dyn DayCatalog>,
    calendar: Calendar,
}

/// The machine's clock (Unix ms): InfluxDB's retention runs on it, whatever clock the caller
/// injects for arrivals.
fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The nanosecond timestamp of an event with day sequence number `seq`.
fn point_ns(time_ms: i64, seq: i64) -> i64 {
    time_ms
        .saturating_mul(NS_PER_MS)
        .saturating_add(seq.rem_euclid(NS_PER_MS))
}

fn escape_tag(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        if matches!(c, ',' | '=' | ' ' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn quote_field(v: &str) -> String {
    let mut out = String::with_capacity(v.len() + 2);
    out.push('"');
    for c in v.chars() {
        if matches!(c, '"' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// One line of line protocol for `e` (see the module docs for the schema).
fn line(e: &Event, seq: i64) -> String {
    let mut f = vec![
        format!("seq={seq}i"),
        format!("count={}i", e.count),
        format!("is_bot={}", e.is_bot()),
    ];
    if let Some(l) = e.listing_id {
        f.push(format!("listing_id={l}i"));
    }
    for (name, v) in [
        ("user_id", &e.user_id),
        ("device_id", &e.device_id),
        ("session_id", &e.session_id),
        ("page_url", &e.page_url),
    ] {
        if let Some(v) = v {
            f.push(format!("{name}={}", quote_field(v)));
        }
    }
    if !e.fields.is_empty() {
        f.push(format!(
            "fields={}",
            quote_field(&Value::Object(e.fields.clone()).to_string())
        ));
    }
    format!(
        "{MEASUREMENT},event={} {} {}",
        escape_tag(&e.kind),
        f.join(","),
        point_ns(e.time_ms, seq)
    )
}

/// One series of a `/query` answer.
#[derive(Debug, Default)]
struct Series {
    tags: Map<String, Value>,
    columns: Vec<String>,
    values: Vec<Vec<Value>>,
}

/// The series of the first statement of a `/query` answer, or its error. Queries are sent
/// chunked (`chunked=true`: one JSON document per line, a series continued over several of
/// them, none cut by the server's `max-row-limit`); the pieces of one series are joined.
fn parse_answer(body: &[u8]) -> Result<Vec<Series>, StoreError> {
    let mut out: Vec<Series> = Vec::new();
    let mut continued = false;
    for doc in body
        .split(|b| *b == b'\n')
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
    {
        let v: Value = serde_json::from_slice(doc)
            .map_err(|e| rejected(format!("unreadable /query answer: {e}")))?;
        if let Some(err) = v.get("error").and_then(Value::as_str) {
            return Err(rejected(err.to_owned()));
        }
        let Some(first) = v.get("results").and_then(|r| r.get(0)) else {
            continue;
        };
        if let Some(err) = first.get("error").and_then(Value::as_str) {
            return Err(rejected(err.to_owned()));
        }
        for s in first
            .get("series")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let strings = |k: &str| -> Vec<String> {
                s.get(k)
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .map(|c| c.as_str().unwrap_or_default().to_owned())
                            .collect()
                    })
                    .unwrap_or_default()
            };
            let piece = Series {
                tags: s
                    .get("tags")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default(),
                columns: strings("columns"),
                values: s
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|rows| {
                        rows.iter()
                            .map(|r| r.as_array().cloned().unwrap_or_default())
                            .collect()
                    })
                    .unwrap_or_default(),
            };
            match out.last_mut() {
                Some(last) if continued && last.tags == piece.tags => {
                    last.values.extend(piece.values)
                }
                _ => out.push(piece),
            }
            // In a chunked answer, `partial` on a series: it goes on in the next document.
            continued = s.get("partial").and_then(Value::as_bool) == Some(true);
        }
    }
    Ok(out)
}

/// An event from one row of `SELECT *`, and its timestamp in ns.
fn event_of(columns: &[String], row: &[Value]) -> Result<(i64, Event), StoreError> {
    let col = |name: &str| {
        columns
            .iter()
            .position(|c| c == name)
            .and_then(|i| row.get(i))
            .filter(|v| !v.is_null())
    };
    let text = |name: &str| col(name).and_then(Value::as_str).map(str::to_owned);
    let ns = col("time")
        .and_then(Value::as_i64)
        .ok_or_else(|| rejected("a point without an integer time"))?;
    let kind = text("event").ok_or_else(|| rejected("a point without the event tag"))?;
    let fields = match text("fields") {
        Some(json) => match serde_json::from_str(&json) {
            Ok(Value::Object(m)) => m,
            _ => {
                return Err(rejected(format!(
                    "a point's fields are not a JSON object: {json:?}"
                )));
            }
        },
        None => Map::new(),
    };
    Ok((
        ns,
        Event {
            time_ms: ns.div_euclid(NS_PER_MS),
            kind,
            listing_id: col("listing_id").and_then(Value::as_i64),
            user_id: text("user_id"),
            device_id: text("device_id"),
            session_id: text("session_id"),
            page_url: text("page_url"),
            count: col("count").and_then(Value::as_i64).unwrap_or(1),
            fields,
        },
    ))
}

impl InfluxRaw {
    /// Connects to the InfluxDB of `url` (see [`InfluxTarget::parse`]), creates the database
    /// and the retention policy (or sets its duration), and opens the day catalog at
    /// `catalog_path` (a local SQLite file, created if missing: one node's). Fails when the
    /// server cannot be reached.
    pub async fn connect(url: &str, catalog_path: &Path) -> Result<Self, StoreError> {
        Self::connect_with_catalog(url, Arc::new(SqliteCatalog::open(catalog_path)?)).await
    }

    /// [`InfluxRaw::connect`] with the day catalog `catalog`, e.g. the MariaDB one every node
    /// shares ([`super::catalog::mysql::MysqlCatalog`]).
    pub async fn connect_with_catalog(
        url: &str,
        catalog: Arc<dyn DayCatalog>,
    ) -> Result<Self, StoreError> {
        let target = InfluxTarget::parse(url)?;
        // The HTTP client is built with rustls (for https:// servers); its `ring` provider is
        // installed once per process (an error only says one is installed already).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| unavailable(format!("HTTP client: {e}")))?;
        let raw = Self {
            http,
            target,
            catalog,
            calendar: Calendar::utc(),
        };
        raw.setup().await?;
        Ok(raw)
    }

    async fn setup(&self) -> Result<(), StoreError> {
        let db = &self.target.database;
        let hours = self.target.retention.as_secs() / 3600;
        let shard_hours = self.target.shard_ms() / 3_600_000;
        self.command(&format!("CREATE DATABASE \"{db}\"")).await?;
        let create = format!(
            "CREATE RETENTION POLICY \"{RETENTION_POLICY}\" ON \"{db}\" DURATION {hours}h \
             REPLICATION 1 SHARD DURATION {shard_hours}h DEFAULT"
        );
        match self.command(&create).await {
            Err(e)
                if e.kind() == ErrorKind::Rejected && e.to_string().contains("already exists") =>
            {
                self.command(&format!(
                    "ALTER RETENTION POLICY \"{RETENTION_POLICY}\" ON \"{db}\" DURATION {hours}h \
                     SHARD DURATION {shard_hours}h DEFAULT"
                ))
                .await?;
            }
            other => {
                other?;
            }
        }
        tracing::info!(database = %db, retention_hours = hours, "InfluxDB raw tier ready");
        Ok(())
    }

    /// Sends one request, retried on connection errors, timeouts and 5xx; answers the body
    /// of the first 2xx, or the error.
    async fn send(
        &self,
        build: impl Fn() -> reqwest::RequestBuilder,
    ) -> Result<Vec<u8>, StoreError> {
        let mut wait = Duration::from_millis(50);
        let mut last = String::new();
        for attempt in 0..ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(wait).await;
                wait *= 4;
            }
            match build().send().await {
                Ok(resp) => {
                    let status = resp.status();
                    let body = resp
                        .bytes()
                        .await
                        .map_err(|e| unavailable(format!("reading the answer: {e}")))?;
                    if status.is_success() {
                        return Ok(body.to_vec());
                    }
                    let text = String::from_utf8_lossy(&body).trim().to_owned();
                    if status.is_server_error() {
                        last = format!("{status}: {text}");
                        continue;
                    }
                    return Err(rejected(format!("{status}: {text}")));
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(StoreError::new(
            server_error_kind(&last),
            BACKEND,
            format!("{} after {ATTEMPTS} attempts: {last}", self.target.base),
        ))
    }

    fn query_url(&self, q: &str, epoch: &str) -> String {
        let mut u = url::Url::parse(&format!("{}/query", self.target.base))
            .unwrap_or_else(|_| url::Url::parse("http://invalid/query").expect("static URL"));
        // Chunked answers are not cut by the server's `max-row-limit`.
        u.query_pairs_mut()
            .append_pair("db", &self.target.database)
            .append_pair("epoch", epoch)
            .append_pair("chunked", "true")
            .append_pair("chunk_size", "10000")
            .append_pair("q", q);
        u.into()
    }

    /// A statement that changes something (`POST /query`).
    async fn command(&self, q: &str) -> Result<Vec<Series>, StoreError> {
        let url = self.query_url(q, "ns");
        let body = self.send(|| self.http.post(&url)).await?;
        parse_answer(&body)
    }

    /// A `SELECT` or `SHOW` (`GET /query`), times in `epoch` units.
    async fn select(&self, q: &str, epoch: &str) -> Result<Vec<Series>, StoreError> {
        let url = self.query_url(q, epoch);
        let body = self.send(|| self.http.get(&url)).await?;
        parse_answer(&body)
    }

    async fn write(&self, lines: &[String]) -> Result<(), StoreError> {
        let mut u = url::Url::parse(&format!("{}/write", self.target.base))
            .map_err(|e| rejected(e.to_string()))?;
        u.query_pairs_mut()
            .append_pair("db", &self.target.database)
            .append_pair("rp", RETENTION_POLICY)
            .append_pair("precision", "ns");
        let url: String = u.into();
        for chunk in lines.chunks(WRITE_LINES) {
            let body = chunk.join("\n");
            self.send(|| self.http.post(&url).body(body.clone()))
                .await?;
        }
        Ok(())
    }

    async fn dropped(&self, day: Day) -> Result<bool, StoreError> {
        self.catalog.is_dropped(day).await
    }

    /// Up to `limit` rows of `SELECT <what>` of `day` after the ns cursor `after` (0: from the
    /// start), non-bot only if `humans`, in time order.
    async fn page(
        &self,
        what: &str,
        day: Day,
        after: i64,
        limit: usize,
        humans: bool,
    ) -> Result<Vec<Series>, StoreError> {
        let start = self.calendar.start_ms(day).saturating_mul(NS_PER_MS);
        let end = self.calendar.end_ms(day).saturating_mul(NS_PER_MS);
        let from = if after == 0 {
            format!("time >= {start}")
        } else {
            format!("time >= {start} AND time > {after}")
        };
        let bots = if humans {
            " AND \"is_bot\" = false"
        } else {
            ""
        };
        self.select(
            &format!(
                "SELECT {what} FROM \"{RETENTION_POLICY}\".\"{MEASUREMENT}\" \
                 WHERE {from} AND time < {end}{bots} ORDER BY time ASC LIMIT {limit}"
            ),
            "ns",
        )
        .await
    }

    /// Removes a dropped day's points: the shards within the day whole, and a time-range
    /// delete unless those shards cover the whole day.
    async fn remove_day(&self, day: Day) -> Result<(), StoreError> {
        let (start, end) = (self.calendar.start_ms(day), self.calendar.end_ms(day));
        let mut within: Vec<Shard> = self
            .shards()
            .await?
            .into_iter()
            .filter(|s| s.start_ms >= start && s.end_ms <= end)
            .collect();
        within.sort_by_key(|s| s.start_ms);
        let covered = within
            .iter()
            .try_fold(start, |at, s| (s.start_ms == at).then_some(s.end_ms))
            == Some(end);
        if !covered {
            let (a, b) = (start * NS_PER_MS, end * NS_PER_MS);
            self.command(&format!(
                "DELETE FROM \"{MEASUREMENT}\" WHERE time >= {a} AND time < {b}"
            ))
            .await?;
        }
        for s in within {
            self.command(&format!("DROP SHARD {}", s.id)).await?;
        }
        Ok(())
    }

    /// This store with its days cut in `calendar` (UTC unless set): set before the first
    /// append, and kept (see [`crate::calendar::agree_time_zone`]).
    #[must_use]
    pub fn with_calendar(mut self, calendar: Calendar) -> Self {
        self.calendar = calendar;
        self
    }
}

/// One shard of `SHOW SHARDS`: its id and time range (Unix ms, end exclusive).
#[derive(Debug)]
struct Shard {
    id: u64,
    start_ms: i64,
    end_ms: i64,
}

/// Unix ms of an RFC 3339 time of `SHOW SHARDS` (the parse of what
/// `tidemark_core::timefmt::rfc3339_ms` writes).
fn parse_rfc3339_ms(text: &str) -> Option<i64> {
    text.parse::<jiff::Timestamp>()
        .ok()
        .map(jiff::Timestamp::as_millisecond)
}

impl InfluxRaw {
    /// The shards of this database's retention policy (`SHOW SHARDS`).
    async fn shards(&self) -> Result<Vec<Shard>, StoreError> {
        let mut out = Vec::new();
        for s in self.select("SHOW SHARDS", "ns").await? {
            let at = |row: &[Value], name: &str| {
                s.columns
                    .iter()
                    .position(|c| c == name)
                    .and_then(|i| row.get(i).cloned())
            };
            for row in &s.values {
                let text = |name| at(row, name).and_then(|v| v.as_str().map(str::to_owned));
                if text("database").as_deref() == Some(self.target.database.as_str())
                    && text("retention_policy").as_deref() == Some(RETENTION_POLICY)
                    && let Some(id) = at(row, "id").and_then(|v| v.as_u64())
                    && let Some(start_ms) = text("start_time").as_deref().and_then(parse_rfc3339_ms)
                    && let Some(end_ms) = text("end_time").as_deref().and_then(parse_rfc3339_ms)
                {
                    out.push(Shard {
                        id,
                        start_ms,
                        end_ms,
                    });
                }
            }
        }
        Ok(out)
    }

    /// The shards of this database's retention policy: id → the day that holds the middle of
    /// its time range (the day it holds, where shards are UTC days or hours; the day of most
    /// of its hours, where a local day spans two shards).
    async fn shard_days(&self) -> Result<BTreeMap<u64, Day>, StoreError> {
        Ok(self
            .shards()
            .await?
            .into_iter()
            .map(|s| {
                let middle = s.start_ms + (s.end_ms - s.start_ms) / 2;
                (s.id, self.calendar.day_of(middle))
            })
            .collect())
    }
}

#[async_trait]
impl RawStore for InfluxRaw {
    fn calendar(&self) -> &Calendar {
        &self.calendar
    }

    async fn day_bytes(&self) -> Result<Vec<(Day, u64)>, StoreError> {
        let shards = self.shard_days().await?;
        let mut per_day: BTreeMap<Day, u64> = BTreeMap::new();
        // Each shard's statistics: one series tagged with its id, `diskBytes` its files' size.
        for s in self.select("SHOW STATS FOR 'shard'", "ns").await? {
            let id = s
                .tags
                .get("id")
                .and_then(Value::as_str)
                .and_then(|i| i.parse::<u64>().ok());
            let Some(day) = id.and_then(|id| shards.get(&id)) else {
                continue;
            };
            let column = s.columns.iter().position(|c| c == "diskBytes");
            let bytes = column
                .and_then(|i| s.values.first().and_then(|row| row.get(i)))
                .and_then(Value::as_u64)
                .unwrap_or(0);
            *per_day.entry(*day).or_default() += bytes;
        }
        Ok(per_day.into_iter().collect())
    }

    async fn append(&self, events: Vec<Event>, now_ms: i64) -> Result<(), RawError> {
        if events.is_empty() {
            return Ok(());
        }
        // Each event's day, found once: counted here, numbered below.
        let days: Vec<Day> = events
            .iter()
            .map(|e| self.calendar.day_of(e.time_ms))
            .collect();
        let mut per_day: BTreeMap<Day, i64> = BTreeMap::new();
        for day in &days {
            *per_day.entry(*day).or_default() += 1;
        }
        // InfluxDB drops points of shard groups already past retention, and stores the rest of
        // their request (a partial write): refuse such a batch whole before writing anything.
        let horizon =
            wall_clock_ms() - i64::try_from(self.target.retention.as_millis()).unwrap_or(i64::MAX);
        let shard = self.target.shard_ms();
        if let Some(e) = events
            .iter()
            .find(|e| e.time_ms.div_euclid(shard) * shard + shard <= horizon)
        {
            return Err(RawError::Store(rejected(format!(
                "events of {} are older than the raw tier's retention ({} h): InfluxDB \
                 would drop them; nothing of the batch was stored",
                self.calendar.day_of(e.time_ms),
                self.target.retention.as_secs() / 3600
            ))));
        }
        let counts: Vec<(Day, i64)> = per_day.into_iter().collect();
        // (1) Refuse dropped days; hold the others and reserve sequence numbers.
        let first_seq: HashMap<Day, i64> = self.catalog.begin_appends(&counts, now_ms).await?;
        // (2) Write, in arrival order, each event with the next number of its day.
        let mut next = first_seq;
        let lines: Vec<String> = events
            .iter()
            .zip(&days)
            .map(|(e, day)| {
                let seq = next.entry(*day).or_default();
                *seq += 1;
                line(e, *seq - 1)
            })
            .collect();
        let written = self.write(&lines).await;
        // (3) Count them, or release them.
        self.catalog
            .end_appends(&counts, written.is_ok(), now_ms)
            .await?;
        Ok(written?)
    }

    async fn read_chunk(
        &self,
        day: Day,
        after: i64,
        limit: usize,
    ) -> Result<(Vec<Event>, Option<i64>), StoreError> {
        if limit == 0 || self.dropped(day).await? {
            return Ok((Vec::new(), None));
        }
        let mut out = Vec::with_capacity(limit.min(READ_PAGE));
        let mut cursor = after;
        loop {
            let want = (limit - out.len()).min(READ_PAGE);
            let mut got = 0;
            for s in self.page("*", day, cursor, want, false).await? {
                for row in &s.values {
                    let (ns, e) = event_of(&s.columns, row)?;
                    cursor = ns;
                    out.push(e);
                    got += 1;
                }
            }
            if out.len() >= limit {
                return Ok((out, Some(cursor)));
            }
            // Nothing more: the day is exhausted. Fewer rows than asked may only be the
            // server's row limit, so that is not taken as the end.
            if got == 0 {
                return Ok((out, None));
            }
        }
    }

    async fn days(&self) -> Result<Vec<DayState>, StoreError> {
        self.catalog.days().await
    }

    async fn mark_rolled_up(&self, day: Day, arrival_ms: i64) -> Result<(), StoreError> {
        self.catalog.set_mark(Mark::RolledUp, day, arrival_ms).await
    }

    async fn mark_archived(&self, day: Day, arrival_ms: i64) -> Result<(), StoreError> {
        self.catalog.set_mark(Mark::Archived, day, arrival_ms).await
    }

    async fn drop_day(&self, day: Day, now_ms: i64) -> Result<bool, StoreError> {
        let marked = self.catalog.mark_dropped_if_current(day, now_ms).await?;
        if marked && let Err(error) = self.remove_day(day).await {
            // The day reads empty from now on; InfluxDB's retention removes its points.
            tracing::warn!(%day, %error, "day dropped in the catalog; its InfluxDB points stay until retention");
        }
        Ok(marked)
    }

    async fn clear(&self) -> Result<(), StoreError> {
        self.command(&format!("DELETE FROM \"{MEASUREMENT}\""))
            .await?;
        self.catalog.clear().await
    }

    async fn record_dropped(&self, days: &[DayState]) -> Result<(), StoreError> {
        self.catalog.record_dropped(days).await
    }

    fn expires_at_ms(&self, day: Day) -> Option<i64> {
        // A shard group is deleted once its end is older than the retention: the day starts
        // to go with the shard of its first instant (the whole day when shards are its days).
        let shard = self.target.shard_ms();
        let first_shard_end = self.calendar.start_ms(day).div_euclid(shard) * shard + shard;
        Some(
            first_shard_end.saturating_add(
                i64::try_from(self.target.retention.as_millis()).unwrap_or(i64::MAX),
            ),
        )
    }

    async fn counts_per_minute(
        &self,
        since_ms: i64,
        until_ms: i64,
    ) -> Result<Vec<MinuteCount>, StoreError> {
        if until_ms <= since_ms {
            return Ok(Vec::new());
        }
        let series = self
            .select(
                &format!(
                    "SELECT count(\"seq\") FROM \"{RETENTION_POLICY}\".\"{MEASUREMENT}\" \
                     WHERE time >= {} AND time < {} AND \"is_bot\" = false \
                     GROUP BY time(1m), \"event\" fill(none)",
                    since_ms.saturating_mul(NS_PER_MS),
                    until_ms.saturating_mul(NS_PER_MS)
                ),
                "ms",
            )
            .await?;
        let mut out = Vec::new();
        for s in series {
            let kind = s
                .tags
                .get("event")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            for row in &s.values {
                let (Some(minute_ms), Some(count)) = (
                    row.first().and_then(Value::as_i64),
                    row.get(1).and_then(Value::as_u64),
                ) else {
                    return Err(rejected(format!("unexpected count row {row:?}")));
                };
                if count > 0 {
                    out.push(MinuteCount {
                        minute_ms,
                        kind: kind.clone(),
                        count,
                    });
                }
            }
        }
        out.sort_by(|a, b| (a.minute_ms, &a.kind).cmp(&(b.minute_ms, &b.kind)));
        Ok(out)
    }

    async fn top_listings(&self, day: Day, limit: usize) -> Result<Vec<(i64, u64)>, StoreError> {
        // `listing_id` is a field (never a tag), so InfluxDB cannot group by it: page through
        // the day's non-bot listing ids and count here.
        if limit == 0 || self.dropped(day).await? {
            return Ok(Vec::new());
        }
        let mut counts: HashMap<i64, u64> = HashMap::new();
        let mut after = 0;
        loop {
            let mut n = 0;
            for s in self
                .page("\"listing_id\"", day, after, READ_PAGE, true)
                .await?
            {
                for row in &s.values {
                    n += 1;
                    if let Some(ns) = row.first().and_then(Value::as_i64) {
                        after = ns;
                    }
                    if let Some(l) = row.get(1).and_then(Value::as_i64) {
                        *counts.entry(l).or_default() += 1;
                    }
                }
            }
            if n == 0 {
                break;
            }
        }
        let mut top: Vec<(i64, u64)> = counts.into_iter().collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        top.truncate(limit);
        Ok(top)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let t = InfluxTarget::parse("influxdb://127.0.0.1:8086/tidemark").unwrap();
        assert_eq!(
            t,
            InfluxTarget {
                base: "http://127.0.0.1:8086".into(),
                database: "tidemark".into(),
                retention: Duration::from_secs(7 * 86_400)
            }
        );
        let t = InfluxTarget::parse("influxdb://h/db_2?retention=60d").unwrap();
        assert_eq!(
            (t.base.as_str(), t.retention),
            ("http://h:8086", Duration::from_secs(60 * 86_400))
        );
        for bad in [
            "http://h/db",
            "influxdb://h/",
            "influxdb://h/bad-name",
            "influxdb://h/db?retention=5m",
            "influxdb://h/db?foo=1",
        ] {
            assert!(
                matches!(InfluxTarget::parse(bad), Err(e) if e.kind() == ErrorKind::Rejected),
                "{bad}"
            );
        }
    }

    #[test]
    fn chunked_answers_are_joined_and_errors_surface() {
        let body = br#"{"results":[{"statement_id":0,"series":[{"name":"m","tags":{"event":"a"},"columns":["time","count"],"values":[[1,2]],"partial":true}],"partial":true}]}
{"results":[{"statement_id":0,"series":[{"name":"m","tags":{"event":"a"},"columns":["time","count"],"values":[[2,3]]},{"name":"m","tags":{"event":"b"},"columns":["time","count"],"values":[[1,1]]}]}]}
"#;
        let series = parse_answer(body).unwrap();
        assert_eq!(series.len(), 2);
        assert_eq!(series[0].values.len(), 2);
        assert_eq!(series[1].tags["event"], "b");
        assert!(matches!(
            parse_answer(br#"{"results":[{"statement_id":0,"error":"boom"}]}"#),
            Err(e) if e.kind() == ErrorKind::Rejected && e.to_string() == "influxdb: boom"
        ));
        assert_eq!(
            server_error_kind(
                "500 Internal Server Error: {\"error\":\"write /var/lib/influxdb/wal/x: no space left on device\"}"
            ),
            ErrorKind::Full
        );
        assert_eq!(
            server_error_kind("503 Service Unavailable: "),
            ErrorKind::Unavailable
        );
        assert!(parse_answer(b"not json").is_err());
    }

    #[test]
    fn lines_escape_and_tie_break() {
        let mut e = Event::new("view", 1_700_000_000_123);
        e.listing_id = Some(7);
        e.session_id = Some("s \"1\", a=b\\".into());
        e.fields.insert("bot".into(), Value::Bool(true));
        assert_eq!(
            line(&e, 1_000_002),
            "listing_event,event=view seq=1000002i,count=1i,is_bot=true,listing_id=7i,\
             session_id=\"s \\\"1\\\", a=b\\\\\",fields=\"{\\\"bot\\\":true}\" 1700000000123000002"
        );
        assert_eq!(point_ns(-1, 3), -999_997);
        assert_eq!(escape_tag("a b,c=d"), "a\\ b\\,c\\=d");
    }
}
