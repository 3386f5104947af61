//! The archiver (DESIGN.md part A "Archiver", seed 000 decision 2).
//!
//! Consumes the outbox with its own position, stored through [`Outbox::store_position`] beside
//! the log it indexes: for the embedded default in `hot.db`, for a Redis hot store's SQLite
//! outbox in `outbox.db`, for a Kafka-protocol outbox as the committed offset of the consumer
//! group `tidemark.archiver` ([`crate::kafka`]). The position must survive the archiver and move
//! only with the log: a log that was recreated or truncated past it shows up as a position
//! outside `[low, high]`, and the start rule below refuses to start.
//!
//! Start rule: a stored position must lie in `[low, high]`; with none stored the outbox must
//! start at 0; otherwise the archiver refuses to start, naming `tidemark chat backfill`
//! ([`crate::backfill`]). And the archive must have reached the position
//! ([`resume_behind_archive`]): one restored from an older copy of itself is caught up from
//! the outbox, or refused if the outbox can no longer give back
//! what it lacks.
//!
//! Per batch (at most `archive_batch_max` records and about [`DEFAULT_BATCH_BYTES_MAX`] of
//! bodies):
//! 1. read `T0` from the node's HLC and raise the hot store's clock floor to it
//!    ([`HotStore::raise_clock_floor`]): every commit marked from then on, on any node, is
//!    scored from a time ≥ `T0`, however its node's clock lags;
//! 2. take `H0` ([`Outbox::watermark_snapshot`]);
//! 3. write all records, then their index entries with how far the batch reaches
//!    ([`Archive::archived_through`]), and only when both are acknowledged store the new
//!    position. Any failure stores nothing and the batch is replayed.
//! 4. Once the stored position is ≥ H0, publish the watermark `T = T0`: every message
//!    committed before T is in the archive.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tidemark_core::clock::SharedClock;
use tidemark_core::health::StoreHealth;
use tidemark_core::retry::Retry;
use tokio_util::sync::CancellationToken;

use crate::error::{ChatError, Result};
use crate::health::ARCHIVE_STORE;
use crate::metrics::ChatMetrics;
use crate::model::MessageRecord;
use crate::ports::{Archive, HotStore, Outbox};

/// The consumer name the archiver stores its position under.
pub const ARCHIVER_CONSUMER: &str = "archiver";

/// Most bytes of message bodies per batch by default (16 MiB): a batch is held in memory a
/// few times over while it is written, and `archive_batch_max` records of bodies up to
/// `max_body_bytes` (64 KiB) would be 160 MiB per copy at the defaults. The batch stops at
/// the record that reaches it (so it holds at least one record).
pub const DEFAULT_BATCH_BYTES_MAX: usize = 16 << 20;

/// Records per [`Outbox::fetch`] call while a batch is gathered: what one read may hold in
/// memory beyond [`DEFAULT_BATCH_BYTES_MAX`] is one page.
const FETCH_PAGE: usize = 256;

/// The archiver of one outbox partition: its position and the stores it moves data between.
#[derive(Debug)]
pub struct Archiver {
    partition: u32,
    outbox: Arc<dyn Outbox>,
    archive: Arc<dyn Archive>,
    hot: Arc<dyn HotStore>,
    clock: SharedClock,
    batch_max: usize,
    batch_bytes_max: usize,
    metrics: ChatMetrics,
    position: u64,
    /// Where its writes are reported ([`Archiver::with_store_health`]).
    health: StoreHealth,
}

/// Applies the start rule to outbox `partition`'s stored position and `(low, high)`.
pub fn start_position(partition: u32, stored: Option<u64>, low: u64, high: u64) -> Result<u64> {
    match stored {
        Some(p) if (low..=high).contains(&p) => Ok(p),
        Some(position) => Err(ChatError::PositionOutOfRange {
            partition,
            position,
            low,
            high,
        }),
        None if low == 0 => Ok(0),
        None => Err(ChatError::BackfillNeeded { partition, low }),
    }
}

