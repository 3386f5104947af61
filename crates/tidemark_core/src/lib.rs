//! What Tidemark's three subsystems truly share.
//!
//! - [`clock`]: injected time (`Arc<dyn Clock>`), so hot windows, TTLs and day boundaries are
//!   tested without sleeping.
//! - [`day`]: UTC days, the partition unit of link records and raw events.
//! - [`sqlite`]: the embedded engine. Every write goes through one [`sqlite::GroupWriter`]
//!   thread that runs many callers' jobs in one transaction and one fsync (group commit) and
//!   answers each caller only after that fsync; reads use a pool of read-only connections.
//! - [`mysql`]: the production relational engine (MariaDB / MySQL): one way to open a pool from
//!   a URL, and scratch databases for tests (`testing` feature).
//! - [`schema`]: versioned schemas: each store's ordered migrations, run at open (SQLite's
//!   `user_version`, a version table on MariaDB), and a store of a newer build refused.
//! - [`store`]: [`store::StoreError`], the one error every storage port returns, whatever
//!   engine (SQLite, MariaDB, Redis, Kafka, InfluxDB) is behind it, with its source and its
//!   [`store::ErrorKind`] (unavailable, full, corrupt, rejected, conflict).
//! - [`retry`]: the rule background workers follow after a failed pass, by that kind.
//! - [`health`]: stores marked full until a write to them succeeds, for `/readyz`.
//! - [`http`]: the JSON error shape `{"error": {"code", "message"}}`, the JSON body extractor that
//!   turns every bad body into such a 4xx, and per-tenant API-key auth.
//! - [`openapi`]: the OpenAPI error schema, the answers common to every `/v1` operation and
//!   the bearer security scheme, for the document each subsystem contributes to.
//! - [`timefmt`]: RFC 3339 rendering of Unix-millisecond timestamps.
//! - [`throttle`]: at most one log line per second for errors that repeat on every request.
//!
//! The `testing` feature adds what only tests and benchmarks use (scratch databases, the test
//! MariaDB's URL, shared assertions); the product is built without it.

pub mod clock;
pub mod day;
pub mod health;
pub mod http;
pub mod mysql;
pub mod openapi;
pub mod retry;
pub mod schema;
pub mod sqlite;
pub mod store;
pub mod throttle;
pub mod timefmt;

pub use clock::{Clock, ManualClock, SystemClock};
