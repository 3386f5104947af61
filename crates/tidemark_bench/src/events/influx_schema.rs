//! Part 5 of `tidemark-bench events` (seed 002): the same events
//! written to a real InfluxDB 1.x with identifiers as **tags** (the seed's original schema) and
//! as **fields** (Tidemark's), as the number of distinct users grows.
//!
//! Two `influxd` processes are started (one per schema, so each one's memory is its own), each
//! on a free loopback port with a temp dir. For each step of `--influx-users` the events of the
//! users new since the last step are written (`--influx-events-per-user` each, in requests of
//! `--batch` lines, one request at a time), then the step's figures are read: write
//! throughput, `SHOW SERIES EXACT CARDINALITY`, and `influxd`'s resident memory (`VmRSS`).
//! Events differ per user (user, device and session ids) and spread over 900 listings and three
//! kinds, all derived from the event's number.

use std::time::Instant;

use anyhow::{Context, ensure};
use tidemark_core::clock::{Clock, SystemClock};
use tidemark_events::testing::InfluxServer;

use super::{Bar, EventsBenchArgs, kind_of, mix};

/// One schema's figures after one step.
#[derive(Debug, Clone)]
struct Step {
    users: u64,
    events: u64,
    events_per_sec: f64,
    series: u64,
    rss_mb: f64,
}