/// The watermark T of the whole outbox: the least of its partitions' `T_p` (DESIGN.md "Many
/// nodes": every message committed before it is archived, whatever its partition), `None`
/// while any of the `partitions` has none — a partition never archived, or unowned since the
/// start, holds trimming back, as a stalled one does by keeping its `T_p`.
pub fn watermark(watermarks: &BTreeMap<u32, i64>, partitions: u32) -> Option<i64> {
    (0..partitions.max(1))
        .map(|p| watermarks.get(&p).copied())
        .min()
        .flatten()
}

/// Start rule, second part: where the archiver starts when the archive has not reached its
/// stored `position` ([`Archive::archived_through`] below it).
///
/// That happens only to an archive restored from an older copy of itself: it passes the
/// identity check ([`crate::stores::check_archive`]) but lacks what was archived after the
/// copy, and reads would answer 200 without those messages, for good. If the outbox can still
/// give back the records from where the archive stops, the
/// archiver starts there and writes them again (idempotently). If it cannot (the embedded
/// outbox refers to hot-tier records, and those behind the watermark were trimmed; a broker
/// may have dropped them), what the archive lacks is in no store the archiver can read:
/// [`ChatError::WrongArchive`]. An archive that records nothing (`archived_through` is `None`)
/// is taken at its word.
///
/// # Errors
/// [`ChatError::WrongArchive`], or a store's own.
pub async fn resume_behind_archive(
    outbox: &dyn Outbox,
    archive: &dyn Archive,
    partition: u32,
    low: u64,
    position: u64,
) -> Result<u64> {
    let through = match archive.archived_through(partition).await? {
        Some(through) if through < position => through,
        _ => return Ok(position),
    };
    let behind = |why: String| {
        ChatError::WrongArchive(format!(
            "the archive holds what the archiver wrote below outbox offset {through}, not up to its position {position} (restored from an older copy?), and {why}: restore a newer copy of the archive"
        ))
    };
    if through < low {
        return Err(behind(format!("the outbox now starts at offset {low}")));
    }
    match outbox.fetch(partition, through, 1).await {
        Ok(_) => {
            tracing::warn!(
                position,
                from = through,
                "the archive has not reached the archiver's position (restored from an older copy?): archiving the outbox again from where it stops"
            );
            Ok(through)
        }
        Err(e) => Err(behind(format!(
            "the outbox cannot give those records back ({e})"
        ))),
    }
}

/// What one [`Archiver::run_once`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchOutcome {
    /// Records archived in this batch.
    pub archived: usize,
    /// Whether the watermark was published (the archiver had caught up to H0).
    pub watermark_published: bool,
    /// Whether a limit (records or bytes) ended the batch, so more may be waiting.
    pub full: bool,
}

impl Archiver {
    /// Checks the start rule for outbox `partition` and positions its archiver there.
    pub async fn start(
        partition: u32,
        outbox: Arc<dyn Outbox>,
        archive: Arc<dyn Archive>,
        hot: Arc<dyn HotStore>,
        clock: SharedClock,
        batch_max: usize,
        metrics: ChatMetrics,
    ) -> Result<Self> {
        let stored = outbox.position(ARCHIVER_CONSUMER, partition).await?;
        let (low, high) = outbox.offsets(partition).await?;
        let position = start_position(partition, stored, low, high)?;
        let position =
            resume_behind_archive(outbox.as_ref(), archive.as_ref(), partition, low, position)
                .await?;
        Ok(Self {
            partition,
            outbox,
            archive,
            hot,
            clock,
            batch_max: batch_max.max(1),
            batch_bytes_max: DEFAULT_BATCH_BYTES_MAX,
            metrics,
            position,
            health: StoreHealth::default(),
        })
    }

    /// Reports its batches to `health`, the node's, under [`crate::health::ARCHIVE_STORE`]: a
    /// full archive makes the node not ready until a batch of records is written.
    #[must_use]
    pub fn with_store_health(mut self, health: StoreHealth) -> Self {
        self.health = health;
        self
    }

    /// Sets the most bytes of message bodies per batch (default [`DEFAULT_BATCH_BYTES_MAX`]).
    /// With the `testing` feature only: tests make batches split early.
    #[cfg(feature = "testing")]
    #[must_use]
    pub fn with_batch_bytes_max(mut self, bytes: usize) -> Self {
        self.batch_bytes_max = bytes;
        self
    }

    /// The next outbox offset to archive.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The outbox partition it archives.
    pub fn partition(&self) -> u32 {
        self.partition
    }

