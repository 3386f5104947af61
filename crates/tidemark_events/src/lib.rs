//! Tidemark events: listing analytics (DESIGN.md part C, seed 002).
//!
//! Data flow so far: producers (the link redirector; later `POST /v1/events` and line
//! protocol) hand [`Event`]s to [`Ingest::record`], which checks them against the schema
//! (the `event` tag is a closed set; identifiers are fields, never tags) and appends them to
//! the raw tier ([`RawStore`]): on the embedded default one SQLite table per UTC day in
//! `data/events/raw.db`, group-committed, so an acknowledged event is durable. Two events with
//! the same timestamp are two rows: nothing is merged. Closed days are rolled up into the
//! summary tier ([`rollups::RollupStore`], `listing_daily` + `listings`), archived as Parquet
//! ([`archive`]) and dropped behind both ([`lifecycle`]); reports read the summary tier only.
//!
//! Each port has the embedded default and a production engine, picked by URL in [`stores`]:
//! the raw tier on InfluxDB 1.x ([`raw::influx`]: line protocol, `event` the only tag, a unique
//! nanosecond per event, its day catalog in a local SQLite file) and the summary tier on
//! MariaDB ([`rollups::MysqlRollups`]). With the `testing` feature (tests and benchmarks only,
//! never the product), `conformance` holds one suite per port that every backend passes and
//! `testing` starts a real `influxd`.
//!
//! Bot traffic (HEAD requests, known scanners) is recorded with the field `bot = true` so it
//! can be shown, and is excluded from every count of clicks and opens.

pub mod archive;
pub mod config;
#[cfg(feature = "testing")]
pub mod conformance;
pub mod dashboard;
pub mod http;
pub mod ingest;
pub mod lifecycle;
pub mod lineproto;
pub mod metrics;
pub mod model;
pub mod raw;
pub mod recent;
pub mod report_http;
pub mod rollup;
pub mod rollups;
pub mod schema;
pub mod stores;
#[cfg(feature = "testing")]
pub mod testing;

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
pub use raw::{DayState, InfluxRaw, MinuteCount, RawError, RawStore, SqliteRaw};
