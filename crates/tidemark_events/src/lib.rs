//! Tidemark events: listing analytics (DESIGN.md part C, seed 002).
//!
//! Data flow:
//! 1. **Ingest** ([`ingest`], routes in [`http`]): `POST /v1/events` (JSON array or NDJSON),
//!    InfluxDB line protocol (`/api/v2/write`, `/write`), the links redirector (`email_click`,
//!    `email_open`) and chat's first contacts (`contact`) become [`Event`]s, checked against
//!    the [`schema`] (the `event` tag is a closed set; identifiers are fields, never tags). A
//!    batch with one bad line stores nothing.
//! 2. **Raw tier** ([`raw`], [`RawStore`]): the batch is appended to its days' partitions
//!    (UTC days, or the local days of `events.time_zone`: [`calendar`]),
//!    durably before the answer; two events with the same timestamp are two rows, never merged.
//!    A day catalog counts each day's events and last arrival.
//! 3. **Lifecycle** ([`lifecycle`]): once a day has closed plus the lateness window, it is
//!    rolled up ([`rollup`]: the raw tier lends the day's rows one by one,
//!    [`RawStore::fold_day`]; per `(listing_id, day, kind)` `total` and `uniques`, bots
//!    excluded, and a sketch of the visitors, [`visitors`]) into the summary tier ([`rollups`]:
//!    `listing_daily`, its month sums `listing_monthly`, `listings`), archived as Parquet
//!    ([`archive`]), and only then, past `raw_retention`, dropped whole. A day with late
//!    events is rolled up and archived again.
//! 4. **Reads**: the live dashboard ([`recent`], page in [`dashboard`]) reads the raw tier;
//!    account reports ([`report_http`]) read the summary tier only: whole months from
//!    `listing_monthly`, the edge days from `listing_daily`, and their visitor sketches for
//!    the distinct visitors of the period. The audits ([`usage`], [`raw_window`]) read what
//!    ingest and rollups noted of the kinds and of the ages of the days they needed.
//!
//! Backends, picked by URL in [`stores`] (the archive by `events.archive_url`):
//! - **Raw tier**: SQLite, the embedded default (`raw.db`, one table per day), or
//!   InfluxDB 1.x ([`raw::influx`]: line protocol, `event` the only tag, a unique nanosecond
//!   per event, one shard per day, its day catalog in a local SQLite file).
//! - **Rollups**: SQLite, the embedded default (`rollups.db`), or MariaDB / MySQL
//!   ([`rollups::MysqlRollups`]); both keep month sums for year-long reports.
//! - **Raw archive**: Parquet through `object_store`: a local directory by default, or any
//!   object store URL it understands (e.g. `s3://bucket/prefix`).
//!
//! Bot traffic (HEAD requests, known scanners) is recorded with the field `bot = true` so it
//! can be shown, and is excluded from every count of clicks and opens.
//!
//! Modules:
//! - `archive`: a raw day → one Parquet object, read back and checked before it counts.
//! - `calendar`: the days of `events.time_zone` (UTC by default), and the zone a store keeps.
//! - `config`: `[events]` settings and the schema.
//! - `dashboard`: `GET /dashboard`, the live dashboard page.
//! - `http`: the ingest routes (JSON, line protocol v1 and v2).
//! - `ingest`: decoding, schema checks and the all-or-nothing append.
//! - `lifecycle`: the scheduler that rolls up, archives and drops raw days.
//! - `lineproto`: InfluxDB line protocol parsing.
//! - `metrics`: the lifecycle's Prometheus metrics.
//! - `model`: [`Event`].
//! - `raw`: the raw-tier port, its SQLite and InfluxDB backends and the day catalog.
//! - `raw_window`: how far back raw days were needed, and what a longer window costs.
//! - `recent`: the dashboard's reads (`/v1/events/recent`, `/v1/events/top`).
//! - `report_http`: listings, account reports and on-demand rollups over HTTP.
//! - `rollup`: the daily rollup rule and the service that runs it.
//! - `rollups`: the summary-tier port and its SQLite and MariaDB backends.
//! - `schema`: declared kinds and field types; what is refused.
//! - `stores`: the backend of each port by URL.
//! - `usage`: the event-kind audit.
//! - `visitors`: period uniques, from a sketch of each day's visitors.
//! - `zone_move`: moving a store's days to another `events.time_zone`.
//!
//! The `testing` feature (tests and benchmarks only, never the product) adds:
//! - `conformance`: one suite per port that every backend's tests run.
//! - `testing`: a private `influxd` for tests.

pub mod archive;
pub mod calendar;
pub mod config;
#[cfg(feature = "testing")]
pub mod conformance;
pub mod dashboard;
pub mod http;
pub mod ingest;
pub mod leases;
pub mod lifecycle;
pub mod lineproto;
pub mod metrics;
pub mod model;
pub mod raw;
pub mod raw_window;
pub mod recent;
pub mod report_http;
pub mod rollup;
pub mod rollups;
pub mod schema;
pub mod stores;
#[cfg(feature = "testing")]
pub mod testing;
pub mod usage;
pub mod visitors;
pub mod zone_move;

/// The OpenAPI description of the events' `/v1` routes (ingest, recent, top, listings,
/// reports, rollups); the server merges it into `/v1/openapi.json`.
#[derive(Debug, Clone, Copy)]
pub struct EventsApi;

impl utoipa::OpenApi for EventsApi {
    fn openapi() -> utoipa::openapi::OpenApi {
        let mut api = <http::IngestApi as utoipa::OpenApi>::openapi();
        api.merge(<recent::RecentApi as utoipa::OpenApi>::openapi());
        api.merge(<report_http::AnalyticsApi as utoipa::OpenApi>::openapi());
        api.tags = Some(vec![
            utoipa::openapi::tag::TagBuilder::new()
                .name("events")
                .description(Some(
                    "Listing analytics: ingest, the raw tier's recent counts, listings, rollups and reports",
                ))
                .build(),
        ]);
        api
    }
}

pub use config::EventsConfig;
pub use ingest::{Ingest, IngestError};
pub use model::Event;
pub use raw::{
    DayCatalog, DayState, InfluxRaw, MinuteCount, MysqlCatalog, RawError, RawStore, SqliteCatalog,
    SqliteRaw,
};
