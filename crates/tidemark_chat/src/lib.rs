//! Tidemark chat: message history with a hot tier and an archive (DESIGN.md part A, seed 000).
//!
//! Data flow:
//! 1. **Commit** ([`commit`]): SEND → dedup, dense `conversation_seq`, record, outbox append,
//!    COMMITTED + hot index + trim candidate → SEND_ACK only once the outbox is durable. On the
//!    embedded default this is one group-committed SQLite transaction.
//! 2. **Archive** ([`archiver`]): one archiver per outbox partition consumes it from its own
//!    position, writes records then index entries (idempotent), stores the position and
//!    publishes the partition's watermark; T is the least of them.
//! 3. **Trim** ([`trimmer`]): removes hot records behind T (never what is not archived) and
//!    raises each conversation's floor F.
//! 4. **Read** ([`reads`]): seq > F from the hot tier, seq ≤ F from the archive, merged; any
//!    missing record fails the whole request.
//! 5. **Recover** ([`recovery`]): re-publishes records a crash left RESERVED, and backfills
//!    into the outbox history a `hot-only` run left untracked.
//! 6. **Contact** ([`contact`]): the first committed message about a listing becomes one
//!    `contact` event for the events subsystem.
//! 7. **Deliver** ([`stream`]): an acknowledged SEND wakes its members' live streams, which
//!    read it through the tiered reads and send it in seq order; a client resumes from the
//!    position of the last event it got.
//!
//! Three ports ([`ports`]: hot store, outbox, archive) keep the storage apart from these rules;
//! [`stores`] picks each one's backend by URL:
//! - **SQLite**, the embedded default ([`sqlite`]): hot tier and outbox together in `hot.db`
//!   (a SEND is one group-committed transaction), the archive in `archive.db`, and an outbox
//!   file of its own (`outbox.db`) beside a Redis hot tier when no broker is named.
//! - **Redis** hot tier ([`redis`]): one Redis 7 or a Redis Cluster, AOF `appendfsync always`,
//!   one Lua script per atomic step, a conversation's keys under its shard's hash tag (one
//!   slot per script).
//! - **Kafka-protocol** outbox ([`kafka`]): a topic of `chat.outbox_partitions` partitions,
//!   a conversation's records in one of them; each partition's archiver position is its
//!   consumer group's committed offset.
//! - **MariaDB / MySQL** archive ([`mysql`]).
//!
//! Modules (the steps above are shared code: a backend only stores):
//! - `archiver`: outbox → archive in idempotent batches; start rule; watermark T.
//! - `archivers`: one archiver per outbox partition the node owns, following ownership.
//! - `backfill`: archives the hot history an outbox no longer covers, so that an archiver the
//!   start rule refused can go on (`tidemark chat backfill`).
//! - `commit`: the SEND path, fused (one transaction) or staged (reserve, append, commit).
//! - `config`: `[chat]` settings and the modes `tiered`, `hot-only`, `sync-archive`.
//! - `contact`: the first message about a listing → one `contact` event.
//! - `error`: [`ChatError`] and its HTTP status.
//! - `health`: whether commits work, for `/readyz`; the chat stores' names in the node's
//!   store health.
//! - `http`: the `/v1` conversation and message routes.
//! - `kafka`: the Kafka-protocol outbox.
//! - `leases`: a node's leases on the hot store's shards, with fencing tokens, for its
//!   trimmer and recovery worker.
//! - `metrics`: chat's Prometheus metrics.
//! - `model`: sends, message records, acknowledgements, conversations.
//! - `mysql`: the MariaDB / MySQL archive.
//! - `ports`: the hot store, outbox and archive traits.
//! - `reads`: tiered history pages and unread counts across F.
//! - `recovery`: re-publishing RESERVED records; backfill of untracked history.
//! - `redis`: the Redis hot tier (key layout in `redis::keys`).
//! - `service`: the chat API the routes call (validation, membership, background workers).
//! - `sqlite`: the embedded hot tier + outbox, outbox file and archive.
//! - `stores`: the backend of each port by URL, and the hot tier ↔ archive startup check.
//! - `stream`: live delivery (SSE) of committed messages and read-pointer moves, with
//!   gap-free resume by position.
//! - `trimmer`: hot-tier trimming behind T, and the expiry chores of outbox and archive.
//!
//! The `testing` feature (tests and benchmarks only, never the product) adds:
//! - `conformance`: one suite per port that every backend's tests run.
//! - `failpoint`: the crash tests' stops in the commit path.
//! - `testing`: fault-injecting port wrappers; private `redis-server`, tansu and `mariadbd`
//!   processes.

pub mod archiver;
pub mod archivers;
pub mod backfill;
pub mod commit;
pub mod config;
#[cfg(feature = "testing")]
pub mod conformance;
pub mod contact;
pub mod error;
#[cfg(feature = "testing")]
pub mod failpoint;
pub mod health;
pub mod http;
pub mod kafka;
pub mod leases;
pub mod metrics;
pub mod model;
pub mod mysql;
pub mod ports;
pub mod reads;
pub mod recovery;
pub mod redis;
pub mod service;
pub mod sqlite;
pub mod stores;
pub mod stream;
#[cfg(feature = "testing")]
pub mod testing;
pub mod trimmer;

pub use config::{ChatConfig, ChatMode};
pub use error::ChatError;
pub use service::{ChatService, ChatStores};
