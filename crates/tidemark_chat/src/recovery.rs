//! The recovery worker (DESIGN.md part A "Commit path"): records left RESERVED longer than
//! `outbox_recovery_window` (a crash between reserve and outbox append) are appended to the
//! outbox and marked committed with the same code as the commit path
//! ([`crate::commit::publish_and_commit`]). Outbox duplicates this may cause are harmless.
//! With the fused embedded store no record is ever left RESERVED, so it finds nothing. It works
//! only the hot store shards its node holds a lease on ([`crate::leases`]), and the store
//! checks the lease as it reads them.
//!
//! [`backfill_untracked`] is the one-time counterpart for history committed in `hot-only`
//! mode (no outbox, no trim candidate): before an archiving mode starts, such records are
//! appended to the outbox and only then registered for trimming (seed 000: history that is not
//! in the outbox is backfilled before it may be trimmed).

use std::sync::Arc;
use std::time::Duration;

use tidemark_core::clock::SharedClock;
use tidemark_core::health::StoreHealth;
use tidemark_core::retry::Retry;
use tokio_util::sync::CancellationToken;

use crate::commit::publish_and_commit;
use crate::config::DEFAULT_SHARD_LEASE;
use crate::error::{ChatError, Result};
use crate::health::HOT_STORE;
use crate::leases::ShardLeases;
use crate::metrics::ChatMetrics;
use crate::model::MessageRecord;
use crate::ports::{CommitParams, HotStore, Outbox};

/// Re-publishes stale RESERVED records.
#[derive(Debug)]
pub struct Recovery {
    hot: Arc<dyn HotStore>,
    outbox: Arc<dyn Outbox>,
    clock: SharedClock,
    params: CommitParams,
    window: Duration,
    metrics: ChatMetrics,
    /// Where a full hot store or outbox is reported ([`Recovery::with_store_health`]).
    health: StoreHealth,
    /// The node's shard leases ([`Recovery::with_leases`]).
    leases: ShardLeases,
}

impl Recovery {
    /// A recovery worker for records RESERVED longer than `window`.
    pub fn new(
        hot: Arc<dyn HotStore>,
        outbox: Arc<dyn Outbox>,
        clock: SharedClock,
        params: CommitParams,
        window: Duration,
        metrics: ChatMetrics,
    ) -> Self {
        let leases = ShardLeases::new(Arc::clone(&hot), DEFAULT_SHARD_LEASE);
        Self {
            hot,
            outbox,
            clock,
            params,
            window,
            metrics,
            health: StoreHealth::default(),
            leases,
        }
    }

    /// Works under `leases`, the node's (shared with its trimmer); by default leases of its
    /// own held for [`DEFAULT_SHARD_LEASE`].
    #[must_use]
    pub fn with_leases(mut self, leases: ShardLeases) -> Self {
        self.leases = leases;
        self
    }

    /// Reports its passes to `health`, the node's, under [`HOT_STORE`]: a pass that fails
    /// for want of space marks the hot store full, one that recovered records clears it.
    #[must_use]
    pub fn with_store_health(mut self, health: StoreHealth) -> Self {
        self.health = health;
        self
    }

    /// One pass over the shards its node holds; returns how many records were recovered. A
    /// shard whose lease is lost midway is left to its new holder.
    pub async fn run_once(&self) -> Result<usize> {
        let mut total = 0;
        for lease in self.leases.acquire().await? {
            loop {
                let before = self.clock.now_ms() - self.window.as_millis() as i64;
                let stale = match self.hot.stale_reserved(&lease, before, 500).await {
                    Ok(stale) => stale,
                    Err(ChatError::LeaseLost { .. }) => break,
                    Err(e) => return Err(e),
                };
                if stale.is_empty() {
                    break;
                }
                publish_and_commit(
                    self.hot.as_ref(),
                    self.outbox.as_ref(),
                    &stale,
                    &self.clock,
                    self.params,
                )
                .await?;
                total += stale.len();
                self.metrics.recovered.inc_by(stale.len() as u64);
                tracing::info!(
                    count = stale.len(),
                    shard = lease.shard,
                    "recovered RESERVED records"
                );
            }
        }
        Ok(total)
    }

    /// Runs a pass every quarter of the recovery window (at least every second) until
    /// `cancel`; after a failed pass, the workers' rule ([`tidemark_core::retry`]): a back-off
    /// from that period up to 30 s if it is retryable, a minute otherwise.
    pub async fn run(self, cancel: CancellationToken) {
        let every = (self.window / 4).clamp(Duration::from_millis(100), Duration::from_secs(1));
        let mut retry = Retry::new("chat recovery", every, Duration::from_secs(30));
        loop {
            let pause = match self.run_once().await {
                Ok(recovered) => {
                    retry.succeeded();
                    if recovered > 0 {
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

/// Appends committed records that have no trim candidate to the outbox, then registers them
/// as candidates (score `now + hot_window`), 1,000 at a time. A crash in between only leaves
/// outbox duplicates. Returns how many records were backfilled.
pub async fn backfill_untracked(
    hot: &dyn HotStore,
    outbox: &dyn Outbox,
    clock: &SharedClock,
    params: CommitParams,
) -> Result<usize> {
    let mut total = 0;
    loop {
        let records = hot.untracked_committed(1000).await?;
        if records.is_empty() {
            return Ok(total);
        }
        outbox.append(&records).await?;
        let keys: Vec<_> = records.iter().map(MessageRecord::key).collect();
        hot.register_trim_candidates(&keys, clock.now_ms(), params)
            .await?;
        total += records.len();
    }
}
