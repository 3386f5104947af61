//! The links ports: the day-partitioned link store and the mailing store (mailings,
//! suppression list). The embedded default implements both on SQLite ([`crate::sqlite`]).

use std::collections::HashSet;

use async_trait::async_trait;
use tidemark_core::day::UtcDay;

use crate::error::Result;
use crate::id::LinkId;
use crate::model::{LinkRecord, Lookup, Mailing};

/// Link records, one partition per UTC day, appended in time order.
#[async_trait]
pub trait LinkStore: Send + Sync + std::fmt::Debug {
    /// Stores records in one batch (all or nothing). Each goes to the partition of its id's day.
    async fn insert(&self, records: Vec<LinkRecord>) -> Result<()>;

    /// Reads exactly one partition: the day `id` carries. `oldest_kept` is the first day still
    /// within retention; older ids are [`Lookup::Expired`] without any read.
    async fn lookup(&self, id: &LinkId, oldest_kept: UtcDay) -> Result<Lookup>;

    /// Creates the partitions of `days` that do not exist yet.
    async fn create_partitions(&self, days: &[UtcDay]) -> Result<()>;

    /// Drops every partition older than `oldest_kept`, whole; returns the days dropped.
    async fn drop_partitions_before(&self, oldest_kept: UtcDay) -> Result<Vec<UtcDay>>;

    /// The days that have a partition, ascending.
    async fn partitions(&self) -> Result<Vec<UtcDay>>;

    /// Number of records in one day's partition (0 if none).
    async fn count(&self, day: UtcDay) -> Result<u64>;
}

/// Mailings and the suppression list.
#[async_trait]
pub trait MailingStore: Send + Sync + std::fmt::Debug {
    /// Stores a new mailing.
    async fn create_mailing(&self, mailing: Mailing) -> Result<()>;
    /// The tenant's mailing, if any.
    async fn mailing(&self, tenant: &str, mailing_id: &str) -> Result<Option<Mailing>>;
    /// Adds addresses (normalised to lower case) to the tenant's suppression list.
    async fn suppress(&self, tenant: &str, emails: &[String]) -> Result<()>;
    /// Removes an address; returns whether it was there.
    async fn unsuppress(&self, tenant: &str, email: &str) -> Result<bool>;
    /// Which of `emails` (lower case) are suppressed.
    async fn suppressed(&self, tenant: &str, emails: &[String]) -> Result<HashSet<String>>;
}
