//! The trimmer (DESIGN.md part A "Trimmer", seed 000 decision 3), and the other expiry chores
//! of the hot tier, the outbox and the archive.
//!
//! A trim candidate (score `commit time + hot_window`) leaves the hot tier when
//! `score ≤ min(now, T + hot_window − outbox_recovery_window − safety_margin)`, T being the
//! archive watermark (taken as exclusive: the watermark bound is strict, see [`trim_cutoff`]).
//! No watermark, no trimming: a stalled archiver stops deletion and the
//! archive-lag metric grows. The store raises each conversation's floor F as it trims.
//!
//! The hot window of the watermark bound is the *smallest* window any candidate in the store
//! was scored with (DESIGN.md's rule assumes one window for ever): the store records every
//! window before a candidate is scored with it ([`crate::ports::HotStore::hot_window_floor`]).
//! A candidate scored `c + w` with `w` ≥ that floor `f` meets `c + w ≤ T − 1 + f − margins`
//! only if `c ≤ T − 1 − margins`: archived, whatever windows came and went. With today's
//! window in the bound instead, a raised window would let a message committed after T under
//! the old, smaller window leave the hot tier unarchived once it outlived the old window
//! (`tests/trim_passes.rs`, `a_raised_hot_window_never_trims_an_unarchived_message`).
//! The floor costs nothing while it is at least the margins plus the archive's lag: the `now`
//! bound binds first. Below that, trimming waits until the archive is `margins + lag − floor`
//! further along.
//!
//! A store that holds candidates but has no window recorded gets
//! [`first_recorded_window`] as its first floor, a bound on their windows that can be far
//! below the configured one (0 while one of them is overdue): trimming then waits the margins
//! plus the lag longer, on that store, until an operator who knows the windows used resets the
//! floor (SQLite: `DELETE FROM meta WHERE key = 'hot_window_floor'`, Redis:
//! `HDEL tm:meta hot_window_floor`; the next start records the configured window, and is
//! only safe if no candidate was ever scored with a smaller one). Where several processes share
//! one hot store (Redis), raise the window only once every one of them records its window
//! (`hot_window_floor`): a process that does not scores candidates without recording it.
//!
//! A node trims only the hot store shards it holds a lease on ([`crate::leases`]); the store
//! checks the lease in the same atomic step as each batch, so a node paused past its lease
//! trims nothing when it wakes.
//!
//! A pass works in batches of `trim_batch` and goes on until nothing eligible is left, however
//! large the backlog (the first pass after a week's downtime); shutdown does not wait for it:
//! a pass stops between two batches once it is cancelled ([`Trimmer::run_pass`]), and the
//! next start goes on where it stopped.

use std::sync::Arc;
use std::time::Duration;

use tidemark_core::clock::SharedClock;
use tidemark_core::health::StoreHealth;
use tidemark_core::retry::Retry;
use tokio_util::sync::CancellationToken;

use crate::archiver::{ARCHIVER_CONSUMER, watermark};
use crate::config::ChatConfig;
use crate::error::{ChatError, Result};
use crate::health::HOT_STORE;
use crate::leases::ShardLeases;
use crate::metrics::ChatMetrics;
use crate::ports::{Archive, HotStore, Outbox};

/// How long after its expiry an ephemeral message's archive record is purged. Reads hide it
/// from the instant it expires; the grace is for a read that found its index entry unexpired
/// just before that instant and asks for the record just after: it still finds it, instead of
/// an unexpired entry without its record (which fails a read as corruption).
pub const EXPIRED_RECORD_GRACE: Duration = Duration::from_secs(60);

/// The window a store records as its first floor ([`HotStore::hot_window_floor`]):
/// `hot_window_ms`, or, if it already holds candidates (`oldest_score_ms`, the smallest score,
/// Some) that a build which recorded no windows scored, at most `oldest − now`, never below 0.
/// A candidate's window is its score minus its commit time, and commit times are ≤ now, so
/// that bounds every one of their windows from below.
pub fn first_recorded_window(hot_window_ms: i64, oldest_score_ms: Option<i64>, now_ms: i64) -> i64 {
    match oldest_score_ms {
        Some(oldest) => hot_window_ms.min((oldest - now_ms).max(0)),
        None => hot_window_ms,
    }
}