    /// Archives one batch. On error nothing was stored and the same batch is read again next time.
    pub async fn run_once(&mut self) -> Result<BatchOutcome> {
        // The fence: from here on every commit on every node is scored from a time ≥ `fence`
        // (HotStore::raise_clock_floor), so a message appended after H0 below cannot be
        // trimmed on the strength of a T ≤ `fence`, whatever the clock of its node.
        let fence = self.clock.now_ms();
        self.hot.raise_clock_floor(fence).await?;
        let (t0, h0) = self
            .outbox
            .watermark_snapshot(self.partition, &self.clock)
            .await?;
        let t0 = t0.min(fence);
        let (batch, full) = self.fetch_batch().await?;
        let mut archived = 0;
        if let Some(&(last_offset, _)) = batch.last() {
            let records: Vec<MessageRecord> = batch.into_iter().map(|(_, r)| r).collect();
            // Records first, then the index: an index entry is never visible without its record.
            self.archive.put_records(&records).await?;
            let index: Vec<_> = records.iter().map(MessageRecord::index_entry).collect();
            self.archive
                .put_index(&index, Some((self.partition, last_offset + 1)))
                .await?;
            self.outbox
                .store_position(ARCHIVER_CONSUMER, self.partition, last_offset + 1)
                .await?;
            self.position = last_offset + 1;
            archived = records.len();
            self.metrics
                .archived(self.partition)
                .inc_by(archived as u64);
        }
        let watermark_published = self.position >= h0;
        if watermark_published {
            self.hot.publish_watermark(self.partition, t0).await?;
            if self.outbox.partitions() == 1 {
                // T itself; with several partitions it is their least, which the gauge
                // refresh reads (trimmer::measure_archive).
                self.metrics.watermark_ms.set(t0);
            }
        }
        Ok(BatchOutcome {
            archived,
            watermark_published,
            full,
        })
    }

    /// The next batch, read from the position on in pages of [`FETCH_PAGE`] records: until it
    /// holds `batch_max` records, or `batch_bytes_max` bytes of bodies, or the log ends.
    /// Returns it and whether a limit ended it.
    async fn fetch_batch(&self) -> Result<(Vec<(u64, MessageRecord)>, bool)> {
        let mut batch = Vec::new();
        let mut bytes = 0;
        let mut from = self.position;
        loop {
            let want = (self.batch_max - batch.len()).min(FETCH_PAGE);
            let page = self.outbox.fetch(self.partition, from, want).await?;
            let log_ended = page.len() < want;
            for (offset, record) in page {
                if bytes >= self.batch_bytes_max {
                    // The rest of the page is read again by the next batch.
                    return Ok((batch, true));
                }
                bytes += record.body.len();
                from = offset + 1;
                batch.push((offset, record));
            }
            if batch.len() >= self.batch_max || bytes >= self.batch_bytes_max {
                return Ok((batch, true));
            }
            if log_ended {
                return Ok((batch, false));
            }
        }
    }

