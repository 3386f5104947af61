//! Tidemark chat: message history with a hot tier and an archive (DESIGN.md part A, seed 000).
//!
//! Data flow:
//! 1. **Commit** ([`commit`]): SEND → dedup, dense `conversation_seq`, record, outbox append,
//!    COMMITTED + hot index + trim candidate → SEND_ACK only once the outbox is durable. On the
//!    embedded default this is one group-committed SQLite transaction.
//! 2. **Archive** ([`archiver`]): consumes the outbox from its own position, writes records then
//!    index entries (idempotent), stores the position, publishes the watermark T.
//! 3. **Trim** ([`trimmer`]): removes hot records behind T (never what is not archived) and
//!    raises each conversation's floor F.
//! 4. **Read** ([`reads`]): seq > F from the hot tier, seq ≤ F from the archive, merged; any
//!    missing record fails the whole request.
//! 5. **Recover** ([`recovery`]): re-publishes records a crash left RESERVED.
//! 6. **Contact** ([`contact`]): the first committed message about a listing becomes one
//!    `contact` event for the events subsystem.
//!
//! Ports ([`ports`]) keep the storage apart from these rules; [`sqlite`] is the embedded
//! backend, [`http`] the routes, [`service`] the API the routes call.
//!
//! The `testing` feature (tests and benchmarks only, never the product) adds `conformance` (one
//! suite per port), `testing` (fault-injecting ports, private `redis-server`, tansu and
//! `mariadbd` processes) and `failpoint` (the crash tests' stops in the commit path).

pub mod archiver;
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
#[cfg(feature = "testing")]
pub mod testing;
pub mod trimmer;

pub use config::{ChatConfig, ChatMode};
pub use error::ChatError;
pub use service::{ChatService, ChatStores};