/// The trim cutoff (a score, Unix ms) for `now_ms` and watermark `watermark_ms`, or `None` if
/// nothing may be trimmed (no watermark yet). `hot_window_floor_ms` is the smallest hot window
/// the store's candidates were scored with ([`crate::ports::HotStore::hot_window_floor`]; see
/// the module docs).
///
/// T is exclusive: only messages committed *before* T are known to be archived (one committed
/// in T's own millisecond, after the archiver's snapshot, may not be), so the watermark bound
/// is `T − 1 ms + hot_window_floor − outbox_recovery_window − safety_margin`. Without the 1 ms,
/// zero margins would trim such a message unarchived.
pub fn trim_cutoff(
    now_ms: i64,
    watermark_ms: Option<i64>,
    hot_window_floor_ms: i64,
    cfg: &ChatConfig,
) -> Option<i64> {
    let t = watermark_ms?;
    let ms = |d: Duration| d.as_millis() as i64;
    let by_watermark =
        t - 1 + hot_window_floor_ms - ms(cfg.outbox_recovery_window) - ms(cfg.safety_margin);
    Some(now_ms.min(by_watermark))
}

/// What one trimmer pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TrimOutcome {
    /// Records trimmed from the hot tier.
    pub trimmed: usize,
    /// Expired ephemeral records purged from the archive.
    pub purged: usize,
    /// Age (ms) of the oldest committed message not yet archived.
    pub archive_lag_ms: i64,
    /// The pass was cancelled before it finished: what it did is kept, the rest is left.
    pub stopped: bool,
}

/// Trims the hot tier behind the watermark and does the expiry chores.
#[derive(Debug)]
pub struct Trimmer {
    hot: Arc<dyn HotStore>,
    outbox: Option<Arc<dyn Outbox>>,
    archive: Option<Arc<dyn Archive>>,
    clock: SharedClock,
    cfg: ChatConfig,
    metrics: ChatMetrics,
    /// Where a full hot store is reported ([`Trimmer::with_store_health`]).
    health: StoreHealth,
    /// The node's shard leases ([`Trimmer::with_leases`]).
    leases: ShardLeases,
}

impl Trimmer {
    /// A trimmer; `outbox` and `archive` are `None` in `hot-only` mode.
    pub fn new(
        hot: Arc<dyn HotStore>,
        outbox: Option<Arc<dyn Outbox>>,
        archive: Option<Arc<dyn Archive>>,
        clock: SharedClock,
        cfg: ChatConfig,
        metrics: ChatMetrics,
    ) -> Self {
        let leases = ShardLeases::new(Arc::clone(&hot), cfg.shard_lease);
        Self {
            hot,
            outbox,
            archive,
            clock,
            cfg,
            metrics,
            health: StoreHealth::default(),
            leases,
        }
    }

    /// Works under `leases`, the node's (shared with its recovery worker); by default leases
    /// of its own held for `chat.shard_lease`.
    #[must_use]
    pub fn with_leases(mut self, leases: ShardLeases) -> Self {
        self.leases = leases;
        self
    }

    /// Reports its passes to `health`, the node's, under [`HOT_STORE`]: a pass that fails
    /// for want of space marks the hot store full, one that trimmed records clears it.
    #[must_use]
    pub fn with_store_health(mut self, health: StoreHealth) -> Self {
        self.health = health;
        self
    }

    /// One pass: measure archive lag, trim every eligible candidate (in batches), purge expired
    /// dedup entries and archived ephemerals, drop archived outbox records past retention.
    pub async fn run_once(&self) -> Result<TrimOutcome> {
        self.run_pass(&CancellationToken::new()).await
    }