    /// Runs until `cancel`: batches back to back while a limit ends them (a backlog), an
    /// `idle` sleep after a batch that the end of the log ended (caught up), and after a
    /// failure the workers' rule ([`tidemark_core::retry`]): a retryable one (a store
    /// unavailable or full: space may come back) is retried with a back-off from 100 ms up to
    /// 5 s, any other once a minute, logged once. The failed batch is never skipped: the
    /// watermark waits for it.
    ///
    /// Pacing by fullness keeps the archiver's cost per message low when it keeps up: under a
    /// steady load it wakes every `idle` for one batch of about `rate × idle` records, instead of
    /// chasing each commit with a batch of a few records — each batch costs a watermark snapshot
    /// and a position write on the hot store's writer and a commit (fsync) of the archive, and
    /// pages shared by the records of one batch are written once (at 5,000 sends/s a chasing
    /// archiver's small batches wrote about as many bytes to disk as the sends did).
    /// The same holds past that: the archive's indexes are keyed by conversation, so a batch
    /// of a few hundred records dirties nearly one index page per record, a batch of a few
    /// thousand far fewer — but commits them in one burst of disk writes, which the SEND path's
    /// fsyncs then queue behind. `tiered` on the embedded engine at 5,000 sends/s:
    /// with `idle` 1 s (batches up to 20,000) instead of 50 ms (up to 1,000) the archive's WAL
    /// writes fell from 44 to 13 MB/s and its writer's CPU from 13 % to 7 % of a core; at
    /// 10,000 sends/s from 84–92 to 23–26 MB/s and 27 % to 10 %. On disk, though, SEND_ACK p99
    /// at 10,000 sends/s was 49 / 49 / 117 ms with 1 s, 14 / 33 / 25 ms with 250 ms and
    /// 49 / 306 / 24 ms with 50 ms (three rounds): hence the default of 250 ms.
    ///
    /// A batch's burst weighs more than the index pages a larger one shares: the default
    /// `archive_batch_max` is 500, not one `idle` of sends (2,500 at 10,000 sends/s), so that
    /// from 2,000 sends/s on the archiver runs batch after batch of one short archive
    /// transaction each. In a trace of one 10,000 sends/s run (each request's latency against
    /// the archive writer's transactions) the SEND stalls over 20 ms came with archive commits
    /// of up to 74 ms. Four interleaved pairs, `archive_batch_max` 2,500 → 500, `tiered`
    /// p99 at 10,000 sends/s 103.6 / 33.1 / 32.6 / 39.7 → 36.9 / 23.1 / 49.9 / 11.5 ms
    /// (requests not sent 2,938 / 356 / 576 / 0 → 297 / 0 / 451 / 154), at 5,000 sends/s
    /// 5.8 / 4.4 / 4.0 / 5.4 → 5.4 / 3.1 / 3.8 / 3.1 ms; the archive kept up in both.
    pub async fn run(mut self, idle: Duration, cancel: CancellationToken) {
        let mut retry = Retry::new(
            "chat archiver",
            Duration::from_millis(100),
            Duration::from_secs(5),
        );
        loop {
            let pause = match self.run_once().await {
                Ok(outcome) => {
                    retry.succeeded();
                    if outcome.archived > 0 {
                        self.health.wrote(ARCHIVE_STORE);
                    }
                    pause_after(outcome.full, idle)
                }
                Err(ChatError::PartitionLost { partition }) => {
                    // Another node's archiver owns it now and goes on from the last position.
                    tracing::info!(partition, "outbox partition lost: its archiver stops");
                    return;
                }
                Err(error) => {
                    self.health.failed(ARCHIVE_STORE, &error);
                    self.metrics.archive_failures.inc();
                    let what = format!(
                        "batch from outbox partition {} offset {}: {error}",
                        self.partition, self.position
                    );
                    retry.failed(&what, error.is_retryable())
                }
            };
            if pause.is_zero() {
                if cancel.is_cancelled() {
                    return;
                }
                continue;
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }
}

/// The pause after a batch (see [`Archiver::run`]): none after one that a limit ended (a
/// backlog), `idle` otherwise.
fn pause_after(full: bool, idle: Duration) -> Duration {
    if full { Duration::ZERO } else { idle }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_unless_a_limit_ended_the_batch() {
        let idle = Duration::from_millis(50);
        assert_eq!(pause_after(true, idle), Duration::ZERO);
        assert_eq!(pause_after(false, idle), idle);
    }

    #[test]
    fn start_rule() {
        assert_eq!(start_position(0, None, 0, 10).unwrap(), 0);
        assert_eq!(start_position(0, Some(4), 0, 10).unwrap(), 4);
        assert_eq!(start_position(0, Some(10), 3, 10).unwrap(), 10);
        assert!(matches!(
            start_position(1, None, 3, 10),
            Err(ChatError::BackfillNeeded {
                partition: 1,
                low: 3
            })
        ));
        let refused = start_position(2, Some(2), 3, 10).unwrap_err();
        assert!(matches!(
            refused,
            ChatError::PositionOutOfRange {
                partition: 2,
                position: 2,
                low: 3,
                high: 10
            }
        ));
        assert_eq!(
            refused.to_string(),
            "archiver refuses to start: stored position 2 is outside outbox partition 2's range [3, 10]; archive what the outbox no longer holds with `tidemark chat backfill`"
        );
        assert!(start_position(0, Some(11), 3, 10).is_err());
    }
}
