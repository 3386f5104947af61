//! Tidemark links: newsletter link tracking (DESIGN.md part B, seed 001).
//!
//! Data flow:
//! 1. **Render** ([`render`]): a mailing's HTML template gets each recipient's merge fields
//!    (`{{ name }}`, values HTML-escaped); suppressed recipients and recipients missing a field
//!    are skipped with a reason.
//! 2. **Rewrite** ([`rewrite`], rules in [`rules`]): every trackable link becomes
//!    `<track base>/c/<id>` with a fresh [`id::LinkId`], and an open pixel `/o/<id>` is added;
//!    nothing else in the HTML changes.
//! 3. **Store** ([`store`]): all link records of one call go to the day partition their ids
//!    carry, in one batch, before the call returns; a streamed render ([`ndjson`]) stores
//!    and answers a part of the recipients at a time. Rendering runs on the node's bounded
//!    CPU pool, off the runtime's workers.
//! 4. **Send** ([`send`]): rendered messages go to the sending pool (SMTP relays, or `.eml`
//!    files on the embedded default).
//! 5. **Redirect** ([`redirect`]): `/c/<id>` → 302 to the stored URL, `/o/<id>` → 1×1 GIF; the
//!    id is validated before any read, the lookup reads one partition, and the click or open is
//!    recorded from that one row as an `email_click` / `email_open` event through the events
//!    subsystem's `Ingest`, many hits per append ([`hit_events`]; the listing taken from an
//!    `/item/<id>` target); [`user_agent`]
//!    tells bots, scanners and image proxies from people. An id whose day was dropped goes to
//!    the fallback URL. `/u/<id>` is the message's one-click unsubscribe (RFC 8058).
//! 6. **Retention** ([`partitions`]): whole day partitions are created ahead and dropped when
//!    they expire.
//! 7. **Statistics** ([`stats`]): renders, the sending pool's outcomes ([`deliveries`]) and
//!    each group of hits add to their mailing's summary, beside the link records; the
//!    summary is what `GET /v1/mailings/{mid}/stats` and the campaign page ([`dashboard`])
//!    read, so it outlives the day partitions.
//!
//! Backends:
//! - **SQLite link store**, the embedded default ([`sqlite`], `links.db`): a table per UTC day;
//!   the same file holds the mailings, the suppression list and the statistics.
//! - **MariaDB / MySQL link store** ([`mysql`]): one table `PARTITION BY RANGE` per day,
//!   compressed rows, a sequential clustered key; the mailings, the suppression list, the
//!   statistics and the id secret's check value in the same database, so nothing of links is local to a node, and
//!   partition DDL under a lock of the database, so nodes take turns.
//! - **Sending pool** ([`send`]): SMTP relays over pooled connections (lettre), or `.eml` files
//!   under the data dir on the embedded default.
//!
//! The versions of the link stores' schemas are in `migrations`.
//!
//! Modules:
//! - `builder`: render → rewrite → link records for a list of recipients (CPU only).
//! - `config`: `[links]` settings.
//! - `dashboard`: the campaign page `/dashboard/mailings/{mid}`.
//! - `deliveries`: the sending pool's outcomes, written to the statistics in groups.
//! - `error`: `LinksError` and its HTTP status.
//! - `hit_events`: the events of tracking hits, written in groups off the redirector's path.
//! - `http`: the `/v1` mailing and suppression routes, and the public `/c`, `/o`, `/expired`.
//! - `id`: 32-character tracking ids carrying their creation time, unguessable and checked.
//! - `metrics`: links' Prometheus metrics.
//! - `model`: link records, mailings and lookups.
//! - `ndjson`: the streamed render, a part of the recipients at a time.
//! - `mysql`: the MariaDB / MySQL link store and mailing store.
//! - `partitions`: the partition manager (create ahead, drop past retention).
//! - `redirect`: the hit → event rule, the pixel, listing ids of `/item/<id>` targets.
//! - `render`: merge fields through Handlebars, HTML-escaped, strict.
//! - `rewrite`: finds trackable attributes in the HTML and splices in tracking URLs.
//! - `rules`: which links are tracked and which are not.
//! - `send`: the sending pool and its `.eml` and SMTP transports.
//! - `service`: the links API the routes call (mailings, render/send, suppressions, lookups),
//!   and opening it on its stores.
//! - `sqlite`: the embedded link store and mailing store.
//! - `stats`: campaign statistics: the counting rules and the per-mailing summary's shapes.
//! - `store`: the link-store and mailing-store ports.
//! - `user_agent`: bot, scanner, previewer and image-proxy classes of a `User-Agent`.
//!
//! The `testing` feature (tests only, never the product) adds `conformance`: the link-store
//! suite both link stores' tests run.

pub mod builder;
pub mod config;
#[cfg(feature = "testing")]
pub mod conformance;
pub mod dashboard;
pub mod deliveries;
pub mod error;
pub mod hit_events;
pub mod http;
pub mod id;
pub mod metrics;
mod migrations;
pub mod model;
pub mod mysql;
pub mod ndjson;
pub mod partitions;
pub mod redirect;
pub mod render;
pub mod rewrite;
pub mod rules;
pub mod send;
pub mod service;
pub mod sqlite;
pub mod stats;
pub mod store;
pub mod user_agent;
