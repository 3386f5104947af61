//! The links ports: the day-partitioned link store and the mailing store (mailings,
//! suppression list). The embedded default implements both on SQLite ([`crate::sqlite`]).

use std::collections::HashSet;

use async_trait::async_trait;
use tidemark_core::day::Day;

use crate::error::Result;
use crate::id::LinkId;
use crate::model::{LinkRecord, Lookup, Mailing};
use crate::stats::{Delivery, StatsHit, StoredStats};

/// Link records, one partition per UTC day, appended in time order.
#[async_trait]
pub trait LinkStore: Send + Sync + std::fmt::Debug {
    /// Stores records in one batch (all or nothing). Each goes to the partition of its id's day.
    async fn insert(&self, records: Vec<LinkRecord>) -> Result<()>;

    /// Reads exactly one partition: the day `id` carries. `oldest_kept` is the first day still
    /// within retention; older ids are [`Lookup::Expired`] without any read.
    async fn lookup(&self, id: &LinkId, oldest_kept: Day) -> Result<Lookup>;

    /// Creates the partitions of `days` that do not exist yet.
    async fn create_partitions(&self, days: &[Day]) -> Result<()>;

    /// Drops every partition older than `oldest_kept`, whole; returns the days dropped.
    async fn drop_partitions_before(&self, oldest_kept: Day) -> Result<Vec<Day>>;

    /// The days that have a partition, ascending.
    async fn partitions(&self) -> Result<Vec<Day>>;

    /// Number of records in one day's partition (0 if none).
    async fn count(&self, day: Day) -> Result<u64>;
}

/// Mailings, the suppression list, and each mailing's campaign-statistics summary (whose
/// counting rules are [`crate::stats`]'s: a store only writes what [`crate::stats::tally`]
/// computes).
#[async_trait]
pub trait MailingStore: Send + Sync + std::fmt::Debug {
    /// Stores a new mailing.
    async fn create_mailing(&self, mailing: Mailing) -> Result<()>;
    /// The tenant's mailing, if any.
    async fn mailing(&self, tenant: &str, mailing_id: &str) -> Result<Option<Mailing>>;
    /// The mailing of this id, whichever tenant owns it (ids are UUIDs, unique across
    /// tenants): what an unsubscribe, which knows only the mailing, acts for.
    async fn mailing_by_id(&self, mailing_id: &str) -> Result<Option<Mailing>>;
    /// Adds addresses (normalised to lower case) to the tenant's suppression list.
    async fn suppress(&self, tenant: &str, emails: &[String]) -> Result<()>;
    /// Removes an address; returns whether it was there.
    async fn unsuppress(&self, tenant: &str, email: &str) -> Result<bool>;
    /// Which of `emails` (lower case) are suppressed.
    async fn suppressed(&self, tenant: &str, emails: &[String]) -> Result<HashSet<String>>;

    /// Adds `counts` (counter name → amount, [`crate::stats::counter`]) to the summary of
    /// `mailing_id`, and keeps the URL of each link position of `links` it has none for
    /// (the first render's), in one transaction.
    async fn add_counts(
        &self,
        mailing_id: &str,
        counts: &[(String, i64)],
        links: &[(u32, String)],
    ) -> Result<()>;
    /// Records the sending pool's outcomes in one transaction: the `delivered` and `failed`
    /// counters, and each delivered recipient's time (for the machine-open rule), forgetting
    /// times older than [`crate::stats::DELIVERIES_KEPT_MS`] before `now_ms`.
    async fn record_deliveries(&self, deliveries: Vec<Delivery>, now_ms: i64) -> Result<()>;
    /// Applies a group of hits once, in one transaction: `false` (and nothing written) if
    /// `group_id` was applied before; otherwise reads the delivery times of its recipients,
    /// [`crate::stats::tally`]s the hits, adds the counters and hours, adds the recipients
    /// not seen before to the uniques, and returns `true`. Group ids older than
    /// [`crate::stats::HIT_GROUPS_KEPT_MS`] before `now_ms` are forgotten.
    async fn apply_hits(&self, group_id: &str, hits: Vec<StatsHit>, now_ms: i64) -> Result<bool>;
    /// The stored summary of `mailing_id` (empty for a mailing with none yet).
    async fn stats(&self, mailing_id: &str) -> Result<StoredStats>;
}