    /// Like [`Trimmer::run_once`], but stops between two batches once `cancel` fires
    /// ([`TrimOutcome::stopped`]); every batch done stays done.
    pub async fn run_pass(&self, cancel: &CancellationToken) -> Result<TrimOutcome> {
        let now = self.clock.now_ms();
        let (archive_lag_ms, watermark) = match &self.outbox {
            Some(outbox) => {
                measure_archive(self.hot.as_ref(), outbox.as_ref(), &self.metrics, now).await?
            }
            // `hot-only`: what a tiered run archived may still leave, behind the watermark of
            // the partitions that run published (all of them, or nothing is trimmed).
            None => {
                let published = self.hot.watermarks().await?;
                let partitions = published.keys().max().map_or(1, |p| p + 1);
                (0, watermark(&published, partitions))
            }
        };
        let mut out = TrimOutcome {
            archive_lag_ms,
            ..TrimOutcome::default()
        };
        let batch = self.cfg.trim_batch.max(1);
        let window_ms = self.cfg.commit_params().hot_window_ms;
        // Read after `now`: a window recorded by another process after this read belongs to
        // candidates scored at its now, later than this pass's.
        let floor_ms = self.hot.hot_window_floor(window_ms, now).await?;
        if let Some(cutoff) = trim_cutoff(now, watermark, floor_ms, &self.cfg) {
            // The shards this node holds; a lease lost midway leaves the shard to its new
            // holder (the store refused the step: nothing was trimmed by it).
            for lease in self.leases.acquire().await? {
                let lease = &lease;
                let trimmed = in_batches(batch, cancel, || async move {
                    let n = self.hot.trim(lease, cutoff, batch).await?.len();
                    self.metrics.trimmed(lease.shard).inc_by(n as u64);
                    Ok(n)
                })
                .await;
                match trimmed {
                    Ok((n, stopped)) => {
                        out.trimmed += n;
                        out.stopped |= stopped;
                    }
                    Err(ChatError::LeaseLost { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        let (_, stopped) = in_batches(batch, cancel, || self.hot.purge_dedup(now, batch)).await?;
        out.stopped |= stopped;
        if let Some(archive) = &self.archive {
            let expired_by = now - EXPIRED_RECORD_GRACE.as_millis() as i64;
            let (n, stopped) =
                in_batches(batch, cancel, || archive.purge_expired(expired_by, batch)).await?;
            out.purged = n;
            out.stopped |= stopped;
        }
        if let Some(outbox) = &self.outbox {
            let older_than = now - self.cfg.outbox_retention.as_millis() as i64;
            for partition in 0..outbox.partitions() {
                let Some(position) = outbox.position(ARCHIVER_CONSUMER, partition).await? else {
                    continue;
                };
                let (_, stopped) = in_batches(batch, cancel, || {
                    outbox.truncate(partition, position, older_than, batch)
                })
                .await?;
                out.stopped |= stopped;
            }
        }
        Ok(out)
    }

    /// Runs a pass every `trim_interval` until `cancel`; after a failed pass, the workers'
    /// rule ([`tidemark_core::retry`]): a back-off from `trim_interval` up to 30 s if it is
    /// retryable, a minute otherwise.
    pub async fn run(self, cancel: CancellationToken) {
        let every = self.cfg.trim_interval;
        let mut retry = Retry::new("chat trimmer", every, Duration::from_secs(30));
        loop {
            let pause = match self.run_pass(&cancel).await {
                Ok(out) => {
                    retry.succeeded();
                    if out.trimmed > 0 {
                        self.health.wrote(HOT_STORE);
                    }
                    every
                }
                Err(error) => {
                    self.health.failed(HOT_STORE, &error);
                    retry.failed(&error, error.is_retryable())
                }
            };
            tokio::select! {
                _ = cancel.cancelled() => {
                    self.leases.release().await;
                    return;
                }
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }
}

/// Runs `chore` (one batch of at most `batch` rows, returning how many it did) until a batch
/// comes back short; before each batch, stops if `cancel` has fired. Returns the rows done and
/// whether it stopped with work perhaps left.
async fn in_batches<F, Fut>(
    batch: usize,
    cancel: &CancellationToken,
    mut chore: F,
) -> Result<(usize, bool)>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<usize>>,
{
    let mut done = 0;
    loop {
        if cancel.is_cancelled() {
            return Ok((done, true));
        }
        let n = chore().await?;
        done += n;
        if n < batch {
            return Ok((done, false));
        }
    }
}

/// Measures the archive's progress and sets the gauges to what it read: per outbox partition
/// the age of its oldest committed message not yet archived
/// (`tidemark_chat_archive_lag_seconds{partition}`, 0 if caught up), the records not yet
/// archived over all partitions (`tidemark_chat_outbox_backlog`) and the watermark T
/// (`tidemark_chat_archive_watermark_ms`, see [`crate::archiver::watermark`]). Returns the
/// greatest lag (ms) and T. Each trimmer pass measures it, and so does each `/metrics` scrape
/// ([`crate::ChatService::refresh_archive_gauges`]), so that the gauges are as of the scrape,
/// not of the last pass (which may have seen backlog 0 and lag 0 while records wait now).
///
/// # Errors
/// The outbox's or the hot store's.
pub async fn measure_archive(
    hot: &dyn HotStore,
    outbox: &dyn Outbox,
    metrics: &ChatMetrics,
    now_ms: i64,
) -> Result<(i64, Option<i64>)> {
    let (mut backlog, mut max_lag_ms) = (0, 0);
    for partition in 0..outbox.partitions() {
        let (low, high) = outbox.offsets(partition).await?;
        let position = outbox
            .position(ARCHIVER_CONSUMER, partition)
            .await?
            .unwrap_or(low)
            .max(low);
        backlog += high.saturating_sub(position);
        let lag_ms = match outbox.fetch(partition, position, 1).await?.first() {
            Some((_, oldest)) => (now_ms - oldest.committed_at_ms).max(0),
            None => 0,
        };
        metrics.archive_lag(partition).set(lag_ms / 1000);
        max_lag_ms = max_lag_ms.max(lag_ms);
    }
    metrics.outbox_backlog.set(backlog as i64);
    let watermark = watermark(&hot.watermarks().await?, outbox.partitions());
    if let Some(t) = watermark {
        metrics.watermark_ms.set(t);
    }
    Ok((max_lag_ms, watermark))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn batches_stop_between_two_once_cancelled() {
        let cancel = CancellationToken::new();
        let calls = AtomicUsize::new(0);
        // Cancelled during the second of many full batches: that one finishes, no third.
        let done = in_batches(2, &cancel, || {
            if calls.fetch_add(1, Ordering::SeqCst) == 1 {
                cancel.cancel();
            }
            async { Ok(2) }
        })
        .await
        .unwrap();
        assert_eq!(done, (4, true));
        assert_eq!(calls.load(Ordering::SeqCst), 2);

        // A short batch ends the chore: nothing was left, whatever the token says after it.
        let cancel = CancellationToken::new();
        let done = in_batches(2, &cancel, || {
            cancel.cancel();
            async { Ok(1) }
        })
        .await
        .unwrap();
        assert_eq!(done, (1, false));

        // Not cancelled: full batches until a short one.
        let left = AtomicUsize::new(7);
        let done = in_batches(2, &CancellationToken::new(), || {
            let n = left.load(Ordering::SeqCst).min(2);
            left.fetch_sub(n, Ordering::SeqCst);
            async move { Ok(n) }
        })
        .await
        .unwrap();
        assert_eq!(done, (7, false));
    }

    #[test]
    fn a_first_floor_is_bounded_by_the_candidates_already_held() {
        assert_eq!(first_recorded_window(60_000, None, 1_000_000), 60_000);
        // Oldest score 1,020,000 at now 1,000,000: its window is at least 20 s.
        assert_eq!(
            first_recorded_window(60_000, Some(1_020_000), 1_000_000),
            20_000
        );
        assert_eq!(
            first_recorded_window(10_000, Some(1_020_000), 1_000_000),
            10_000
        );
        assert_eq!(
            first_recorded_window(60_000, Some(990_000), 1_000_000),
            0,
            "an overdue candidate bounds nothing above 0"
        );
    }

    #[test]
    fn cutoff_needs_a_watermark_and_keeps_the_margins() {
        let cfg = ChatConfig {
            hot_window: Duration::from_secs(100),
            outbox_recovery_window: Duration::from_secs(10),
            safety_margin: Duration::from_secs(5),
            ..ChatConfig::default()
        };
        let window = cfg.hot_window.as_millis() as i64;
        assert_eq!(trim_cutoff(1_000_000, None, window, &cfg), None);
        // T − 1 ms + 100 s − 10 s − 5 s = T + 85 s − 1 ms.
        assert_eq!(
            trim_cutoff(1_000_000, Some(500_000), window, &cfg),
            Some(584_999)
        );
        assert_eq!(
            trim_cutoff(550_000, Some(500_000), window, &cfg),
            Some(550_000)
        );
        // Candidates were once scored with a 20 s window: T − 1 ms + 20 s − 15 s.
        assert_eq!(
            trim_cutoff(1_000_000, Some(500_000), 20_000, &cfg),
            Some(504_999)
        );
    }
}
