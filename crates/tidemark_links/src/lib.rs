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
//!    carry, in one batch, before the call returns.
//! 4. **Send** ([`send`]): rendered messages go to the sending pool (SMTP relays, or `.eml`
//!    files on the embedded default).
//! 5. **Redirect** ([`redirect`]): `/c/<id>` → 302 to the stored URL, `/o/<id>` → 1×1 GIF; the
//!    id is validated before any read, the lookup reads one partition, and the click or open is
//!    recorded as an analytics event from that one row; [`user_agent`] tells bots, scanners
//!    and image proxies from people.
//! 6. **Retention** ([`partitions`]): whole day partitions are created ahead and dropped when
//!    they expire.
//!
//! The link store has an embedded default ([`sqlite`], a table per day) and a production
//! engine ([`mysql`], MariaDB `PARTITION BY RANGE` per day); `conformance`, with the `testing`
//! feature (tests only, never the product), checks both. The versions of their schemas are in
//! `migrations`.

pub mod builder;
pub mod config;
#[cfg(feature = "testing")]
pub mod conformance;
pub mod error;
pub mod http;
pub mod id;
pub mod metrics;
mod migrations;
pub mod model;
pub mod mysql;
pub mod partitions;
pub mod redirect;
pub mod render;
pub mod rewrite;
pub mod rules;
pub mod send;
pub mod service;
pub mod sqlite;
pub mod store;
pub mod user_agent;