/// Figures of the part.
#[derive(Debug)]
pub(super) struct SchemaFigures {
    tags: Vec<Step>,
    fields: Vec<Step>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Schema {
    Tags,
    Fields,
}

/// Line protocol of event `i` of user `user` (ms precision).
fn line(schema: Schema, user: u64, i: u64, time_ms: i64) -> String {
    let h = mix((user << 16) ^ i);
    let kind = kind_of(h);
    let listing = 1_000_000 + (h >> 8) % 900;
    match schema {
        // The seed's first schema: every identifier a tag, so every user is new series.
        Schema::Tags => format!(
            "listing_event,event={kind},listing_id={listing},user_id=u{user},device_id=d{user},\
             session_id=s{user}_{} page_url=\"/item/{listing}\",count=1i {time_ms}",
            i / 3
        ),
        // Tidemark's: `event` the only tag, identifiers as fields.
        Schema::Fields => format!(
            "listing_event,event={kind} listing_id={listing}i,user_id=\"u{user}\",\
             device_id=\"d{user}\",session_id=\"s{user}_{}\",page_url=\"/item/{listing}\",\
             count=1i,seq={i}i {}",
            i / 3,
            time_ms * 1_000_000 + (user * 1_000 + i) as i64 % 1_000_000
        ),
    }
}

fn rss_mb(pid: Option<u32>) -> f64 {
    let Some(pid) = pid else { return f64::NAN };
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

async fn series(client: &reqwest::Client, server: &InfluxServer) -> anyhow::Result<u64> {
    let v: serde_json::Value = client
        .get(format!("http://127.0.0.1:{}/query", server.port))
        .query(&[("db", "bench"), ("q", "SHOW SERIES EXACT CARDINALITY")])
        .send()
        .await?
        .json()
        .await?;
    Ok(v["results"][0]["series"][0]["values"][0][0]
        .as_u64()
        .unwrap_or(0))
}

async fn run_schema(args: &EventsBenchArgs, schema: Schema) -> anyhow::Result<Vec<Step>> {
    let server = InfluxServer::start().context("starting influxd (apt-get install influxdb)")?;
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{}", server.port);
    client
        .post(format!("{base}/query"))
        .query(&[("q", "CREATE DATABASE bench")])
        .send()
        .await?
        .error_for_status()?;
    let precision = if schema == Schema::Tags { "ms" } else { "ns" };
    let write = format!("{base}/write?db=bench&precision={precision}");
    let now = SystemClock.now_ms() - 3_600_000;
    let mut steps = Vec::new();
    let (mut done_users, mut events) = (0u64, 0u64);
    for &users in &args.influx_users {
        let t = Instant::now();
        let mut batch = Vec::with_capacity(args.batch);
        let mut step_events = 0u64;
        for user in done_users..users {
            for i in 0..args.influx_events_per_user {
                batch.push(line(schema, user, i, now + (events % 3_600_000) as i64));
                events += 1;
                step_events += 1;
                if batch.len() == args.batch {
                    client
                        .post(&write)
                        .body(batch.join("\n"))
                        .send()
                        .await?
                        .error_for_status()?;
                    batch.clear();
                }
            }
        }
        if !batch.is_empty() {
            client
                .post(&write)
                .body(batch.join("\n"))
                .send()
                .await?
                .error_for_status()?;
        }
        let secs = t.elapsed().as_secs_f64();
        done_users = users;
        let step = Step {
            users,
            events,
            events_per_sec: step_events as f64 / secs,
            series: series(&client, &server).await?,
            rss_mb: rss_mb(server.pid()),
        };
        eprintln!("influx-schema: {schema:?} {step:?}");
        steps.push(step);
    }
    Ok(steps)
}

/// Runs both schemas.
pub(super) async fn bench_schemas(args: &EventsBenchArgs) -> anyhow::Result<SchemaFigures> {
    ensure!(
        !args.influx_users.is_empty() && args.influx_users.windows(2).all(|w| w[0] < w[1]),
        "--influx-users must be increasing"
    );
    Ok(SchemaFigures {
        tags: run_schema(args, Schema::Tags).await?,
        fields: run_schema(args, Schema::Fields).await?,
    })
}

impl SchemaFigures {
    pub(super) fn report(&self) -> String {
        let mut s = String::from(
            "\n5. InfluxDB 1.x, identifiers as tags (seed's first schema) vs as fields (Tidemark)\n\
             \x20    users     events | tags: series  events/s  RSS MB | fields: series  events/s  RSS MB\n",
        );
        for (t, f) in self.tags.iter().zip(&self.fields) {
            s.push_str(&format!(
                "{:>10} {:>10} | {:>12} {:>9.0} {:>7.0} | {:>14} {:>9.0} {:>7.0}\n",
                t.users,
                t.events,
                t.series,
                t.events_per_sec,
                t.rss_mb,
                f.series,
                f.events_per_sec,
                f.rss_mb
            ));
        }
        s
    }

    /// `influx-series.svg`, `influx-rate.svg` and `influx-rss.svg` in `dir`, each against the
    /// number of distinct users, tags vs fields.
    pub(super) fn plot(&self, dir: &std::path::Path) -> anyhow::Result<()> {
        use super::super::plot::{Series, write_chart};
        let two = |f: fn(&Step) -> f64| {
            [
                ("identifiers as tags", &self.tags),
                ("identifiers as fields (Tidemark)", &self.fields),
            ]
            .map(|(name, steps)| Series {
                name: name.to_owned(),
                points: steps.iter().map(|s| (s.users as f64, f(s))).collect(),
            })
        };
        write_chart(
            &dir.join("influx-series.svg"),
            "Seed 002 on InfluxDB 1.x: series cardinality",
            "distinct users",
            "series (SHOW SERIES EXACT CARDINALITY)",
            &two(|s| s.series as f64),
        )?;
        write_chart(
            &dir.join("influx-rate.svg"),
            "Seed 002 on InfluxDB 1.x: write throughput of each step",
            "distinct users",
            "events/s",
            &two(|s| s.events_per_sec),
        )?;
        write_chart(
            &dir.join("influx-rss.svg"),
            "Seed 002 on InfluxDB 1.x: influxd resident memory",
            "distinct users",
            "RSS (MB)",
            &two(|s| s.rss_mb),
        )
    }

    pub(super) fn bar(&self) -> Bar {
        let last = self.fields.last();
        Bar {
            name: "InfluxDB series cardinality with identifiers as fields = number of kinds (3)"
                .into(),
            figure: match (self.tags.last(), last) {
                (Some(t), Some(f)) => format!(
                    "{} users: fields {} series, tags {} series",
                    f.users, f.series, t.series
                ),
                _ => "no steps".into(),
            },
            pass: last.map(|f| self.fields.iter().all(|s| s.series <= 3) && f.series == 3),
        }
    }
}
