//! Backfill (seed 000: "the backfill tool"; DESIGN.md "Many nodes"): archives the hot history
//! that the outbox no longer covers, so that an archiver refused by the start rule can go on.
//!
//! The start rule ([`crate::archiver::start_position`]) refuses a partition whose stored
//! position lies outside the log — an archiver down longer than the outbox retention, whose
//! unarchived records the broker dropped — or that has none while the log no longer starts at
//! 0. What those records held is still in the hot tier: nothing is trimmed before it is
//! archived, and the partition's watermark has not moved since.
//!
//! Data flow ([`backfill`]), for the partitions the start rule refuses:
//! 1. note each one's `low` now;
//! 2. copy every archivable hot record of their conversations into the archive
//!    ([`crate::ports::HotStore::archivable_page`]), a page at a time: records first, then
//!    index entries (seed 000: index after record); both are idempotent inserts, so a run that
//!    stops half-way is simply run again;
//! 3. record that the archive holds each one through that `low`
//!    ([`crate::ports::Archive::archived_through`]) and store its position there: the
//!    archiver archives the log from `low` on, and everything below it that was not trimmed
//!    is in the archive by step 2.
//!
//! History written in `hot-only` mode is not this tool's: a tiered start appends it to the
//! outbox ([`crate::recovery::backfill_untracked`]) and the archiver takes it from there.

use std::collections::BTreeMap;

use crate::archiver::{ARCHIVER_CONSUMER, start_position};
use crate::error::Result;
use crate::model::MessageRecord;
use crate::ports::{Archive, HotStore, Outbox, partition_of};

/// Hot records per page (each page is one archive write of records, then one of entries).
pub const PAGE: usize = 1_000;

/// What [`backfill`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackfillReport {
    /// The partitions the start rule refused, with the position each was given (its `low`).
    pub positions: BTreeMap<u32, u64>,
    /// Hot records copied into the archive (their index entries with them).
    pub records: u64,
    /// Hot records looked at (of every partition).
    pub scanned: u64,
}

/// Runs the backfill (see the module docs) and returns what it did; nothing to do (every
/// partition passes the start rule) is an empty report. `progress` is called after each page
/// with the records scanned so far.
///
/// # Errors
/// A store's: nothing is stored past what was written, and running it again is safe.
pub async fn backfill(
    hot: &dyn HotStore,
    outbox: &dyn Outbox,
    archive: &dyn Archive,
    mut progress: impl FnMut(u64),
) -> Result<BackfillReport> {
    let mut report = BackfillReport::default();
    for partition in 0..outbox.partitions() {
        let stored = outbox.position(ARCHIVER_CONSUMER, partition).await?;
        let (low, high) = outbox.offsets(partition).await?;
        if start_position(partition, stored, low, high).is_err() {
            report.positions.insert(partition, low);
        }
    }
    if report.positions.is_empty() {
        return Ok(report);
    }
    let partitions = outbox.partitions();
    let mut cursor = None;
    loop {
        let (page, next) = hot.archivable_page(cursor, PAGE).await?;
        report.scanned += page.len() as u64;
        let wanted: Vec<MessageRecord> = page
            .into_iter()
            .filter(|r| {
                let p = partition_of(&r.tenant, &r.conversation_id, partitions);
                report.positions.contains_key(&p)
            })
            .collect();
        if !wanted.is_empty() {
            archive.put_records(&wanted).await?;
            let index: Vec<_> = wanted.iter().map(MessageRecord::index_entry).collect();
            archive.put_index(&index, None).await?;
            report.records += wanted.len() as u64;
        }
        progress(report.scanned);
        match next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    for (&partition, &low) in &report.positions {
        // The archive now holds the partition below `low` (copied above, or archived before
        // it was trimmed): recorded as such, the archiver's start takes it at its word.
        archive.put_index(&[], Some((partition, low))).await?;
        outbox
            .store_position(ARCHIVER_CONSUMER, partition, low)
            .await?;
    }
    Ok(report)
}
