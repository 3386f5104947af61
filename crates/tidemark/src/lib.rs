//! The Tidemark server: it reads one configuration, opens the three subsystems' stores, wires
//! the subsystems to each other, runs their workers and serves their routes as one HTTP API.
//! The `tidemark` binary is a thin CLI over this crate; the load generators are the
//! `tidemark-bench` binary of the `tidemark_bench` crate.
//!
//! Data flow of `tidemark serve` ([`server`]):
//! 1. [`config`]: TOML file, then `TIDEMARK_…` env overrides, then flags → one [`config::Config`]
//!    with `[chat]`, `[links]` and `[events]`.
//! 2. The stores each section names are opened by the subsystems (chat: `tidemark_chat::stores`;
//!    links: `LinksService::open`; events: `tidemark_events::stores`), under one data directory
//!    locked against a second server.
//! 3. [`wiring`]: chat's first contact about a listing → a `contact` event; link clicks and
//!    opens reach the same `Ingest` inside `tidemark_links`. Analytics belong to one tenant.
//! 4. Workers: chat's archiver, trimmer and recovery, the links partition manager, and the
//!    events lifecycle (rollup, Parquet archive, drop), all stopped in order; on `all` and
//!    `workers` nodes ([`config::Role`]).
//! 5. Routes: the subsystems' `/v1` routes behind per-tenant API keys, the public `/c`, `/o`
//!    and `/dashboard`, `/v1/openapi.json` ([`openapi`]) on `all` and `api` nodes, with the
//!    links sending pool; `/healthz`, `/readyz` and `/metrics` on every node ([`http_metrics`]
//!    counts every answer).
//!
//! Backends: none of its own; every engine is chosen by URL in the configuration and held by
//! its subsystem — chat: SQLite, Redis, Kafka protocol, MariaDB; links: SQLite, MariaDB, SMTP;
//! events: SQLite, InfluxDB, MariaDB, object_store.
//!
//! Modules:
//! - `body_deadline`: a request body must arrive whole within `body_read_timeout`.
//! - `chat_cmd`: `tidemark chat backfill`, seed 000's backfill tool, offline.
//! - `events_cmd`: `tidemark events move-zone`, re-cutting the events stores' days, offline.
//! - `config`: the configuration, its env overrides and its checks.
//! - `demo`: `tidemark demo`, one marketplace day through the public API, with a summary.
//! - `http_metrics`: `tidemark_http_responses_total` by method, route template and status.
//! - `mail`: `tidemark mail render`, the mail builder offline.
//! - `openapi`: the merged OpenAPI document of every `/v1` route.
//! - `request_limits`: URI length and header count, refused in the JSON error shape.
//! - `rollup_cmd`: `tidemark rollup --day`, the daily rollup on demand, offline.
//! - `server`: `tidemark serve`: stores, workers, routes, ordered shutdown.
//! - `wiring`: how the subsystems feed each other, and the analytics owner check.

pub mod body_deadline;
pub mod chat_cmd;
pub mod config;
pub mod demo;
pub mod events_cmd;
pub mod http_metrics;
pub mod mail;
pub mod openapi;
pub mod request_limits;
pub mod rollup_cmd;
pub mod server;
pub mod wiring;
