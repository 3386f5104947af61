//! What Tidemark's three subsystems (chat, links, events) share: time, days, the two relational
//! engines their stores are built on, schema versions, and the HTTP conventions of their routes.
//! It holds no subsystem's data and no subsystem's rules.
//!
//! Data flow through it, for any subsystem:
//! 1. **Open**: a store opens its file or pool here — SQLite ([`sqlite::open_rw`], WAL, fsync on
//!    commit) or MariaDB / MySQL ([`mysql::connect`], database created if missing) — and
//!    [`schema`] brings it to the version this build knows, or refuses a newer one.
//! 2. **Write**: on SQLite every write is a job handed to the file's one
//!    [`sqlite::GroupWriter`] thread, which runs all waiting jobs in one transaction, commits
//!    once (one fsync) and only then answers each caller (group commit); on MariaDB the store
//!    runs its own statements on the pool.
//! 3. **Read**: a [`sqlite::ReadPool`] of read-only connections (WAL snapshots), or the pool.
//! 4. **Fail**: an engine's error becomes a [`store::StoreError`] of one [`store::ErrorKind`]
//!    (unavailable, full, corrupt, rejected, conflict); workers retry by that kind
//!    ([`retry`]), a full store makes the node not ready ([`health`]).
//! 5. **Answer**: a failure becomes [`http::ApiError`], the JSON error every route answers;
//!    times are rendered by [`timefmt`]; "now" comes from the injected [`Clock`] throughout.
//!
//! Backends held here: the embedded SQLite engine (group-committing writer, read pools,
//! checkpoints and background priority) and the MariaDB / MySQL connection layer (pools from a
//! URL, scratch databases for tests), with the sorting of their errors (and the file system's)
//! into kinds. Each subsystem's ports and tables, and the InfluxDB / Redis / Kafka clients,
//! live in that subsystem's crate.
//!
//! Modules:
//! - [`clock`]: injected time (`Arc<dyn Clock>`, Unix ms), so hot windows, TTLs and day
//!   boundaries are tested without sleeping.
//! - [`hlc`]: the hybrid logical clock nodes time their shared rules with (seed 000, step 3).
//! - [`day`]: UTC days ([`day::Day`]), the partition unit of link records and raw events.
//! - [`sqlite`]: the embedded engine: [`sqlite::GroupWriter`] (group commit), read pools,
//!   checkpoints off the commit path, [`sqlite::SqliteError`].
//! - [`engine`]: whether a store key names the embedded SQLite store or a shared engine's URL,
//!   and the keys a multi-node configuration must move to a shared engine.
//! - [`lease`]: the holder name a process takes its leases under.
//! - [`mysql`]: the production relational engine (MariaDB / MySQL): a pool from a URL, URL
//!   redaction for messages, and scratch databases for tests (`testing` feature).
//! - [`schema`]: versioned schemas: each store's ordered migrations, run at open (SQLite's
//!   `user_version`, a version table on MariaDB), and a store of a newer build refused.
//! - [`store`]: [`store::StoreError`], the one error every storage port returns, whatever
//!   engine (SQLite, MariaDB, Redis, Kafka, InfluxDB) is behind it, with its source and its
//!   [`store::ErrorKind`].
//! - [`retry`]: the rule background workers follow after a failed pass, by that kind.
//! - [`health`]: stores marked full until a write to them succeeds, for `/readyz`.
//! - [`http`]: the JSON error shape `{"error": {"code", "message"}}`, body and query
//!   extractors that turn every bad request into such a 4xx, the request size limit, and
//!   per-tenant API-key auth.
//! - [`body`]: request bodies as sent (gzip or not), inflated up to a limit.
//! - [`cpu`]: the bounded pool that decodes large bodies and renders mailings off the
//!   runtime's worker threads.
//! - [`json`]: duplicate keys in a JSON object refused, at any depth.
//! - [`openapi`]: the OpenAPI error schema, the answers common to every `/v1` operation and
//!   the bearer security scheme, for the document each subsystem contributes to.
//! - [`page`]: self-contained HTML pages for people (the dashboards) and their policy.
//! - [`timefmt`]: RFC 3339 rendering of Unix-millisecond timestamps.
//! - [`user_token`]: chat user tokens (JWTs a marketplace backend signs for one user) and their
//!   verification.
//! - [`throttle`]: at most one log line per second for errors that repeat on every request.
//!
//! The `testing` feature adds what only tests and benchmarks use (scratch databases, the test
//! MariaDB's URL, shared assertions); the product is built without it.

pub mod body;
pub mod clock;
pub mod cpu;
pub mod day;
pub mod engine;
pub mod health;
pub mod hlc;
pub mod http;
pub mod json;
pub mod lease;
pub mod mysql;
pub mod openapi;
pub mod page;
pub mod retry;
pub mod schema;
pub mod sqlite;
pub mod store;
pub mod throttle;
pub mod timefmt;
pub mod user_token;

pub use clock::{Clock, ManualClock, SystemClock};
